"""Chapter 3's known mistakes in its first four exercises (``quantize_dequantize``,
``relative_error``, ``quantize_int8`` and ``dequantize_int8``, ``effective_bits``): what each
returns on a check's inputs, and wrong answers written out."""

from __future__ import annotations

import contextlib

import torch

from autograder.chapters.quantization.absmax import too_many_levels_hint
from autograder.mistakes import Planted
from course import quantization

ROUNDINGS = {"round": torch.round, "trunc": torch.trunc, "floor": torch.floor}


def computed(mistakes: list) -> list:
    """(hint, output) of each (hint, function making that mistake's output) that does not raise: a
    mistake that cannot happen on these inputs (a reshape that does not fit) is no candidate."""
    found = []
    for hint, make in mistakes:
        with contextlib.suppress(ValueError, RuntimeError, ZeroDivisionError):
            found.append((hint, make()))
    return found


def grouped_round_trip(weight, bits, group, levels=None, rounding="round", dequantize=True, high=None, signed=False):
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


def asymmetric_round_trip(weight, bits, group):
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


# --- quantize_dequantize -----------------------------------------------------------------------------


def of_quantize_dequantize(weight: torch.Tensor, bits: int, group) -> list[tuple[str, torch.Tensor]]:
    """(hint, the round trip that mistake gives) on ``weight``, in the order the judge tries them."""
    levels = quantization.absmax_levels(bits)
    mistakes = [
        (too_many_levels_hint(bits), lambda: grouped_round_trip(weight, bits, group, levels=2**bits - 1)),
        (
            f"scale divided by {2 ** (bits - 1)}, one level too many: use 2**(bits-1) - 1 = {levels}",
            lambda: grouped_round_trip(weight, bits, group, levels=2 ** (bits - 1)),
        ),
        (
            f"scale divided by {2 ** (bits - 1)} and codes clamped to [{-(2 ** (bits - 1))}, {2 ** (bits - 1) - 1}], "
            f"the range of a signed integer: the symmetric scheme uses 2**(bits-1) - 1 = {levels} levels each "
            f"side, codes in [-{levels}, {levels}]",
            lambda: grouped_round_trip(weight, bits, group, levels=2 ** (bits - 1), high=2 ** (bits - 1) - 1),
        ),
        (
            "the scale came from the largest value, not the largest magnitude: take .abs().amax()",
            lambda: grouped_round_trip(weight, bits, group, signed=True),
        ),
        (
            "every value rounded to 0, as when the scale is multiplied by the number of levels (a step larger "
            "than every weight): scale = absmax / (2**(bits-1) - 1)",
            lambda: grouped_round_trip(weight, bits, group, levels=1 / levels),
        ),
        (
            "min-max quantization with a zero point: this exercise is symmetric absmax, scale = absmax / "
            f"{levels}, no zero point",
            lambda: asymmetric_round_trip(weight, bits, group),
        ),
        (
            "values were truncated toward zero: round to the nearest code with torch.round",
            lambda: grouped_round_trip(weight, bits, group, rounding="trunc"),
        ),
        (
            "values were floored: round to the nearest code with torch.round",
            lambda: grouped_round_trip(weight, bits, group, rounding="floor"),
        ),
        (
            "returned the integer codes: multiply them back by the scale",
            lambda: grouped_round_trip(weight, bits, group, dequantize=False),
        ),
        (
            "one scale for the whole matrix: take the absmax per row (dim=1) or per group",
            lambda: grouped_round_trip(weight.reshape(1, -1), bits, None).reshape(weight.shape),
        ),
    ]
    if group is not None:
        mistakes += [
            (
                "group_size was ignored: one scale per row; reshape to (rows, cols // group_size, group_size)",
                lambda: grouped_round_trip(weight, bits, None),
            ),
            (
                "groups were taken down the columns (consecutive rows): group consecutive columns within a row",
                lambda: grouped_round_trip(weight.T.contiguous(), bits, group).T,
            ),
        ]
    return computed(mistakes)


# --- relative_error ----------------------------------------------------------------------------------


def of_relative_error(weight: torch.Tensor, approx: torch.Tensor) -> list[tuple[str, float]]:
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


# --- quantize_int8 / dequantize_int8 --------------------------------------------------------------------


