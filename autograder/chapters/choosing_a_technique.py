"""Chapter 9's exercises: fine_tuning_advice (the rule for when to fine-tune), pack_int4 (two 4-bit
codes to a byte) and capstone_configuration (a configuration within the budget, measured here by
the course's own code: the learner's function only names the configuration); and the class
leaderboard of the capstone that grading a class writes beside the gradebook."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import torch

from autograder.checks import Check, Exercise, Requirement, Verdict, diagnose, judge_raises, judges_value
from course import choosing_a_technique as technique

# --- fine_tuning_advice -------------------------------------------------------------------------------

ALL_CASES = [list(case) for case in itertools.product(technique.NEEDS, (False, True), (False, True))]
# the notes' three cases without fine-tuning, and the rule's case for it
NOTES_CASES = [["knowledge", False, True], ["format", True, True], ["tone", False, False], ["format", False, True]]


def advice_for_each(fine_tuning_advice, cases):
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's advice for
    each (need, changes_often, tried_prompting), strings kept, anything else as its repr."""
    answers = []
    for need, changes_often, tried_prompting in cases:
        advice = fine_tuning_advice(need, changes_often, tried_prompting)
        answers.append(advice if isinstance(advice, str) else repr(advice)[:40])
    return answers


def _cases_probe(fixed=None):
    def make(rng):
        cases = fixed or [ALL_CASES[i] for i in rng.permutation(len(ALL_CASES))]
        return {"call": "fine_tuning_advice", "scenario": advice_for_each, "args": [cases]}

    return make


def _variant(knowledge=None, instructions="prompting", changes=True, prompting_first=True, knowledge_moving=None):
    """A rule like the course's with one part changed: what plausible wrong answers compute."""

    def rule(need, changes_often, tried_prompting):
        if need == "knowledge":
            if changes_often and knowledge_moving:
                return knowledge_moving
            if knowledge:
                return knowledge if changes_often is False and tried_prompting else "prompting"
            return "retrieval"
        if need == "instructions":
            return instructions
        if (changes and changes_often) or (prompting_first and not tried_prompting):
            return "prompting"
        return "fine-tuning"

    return rule


ADVICE_MISTAKES = [
    (
        "need 'knowledge' is retrieval's job whatever else holds: documents go into the prompt through retrieval, "
        "not into the weights",
        _variant(knowledge="fine-tuning"),
    ),
    (
        "knowledge that changes often is still retrieval's job: retrieval reads the current documents",
        _variant(knowledge_moving="prompting"),
    ),
    ("instructions belong in the prompt: need 'instructions' is 'prompting'", _variant(instructions="fine-tuning")),
    (
        "when what the model must learn changes often, every change would mean training again: that is "
        "'prompting', not 'fine-tuning'",
        _variant(changes=False),
    ),
    (
        "prompting comes first: until it has seriously been tried (tried_prompting False), the advice is 'prompting'",
        _variant(prompting_first=False),
    ),
]


@judges_value
def _judge_advice(probe, got):
    cases = probe["args"][0]
    if not isinstance(got, list) or len(got) != len(cases):
        return Verdict(False, f"expected one answer per case, got {got!r}"[:200])
    labels = [technique.advice_label(value) for value in got]
    for case, value, label in zip(cases, got, labels, strict=True):
        if label is None:
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}; return one of "
                + ", ".join(repr(a) for a in technique.ADVICE),
            )
        if value != label:  # the right idea, spelled otherwise: the prompt asks for the exact strings
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}, which means {label!r}: return exactly "
                + ", ".join(repr(a) for a in technique.ADVICE),
            )
    expected = [technique.fine_tuning_advice(*case) for case in cases]
    wrong = [i for i, (a, b) in enumerate(zip(labels, expected, strict=True)) if a != b]
    if not wrong:
        return Verdict(True)
    for hint, rule in ADVICE_MISTAKES:
        if labels == [rule(*case) for case in cases]:
            return Verdict(False, hint)
    first = wrong[0]
    return Verdict(
        False,
        f"{len(wrong)} of {len(cases)} cases differ; for example fine_tuning_advice{tuple(cases[first])} gave "
        f"{labels[first]!r}, expected {expected[first]!r}",
    )


def _judge_unknown_need(probe, result):
    return judge_raises(result, "ValueError", "say which needs are known, as the chapter's other functions do")


