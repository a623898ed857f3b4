"""Figures for the chapters: pure ``plot_*`` functions (data in, Figure out) and thin widgets.

Every ``plot_*`` returns a :class:`matplotlib.figure.Figure` built without pyplot, so nothing is
drawn twice and tests can call it headless. Every ``widget_*`` only wires sliders to one plot
function through :func:`interactive`, which also leaves a static picture of the default view for
front ends without widgets (papermill, nbconvert, GitHub's viewer). ipywidgets and IPython are
imported inside the functions that need them, never at module level.
"""

from __future__ import annotations

import base64
import io
import sys
from typing import Callable

import numpy as np
import torch
from matplotlib.figure import Figure

from course import quant

BLUE, ORANGE, GREY, RED = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728"


# --- plumbing shared by every widget -----------------------------------------------------------

def _show_figures_inline() -> None:
    """Under IPython, display a Figure as a PNG (pyplot's inline backend only registers this
    once pyplot is imported, and these figures never go through pyplot)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def new_figure(width: float, height: float, **adjust) -> Figure:
    """A Figure outside pyplot with fixed margins (constrained layout doubles a redraw's cost)."""
    _show_figures_inline()
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(**{"left": 0.08, "right": 0.98, "bottom": 0.17, "top": 0.88, "wspace": 0.3, **adjust})
    return fig


def figure_png(fig: Figure) -> bytes:
    """The figure rendered to PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def interactive(plot: Callable[..., Figure], controls: dict, title: str = "") -> None:
    """Display ``plot`` under ``controls`` (ipywidgets keyed by ``plot``'s argument names).

    Each change redraws by calling ``plot(**values)``. The display also carries a PNG of the
    default view, which front ends without a widget manager show instead of the sliders.
    """
    import ipywidgets as widgets
    from IPython.display import Image, display

    defaults = {name: control.value for name, control in controls.items()}
    first = [figure_png(plot(**defaults))]  # drawn once: the widget's first view and the static one

    def redraw(**values):
        if first and values == defaults:
            display(Image(data=first.pop(), format="png"))
        else:
            display(plot(**values))

    static = base64.b64encode(first[0]).decode("ascii")
    output = widgets.interactive_output(redraw, controls)
    children = ([widgets.HTML(f"<b>{title}</b>")] if title else []) + [widgets.HBox(list(controls.values())), output]
    box = widgets.VBox(children)
    bundle = {
        "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0, "model_id": box.model_id},
        "image/png": static,
        "text/plain": f"{title or plot.__name__}: static view with the default values "
        "(open in JupyterLab or Colab to move the sliders)",
    }
    display(bundle, raw=True)


def slider(kind: str, **options):
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    layout = widgets.Layout(width="300px")
    if kind.endswith("Slider"):
        options["continuous_update"] = False  # redraw on release, not on every pixel of a drag
    return getattr(widgets, kind)(style=style, layout=layout, **options)


# --- chapter 3: quantization --------------------------------------------------------------------

GROUP_CHOICES = (("per tensor", "tensor"), ("per row", None), ("group 128", 128), ("group 64", 64),
                 ("group 32", 32), ("group 16", 16))


def _round_trip(weight: torch.Tensor, bits: int, group) -> torch.Tensor:
    if group == "tensor":
        return quant.quantize_dequantize_per_tensor(weight, bits)
    return quant.quantize_dequantize(weight, bits, group)


def _group_label(group) -> str:
    return next(label for label, value in GROUP_CHOICES if value == group)


def plot_quantization(bits: int = 4, group_size=None, outlier: float = 20.0, seed: int = 0) -> Figure:
    """One matrix with outlier columns, quantized at ``bits`` with ``group_size``.

    Left: one row's weights against their quantized values. Middle: how often each integer
    code is used. Right: relative error of every granularity at this bit width.
    """
    weight = quant.outlier_matrix(128, 512, magnitude=outlier, seed=seed)
    levels = quant.absmax_levels(bits)
    fig = new_figure(11, 3.2, left=0.07)
    ax_row, ax_codes, ax_err = fig.subplots(1, 3)

    approx = _round_trip(weight, bits, group_size)
    row = weight[0].numpy()
    ax_row.scatter(row, approx[0].numpy(), s=6, color=BLUE)
    lim = np.quantile(np.abs(row), 0.98) * 1.2  # zoom on the ordinary weights; outliers fall outside
    ax_row.plot([-lim, lim], [-lim, lim], color=GREY, lw=0.8, ls="--")
    ax_row.set(xlim=(-lim, lim), ylim=(-lim, lim), xlabel="weight (outliers off the chart)",
               ylabel="after quantization", title=f"row 0, int{bits}, {_group_label(group_size)}")

    if group_size == "tensor":
        codes, _ = quant.quantize(weight.reshape(1, -1), bits)
    else:
        codes, _ = quant.quantize(weight, bits, group_size)
    counts = torch.bincount((codes.flatten() + levels).long(), minlength=2 * levels + 1).numpy()
    edges = np.arange(-levels, levels + 2) - 0.5
    ax_codes.stairs(counts / counts.sum(), edges, fill=True, color=BLUE)
    used = (counts > 0).sum()
    ax_codes.set(xlabel="integer code", ylabel="share of weights", title=f"{used} of {2 * levels + 1} codes used")

    labels, errors = [], []
    for label, group in GROUP_CHOICES:
        labels.append(label.replace("group ", "g").replace("per ", ""))
        errors.append(100 * quant.relative_error(weight, _round_trip(weight, bits, group)))
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

    Both dicts are keyed like :func:`course.quant.granularity_errors` (``int8_row``, ``int4_g32``).
    """
    fig = new_figure(9, 3.2)
    axes = fig.subplots(1, 2)
    for ax, bits in zip(axes, (8, 4)):
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
    row = quant.gaussian_matrix(1, 64, std=0.15, seed=seed)
    spiked = row.clone()
    spiked[0, 0] = outlier
    fig = new_figure(10, 3, bottom=0.18, wspace=0.05)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, weights, title in ((axes[0], row, "without the outlier"), (axes[1], spiked, f"weight 0 set to {outlier:g}")):
        approx = quant.quantize_dequantize(weights, 8)
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
        errors = [quant.relative_error(weight, quant.quantize_dequantize(weight, b, group)) for b in bits_range]
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
    ax.set(xlabel="bits per weight (scales not counted)", ylabel="validation loss (nats/byte)",
           title="the course model, quantized")
    ax.legend(fontsize=8)
    return fig


def plot_nf4_levels(seed: int = 0) -> Figure:
    """Where int4 and NF4 put their 16 levels, over a histogram of normally distributed weights."""
    weights = quant.gaussian_matrix(1, 4096, std=1.0, seed=seed)[0]
    normalised = (weights / weights.abs().max()).numpy()
    fig = new_figure(9, 2.8, left=0.03)
    ax = fig.subplots()
    ax.hist(normalised, bins=80, density=True, color="#c6dbef", label="weights / absmax")
    int4 = np.arange(-7, 8) / 7
    nf4 = quant.nf4_levels().numpy()
    top = ax.get_ylim()[1]
    ax.vlines(int4, 0, top * 0.45, color=BLUE, lw=1.5, label="int4 levels (15, evenly spaced)")
    ax.vlines(nf4, top * 0.55, top, color=ORANGE, lw=1.5, label="NF4 levels (16, normal quantiles)")
    ax.set(xlabel="value / absmax of its group", yticks=[])
    ax.legend(fontsize=8, loc="upper left")
    return fig


# --- chapter 1: prefill, decode, the roofline, batching -----------------------------------------

def _hardware(name_or_hw):
    from course import arithmetic

    return arithmetic.PRESETS[name_or_hw] if isinstance(name_or_hw, str) else name_or_hw


def plain_log_ticks(ax, y_unit: str = "") -> None:
    """Log axes labelled 100 / 10 G rather than 10^2 / 10^10: easier to read, and it spares
    matplotlib's math-text parser, which otherwise takes most of a redraw."""
    from matplotlib.ticker import EngFormatter, FuncFormatter

    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_major_formatter(EngFormatter(unit=y_unit, sep=" ") if y_unit else FuncFormatter(lambda v, _: f"{v:g}"))


def count_label(params: float) -> str:
    """90M, 8B, 1.5T: a parameter count as people say it."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= size:
            return f"{params / size:.3g}{suffix}"
    return f"{params:.0f}"


def plot_roofline(params: float = 8e9, bits: int = 16, batch: int = 1, prompt: int = 512, hardware="A100-80G",
                  measured: list[tuple[str, float, float]] = ()) -> Figure:
    """The roofline of ``hardware`` with this model's decode step and prefill on it.

    ``measured``: (label, FLOPs per byte, FLOP/s achieved) points drawn beside the predictions.
    """
    from course import arithmetic as ar

    hw = _hardware(hardware)
    fig = new_figure(11, 3.6, left=0.1, wspace=0.3)
    ax, text_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    intensity = np.logspace(-1, 4, 200)
    ax.loglog(intensity, np.minimum(hw.peak_flops, intensity * hw.bandwidth), color=GREY, lw=2)
    ax.axvline(hw.ridge, color=GREY, ls=":", lw=1)
    ax.text(hw.ridge * 1.1, hw.peak_flops * 0.02, f"ridge {hw.ridge:.0f} FLOP/B", fontsize=8, color=GREY)
    points = {
        f"decode, batch {batch}": (ar.decode_intensity(batch, bits),
                                   2 * params * batch / ar.decode_step_time(params, bits, batch, hw), BLUE),
        f"prefill, {prompt} tokens": (ar.prefill_flops(params, prompt) / ar.weight_bytes(params, bits),
                                      ar.prefill_flops(params, prompt) / ar.prefill_time(params, bits, prompt, hw), ORANGE),
    }
    for label, (x, y, color) in points.items():
        ax.loglog([x], [y], "o", color=color, ms=9, label=label)
    for (label, x, y), marker in zip(measured, "xP*Dv^"):
        ax.loglog([x], [y], marker, color=RED, ms=9, mew=2, label=label)
    ax.set(xlabel="arithmetic intensity (FLOPs per byte of weights)", title=f"roofline: {hw.name}: FLOP/s achievable")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(hw.peak_flops * 1e-4, hw.peak_flops * 3)
    plain_log_ticks(ax, y_unit="FLOP/s")
    ax.legend(fontsize=8, loc="lower right")
    ttft = ar.prefill_time(params, bits, prompt, hw)
    step = ar.decode_step_time(params, bits, batch, hw)
    lines = [
        f"weights: {ar.weight_bytes(params, bits) / 1e9:.1f} GB ({count_label(params)} at {bits:g} bits)",
        f"fits in {hw.memory_bytes / 1e9:.0f} GB: {'yes' if ar.weight_bytes(params, bits) < hw.memory_bytes else 'NO'}",
        f"time to first token: {1e3 * ttft:.1f} ms",
        f"decode step: {1e3 * step:.2f} ms",
        f"tokens/s per sequence: {1 / step:.0f}",
        f"tokens/s, whole batch: {batch / step:.0f}",
        f"critical batch: {ar.critical_batch(hw, bits):.0f}",
        "decode is " + ("compute-bound" if batch >= ar.critical_batch(hw, bits) else "memory-bound"),
    ]
    text_ax.axis("off")
    text_ax.text(0, 0.95, "\n".join(lines), va="top", fontsize=10, family="monospace")
    return fig


def widget_roofline(this_machine=None) -> None:
    """Sliders for parameters, bits, batch, prompt length and hardware over :func:`plot_roofline`.

    ``this_machine``: a measured :class:`course.arithmetic.Hardware` added to the presets.
    """
    from course import arithmetic

    hardware = list(arithmetic.PRESETS.items()) + ([(this_machine.name, this_machine)] if this_machine else [])
    controls = {
        "params": slider("SelectionSlider", options=[(f"{p:g}B", p * 1e9) for p in (1, 3, 8, 13, 34, 70, 180, 405)],
                          value=8e9, description="parameters"),
        "bits": slider("SelectionSlider", options=[4, 8, 16], value=16, description="bits"),
        "batch": slider("SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=1,
                         description="batch"),
        "prompt": slider("SelectionSlider", options=[16, 64, 256, 1024, 4096, 16384], value=256,
                          description="prompt tokens"),
        "hardware": slider("Dropdown", options=hardware, value=arithmetic.PRESETS["A100-80G"], description="hardware"),
    }
    interactive(plot_roofline, controls, "Prefill and decode on the roofline")


def plot_decode_batch(params: float, bits: int, hardware, measured: dict[int, float] | None = None,
                      batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)) -> Figure:
    """Predicted decode throughput (tokens/s, whole batch) against batch size, measured points on top."""
    from course import arithmetic as ar

    hw = _hardware(hardware)
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    predicted = [b / ar.decode_step_time(params, bits, b, hw) for b in batches]
    ax.loglog(batches, predicted, "-", color=GREY, label="roofline prediction")
    ax.axvline(ar.critical_batch(hw, bits), color=GREY, ls=":", lw=1, label="critical batch")
    if measured:
        ax.loglog(list(measured), list(measured.values()), "o-", color=RED, label="measured")
    plain_log_ticks(ax)
    ax.set_xticks(list(batches), [str(b) for b in batches])
    ax.set(xlabel="batch size", ylabel="generated tokens/s (all sequences)", title=f"decode throughput: {hw.name}")
    ax.legend(fontsize=8)
    return fig


def plot_batching(rate: float = 8.0, max_batch: int = 16, params: float = 8e9, hardware="A100-80G", n: int = 200,
                  seed: int = 0) -> Figure:
    """Static against continuous batching on one request trace: latencies, and the summary numbers."""
    from course import arithmetic as ar

    hw = _hardware(hardware)
    trace = ar.make_trace(n, rate, seed=seed)
    fig = new_figure(11, 3.4, left=0.07, wspace=0.3)
    ax_lat, ax_ttft, ax_text = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    summary = {}
    for continuous, color, name in ((False, ORANGE, "static"), (True, BLUE, "continuous")):
        served = ar.simulate(trace, params, 16, hw, max_batch, continuous)
        summary[name] = ar.summarise(served)
        ax_lat.plot([s.request.arrival for s in served], [s.latency for s in served], ".", color=color, ms=4, label=name)
        ax_ttft.hist([s.ttft for s in served], bins=30, color=color, alpha=0.6, label=name)
    ax_lat.set(xlabel="arrival time (s)", ylabel="latency (s)", title="each request's latency")
    ax_ttft.set(xlabel="time to first token (s)", ylabel="requests", title="time to first token")
    ax_lat.legend(fontsize=8)
    lines = [f"{rate:g} requests/s, batch <= {max_batch}", ""]
    for name, numbers in summary.items():
        lines += [f"{name}:", f"  {numbers['throughput']:7.0f} tokens/s", f"  TTFT   {numbers['median_ttft']:6.2f} s median",
                  f"  latency {numbers['median_latency']:5.2f} s median", f"  latency {numbers['p90_latency']:5.2f} s p90"]
    ax_text.axis("off")
    ax_text.text(0, 0.98, "\n".join(lines), va="top", fontsize=9, family="monospace")
    return fig


def widget_batching() -> None:
    """Sliders for the arrival rate and the batch limit over :func:`plot_batching`."""
    controls = {
        "rate": slider("FloatSlider", value=8.0, min=1.0, max=40.0, step=1.0, description="requests/s"),
        "max_batch": slider("SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64], value=16, description="max batch"),
    }
    interactive(plot_batching, controls, "Static against continuous batching")
