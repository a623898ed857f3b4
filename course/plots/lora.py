"""Chapter 2's figures: the SVD floor under any rank-r adapter, fine-tuning memory, measured losses."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from course import lora
from course.plots._widgets import BLUE, GREY, ORANGE, RED, count_label, interactive, new_figure, slider


def plot_rank_error(rank: int = 4, true_rank: int = 4, noise: float = 0.05, size: int = 64, seed: int = 0) -> Figure:
    """A rank-``true_rank`` change plus noise: its singular values, and the best error at each rank."""
    delta = lora.low_rank_change(size, size, true_rank, noise, seed)
    singular = torch.linalg.svdvals(delta.double())
    ranks = list(range(1, 33))
    errors = [lora.best_low_rank_error(delta, r) for r in ranks]
    noise_only = lora.low_rank_change(size, size, true_rank, 0.0, seed)
    floor = (delta - noise_only).norm().item() / delta.norm().item()
    fig = new_figure(10, 3.4, left=0.07, wspace=0.28)
    ax_s, ax_e = fig.subplots(1, 2)
    ax_s.bar(range(1, 33), singular[:32].numpy(), color=[BLUE if i < rank else GREY for i in range(32)])
    ax_s.set(xlabel="index", ylabel="singular value", title=f"spectrum of the change: rank {true_rank} + noise")
    ax_e.plot(ranks, errors, "-", color=GREY)
    ax_e.plot(
        [rank], [errors[rank - 1]], "o", color=RED, ms=9, label=f"rank {rank}: {100 * errors[rank - 1]:.1f}% error"
    )
    ax_e.axhline(floor, color=ORANGE, ls=":", label=f"the noise alone: {100 * floor:.1f}%")
    ax_e.axvline(true_rank, color=GREY, ls="--", lw=1)
    ax_e.set_ylim(0, 1.02)
    ax_e.set(
        xlabel="adapter rank r",
        ylabel="best relative error (truncated SVD)",
        title=f"the floor for any adapter (r = {rank}: {lora.lora_parameters(size, size, rank)} numbers)",
    )
    ax_e.legend(fontsize=8)
    return fig


def widget_rank_error() -> None:
    """Sliders for the adapter's rank, the change's true rank and the noise over :func:`plot_rank_error`."""
    controls = {
        "rank": slider("IntSlider", min=1, max=32, value=4, description="adapter rank r"),
        "true_rank": slider("IntSlider", min=1, max=16, value=4, description="true rank of the change"),
        "noise": slider(
            "SelectionSlider", options=[0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5], value=0.05, description="noise"
        ),
    }
    interactive(plot_rank_error, controls, "What rank does a change need?")


PARTS = {  # bytes per parameter of each part of the training state, per method
    "full": {"weights (bf16)": 2, "gradients (bf16)": 2, "Adam moments (fp32 x 2)": 8, "fp32 master copy": 4},
    "lora": {"weights (bf16)": 2},
    "qlora": {"weights (NF4)": 0.5},
}


def plot_finetune_memory(params: float = 7e9, gpu_gib: float = 24.0) -> Figure:
    """Weights and training state of full fine-tuning, LoRA and QLoRA, stacked, against one GPU."""
    fig = new_figure(7, 3.4, left=0.1, right=0.7)
    ax = fig.subplots()
    colors = {
        "weights (bf16)": BLUE,
        "gradients (bf16)": ORANGE,
        "Adam moments (fp32 x 2)": RED,
        "fp32 master copy": GREY,
        "weights (NF4)": "#9467bd",
    }
    labelled = set()
    for x, method in enumerate(PARTS):
        bottom = 0.0
        for part, per in PARTS[method].items():
            height = params * per / lora.GiB
            ax.bar(x, height, bottom=bottom, color=colors[part], label=None if part in labelled else part)
            labelled.add(part)
            bottom += height
        ax.text(x, bottom, f"{lora.finetune_memory_gib(params, method):.1f} GiB", ha="center", va="bottom", fontsize=9)
    ax.axhline(gpu_gib, color="black", ls=":", lw=1)
    ax.text(2.45, gpu_gib, f" {gpu_gib:g} GiB GPU", va="bottom", ha="right", fontsize=8)
    ax.set_xticks(range(3), ["full fine-tune\n(Adam)", "LoRA", "QLoRA"])
    ax.set(ylabel="GiB (weights + training state)", title=f"fine-tuning a {count_label(params)}-parameter model")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def widget_finetune_memory() -> None:
    controls = {
        "params": slider(
            "SelectionSlider",
            options=[(f"{p:g}B", p * 1e9) for p in (1, 3, 7, 13, 34, 70)],
            value=7e9,
            description="parameters",
        ),
        "gpu_gib": slider(
            "SelectionSlider", options=[16.0, 24.0, 40.0, 80.0, 141.0], value=24.0, description="GPU GiB"
        ),
    }
    interactive(plot_finetune_memory, controls, "Who fits on one GPU?")


def plot_adapter_losses(
    base: float, by_rank: dict[int, float], full: float | None = None, qlora: dict[int, float] | None = None
) -> Figure:
    """Held-out-domain loss after fine-tuning, against the adapter's rank (log axis)."""
    fig = new_figure(6, 3.4, left=0.13)
    ax = fig.subplots()
    ranks = sorted(by_rank)
    ax.plot(ranks, [by_rank[r] for r in ranks], "o-", color=BLUE, label="LoRA (fp32 base)")
    if qlora:
        ax.plot(sorted(qlora), [qlora[r] for r in sorted(qlora)], "s--", color="#9467bd", label="QLoRA (NF4 base)")
    ax.axhline(base, color=GREY, ls=":", label=f"base model: {base:.3f}")
    if full is not None:
        ax.axhline(full, color=RED, ls="--", label=f"full fine-tune: {full:.3f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.minorticks_off()
    ax.set(xlabel="rank r", ylabel="held-out comedies (nats/byte)", title="adapting the course model to comedies")
    ax.legend(fontsize=8)
    return fig
