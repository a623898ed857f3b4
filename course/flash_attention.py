"""Exact attention, three ways: the full score matrix, blockwise with the online softmax, and
(on a GPU) a Triton kernel with the same signature (``course.kernels``, which also picks the
fastest of them). Plus FlashAttention's IO model.

The chapter's exercises (``online_softmax_update``, ``blockwise_attention``) are the learner's:
what here needs one takes it as a parameter (:func:`online_softmax_trace`), and a notebook cell
passes the learner's function once written, the course's answer before that (:func:`yours`). The
course's own blockwise attention over batches of heads, causal or not, is chapter 5's answer
generalised: :func:`batched_blockwise_attention` calls it across the line between the copies
(``course/answers/flash_attention.py``, recorded in the learners' copy).

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

from course import withheld
from course.model import attention_reference, causal_mask

CHAPTER = "05_flash_attention"
COURSE = withheld.module("course.answers.flash_attention")


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


def batched_blockwise_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool = False
) -> torch.Tensor:
    """Exact softmax attention over (..., N, D) queries, keys and values, ``block`` keys at a time,
    causal or not: the course's (``course/answers/flash_attention.py``; its recorded calls, in the
    learners' copy). The Triton kernel has its signature."""
    check_shapes(q, k, v, block)
    return COURSE.batched_blockwise_attention(q, k, v, block, causal)


def online_softmax_trace(scores: torch.Tensor, values: torch.Tensor, block: int, online_softmax_update) -> list[dict]:
    """The running state of one query after each block, folded in by ``online_softmax_update`` (the
    chapter's exercise): a list of {m, l, o, seen} (``o`` not normalised)."""
    m, l = torch.tensor([[float("-inf")]], dtype=scores.dtype), torch.zeros(1, 1, dtype=scores.dtype)
    o = torch.zeros(1, values.shape[-1], dtype=values.dtype)
    states = []
    for start in range(0, len(scores), block):
        m, l, o = online_softmax_update(m, l, o, scores[None, start : start + block], values[start : start + block])
        states.append({"m": m.item(), "l": l.item(), "o": o[0].clone(), "seen": min(start + block, len(scores))})
    return states


TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "online_softmax_update": (
        torch.full((1, 1), float("-inf")),
        torch.zeros(1, 1),
        torch.zeros(1, 2),
        torch.zeros(1, 3),
        torch.zeros(3, 2),
    ),
}


def yours(namespace: dict, name: str, what: str):
    """The notebook's own ``name`` (``online_softmax_update``) once written, the course's answer before
    that, with the line saying whose numbers ``what`` shows (:func:`course.withheld.yours_or_course`)."""
    return withheld.yours_or_course(namespace, CHAPTER, name, TRIED_ON[name], what)


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


# --- FlashAttention's IO model ------------------------------------------------------------------

# Fast on-chip memory per streaming multiprocessor, in KiB, that a kernel can use as shared memory
# (NVIDIA's tuning guides): an A100 has 192 KiB of L1 cache and shared memory together, of which
# at most 164 KiB is shared memory; an H100 has 256 KiB together, at most 228 KiB shared.
SHARED_MEMORY_KIB = {"A100": 164, "H100": 228}


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
