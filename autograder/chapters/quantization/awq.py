"""Chapter 3's exercise awq_quantize with its visible checks. Each judge compares with the
chapter's answer (``ANSWERS``, its solution cell) and names the known mistake it matches
(``MISTAKES``, ``autograder/mistakes/quantization/awq.py``: AWQ with one step changed); the hidden
checks are ``autograder/hidden/quantization.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.chapters.quantization.absmax import ANSWERS, MISTAKES, normal
from autograder.checks import (
    Check,
    Exercise,
    Verdict,
    as_tensor,
    compare_tensors,
    diagnose,
    number,
    outcome,
)
from course import withheld

DEAD_CHANNEL_HINT = (
    "NaN or infinity in the errors: a channel that never fires has mean |x| 0, so 0 ** alpha is 0 (and 0 ** -alpha "
    "infinite); clamp s = mean|x| ** alpha to at least 1e-4 (s.clamp(min=1e-4)) before dividing by it"
)


def awq_inputs(rng: np.random.Generator, tokens: int, cols: int, salient: int, dead: bool = False):
    """Calibration inputs with ``salient`` channels 15 times larger and correlated features: (H, mean |x|)."""
    mixing = torch.from_numpy(rng.normal(0.0, 0.3, size=(cols, cols)) + np.eye(cols))
    x = torch.from_numpy(rng.normal(0.0, 1.0, size=(tokens, cols))) @ mixing
    x[:, torch.from_numpy(rng.choice(cols, size=salient, replace=False))] *= 15.0
    if dead:
        x[:, int(rng.integers(cols))] = 0.0
    return x.T @ x / tokens, x.abs().mean(dim=0)


def probe_awq(rows, cols, bits, group, grid=20, salient=2, uniform=False, dead=False):
    def make(rng):
        weight = normal(rng, rows, cols).double()
        hessian, mean_abs = awq_inputs(rng, 4 * cols, cols, salient, dead)
        if dead:  # the dead channel's weights large: only a scale of 1e-4 keeps them out of their groups' absmax
            weight[:, mean_abs == 0] *= 50.0
        if uniform:
            mean_abs = torch.ones(cols, dtype=torch.float64)  # s = 1 ** alpha = 1: exact ties
        return {
            "call": "awq_quantize",
            "args": [weight, hessian, mean_abs, bits],
            "kwargs": {"group_size": group, "grid": grid},
        }

    return make


def awq_answer(result, grid):
    """(alpha, approx, errors, failing verdict or None) of the learner's answer."""
    got, failed = outcome(result)
    if failed:
        return None, None, None, failed
    if not (isinstance(got, tuple) and len(got) == 3):
        return None, None, None, Verdict(False, "awq_quantize should return a tuple (alpha, approx, errors)")
    alpha, problem = number(got[0], "alpha")
    approx, problem_approx = as_tensor(got[1], "the approximation")
    errors, problem_errors = as_tensor(torch.as_tensor(got[2]) if isinstance(got[2], list) else got[2], "the errors")
    if problem or problem_approx or problem_errors:
        return None, None, None, Verdict(False, problem or problem_approx or problem_errors)
    if errors.numel() != grid:
        return None, None, None, Verdict(False, f"{errors.numel()} errors, expected one per exponent: {grid}")
    if not (torch.isfinite(errors).all() and torch.isfinite(approx).all()):
        return None, None, None, Verdict(False, DEAD_CHANNEL_HINT)
    return alpha, approx, errors.reshape(-1), None


def judge_awq(probe, result):
    """The errors and the chosen exponent the reference's (float64: no near ties), the approximation
    close; otherwise the named mistake whose errors the answer's match."""
    weight, hessian, mean_abs, bits = probe["args"]
    group, grid = probe["kwargs"]["group_size"], probe["kwargs"]["grid"]
    alpha, approx, errors, failed = awq_answer(result, grid)
    if failed:
        return failed
    ref_alpha, ref_approx, ref_errors = ANSWERS.awq_quantize(weight, hessian, mean_abs, bits, group, grid)
    ref_errors = torch.as_tensor(ref_errors, dtype=torch.float64)
    if withheld.is_recording():  # so that the learners' copy can name any mistake, as checks.diagnose does
        MISTAKES.of_awq_quantize(weight, hessian, mean_abs, bits, group, grid)
    same_errors, difference = compare_tensors(errors, ref_errors, rtol=1e-6, atol=1e-12)
    if not same_errors:
        if not errors.any():
            return Verdict(
                False,
                "the errors are all zeros: each is tr((W - W_hat) H (W - W_hat)^T) of that exponent's "
                f"W_hat = Q(W * s) / s (errors: {difference})",
            )
        for hint, wrong in MISTAKES.of_awq_quantize(weight, hessian, mean_abs, bits, group, grid):
            if wrong is None:  # a mistake that makes s infinite has no finite errors to match
                continue
            if not torch.allclose(wrong, ref_errors, rtol=1e-6) and compare_tensors(errors, wrong, rtol=1e-6)[0]:
                return Verdict(False, f"{hint} (errors: {difference})")
        return Verdict(False, f"the errors: {difference}")
    if abs(alpha - ref_alpha) > 1e-9:
        tied = [i / grid for i in range(grid) if ref_errors[i] == ref_errors.min()]
        if len(tied) > 1 and any(abs(alpha - t) <= 1e-9 for t in tied):
            return Verdict(
                False,
                f"alpha {alpha:.4g}, expected {ref_alpha:.4g}: {len(tied)} exponents tie for the least error and "
                "the first of them is the answer; replace the best only on a strictly smaller error (< rather "
                "than <=, or argmin, which takes the first)",
            )
        return Verdict(False, f"alpha {alpha:.4g}, expected {ref_alpha:.4g}: the exponent of the least error")
    return diagnose(approx, ref_approx, [], "the approximation", rtol=1e-7, atol=1e-12)


AWQ = Exercise(
    "awq_quantize",
    ("awq_quantize",),
    [
        Check(
            "uniform",
            1,
            "channels all equally active (mean |x| 1): every s is 1, so every error is round-to-nearest's and "
            "all tie: alpha 0, the first",
            probe_awq(8, 32, 4, 8, uniform=True),
            judge_awq,
            visible=True,
        ),
        Check(
            "salient",
            2,
            "two salient channels, 4 bits, groups of 16 (float64: the reference's errors and alpha exactly)",
            probe_awq(16, 64, 4, 16),
            judge_awq,
            visible=True,
        ),
        Check(
            "dead_channel",
            1,
            "an input channel that never fires (mean |x| 0): s = mean|x| ** alpha, then at least 1e-4",
            probe_awq(8, 32, 4, 16, dead=True),
            judge_awq,
            visible=True,
        ),
    ],
    builds_on=("quantize_dequantize",),
)
