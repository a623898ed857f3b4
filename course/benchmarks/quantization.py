"""Chapter 3's measurements for ``make bench``: the round trip and NF4 against the memory bandwidth,
the int4 layer (torch's fused kernel) against float32 by size, and the course model's held-out loss
rounded to nearest, through GPTQ and through AWQ at 4 and 3 bits."""

from __future__ import annotations

import torch

from course import quantization, timing, withheld
from course.quantization import gaussian_matrix, nf4_levels, quantize_nf4, round_trip
from course.stored_weights import course_int4_layer


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter on ``device`` (printed; ratios returned for
    ``data/performance.json``). ``bound`` is the memory bandwidth in GB/s."""
    _round_trip_speed(device, bound)
    return _int4_layers(device) | _calibrated_losses()


def _round_trip_speed(device: torch.device, bound: float) -> None:
    """The round trip and NF4's encoding on a 4096 x 4096 matrix, and a matrix-vector product in float32
    and bfloat16, against the memory bandwidth ``bound`` (GB/s)."""
    print("\n== chapter 3: quantization ==")
    weight = gaussian_matrix(4096, 4096).to(device)
    seconds = timing.median_seconds(lambda: round_trip(weight, 4, 64), device, repeats=5)
    moved = 2 * weight.numel() * 4  # read the float32 weights, write them back
    print(
        f"int4 g64 round trip, 4096x4096: {1e3 * seconds:.1f} ms, {timing.gb_per_s(moved, seconds):.1f} GB/s "
        f"= {timing.gb_per_s(moved, seconds) / bound:.2f} of memory bandwidth"
    )

    nf4 = timing.median_seconds(lambda: quantize_nf4(weight, 64), device, repeats=3)
    levels = nf4_levels().to(device)
    small = weight[:512]

    def argmin_baseline():
        grouped = small.reshape(512, -1, 64)
        normalised = grouped / grouped.abs().amax(dim=-1, keepdim=True)
        return (normalised.unsqueeze(-1) - levels).abs().argmin(dim=-1)

    naive = timing.median_seconds(argmin_baseline, device, repeats=3) * (weight.shape[0] / 512)
    print(
        f"NF4 encode 4096x4096 (bucketize on midpoints): {1e3 * nf4:.0f} ms; "
        f"argmin over 16 levels baseline: {1e3 * naive:.0f} ms; speed-up {naive / nf4:.1f}x"
    )

    rows = {dtype: timing.matvec_bandwidth(4096, 4096, dtype, device) for dtype in (torch.float32, torch.bfloat16)}
    for row in rows.values():
        print(
            f"matvec 4096x4096 {row['dtype']:8s}: {1e3 * row['seconds']:.2f} ms, {row['gb_per_s']:.1f} GB/s "
            f"= {row['gb_per_s'] / bound:.2f} of memory bandwidth"
        )
    print(
        f"bf16 / fp32 matvec time: {rows[torch.bfloat16]['seconds'] / rows[torch.float32]['seconds']:.2f} "
        "(0.5 if reading the weights were all that counted)"
    )


INT4_SHAPES = {
    "4096x4096": (4096, 4096),
    "SmolLM2 up/gate": (1536, 576),
    "SmolLM2 down": (576, 1536),
    "SmolLM2 q/o": (576, 576),
}


def _int4_layers(device: torch.device) -> dict[str, float]:
    """Chapter 3's int4 layer (torch's fused kernel) against float32, one token through one layer, at
    4096 x 4096 and SmolLM2-135M's sizes, against the bytes ratio's bound; threads chosen on the largest."""
    print("\n== chapter 3: int4 layers (fused kernel) against float32, one token ==")
    big = course_int4_layer(gaussian_matrix(4096, 4096), 64).to(device)
    x = torch.randn(1, 4096, device=device)
    chosen, tried = timing.choose_threads(lambda: big(x), device)
    print(timing.describe_threads(chosen, tried))
    ratios = {}
    with timing.threads(chosen):
        for name, (n, k) in INT4_SHAPES.items():
            r = withheld.module("course.answers.choosing_a_technique").speedup(n, k, 64, device, repeats=15)
            share, spreads = r["speedup"] / r["bound"], f"float32 {r['fp32_spread']:.0%}, int4 {r['int4_spread']:.0%}"
            print(
                f"{name:16s} {n}x{k}: {r['speedup']:5.2f}x float32 ({r['path']}), {share:.2f} of the bytes "
                f"ratio's bound {r['bound']:.2f}x; spreads {spreads}"
            )
            key = name.split(" ")[0].lower() + ("" if n == k == 4096 else f"_{n}x{k}")
            ratios[f"int4_speedup_{key}"] = r["speedup"]
            ratios[f"int4_share_of_bound_{key}"] = r["speedup"] / r["bound"]
    return ratios


def _calibrated_losses() -> dict[str, float]:
    """The course model's held-out loss above float32 (nats per byte) at :data:`quantization.AWQ_BITS`,
    groups of 64: rounded to nearest, GPTQ and AWQ, calibrated as chapter 3 calibrates them. These are
    deterministic figures, recorded beside the speeds so that a change to the methods shows."""
    print("\n== chapter 3: calibrated quantization of the course model (groups of 64) ==")
    calibrated = quantization.course_model_calibrated()
    target, held_out, statistics, baseline = calibrated
    bits_list = quantization.AWQ_BITS  # GPTQ at these widths only: the others would not be recorded
    by_method = quantization.gptq_against_rtn(
        target,
        statistics["hessian"],
        held_out,
        bits_list,
        quantize_dequantize=quantization.round_trip,
        gptq_quantize=quantization.quantize_gptq,
    )
    awq = quantization.course_model_awq(calibrated)
    losses = {**by_method, "AWQ": {bits: awq[bits]["loss"] for bits in bits_list}}
    gaps = {}
    for bits in bits_list:
        print(
            f"{bits} bits: "
            + ", ".join(f"{method} {by_bits[bits] - baseline:+.4f}" for method, by_bits in losses.items())
            + f" nats/byte over float32's {baseline:.4f}"
        )
        for method, by_bits in losses.items():
            gaps[f"loss_gap_{method.replace(' ', '_').lower()}_g64_{bits}bit"] = by_bits[bits] - baseline
    return gaps
