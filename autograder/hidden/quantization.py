"""Chapter 3's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

import torch

from autograder.chapters.quantization.absmax import (
    ANSWERS,
    judge_bits,
    judge_int8,
    judge_relative_error,
    judge_round_trip,
    judging_rejection,
    probe_bits,
    probe_int8,
    probe_relative_error,
    probe_round_trip,
    rejects_a_bad_group,
    round_trip_verdict,
)
from autograder.chapters.quantization.awq import judge_awq, probe_awq
from autograder.chapters.quantization.gptq import judge_gptq_codes, judge_gptq_error, probe_gptq
from autograder.checks import Check, Requirement, Verdict, judges_tensor
from course import quantization, reference

# --- inputs and judges only the hidden checks use -----------------------------------------------------


def probe_chapter_matrix(rng):
    return {
        "call": "quantize_dequantize",
        "args": [quantization.outlier_matrix(256, 512, seed=0), 4],
        "kwargs": {"group_size": 32},
    }


@judges_tensor("the dequantized matrix")
def judge_chapter_number(probe, got):
    weight = probe["args"][0]
    if got.shape != weight.shape or torch.isnan(got).any():
        return round_trip_verdict(probe, got)
    entry = reference.load("quantization")["outlier_int4_g32"]
    error = ANSWERS.relative_error(weight, got.float())
    if reference.close(entry, error):
        return Verdict(True)
    named = round_trip_verdict(probe, got)
    return Verdict(
        False,
        f"relative error {error:.4f} on the chapter's matrix; the reference is "
        f"{entry['value']:.4f} +- {entry['tolerance']}" + ("" if named.passed else f": {named.hint}"),
    )


def probe_gptq_bad_group(rng):
    probe = probe_gptq(4, 64, 4, 16)(rng)
    return probe | {"kwargs": {**probe["kwargs"], "bad_group_size": 48}, "scenario": rejects_a_bad_group}


def probe_awq_bad_group(rng):
    probe = probe_awq(4, 64, 4, 16, grid=8)(rng)
    return probe | {"kwargs": {**probe["kwargs"], "bad_group_size": 48}, "scenario": rejects_a_bad_group}


HIDDEN = {
    "quantize_dequantize": [
        Check("other_bits", 1, "3 and 6 bits, groups of 12", probe_round_trip(12, 48, 3, 12), judge_round_trip),
        Check(
            "six_bits",
            1,
            "6 bits, one scale per row, outliers, a float64 matrix",
            probe_round_trip(24, 40, 6, None, outliers=True, dtype=torch.float64),
            judge_round_trip,
        ),
        Check("chapter_number", 1, "the chapter's int4 group-32 error", probe_chapter_matrix, judge_chapter_number),
    ],
    "relative_error": [
        Check(
            "zeros",
            1,
            "an approximation with zeroed columns",
            probe_relative_error(20, 24, zeros_in_approx=True),
            judge_relative_error,
        ),
    ],
    "int8": [
        Check("zero_row", 1, "an all-zero row", probe_int8(6, 16, zero_row=True), judge_int8),
        Check("wide", 1, "a wide matrix with an outlier column", probe_int8(4, 300), judge_int8),
    ],
    "effective_bits": [
        Check("other", 1, "int8 with an fp32 scale per 128 weights", probe_bits(8, 128, 32), judge_bits),
    ],
    "gptq_quantize": [
        Check(
            "few_samples",
            1,
            "a Hessian from fewer samples than columns (singular until damped), groups of 16",
            probe_gptq(6, 48, 4, 16, samples=20),
            judge_gptq_codes,
        ),
        Check(
            "output_error",
            1,
            "float32, 64 x 128, groups of 32: the output error tr((W-Q)H(W-Q)^T) against round-to-nearest's",
            probe_gptq(64, 128, 4, 32, dtype=torch.float32),
            judge_gptq_error,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns (48 of 64), the codes when it does (16)",
            probe_gptq_bad_group,
            judging_rejection(judge_gptq_codes),
        ),
    ],
    "awq_quantize": [
        Check(
            "per_row",
            1,
            "3 bits, one scale per row, a grid of 8 exponents",
            probe_awq(12, 48, 3, None, grid=8, salient=3),
            judge_awq,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns (48 of 64), AWQ when it does (16)",
            probe_awq_bad_group,
            judging_rejection(judge_awq),
        ),
    ],
}

REQUIREMENTS = {
    "quantize_dequantize": [
        Requirement(
            "the (rows, cols) matrix after a round trip through symmetric bits-bit codes, rounded to the nearest",
            ("int8_per_row", "int4_groups", "other_bits", "six_bits"),
        ),
        Requirement("one scale per row when group_size is None", ("int8_per_row", "six_bits")),
        Requirement("one scale per group_size consecutive columns", ("int4_groups", "other_bits", "chapter_number")),
        Requirement("ValueError when group_size does not divide the columns", ("bad_group",)),
        Requirement("an all-zero group comes back as zeros, not NaN", ("zero_groups",)),
        Requirement(
            "any bit width (3, 4, 6, 8); float64 matrices work too", ("other_bits", "six_bits", "int8_per_row")
        ),
    ],
    "relative_error": [
        Requirement("||W - W_hat||_F / ||W||_F", ("random", "zeros")),
        Requirement("returned as a Python float", ("random",)),
    ],
    "int8": [
        Requirement(
            "quantize_int8: codes of dtype torch.int8 in [-127, 127], rounded", ("codes_and_scale", "zero_row", "wide")
        ),
        Requirement(
            "quantize_int8: scale of shape (rows, 1), absmax / 127 per row", ("codes_and_scale", "zero_row", "wide")
        ),
        Requirement("an all-zero row: codes 0, no NaN (edge case)", ("zero_row",)),
        Requirement("dequantize_int8: codes * scale as floats", ("dequantize",)),
    ],
    "effective_bits": [
        Requirement("bits + scale_bits / group_size", ("default_scale", "other")),
        Requirement("scale_bits defaults to 16", ("default_scale",)),
        Requirement("scale_bits given", ("other",)),
    ],
    "gptq_quantize": [
        Requirement(
            "codes column by column, each column's error spread over the rest with the upper Cholesky factor of H^-1",
            (
                "per_row",
                "groups",
                "few_samples",
                "output_error",
            ),
        ),
        Requirement("an identity Hessian gives round-to-nearest (edge case)", ("identity",)),
        Requirement(
            "H damped by damping * mean(diag(H)) before inverting",
            ("few_samples", "per_row"),
        ),
        Requirement(
            "each group's scale from the error-updated weights when the sweep reaches it",
            ("groups", "few_samples"),
        ),
        Requirement(
            "returns (codes, scale) as quantize does: scale (rows, cols // group_size)",
            ("identity", "groups"),
        ),
        Requirement("ValueError when group_size does not divide the columns", ("bad_group",)),
        Requirement("an all-zero group: codes 0 and scale 0, no NaN (edge case)", ("zero_groups",)),
        Requirement("works on a copy: the weight passed in is left unchanged", ("copy",)),
        Requirement("computes in the weight's own dtype: float64 in, a float64 scale out", ("dtype",)),
    ],
    "awq_quantize": [
        Requirement(
            "each column scaled by s = mean|x| ** alpha before rounding and divided by it after",
            ("salient", "per_row", "dead_channel"),
        ),
        Requirement(
            "alpha searched over 0, 1/grid, ..., (grid - 1)/grid by the output error with H, every error returned",
            ("uniform", "salient", "per_row"),
        ),
        Requirement("equally active channels give round to nearest (edge case)", ("uniform",)),
        Requirement("the first exponent of the least error when several tie", ("uniform",)),
        Requirement("s clamped to at least 1e-4: a channel that never fires (edge case)", ("dead_channel",)),
        Requirement("ValueError when group_size does not divide the columns", ("bad_group",)),
    ],
}
