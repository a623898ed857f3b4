"""Symmetric absmax integer quantization at any bit width, with one scale per tensor, per row or
per group of consecutive columns; the relative error of an approximation; the storage cost of the
scales.

A worked example: one row ``[0.5, -0.2, 0.1, 0.0]`` at 4 bits has scale 0.5 / 7 = 0.0714, codes
``[7, -3, 1, 0]`` (-2.8 and 1.4 round to -3 and 1) and comes back as ``[0.5, -0.2143, 0.0714, 0.0]``.

Chapter 3's exercises (``quantize_dequantize``, ``relative_error``, ``quantize_int8`` and
``dequantize_int8``, ``effective_bits``, ``gptq_quantize``, ``awq_quantize``) are the learner's:
their answers are the chapter's solution cells (:func:`course_answer`; recorded, in the learners'
copy), and the course's functions that need one take it as a parameter or call it here, after
checking their arguments: :func:`quantize` (the codes and scales, which the exercise's round trip
does not return), :func:`round_trip` and :func:`relative_norm_error`.

Not handled: asymmetric (zero-point) schemes. Everything works in float32 (float64 kept) on the
tensor's device; inputs must be 2-D floating-point matrices. Every bad argument (shape, type, bits,
group size) raises ValueError with a message that says what to change.
"""

from __future__ import annotations

import torch

from course import withheld

CHAPTER = "03_quantization"
COURSE = withheld.module("course.answers.quantization")  # the course's codes, and numbers it shows
MIN_BITS, MAX_BITS = 2, 16


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


def check_matrix(weight: torch.Tensor, name: str = "weight") -> None:
    if not isinstance(weight, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(weight).__name__}; wrap it with torch.as_tensor")
    if weight.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D matrix (rows, cols), got shape {tuple(weight.shape)}; "
            "reshape it first, for example weight.reshape(weight.shape[0], -1)"
        )
    if not weight.is_floating_point():
        raise ValueError(f"{name} must hold floating-point numbers, got {weight.dtype}")
    if not torch.isfinite(weight).all():
        raise ValueError(f"{name} contains NaN or infinity; quantization needs finite values")


def described(value, dtype: bool = False) -> str:
    """``shape (4, 64)`` (``torch.float32 of shape (4, 64)`` with ``dtype``) for a tensor, else its type's name."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    return f"{value.dtype} of shape {tuple(value.shape)}" if dtype else f"shape {tuple(value.shape)}"


def working(weight: torch.Tensor) -> torch.Tensor:
    """Compute in float32, or float64 when given float64 (bf16 and fp16 are widened)."""
    return weight.to(torch.promote_types(weight.dtype, torch.float32))


def absmax_levels(bits: int) -> int:
    """The largest integer code of a symmetric ``bits``-bit scheme: 2^(bits-1) - 1 (127 at 8 bits, 7 at 4).

    Symmetric absmax gives up the most negative code (-128 at 8 bits) so that the codes run from
    -levels to +levels: one scale serves both signs, the absmax landing on +levels or -levels
    whichever its sign (zero is exact either way).
    """
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise ValueError(f"bits must be a whole number such as 4 or 8, got {bits!r}")
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be between {MIN_BITS} and {MAX_BITS}, got {bits}")
    return 2 ** (bits - 1) - 1


def group_columns(weight: torch.Tensor, group_size: int | None) -> int:
    """Columns per scale; checks that ``group_size`` divides the number of columns."""
    cols = weight.shape[1]
    if group_size is None:
        return cols
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ValueError(
            f"group_size must be a whole number of columns or None (one scale per row), got {group_size!r}"
        )
    if group_size < 1:
        raise ValueError(f"group_size must be positive, got {group_size}")
    if cols % group_size != 0:
        divisors = [g for g in (8, 16, 32, 64, 128, 256) if cols % g == 0]
        hint = f"; try one of {divisors}" if divisors else "; use None for one scale per row"
        raise ValueError(f"group_size {group_size} does not divide {cols} columns{hint}")
    return group_size


def quantize(weight: torch.Tensor, bits: int, group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax quantization: the integer codes (rows, cols) int32 in [-levels, levels] and one
    scale per row or per group (rows, cols // group), float32 (float64 for float64 input), zero for
    an all-zero group (whose codes are all zero). What chapters 8 and 9 store; the exercise's round
    trip multiplies them back (:func:`round_trip`). The course's answer: withheld with the chapter's."""
    check_matrix(weight)
    absmax_levels(bits)
    group_columns(weight, group_size)
    return COURSE.quantize(working(weight), bits, group_size)


def dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Codes times their group's scale; the group size is read off the shapes.

    ``codes`` is a (rows, cols) matrix and ``scale`` a (rows, groups) one, as :func:`quantize`
    returns them; other shapes raise ValueError.
    """
    for name, value in (("codes", codes), ("scale", scale)):
        if not isinstance(value, torch.Tensor) or value.dim() != 2:
            raise ValueError(
                f"{name} must be a 2-D matrix, got {described(value)}; "
                "pass codes of shape (rows, cols) and a scale of shape (rows, groups), as quantize returns them"
            )
    rows, cols = codes.shape
    groups = scale.shape[-1]
    if scale.shape[0] != rows or cols % groups != 0:
        raise ValueError(f"scale of shape {tuple(scale.shape)} does not fit codes of shape {(rows, cols)}")
    grouped = codes.to(scale.dtype).reshape(rows, groups, cols // groups)  # (rows, groups, group)
    return (grouped * scale.unsqueeze(-1)).reshape(rows, cols)


def round_trip(weight: torch.Tensor, bits: int, group_size: int | None = None) -> torch.Tensor:
    """``weight`` after a round trip through ``bits``-bit symmetric absmax codes (per row, or per group
    of ``group_size`` columns), in its own dtype: the chapter's ``quantize_dequantize`` (its answer,
    computed in float32, or float64), after checking the arguments.

    Raises:
        ValueError: when ``group_size`` does not divide the number of columns, ``bits`` is outside
            2 to 16, or ``weight`` is not a finite floating-point matrix.
    """
    check_matrix(weight)
    absmax_levels(bits)
    group_columns(weight, group_size)
    return course_answer("quantize_dequantize")(working(weight), bits, group_size).to(weight.dtype)


def quantize_dequantize_per_tensor(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """Round-trip with a single scale for the whole matrix (the coarsest granularity)."""
    check_matrix(weight)
    flat = weight.reshape(1, -1)  # (1, rows * cols): one row, one scale
    return round_trip(flat, bits).reshape(weight.shape)


def relative_norm_error(weight: torch.Tensor, approx: torch.Tensor) -> float:
    """Frobenius-norm ratio ||W - W_hat|| / ||W||: the chapter's ``relative_error`` (its answer, in
    float32), after checking the arguments.

    Both arguments must be torch tensors of the same shape (Python lists and numpy arrays raise
    ValueError: wrap them with torch.as_tensor first), as every function here takes tensors.
    """
    for name, value in (("weight", weight), ("approx", approx)):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}; wrap it with torch.as_tensor")
    if weight.shape != approx.shape:
        raise ValueError(f"shapes differ: weight {tuple(weight.shape)} vs approx {tuple(approx.shape)}")
    if not weight.float().norm() > 0:
        raise ValueError("relative error is undefined for an all-zero weight")
    return course_answer("relative_error")(weight.float(), approx.float())


def effective_bits_double_quant(
    bits: int = 4, group_size: int = 64, scale_bits: int = 8, block: int = 256, block_scale_bits: int = 32
) -> float:
    """QLoRA's double quantization: the group scales themselves stored in 8 bits with one fp32
    scale per ``block`` of them: 4 + 8/64 + 32/(64*256) = 4.127 bits."""
    return bits + scale_bits / group_size + block_scale_bits / (group_size * block)


def half_step(weight: torch.Tensor, bits: int, group_size: int | None = None) -> torch.Tensor:
    """Half the quantization step of each weight's group, broadcast to the weight's shape."""
    _, scale = quantize(weight, bits, group_size)
    group = group_columns(weight, group_size)
    return (scale / 2).repeat_interleave(group, dim=1)
