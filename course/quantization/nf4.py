"""NormalFloat-4 (NF4, QLoRA): 16 levels at quantiles of a normal distribution, with an exact zero,
and one absmax scale per group."""

from __future__ import annotations

import torch

from course.quantization.absmax import check_matrix, dequantize, group_columns, working

NF4_OFFSET = 0.9677083  # QLoRA: the outermost quantile, (1 - 1/(2*15) + 1 - 1/(2*16)) / 2


def nf4_levels() -> torch.Tensor:
    """The 16 NF4 levels in [-1, 1]: quantiles of a standard normal, with an exact zero.

    Eight positive levels are quantiles at probabilities evenly spaced from 0.5 to the offset,
    seven negative ones likewise, then all are divided by the largest. Built from
    ``torch.special.ndtri`` with bitsandbytes' roundings (float32 probabilities, float64
    quantiles, float32 division), so the table is bitsandbytes' to the last bit: a level one
    float32 step off moves the weights that sit on a decision boundary to the other code.
    """
    positive = torch.special.ndtri(torch.linspace(NF4_OFFSET, 0.5, 9)[:-1].double())  # 8 values
    negative = -torch.special.ndtri(torch.linspace(NF4_OFFSET, 0.5, 8)[:-1].double())  # 7 values
    levels = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).float().sort().values
    return levels / levels.abs().max()


def quantize_nf4(weight: torch.Tensor, group_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """NF4 codes (uint8, 0..15, the index of the nearest level) and one absmax scale per group."""
    check_matrix(weight)
    group = group_columns(weight, group_size)
    rows, cols = weight.shape
    grouped = working(weight).reshape(rows, cols // group, group)  # (rows, groups, group)
    scale = grouped.abs().amax(dim=-1)  # (rows, groups): absmax maps to level +-1
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    normalised = grouped / safe.unsqueeze(-1)
    levels = nf4_levels().to(device=weight.device, dtype=grouped.dtype)
    midpoints = (levels[1:] + levels[:-1]) / 2  # 15 decision boundaries
    codes = torch.bucketize(normalised, midpoints)
    return codes.reshape(rows, cols).to(torch.uint8), scale


def dequantize_nf4(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """NF4 codes back to float32: level[code] times the group's scale."""
    levels = nf4_levels().to(device=codes.device, dtype=scale.dtype)
    return dequantize(levels[codes.long()], scale)


def nf4_quantize_dequantize(weight: torch.Tensor, group_size: int = 64) -> torch.Tensor:
    """Round-trip through NF4 with one absmax scale per ``group_size`` columns."""
    return dequantize_nf4(*quantize_nf4(weight, group_size)).to(weight.dtype)
