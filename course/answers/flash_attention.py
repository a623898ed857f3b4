"""Chapter 5's answer, generalised: blockwise attention over batches of heads, causal or not, with
the solution's online softmax update (``solutions/05_flash_attention.py``). Shapes: (..., N, D);
causal attention aligns the last query with the last key (query i of N_q sees keys up to
i + N_k - N_q), as in decoding with a cache. Not handled: more queries than keys with ``causal``
(the first queries see no key: their rows are NaN, as the Triton kernel refuses them)."""

from __future__ import annotations

import math

import torch

from course import withheld
from course.flash_attention import check_shapes
from course.model import causal_mask

SOLUTION = withheld.answers("05_flash_attention")


def batched_blockwise_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool = False
) -> torch.Tensor:
    """Exact softmax attention computed ``block`` keys at a time, never forming the score matrix."""
    check_shapes(q, k, v, block)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)  # (..., N_q, 1)
    l = torch.zeros_like(m)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., N_q, D)
    for start in range(0, n_k, block):
        scores = q @ k[..., start : start + block, :].transpose(-2, -1) * scale  # (..., N_q, b)
        if causal:  # a row's first block holds its first key, so its running maximum is finite from then on
            visible = causal_mask(n_q, n_k, q.device, start, min(start + block, n_k))  # (N_q, b)
            scores = scores.masked_fill(~visible, float("-inf"))
        m, l, o = SOLUTION.online_softmax_update(m, l, o, scores, v[..., start : start + block, :])
    return o / l
