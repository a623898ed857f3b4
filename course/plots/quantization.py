"""Chapter 3's figures: one matrix quantized under the sliders, granularities, an outlier's row,
bits against error, the course model's loss against bits, where NF4 puts its levels."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from course import quantization
from course.plots._widgets import BLUE, GREY, ORANGE, RED, interactive, new_figure, slider

GROUP_CHOICES = (
    ("per tensor", "tensor"),
    ("per row", None),
    ("group 128", 128),
    ("group 64", 64),
    ("group 32", 32),
    ("group 16", 16),
)


def _round_trip(weight: torch.Tensor, bits: int, group) -> torch.Tensor:
    if group == "tensor":
        return quantization.quantize_dequantize_per_tensor(weight, bits)
    return quantization.quantize_dequantize(weight, bits, group)


def _group_label(group) -> str:
    return next(label for label, value in GROUP_CHOICES if value == group)


def plot_quantization(bits: int = 4, group_size=None, outlier: float = 20.0, seed: int = 0) -> Figure:
    """One matrix with outlier columns, quantized at ``bits`` with ``group_size``.

    Left: one row's weights against their quantized values. Middle: how often each integer
    code is used. Right: relative error of every granularity at this bit width.
    """
    weight = quantization.outlier_matrix(128, 512, magnitude=outlier, seed=seed)
    levels = quantization.absmax_levels(bits)
    fig = new_figure(11, 3.2, left=0.07)
    ax_row, ax_codes, ax_err = fig.subplots(1, 3)

    approx = _round_trip(weight, bits, group_size)
    row = weight[0].numpy()
    ax_row.scatter(row, approx[0].numpy(), s=6, color=BLUE)
    lim = np.quantile(np.abs(row), 0.98) * 1.2  # zoom on the ordinary weights; outliers fall outside
    ax_row.plot([-lim, lim], [-lim, lim], color=GREY, lw=0.8, ls="--")
    ax_row.set(
        xlim=(-lim, lim),
        ylim=(-lim, lim),
        xlabel="weight (outliers off the chart)",
        ylabel="after quantization",
        title=f"row 0, int{bits}, {_group_label(group_size)}",
    )

    if group_size == "tensor":
        codes, _ = quantization.quantize(weight.reshape(1, -1), bits)
    else:
        codes, _ = quantization.quantize(weight, bits, group_size)
    counts = torch.bincount((codes.flatten() + levels).long(), minlength=2 * levels + 1).numpy()
    edges = np.arange(-levels, levels + 2) - 0.5
    ax_codes.stairs(counts / counts.sum(), edges, fill=True, color=BLUE)
    used = (counts > 0).sum()
    ax_codes.set(xlabel="integer code", ylabel="share of weights", title=f"{used} of {2 * levels + 1} codes used")

    labels, errors = [], []
    for label, group in GROUP_CHOICES:
        labels.append(label.replace("group ", "g").replace("per ", ""))
        errors.append(100 * quantization.relative_error(weight, _round_trip(weight, bits, group)))
    colors = [ORANGE if group == group_size else BLUE for _, group in GROUP_CHOICES]
    bars = ax_err.bar(labels, errors, color=colors)
    ax_err.bar_label(bars, fmt="%.1f", fontsize=8)
    ax_err.set(ylabel="relative error (%)", title=f"int{bits}, outliers x{outlier:g}")
    ax_err.tick_params(axis="x", labelsize=8)
    return fig


def widget_quantization() -> None:
    """Sliders for bits, group size and outlier magnitude over :func:`plot_quantization`."""
    controls = {
        "bits": slider("IntSlider", value=4, min=2, max=8, description="bits"),
        "group_size": slider("Dropdown", options=list(GROUP_CHOICES), value=None, description="scales"),
        "outlier": slider("FloatSlider", value=20.0, min=1.0, max=60.0, step=1.0, description="outlier x"),
    }
    interactive(plot_quantization, controls, "Quantization error: bits, scales and outliers")


def plot_granularity_bars(with_outliers: dict[str, float], without_outliers: dict[str, float]) -> Figure:
    """Relative error per granularity at 8 and 4 bits, with and without outlier columns.

    Both dicts are keyed like :func:`course.quantization.granularity_errors` (``int8_row``, ``int4_g32``).
    """
    fig = new_figure(9, 3.2)
    axes = fig.subplots(1, 2)
    for ax, bits in zip(axes, (8, 4), strict=True):
        keys = [k for k in with_outliers if k.startswith(f"int{bits}_")]
        x = np.arange(len(keys))
        spiky = [100 * with_outliers[k] for k in keys]
        clean = [100 * without_outliers[k] for k in keys]
        b1 = ax.bar(x - 0.2, spiky, 0.4, label="with outlier columns", color=ORANGE)
        b2 = ax.bar(x + 0.2, clean, 0.4, label="without", color=BLUE)
        ax.bar_label(b1, fmt="%.1f", fontsize=8)
        ax.bar_label(b2, fmt="%.1f", fontsize=8)
        ax.set_xticks(x, [k.split("_")[1].replace("g", "group ") for k in keys])
        ax.set(title=f"int{bits}", ylabel="relative error (%)")
    axes[0].legend(fontsize=8)
    return fig


def plot_outlier_row(outlier: float = 4.2, seed: int = 3) -> Figure:
    """One row of 64 weights at int8 before and after one weight becomes ``outlier``."""
    row = quantization.gaussian_matrix(1, 64, std=0.15, seed=seed)
    spiked = row.clone()
    spiked[0, 0] = outlier
    fig = new_figure(10, 3, bottom=0.18, wspace=0.05)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, weights, title in (
        (axes[0], row, "without the outlier"),
        (axes[1], spiked, f"weight 0 set to {outlier:g}"),
    ):
        approx = quantization.quantize_dequantize(weights, 8)
        step = weights.abs().max().item() / 127
        x = np.arange(1, 64)
        ax.stem(x, weights[0, 1:].numpy(), linefmt=GREY, markerfmt="o", basefmt=" ", label="weight")
        ax.plot(x, approx[0, 1:].numpy(), "_", color=RED, ms=10, mew=2, label="int8 value")
        ax.set(title=f"{title}: step {step:.4f}", xlabel="weight index (the outlier, index 0, not drawn)")
    axes[0].set_ylabel("value")
    axes[0].legend(fontsize=8)
    return fig


def plot_bits_sweep(weight: torch.Tensor, groups=(None, 128, 32), bits_range=range(2, 9)) -> Figure:
    """Relative error against bit width for several granularities, on a log scale."""
    fig = new_figure(5.5, 3.2, left=0.15)
    ax = fig.subplots()
    for group in groups:
        errors = [
            quantization.relative_error(weight, quantization.quantize_dequantize(weight, b, group)) for b in bits_range
        ]
        ax.semilogy(list(bits_range), errors, "o-", label="per row" if group is None else f"group {group}")
    ax.set(xlabel="bits", ylabel="relative error", title="each bit halves the error")
    ax.legend(fontsize=8)
    return fig


def plot_model_bits(losses: dict[str, dict[int, float]], baseline: float) -> Figure:
    """Validation loss of a quantized model against bits, one line per granularity.

    ``losses``: label -> {bits: loss in nats per byte}; ``baseline``: the unquantized loss.
    """
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    for label, by_bits in losses.items():
        bits = sorted(by_bits)
        ax.plot(bits, [by_bits[b] for b in bits], "o-", label=label)
    ax.axhline(baseline, color=GREY, ls="--", lw=1, label="float32")
    ax.set(
        xlabel="bits per weight (scales not counted)",
        ylabel="validation loss (nats/byte)",
        title="the course model, quantized",
    )
    ax.legend(fontsize=8)
    return fig


def plot_nf4_levels(seed: int = 0) -> Figure:
    """Where int4 and NF4 put their 16 levels, over a histogram of normally distributed weights."""
    weights = quantization.gaussian_matrix(1, 4096, std=1.0, seed=seed)[0]
    normalised = (weights / weights.abs().max()).numpy()
    fig = new_figure(9, 2.8, left=0.03)
    ax = fig.subplots()
    ax.hist(normalised, bins=80, density=True, color="#c6dbef", label="weights / absmax")
    int4 = np.arange(-7, 8) / 7
    nf4 = quantization.nf4_levels().numpy()
    top = ax.get_ylim()[1]
    ax.vlines(int4, 0, top * 0.45, color=BLUE, lw=1.5, label="int4 levels (15, evenly spaced)")
    ax.vlines(nf4, top * 0.55, top, color=ORANGE, lw=1.5, label="NF4 levels (16, normal quantiles)")
    ax.set(xlabel="value / absmax of its group", yticks=[])
    ax.legend(fontsize=8, loc="upper left")
    return fig
