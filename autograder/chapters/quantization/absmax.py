"""Chapter 3's first four exercises with their visible checks: quantize_dequantize,
relative_error, quantize_int8 / dequantize_int8, effective_bits. Each judge compares with the
chapter's answer (``ANSWERS``, its solution cells) and names the known mistake it matches
(``MISTAKES``, ``autograder/mistakes/quantization/``); the hidden checks are
``autograder/hidden/quantization.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Verdict,
    as_tensor,
    diagnose,
    judge_number,
    judge_raises,
    judges_tensor,
    judges_value,
    outcome,
)
from course import quantization, withheld

ANSWERS = withheld.answers("03_quantization")
MISTAKES = withheld.module("autograder.mistakes.quantization")

# --- inputs ---------------------------------------------------------------------------------------


def normal(rng: np.random.Generator, rows: int, cols: int, std: float = 0.02) -> torch.Tensor:
    return torch.from_numpy(rng.normal(0.0, std, size=(rows, cols)).astype(np.float32))


def with_outlier_columns(rng: np.random.Generator, rows: int, cols: int, n: int = 2, magnitude: float = 25.0):
    weight = normal(rng, rows, cols)
    columns = rng.choice(cols, size=n, replace=False)
    weight[:, columns] *= magnitude
    return weight


def too_many_levels_hint(bits: int) -> str:
    """The diagnosis of 2**bits - 1 levels, shared by every exercise that rounds to codes."""
    return (
        f"{2**bits - 1} levels instead of {quantization.absmax_levels(bits)}: the largest code of a symmetric "
        f"{bits}-bit scheme is 2**(bits-1) - 1"
    )


# --- quantize_dequantize ----------------------------------------------------------------------------

ZERO_GROUP_HINT = (
    "an all-zero group has scale 0 and 0/0 gives NaN: give such groups scale 1 "
    "(torch.where(scale > 0, scale, 1)) or clamp the scale to a tiny minimum"
)


def round_trip_verdict(probe: dict, got: torch.Tensor) -> Verdict:
    weight, bits = probe["args"]
    group = probe["kwargs"].get("group_size")
    expected = ANSWERS.quantize_dequantize(weight.double(), bits, group)
    step = 2 * quantization.half_step(weight.double(), bits, group)
    if torch.isnan(got).any():
        return Verdict(False, ZERO_GROUP_HINT)
    return diagnose(got, expected, lambda: MISTAKES.of_quantize_dequantize(weight, bits, group), step=step)


judge_round_trip = judges_tensor("the dequantized matrix")(round_trip_verdict)


def probe_round_trip(rows, cols, bits, group, outliers=False, dtype=torch.float32):
    def make(rng):
        weight = with_outlier_columns(rng, rows, cols) if outliers else normal(rng, rows, cols)
        return {"call": "quantize_dequantize", "args": [weight.to(dtype), bits], "kwargs": {"group_size": group}}

    return make


def probe_zero_groups(rng):
    weight = normal(rng, 8, 32)
    weight[2] = 0.0  # an all-zero row
    weight[5, 8:16] = 0.0  # an all-zero group
    return {"call": "quantize_dequantize", "args": [weight, 4], "kwargs": {"group_size": 8}}


@judges_tensor("the dequantized matrix")
def judge_zero_groups(probe, got):
    if torch.isnan(got).any() or torch.isinf(got).any():
        return Verdict(False, ZERO_GROUP_HINT)
    return round_trip_verdict(probe, got)


# --- a group size that does not divide the columns, beside one that does ------------------------------

BAD_GROUP_HINT = "check `cols % group_size` and raise ValueError with a message"


def rejects_a_bad_group(function, *args, bad_group_size, **kwargs) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): what ``function(*args,
    group_size=bad_group_size)`` raised (or that it returned), and ``function(*args, **kwargs)``'s answer."""
    try:
        function(*args, group_size=bad_group_size)
    except Exception as error:
        rejected = {"raised": type(error).__name__, "message": str(error)[:200]}
    else:
        rejected = {"returned": True}
    return {"rejected": rejected, "answer": function(*args, **kwargs)}