def of_quantize_int8(weight: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """(hint, the codes that mistake gives) for ``weight``."""
    return computed(
        [
            (
                "scale = absmax / 128: int8 symmetric codes stop at 127",
                lambda: grouped_round_trip(weight, 8, None, levels=128, dequantize=False).clamp(-128, 127),
            ),
            (
                "scale = absmax / 255: that is the unsigned range; symmetric int8 uses 127",
                lambda: grouped_round_trip(weight, 8, None, levels=255, dequantize=False).clamp(-128, 127),
            ),
            (
                "codes were truncated toward zero: round first, then convert to int8",
                lambda: grouped_round_trip(weight, 8, None, rounding="trunc", dequantize=False),
            ),
            (
                "one scale for the whole matrix: one scale per row",
                lambda: grouped_round_trip(weight.reshape(1, -1), 8, None, dequantize=False).reshape(weight.shape),
            ),
        ]
    )


def of_dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """(hint, the matrix that mistake gives) for ``codes`` and ``scale``."""
    return [
        ("divided by the scale: multiply the codes by it", codes.double() / scale.double()),
        ("returned the codes unchanged: multiply them by the scale", codes.double()),
    ]


# --- effective_bits ------------------------------------------------------------------------------------


def of_effective_bits(bits, group, scale_bits) -> list[tuple[str, float]]:
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


# --- wrong answers written out -------------------------------------------------------------------------

QUANTIZE = """
def quantize_dequantize(weight, bits, group_size=None):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group:
        raise ValueError("group_size must divide the columns")
    levels = {levels}
    grouped = weight.reshape(rows, cols // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True) / levels
    {guard}
    return ({rounding}(grouped / scale).clamp({clamp}) * scale).reshape(rows, cols)
"""
SAFE = "scale = torch.where(scale > 0, scale, torch.ones_like(scale))"


def quantize_variant(levels="2 ** (bits - 1) - 1", rounding="torch.round", guard=SAFE, clamp="-levels, levels"):
    return QUANTIZE.format(levels=levels, rounding=rounding, guard=guard, clamp=clamp)


# Every check of these must fail with the mistake named, not only the first.
ALL_ROUND_TRIPS = {
    f"quantize_dequantize.{c}" for c in ("int8_per_row", "int4_groups", "other_bits", "six_bits", "zero_groups")
}
GROUPED_ROUND_TRIPS = {f"quantize_dequantize.{c}" for c in ("int4_groups", "other_bits", "zero_groups")}

PLANTED = {  # graded end to end
    "too_many_levels": Planted(
        "quantize_dequantize", quantize_variant(levels="2 ** bits - 1"), ALL_ROUND_TRIPS, "levels instead of"
    ),
    "one_level_too_many": Planted(
        "quantize_dequantize",
        quantize_variant(levels="2 ** (bits - 1)"),
        {"quantize_dequantize.int8_per_row"},
        "one level too many",
    ),
    "truncation": Planted(
        "quantize_dequantize", quantize_variant(rounding="torch.trunc"), ALL_ROUND_TRIPS, "truncated"
    ),
    "nan_on_zero_group": Planted(
        "quantize_dequantize", quantize_variant(guard="pass"), {"quantize_dequantize.zero_groups"}, "all-zero group"
    ),
    "groups_ignored": Planted(
        "quantize_dequantize",
        """
def quantize_dequantize(weight, bits, group_size=None):
    if group_size is not None and weight.shape[1] % group_size:
        raise ValueError("bad group")
    levels = 2 ** (bits - 1) - 1
    scale = weight.abs().amax(dim=1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(weight / scale).clamp(-levels, levels) * scale
""",
        GROUPED_ROUND_TRIPS,
        "group_size was ignored",
    ),
    "groups_down_the_rows": Planted(
        "quantize_dequantize",
        """
def quantize_dequantize(weight, bits, group_size=None):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group:
        raise ValueError("bad group")
    levels = 2 ** (bits - 1) - 1
    if group_size is None:
        grouped = weight.reshape(rows, 1, cols)
    else:
        grouped = weight.T.reshape(cols, rows // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    out = torch.round(grouped / scale).clamp(-levels, levels) * scale
    return out.reshape(rows, cols) if group_size is None else out.reshape(cols, rows).T
""",
        GROUPED_ROUND_TRIPS,
        "groups were taken down the columns",
    ),
    "no_value_error": Planted(
        "quantize_dequantize",
        quantize_variant().replace('raise ValueError("group_size must divide the columns")', "group = cols"),
        {"quantize_dequantize.bad_group"},
        "expected ValueError",
    ),
    "squared_error": Planted(
        "relative_error",
        """
def relative_error(weight, approx):
    return ((weight - approx).norm() ** 2 / weight.norm() ** 2).item()
""",
        {"relative_error.random", "relative_error.zeros"},
        "square root",
    ),
    "int8_scale_128": Planted(
        "int8",
        """
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 128
    return torch.round(weight / scale).clamp(-128, 127).to(torch.int8), scale

def dequantize_int8(codes, scale):
    return codes.float() * scale
""",
        {"int8.codes_and_scale"},
        "absmax / 128",
    ),
    "int8_float_codes": Planted(
        "int8",
        """
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(weight / scale), scale

def dequantize_int8(codes, scale):
    return codes.float() * scale
""",
        {"int8.codes_and_scale"},
        "torch.int8",
    ),
    "bits_upside_down": Planted(
        "effective_bits",
        """
def effective_bits(bits, group_size, scale_bits=16):
    return bits + group_size / scale_bits
""",
        {"effective_bits.default_scale", "effective_bits.other"},
        "upside down",
    ),
}

JUDGED = {  # judged in the tests' process
    "signed_integer_range": Planted(  # the "1006 of 1024 values differ", now named
        "quantize_dequantize",
        quantize_variant(levels="2 ** (bits - 1)", clamp="-levels, levels - 1"),
        ALL_ROUND_TRIPS | {"quantize_dequantize.chapter_number"},
        "the range of a signed integer",
    ),
    "largest_value_not_magnitude": Planted(
        "quantize_dequantize",
        quantize_variant().replace("grouped.abs().amax", "grouped.amax"),
        ALL_ROUND_TRIPS,
        "largest value, not the largest magnitude",
    ),
    "scale_times_levels": Planted(
        "quantize_dequantize",
        quantize_variant().replace("amax(dim=-1, keepdim=True) / levels", "amax(dim=-1, keepdim=True) * levels"),
        ALL_ROUND_TRIPS,
        "multiplied by the number of levels",
    ),
    "min_max_with_zero_point": Planted(
        "quantize_dequantize",
        """
def quantize_dequantize(weight, bits, group_size=None):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group:
        raise ValueError("group_size must divide the columns")
    grouped = weight.reshape(rows, cols // group, group)
    low, high = grouped.amin(dim=-1, keepdim=True), grouped.amax(dim=-1, keepdim=True)
    scale = ((high - low) / (2**bits - 1)).clamp(min=1e-12)
    zero = torch.round(-low / scale)
    codes = (torch.round(grouped / scale) + zero).clamp(0, 2**bits - 1)
    return ((codes - zero) * scale).reshape(rows, cols)
""",
        ALL_ROUND_TRIPS - {"quantize_dequantize.zero_groups"},
        "min-max quantization with a zero point",
    ),
    "bits_integer_division": Planted(  # 16 // 64 is 0: the number of leaving the scales out, named as both
        "effective_bits",
        "def effective_bits(bits, group_size, scale_bits=16):\n    return bits + scale_bits // group_size\n",
        {"effective_bits.default_scale", "effective_bits.other"},
        "integer division",
    ),
    "relative_error_mean_absolute": Planted(
        "relative_error",
        "def relative_error(weight, approx):\n"
        "    return ((weight - approx).abs().mean() / weight.abs().mean()).item()\n",
        {"relative_error.random", "relative_error.zeros"},
        "mean absolute values",
    ),
    "relative_error_tensor": Planted(
        "relative_error",
        "def relative_error(weight, approx):\n    return (weight - approx).norm() / weight.norm()\n",
        {"relative_error.random"},
        "should be a Python float",
    ),
    "int8_scale_not_kept_2d": Planted(
        "int8",
        """
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(weight / safe[:, None]).clamp(-127, 127).to(torch.int8), scale

def dequantize_int8(codes, scale):
    return codes.float() * scale.reshape(-1, 1)
""",
        {"int8.codes_and_scale", "int8.zero_row", "int8.wide"},
        "keepdim=True",
    ),
}