ADVICE = Exercise(
    "fine_tuning_advice",
    ("fine_tuning_advice",),
    [
        Check(
            "notes",
            1,
            "the notes' three cases and the rule's case for fine-tuning",
            _cases_probe(NOTES_CASES),
            _judge_advice,
            visible=True,
        ),
        Check("all", 2, "every need, changing or not, prompting tried or not", _cases_probe(), _judge_advice),
        Check(
            "unknown",
            1,
            "an unknown need raises ValueError",
            lambda rng: {"call": "fine_tuning_advice", "args": ["vibes", False, True]},
            _judge_unknown_need,
        ),
    ],
    requirements=[
        Requirement("need 'knowledge': 'retrieval', whatever else holds", ("notes", "all")),
        Requirement("need 'instructions': 'prompting'", ("all",)),
        Requirement(
            "format, tone, narrow_task: 'prompting' when what the model must learn changes often", ("notes", "all")
        ),
        Requirement(
            "format, tone, narrow_task: 'prompting' until prompting has seriously been tried", ("notes", "all")
        ),
        Requirement(
            "format, tone, narrow_task: 'fine-tuning' when it does not change often and prompting was tried",
            ("notes", "all"),
        ),
        Requirement("returns one of 'retrieval', 'prompting', 'fine-tuning'", ("notes", "all")),
        Requirement("ValueError for a need not on the list (error)", ("unknown",)),
    ],
)


# --- pack_int4 ----------------------------------------------------------------------------------------------

EXAMPLE_CODES = torch.tensor([[-7, 7, 0, -8], [1, -1, 5, 2]], dtype=torch.int32)


def _codes_probe(rows=None, cols=None, fixed=None):
    def make(rng):
        if fixed is not None:
            return {"call": "pack_int4", "args": [fixed]}
        return {"call": "pack_int4", "args": [torch.from_numpy(rng.integers(-8, 8, size=(rows, cols)).astype("int64"))]}

    return make


def _pack_mistakes(codes: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    c = codes.to(torch.int64)
    high, low = c[:, 0::2], c[:, 1::2]
    return [
        (
            "the pair's order is swapped: the first code of each pair goes into the high nibble, (first + 8) << 4",
            ((low + 8) << 4) | (high + 8),
        ),
        (
            "negative codes were stored as two's complement (code & 15): store code + 8, so -8..7 become 0..15",
            ((high & 15) << 4) | (low & 15),
        ),
        ("the offset is 8, not 7: -8 must become 0 and 7 must become 15", ((high + 7) << 4) | (low + 7)),
        ("the two codes were added, not packed: shift the first left by 4 bits", (high + 8) + (low + 8)),
    ]


@judges_value
def _judge_pack(probe, got):
    codes = probe["args"][0]
    if not isinstance(got, torch.Tensor):
        return Verdict(False, f"returned {type(got).__name__}; pack_int4 should return a torch.Tensor of dtype uint8")
    expected = technique.pack_int4(codes)
    if tuple(got.shape) != tuple(expected.shape):
        return Verdict(
            False,
            f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}: pack neighbouring columns of each row, "
            "two codes to a byte",
        )
    if got.dtype != torch.uint8:
        return Verdict(False, f"dtype {got.dtype}: a packed byte is torch.uint8 (values 0 to 255), one byte per pair")
    mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in _pack_mistakes(codes)]
    return diagnose(got, expected, mistakes, rtol=0, atol=0)


def _judge_odd(probe, result):
    return judge_raises(result, "ValueError", "an odd number of columns cannot be packed two to a byte; say so")


PACK = Exercise(
    "pack_int4",
    ("pack_int4",),
    [
        Check("example", 1, "the chapter's 2 x 4 codes", _codes_probe(fixed=EXAMPLE_CODES), _judge_pack, visible=True),
        Check("random", 2, "random codes, 16 x 64", _codes_probe(16, 64), _judge_pack),
        Check(
            "odd",
            1,
            "an odd number of columns raises ValueError",
            _codes_probe(fixed=torch.zeros(2, 3, dtype=torch.int32)),
            _judge_odd,
        ),
    ],
    requirements=[
        Requirement(
            "byte = (c0 + 8) * 16 + (c1 + 8): each code shifted by 8, the first of each pair in the high four bits",
            ("example", "random"),
        ),
        Requirement("codes from -8 to 7, both ends included (edge case)", ("example", "random")),
        Requirement("shape (rows, cols // 2)", ("example", "random")),
        Requirement("returns torch.uint8", ("example", "random")),
        Requirement("any integer tensor of codes (int32, int64)", ("example", "random")),
        Requirement("ValueError for an odd number of columns (error)", ("odd",)),
    ],
)


# --- capstone_configuration -------------------------------------------------------------------------

