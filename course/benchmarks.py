"""``make bench``: the course's measurements on this machine, as ratios.

Each line gives a ratio against a baseline timed in the same run, and against the physical bound
where there is one (this machine's copy bandwidth, measured first). Nothing here asserts a time;
the numbers are for reading, and for the closing notes of the work that changes them.
"""

from __future__ import annotations

import statistics
import time

import torch

from course import bench, quant, viz
from course.device import best_device, describe, synchronize


def copy_bandwidth(device: torch.device, n_bytes: int = 256 * 2**20) -> float:
    """GB/s of a large tensor copy (read plus write): the memory bound the others are held to."""
    source = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    seconds = bench.median_seconds(lambda: target.copy_(source), device)
    return bench.gb_per_s(2 * n_bytes, seconds)


def quantization(device: torch.device, bound: float) -> None:
    print("\n== chapter 3: quantization ==")
    weight = quant.gaussian_matrix(4096, 4096).to(device)
    seconds = bench.median_seconds(lambda: quant.quantize_dequantize(weight, 4, 64), device, repeats=5)
    moved = 2 * weight.numel() * 4  # read the float32 weights, write them back
    print(f"int4 g64 round trip, 4096x4096: {1e3 * seconds:.1f} ms, {bench.gb_per_s(moved, seconds):.1f} GB/s "
          f"= {bench.gb_per_s(moved, seconds) / bound:.2f} of copy bandwidth")

    nf4 = bench.median_seconds(lambda: quant.quantize_nf4(weight, 64), device, repeats=3)
    levels = quant.nf4_levels().to(device)
    small = weight[:512]

    def argmin_baseline():
        grouped = small.reshape(512, -1, 64)
        normalised = grouped / grouped.abs().amax(dim=-1, keepdim=True)
        return (normalised.unsqueeze(-1) - levels).abs().argmin(dim=-1)

    naive = bench.median_seconds(argmin_baseline, device, repeats=3) * (weight.shape[0] / 512)
    print(f"NF4 encode 4096x4096 (bucketize on midpoints): {1e3 * nf4:.0f} ms; "
          f"argmin over 16 levels baseline: {1e3 * naive:.0f} ms; speed-up {naive / nf4:.1f}x")

    rows = {dtype: bench.matvec_bandwidth(4096, 4096, dtype, device) for dtype in (torch.float32, torch.bfloat16)}
    for dtype, row in rows.items():
        print(f"matvec 4096x4096 {row['dtype']:8s}: {1e3 * row['seconds']:.2f} ms, {row['gb_per_s']:.1f} GB/s "
              f"= {row['gb_per_s'] / bound:.2f} of copy bandwidth")
    print(f"bf16 / fp32 matvec time: {rows[torch.bfloat16]['seconds'] / rows[torch.float32]['seconds']:.2f} "
          "(0.5 if reading the weights were all that counted)")


def slider_latency() -> None:
    print("\n== slider updates (recompute + redraw to PNG; goal 100 ms) ==")
    sweeps = {
        "ch3 bits": [dict(bits=b, group_size=32, outlier=20.0) for b in range(2, 9)],
        "ch3 group size": [dict(bits=4, group_size=g, outlier=20.0) for _, g in viz.GROUP_CHOICES],
        "ch3 outlier": [dict(bits=4, group_size=None, outlier=o) for o in (1.0, 10.0, 20.0, 40.0, 60.0)],
    }
    viz.figure_png(viz.plot_quantization())  # warm-up: fonts, caches
    for name, values in sweeps.items():
        times = []
        for kwargs in values:
            start = time.perf_counter()
            viz.figure_png(viz.plot_quantization(**kwargs))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        verdict = "ok" if median <= 0.1 else f"over by {1e3 * (median - 0.1):.0f} ms"
        print(f"{name:16s} median {1e3 * median:6.1f} ms over {len(values)} values ({verdict})")


def main() -> None:
    device = best_device()
    torch.manual_seed(0)
    print(describe(device))
    bound = copy_bandwidth(device)
    print(f"copy bandwidth (the memory bound below): {bound:.1f} GB/s")
    synchronize(device)
    quantization(device, bound)
    slider_latency()


if __name__ == "__main__":
    main()
