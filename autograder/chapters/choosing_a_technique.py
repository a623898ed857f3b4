"""Chapter 9's exercises: fine_tuning_advice (the rule for when to fine-tune), pack_int4 (two 4-bit
codes to a byte), Int4Linear and speculative_greedy (the learner's server, run on the course's
models in the sandbox) and capstone_configuration (a configuration within the budget, measured here by
the course's own code: the learner's function only names the configuration). The class
leaderboard that grading a class writes beside the gradebook is ``autograder.leaderboard``.
The sandbox runs the course's model from the text of ``course/model.py`` (:func:`on_course_model`)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    diagnose,
    judge_raises,
    judges_value,
    outcome,
)
from autograder.leaderboard import reported, write_class_files  # noqa: F401 (what grading a class calls)
from course import advice, checkpoints, corpus, drafts, quantization, speculative_decoding, stored_weights
from course import choosing_a_technique as technique
from course import model as course_model
from course.kernels import int4
from course.model import generate
from course.withheld import NotRecorded, is_recording, withheld

# --- fine_tuning_advice -------------------------------------------------------------------------------

ALL_CASES = [list(case) for case in itertools.product(advice.NEEDS, (False, True), (False, True))]
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


@judges_value
def _judge_advice(probe, got):
    cases = probe["args"][0]
    if not isinstance(got, list) or len(got) != len(cases):
        return Verdict(False, f"expected one answer per case, got {got!r}"[:200])
    labels = [advice.advice_label(value) for value in got]
    for case, value, label in zip(cases, got, labels, strict=True):
        if label is None:
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}; return one of "
                + ", ".join(repr(a) for a in advice.ADVICE),
            )
        if value != label:  # the right idea, spelled otherwise: the prompt asks for the exact strings
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}, which means {label!r}: return exactly "
                + ", ".join(repr(a) for a in advice.ADVICE),
            )
    expected = [technique.course_answer("fine_tuning_advice")(*case) for case in cases]
    wrong = [i for i, (a, b) in enumerate(zip(labels, expected, strict=True)) if a != b]
    if not wrong:
        return Verdict(True)
    for hint, answers in _advice_mistakes(cases):
        if labels == answers:
            return Verdict(False, hint)
    first = wrong[0]
    return Verdict(
        False,
        f"{len(wrong)} of {len(cases)} cases differ; for example fine_tuning_advice{tuple(cases[first])} gave "
        f"{labels[first]!r}, expected {expected[first]!r}",
    )


@withheld
def _advice_mistakes(cases: list) -> list[tuple[str, list[str]]]:
    """Each plausible wrong rule's advice for ``cases``, with the hint that names it."""
    mistakes = [
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
            "prompting comes first: until it has seriously been tried (tried_prompting False), the advice is "
            "'prompting'",
            _variant(prompting_first=False),
        ),
    ]
    return [(hint, [rule(*case) for case in cases]) for hint, rule in mistakes]


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