def judging_rejection(judge_answer):
    """A judge of :func:`rejects_a_bad_group`'s report: the answer on the group size that divides the
    columns (``judge_answer`` of the probe without the bad one), then the ValueError on the one that
    does not. Raising alone earns nothing: an answer that always raises fails the first."""

    def judge(probe, result):
        answered = {**probe, "kwargs": {k: v for k, v in probe["kwargs"].items() if k != "bad_group_size"}}
        answered.pop("scenario", None)
        got, failed = outcome(result)
        if failed:
            return judge_answer(answered, result)  # says what happened, as the other checks do
        if not isinstance(got, dict) or "answer" not in got or "rejected" not in got:
            return Verdict(False, f"{probe['call']} could not be tested: {got!r}"[:200])
        verdict = judge_answer(answered, {"returned": result["returned"]["dict"]["answer"]})
        if not verdict.passed:
            return verdict
        rejected = judge_raises(got["rejected"], "ValueError", BAD_GROUP_HINT)
        bad = probe["kwargs"]["bad_group_size"]
        return rejected if rejected.passed else Verdict(False, f"group_size={bad}: {rejected.hint}")

    return judge


def probe_bad_group(rng):
    return {
        "call": "quantize_dequantize",
        "args": [normal(rng, 4, 64), 4],
        "kwargs": {"group_size": 16, "bad_group_size": 48},
        "scenario": rejects_a_bad_group,
    }


QUANTIZE_DEQUANTIZE = Exercise(
    "quantize_dequantize",
    ("quantize_dequantize",),
    [
        Check(
            "int8_per_row",
            1,
            "int8, one scale per row",
            probe_round_trip(16, 64, 8, None),
            judge_round_trip,
            visible=True,
        ),
        Check(
            "int4_groups",
            2,
            "int4, groups of 16, outlier columns",
            probe_round_trip(32, 64, 4, 16, outliers=True),
            judge_round_trip,
            visible=True,
        ),
        Check(
            "zero_groups",
            1,
            "all-zero rows and groups give zeros, not NaN",
            probe_zero_groups,
            judge_zero_groups,
            visible=True,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns (48 of 64), the round trip when it does (16)",
            probe_bad_group,
            judging_rejection(judge_round_trip),
            visible=True,
        ),
    ],
)


# --- relative_error ------------------------------------------------------------------------------


