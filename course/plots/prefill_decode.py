"""Chapter 1's figures: prefill and decode on the roofline, decode throughput against the batch,
static against continuous batching."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from course import prefill_decode
from course.plots._widgets import BLUE, GREY, ORANGE, RED, count_label, interactive, new_figure, plain_log_ticks, slider


def _hardware(name_or_hw):
    return prefill_decode.PRESETS[name_or_hw] if isinstance(name_or_hw, str) else name_or_hw


def plot_roofline(
    params: float = 8e9,
    bits: int = 16,
    batch: int = 1,
    prompt: int = 512,
    hardware="A100-80G",
    measured: list[tuple[str, float, float]] = (),
) -> Figure:
    """The roofline of ``hardware`` with this model's decode step and prefill on it.

    ``measured``: (label, FLOPs per byte, FLOP/s achieved) points drawn beside the predictions.
    """
    hw = _hardware(hardware)
    fig = new_figure(11, 3.6, left=0.1, wspace=0.3)
    ax, text_ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    intensity = np.logspace(-1, 4, 200)
    ax.loglog(intensity, np.minimum(hw.peak_flops, intensity * hw.bandwidth), color=GREY, lw=2)
    ax.axvline(hw.ridge, color=GREY, ls=":", lw=1)
    ax.text(hw.ridge * 1.1, hw.peak_flops * 0.02, f"ridge {hw.ridge:.0f} FLOP/B", fontsize=8, color=GREY)
    points = {
        f"decode, batch {batch}": (
            prefill_decode.decode_intensity(batch, bits),
            2 * params * batch / prefill_decode.decode_step_time(params, bits, batch, hw),
            BLUE,
        ),
        f"prefill, {prompt} tokens": (
            prefill_decode.prefill_flops(params, prompt) / prefill_decode.weight_bytes(params, bits),
            prefill_decode.prefill_flops(params, prompt) / prefill_decode.prefill_time(params, bits, prompt, hw),
            ORANGE,
        ),
    }
    for label, (x, y, color) in points.items():
        ax.loglog([x], [y], "o", color=color, ms=9, label=label)
    for (label, x, y), marker in zip(measured, "xP*Dv^", strict=False):
        ax.loglog([x], [y], marker, color=RED, ms=9, mew=2, label=label)
    ax.set(xlabel="arithmetic intensity (FLOPs per byte of weights)", title=f"roofline: {hw.name}: FLOP/s achievable")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(hw.peak_flops * 1e-4, hw.peak_flops * 3)
    plain_log_ticks(ax, y_unit="FLOP/s")
    ax.legend(fontsize=8, loc="lower right")
    ttft = prefill_decode.prefill_time(params, bits, prompt, hw)
    step = prefill_decode.decode_step_time(params, bits, batch, hw)
    weights = prefill_decode.weight_bytes(params, bits)
    lines = [
        f"weights: {weights / 1e9:.1f} GB ({count_label(params)} at {bits:g} bits)",
        f"fits in {hw.memory_bytes / 1e9:.0f} GB: {'yes' if weights < hw.memory_bytes else 'NO'}",
        f"time to first token: {1e3 * ttft:.1f} ms",
        f"decode step: {1e3 * step:.2f} ms",
        f"tokens/s per sequence: {1 / step:.0f}",
        f"tokens/s, whole batch: {batch / step:.0f}",
        f"critical batch: {prefill_decode.critical_batch(hw, bits):.0f}",
        "decode is " + ("compute-bound" if batch >= prefill_decode.critical_batch(hw, bits) else "memory-bound"),
    ]
    text_ax.axis("off")
    text_ax.text(0, 0.95, "\n".join(lines), va="top", fontsize=10, family="monospace")
    return fig


def widget_roofline(this_machine=None) -> None:
    """Sliders for parameters, bits, batch, prompt length and hardware over :func:`plot_roofline`.

    ``this_machine``: a measured :class:`course.prefill_decode.Hardware` added to the presets.
    """
    hardware = list(prefill_decode.PRESETS.items()) + ([(this_machine.name, this_machine)] if this_machine else [])
    controls = {
        "params": slider(
            "SelectionSlider",
            options=[(f"{p:g}B", p * 1e9) for p in (1, 3, 8, 13, 34, 70, 180, 405)],
            value=8e9,
            description="parameters",
        ),
        "bits": slider("SelectionSlider", options=[4, 8, 16], value=16, description="bits"),
        "batch": slider(
            "SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=1, description="batch"
        ),
        "prompt": slider(
            "SelectionSlider", options=[16, 64, 256, 1024, 4096, 16384], value=256, description="prompt tokens"
        ),
        "hardware": slider(
            "Dropdown", options=hardware, value=prefill_decode.PRESETS["A100-80G"], description="hardware"
        ),
    }
    interactive(plot_roofline, controls, "Prefill and decode on the roofline")


def plot_decode_batch(
    params: float,
    bits: int,
    hardware,
    measured: dict[int, float] | None = None,
    batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
) -> Figure:
    """Predicted decode throughput (tokens/s, whole batch) against batch size, measured points on top."""
    hw = _hardware(hardware)
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    predicted = [b / prefill_decode.decode_step_time(params, bits, b, hw) for b in batches]
    ax.loglog(batches, predicted, "-", color=GREY, label="roofline prediction")
    ax.axvline(prefill_decode.critical_batch(hw, bits), color=GREY, ls=":", lw=1, label="critical batch")
    if measured:
        ax.loglog(list(measured), list(measured.values()), "o-", color=RED, label="measured")
    plain_log_ticks(ax)
    ax.set_xticks(list(batches), [str(b) for b in batches])
    ax.set(xlabel="batch size", ylabel="generated tokens/s (all sequences)", title=f"decode throughput: {hw.name}")
    ax.legend(fontsize=8)
    return fig


def plot_batching(
    rate: float = 8.0, max_batch: int = 16, params: float = 8e9, hardware="A100-80G", n: int = 200, seed: int = 0
) -> Figure:
    """Static against continuous batching on one request trace: latencies, and the summary numbers."""
    hw = _hardware(hardware)
    trace = prefill_decode.make_trace(n, rate, seed=seed)
    fig = new_figure(11, 3.4, left=0.07, wspace=0.3)
    ax_lat, ax_ttft, ax_text = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    summary = {}
    for continuous, color, name in ((False, ORANGE, "static"), (True, BLUE, "continuous")):
        served = prefill_decode.simulate(trace, params, 16, hw, max_batch, continuous)
        summary[name] = prefill_decode.summarise(served)
        ax_lat.plot(
            [s.request.arrival for s in served], [s.latency for s in served], ".", color=color, ms=4, label=name
        )
        ax_ttft.hist([s.ttft for s in served], bins=30, color=color, alpha=0.6, label=name)
    ax_lat.set(xlabel="arrival time (s)", ylabel="latency (s)", title="each request's latency")
    ax_ttft.set(xlabel="time to first token (s)", ylabel="requests", title="time to first token")
    ax_lat.legend(fontsize=8)
    lines = [f"{rate:g} requests/s, batch <= {max_batch}", ""]
    for name, numbers in summary.items():
        lines += [
            f"{name}:",
            f"  {numbers['throughput']:7.0f} tokens/s",
            f"  TTFT   {numbers['median_ttft']:6.2f} s median",
            f"  latency {numbers['median_latency']:5.2f} s median",
            f"  latency {numbers['p90_latency']:5.2f} s p90",
        ]
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
