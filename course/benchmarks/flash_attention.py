"""Chapter 5's measurements for ``make bench``: the Triton kernel against torch's SDPA on a CUDA GPU
(``tools/gpu_check.py`` uses :func:`triton_against_sdpa` too), the full score matrix and the blockwise
loop against SDPA on any device."""

from __future__ import annotations

import functools

import torch

from course import timing
from course.device import triton_available
from course.flash_attention import batched_blockwise_attention, naive_attention


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter on ``device`` (printed; ratios returned for
    ``data/performance.json``): the Triton kernel against torch's SDPA on a CUDA GPU, and on any device
    the full score matrix and the blockwise loop against SDPA. (``bound`` is not used here.)"""
    print("\n== chapter 5: attention ==")
    ratios = {}
    if device.type == "cuda" and triton_available(device):
        for row in triton_against_sdpa(device):
            ratios[f"triton_vs_sdpa_{row['n']}"] = row["ratio"]
            print(
                f"N = {row['n']:5d}, 16 heads of 64, causal, bf16: Triton {row['kernel_ms']:.2f} ms "
                f"({row['kernel_tflops']:.0f} TFLOP/s), SDPA {row['sdpa_ms']:.2f} ms: Triton / SDPA = "
                f"{row['ratio']:.2f} (goal <= 1.2 at 4096)"
            )
    else:
        print("Triton kernel: not timed (needs a CUDA GPU; its logic is tested through the interpreter)")
    for n in (512, 2048):
        q, k, v = (torch.randn(1, 4, n, 64, device=device) for _ in range(3))
        sdpa, full, loop = (
            timing.median_seconds(functools.partial(attention, q, k, v, **options), device, repeats=3)
            for attention, options in (
                (torch.nn.functional.scaled_dot_product_attention, {"is_causal": True}),
                (naive_attention, {"causal": True}),
                (batched_blockwise_attention, {"block": 64, "causal": True}),
            )
        )
        print(
            f"N = {n:4d}, 4 heads of 64, causal, fp32: full score matrix {full / sdpa:.1f}x SDPA's time, "
            f"blockwise torch loop {loop / sdpa:.1f}x ({1e3 * sdpa:.2f} ms for SDPA)"
        )
    return ratios


def triton_against_sdpa(
    device: torch.device,
    lengths=(1024, 4096, 16384),
    dtype: torch.dtype = torch.bfloat16,
    heads: int = 16,
    head_dim: int = 64,
    kernel=None,
    repeats: int = 10,
) -> list[dict]:
    """The Triton kernel (or ``kernel``, same signature) against torch's SDPA, causal, one row per length:
    the largest difference of each from SDPA in float32, both times, the ratio and the kernel's TFLOP/s."""
    if kernel is None:
        from course.kernels import flash_attention as triton_kernel

        kernel = triton_kernel.blockwise_attention
    generator = torch.Generator().manual_seed(0)
    rows = []
    for n in lengths:
        q, k, v = (torch.randn(1, heads, n, head_dim, generator=generator).to(device, dtype) for _ in range(3))
        exact = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        sdpa_out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        difference = (kernel(q, k, v, 64, causal=True).float() - exact).abs().max().item()
        sdpa_difference = (sdpa_out.float() - exact).abs().max().item()
        del exact, sdpa_out
        sdpa = timing.median_seconds(
            functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v, is_causal=True),
            device,
            repeats=repeats,
        )
        ours = timing.median_seconds(functools.partial(kernel, q, k, v, 64, causal=True), device, repeats=repeats)
        flops = 4 * heads * n * n * head_dim * 0.5  # causal: half the score matrix
        rows.append(
            {
                "n": n,
                "difference": difference,
                "sdpa_difference": sdpa_difference,
                "kernel_ms": 1e3 * ours,
                "sdpa_ms": 1e3 * sdpa,
                "ratio": ours / sdpa,
                "kernel_tflops": flops / ours / 1e12,
            }
        )
    return rows
