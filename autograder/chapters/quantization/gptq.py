"""Chapter 3's exercise gptq_quantize with its visible checks. Each judge compares with the
chapter's answer (``ANSWERS``, its solution cell) and names the known mistake it matches
(``MISTAKES``, ``autograder/mistakes/quantization/gptq.py``: GPTQ with one step changed); the
hidden checks are ``autograder/hidden/quantization.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.chapters.quantization.absmax import (
    ANSWERS,
    MISTAKES,
    ZERO_GROUP_HINT,
    normal,
    too_many_levels_hint,
)
from autograder.checks import Check, Exercise, Verdict, as_tensor, diagnose, outcome
from course import quantization


def correlated_hessian(rng: np.random.Generator, cols: int, samples: int) -> torch.Tensor:
    """H = X^T X / n of inputs with correlated features and uneven scales, as a layer sees.

    The products are torch's: numpy's bundled OpenBLAS hung (spinning) when two grading threads
    multiplied at once."""
    mixing = torch.from_numpy(rng.normal(0.0, 0.4, size=(cols, cols)) + np.eye(cols))
    x = torch.from_numpy(rng.normal(0.0, 1.0, size=(samples, cols))) @ mixing
    x = x * torch.from_numpy(rng.uniform(0.3, 3.0, size=cols))
    return x.T @ x / samples  # float64


def gptq_on_a_copy(function, weight, *args, **kwargs) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function(weight, ...)``'s
    answer, and whether the call changed ``weight`` itself."""
    before = weight.clone()
    answer = function(weight, *args, **kwargs)
    return {"answer": answer, "weight_changed": not weight.equal(before)}


def probe_gptq(rows, cols, bits, group, identity=False, dtype=torch.float64, samples=None, scenario=None, zeros=False):
    def make(rng):
        weight = normal(rng, rows, cols).to(dtype)
        if zeros:  # an all-zero row, and an all-zero group in another (an identity Hessian keeps it zero)
            weight[2] = 0.0
            weight[-1, group : 2 * group] = 0.0
        hessian = (
            torch.eye(cols, dtype=torch.float64) if identity else correlated_hessian(rng, cols, samples or 2 * cols)
        )
        probe = {"call": "gptq_quantize", "args": [weight, hessian.to(dtype), bits], "kwargs": {"group_size": group}}
        return probe | ({"scenario": scenario} if scenario else {})

    return make


NOT_POSITIVE_DEFINITE = (
    "the Cholesky factorisation failed: a Hessian from fewer samples than columns is singular, and with no "
    "damping, or one too small for H's scale, it stays so; add damping * mean(diag(H)) to H's diagonal before "
    "inverting it"
)


def gptq_result(probe, result):
    """(codes, scale, failing verdict or None) of the learner's answer, in float64."""
    got, failed = outcome(result)
    if failed:
        return None, None, Verdict(False, NOT_POSITIVE_DEFINITE) if "positive-definite" in failed.hint else failed
    if not (isinstance(got, tuple) and len(got) == 2):
        return None, None, Verdict(False, "gptq_quantize should return a tuple (codes, scale)")
    codes, problem = as_tensor(got[0], "the codes")
    scale, problem_scale = as_tensor(got[1], "the scale")
    if problem or problem_scale:
        return None, None, Verdict(False, problem or problem_scale)
    if torch.isnan(codes).any() or torch.isnan(scale).any():
        return None, None, Verdict(False, ZERO_GROUP_HINT)
    return codes, scale, None


def judging_gptq(judge):
    """A judge of (probe, result) that reads the answer once (:func:`gptq_result`) and gives ``judge``
    the codes, the scale and the probe's weight, Hessian, bits and group size; or the failing verdict."""

    def judged(probe, result):
        codes, scale, failed = gptq_result(probe, result)
        weight, hessian, bits = probe["args"]
        group = probe["kwargs"].get("group_size")
        return failed if failed is not None else judge(codes, scale, weight, hessian, bits, group)

    return judged


def gptq_codes_verdict(codes, scale, weight, hessian, bits, group):
    """Codes exactly the reference's (float64 inputs: no rounding ties to forgive), scales close."""
    ref_codes, ref_scale = ANSWERS.gptq_quantize(weight.double(), hessian.double(), bits, group)

    def mistakes():
        return [(hint, wrong[0]) for hint, wrong in MISTAKES.of_gptq_quantize(weight, hessian, bits, group)]

    verdict = diagnose(codes, ref_codes.double(), mistakes, atol=0.0, rtol=0.0)
    if not verdict.passed:
        return Verdict(False, f"codes: {verdict.hint}")
    return diagnose(
        scale.reshape(ref_scale.shape) if scale.numel() == ref_scale.numel() else scale,
        ref_scale,
        [],
        "scale",
        rtol=1e-6,
    )


judge_gptq_codes = judging_gptq(gptq_codes_verdict)


