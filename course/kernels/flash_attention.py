"""A FlashAttention-style forward kernel in Triton, with the torch reference's signature.

One program per block of ``BLOCK_M`` queries and one (batch, head): the queries stay in fast
memory while blocks of ``block`` keys and values stream past them, folded in by the online
softmax (chapter 5's ``online_softmax_update``, written here in Triton's language).
Accumulates in fp32 whatever the input dtype.

Not handled: head dimensions that are not a power of two from 16 to 256, blocks that are not
a power of two from 16 to 128, the backward pass. Runs on the CPU under ``TRITON_INTERPRET=1``
(slowly), which is how CI tests it.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from course.flash_attention import check_shapes


@triton.jit
def _forward(
    Q,
    K,
    V,
    O,
    n_q,
    n_k,
    scale,
    stride_qb,
    stride_qn,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_ob,
    stride_on,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    dims = tl.arange(0, D)
    q = tl.load(Q + bh * stride_qb + rows[:, None] * stride_qn + dims[None, :], mask=rows[:, None] < n_q, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    shift = n_k - n_q  # causal: query i sees keys up to i + shift
    end = n_k
    if CAUSAL:
        end = tl.minimum(n_k, (start_m + 1) * BLOCK_M + shift)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        k = tl.load(K + bh * stride_kb + cols[:, None] * stride_kn + dims[None, :], mask=cols[:, None] < n_k, other=0.0)
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale  # (BLOCK_M, BLOCK_N)
        valid = cols[None, :] < n_k
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None] + shift)
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen nothing yet
        correction = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * correction + tl.sum(p, 1)
        v = tl.load(V + bh * stride_vb + cols[:, None] * stride_vn + dims[None, :], mask=cols[:, None] < n_k, other=0.0)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        O + bh * stride_ob + rows[:, None] * stride_on + dims[None, :],
        out.to(O.dtype.element_ty),
        mask=rows[:, None] < n_q,
    )


def blockwise_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool = False
) -> torch.Tensor:
    """Same contract as :func:`course.flash_attention.batched_blockwise_attention`, computed by the Triton kernel."""
    check_shapes(q, k, v, block)
    d = q.shape[-1]
    if d not in (16, 32, 64, 128, 256) or v.shape[-1] != d:
        raise ValueError(
            f"the Triton kernel needs a head dim of 16, 32, 64, 128 or 256 for q, k and v; got {d} "
            "(use course.flash_attention.batched_blockwise_attention for other sizes)"
        )
    if block not in (16, 32, 64, 128):
        raise ValueError(f"the Triton kernel needs block = 16, 32, 64 or 128 keys, got {block}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    if causal and n_q > n_k:
        raise ValueError(f"causal attention needs at least as many keys as queries, got {n_q} > {n_k}")
    lead = q.shape[:-2]
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], d).contiguous() for t in (q, k, v))  # (B*H, N, D)
    out = torch.empty_like(q3)
    block_m = 64 if q.is_cuda else 16  # small programs keep the interpreter quick
    grid = (triton.cdiv(n_q, block_m), q3.shape[0])
    # fewer pipelined blocks of keys where they do not fit the GPU's shared memory (float32 tiles of
    # 128 keys at head dim 128 need 256 KiB with Triton's default on Hopper, which has 227 KiB)
    tries = STAGES if q.is_cuda else (None,)  # None: Triton's own choice (the interpreter has no limit)
    for stages in tries:
        try:
            _launch(grid, q3, k3, v3, out, n_q, n_k, d, causal, block_m, block, stages)
            break
        except OutOfResources:
            if stages == tries[-1]:
                raise
    return out.reshape(*lead, n_q, d)


STAGES = (3, 2, 1)  # the pipeline depths tried on a GPU, deepest first


def _launch(grid, q3, k3, v3, out, n_q, n_k, d, causal, block_m, block, stages) -> None:
    _forward[grid](
        q3,
        k3,
        v3,
        out,
        n_q,
        n_k,
        1 / math.sqrt(d),
        q3.stride(0),
        q3.stride(1),
        k3.stride(0),
        k3.stride(1),
        v3.stride(0),
        v3.stride(1),
        out.stride(0),
        out.stride(1),
        CAUSAL=causal,
        BLOCK_M=block_m,
        BLOCK_N=block,
        D=d,
        **({"num_stages": stages} if stages else {}),
    )