PART_HINTS = {
    "weights_share": "the weights (target and draft) must take at most a quarter of the fp32 target's bytes: "
    "look at the bytes of each format in the table above",
    "loss_gap": "the held-out loss must stay within 0.02 nats/byte of fp32's: fewer bits cost quality",
    "tokens_per_call": "the target calls must yield at least 2 tokens on average (new tokens over target calls): "
    "that takes a draft, and more than one drafted token per call",
}


def _capstone(part: str):
    @judges_value
    def judge(probe, got) -> Verdict:
        try:
            config = technique.Configuration.from_dict(got)
        except (TypeError, ValueError) as error:
            return Verdict(False, f"not a configuration the capstone can serve: {error}")
        figures = technique.measure(config)
        data = {"configuration": config.label(), **config.as_dict(), **figures.as_dict()}
        if figures.within()[part]:
            return Verdict(True, data=data)
        return Verdict(False, f"{config.label()}: {figures.summary()}; {PART_HINTS[part]}", data=data)

    return judge


def _configuration_probe(rng):
    return {"call": "capstone_configuration"}


CAPSTONE = Exercise(
    "capstone_configuration",
    ("capstone_configuration",),
    [
        Check(part, 2, what, _configuration_probe, _capstone(part), visible=True)
        for part, what in (
            ("weights_share", "weights at most a quarter of fp32's bytes"),
            ("loss_gap", "held-out loss within 0.02 nats/byte of fp32"),
            ("tokens_per_call", "at least 2 tokens per target call on average"),
        )
    ],
    requirements=[
        Requirement(
            "a dict with the keys weights, group_size, draft and draft_length, naming a configuration the "
            "capstone serves",
            ("weights_share", "loss_gap", "tokens_per_call"),
        ),
        Requirement(
            "the weights, target and draft as stored, at most a quarter of the fp32 target's bytes", ("weights_share",)
        ),
        Requirement("the held-out loss within 0.02 nats/byte of the fp32 target's", ("loss_gap",)),
        Requirement(
            "at least 2 tokens per target call on average (new tokens over target calls) in greedy decoding",
            ("tokens_per_call",),
        ),
    ],
)

EXERCISES = [ADVICE, PACK, CAPSTONE]


# --- the class leaderboard of the capstone -------------------------------------------------------------
# Each submission's configuration and its graded figures (bytes of weights, held-out loss, tokens per
# target call), ranked: configurations within the budget first; then the most tokens per target call
# (the speed figure that does not depend on the machine), the fewest bytes, the lowest loss. The
# wall-clock speed-up is not on it: each learner measured it on a different machine.
# Not handled: several submissions of one learner (each is a row of its own).

LEADERBOARD_COLUMNS = (
    "rank",
    "learner",
    "configuration",
    "within_budget",
    "weight_bytes",
    "weights_share",
    "loss",
    "loss_gap",
    "tokens_per_call",
)


def leaderboard_entries(graded) -> list[dict]:
    """The ranked rows for ``graded``, pairs of (learner, report); submissions without capstone
    figures (other chapters, an unanswered or invalid configuration) have none."""
    rows = []
    for learner, report in graded:
        data = next((t.data for t in report.tests if t.data and "tokens_per_call" in t.data), None)
        if data is not None:
            rows.append({"learner": learner, **{key: data[key] for key in LEADERBOARD_COLUMNS[2:]}})
    rows.sort(key=lambda r: (not r["within_budget"], -r["tokens_per_call"], r["weight_bytes"], r["loss"]))
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]


def leaderboard_markdown(rows: list[dict]) -> str:
    """The leaderboard as a Markdown table, figures rounded for reading."""
    lines = [
        "# Capstone leaderboard",
        "",
        "Within the budget first, then most tokens per target call, fewest bytes, lowest loss.",
        "",
        "| rank | learner | configuration | within budget | weights (MB) | share of fp32 | held-out loss "
        "| vs fp32 | tokens per call |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['rank']} | {r['learner']} | {r['configuration']} | {'yes' if r['within_budget'] else 'no'} "
            f"| {r['weight_bytes'] / 1e6:.2f} | {100 * r['weights_share']:.1f}% | {r['loss']:.4f} "
            f"| {r['loss_gap']:+.4f} | {r['tokens_per_call']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write_class_files(out: Path, graded) -> Path | None:
    """The class leaderboard, written beside the gradebook (``grade.write_class_files`` calls this
    for the chapter's submissions): ``leaderboard.csv`` and ``leaderboard.md`` in ``out`` when any
    submission has capstone figures; return the CSV's path (None when there was nothing to rank)."""
    rows = leaderboard_entries(graded)
    if not rows:
        return None
    path = Path(out) / "leaderboard.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LEADERBOARD_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (Path(out) / "leaderboard.md").write_text(leaderboard_markdown(rows))
    return path
