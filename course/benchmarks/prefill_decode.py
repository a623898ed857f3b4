"""Chapter 1's measurements for ``make bench``: decode against the memory roofline."""

from __future__ import annotations

import torch

from course import evaluation, timing
from course.model import TIMING, LanguageModel
from course.prefill_decode import Hardware, critical_batch


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter on ``device`` (printed; ratios returned for
    ``data/performance.json``): decode against the memory roofline, batch by batch, and where
    scaling bends against the roofline's critical batch. ``bound`` is the memory bandwidth in GB/s."""
    print("\n== chapter 1: decode against the memory roofline ==")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    model = LanguageModel(TIMING).to(device=device, dtype=dtype).eval()
    n_bytes = model.num_parameters() * model.embed.weight.element_size()
    per_batch = evaluation.decode_throughput(model, (1, 2, 4, 8, 16, 32, 64, 128), steps=6)
    efficiency = evaluation.scaling_efficiency(per_batch)
    predicted = bound * 1e9 / n_bytes  # tokens/s at batch 1 if reading the weights were all
    print(
        f"{n_bytes / 1e6:.0f} MB of weights; batch 1 decodes {per_batch[1]:.1f} tokens/s = "
        f"{per_batch[1] / predicted:.0%} of the memory roofline ({predicted:.1f} tokens/s at {bound:.1f} GB/s)"
    )
    for batch, rate in per_batch.items():
        print(f"  batch {batch:3d}: {rate:7.1f} tokens/s, {efficiency[batch]:4.0%} of perfect scaling")
    row_cost = evaluation.linear_row_cost(model)
    print(evaluation.describe_row_cost(row_cost))
    print(evaluation.decode_batch_reading(per_batch, row_cost))
    bend = evaluation.scaling_bend(per_batch)
    peak = timing.matmul_flops(1024, dtype, device)
    here = Hardware("here", peak, bound * 1e9, 0)
    critical = critical_batch(here, 8 * model.embed.weight.element_size())
    print(
        f"scaling falls below half of perfect at batch {bend}; the roofline's bend "
        f"(matmul {peak / 1e9:.0f} GFLOP/s) is at {critical:.0f}"
    )
    return {"decode_vs_roofline": per_batch[1] / predicted, "two_rows_vs_one": row_cost[2]}
