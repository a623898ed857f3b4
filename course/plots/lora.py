"""Chapter 2's figures: the SVD floor under any rank-r adapter, fine-tuning memory, measured losses."""

from __future__ import annotations

import functools

import numpy as np
import torch
from matplotlib.figure import Figure

from course import lora
from course.plots._widgets import (
    BLUE,
    GREY,
    ORANGE,
    PURPLE,
    RED,
    Chart,
    count_label,
    interactive,
    new_figure,
    nice_ceiling,
    slider,
)


@functools.lru_cache(maxsize=32)
def _spectrum(true_rank: int, noise: float, size: int, seed: int) -> tuple[np.ndarray, float]:
    """Singular values and the noise's own share: kept per change, so the rank slider only moves the marker."""
    delta = lora.low_rank_change(size, size, true_rank, noise, seed)
    singular = torch.linalg.svdvals(delta.double())[:32].numpy()
    return singular, lora.noise_share(size, size, true_rank, noise, seed)


class RankErrorChart(Chart):
    """A rank-``true_rank`` change plus noise: its singular values, and the best error at each rank.

    Drawn by ``rank_errors`` (:func:`course.lora.rank_errors` by a notebook's ``best_low_rank_error``,
    :func:`course.lora.your_rank_errors`) and ``lora_parameters`` when given, else by the course's
    answers: asked, when the chart is built, for every curve and count the widget can show."""

    def __init__(self, size: int = 64, seed: int = 0, rank_errors=None, lora_parameters=None):
        super().__init__(10, 3.4, left=0.07, wspace=0.28)
        self.size, self.seed = size, seed
        self.rank_errors = rank_errors or lora.COURSE.rank_errors
        lora_parameters = lora_parameters or lora.course_answer("lora_parameters")
        self.errors = {}  # (true_rank, noise) -> the best error at ranks 1..32
        for true_rank in TRUE_RANKS:  # every curve of the widget, asked now
            for noise in NOISES:
                self._errors(true_rank, noise)
        self.numbers = {rank: lora_parameters(size, size, rank) for rank in RANKS}
        self.ax_s, self.ax_e = self.figure.subplots(1, 2)
        self.bars = self.moving(*self.ax_s.bar(range(1, 33), [0] * 32, color=GREY))
        self.ax_s.set_xlim(0, 33)
        self.ax_s.set(xlabel="index", ylabel="singular value")
        self.moving(self.ax_s.title)
        self.curve = self.moving(*self.ax_e.plot([], [], "-", color=GREY))
        self.marker = self.moving(*self.ax_e.plot([], [], "o", color=RED, ms=9, label=" "))
        self.floor = self.moving(self.ax_e.axhline(0, color=ORANGE, ls=":", label=" "))
        self.true_rank = self.moving(self.ax_e.axvline(1, color=GREY, ls="--", lw=1))
        self.ax_e.set_xlim(0, 33)
        self.ax_e.set_ylim(0, 1.02)
        self.ax_e.set(xlabel="adapter rank r", ylabel="best relative error (truncated SVD)")
        self.moving(self.ax_e.title)
        self.legend = self.moving(self.ax_e.legend(fontsize=8, loc="upper right"))

    def _errors(self, true_rank: int, noise: float) -> list[float]:
        if (true_rank, noise) not in self.errors:
            self.errors[true_rank, noise] = self.rank_errors(self.size, self.size, true_rank, noise, self.seed, RANKS)
        return self.errors[true_rank, noise]

    def update(self, rank: int = 4, true_rank: int = 4, noise: float = 0.05) -> RankErrorChart:
        singular, floor = _spectrum(true_rank, noise, self.size, self.seed)
        errors = self._errors(true_rank, noise)
        for i, (bar, value) in enumerate(zip(self.bars, singular, strict=False)):
            bar.set_height(value)
            bar.set_facecolor(BLUE if i < rank else GREY)
        self.ax_s.set_ylim(0, nice_ceiling(singular.max() * 1.05))
        self.ax_s.set_title(f"spectrum of the change: rank {true_rank} + noise")
        self.curve.set_data(range(1, 33), errors)
        self.marker.set_data([rank], [errors[rank - 1]])
        self.floor.set_ydata([floor, floor])
        self.true_rank.set_xdata([true_rank, true_rank])
        labels = self.legend.get_texts()
        labels[0].set_text(f"rank {rank}: {100 * errors[rank - 1]:.1f}% error")
        labels[1].set_text(f"the noise alone: {100 * floor:.1f}%")
        self.ax_e.set_title(f"the floor for any adapter (r = {rank}: {self.numbers[rank]} numbers)")
        return self


def plot_rank_error(rank: int = 4, true_rank: int = 4, noise: float = 0.05, size: int = 64, seed: int = 0) -> Figure:
    """A rank-``true_rank`` change plus noise: its singular values, and the best error at each rank."""
    return RankErrorChart(size, seed).update(rank, true_rank, noise).figure


RANKS = list(range(1, 33))  # the adapter ranks the chart shows
TRUE_RANKS = range(1, 17)  # the widget's choices
NOISES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
MODELS = (1, 3, 7, 13, 34, 70)  # billions of parameters: the memory widget's choices


def widget_rank_error(rank_errors=None, lora_parameters=None) -> None:
    """Sliders for the adapter's rank, the change's true rank and the noise over :class:`RankErrorChart`,
    drawn by the functions given (a notebook's own) or the course's."""
    controls = {
        "rank": slider("IntSlider", min=1, max=RANKS[-1], value=4, description="adapter rank r"),
        "true_rank": slider("IntSlider", min=1, max=TRUE_RANKS[-1], value=4, description="true rank of the change"),
        "noise": slider("SelectionSlider", options=list(NOISES), value=0.05, description="noise"),
    }
    chart = RankErrorChart(rank_errors=rank_errors, lora_parameters=lora_parameters)
    interactive(chart, controls, "What rank does a change need?")


