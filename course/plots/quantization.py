"""Chapter 3's figures: one matrix quantized under the sliders, granularities, an outlier's row,
bits against error, the course model's loss against bits, where NF4 puts its levels."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from course import quantization, withheld
from course.plots._widgets import BLUE, GREY, ORANGE, PURPLE, RED, Chart, interactive, new_figure, nice_ceiling, slider

GROUP_CHOICES = (  # (label, group_size): "row" is one scale per row (group_size None), "tensor" one in all
    ("per tensor", "tensor"),
    ("per row", "row"),
    ("group 128", 128),
    ("group 64", 64),
    ("group 32", 32),
    ("group 16", 16),
)


def _group(group_size):
    """The widget's choice as the quantizer takes it: None (or "row") is one scale per row."""
    return "row" if group_size is None else group_size


def _group_label(group) -> str:
    return next(label for label, value in GROUP_CHOICES if value == _group(group))


class QuantizationChart(Chart):
    """One matrix with outlier columns, quantized: row 0 against its quantized values, the values
    row 0 comes back as, and the relative error of every granularity at this bit width.

    Drawn by ``quantize_dequantize`` and ``relative_error`` when both are given (a notebook's own),
    else by the course's views (in the learners' copy: those recorded, at the outlier magnitudes of
    :data:`RECORDED_OUTLIERS`). While the learners' copy is recorded, the chart asks the course for
    every view it can show at those magnitudes when it is built."""

    def __init__(self, seed: int = 0, rows: int = 128, cols: int = 512, quantize_dequantize=None, relative_error=None):
        super().__init__(11, 3.2, left=0.07)
        self.seed, self.shape = seed, (rows, cols)
        self.yours = {"quantize_dequantize": quantize_dequantize, "relative_error": relative_error}
        if not all(self.yours.values()) and (rows, cols, seed) != quantization.QUANTIZATION_VIEW:
            raise ValueError(
                f"the course's views are of a matrix of {quantization.QUANTIZATION_VIEW}: (rows, cols, seed)"
            )
        if withheld.is_recording():  # every view of the course's that a blank notebook's sliders can show
            for outlier in RECORDED_OUTLIERS:
                for bits in BITS_CHOICES:
                    for group in quantization.VIEW_GROUPS:
                        quantization.recorded_quantization_view(bits, group, outlier)
        self.ax_row, self.ax_values, self.ax_err = self.figure.subplots(1, 3)
        ordinary = quantization.outlier_matrix(rows, cols, magnitude=1.0, seed=seed)[0].numpy()
        lim = float(np.quantile(np.abs(ordinary), 0.98)) * 1.2  # zoom on the ordinary weights
        self.ax_row.plot([-lim, lim], [-lim, lim], color=GREY, lw=0.8, ls="--")
        self.ax_row.set(xlim=(-lim, lim), ylim=(-lim, lim), xlabel="weight (outliers off the chart)")
        self.ax_row.set_ylabel("after quantization")
        self.row_points = self.moving(*self.ax_row.plot([], [], "o", ms=2.5, color=BLUE))
        self.moving(self.ax_row.title)

        self.values = self.moving(self.ax_values.vlines([], 0, [], color=BLUE, lw=2))
        self.ax_values.set(xlim=(-lim, lim), xlabel="value after quantization", ylabel="weights of row 0")
        self.moving(self.ax_values.title)

        labels = [label.replace("group ", "g").replace("per ", "") for label, _ in GROUP_CHOICES]
        self.bars = self.ax_err.bar(range(len(labels)), [0] * len(labels), color=BLUE)
        self.moving(*self.bars)
        self.bar_values = [
            self.moving(self.ax_err.text(x, 0, "", ha="center", va="bottom", fontsize=8)) for x in range(len(labels))
        ]
        self.ax_err.set_xticks(range(len(labels)), labels)
        self.ax_err.tick_params(axis="x", labelsize=8)
        self.ax_err.set_ylabel("relative error (%)")
        self.moving(self.ax_err.title)

    def _view(self, bits: int, group_size, outlier: float) -> dict:
        if all(self.yours.values()):
            return quantization.quantization_view(bits, group_size, outlier, **self.yours)
        try:
            return quantization.recorded_quantization_view(bits, group_size, float(outlier))
        except withheld.NotRecorded:
            raise ValueError(
                f"the course's views were recorded for this copy at outliers x{RECORDED_OUTLIERS[0]:g} and "
                f"x{RECORDED_OUTLIERS[1]:g} only: write quantize_dequantize and relative_error to see x{outlier:g}"
            ) from None

    def update(self, bits: int = 4, group_size=None, outlier: float = 20.0) -> QuantizationChart:
        group_size = _group(group_size)
        weight = quantization.outlier_matrix(*self.shape, magnitude=outlier, seed=self.seed)
        view = self._view(bits, group_size, outlier)
        row = torch.as_tensor(view["row"]).float()
        self.row_points.set_data(weight[0].numpy(), row.numpy())
        self.ax_row.set_title(f"row 0, int{bits}, {_group_label(group_size)}")

        values, counts = np.unique(row.numpy(), return_counts=True)
        self.values.set_segments([[(v, 0), (v, c)] for v, c in zip(values, counts, strict=True)])
        self.ax_values.set_ylim(0, nice_ceiling(counts.max() * 1.05))
        self.ax_values.set_title(
            f"{view['zero_share']:.0%} of weights at 0; row 0 takes {len(values)} values", fontsize=10
        )

        errors = [100 * e for e in view["errors"]]
        top = nice_ceiling(max(errors) * 1.15)  # room for the value labels above the bars
        for bar, label, error, (_, group) in zip(self.bars, self.bar_values, errors, GROUP_CHOICES, strict=True):
            bar.set_height(error)
            bar.set_facecolor(ORANGE if group == group_size else BLUE)
            label.set_position((bar.get_x() + bar.get_width() / 2, error + 0.01 * top))
            label.set_text(f"{error:.1f}")
        self.ax_err.set_ylim(0, top)
        self.ax_err.set_title(f"int{bits}, outliers x{outlier:g}")
        return self


