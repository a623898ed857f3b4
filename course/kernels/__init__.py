"""Fast kernels, and the dispatcher that picks one: :func:`attention` runs the Triton kernel
(``course.kernels.flash_attention``) for CUDA tensors when Triton is usable, the course's torch
loop (``course.flash_attention.batched_blockwise_attention``) otherwise; both have one signature.
Triton is imported only where it is usable (a CUDA device, or ``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import torch

from course.device import triton_available
from course.flash_attention import batched_blockwise_attention

# The largest difference from the float64 reference that each path may show, by device and input
# dtype. On the CPU both paths compute in float32. On a GPU the Triton kernel's tl.dot takes float32
# inputs as TF32 (10-bit mantissa, about 1e-3 relative) and bfloat16 inputs as they are (8 bits);
# Triton's fused-attention tutorial checks fp16 at 1e-2.
TOLERANCE = {
    ("cpu", torch.float32): 1e-5,
    ("cuda", torch.float32): 5e-3,
    ("cuda", torch.bfloat16): 2e-2,
    ("cuda", torch.float16): 1e-2,
}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int = 64, causal: bool = False) -> torch.Tensor:
    """Blockwise attention on the fastest path available; both paths give the same result to rounding."""
    if q.is_cuda and triton_available(q.device):
        try:
            from course.kernels import flash_attention as kernel
        except ImportError:  # the learners' copy leaves the kernel out (it is chapter 5's answer)
            kernel = None
        if kernel is not None:
            return kernel.blockwise_attention(q, k, v, block, causal)
    return batched_blockwise_attention(q, k, v, block, causal)