@withheld
def _pack_mistakes(codes: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    c = codes.to(torch.int64)
    high, low = c[:, 0::2], c[:, 1::2]
    no_offset = (
        "the codes were packed without their +8 offset, so a negative code wraps around the byte (-7 * 16 + 7 = "
        "-105 is stored as 151): store code + 8, so that -8..7 become 0..15"
    )
    return [
        (
            "the pair's order is swapped: the first code of each pair goes into the high nibble, (first + 8) << 4",
            ((low + 8) << 4) | (high + 8),
        ),
        (
            "negative codes were stored as two's complement (code & 15): store code + 8, so -8..7 become 0..15",
            ((high & 15) << 4) | (low & 15),
        ),
        (no_offset, (high * 16 + low) % 256),
        (no_offset, ((high << 4) | low) & 255),
        ("the offset is 8, not 7: -8 must become 0 and 7 must become 15", ((high + 7) << 4) | (low + 7)),
        ("the two codes were added, not packed: shift the first left by 4 bits", (high + 8) + (low + 8)),
    ]


@judges_value
def _judge_pack(probe, got):
    codes = probe["args"][0]
    if not isinstance(got, torch.Tensor):
        return Verdict(False, f"returned {type(got).__name__}; pack_int4 should return a torch.Tensor of dtype uint8")
    expected = technique.course_answer("pack_int4")(codes)
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


def _odd_probe(rng):
    """Codes of an odd number of columns, a shape of its own each time (a fixed one could be looked up)."""
    rows, cols = int(rng.integers(1, 5)), 2 * int(rng.integers(1, 9)) + 1
    return {"call": "pack_int4", "args": [torch.from_numpy(rng.integers(-8, 8, size=(rows, cols)).astype("int64"))]}


def _judge_odd(probe, result):
    cols = probe["args"][0].shape[1]
    return judge_raises(
        result,
        "ValueError",
        f"{cols} columns cannot be packed two to a byte; the prompt asks pack_int4 to raise ValueError when the "
        "number of columns is odd (check codes.shape[1] % 2 first)",
    )


PACK = Exercise(
    "pack_int4",
    ("pack_int4",),
    [
        Check("example", 1, "the chapter's 2 x 4 codes", _codes_probe(fixed=EXAMPLE_CODES), _judge_pack, visible=True),
        Check("random", 2, "random codes, 16 x 64", _codes_probe(16, 64), _judge_pack),
        Check("odd", 1, "an odd number of columns raises ValueError", _odd_probe, _judge_odd, visible=True),
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


# --- the server: Int4Linear and speculative_greedy, run on the course's models in the sandbox ---------


def on_course_model(answer, job, model_source, target, draft, inputs) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): the course's model, defined
    by ``model_source`` (the text of ``course/model.py``, which imports only torch, since the
    course itself cannot be imported in the sandbox) and rebuilt from its state dict and
    configuration (``target``, ``draft``: ``{"state": ..., "config": ...}``). Then the learner's
    ``answer`` drives it:

    * ``job == "loss"``: ``answer`` is the learner's int4 layer class; every linear layer of the
      target becomes ``answer(weight, group_size)`` (``group_size`` None: the layer's input width,
      one scale per row), or ``answer(weight, group_size, codes=codes, scale=scale)`` where
      ``inputs["codes"]`` gives the layer's (codes, scale) by name (GPTQ's); reports the mean next-byte loss over the
      windows ``inputs["windows"]`` (B, T + 1) computed through those layers, the bytes of
      every layer's own tensors (its state dict) and, where codes were given, the share of the
      weights the layers serve that are the given code times its scale (``codes_kept``).
    * ``job == "speculate"``: ``answer`` is the learner's loop, given the models behind the course
      model's interface only (``model(tokens, cache)``, ``model.new_cache(1, max_len)``); reports
      the tokens of ``answer(target, draft, prompt, k, new_tokens)``, the target's and the
      draft's calls counted, and the positions each was fed.
    """
    import sys
    import types

    import torch
    import torch.nn.functional as F

    course_model = types.ModuleType("course_model_in_the_sandbox")
    sys.modules[course_model.__name__] = course_model  # dataclasses look their module up while defined
    try:
        exec(compile(model_source, "course/model.py", "exec"), course_model.__dict__)
    finally:
        del sys.modules[course_model.__name__]

    def build(spec):
        model = course_model.LanguageModel(course_model.ModelConfig(**spec["config"]))
        model.load_state_dict(spec["state"])
        return model.eval()

    class Served:
        """The model behind its interface, its calls and the positions fed counted; feeding it nothing
        or more than its cache holds fails with what that means (not the model's own error)."""

        def __init__(self, model, name, last_caches):
            self.model, self.name, self.calls, self.fed = model, name, 0, 0
            self.last_caches = last_caches  # each model served: the cache it was last fed with (shared)

        def new_cache(self, batch=1, max_len=None):
            if batch != 1:
                raise ValueError("this model serves one sequence: new_cache(1, max_len)")
            return self.model.new_cache(1, max_len)

        def __call__(self, tokens, cache=None):
            self.calls, self.fed = self.calls + 1, self.fed + tokens.shape[1]
            if tokens.dim() == 2 and tokens.shape[1] == 0:
                cached = f"; its cache holds {cache.length} positions" if cache is not None else ""
                for beside, other in self.last_caches.items():
                    if beside != self.name and cache is not None and other is not None and other.length > cache.length:
                        # fed nothing, this cache holds at least the tokens so far; the other's holds more
                        cached += f", the {beside}'s {other.length}: the {beside}'s was not rolled back either"
                raise ValueError(f"the {self.name} was fed no tokens (a tensor of shape {tuple(tokens.shape)}{cached})")
            if cache is not None and cache.length + tokens.shape[1] > cache.max_len:
                raise ValueError(
                    f"the {self.name}'s KV cache holds {cache.max_len} positions, {cache.length + tokens.shape[1]} "
                    "needed: was it rolled back to the positions kept after a rejection?"
                )
            self.last_caches[self.name] = cache
            return self.model(tokens, cache)

    def codes_served(layer, codes, scale) -> int:
        """How many of the weights ``layer`` serves are the code given times its scale (in float16,
        as the layer keeps it), within an eighth of a step (torch's fused int4 product serves them
        within 0.05 of one; a code rounded again on a finer grid moves by 0.14 or more): read off
        the layer's output for each unit input."""
        columns = codes.shape[1]
        step = scale.half().float().repeat_interleave(columns // scale.shape[1], dim=1)
        served_weight = layer(torch.eye(columns)[None]).float()[0].T  # (out, in): row j of I picks column j
        return int(((served_weight - codes.float() * step).abs() <= step / 8).sum())

    with torch.no_grad():
        if job == "loss":
            served, layers, kept, weights = build(target), [], 0, 0
            for name, module in list(served.named_modules()):
                if isinstance(module, torch.nn.Linear):
                    weight, given = module.weight.detach(), inputs.get("codes", {}).get(name + ".weight")
                    group = inputs["group_size"] or weight.shape[1]
                    if given is None:
                        layers.append(answer(weight, group))
                    else:
                        layers.append(answer(weight, group, codes=given[0], scale=given[1]))
                        kept, weights = kept + codes_served(layers[-1], *given), weights + weight.numel()
                    parent, _, leaf = name.rpartition(".")
                    setattr(served.get_submodule(parent), leaf, layers[-1])
            windows = inputs["windows"]
            logits = served(windows[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))
            stored = sum(t.numel() * t.element_size() for layer in layers for t in layer.state_dict().values())
            found = {"loss": float(loss), "layer_bytes": int(stored), "layers": len(layers)}
            return found | ({"codes_kept": kept / weights} if weights else {})
        last_caches: dict = {}  # no link between the two served objects: their arguments' fingerprints stay plain
        served, drafter = Served(build(target), "target", last_caches), Served(build(draft), "draft", last_caches)
        tokens = answer(served, drafter, inputs["prompt"], inputs["k"], inputs["new_tokens"])
        tokens = tokens.flatten().tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        return {
            "tokens": [int(t) for t in tokens],
            "target_calls": served.calls,
            "target_fed": served.fed,
            "draft_fed": drafter.fed,
        }


@functools.cache
def model_source() -> str:
    """The text of ``course/model.py``, which the scenario runs: the course's model, written once."""
    return inspect.getsource(course_model)


@functools.cache
def model_spec(name: str) -> dict:
    """A course model as the scenario rebuilds it: its state dict and configuration (loaded once)."""
    loaded = checkpoints.load(name)
    return {"state": dict(loaded.state_dict()), "config": loaded.config.to_dict()}


# --- Int4Linear -----------------------------------------------------------------------------------------


def int4_layer(cls, weight, group_size, x) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's layer built from
    ``weight`` with ``group_size``; its tensors (its state dict) and its output for ``x``."""
    import torch

    layer = cls(weight, group_size)
    with torch.no_grad():
        return {"tensors": {n: t.detach() for n, t in layer.state_dict().items()}, "output": layer(x)}


def _layer_probe(rows, cols, group, batch=(3,), fixed_seed=None):
    def make(rng):
        rng = np.random.default_rng(fixed_seed) if fixed_seed is not None else rng
        weight = torch.from_numpy(rng.normal(0, 0.02, size=(rows, cols)).astype(np.float32))
        x = torch.from_numpy(rng.normal(0, 1, size=(*batch, cols)).astype(np.float32))
        return {"call": "Int4Linear", "scenario": int4_layer, "args": [weight, group, x]}

    return make


def _stored(tensors) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The learner's codes and scale, or what is wrong with the layer's tensors."""
    if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return None, None, "the layer's state dict holds something other than tensors"
    missing = [name for name in ("codes", "scale") if name not in tensors]
    if missing:
        return (
            None,
            None,
            (
                f"the layer has no tensor named {' or '.join(missing)} (it has {', '.join(tensors) or 'none'}): "
                "register the packed codes and the scales as buffers, self.register_buffer('codes', ...)"
            ),
        )
    return tensors["codes"], tensors["scale"], ""


@withheld
def _codes_mistakes(weight, group) -> list[tuple[str, torch.Tensor | None, torch.Tensor | None]]:
    codes, scale = quantization.quantize(weight.float(), 4, group)
    packed = technique.course_answer("pack_int4")(codes)
    rows = quantization.quantize(weight.float(), 4, None)
    wide = (
        torch.round(
            weight.float()
            / (weight.float().reshape(len(weight), -1, group).abs().amax(-1) / 8).repeat_interleave(group, dim=1)
        )
        .clamp(-8, 7)
        .to(torch.int32)
    )
    return [
        (
            "wrong nibble order: the first code of each pair goes into the high four bits, (c0 + 8) * 16 + (c1 + 8)",
            technique.course_answer("pack_int4")(
                torch.stack([codes[:, 1::2], codes[:, 0::2]], -1).reshape(codes.shape)
            ),
            None,
        ),
        (
            "scales per row instead of per group: keep one scale per group_size columns, shape "
            "(out_features, in_features // group_size)",
            technique.course_answer("pack_int4")(rows[0]),
            rows[1].half(),
        ),
        (
            "the scale is absmax / 7 (the largest symmetric 4-bit code), not absmax / 8",
            technique.course_answer("pack_int4")(wide),
            None,
        ),
        ("the scales are stored in float32: keep them in float16 (two bytes each)", packed, scale.float()),
    ]


@judges_value
def _judge_layer_tensors(probe, got):
    weight, group, _ = probe["args"]
    if not isinstance(got, dict) or "tensors" not in got:
        return Verdict(False, f"the scenario got {type(got).__name__}; Int4Linear should be an nn.Module class")
    codes, scale, problem = _stored(got["tensors"])
    if problem:
        return Verdict(False, problem)
    expected_codes, expected_scale = technique.COURSE.int4_buffers(weight, group)
    for hint, wrong_codes, wrong_scale in _codes_mistakes(weight, group):
        if (
            (wrong_scale is None or (scale.dtype == wrong_scale.dtype and torch.equal(scale, wrong_scale)))
            and (codes.shape == wrong_codes.shape and torch.equal(codes.to(torch.int64), wrong_codes.to(torch.int64)))
            and not (torch.equal(codes, expected_codes) and torch.equal(scale, expected_scale))
        ):
            return Verdict(False, hint)
    if codes.dtype != torch.uint8 or tuple(codes.shape) != tuple(expected_codes.shape):
        return Verdict(
            False,
            f"codes {codes.dtype} {tuple(codes.shape)}, expected torch.uint8 {tuple(expected_codes.shape)}: "
            "two 4-bit codes to a byte, packed with your pack_int4",
        )
    if scale.dtype != torch.float16 or tuple(scale.shape) != tuple(expected_scale.shape):
        return Verdict(
            False,
            f"scale {scale.dtype} {tuple(scale.shape)}, expected torch.float16 {tuple(expected_scale.shape)}: one "
            "float16 scale per group_size columns of each row",
        )
    if not torch.equal(scale, expected_scale):
        return Verdict(False, "the scales differ from absmax / 7 of each group (chapter 3's symmetric 4-bit codes)")
    # the codes of the float16 scale are as good as those of the float32 one
    alternative = _codes_of_scale(weight, expected_scale, group)
    if torch.equal(codes, expected_codes) or torch.equal(codes, alternative):
        return Verdict(True)
    wrong = int((codes != expected_codes).sum())
    return Verdict(False, f"{wrong} of {codes.numel()} bytes differ from round(weight / scale) packed with pack_int4")


@withheld
def _codes_of_scale(weight: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """The packed codes of ``weight`` rounded against ``scale`` (the layer's float16 scales)."""
    return technique.course_answer("pack_int4")(
        torch.round(weight / scale.float().repeat_interleave(group, dim=1)).clamp(-8, 7).to(torch.int32)
    )


@judges_value
def _judge_layer_output(probe, got):
    weight, group, x = probe["args"]
    if not isinstance(got, dict) or not isinstance(got.get("output"), torch.Tensor):
        return Verdict(False, "forward(x) should return a tensor: x @ W.T with W rebuilt from the codes and scales")
    codes, scale, problem = _stored(got["tensors"])
    if problem:
        return Verdict(False, problem)
    try:  # the learner's own codes and scales, rebuilt by the course
        rebuilt = quantization.dequantize(quantization.unpack_int4(codes), scale.float())
    except (ValueError, RuntimeError) as error:
        return Verdict(False, f"the codes and scales cannot be unpacked: {error}")
    output = got["output"].double()

    def close_to(weight) -> float:  # relative error: torch's fused int4 product (bfloat16) is welcome
        expected = x.double() @ weight.double().T
        if output.shape != expected.shape:
            return math.inf
        return float((output - expected).norm() / expected.norm())

    error = close_to(rebuilt)
    if error <= int4.TOLERANCE:
        return Verdict(True)
    swapped = quantization.unpack_int4(codes).reshape(len(codes), -1, 2).flip(-1).reshape(len(codes), -1)
    if close_to(quantization.dequantize(swapped, scale.float())) <= int4.TOLERANCE:
        return Verdict(False, "wrong nibble order in forward: the high four bits hold the first code of each pair")
    shape = f"shape {tuple(output.shape)}, expected {(*x.shape[:-1], len(codes))}; " if math.isinf(error) else ""
    return Verdict(
        False, f"forward(x) is not x @ W.T for the W your codes and scales encode ({shape}relative error {error:.2g})"
    )


@judges_value
def _judge_layer_bytes(probe, got):
    weight, group, _ = probe["args"]
    tensors = got.get("tensors") if isinstance(got, dict) else None
    if not isinstance(tensors, dict):
        return Verdict(False, "Int4Linear should be an nn.Module class")
    rows, cols = weight.shape
    expected = rows * cols // 2 + 2 * rows * (cols // group)
    held = {name: t.numel() * t.element_size() for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if sum(held.values()) == expected and set(held) == {"codes", "scale"}:  # the right bytes, and the work in them?
        scale, expected_scale = tensors["scale"].float(), technique.COURSE.int4_buffers(weight, group)[1].float()
        if scale.shape == expected_scale.shape and torch.allclose(scale, expected_scale, rtol=1e-3, atol=0):
            return Verdict(True)
        return Verdict(
            False,
            "the layer keeps the right number of bytes, but its scale buffer does not hold absmax / 7 of each group: "
            "compute the scales (and the codes) from the weight",
        )
    if held.get("scale") == 2 * rows and group < cols:
        return Verdict(False, f"scales per row instead of per group: one float16 scale per {group} columns")
    extra = sorted(set(held) - {"codes", "scale"})
    more = f"; it also keeps {', '.join(extra)}: a stored layer keeps only its codes and scales" if extra else ""
    return Verdict(
        False,
        f"the layer's tensors take {sum(held.values())} bytes, expected {expected} (half a byte per weight, two "
        f"per scale){more}",
    )


@functools.cache
def _loss_windows() -> torch.Tensor:
    tokens = corpus.tokens("validation")
    n = (len(tokens) - 1) // LOSS_LENGTH
    starts = (torch.arange(n) * LOSS_LENGTH)[torch.linspace(0, n - 1, LOSS_WINDOWS).long()]
    return torch.stack([tokens[s : s + LOSS_LENGTH + 1] for s in starts.tolist()])


LOSS_WINDOWS, LOSS_LENGTH = 8, 256


FP32 = "fp32"  # _course_loss's group for the float32 target


@withheld
@functools.cache
@torch.no_grad()
def _course_loss(group: int | None | str, mistake: str = "", calibration: str = "none") -> float:
    """The held-out loss on :func:`_loss_windows` of the target with int4 weights in groups of
    ``group`` (None: one scale per row; :data:`FP32`: float32 weights), rounded to nearest or with
    GPTQ's codes (``calibration``); ``mistake`` "rows": one scale per row, "swapped": each byte's two
    codes unpacked in the other order. The course's model computes it."""
    model = copy.deepcopy(technique.target())
    if group != FP32:
        codes = _gptq_inputs(group) if calibration == "gptq" else {}
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                if name + ".weight" in codes:
                    signed, scale = codes[name + ".weight"]
                else:  # the codes of stored_weights.int4_layer_buffers, before packing (which changes none)
                    signed, scale = quantization.quantize(
                        module.weight.detach().float(), 4, None if mistake == "rows" else group
                    )
                if mistake == "swapped":  # each pair's two codes unpacked in the other order
                    signed = signed.reshape(len(signed), -1, 2).flip(-1).reshape(signed.shape)
                module.weight.data = quantization.dequantize(signed, scale.half().float())
    windows = _loss_windows()
    logits = model(windows[:, :-1])
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)))


CALIBRATION_PROBE_WINDOWS = 8  # of chapter 3's 32: GPTQ's codes still differ from rounding's, at a quarter the time


@functools.cache
def _probe_hessians() -> dict[str, torch.Tensor]:
    """H = X^T X / n of the target's linear layers on evenly spaced windows of the training plays:
    the calibrated check needs codes that GPTQ chose, not the capstone's own (32 windows)."""
    return technique.calibration_hessians(CALIBRATION_PROBE_WINDOWS)


@withheld
@functools.cache
def _gptq_inputs(group: int | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """GPTQ's signed codes and float32 scales for each of the target's linear layers, by state-dict
    name: what a calibrated int4 layer is given (``course.stored_weights.gptq_codes``)."""
    target, hessians = technique.target(), _probe_hessians()
    return {
        name + ".weight": stored_weights.gptq_codes(module.weight, hessians[name], group or module.in_features)
        for name, module in target.named_modules()
        if isinstance(module, nn.Linear)
    }


# the calibrated check: GPTQ's codes in groups of 64 (with one scale per row, GPTQ's loss on the 8 windows
# is within 2e-4 of rounding's: the check could not tell whether the codes given were kept)
CALIBRATED_GROUP = 64


def _loss_probe(group: int | None, calibration: str = "none"):
    def make(rng):
        inputs = {"group_size": group, "windows": _loss_windows()}
        if calibration == "gptq":
            inputs["codes"] = _gptq_inputs(group)
        return {
            "call": "Int4Linear",
            "scenario": on_course_model,
            "args": ["loss", model_source(), model_spec("target"), None, inputs],
            "expected": (group, calibration),
        }

    return make


def _judge_model(probe, result):
    """The served target's loss and bytes; a layer that does not take GPTQ's codes is told how."""
    if result.get("raised") == "TypeError" and probe["expected"][1] == "gptq":
        return Verdict(
            False,
            f"raised TypeError: {result.get('message', '')}"[:160] + "; Int4Linear(weight, group_size, codes=codes, "
            "scale=scale) must take codes and scale as keyword arguments (None by default) and keep them when given",
        )
    value, failed = outcome(result)
    return failed or _judge_model_loss(probe, value)


def _judge_model_loss(probe, got):
    if not isinstance(got, dict) or "loss" not in got:
        return Verdict(False, f"the course's target could not be served with Int4Linear: {got!r}"[:200])
    group, calibration = probe["expected"]
    linears = [m for m in technique.target().modules() if isinstance(m, nn.Linear)]
    expected_bytes = sum(
        m.weight.numel() // 2 + 2 * m.out_features * (m.in_features // (group or m.in_features)) for m in linears
    )
    loss, fp32 = got["loss"], _course_loss(FP32)
    data = {"int4_loss": loss, "int4_loss_gap": loss - fp32, "int4_layer_bytes": got["layer_bytes"]}
    per_row = sum(m.weight.numel() // 2 + 2 * m.out_features for m in linears)
    if group is not None and got["layer_bytes"] == per_row:
        return Verdict(False, f"scales per row instead of per group: one float16 scale per {group} columns", data=data)
    if got["layer_bytes"] != expected_bytes:
        return Verdict(
            False,
            f"the target's {len(linears)} int4 layers hold {got['layer_bytes']:,} bytes, expected {expected_bytes:,}: "
            "only the packed codes and the float16 scales",
            data=data,
        )
    expected, changed = _course_loss(group, calibration=calibration), 1 - got.get("codes_kept", 1)
    if abs(loss - expected) <= LOSS_TOLERANCE and not changed:
        return Verdict(True, data=data)
    if calibration == "gptq" and abs(loss - _course_loss(group)) <= LOSS_TOLERANCE:
        return Verdict(
            False,
            "the loss is that of codes rounded to nearest: the codes and scale given (GPTQ's) were ignored; when "
            "codes and scale are passed, pack those codes and keep that scale",
            data=data,
        )
    if abs(loss - _course_loss(group, "swapped", calibration)) <= LOSS_TOLERANCE:
        return Verdict(
            False,
            "wrong nibble order in forward: the high four bits hold the first code of each pair, (byte >> 4) - 8",
            data=data,
        )
    if changed:
        return Verdict(
            False,
            f"{100 * changed:.2g}% of the weights your layers serve are not the code given times its scale: use "
            "the codes you are given, packed as they are, and the scale given in float16, without rebuilding the "
            "weight and rounding it to nearest again (that undoes part of GPTQ's work)",
            data=data,
        )
    if group is not None and abs(loss - _course_loss(group, "rows")) <= LOSS_TOLERANCE:
        return Verdict(False, "the loss is that of one scale per row: scales per group of group_size", data=data)
    return Verdict(
        False,
        f"held-out loss through your layers {loss:.4f} nats/byte, the course's "
        f"{technique.format_label('int4', group, calibration)} target's {expected:.4f} (fp32: {fp32:.4f}; "
        f"on the grader's {LOSS_WINDOWS} windows of {LOSS_LENGTH} bytes, not the chapter's table's)",
        data=data,
    )


# nats/byte: the sandbox's model against the course's, both float32 (seen: under 1e-5; through torch's
# fused int4 product, 1.2e-4). GPTQ's codes rounded again move the loss less than that on some machines
# (1.5e-4 seen): the calibrated check reads the codes each layer serves instead (codes_served)
LOSS_TOLERANCE = 2e-4


INT4_LAYER = Exercise(
    "int4_linear",
    ("Int4Linear",),
    [
        Check(  # its fixed weight and the course's model (calibrated) are all that hard-coding can pass: 2 of 7
            "codes",
            1,
            "an 8 x 64 weight, groups of 32: codes and scales",
            _layer_probe(8, 64, 32, fixed_seed=9),
            _judge_layer_tensors,
            visible=True,
        ),
        Check(
            "random",
            2,
            "a 48 x 256 weight, groups of 64: codes and scales",
            _layer_probe(48, 256, 64),
            _judge_layer_tensors,
        ),
        Check(
            "forward",
            1,
            "forward(x) on a batch of sequences",
            _layer_probe(32, 128, 32, batch=(2, 5)),
            _judge_layer_output,
        ),
        Check("bytes", 1, "the layer keeps only codes and scales", _layer_probe(16, 128, 64), _judge_layer_bytes),
        Check(
            "model",
            1,
            "the course's target served through your layers: held-out loss and bytes",
            _loss_probe(64),
            _judge_model,
        ),
        Check(
            "calibrated",
            1,
            f"the course's target served through your layers given GPTQ's codes and scales, groups of "
            f"{CALIBRATED_GROUP}",
            _loss_probe(CALIBRATED_GROUP, "gptq"),
            _judge_model,
            visible=True,
        ),
    ],
    requirements=[
        Requirement(
            "codes: round(weight / scale) with scale = absmax / 7 per group, packed with pack_int4", ("codes", "random")
        ),
        Requirement(
            "buffers named codes (uint8, (out, in // 2)) and scale (float16, (out, in // group_size))",
            ("codes", "random", "bytes"),
        ),
        Requirement(
            "forward(x) = x @ W.T for W rebuilt from the codes and scales, any leading shape", ("forward", "model")
        ),
        Requirement("no float copy of the weight kept", ("bytes", "model", "calibrated")),
        Requirement(
            "Int4Linear(weight, group_size, codes=codes, scale=scale) keeps the signed codes (packed) and the "
            "scales given, instead of rounding the weight",
            ("calibrated",),
        ),
    ],
    builds_on=("pack_int4",),
)


# --- speculative_greedy --------------------------------------------------------------------------------

LOOP_NEW_TOKENS = 32


LOOP_MISTAKES = {  # each planted mistake's hint (the loop with it: autograder/mistakes/speculative_decoding.py)
    "target_cache": "the target's KV cache was not rolled back after a rejection: set its length to the positions "
    "kept (the tokens so far plus the accepted guesses)",
    "one_more": "off by one in the positions kept: the target's cache keeps the tokens so far plus the accepted "
    "guesses; the target's own token after them has not been fed yet",
    "draft_cache": "the draft's KV cache was not rolled back after a rejection, so it holds rejected guesses and is "
    "fed nothing: set its length to at most the positions kept",
    "both_caches": "neither KV cache was rolled back after a rejection: set the target's length to the positions kept "
    "(the tokens so far plus the accepted guesses) and the draft's to at most that",
    "late": "the target's choices were read one position late: the logits at a position choose the token after it, "
    "so the choice to compare with the first guess is at the position before that guess (the last of the tokens "
    "fed before the guesses): take the last k + 1 positions",
}


@withheld
@functools.cache
def _loop_expected(draft: str, start: int, k: int) -> dict:
    """The target's greedy tokens (course.model.generate), chapter 6's loop's target calls at
    temperature 0, and each planted mistake's tokens, for one prompt."""
    target, drafter = technique.target(), drafts.draft_model(draft)
    prompt = technique.prompts()[start]
    greedy = generate(target, prompt, LOOP_NEW_TOKENS)[0].tolist()
    calls = len(speculative_decoding.speculative_generate(target, drafter, prompt, k, LOOP_NEW_TOKENS, 0)[1])
    return {"greedy": greedy, "calls": calls, "prompt": prompt}


@withheld
@functools.cache
def _mistake_outcome(draft: str, start: int, k: int, mistake: str) -> list[int] | str:
    """The tokens of the course's loop with ``mistake`` planted (:data:`LOOP_MISTAKES`) on one
    prompt, or the name of the exception it raises."""
    from autograder.mistakes.speculative_decoding import of_speculative_greedy

    target, drafter = technique.target(), drafts.draft_model(draft)
    try:
        return of_speculative_greedy(mistake, target, drafter, technique.prompts()[start], k, LOOP_NEW_TOKENS)
    except (IndexError, ValueError, RuntimeError) as error:
        return type(error).__name__


def _loop_probe(draft, start, k):
    def make(rng):
        inputs = {"prompt": technique.prompts()[start], "k": k, "new_tokens": LOOP_NEW_TOKENS}
        return {
            "call": "speculative_greedy",
            "scenario": on_course_model,
            "args": ["speculate", model_source(), model_spec("target"), model_spec(draft), inputs],
            "expected": (draft, start, k),
        }

    return make


# what the scenario's models say when a cache was not rolled back (on_course_model's Served), by mistake
RAISED_BY = {  # the first whose sign is in the message names it
    "target_cache": ("the target's KV cache holds",),
    "both_caches": ("the target's was not rolled back either",),
    "draft_cache": ("the draft's KV cache holds", "the draft was fed no tokens"),
}


def _raised_hint(draft: str, start: int, k: int, raised: dict) -> str:
    """The hint of a loop that raised: the mistake first, then what it raised; the mistake is named
    when the scenario's models said what went wrong (:data:`RAISED_BY`), or when the course's loop
    with that mistake raises the same exception on this prompt; otherwise what was raised alone."""
    message = raised.get("message", "")
    said = f"{raised['raised']}: {message}"[:160]
    for mistake, signs in RAISED_BY.items():
        if any(sign in message for sign in signs):
            return f"{LOOP_MISTAKES[mistake]} (your loop raised {said})"
    for mistake, hint in LOOP_MISTAKES.items():
        if mistake not in RAISED_BY and _mistake_outcome(draft, start, k, mistake) == raised["raised"]:
            return f"{hint} (your loop raised {said}, as the loop with that mistake does)"
    return outcome(raised)[1].hint


def _loop_verdict(probe, got, parts) -> Verdict:
    draft, start, k = probe["expected"]
    if is_recording():  # every mistake's outcome, so that the learners' copy can name any of them
        for mistake in LOOP_MISTAKES:
            _mistake_outcome(draft, start, k, mistake)
    if isinstance(got, dict) and "raised" in got:  # the learner's loop raised: a mistake that ends this way?
        return Verdict(False, _raised_hint(draft, start, k, got))
    if not isinstance(got, dict) or "tokens" not in got:
        return Verdict(False, f"speculative_greedy did not run on the course's models: {got!r}"[:200])
    expected = _loop_expected(draft, start, k)
    prompt_length = expected["prompt"].shape[1]
    if got["tokens"] != expected["greedy"]:
        for mistake, hint in LOOP_MISTAKES.items():
            if got["tokens"] == _mistake_outcome(draft, start, k, mistake):
                return Verdict(False, hint)
        if got["tokens"][:prompt_length] != expected["greedy"][:prompt_length]:
            return Verdict(False, "return the prompt's tokens followed by the new ones, as one list")
        if len(got["tokens"]) != len(expected["greedy"]):
            return Verdict(False, f"{len(got['tokens'])} tokens returned, expected the prompt + {LOOP_NEW_TOKENS}")
        first = next(i for i, (a, b) in enumerate(zip(got["tokens"], expected["greedy"], strict=True)) if a != b)
        return Verdict(False, f"token {first} differs from the target's greedy decoding ({draft}, k={k})")
    if "calls" in parts and got["target_calls"] != expected["calls"]:
        return Verdict(
            False,
            f"{got['target_calls']} target calls, expected {expected['calls']}: one target call per round verifies "
            "its k guesses (the prefill is part of the first round), and after k accepted guesses the same call "
            "gives the target's next token too",
        )
    if "caches" in parts:
        bound = prompt_length + LOOP_NEW_TOKENS + got["target_calls"] * (k + 1)
        for who in ("target", "draft"):
            if got[f"{who}_fed"] > bound:
                return Verdict(
                    False,
                    f"the {who} was fed {got[f'{who}_fed']} positions in all, more than {bound}: keep a KV cache and "
                    "feed only the positions it has not seen",
                )
    return Verdict(True, data={"target_calls": got["target_calls"]} if "calls" in parts else None)


def _loop_judge(*parts):
    """The judge of a loop's tokens and ``parts``: ``"calls"`` (the target's calls counted),
    ``"caches"`` (the positions each model was fed)."""

    def judge(probe, result):
        if "raised" in result and result["raised"] not in ("NotImplementedError", "MemoryError"):
            return _loop_verdict(probe, result, parts)
        value, failed = outcome(result)
        return failed or _loop_verdict(probe, value, parts)

    return judge


SPECULATIVE = Exercise(
    "speculative_greedy",
    ("speculative_greedy",),
    [
        Check(
            "greedy",
            2,
            "the distilled draft, k = 4: the target's greedy tokens, one target call per round, each model given "
            "only the positions missing from its KV cache",
            _loop_probe("distilled", 0, 4),
            _loop_judge("calls", "caches"),
            visible=True,
        ),
        Check(
            "calls",
            1,
            "the distilled draft, k = 4: target calls counted",
            _loop_probe("distilled", 1, 4),
            _loop_judge("calls"),
        ),
        Check(
            "caches",
            1,
            "both models fed only what their caches have not seen",
            _loop_probe("draft", 2, 3),
            _loop_judge("caches"),
        ),
        Check("k1", 1, "k = 1 with chapter 6's draft", _loop_probe("draft", 1, 1), _loop_judge("calls")),
        Check("k7", 1, "k = 7 with chapter 6's draft", _loop_probe("draft", 0, 7), _loop_judge("calls")),
    ],
    requirements=[
        Requirement(
            "the prompt and the new tokens, exactly the target's greedy decoding",
            ("greedy", "calls", "caches", "k1", "k7"),
        ),
        Requirement("one target call per round, verifying the k guesses", ("calls", "k1", "k7")),
        Requirement(
            "both models keep a KV cache, rolled back to the positions kept after a rejection",
            ("greedy", "calls", "caches"),
        ),
        Requirement("any k from 1 up (edge case: k = 1)", ("k1", "k7")),
    ],
)


# --- capstone_configuration -------------------------------------------------------------------------

PART_HINTS = {
    "weight_bytes": "the bits of the codes, the number of scales and the draft are what can shrink",
    "loss_gap": "fewer bits cost quality, and codes rounded to nearest usually cost more than calibrated ones "
    "(chapter 3's GPTQ; in groups of 32 the two are within a few ten-thousandths)",
    "modelled_speedup": "that takes a draft the target agrees with, and a draft length k that pays for its draft "
    "calls (chapter 6's speed-up, from alpha and c)",
    "no_draft": "without a draft every target call yields one token: that takes speculation with a draft",
}


def _capstone(part: str):
    @judges_value
    def judge(probe, got) -> Verdict:
        try:
            config = technique.Configuration.from_dict(got)
        except (TypeError, ValueError) as error:
            return Verdict(False, f"not a configuration the capstone can serve: {error}")
        figures = technique.Figures(**_capstone_figures(config.as_dict()))
        data = {"configuration": config.label(), **config.as_dict(), **figures.as_dict()}
        if figures.within()[part]:
            return Verdict(True, data=data)
        return Verdict(
            False,
            f"{config.label()}: {figures.summary()}; the budget: {technique.BUDGET_WORDS[part]}; "
            + (
                f"the target takes {figures.target_bytes / 1e6:.2f} MB as stored and the draft "
                f"{figures.draft_bytes / 1e6:.2f} MB: "
                if part == "weight_bytes"
                else ""
            )
            + PART_HINTS["no_draft" if part == "modelled_speedup" and config.draft == "none" else part],
            data=data,
        )

    return judge


def _capstone_figures(configuration: dict) -> dict:
    """The capstone's figures (:class:`course.choosing_a_technique.Figures`' fields) for
    ``configuration``: the loop's; in the learners' copy, for a configuration whose loop it did not
    record, those counted from where the draft agrees with the target (the same numbers)."""
    try:
        return technique.loop_figures(configuration)
    except NotRecorded:
        return dataclasses.asdict(technique.counted_figures(technique.Configuration.from_dict(configuration)))


def _configuration_probe(rng):
    return {"call": "capstone_configuration"}


CAPSTONE = Exercise(
    "capstone_configuration",
    ("capstone_configuration",),
    [
        Check(part, 2, what, _configuration_probe, _capstone(part), visible=True)
        for part, what in technique.BUDGET_WORDS.items()
    ],
    requirements=[
        Requirement(
            "a dict with the keys weights, group_size, calibration, draft and draft_length, naming a configuration "
            "the capstone serves",
            tuple(technique.BUDGET),
        ),
        *(Requirement(words, (part,)) for part, words in technique.BUDGET_WORDS.items()),
    ],
)

EXERCISES = [ADVICE, PACK, INT4_LAYER, SPECULATIVE, CAPSTONE]
