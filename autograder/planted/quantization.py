"""Chapter 3's planted mistakes: round trips (``quantize_variant``), the error, int8, the bits per
weight, and a GPTQ that sweeps the caller's weight (``gptq_variant``)."""

from autograder.planted import Planted

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

GPTQ_ANSWER = """
def gptq_quantize(weight, hessian, bits, group_size=None, damping=0.01):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group != 0:
        raise ValueError("group_size must divide the columns")
    levels = 2 ** (bits - 1) - 1
    w = weight.clone()
    original = weight.clone()
    h = hessian.to(w.dtype).clone()
    h += {damping} * h.diagonal().mean() * torch.eye(cols, dtype=h.dtype)
    u = {factor}
    codes = torch.zeros_like(w)
    scale = torch.zeros(rows, cols // group, dtype=w.dtype)
    for j in range(cols):
        if j % group == 0:
            scale[:, j // group] = {scale_source}[:, j : j + group].abs().amax(dim=1) / levels
            step = torch.where(scale[:, j // group] > 0, scale[:, j // group], torch.ones_like(scale[:, 0]))
        codes[:, j] = torch.round(w[:, j] / step).clamp(-levels, levels)
        error = (w[:, j] - codes[:, j] * step) / u[j, j]
        {update}
    return codes, scale
"""
UPPER = "torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)"
UPDATE = "w[:, j + 1 :] -= error[:, None] * u[j, j + 1 :][None, :]"


def gptq_variant(damping="damping", factor=UPPER, scale_source="w", update=UPDATE):
    return GPTQ_ANSWER.format(damping=damping, factor=factor, scale_source=scale_source, update=update)


PLANTED = {
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
        {"effective_bits.int4_g64", "effective_bits.other"},
        "upside down",
    ),
    "gptq_sweeps_the_caller_s_weight": Planted(  # the prompt: work on a copy; graded in the sandbox, where
        # the scenario that sees the caller's weight runs
        "gptq_quantize",
        gptq_variant().replace("w = weight.clone()", "w = weight"),
        {"gptq_quantize.copy"},
        "weight passed in was changed",
    ),
}