def plot_quantization(bits: int = 4, group_size=None, outlier: float = 20.0, seed: int = 0) -> Figure:
    """One matrix with outlier columns, quantized at ``bits`` with ``group_size`` (None or "row": one
    scale per row; "tensor": one for the whole matrix; a number: that many columns per scale).

    Left: one row's weights against their quantized values. Middle: the values that row comes
    back as, and how many of its weights take each. Right: relative error of every granularity at
    this bit width.
    """
    return QuantizationChart(seed).update(bits, group_size, outlier).figure


BITS_CHOICES = range(2, 9)  # the bits slider's
RECORDED_OUTLIERS = (1.0, 20.0)  # the outlier magnitudes whose views the learners' copy records


def widget_quantization(quantize_dequantize=None, relative_error=None) -> None:
    """Sliders for bits, group size and outlier magnitude over :class:`QuantizationChart`, drawn by
    the functions given (a notebook's own) or the course's views."""
    controls = {
        "bits": slider("IntSlider", value=4, min=BITS_CHOICES[0], max=BITS_CHOICES[-1], description="bits"),
        "group_size": slider("Dropdown", options=list(GROUP_CHOICES), value="row", description="scales"),
        "outlier": slider("FloatSlider", value=20.0, min=1.0, max=60.0, step=1.0, description="outlier x"),
    }
    chart = QuantizationChart(quantize_dequantize=quantize_dequantize, relative_error=relative_error)
    interactive(chart, controls, "Quantization error: bits, scales and outliers")


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
        ax.set_ylim(0, max(spiky + clean) * 1.15)  # the value labels stay clear of the frame
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
        approx = quantization.round_trip(weights, 8)
        step = weights.abs().max().item() / 127
        x = np.arange(1, 64)
        ax.stem(x, weights[0, 1:].numpy(), linefmt=GREY, markerfmt="o", basefmt=" ", label="weight")
        ax.plot(x, approx[0, 1:].numpy(), "_", color=RED, ms=10, mew=2, label="int8 value")
        ax.set(title=f"{title}: step {step:.4f}", xlabel="weight index (the outlier, index 0, not drawn)")
    axes[0].set_ylabel("value")
    axes[0].legend(fontsize=8)
    return fig


def plot_bits_sweep(errors, groups=(None, 128, 32), bits_range=range(2, 9)) -> Figure:
    """Relative error against bit width for several granularities, on a log scale. ``errors`` is
    :func:`course.quantization.bits_sweep`'s (label -> one error per width), or a weight matrix to
    sweep with the course's round trip."""
    if isinstance(errors, torch.Tensor):
        course = {"quantize_dequantize": quantization.round_trip, "relative_error": quantization.relative_norm_error}
        errors = quantization.bits_sweep(errors, groups, bits_range, **course)
    fig = new_figure(5.5, 3.2, left=0.15)
    ax = fig.subplots()
    for label, by_bits in errors.items():
        ax.semilogy(list(bits_range), by_bits, "o-", label=label)
    ax.set(xlabel="bits", ylabel="relative error", title="each bit halves the error")
    ax.legend(fontsize=8)
    return fig


