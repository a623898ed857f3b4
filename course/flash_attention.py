"""Exact attention, three ways: the full score matrix, blockwise with the online softmax, and
(on a GPU) a Triton kernel with the same signature (``course.kernels``, which also picks the
fastest of them). Plus FlashAttention's IO model.

The online softmax keeps, for each query, a running maximum ``m_i``, a running normaliser
``l_i`` and a running output ``o``; when a block of keys brings a larger maximum, what was
accumulated so far is rescaled by exp(m_old - m_new). A worked example with two blocks of one
score each, 1.0 then 3.0: after the first, m = 1, l = 1, o = v1; after the second, m = 3,
l = e^-2 + 1, o = e^-2 v1 + v2; the output o / l is softmax([1, 3]) @ [v1, v2].

Shapes: (..., N, D) for queries, keys and values (leading dimensions are batch and heads). Causal
attention aligns the last query with the last key (query i of N_q sees keys up to
i + N_k - N_q), as in decoding with a cache. Not handled: dropout, attention masks other than
causal, a backward pass for the Triton kernel.
"""

from __future__ import annotations

import math

import torch

from course.model import attention_reference, causal_mask
from course.withheld import withheld


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int | None = None) -> None:
    """Raise ValueError unless q, k and v are (..., N, D) tensors that fit together, and ``block`` a
    positive number of keys; every implementation of this chapter's attention checks with it."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise ValueError("q, k and v must be torch tensors")
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must be (..., N, D) with the same number of dimensions; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or q.shape[:-2] != k.shape[:-2] != v.shape[:-2]:
        raise ValueError(
            f"q and k need the same head dim, k and v the same number of keys, and all three the same "
            f"leading dims; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise ValueError(f"block must be a positive whole number of keys, got {block!r}")


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with the whole (N_q, N_k) score matrix in memory: the course
    model's written-out attention (:func:`course.model.attention_reference`), shapes checked."""
    check_shapes(q, k, v)
    mask = causal_mask(q.shape[-2], k.shape[-2], q.device) if causal else None  # (N_q, N_k)
    return attention_reference(q, k, v, mask)  # (..., N_q, D)


@withheld
def online_softmax_update(
    m: torch.Tensor, l: torch.Tensor, o: torch.Tensor, scores: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one block of keys into the running state.

    ``m, l``: (..., N_q, 1) running maximum and normaliser; ``o``: (..., N_q, D) running (not yet
    normalised) output; ``scores``: (..., N_q, block) this block's scaled scores (``-inf`` where
    masked); ``v``: (..., block, D) this block's values.
    """
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    # a row with nothing seen yet has m = m_new = -inf; its correction is irrelevant (l = o = 0)
    correction = torch.exp(torch.where(torch.isinf(m_new), torch.zeros_like(m), m - m_new))
    p = torch.exp(scores - torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new))  # (..., N_q, block)
    return m_new, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v


@withheld
def blockwise_attention(
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
        if causal:
            visible = causal_mask(n_q, n_k, q.device, start, min(start + block, n_k))  # (N_q, b)
            scores = scores.masked_fill(~visible, float("-inf"))
        m, l, o = online_softmax_update(m, l, o, scores, v[..., start : start + block, :])
    return o / l


def online_softmax_trace(scores: torch.Tensor, values: torch.Tensor, block: int) -> list[dict]:
    """The running state of one query after each block: a list of {m, l, o, seen} (``o`` not normalised)."""
    m, l = torch.tensor([[float("-inf")]]), torch.zeros(1, 1)
    o = torch.zeros(1, values.shape[-1])
    states = []
    for start in range(0, len(scores), block):
        m, l, o = online_softmax_update(m, l, o, scores[None, start : start + block], values[start : start + block])
        states.append({"m": m.item(), "l": l.item(), "o": o[0].clone(), "seen": min(start + block, len(scores))})
    return states


# --- FlashAttention's IO model ------------------------------------------------------------------


def standard_io_elements(n: int, d: int) -> float:
    """Slow-memory traffic of standard attention, in elements: read Q, K, V; write and re-read the
    N x N scores and the N x N probabilities; write O. Theta(N d + N^2)."""
    return 4 * n * d + 4 * n * n


def tiled_io_elements(n: int, d: int, sram_elements: float) -> float:
    """Slow-memory traffic of tiled attention with ``sram_elements`` of fast memory, in elements.

    Query blocks of B_r = M / (4 d) rows stay in fast memory while all of K and V stream past
    them; Q is read and O written once: 2 N d + ceil(N / B_r) * 2 N d, which is Theta(N^2 d^2 / M).
    """
    rows = max(1, int(sram_elements // (4 * d)))
    return 2 * n * d + math.ceil(n / rows) * 2 * n * d