@judging_gptq
def judge_gptq_error(codes, scale, weight, hessian, bits, group):
    """Float32 inputs: the output error tr((W-Q) H (W-Q)^T) over round-to-nearest's, within 2% of the reference's."""
    if codes.numel() and not codes.any():
        return Verdict(
            False, "the codes are all zeros: round each column's error-updated weights to their group's scale"
        )
    if tuple(codes.shape) != tuple(weight.shape):
        return Verdict(False, f"codes of shape {tuple(codes.shape)}, expected {tuple(weight.shape)}, one per weight")
    if torch.equal(codes, codes.round()) and quantization.absmax_levels(bits) < codes.abs().max() <= 2**bits - 1:
        return Verdict(False, f"codes up to {codes.abs().max():.0f}: {too_many_levels_hint(bits)}")
    if codes.abs().max() > quantization.absmax_levels(bits) or not torch.equal(codes, codes.round()):
        return Verdict(
            False,
            f"codes must be whole numbers in [-{quantization.absmax_levels(bits)}, {quantization.absmax_levels(bits)}]",
        )
    try:
        approx = quantization.dequantize(codes, scale.reshape(weight.shape[0], -1))
    except (ValueError, RuntimeError):
        return Verdict(False, f"scale of shape {tuple(scale.shape)} does not fit the codes: one per row and group")
    rtn = quantization.output_error(weight, ANSWERS.quantize_dequantize(weight.double(), bits, group), hessian)
    ratio = quantization.output_error(weight, approx, hessian) / rtn
    answer = quantization.dequantize(*ANSWERS.gptq_quantize(weight.double(), hessian.double(), bits, group))
    expected = quantization.output_error(weight, answer, hessian) / rtn
    if abs(ratio - expected) <= 0.02 * expected:
        return Verdict(True)
    near = []  # (relative distance, hint) of each mistake whose output error is the answer's, within 5%
    for hint, made in MISTAKES.of_gptq_quantize(weight, hessian, bits, group):
        wrong = quantization.output_error(weight, quantization.dequantize(*made), hessian) / rtn
        if abs(wrong - expected) > 0.02 * expected and abs(ratio - wrong) <= 0.05 * wrong:
            near.append((abs(ratio - wrong) / wrong, hint))
    if near:  # the closest: two mistakes can land within 5% of each other
        hint = min(near)[1]
        return Verdict(False, f"{hint} (output error {ratio:.3f} of round-to-nearest's; GPTQ's is {expected:.3f})")
    return Verdict(False, f"output error {ratio:.3f} of round-to-nearest's; GPTQ's is {expected:.3f}")


IN_PLACE_HINT = (
    "the weight passed in was changed: the sweep must run on a copy, w = weight.clone() (weight.double() and "
    "weight.to(weight.dtype) return the weight itself when it already has that dtype)"
)


def judge_gptq_copy(probe, result):
    """The weight passed in left as it was (the :func:`gptq_on_a_copy` scenario), then the codes."""
    got, failed = outcome(result)
    if failed:
        return judge_gptq_codes(probe, result)  # says what happened, as the other checks do
    if not isinstance(got, dict) or "answer" not in got:
        return Verdict(False, f"gptq_quantize could not be tested: {got!r}"[:200])
    if got.get("weight_changed"):
        return Verdict(False, IN_PLACE_HINT)
    return judge_gptq_codes(probe, {"returned": result["returned"]["dict"]["answer"]})


def judge_gptq_dtype(probe, result):
    """A float64 weight: the scale comes back in float64 (the sweep ran in the weight's dtype), then the codes."""
    got, _ = outcome(result)
    scale = got[1] if isinstance(got, tuple) and len(got) == 2 else None
    if isinstance(scale, torch.Tensor) and scale.is_floating_point() and scale.dtype != torch.float64:
        return Verdict(
            False,
            f"the scale is {scale.dtype} for a float64 weight: the sweep ran in lower precision (weight.float()?); "
            "work on a copy in the weight's own dtype, w = weight.clone(), and make the scale in it",
        )
    return judge_gptq_codes(probe, result)


@judging_gptq
def judge_gptq_zero_groups(codes, scale, weight, hessian, bits, group):
    """All-zero groups: codes 0 and a scale of 0 (or a tiny one), then the codes of every other group."""
    empty = weight.double().reshape(len(weight), -1, group).abs().amax(dim=-1) == 0  # (rows, groups)
    zero_codes = codes.reshape(empty.shape[0], empty.shape[1], -1)[empty] if codes.numel() == weight.numel() else None
    if torch.isinf(codes).any() or torch.isinf(scale).any() or (zero_codes is not None and zero_codes.any()):
        return Verdict(False, f"codes of an all-zero group are not 0: {ZERO_GROUP_HINT}")
    return gptq_codes_verdict(codes, scale, weight, hessian, bits, group)


GPTQ = Exercise(
    "gptq_quantize",
    ("gptq_quantize",),
    [
        Check(
            "identity",
            1,
            "an identity Hessian gives round-to-nearest's codes and scales",
            probe_gptq(8, 32, 4, 8, identity=True),
            judge_gptq_codes,
            visible=True,
        ),
        Check(
            "per_row",
            2,
            "a correlated Hessian, 3 bits, one scale per row (float64: the reference's codes exactly)",
            probe_gptq(12, 24, 3, None),
            judge_gptq_codes,
            visible=True,
        ),
        Check(
            "groups",
            2,
            "4 bits, groups of 8, scales from the error-updated weights (float64: the reference's codes exactly)",
            probe_gptq(10, 32, 4, 8),
            judge_gptq_codes,
            visible=True,
        ),
        Check(
            "copy",
            1,
            "the weight passed in is left unchanged: the sweep works on a copy",
            probe_gptq(6, 16, 4, 8, scenario=gptq_on_a_copy),
            judge_gptq_copy,
            visible=True,
        ),
        Check(
            "dtype",
            1,
            "a float64 weight: the sweep in its own dtype, the scale returned in float64",
            probe_gptq(6, 24, 4, 8),
            judge_gptq_dtype,
            visible=True,
        ),
        Check(
            "zero_groups",
            1,
            "an all-zero row and an all-zero group: codes 0 and scale 0, not NaN",
            probe_gptq(8, 32, 4, 8, identity=True, zeros=True),
            judge_gptq_zero_groups,
            visible=True,
        ),
    ],
)
