"""Chapter 7's exercises. distillation_loss, judged against the course's loss and the mistakes it
can name (no T^2, the KL reversed, no temperature, the cross-entropy, a sum over positions, and
torch.nn.functional.kl_div's reductions, which average over the wrong things on (B, T, vocab)).
prune_smallest, judged against the course's magnitude pruning, which counts like
torch.nn.utils.prune (round(share * numel)), and its usual mistakes (the largest weights pruned,
signed values ranked instead of magnitudes, each row ranked on its own, the count truncated or
its halves rounded up, one weight too many or too few, a flattened result, the input changed in
place)."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    diagnose,
    judge_number,
    judge_raises,
    judges_value,
    number,
)
from course import distillation
from course.withheld import withheld


def _logits_probe(temperature, positions=(4, 7), vocab=10, scale=3.0, dtype=np.float32):
    def make(rng):
        shape = (*positions, vocab)
        student = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        teacher = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        return {"call": "distillation_loss", "args": [student, teacher, temperature]}

    return make


DISTILL_MISTAKES = [
    "the T^2 factor is missing: multiply by temperature**2 so gradients keep their size",
    "divided by T^2 instead of multiplying: multiply by temperature**2",
    "the KL is reversed: KL(teacher || student) sums p_teacher * (log p_teacher - log p_student)",
    "the temperature was not applied to the logits",
    "the temperature was applied to the student's logits only: soften both",
    "the temperature was applied to the teacher's logits only: soften both",
    "returned the cross-entropy: subtract the teacher's entropy (KL = CE - H)",
    "summed over positions: average them",
    'F.kl_div(..., reduction="batchmean") divides by the first dimension only (the batch), not by every '
    "position: reshape the logits to (-1, vocab) first, or sum over the vocabulary and take the mean",
    'F.kl_div(..., reduction="mean") averages over the vocabulary too: sum over the vocabulary, then '
    'average over positions (reduction="batchmean" on (-1, vocab) logits)',
    "averaged over the first two dimensions only, as for (B, T, vocab) logits (or summed over the last leading "
    "one): every leading position counts once, so average over all of them (reshape to (-1, vocab) first)",
]


@withheld
def _distill_values(student, teacher, t) -> tuple[float, list[float]]:
    """The distillation loss of these logits at temperature ``t``, and what each of
    :data:`DISTILL_MISTAKES` gives, in order."""
    s = torch.log_softmax(student.double() / t, -1)
    te = torch.log_softmax(teacher.double() / t, -1)
    kl = distillation.kl_divergence(te, s)
    expected = distillation.distillation_loss(student.double(), teacher.double(), t).item()
    wrong = [
        kl.mean().item(),
        kl.mean().item() / t**2,
        (distillation.kl_divergence(s, te).mean() * t * t).item(),
        distillation.distillation_loss(student.double(), teacher.double(), 1.0).item() * t * t,
        _kl(student.double() / t, teacher.double()) * t * t,
        _kl(student.double(), teacher.double() / t) * t * t,
        (-(te.exp() * s).sum(-1).mean() * t * t).item(),
        (kl.sum() * t * t).item(),
        (kl.sum() / student.shape[0] * t * t).item(),
        (kl.mean() / student.shape[-1] * t * t).item(),
        (kl.sum() / (student.shape[0] * student.shape[1]) * t * t).item(),
    ]
    return expected, wrong


@judges_value
def _judge_distill(probe, got):
    expected, wrong = _distill_values(*probe["args"])
    value, _ = number(got, "the loss")
    if value is not None and value != value:
        return Verdict(
            False,
            "the loss is NaN: a log of a probability that is zero or negative. If you use F.kl_div, its target "
            "must be probabilities (softmax), or pass log_target=True with log-probabilities",
        )
    mistakes = _telling(list(zip(DISTILL_MISTAKES, wrong, strict=True)), rel=1e-4, abs_tol=1e-6)
    return judge_number(got, expected, mistakes, "the distillation loss", rel=1e-4, abs_tol=1e-6)


def _telling(mistakes: list[tuple[str, float]], rel: float, abs_tol: float) -> list[tuple[str, float]]:
    """The mistakes whose value on these inputs no mistake of another hint shares: where two give the
    same number, the number cannot say which was made, and the hint says only what it saw."""
    return [
        (hint, value)
        for hint, value in mistakes
        if not any(
            other != hint and math.isclose(value, same, rel_tol=rel, abs_tol=abs_tol) for other, same in mistakes
        )
    ]


def _kl(student_logits, teacher_logits) -> float:
    """KL(teacher || student) of the given logits, mean over positions."""
    s, te = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    return distillation.kl_divergence(te, s).mean().item()


# --- prune_smallest ------------------------------------------------------------------------------------


def pruned_copy(function, weight, share, whole_share=None) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function(weight, share)``,
    whether the call changed ``weight`` itself, and, given ``whole_share`` (a share of ``weight``
    that is a whole number of weights), how many weights a call at that share zeroes
    (``whole_zeros``): a count that is off by one there too is not a rounding of the share's
    fraction."""
    before = weight.clone()
    pruned = function(weight, share)
    found = {"pruned": pruned, "input_changed": not bool((weight == before).all())}
    if whole_share is not None:
        again = function(before.clone(), whole_share)
        found["whole_zeros"] = int((again == 0).sum()) if hasattr(again, "shape") else None
    return found


