"""LLM.int8(): a matrix product in int8, with the input features that carry outliers kept in
floating point (Dettmers et al., 2022). Both sides go through int8 codes with per-row scales,
``quantize_int8``, chapter 3's exercise: a notebook's own, or the course's answer
(``quantization.course_answer("quantize_int8")``)."""

from __future__ import annotations

import torch

from course.quantization.absmax import check_matrix


def int8_matmul(x: torch.Tensor, weight: torch.Tensor, *, quantize_int8) -> torch.Tensor:
    """``x @ weight.T`` with both sides in int8 codes from ``quantize_int8``: x per row (token),
    weight per row (output channel).

    The int32 accumulation is emulated in float64, which is exact for these sizes.
    """
    x_codes, x_scale = quantize_int8(x)  # (tokens, in), (tokens, 1)
    w_codes, w_scale = quantize_int8(weight)  # (out, in), (out, 1)
    accumulated = x_codes.double() @ w_codes.double().T  # (tokens, out), integer-valued
    return (accumulated * x_scale.double() * w_scale.double().T).float()


def int8_matmul_with_outliers(
    x: torch.Tensor, weight: torch.Tensor, threshold: float = 6.0, *, quantize_int8
) -> tuple[torch.Tensor, torch.Tensor]:
    """LLM.int8()'s mixed-precision decomposition of ``x @ weight.T``.

    Input feature columns where any |x| reaches ``threshold`` are multiplied in floating point;
    the rest go through :func:`int8_matmul` with ``quantize_int8``. Returns the
    product and the outlier column indices.
    """
    check_matrix(x, "x")
    check_matrix(weight)
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[1]} features but weight expects {weight.shape[1]}")
    outlier = (x.abs() >= threshold).any(dim=0)  # (in,) boolean
    columns = outlier.nonzero().flatten()
    regular = ~outlier
    out = x[:, outlier].float() @ weight[:, outlier].float().T  # (tokens, out) in floating point
    if regular.any():
        out = out + int8_matmul(x[:, regular], weight[:, regular], quantize_int8=quantize_int8)
    return out, columns
