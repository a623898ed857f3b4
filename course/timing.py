"""Timing that means something: warm-up, device synchronisation, the median of repeats.

Report ratios against a baseline timed in the same run, and the physical bound (bytes over
bandwidth, FLOPs over peak), never a bare time. Not handled: CUDA events, multi-device work.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from course.device import synchronize


def median_seconds(
    fn: Callable[[], object], device: torch.device | None = None, warmup: int = 2, repeats: int = 7
) -> float:
    """Median wall-clock seconds of ``fn()`` after ``warmup`` untimed calls."""
    device = device or torch.device("cpu")
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gb_per_s(n_bytes: float, seconds: float) -> float:
    """Bytes moved per second, in GB/s (10^9)."""
    return n_bytes / seconds / 1e9


def matvec_bandwidth(rows: int, cols: int, dtype: torch.dtype, device: torch.device, repeats: int = 7) -> dict:
    """Time ``W @ x`` for a (rows, cols) matrix: a decode step in miniature, bound by reading W.

    Returns seconds, the bytes of W, and the GB/s that reading W once per product implies.
    """
    generator = torch.Generator(device="cpu").manual_seed(0)
    weight = torch.randn(rows, cols, generator=generator).to(device=device, dtype=dtype)
    x = torch.randn(cols, 1, generator=generator).to(device=device, dtype=dtype)
    seconds = median_seconds(lambda: weight @ x, device, repeats=repeats)
    n_bytes = weight.numel() * weight.element_size()
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "seconds": seconds,
        "bytes": n_bytes,
        "gb_per_s": gb_per_s(n_bytes, seconds),
    }


def memory_bandwidth(device: torch.device, n_bytes: int = 256 * 2**20) -> float:
    """GB/s of reading memory the way decode does: a matrix-vector product with an ``n_bytes``
    float32 matrix, far larger than any cache. This is the roof decode is measured against."""
    n = int((n_bytes / 4) ** 0.5)
    return matvec_bandwidth(n, n, torch.float32, device)["gb_per_s"]


def matmul_flops(n: int, dtype: torch.dtype, device: torch.device, repeats: int = 5) -> float:
    """FLOP/s of an (n, n) @ (n, n) product: 2 n^3 FLOPs, the compute bound prefill lives under."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    seconds = median_seconds(lambda: a @ b, device, repeats=repeats)
    return 2 * n**3 / seconds
