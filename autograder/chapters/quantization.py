"""Chapter 3's exercises: quantize_dequantize, relative_error, quantize_int8 / dequantize_int8,
effective_bits, gptq_quantize, awq_quantize. Each check names the mistakes it can recognise in its hint."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    as_tensor,
    compare_tensors,
    diagnose,
    judge_number,
    judge_raises,
    judges_tensor,
    judges_value,
    number,
    outcome,
)
from course import quantization, reference, withheld

# --- inputs ---------------------------------------------------------------------------------------


def _normal(rng: np.random.Generator, rows: int, cols: int, std: float = 0.02) -> torch.Tensor:
    return torch.from_numpy(rng.normal(0.0, std, size=(rows, cols)).astype(np.float32))


def _with_outlier_columns(rng: np.random.Generator, rows: int, cols: int, n: int = 2, magnitude: float = 25.0):
    weight = _normal(rng, rows, cols)
    columns = rng.choice(cols, size=n, replace=False)
    weight[:, columns] *= magnitude
    return weight


# --- the common mistakes, recomputed on the learner's inputs ----------------------------------------


ROUNDINGS = {"round": torch.round, "trunc": torch.trunc, "floor": torch.floor}


@withheld.withheld
def _grouped_round_trip(weight, bits, group, levels=None, rounding="round", dequantize=True, high=None, signed=False):
    """The round trip with one thing changed. Computed in the input's precision, as learners do:
    truncation is discontinuous at the integers, where float32 and float64 can land apart.
    Codes are clamped to [-levels, high] (``high`` is levels unless given); ``rounding`` names a
    function of :data:`ROUNDINGS`; ``signed`` takes the scale's maximum of the values themselves,
    not of their absolute values."""
    rows, cols = weight.shape
    group = cols if group is None else group
    levels = quantization.absmax_levels(bits) if levels is None else levels
    grouped = weight.reshape(rows, cols // group, group)  # (rows, groups, group)
    scale = (grouped if signed else grouped.abs()).amax(dim=-1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # only the named mistake differs
    codes = ROUNDINGS[rounding](grouped / scale).clamp(-levels, levels if high is None else high)
    out = codes * scale if dequantize else codes
    return out.reshape(rows, cols)


@withheld.withheld
def _asymmetric_round_trip(weight, bits, group):
    """Min-max quantization with a zero point: what learners who know the asymmetric scheme write."""
    rows, cols = weight.shape
    group = cols if group is None else group
    grouped = weight.reshape(rows, cols // group, group)
    low, high = grouped.amin(dim=-1, keepdim=True), grouped.amax(dim=-1, keepdim=True)
    scale = (high - low) / (2**bits - 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-low / scale)
    codes = (torch.round(grouped / scale) + zero).clamp(0, 2**bits - 1)
    return ((codes - zero) * scale).reshape(rows, cols)


def too_many_levels_hint(bits: int) -> str:
    """The diagnosis of 2**bits - 1 levels, shared by every exercise that rounds to codes."""
    return (
        f"{2**bits - 1} levels instead of {quantization.absmax_levels(bits)}: the largest code of a symmetric "
        f"{bits}-bit scheme is 2**(bits-1) - 1"
    )


def quantize_mistakes(weight: torch.Tensor, bits: int, group) -> list:
    levels = quantization.absmax_levels(bits)
    mistakes = [
        (too_many_levels_hint(bits), lambda: _grouped_round_trip(weight, bits, group, levels=2**bits - 1)),
        (
            f"scale divided by {2 ** (bits - 1)}, one level too many: use 2**(bits-1) - 1 = {levels}",
            lambda: _grouped_round_trip(weight, bits, group, levels=2 ** (bits - 1)),
        ),
        (
            f"scale divided by {2 ** (bits - 1)} and codes clamped to [{-(2 ** (bits - 1))}, {2 ** (bits - 1) - 1}], "
            f"the range of a signed integer: the symmetric scheme uses 2**(bits-1) - 1 = {levels} levels each "
            f"side, codes in [-{levels}, {levels}]",
            lambda: _grouped_round_trip(weight, bits, group, levels=2 ** (bits - 1), high=2 ** (bits - 1) - 1),
        ),
        (
            "the scale came from the largest value, not the largest magnitude: take .abs().amax()",
            lambda: _grouped_round_trip(weight, bits, group, signed=True),
        ),
        (
            "every value rounded to 0, as when the scale is multiplied by the number of levels (a step larger "
            "than every weight): scale = absmax / (2**(bits-1) - 1)",
            lambda: _grouped_round_trip(weight, bits, group, levels=1 / levels),
        ),
        (
            "min-max quantization with a zero point: this exercise is symmetric absmax, scale = absmax / "
            f"{levels}, no zero point",
            lambda: _asymmetric_round_trip(weight, bits, group),
        ),
        (
            "values were truncated toward zero: round to the nearest code with torch.round",
            lambda: _grouped_round_trip(weight, bits, group, rounding="trunc"),
        ),
        (
            "values were floored: round to the nearest code with torch.round",
            lambda: _grouped_round_trip(weight, bits, group, rounding="floor"),
        ),
        (
            "returned the integer codes: multiply them back by the scale",
            lambda: _grouped_round_trip(weight, bits, group, dequantize=False),
        ),
        (
            "one scale for the whole matrix: take the absmax per row (dim=1) or per group",
            lambda: _grouped_round_trip(weight.reshape(1, -1), bits, None).reshape(weight.shape),
        ),
    ]
    if group is not None:
        mistakes += [
            (
                "group_size was ignored: one scale per row; reshape to (rows, cols // group_size, group_size)",
                lambda: _grouped_round_trip(weight, bits, None),
            ),
            (
                "groups were taken down the columns (consecutive rows): group consecutive columns within a row",
                lambda: _grouped_round_trip(weight.T.contiguous(), bits, group).T,
            ),
        ]
    return mistakes


ZERO_GROUP_HINT = (
    "an all-zero group has scale 0 and 0/0 gives NaN: give such groups scale 1 "
    "(torch.where(scale > 0, scale, 1)) or clamp the scale to a tiny minimum"
)


def _round_trip_verdict(probe: dict, got: torch.Tensor) -> Verdict:
    weight, bits = probe["args"]
    group = probe["kwargs"].get("group_size")
    expected = quantization.quantize_dequantize(weight.double(), bits, group)
    step = 2 * quantization.half_step(weight.double(), bits, group)
    if torch.isnan(got).any():
        return Verdict(False, ZERO_GROUP_HINT)
    return diagnose(got, expected, quantize_mistakes(weight, bits, group), step=step)


_judge_round_trip = judges_tensor("the dequantized matrix")(_round_trip_verdict)


def _probe_round_trip(rows, cols, bits, group, outliers=False, dtype=torch.float32):
    def make(rng):
        weight = _with_outlier_columns(rng, rows, cols) if outliers else _normal(rng, rows, cols)
        return {"call": "quantize_dequantize", "args": [weight.to(dtype), bits], "kwargs": {"group_size": group}}

    return make


def _probe_zero_groups(rng):
    weight = _normal(rng, 8, 32)
    weight[2] = 0.0  # an all-zero row
    weight[5, 8:16] = 0.0  # an all-zero group
    return {"call": "quantize_dequantize", "args": [weight, 4], "kwargs": {"group_size": 8}}


@judges_tensor("the dequantized matrix")
def _judge_zero_groups(probe, got):
    if torch.isnan(got).any() or torch.isinf(got).any():
        return Verdict(False, ZERO_GROUP_HINT)
    return _round_trip_verdict(probe, got)


def _probe_bad_group(rng):
    return {"call": "quantize_dequantize", "args": [_normal(rng, 4, 64), 4], "kwargs": {"group_size": 48}}


def _probe_chapter_matrix(rng):
    return {
        "call": "quantize_dequantize",
        "args": [quantization.outlier_matrix(256, 512, seed=0), 4],
        "kwargs": {"group_size": 32},
    }


@judges_tensor("the dequantized matrix")
def _judge_chapter_number(probe, got):
    weight = probe["args"][0]
    if got.shape != weight.shape or torch.isnan(got).any():
        return _round_trip_verdict(probe, got)
    entry = reference.load("quantization")["outlier_int4_g32"]
    error = quantization.relative_error(weight, got.float())
    if reference.close(entry, error):
        return Verdict(True)
    named = _round_trip_verdict(probe, got)
    return Verdict(
        False,
        f"relative error {error:.4f} on the chapter's matrix; the reference is "
        f"{entry['value']:.4f} +- {entry['tolerance']}" + ("" if named.passed else f": {named.hint}"),
    )


QUANTIZE_DEQUANTIZE = Exercise(
    "quantize_dequantize",
    ("quantize_dequantize",),
    [
        Check(
            "int8_per_row",
            1,
            "int8, one scale per row",
            _probe_round_trip(16, 64, 8, None),
            _judge_round_trip,
            visible=True,
        ),
        Check(
            "int4_groups",
            2,
            "int4, groups of 16, outlier columns",
            _probe_round_trip(32, 64, 4, 16, outliers=True),
            _judge_round_trip,
            visible=True,
        ),
        Check("other_bits", 1, "3 and 6 bits, groups of 12", _probe_round_trip(12, 48, 3, 12), _judge_round_trip),
        Check(
            "six_bits",
            1,
            "6 bits, one scale per row, outliers, a float64 matrix",
            _probe_round_trip(24, 40, 6, None, outliers=True, dtype=torch.float64),
            _judge_round_trip,
        ),
        Check(
            "zero_groups",
            1,
            "all-zero rows and groups give zeros, not NaN",
            _probe_zero_groups,
            _judge_zero_groups,
            visible=True,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns",
            _probe_bad_group,
            lambda probe, result: judge_raises(
                result, "ValueError", "check `cols % group_size` and raise ValueError with a message"
            ),
            visible=True,
        ),
        Check("chapter_number", 1, "the chapter's int4 group-32 error", _probe_chapter_matrix, _judge_chapter_number),
    ],
    requirements=[
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
)


# --- relative_error ------------------------------------------------------------------------------


def _probe_relative_error(rows, cols, zeros_in_approx=False):
    def make(rng):
        weight = _normal(rng, rows, cols)
        approx = weight + _normal(rng, rows, cols, std=0.004)
        if zeros_in_approx:
            approx[:, : cols // 4] = 0.0
        return {"call": "relative_error", "args": [weight, approx], "python_float": not zeros_in_approx}

    return make


@withheld.withheld
def _relative_error_mistakes(weight: torch.Tensor, approx: torch.Tensor) -> list[tuple[str, float]]:
    """(hint, the value that mistake gives) for ``weight`` and ``approx`` (float64)."""
    diff, norm_w, norm_a = (weight - approx).norm().item(), weight.norm().item(), approx.norm().item()
    return [
        (
            "the squared norms were divided: take the square root (torch.linalg.norm / .norm() does)",
            diff**2 / norm_w**2,
        ),
        ("divided by the norm of the approximation: divide by ||W||, the original", diff / norm_a),
        ("returned the absolute error ||W - W_hat|| without dividing by ||W||", diff),
        (
            "averaged the elementwise relative errors: use the ratio of Frobenius norms",
            ((weight - approx).abs() / weight.abs().clamp(min=1e-12)).mean().item(),
        ),
        (
            "took ||W|| - ||W_hat||, a difference of norms: take the norm of the difference",
            abs(norm_w - norm_a) / norm_w,
        ),
        (
            "compared mean absolute values: the Frobenius norm is the square root of the sum of squares",
            ((weight - approx).abs().mean() / weight.abs().mean()).item(),
        ),
    ]


@judges_value
def _judge_relative_error(probe, got):
    weight, approx = (a.double() for a in probe["args"])
    expected = quantization.relative_error(weight, approx)
    mistakes = _relative_error_mistakes(weight, approx)
    return judge_number(got, expected, mistakes, "the relative error", rel=1e-4, python_float=probe["python_float"])


RELATIVE_ERROR = Exercise(
    "relative_error",
    ("relative_error",),
    [
        Check(
            "random",
            1,
            "a random matrix and a noisy copy",
            _probe_relative_error(16, 32),
            _judge_relative_error,
            visible=True,
        ),
        Check(
            "zeros",
            1,
            "an approximation with zeroed columns",
            _probe_relative_error(20, 24, zeros_in_approx=True),
            _judge_relative_error,
        ),
    ],
    requirements=[
        Requirement("||W - W_hat||_F / ||W||_F", ("random", "zeros")),
        Requirement("returned as a Python float", ("random",)),
    ],
)


# --- quantize_int8 / dequantize_int8 -------------------------------------------------------------


def _probe_int8(rows, cols, zero_row=False):
    def make(rng):
        weight = _with_outlier_columns(rng, rows, cols, n=1)
        if zero_row:
            weight[1] = 0.0
        return {"call": "quantize_int8", "args": [weight]}

    return make


def _judge_int8(probe, result):  # reads the raw result too: the codes' dtype is part of the answer
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
    ref_codes, ref_scale = quantization.quantize_int8(weight.double())
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
    mistakes = [
        (
            "scale = absmax / 128: int8 symmetric codes stop at 127",
            lambda: _grouped_round_trip(weight, 8, None, levels=128, dequantize=False).clamp(-128, 127),
        ),
        (
            "scale = absmax / 255: that is the unsigned range; symmetric int8 uses 127",
            lambda: _grouped_round_trip(weight, 8, None, levels=255, dequantize=False).clamp(-128, 127),
        ),
        (
            "codes were truncated toward zero: round first, then convert to int8",
            lambda: _grouped_round_trip(weight, 8, None, rounding="trunc", dequantize=False),
        ),
        (
            "one scale for the whole matrix: one scale per row",
            lambda: _grouped_round_trip(weight.reshape(1, -1), 8, None, dequantize=False).reshape(weight.shape),
        ),
    ]
    verdict = diagnose(
        codes,
        ref_codes.double(),
        mistakes,
        atol=0.0,
        rtol=0.0,
        step=torch.ones_like(ref_codes.double()),
    )
    if not verdict.passed:
        return Verdict(False, f"codes: {verdict.hint}")
    return diagnose(scale.reshape(-1, 1), ref_scale.double(), [], rtol=1e-5)


def _probe_dequantize(rng):
    weight = _normal(rng, 12, 20)
    codes, scale = quantization.quantize_int8(weight)
    return {"call": "dequantize_int8", "args": [codes, scale]}


@withheld.withheld
def _dequantize_int8_mistakes(codes: torch.Tensor, scale: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """(hint, the matrix that mistake gives) for ``codes`` and ``scale``."""
    return [
        ("divided by the scale: multiply the codes by it", codes.double() / scale.double()),
        ("returned the codes unchanged: multiply them by the scale", codes.double()),
    ]


@judges_tensor("the dequantized matrix")
def _judge_dequantize(probe, got):
    codes, scale = probe["args"]
    expected = quantization.dequantize_int8(codes, scale)
    mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in _dequantize_int8_mistakes(codes, scale)]
    return diagnose(got, expected, mistakes)


INT8 = Exercise(
    "int8",
    ("quantize_int8", "dequantize_int8"),
    [
        Check("codes_and_scale", 1, "int8 codes and per-row scales", _probe_int8(8, 32), _judge_int8, visible=True),
        Check(
            "dequantize",
            1,
            "dequantize_int8 on given codes and scales",
            _probe_dequantize,
            _judge_dequantize,
            visible=True,
        ),
        Check("zero_row", 1, "an all-zero row", _probe_int8(6, 16, zero_row=True), _judge_int8),
        Check("wide", 1, "a wide matrix with an outlier column", _probe_int8(4, 300), _judge_int8),
    ],
    requirements=[
        Requirement(
            "quantize_int8: codes of dtype torch.int8 in [-127, 127], rounded", ("codes_and_scale", "zero_row", "wide")
        ),
        Requirement(
            "quantize_int8: scale of shape (rows, 1), absmax / 127 per row", ("codes_and_scale", "zero_row", "wide")
        ),
        Requirement("an all-zero row: codes 0, no NaN (edge case)", ("zero_row",)),
        Requirement("dequantize_int8: codes * scale as floats", ("dequantize",)),
    ],
)


# --- effective_bits ------------------------------------------------------------------------------


def _probe_bits(bits, group, scale_bits=None):
    def make(rng):
        kwargs = {} if scale_bits is None else {"scale_bits": scale_bits}
        return {"call": "effective_bits", "args": [bits, group], "kwargs": kwargs}

    return make


@withheld.withheld
def _bits_mistakes(bits, group, scale_bits) -> list[tuple[str, float]]:
    """(hint, the bits per weight that mistake gives). Integer division (``//``) rounds the scales'
    share down: to 0 it gives the number of leaving the scales out, and that hint names both."""
    whole = scale_bits // group  # what scale_bits // group_size gives
    if whole == 0:
        left_out = (
            f"the scales' share came out 0: left out (each group also stores one scale) or computed with "
            f"integer division ({scale_bits} // {group} is 0); add scale_bits / group_size, with /"
        )
    else:
        left_out = "the scales were left out: each group also stores one scale"
    divided = f"integer division: {scale_bits} // {group} is {whole}, the share rounded down; divide with /"
    return [
        (left_out, float(bits)),
        *([(divided, float(bits + whole))] if whole else []),
        ("the fraction is upside down: scale_bits / group_size bits per weight", bits + group / scale_bits),
        ("the scale was counted per weight: divide its bits by the group size", float(bits + scale_bits)),
        ("scale bits were multiplied by the group size: divide instead", float(bits + scale_bits * group)),
    ]


@judges_value
def _judge_bits(probe, got):
    bits, group = probe["args"]
    scale_bits = probe["kwargs"].get("scale_bits", 16)
    mistakes = _bits_mistakes(bits, group, scale_bits)
    return judge_number(got, quantization.effective_bits(bits, group, scale_bits), mistakes, "the bits per weight")


EFFECTIVE_BITS = Exercise(
    "effective_bits",
    ("effective_bits",),
    [
        Check("int4_g64", 1, "int4 with an fp16 scale per 64 weights", _probe_bits(4, 64), _judge_bits, visible=True),
        Check("other", 1, "int8 with an fp32 scale per 128 weights", _probe_bits(8, 128, 32), _judge_bits),
    ],
    requirements=[
        Requirement("bits + scale_bits / group_size", ("int4_g64", "other")),
        Requirement("scale_bits defaults to 16", ("int4_g64",)),
        Requirement("scale_bits given", ("other",)),
    ],
)


# --- gptq_quantize -------------------------------------------------------------------------------


def gptq_mistakes(weight, hessian, bits, group) -> list:
    """(hint, codes and scales of that mistake on these inputs), in float64: the course's GPTQ with
    one step changed (see :func:`course.quantization.gptq_quantize`'s keyword-only arguments)."""

    def variant(**changed):
        return lambda: quantization.gptq_quantize(weight.double(), hessian.double(), bits, group, **changed)

    return [
        (
            "no error compensation: these are round-to-nearest's codes; after rounding column j, subtract "
            "(w_j - q_j) / U[j, j] * U[j, j+1:] from the columns not yet quantized (a lower Cholesky factor "
            "does nothing there: its row j is zero past the diagonal; take upper=True)",
            variant(compensate=False),
        ),
        (
            "the error was not divided by U[j, j]: the columns not yet quantized move by "
            "-(w_j - q_j) / U[j, j] * U[j, j+1:]",
            variant(divide=False),
        ),
        (
            "the error was spread with rows of H^-1 itself: use U, the upper Cholesky factor of H^-1 "
            "(torch.linalg.cholesky(H_inv, upper=True)), whose rows already account for the columns done",
            variant(factor="inverse"),
        ),
        (
            "the Cholesky factor of H was used: GPTQ needs the factor of the inverse, H^-1 = U^T U",
            variant(factor="hessian"),
        ),
        (
            "these are the codes of no damping, or of one too small to matter here (a fixed amount such as "
            "1e-3 * I): add damping * mean(diag(H)) to H's diagonal before inverting it, a fraction of H's own scale",
            variant(damping=0.0),
        ),
        (
            "the damping was added as an absolute amount (H + damping * I): it is a fraction of H's scale, "
            "add damping * mean(diag(H)) to the diagonal",
            variant(relative_damping=False),
        ),
        (too_many_levels_hint(bits), variant(levels=2**bits - 1)),
        (
            "each group's scale came from the original weights, fixed before the sweep: take it from the "
            "error-updated weights when the sweep reaches the group's first column",
            variant(scales_from="original"),
        ),
        (
            "the error was added instead of subtracted: the columns not yet quantized move by -error * U[j, j+1:]",
            variant(subtract=False),
        ),
    ]


def _correlated_hessian(rng: np.random.Generator, cols: int, samples: int) -> torch.Tensor:
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


def _probe_gptq(rows, cols, bits, group, identity=False, dtype=torch.float64, samples=None, scenario=None, zeros=False):
    def make(rng):
        weight = _normal(rng, rows, cols).to(dtype)
        if zeros:  # an all-zero row, and an all-zero group in another (an identity Hessian keeps it zero)
            weight[2] = 0.0
            weight[-1, group : 2 * group] = 0.0
        hessian = (
            torch.eye(cols, dtype=torch.float64) if identity else _correlated_hessian(rng, cols, samples or 2 * cols)
        )
        probe = {"call": "gptq_quantize", "args": [weight, hessian.to(dtype), bits], "kwargs": {"group_size": group}}
        return probe | ({"scenario": scenario} if scenario else {})

    return make


NOT_POSITIVE_DEFINITE = (
    "the Cholesky factorisation failed: a Hessian from fewer samples than columns is singular, and with no "
    "damping, or one too small for H's scale, it stays so; add damping * mean(diag(H)) to H's diagonal before "
    "inverting it"
)


def _gptq_result(probe, result):
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


def _judging_gptq(judge):
    """A judge of (probe, result) that reads the answer once (:func:`_gptq_result`) and gives ``judge``
    the codes, the scale and the probe's weight, Hessian, bits and group size; or the failing verdict."""

    def judged(probe, result):
        codes, scale, failed = _gptq_result(probe, result)
        weight, hessian, bits = probe["args"]
        group = probe["kwargs"].get("group_size")
        return failed if failed is not None else judge(codes, scale, weight, hessian, bits, group)

    return judged


def _gptq_codes_verdict(codes, scale, weight, hessian, bits, group):
    """Codes exactly the reference's (float64 inputs: no rounding ties to forgive), scales close."""
    ref_codes, ref_scale = quantization.gptq_quantize(weight.double(), hessian.double(), bits, group)
    mistakes = [(hint, lambda make=make: make()[0]) for hint, make in gptq_mistakes(weight, hessian, bits, group)]
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


_judge_gptq_codes = _judging_gptq(_gptq_codes_verdict)


@_judging_gptq
def _judge_gptq_error(codes, scale, weight, hessian, bits, group):
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
    rtn = quantization.output_error(weight, quantization.quantize_dequantize(weight.double(), bits, group), hessian)
    ratio = quantization.output_error(weight, approx, hessian) / rtn
    expected = (
        quantization.output_error(
            weight, quantization.gptq_quantize_dequantize(weight.double(), hessian, bits, group), hessian
        )
        / rtn
    )
    if abs(ratio - expected) <= 0.02 * expected:
        return Verdict(True)
    near = []  # (relative distance, hint) of each mistake whose output error is the answer's, within 5%
    for hint, make in gptq_mistakes(weight, hessian, bits, group):
        wrong = quantization.output_error(weight, quantization.dequantize(*make()), hessian) / rtn
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


def _judge_gptq_copy(probe, result):
    """The weight passed in left as it was (the :func:`gptq_on_a_copy` scenario), then the codes."""
    got, failed = outcome(result)
    if failed:
        return _judge_gptq_codes(probe, result)  # says what happened, as the other checks do
    if not isinstance(got, dict) or "answer" not in got:
        return Verdict(False, f"gptq_quantize could not be tested: {got!r}"[:200])
    if got.get("weight_changed"):
        return Verdict(False, IN_PLACE_HINT)
    return _judge_gptq_codes(probe, {"returned": result["returned"]["dict"]["answer"]})


def _judge_gptq_dtype(probe, result):
    """A float64 weight: the scale comes back in float64 (the sweep ran in the weight's dtype), then the codes."""
    got, _ = outcome(result)
    scale = got[1] if isinstance(got, tuple) and len(got) == 2 else None
    if isinstance(scale, torch.Tensor) and scale.is_floating_point() and scale.dtype != torch.float64:
        return Verdict(
            False,
            f"the scale is {scale.dtype} for a float64 weight: the sweep ran in lower precision (weight.float()?); "
            "work on a copy in the weight's own dtype, w = weight.clone(), and make the scale in it",
        )
    return _judge_gptq_codes(probe, result)


@_judging_gptq
def _judge_gptq_zero_groups(codes, scale, weight, hessian, bits, group):
    """All-zero groups: codes 0 and a scale of 0 (or a tiny one), then the codes of every other group."""
    empty = weight.double().reshape(len(weight), -1, group).abs().amax(dim=-1) == 0  # (rows, groups)
    zero_codes = codes.reshape(empty.shape[0], empty.shape[1], -1)[empty] if codes.numel() == weight.numel() else None
    if torch.isinf(codes).any() or torch.isinf(scale).any() or (zero_codes is not None and zero_codes.any()):
        return Verdict(False, f"codes of an all-zero group are not 0: {ZERO_GROUP_HINT}")
    return _gptq_codes_verdict(codes, scale, weight, hessian, bits, group)


def _probe_gptq_bad_group(rng):
    return {"call": "gptq_quantize", "args": [_normal(rng, 4, 64), torch.eye(64), 4], "kwargs": {"group_size": 48}}


GPTQ = Exercise(
    "gptq_quantize",
    ("gptq_quantize",),
    [
        Check(
            "identity",
            1,
            "an identity Hessian gives round-to-nearest's codes and scales",
            _probe_gptq(8, 32, 4, 8, identity=True),
            _judge_gptq_codes,
            visible=True,
        ),
        Check(
            "per_row",
            2,
            "a correlated Hessian, 3 bits, one scale per row (float64: the reference's codes exactly)",
            _probe_gptq(12, 24, 3, None),
            _judge_gptq_codes,
            visible=True,
        ),
        Check(
            "groups",
            2,
            "4 bits, groups of 8, scales from the error-updated weights (float64: the reference's codes exactly)",
            _probe_gptq(10, 32, 4, 8),
            _judge_gptq_codes,
            visible=True,
        ),
        Check(
            "copy",
            1,
            "the weight passed in is left unchanged: the sweep works on a copy",
            _probe_gptq(6, 16, 4, 8, scenario=gptq_on_a_copy),
            _judge_gptq_copy,
            visible=True,
        ),
        Check(
            "dtype",
            1,
            "a float64 weight: the sweep in its own dtype, the scale returned in float64",
            _probe_gptq(6, 24, 4, 8),
            _judge_gptq_dtype,
            visible=True,
        ),
        Check(
            "few_samples",
            1,
            "a Hessian from fewer samples than columns (singular until damped), groups of 16",
            _probe_gptq(6, 48, 4, 16, samples=20),
            _judge_gptq_codes,
        ),
        Check(
            "output_error",
            1,
            "float32, 64 x 128, groups of 32: the output error tr((W-Q)H(W-Q)^T) against round-to-nearest's",
            _probe_gptq(64, 128, 4, 32, dtype=torch.float32),
            _judge_gptq_error,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns",
            _probe_gptq_bad_group,
            lambda probe, result: judge_raises(
                result, "ValueError", "check `cols % group_size` and raise ValueError with a message"
            ),
        ),
        Check(
            "zero_groups",
            1,
            "an all-zero row and an all-zero group: codes 0 and scale 0, not NaN",
            _probe_gptq(8, 32, 4, 8, identity=True, zeros=True),
            _judge_gptq_zero_groups,
            visible=True,
        ),
    ],
    requirements=[
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
)


# --- awq_quantize --------------------------------------------------------------------------------


def _awq(weight, hessian, mean_abs, bits, group, grid, **changed):
    """The course's AWQ in float64, with the steps ``changed`` (its keyword-only arguments): (alpha, approx, errors)."""
    return quantization.awq_quantize(weight.double(), hessian.double(), mean_abs, bits, group, grid, **changed)


def awq_mistakes(weight, hessian, mean_abs, bits, group, grid) -> list:
    def variant(**changed):
        return lambda: _awq(weight, hessian, mean_abs, bits, group, grid, **changed)

    return [
        (
            "the rounded weights were not divided by s: W_hat = Q(W * s) / s, so that W_hat x = W x up to rounding",
            variant(unscale=False),
        ),
        (
            "the salient channels were shrunk: s = mean|x| ** alpha multiplies the weights of the most active "
            "channels before rounding (and divides them after)",
            variant(exponent=-1),
        ),
        (
            "the search scored the error of the weights: score the outputs' error tr((W - W_hat) H (W - W_hat)^T), "
            "which weighs each channel by how active it is",
            variant(measure="weights"),
        ),
        (
            "the exponents tried are 0, 1/grid, ..., (grid - 1)/grid (range(grid) divided by grid), not "
            "torch.linspace(0, 1, grid)",
            variant(alphas=torch.linspace(0, 1, grid).tolist()),
        ),
        (
            "the weights were only divided by s: multiply W by s before rounding, W_hat = Q(W * s) / s, "
            "so that the salient channels get finer steps",
            variant(prescale=False),
        ),
        (
            "s came from the weights' column means: s = mean_abs ** alpha, the mean |x| of the inputs "
            "(AWQ protects the channels whose activations are large, not whose weights are)",
            lambda: _awq(weight, hessian, weight.double().abs().mean(dim=0), bits, group, grid),
        ),
        (
            "s came from diag(H), the mean of x squared: s = mean_abs ** alpha, the mean |x| of the inputs",
            lambda: _awq(weight, hessian, torch.diagonal(hessian.double()), bits, group, grid),
        ),
        (f"the round trip: {too_many_levels_hint(bits)}", variant(levels=2**bits - 1)),
        (
            "mean |x| was clamped before the power: s = mean_abs ** alpha first, then at least 1e-4 "
            "(mean_abs.pow(alpha).clamp(min=1e-4)); clamping first gives a channel that never fires "
            "(1e-4) ** alpha, not 1e-4",
            variant(clamp_first=True),
        ),
    ]


@withheld.withheld
def _awq_mistake_errors(weight, hessian, mean_abs, bits, group, grid) -> list[torch.Tensor | None]:
    """Each of :func:`awq_mistakes`' errors on these inputs, in its order; None where the mistake
    raises ValueError (one that makes s infinite has no finite errors)."""
    errors = []
    for _, make in awq_mistakes(weight, hessian, mean_abs, bits, group, grid):
        try:
            errors.append(make()[2])
        except ValueError:
            errors.append(None)
    return errors


DEAD_CHANNEL_HINT = (
    "NaN or infinity in the errors: a channel that never fires has mean |x| 0, so 0 ** alpha is 0 (and 0 ** -alpha "
    "infinite); clamp s = mean|x| ** alpha to at least 1e-4 (s.clamp(min=1e-4)) before dividing by it"
)


def _awq_inputs(rng: np.random.Generator, tokens: int, cols: int, salient: int, dead: bool = False):
    """Calibration inputs with ``salient`` channels 15 times larger and correlated features: (H, mean |x|)."""
    mixing = torch.from_numpy(rng.normal(0.0, 0.3, size=(cols, cols)) + np.eye(cols))
    x = torch.from_numpy(rng.normal(0.0, 1.0, size=(tokens, cols))) @ mixing
    x[:, torch.from_numpy(rng.choice(cols, size=salient, replace=False))] *= 15.0
    if dead:
        x[:, int(rng.integers(cols))] = 0.0
    return x.T @ x / tokens, x.abs().mean(dim=0)


def _probe_awq(rows, cols, bits, group, grid=20, salient=2, uniform=False, dead=False):
    def make(rng):
        weight = _normal(rng, rows, cols).double()
        hessian, mean_abs = _awq_inputs(rng, 4 * cols, cols, salient, dead)
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


def _awq_answer(result, grid):
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


def _judge_awq(probe, result):
    """The errors and the chosen exponent the reference's (float64: no near ties), the approximation
    close; otherwise the named mistake whose errors the answer's match."""
    weight, hessian, mean_abs, bits = probe["args"]
    group, grid = probe["kwargs"]["group_size"], probe["kwargs"]["grid"]
    alpha, approx, errors, failed = _awq_answer(result, grid)
    if failed:
        return failed
    ref_alpha, ref_approx, ref_errors = _awq(weight, hessian, mean_abs, bits, group, grid)
    if withheld.is_recording():  # so that the learners' copy can name any mistake, as checks.diagnose does
        _awq_mistake_errors(weight, hessian, mean_abs, bits, group, grid)
    same_errors, difference = compare_tensors(errors, ref_errors, rtol=1e-6, atol=1e-12)
    if not same_errors:
        if not errors.any():
            return Verdict(
                False,
                "the errors are all zeros: each is tr((W - W_hat) H (W - W_hat)^T) of that exponent's "
                f"W_hat = Q(W * s) / s (errors: {difference})",
            )
        hints = [hint for hint, _ in awq_mistakes(weight, hessian, mean_abs, bits, group, grid)]
        for hint, wrong in zip(hints, _awq_mistake_errors(weight, hessian, mean_abs, bits, group, grid), strict=True):
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


def _probe_awq_bad_group(rng):
    return {
        "call": "awq_quantize",
        "args": [_normal(rng, 4, 64).double(), torch.eye(64, dtype=torch.float64), torch.ones(64), 4],
        "kwargs": {"group_size": 48, "grid": 20},
    }


AWQ = Exercise(
    "awq_quantize",
    ("awq_quantize",),
    [
        Check(
            "uniform",
            1,
            "channels all equally active (mean |x| 1): every s is 1, so every error is round-to-nearest's and "
            "all tie: alpha 0, the first",
            _probe_awq(8, 32, 4, 8, uniform=True),
            _judge_awq,
            visible=True,
        ),
        Check(
            "salient",
            2,
            "two salient channels, 4 bits, groups of 16 (float64: the reference's errors and alpha exactly)",
            _probe_awq(16, 64, 4, 16),
            _judge_awq,
            visible=True,
        ),
        Check(
            "dead_channel",
            1,
            "an input channel that never fires (mean |x| 0): s = mean|x| ** alpha, then at least 1e-4",
            _probe_awq(8, 32, 4, 16, dead=True),
            _judge_awq,
            visible=True,
        ),
        Check(
            "per_row",
            1,
            "3 bits, one scale per row, a grid of 8 exponents",
            _probe_awq(12, 48, 3, None, grid=8, salient=3),
            _judge_awq,
        ),
        Check(
            "bad_group",
            1,
            "ValueError when group_size does not divide the columns",
            _probe_awq_bad_group,
            lambda probe, result: judge_raises(
                result, "ValueError", "check `cols % group_size` and raise ValueError with a message"
            ),
        ),
    ],
    requirements=[
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
    builds_on=("quantize_dequantize",),
)


EXERCISES = [QUANTIZE_DEQUANTIZE, RELATIVE_ERROR, INT8, EFFECTIVE_BITS, GPTQ, AWQ]
