"""``make bench``: the course's measurements on this machine, as ratios.

Each line gives a ratio against a baseline timed in the same run, and against the physical bound
where there is one (this machine's memory bandwidth, measured first). Nothing here asserts a time;
the numbers are for reading, and for the closing notes of the work that changes them.
"""

from __future__ import annotations

import statistics
import time

import torch

from course import bench, quant, viz
from course.device import best_device, describe, synchronize


def quantization(device: torch.device, bound: float) -> None:
    print("\n== chapter 3: quantization ==")
    weight = quant.gaussian_matrix(4096, 4096).to(device)
    seconds = bench.median_seconds(lambda: quant.quantize_dequantize(weight, 4, 64), device, repeats=5)
    moved = 2 * weight.numel() * 4  # read the float32 weights, write them back
    print(f"int4 g64 round trip, 4096x4096: {1e3 * seconds:.1f} ms, {bench.gb_per_s(moved, seconds):.1f} GB/s "
          f"= {bench.gb_per_s(moved, seconds) / bound:.2f} of memory bandwidth")

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
              f"= {row['gb_per_s'] / bound:.2f} of memory bandwidth")
    print(f"bf16 / fp32 matvec time: {rows[torch.bfloat16]['seconds'] / rows[torch.float32]['seconds']:.2f} "
          "(0.5 if reading the weights were all that counted)")


def slider_latency() -> None:
    """Median time of one slider update (recompute plus redraw to PNG) over a sweep of its values."""
    print("\n== slider updates (recompute + redraw to PNG; goal 100 ms) ==")
    sweeps = {
        "ch1 batch": (viz.plot_roofline, [dict(batch=b) for b in (1, 4, 16, 64, 256, 1024)]),
        "ch1 hardware": (viz.plot_roofline, [dict(hardware=h) for h in ("T4", "A100-80G", "H100 SXM", "H200")]),
        "ch1 arrival rate": (viz.plot_batching, [dict(rate=r) for r in (2.0, 8.0, 20.0, 40.0)]),
        "ch3 bits": (viz.plot_quantization, [dict(bits=b, group_size=32) for b in range(2, 9)]),
        "ch3 group size": (viz.plot_quantization, [dict(group_size=g) for _, g in viz.GROUP_CHOICES]),
        "ch3 outlier": (viz.plot_quantization, [dict(outlier=o) for o in (1.0, 10.0, 20.0, 40.0, 60.0)]),
    }
    over = []
    for name, (plot, values) in sweeps.items():
        viz.figure_png(plot(**values[0]))  # warm-up: fonts, caches
        times = []
        for kwargs in values:
            start = time.perf_counter()
            viz.figure_png(plot(**kwargs))
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        verdict = "ok" if median <= 0.1 else f"over by {1e3 * (median - 0.1):.0f} ms"
        over += [name] if median > 0.1 else []
        print(f"{name:17s} median {1e3 * median:6.1f} ms over {len(values)} values ({verdict})")
    print(f"{len(over)} of {len(sweeps)} sliders over the 100 ms budget" + (f": {', '.join(over)}" if over else ""))


def course_model(device: torch.device) -> None:
    from course import checkpoints, corpus, evaluation

    print("\n== the course model ==")
    for name in ("target", "draft"):
        model = checkpoints.load(name, device)
        loss = evaluation.text_loss(model, corpus.tokens("validation").to(device))
        print(f"{name}: {model.num_parameters():,} parameters, {loss:.3f} nats/byte on all held-out plays "
              f"(perplexity {evaluation.perplexity(loss):.2f})")
    target = checkpoints.load("target", device, max_seq_len=1024)
    cached = evaluation.decode_tokens_per_second(target, 1, new_tokens=512, prompt_len=1, use_cache=True, repeats=1)
    uncached = evaluation.decode_tokens_per_second(target, 1, new_tokens=512, prompt_len=1, use_cache=False, repeats=1)
    print(f"decode, 512 generated tokens: {cached:.0f} tokens/s with the KV cache, {uncached:.1f} without: "
          f"{cached / uncached:.1f}x (goal 10x)")
    prefill = evaluation.prefill_seconds_per_token(target, 1, 256)
    step = evaluation.decode_step_seconds(target, 1)
    print(f"prefill {1e3 * prefill:.3f} ms per prompt token, decode {1e3 * step:.2f} ms per generated token: "
          f"a generated token costs {step / prefill:.0f}x a prompt token")


def decode_roofline(device: torch.device, bound: float) -> None:
    from course import arithmetic, evaluation
    from course.model import TIMING, LanguageModel

    print("\n== chapter 1: decode against the memory roofline ==")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    model = LanguageModel(TIMING).to(device=device, dtype=dtype).eval()
    n_bytes = model.num_parameters() * model.embed.weight.element_size()
    per_batch = evaluation.decode_throughput(model, (1, 2, 4, 8, 16, 32, 64, 128), steps=6)
    efficiency = evaluation.scaling_efficiency(per_batch)
    predicted = bound * 1e9 / n_bytes  # tokens/s at batch 1 if reading the weights were all
    print(f"{n_bytes / 1e6:.0f} MB of weights; batch 1 decodes {per_batch[1]:.1f} tokens/s = "
          f"{per_batch[1] / predicted:.0%} of the memory roofline ({predicted:.1f} tokens/s at {bound:.1f} GB/s)")
    for batch, rate in per_batch.items():
        print(f"  batch {batch:3d}: {rate:7.1f} tokens/s, {efficiency[batch]:4.0%} of perfect scaling")
    bend = evaluation.scaling_bend(per_batch)
    peak = bench.matmul_flops(1024, dtype, device)
    here = arithmetic.Hardware("here", peak, bound * 1e9, 0)
    print(f"scaling falls below half of perfect at batch {bend}; the roofline's bend "
          f"(matmul {peak / 1e9:.0f} GFLOP/s) is at {arithmetic.critical_batch(here, 8 * model.embed.weight.element_size()):.0f}")


def main() -> None:
    device = best_device()
    torch.manual_seed(0)
    print(describe(device))
    bound = bench.memory_bandwidth(device)
    print(f"memory bandwidth, reading a 256 MB matrix (the bound below): {bound:.1f} GB/s")
    synchronize(device)
    quantization(device, bound)
    decode_roofline(device, bound)
    course_model(device)
    slider_latency()


if __name__ == "__main__":
    main()