def _zero_where(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return weight.masked_fill(mask, 0.0)


@withheld
def _prune_mistakes(weight: torch.Tensor, share: float) -> list:
    """(kind, hint, the pruned matrix that mistake gives) for the usual wrong answers, the more
    specific first (a truncated count is also one weight too few)."""
    exact = share * weight.numel()
    count = distillation.pruned_count(share, weight.numel())
    flat = weight.abs().flatten()
    order = flat.sort(stable=True).indices

    def ranked(values: torch.Tensor, n: int) -> torch.Tensor:
        mask = torch.zeros(weight.numel(), dtype=torch.bool)
        mask[values.flatten().sort(stable=True).indices[:n]] = True
        return _zero_where(weight, mask.reshape(weight.shape))

    def per_row(keep: int) -> torch.Tensor:
        rows = weight.abs().sort(dim=-1, stable=True).indices[:, :keep]
        return _zero_where(weight, torch.zeros_like(weight, dtype=torch.bool).scatter(1, rows, True))

    largest = torch.zeros(weight.numel(), dtype=torch.bool)
    largest[order[weight.numel() - count :]] = True
    row_by_row = (
        "pruned the same share of each row: the exercise ranks the whole matrix at once, so rows of small "
        "weights lose more of theirs"
    )
    return [
        (
            "largest",
            "pruned the largest weights: zero the ones of smallest magnitude |w|",
            _zero_where(weight, largest.reshape(weight.shape)),
        ),
        (
            "signed",
            "ranked the signed values (the most negative first): rank by magnitude, weight.abs()",
            ranked(weight, count),
        ),
        ("rows", row_by_row, per_row(distillation.pruned_count(share, weight.shape[-1]))),
        ("rows", row_by_row, per_row(int(share * weight.shape[-1]))),
        (
            "truncated",
            f"truncates instead of rounding: int({exact:g}) = {int(exact)} weights, but the count is "
            f"round(share * numel) = {count}, as torch.nn.utils.prune.l1_unstructured counts",
            ranked(flat, int(exact)),
        ),
        (
            "half_up",
            f"rounded {exact:g} half up to {int(exact + 0.5)}: torch.nn.utils.prune counts round(share * numel), "
            f"and Python's round takes halves to the even number (round({exact:g}) = {count})",
            ranked(flat, int(exact + 0.5)),
        ),
        ("one_more", "zeroed one weight too many: exactly round(share * numel) weights", ranked(flat, count + 1)),
        (
            "one_less",
            "zeroed one weight too few: exactly round(share * numel) weights",
            ranked(flat, max(count - 1, 0)),
        ),
    ]


# Where a rounding of the count and an off-by-one give the same matrix (18.75 truncated to 18 is
# also 19 - 1), the call at a whole share tells them apart: a rounding mistake counts a whole number
# right, an off-by-one misses it there too.
TWINS = {"truncated": ("one_less", -1), "half_up": ("one_more", +1)}


def _told_apart(mistakes: list, weight: torch.Tensor, share: float, whole_share, whole_zeros) -> list:
    """``mistakes`` (kind, hint, matrix) less those this input cannot tell apart from their twin
    (:data:`TWINS`): the one the call at ``whole_share`` rules out, or, without that call, both
    twins' hints replaced by what was seen."""
    matrices = {kind: matrix for kind, _, matrix in mistakes}
    count = distillation.pruned_count(share, weight.numel())
    kept = list(mistakes)
    for rounding, (off_by_one, step) in TWINS.items():
        if not torch.equal(matrices[rounding], matrices[off_by_one]):
            continue
        if whole_share is not None and whole_zeros is not None:
            whole = distillation.pruned_count(whole_share, weight.numel())
            ruled_out = rounding if whole_zeros == whole + step else off_by_one
            kept = [m for m in kept if m[0] != ruled_out]
            continue
        seen = (
            f"zeroed {count + step} weights, one too {'few' if step < 0 else 'many'}: the count is round(share * "
            f"numel) = round({share * weight.numel():g}) = {count}, as torch.nn.utils.prune.l1_unstructured counts"
        )
        kept = [(kind, seen, m) if kind in (rounding, off_by_one) else (kind, hint, m) for kind, hint, m in kept]
    return kept


def _wrong_shape(got: torch.Tensor, weight: torch.Tensor) -> Verdict | None:
    """A failing verdict when the result does not have the shape of the matrix passed in."""
    if tuple(got.shape) == tuple(weight.shape):
        return None
    return Verdict(
        False,
        f"the output has the wrong shape: {tuple(got.shape)} for a {tuple(weight.shape)} matrix; return the "
        "pruned matrix in the shape of weight (a flattened copy goes back with .reshape(weight.shape))",
    )


def _prune_probe(share, shape=(8, 12), rows_apart=False, fixed=None, whole_share=None):
    def make(rng):
        if fixed is not None:
            weight = fixed.clone()
        else:
            weight = torch.from_numpy(rng.normal(size=shape).astype(np.float32))
            if rows_apart:  # rows of very different sizes: ranking each row on its own shows
                weight = weight * torch.logspace(-2, 1, shape[0])[:, None]
        probe = {"call": "prune_smallest", "args": [weight, share], "scenario": pruned_copy}
        if whole_share is not None:
            probe["kwargs"] = {"whole_share": whole_share}
        return probe

    return make


EXAMPLE_WEIGHT = torch.tensor([[0.5, -2.0, 0.1, 3.0], [-0.3, 1.0, -4.0, 0.2]])


def _pruned_tensor(got) -> tuple[torch.Tensor | None, Verdict | None]:
    """The pruned matrix a :func:`pruned_copy` scenario reported, or why there is none."""
    if not isinstance(got, dict) or "pruned" not in got:
        return None, Verdict(False, f"prune_smallest could not be tested: {got!r}"[:200])
    pruned = got["pruned"]
    if not isinstance(pruned, torch.Tensor):
        return None, Verdict(False, f"returned {type(pruned).__name__}; prune_smallest should return a torch.Tensor")
    return pruned, None


@judges_value
def _judge_prune(probe, got):
    """The pruned matrix's values (whether the input was changed is the copy check's)."""
    weight, share = probe["args"]
    pruned, failed = _pruned_tensor(got)
    if failed:
        return failed
    wrong_shape = _wrong_shape(pruned, weight)
    if wrong_shape:
        return wrong_shape
    whole_share = probe.get("kwargs", {}).get("whole_share")
    mistakes = _told_apart(_prune_mistakes(weight.double(), share), weight, share, whole_share, got.get("whole_zeros"))
    return diagnose(
        pruned.double(),
        distillation.prune_smallest(weight.double(), share),
        [(hint, lambda wrong=wrong: wrong.double()) for _, hint, wrong in mistakes],
        what="the pruned matrix",
        rtol=0,
        atol=1e-7,
    )


@judges_value
def _judge_unchanged(probe, got):
    """The matrix passed in is left as it was."""
    _, failed = _pruned_tensor(got)
    if failed:
        return failed
    if got.get("input_changed"):
        return Verdict(
            False,
            "the matrix passed in was changed: work on a copy (weight.clone()) and zero the weights there, "
            "as the chapter prunes copies of the target at several shares",
        )
    return Verdict(True)


def edge_shares(function, weight) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function`` at shares 0 and 1,
    each call on its own copy of ``weight`` (a call that prunes in place must not spoil the other)."""
    return {"none": function(weight.clone(), 0.0), "all": function(weight.clone(), 1.0)}


@judges_value
def _judge_edges(probe, got):
    (weight,) = probe["args"]
    if not isinstance(got, dict) or not all(isinstance(got.get(k), torch.Tensor) for k in ("none", "all")):
        return Verdict(False, f"prune_smallest at shares 0 and 1 did not return tensors: {got!r}"[:200])
    for key in ("none", "all"):
        wrong_shape = _wrong_shape(got[key], weight)
        if wrong_shape:
            return wrong_shape
    if not torch.equal(got["none"].double(), weight.double()):
        zeroed = int((got["none"] == 0).sum())
        return Verdict(
            False,
            f"share 0 zeroed {zeroed} weight(s): round(0 * numel) is 0, so nothing is pruned "
            "(kthvalue needs k >= 1: count first, and prune only when the count is positive)",
        )
    if int((got["all"] != 0).sum()):
        return Verdict(False, f"share 1 left {int((got['all'] != 0).sum())} weight(s) standing: every weight goes")
    return Verdict(True)


def _judge_bad_share(probe, result):
    return judge_raises(result, "ValueError", "a share outside [0, 1] means nothing: say what is allowed")


PRUNE = Exercise(
    "prune_smallest",
    ("prune_smallest",),
    [
        Check(
            "example",
            1,
            "the prompt's 2 x 4 example, share 0.5",
            _prune_probe(0.5, fixed=EXAMPLE_WEIGHT),
            _judge_prune,
            visible=True,
        ),
        Check(
            "whole_matrix",
            1,
            "rows of very different sizes, share 0.4: ranked over the whole matrix",
            _prune_probe(0.4, rows_apart=True),
            _judge_prune,
            visible=True,
        ),
        Check(
            "rounding",
            1,
            "a 5 x 5 matrix, share 0.75: round(18.75) = 19 weights zeroed, as torch.nn.utils.prune counts",
            _prune_probe(0.75, shape=(5, 5), whole_share=0.76),  # 0.76 x 25 = 19 exactly
            _judge_prune,
            visible=True,
        ),
        Check(
            "copy",
            1,
            "an 8 x 12 matrix, share 0.25: the matrix passed in is left unchanged",
            _prune_probe(0.25),
            _judge_unchanged,
            visible=True,
        ),
        Check(
            "edges",
            1,
            "shares 0 (nothing pruned) and 1 (everything)",
            lambda rng: {
                "call": "prune_smallest",
                "args": [torch.from_numpy(rng.normal(size=(4, 6)).astype(np.float32))],
                "scenario": edge_shares,
            },
            _judge_edges,
        ),
        Check(
            "half",
            1,
            "a 3 x 3 matrix, share 0.5: round(4.5) = 4 weights zeroed (halves go to the even number)",
            _prune_probe(0.5, shape=(3, 3), whole_share=4 / 9),  # 4 / 9 x 9 = 4 exactly
            _judge_prune,
        ),
        Check(
            "bad_share",
            1,
            "a share of 1.5 raises ValueError",
            lambda rng: {"call": "prune_smallest", "args": [torch.ones(2, 2), 1.5]},
            _judge_bad_share,
        ),
    ],
    requirements=[
        Requirement(
            "zeroes the round(share * numel) weights of smallest magnitude |w|",
            ("example", "whole_matrix", "rounding"),
        ),
        Requirement(
            "counts like torch.nn.utils.prune.l1_unstructured: round(share * numel), halves to even",
            ("rounding", "half"),
        ),
        Requirement("ranked over the whole matrix, not row by row", ("whole_matrix",)),
        Requirement("returns a pruned copy in the shape of weight", ("example", "whole_matrix", "edges")),
        Requirement("the matrix passed in is left unchanged", ("copy",)),
        Requirement("share 0 prunes nothing, share 1 everything (edge cases)", ("edges",)),
        Requirement("ValueError for a share outside [0, 1] (error)", ("bad_share",)),
    ],
)


EXERCISES = [
    Exercise(
        "distillation_loss",
        ("distillation_loss",),
        [
            Check(
                "batch_t2",
                1,
                "a batch of sequences (B, T, vocab) at temperature 2",
                _logits_probe(2.0, positions=(3, 5)),
                _judge_distill,
                visible=True,
            ),
            Check("t1", 1, "temperature 1", _logits_probe(1.0), _judge_distill),
            Check("t4", 1, "temperature 4", _logits_probe(4.0), _judge_distill),
            Check(
                "4d",
                1,
                "(B, H, T, vocab) at temperature 0.5, float64 logits",
                _logits_probe(
                    0.5, positions=(2, 3, 5), dtype=np.float64
                ),  # T^2 x 5 is not 1: no mistake looks like another
                _judge_distill,
                visible=True,
            ),
        ],
        requirements=[
            Requirement(
                "T^2 * KL(teacher || student) of the temperature-softened distributions", ("batch_t2", "t1", "t4")
            ),
            Requirement("averaged over all leading positions of (..., vocab) logits", ("batch_t2", "4d")),
            Requirement("any temperature (1, above and below 1)", ("t1", "4d")),
            Requirement("a 0-d tensor or a float", ("batch_t2",)),
        ],
    ),
    PRUNE,
]