def probe_relative_error(rows, cols, zeros_in_approx=False):
    def make(rng):
        weight = normal(rng, rows, cols)
        approx = weight + normal(rng, rows, cols, std=0.004)
        if zeros_in_approx:
            approx[:, : cols // 4] = 0.0
        return {"call": "relative_error", "args": [weight, approx], "python_float": not zeros_in_approx}

    return make


@judges_value
def judge_relative_error(probe, got):
    weight, approx = (a.double() for a in probe["args"])
    expected = ANSWERS.relative_error(weight, approx)
    mistakes = MISTAKES.of_relative_error(weight, approx)
    return judge_number(got, expected, mistakes, "the relative error", rel=1e-4, python_float=probe["python_float"])


RELATIVE_ERROR = Exercise(
    "relative_error",
    ("relative_error",),
    [
        Check(
            "random",
            1,
            "a random matrix and a noisy copy",
            probe_relative_error(16, 32),
            judge_relative_error,
            visible=True,
        ),
    ],
)


# --- quantize_int8 / dequantize_int8 -------------------------------------------------------------


def probe_int8(rows, cols, zero_row=False):
    def make(rng):
        weight = with_outlier_columns(rng, rows, cols, n=1)
        if zero_row:
            weight[1] = 0.0
        return {"call": "quantize_int8", "args": [weight]}

    return make


def judge_int8(probe, result):  # reads the raw result too: the codes' dtype is part of the answer
    got, failed = outcome(result)
    if failed:
        return failed
    if not (isinstance(got, tuple) and len(got) == 2):
        return Verdict(False, "quantize_int8 should return a tuple (codes, scale)")
    codes, scale = got
    codes, problem = as_tensor(codes, "the codes")
    if problem:
        return Verdict(False, problem)
    scale, problem = as_tensor(scale, "the scale")
    if problem:
        return Verdict(False, problem)
    weight = probe["args"][0]
    ref_codes, ref_scale = ANSWERS.quantize_int8(weight.double())
    dtype = result["returned"]["tuple"][0].get("torch_dtype")
    if dtype != "int8":
        return Verdict(
            False, f"codes have dtype {dtype}: convert them with .to(torch.int8) after rounding and clamping"
        )
    if tuple(scale.shape) != (weight.shape[0], 1):
        return Verdict(
            False,
            f"scale has shape {tuple(scale.shape)}; expected one per row, shape ({weight.shape[0]}, 1): take the "
            "absmax along dim=1 with keepdim=True",
        )
    if torch.isnan(scale).any():
        return Verdict(False, ZERO_GROUP_HINT)
    verdict = diagnose(
        codes,
        ref_codes.double(),
        lambda: MISTAKES.of_quantize_int8(weight),
        atol=0.0,
        rtol=0.0,
        step=torch.ones_like(ref_codes.double()),
    )
    if not verdict.passed:
        return Verdict(False, f"codes: {verdict.hint}")
    return diagnose(scale.reshape(-1, 1), ref_scale.double(), [], rtol=1e-5)


def probe_dequantize(rng):
    weight = normal(rng, 12, 20)
    codes, scale = ANSWERS.quantize_int8(weight)
    return {"call": "dequantize_int8", "args": [codes, scale]}


@judges_tensor("the dequantized matrix")
def judge_dequantize(probe, got):
    codes, scale = probe["args"]
    expected = ANSWERS.dequantize_int8(codes, scale)
    return diagnose(got, expected, lambda: MISTAKES.of_dequantize_int8(codes, scale))


INT8 = Exercise(
    "int8",
    ("quantize_int8", "dequantize_int8"),
    [
        Check("codes_and_scale", 1, "int8 codes and per-row scales", probe_int8(8, 32), judge_int8, visible=True),
        Check(
            "dequantize",
            1,
            "dequantize_int8 on given codes and scales",
            probe_dequantize,
            judge_dequantize,
            visible=True,
        ),
    ],
)


# --- effective_bits ------------------------------------------------------------------------------


def probe_bits(bits, group, scale_bits=None):
    def make(rng):
        kwargs = {} if scale_bits is None else {"scale_bits": scale_bits}
        return {"call": "effective_bits", "args": [bits, group], "kwargs": kwargs}

    return make


def probe_random_bits(rng):
    """A width and a group size drawn for each submission, the default fp16 scale: the values a check
    cell prints are not the ones graded."""
    bits = int(rng.choice([2, 3, 4, 5, 6, 8]))
    group = int(rng.choice([24, 32, 48, 64, 96, 128, 256]))
    return {"call": "effective_bits", "args": [bits, group], "kwargs": {}}


@judges_value
def judge_bits(probe, got):
    bits, group = probe["args"]
    scale_bits = probe["kwargs"].get("scale_bits", 16)
    expected = ANSWERS.effective_bits(bits, group, scale_bits)
    verdict = judge_number(got, expected, MISTAKES.of_effective_bits(bits, group, scale_bits), "the bits per weight")
    if verdict.passed:
        return verdict
    given = "".join(f", {key}={value}" for key, value in probe["kwargs"].items())
    return Verdict(False, f"effective_bits({bits}, {group}{given}): {verdict.hint}")  # the inputs are drawn


EFFECTIVE_BITS = Exercise(
    "effective_bits",
    ("effective_bits",),
    [
        Check(
            "default_scale",
            1,
            "a width and a group size, an fp16 scale",
            probe_random_bits,
            judge_bits,
            visible=True,
        ),
    ],
)