def plot_model_bits(losses: dict[str, dict[int, float]], baseline: float, zoom_from: int = 3) -> Figure:
    """Validation loss of a quantized model against bits, one line per granularity.

    ``losses``: label -> {bits: loss in nats per byte}; ``baseline``: the unquantized loss. The
    axis fits the losses from ``zoom_from`` bits up, where the differences are; losses above it
    (2 bits, typically) are marked at the top edge with their value.
    """
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    zoomed = [v for by_bits in losses.values() for b, v in by_bits.items() if b >= zoom_from] + [baseline]
    low, high = min(zoomed), max(zoomed)
    pad = 0.12 * (high - low) or 0.01
    top = high + 2 * pad
    marked: dict[int, int] = {}  # bits -> off-scale values already labelled there
    for label, by_bits in losses.items():
        bits = sorted(by_bits)
        (line,) = ax.plot(bits, [by_bits[b] for b in bits], "o-", label=label)
        for b in (b for b in bits if by_bits[b] > top):
            ax.plot([b], [top], "^", color=line.get_color(), ms=8, clip_on=False)
            ax.annotate(
                f"{by_bits[b]:.2f}",
                (b, top),
                xytext=(7, -11 - 11 * marked.get(b, 0)),
                textcoords="offset points",
                fontsize=8,
                color=line.get_color(),
            )
            marked[b] = marked.get(b, 0) + 1
    ax.axhline(baseline, color=GREY, ls="--", lw=1, label="float32")
    ax.set_ylim(low - pad, top)
    ax.set(
        xlabel="bits per weight (scales not counted)",
        ylabel="validation loss (nats/byte)",
        title="the course model, quantized" + (" (^: off the scale)" if marked else ""),
    )
    ax.legend(fontsize=8, loc="upper right")
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


def plot_int4_speedup(rows: list[dict], machine: str = "") -> Figure:
    """The int4 layer's speed-up over float32 against the float32 weight's size, with the bound the
    bytes set (float32 bytes / int4 bytes) and the 1x line. ``rows``: ``course.kernels.int4.speedup``'s
    (rows without a ``speedup``, the bound's alone, draw the bound alone); ``machine``, where they
    were measured, goes under the title."""
    rows = sorted(rows, key=lambda r: r["fp32_bytes"])
    mib = [r["fp32_bytes"] / 2**20 for r in rows]
    fig = new_figure(6, 3.4, left=0.12)
    ax = fig.subplots()
    if all("speedup" in r for r in rows):
        ax.plot(mib, [r["speedup"] for r in rows], "o-", color=BLUE, label="int4 (fused kernel) / float32, measured")
    ax.plot(mib, [r["bound"] for r in rows], "--", color=ORANGE, label="bytes ratio: the bound if reading were all")
    ax.axhline(1, color=GREY, lw=1, label="1x: as fast as float32")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set(
        xlabel="float32 weight (MiB), one token through one layer",
        ylabel="speed-up over float32",
        title="int4 against float32, by the size of the layer" + (f"\nmeasured on {machine}" if machine else ""),
    )
    ax.legend(fontsize=8, loc="upper left")
    return fig


class GptqChart(Chart):
    """Held-out loss against bits, round to nearest and GPTQ; the slider's bit width marked, with
    what GPTQ bought there in the title."""

    def __init__(self, baseline: float | None = None, losses: dict[str, dict[int, float]] | None = None):
        super().__init__(6, 3.4, left=0.14)
        if losses is None:  # the stored reference figures
            baseline, losses = _stored_gptq_losses()
        self.baseline, self.losses = baseline, losses
        self.ax = self.figure.subplots()
        for (label, by_bits), color in zip(losses.items(), (BLUE, ORANGE), strict=False):
            bits = sorted(by_bits)
            self.ax.plot(bits, [by_bits[b] - baseline for b in bits], "o-", color=color, label=label)
        self.ax.axhline(0, color=GREY, ls="--", lw=1, label="float32")
        self.ax.set_yscale("symlog", linthresh=1e-3)
        self.ax.set(xlabel="bits per weight (groups of 64)", ylabel="held-out loss above float32 (nats/byte)")
        self.ax.legend(fontsize=8, loc="upper right")
        self.marker = self.moving(self.ax.axvline(4, color=RED, lw=1))
        self.moving(self.ax.title)

    def update(self, bits: int = 4) -> GptqChart:
        rtn, gptq = (self.losses[label].get(bits) for label in ("round to nearest", "GPTQ"))
        self.marker.set_xdata([bits, bits])
        if rtn is None or gptq is None:
            self.ax.set_title(f"{bits} bits: not measured")
            return self
        rtn_gap, gptq_gap = rtn - self.baseline, gptq - self.baseline
        saved = f", {1 - gptq_gap / rtn_gap:.0%} of the loss increase removed" if rtn_gap > 0 else ""
        self.ax.set_title(f"{bits} bits: RTN {rtn_gap:+.4f}, GPTQ {gptq_gap:+.4f}{saved}", fontsize=9)
        return self