PARTS = {  # bytes per parameter of each part of the training state, per method
    "full": {"weights (bf16)": 2, "gradients (bf16)": 2, "Adam moments (fp32 x 2)": 8, "fp32 master copy": 4},
    "lora": {"weights (bf16)": 2},
    "qlora": {"weights (NF4)": 0.5},
}
PART_COLORS = {
    "weights (bf16)": BLUE,
    "gradients (bf16)": ORANGE,
    "Adam moments (fp32 x 2)": RED,
    "fp32 master copy": GREY,
    "weights (NF4)": PURPLE,
}


class FinetuneMemoryChart(Chart):
    """Weights and training state of full fine-tuning, LoRA and QLoRA, stacked, against one GPU.

    The bars stack the bytes per parameter of :data:`PARTS`; the totals above them are
    ``finetune_memory_gib``'s when given (a notebook's own), else the course's answer's: asked, when
    the chart is built, for every model size of the widget."""

    def __init__(self, finetune_memory_gib=None):
        super().__init__(7, 3.4, left=0.1, right=0.7)
        finetune_memory_gib = finetune_memory_gib or lora.course_answer("finetune_memory_gib")
        self.finetune_memory_gib = functools.cache(finetune_memory_gib)
        for params in MODELS:
            for method in PARTS:
                self.finetune_memory_gib(params * 1e9, method)
        self.ax = ax = self.figure.subplots()
        self.segments = []  # (method, part, bar, bytes per parameter)
        for x, method in enumerate(PARTS):
            for part, per in PARTS[method].items():
                (bar,) = ax.bar(x, 0, color=PART_COLORS[part], label=part)
                self.segments.append((method, part, self.moving(bar), per))
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))  # one legend entry per part
        ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        self.totals = [self.moving(ax.text(x, 0, "", ha="center", va="bottom", fontsize=9)) for x in range(3)]
        self.gpu = self.moving(ax.axhline(0, color="black", ls=":", lw=1))
        self.gpu_label = self.moving(ax.text(2.45, 0, "", va="bottom", ha="right", fontsize=8))
        ax.set_xlim(-0.6, 2.6)
        ax.set_xticks(range(3), ["full fine-tune\n(Adam)", "LoRA", "QLoRA"])
        ax.set_ylabel("GiB (weights + training state)")
        self.moving(ax.title)

    def update(self, params: float = 7e9, gpu_gib: float = 24.0) -> FinetuneMemoryChart:
        bottoms = dict.fromkeys(PARTS, 0.0)
        for method, _, bar, per in self.segments:
            height = params * per / lora.GiB
            bar.set_y(bottoms[method])
            bar.set_height(height)
            bottoms[method] += height
        for text, method in zip(self.totals, PARTS, strict=True):
            text.set_position((text.get_position()[0], bottoms[method]))
            text.set_text(f"{self.finetune_memory_gib(params, method):.1f} GiB")
        self.gpu.set_ydata([gpu_gib, gpu_gib])
        self.gpu_label.set_y(gpu_gib)
        self.gpu_label.set_text(f" {gpu_gib:g} GiB GPU")
        self.ax.set_ylim(0, nice_ceiling(max(max(bottoms.values()), gpu_gib) * 1.12))
        self.ax.set_title(f"fine-tuning a {count_label(params)}-parameter model")
        return self


def plot_finetune_memory(params: float = 7e9, gpu_gib: float = 24.0) -> Figure:
    """Weights and training state of full fine-tuning, LoRA and QLoRA, stacked, against one GPU."""
    return FinetuneMemoryChart().update(params, gpu_gib).figure


def widget_finetune_memory(finetune_memory_gib=None) -> None:
    """Sliders for the model's size and the GPU's memory over :class:`FinetuneMemoryChart`, its
    totals by the function given (a notebook's own) or the course's."""
    controls = {
        "params": slider(
            "SelectionSlider",
            options=[(f"{p:g}B", p * 1e9) for p in MODELS],
            value=7e9,
            description="parameters",
        ),
        "gpu_gib": slider(
            "SelectionSlider", options=[16.0, 24.0, 40.0, 80.0, 141.0], value=24.0, description="GPU GiB"
        ),
    }
    interactive(FinetuneMemoryChart(finetune_memory_gib), controls, "Who fits on one GPU?")


def plot_adapter_losses(
    base: float,
    by_rank: dict[int, float],
    full: float | None = None,
    qlora: dict[int, float] | None = None,
    adapters: str = "LoRA (fp32 base)",
) -> Figure:
    """Held-out-domain loss after fine-tuning, against the adapter's rank (log axis), the adapters'
    curve labelled ``adapters`` (whose they are); with no adapter's loss (``by_rank`` empty), the
    base's and the full fine-tune's lines only."""
    fig = new_figure(6, 3.4, left=0.13)
    ax = fig.subplots()
    ranks = sorted(by_rank)
    if ranks:
        ax.plot(ranks, [by_rank[r] for r in ranks], "o-", color=BLUE, label=adapters)
    if qlora:
        ax.plot(sorted(qlora), [qlora[r] for r in sorted(qlora)], "s--", color=PURPLE, label="QLoRA (NF4 base)")
    ax.axhline(base, color=GREY, ls=":", label=f"base model: {base:.3f}")
    if full is not None:
        ax.axhline(full, color=RED, ls="--", label=f"full fine-tune: {full:.3f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.minorticks_off()
    ax.set(xlabel="rank r", ylabel="held-out comedies (nats/byte)", title="adapting the course model to comedies")
    ax.legend(fontsize=8)
    return fig
