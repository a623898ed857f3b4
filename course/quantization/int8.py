"""LLM.int8(): a matrix product in int8, with the input features that carry outliers kept in
floating point (Dettmers et al., 2022)."""

from __future__ import annotations

import torch

from course.quantization import absmax
from course.quantization.absmax import check_matrix


def int8_matmul(x: torch.Tensor, weight: torch.Tensor, quantize_int8=None) -> torch.Tensor:
    """``x @ weight.T`` with both sides in int8: x per row (token), weight per row (output channel),
    through :func:`quantize_int8` (or the ``quantize_int8`` given: a notebook's own).

    The int32 accumulation is emulated in float64, which is exact for these sizes.
    """
    quantize_int8 = quantize_int8 or absmax.quantize_int8
    x_codes, x_scale = quantize_int8(x)  # (tokens, in), (tokens, 1)
    w_codes, w_scale = quantize_int8(weight)  # (out, in), (out, 1)
    accumulated = x_codes.double() @ w_codes.double().T  # (tokens, out), integer-valued
    return (accumulated * x_scale.double() * w_scale.double().T).float()


def int8_matmul_with_outliers(
    x: torch.Tensor, weight: torch.Tensor, threshold: float = 6.0, quantize_int8=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """LLM.int8()'s mixed-precision decomposition of ``x @ weight.T``.

    Input feature columns where any |x| reaches ``threshold`` are multiplied in floating point;
    the rest go through :func:`int8_matmul` (with ``quantize_int8``, when given). Returns the
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
        out = out + int8_matmul(x[:, regular], weight[:, regular], quantize_int8)
    return out, columns