def _stored_gptq_losses() -> tuple[float, dict[str, dict[int, float]]]:
    """The course model's losses as ``make reference`` stored them (data/reference/quantization.json)."""
    from course import reference

    numbers = reference.load("quantization")
    return numbers["model_fp32_loss"]["value"], quantization.stored_gptq_losses(numbers)


def widget_gptq(baseline: float | None = None, losses: dict | None = None) -> None:
    """A bits slider over :class:`GptqChart` (the stored reference figures unless given)."""
    chart = GptqChart(baseline, losses)
    bits = sorted(next(iter(chart.losses.values())))
    controls = {"bits": slider("IntSlider", value=4, min=bits[0], max=bits[-1], description="bits")}
    interactive(chart, controls, "GPTQ against round to nearest")


AWQ_COLORS = {"round to nearest": GREY, "AWQ": RED, "GPTQ": "#2ca02c"}  # apart from the layers' colors


def plot_awq(layers: dict[str, dict], baseline: float, losses: dict[str, dict[int, float]], bits: int = 3) -> Figure:
    """AWQ at a glance: each studied layer's input channels by mean |x| (over the median channel's),
    its output error against AWQ's exponent alpha at ``bits`` bits (alpha 0 is round to nearest;
    GPTQ's as a dashed line), and the model's held-out loss above float32 for each method and width.

    ``layers``: label -> ``quantization.awq_layer_study``'s dict; ``losses``: method -> {bits: loss}.
    """
    fig = new_figure(12, 3.4, left=0.06, wspace=0.32)
    ax_means, ax_alpha, ax_loss = fig.subplots(1, 3)
    for (label, study), color in zip(layers.items(), (PURPLE, BLUE, ORANGE), strict=False):
        means = study["mean_abs"].double()
        ordered = (means / means.median()).sort(descending=True).values.numpy()
        ax_means.plot(np.arange(1, len(ordered) + 1), ordered, color=color, label=label)
        alphas = sorted(study["errors"])
        ax_alpha.plot(alphas, [study["errors"][a] for a in alphas], "o-", ms=3, color=color, label=f"AWQ, {label}")
        ax_alpha.plot([study["alpha"]], [study["errors"][study["alpha"]]], "*", ms=12, color=color)
        ax_alpha.axhline(study["gptq"], color=color, ls="--", lw=1)
    ax_means.set_xscale("log")
    ax_means.set_yscale("log")
    ax_means.set(xlabel="input channel, most active first", ylabel="mean |x| / median channel's")
    ax_means.set_title("salient channels", fontsize=10)
    ax_means.legend(fontsize=8, loc="upper right")
    ax_alpha.axhline(1.0, color=GREY, lw=0.8)
    ax_alpha.set_ylim(0, 1.15)
    ax_alpha.set(xlabel="alpha (scales s = mean|x| ** alpha)", ylabel="output error / round to nearest's")
    ax_alpha.set_title(f"{bits} bits: the search (star: chosen; dashed: GPTQ)", fontsize=10)
    ax_alpha.legend(fontsize=7, loc="lower left")
    widths = sorted(next(iter(losses.values())), reverse=True)
    bar = 0.8 / len(losses)
    for i, (method, by_bits) in enumerate(losses.items()):
        gaps = [by_bits[b] - baseline for b in widths]
        xs = np.arange(len(widths)) + (i - (len(losses) - 1) / 2) * bar
        ax_loss.bar(xs, gaps, bar, color=AWQ_COLORS.get(method, GREY), label=method)
    ax_loss.set_xticks(np.arange(len(widths)), [f"{b} bits" for b in widths])
    ax_loss.axhline(0, color=GREY, lw=0.8)
    ax_loss.set(ylabel="held-out loss above float32 (nats/byte)")
    ax_loss.set_title("the course model, groups of 64", fontsize=10)
    ax_loss.legend(fontsize=8, loc="upper left")
    return fig
