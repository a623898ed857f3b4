"""Chapter 1's figures: prefill and decode on the roofline, decode throughput against the batch,
static against continuous batching."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from course import prefill_decode
from course.plots._widgets import (
    BLUE,
    GREY,
    ORANGE,
    RED,
    Chart,
    count_label,
    interactive,
    new_figure,
    nice_ceiling,
    plain_log_ticks,
    slider,
)
from course.withheld import NotRecorded


def _hardware(name_or_hw):
    return prefill_decode.PRESETS[name_or_hw] if isinstance(name_or_hw, str) else name_or_hw


class RooflineChart(Chart):
    """The roofline of a machine with one model's decode step and prefill on it, and the numbers.

    ``measured``: (label, FLOPs per byte, FLOP/s achieved) points drawn beside the predictions.
    ``formulas`` compute the predictions (:class:`course.prefill_decode.Formulas`); None leaves them
    out, and the roof with the measured points is all there is.
    """

    def __init__(
        self,
        measured: list[tuple[str, float, float]] = (),
        formulas: prefill_decode.Formulas | None = prefill_decode.REFERENCE,
    ):
        super().__init__(11, 3.6, left=0.1, wspace=0.3)
        self.formulas = formulas
        self.ax, text_ax = self.figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
        ax = self.ax
        ax.set_xscale("log")
        ax.set_yscale("log")
        self.intensity = np.logspace(-1, 4, 200)
        self.roof = self.moving(*ax.plot([], [], color=GREY, lw=2))
        self.ridge = self.moving(ax.axvline(1, color=GREY, ls=":", lw=1))
        self.ridge_label = self.moving(ax.text(1, 1, "", fontsize=8, color=GREY))
        self.decode = self.moving(*ax.plot([], [], "o", color=BLUE, ms=9))
        self.prefill = self.moving(*ax.plot([], [], "o", color=ORANGE, ms=9))
        points = [
            self.moving(*ax.plot([x], [y], marker, color=RED, ms=9, mew=2, label=label))
            for (label, x, y), marker in zip(measured, "xP*Dv^", strict=False)
        ]
        ax.set_xlim(0.1, 1e4)
        ax.set(xlabel="arithmetic intensity (FLOPs per byte of weights)", ylabel="FLOP/s achievable")
        plain_log_ticks(ax, y_unit="")  # 100 T, 10 T: the unit is in the axis label
        self.moving(ax.title)
        self.legend = self.moving(
            ax.legend(handles=[self.decode, self.prefill, *points], fontsize=8, loc="lower right")
        )
        text_ax.axis("off")
        self.numbers = self.moving(text_ax.text(0, 0.95, "", va="top", fontsize=10, family="monospace"))

    def update(self, params: float = 8e9, bits: int = 16, batch: int = 1, prompt: int = 512, hardware="A100-80G"):
        hw = _hardware(hardware)
        self.roof.set_data(self.intensity, np.minimum(hw.peak_flops, self.intensity * hw.bandwidth))
        self.ridge.set_xdata([hw.ridge, hw.ridge])
        self.ridge_label.set_position((hw.ridge * 1.1, hw.peak_flops * 0.02))
        self.ridge_label.set_text(f"ridge {hw.ridge:.0f} FLOP/B")
        self.ax.set_ylim(hw.peak_flops * 1e-4, hw.peak_flops * 3)
        self.ax.set_title(f"the roofline of {hw.name}")
        texts = self.legend.get_texts()
        texts[0].set_text(f"decode, batch {batch}")
        texts[1].set_text(f"prefill, {prompt} tokens")
        if self.formulas is None:
            self.decode.set_data([], [])
            self.prefill.set_data([], [])
            self.numbers.set_text("the predictions appear once\nyour functions of sections 1-4\nare written")
            return self
        step = prefill_decode.decode_step_time(params, bits, batch, hw, self.formulas)
        ttft = prefill_decode.prefill_time(params, bits, prompt, hw, self.formulas)
        weights = self.formulas.weight_bytes(params, bits)
        prefill = self.formulas.prefill_flops(params, prompt)
        self.decode.set_data([prefill_decode.decode_intensity(batch, bits)], [2 * params * batch / step])
        self.prefill.set_data([prefill / weights], [prefill / ttft])
        critical = prefill_decode.critical_batch(hw, bits, self.formulas)
        lines = [
            f"weights: {weights / 1e9:.1f} GB ({count_label(params)} at {bits:g} bits)",
            f"fits in {hw.memory_bytes / 1e9:.0f} GB: {'yes' if weights < hw.memory_bytes else 'NO'}",
            f"time to first token: {1e3 * ttft:.1f} ms",
            f"decode step: {1e3 * step:.2f} ms",
            f"tokens/s per sequence: {1 / step:.0f}",
            f"tokens/s, whole batch: {batch / step:.0f}",
            f"critical batch: {critical:.0f}",
            "decode is " + ("compute-bound" if batch >= critical else "memory-bound"),
        ]
        self.numbers.set_text("\n".join(lines))
        return self


def plot_roofline(
    params: float = 8e9,
    bits: int = 16,
    batch: int = 1,
    prompt: int = 512,
    hardware="A100-80G",
    measured: list[tuple[str, float, float]] = (),
    formulas: prefill_decode.Formulas | None = prefill_decode.REFERENCE,
) -> Figure:
    """The roofline of ``hardware`` with this model's decode step and prefill on it.

    ``measured``: (label, FLOPs per byte, FLOP/s achieved) points drawn beside the predictions,
    which ``formulas`` compute (None: left out).
    """
    return RooflineChart(measured, formulas).update(params, bits, batch, prompt, hardware).figure


PARAMS = (1, 3, 8, 13, 34, 70, 180, 405)  # billions: the roofline widget's choices
BITS = (4, 8, 16)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PROMPTS = (16, 64, 256, 1024, 4096, 16384)


def withheld_calls() -> None:
    """What the roofline widget computes for every preset it offers, and the batching widget for
    its first view, so that the learners' copy records them (``course/withheld.py``). The batching
    widget's other views are not recorded (each simulates hundreds of steps, a few hundred
    recordings each): in the learners' copy they move once the learner's formulas drive them."""
    BatchingChart().update()
    for hardware in prefill_decode.PRESETS.values():
        for params, bits in ((p * 1e9, b) for p in PARAMS for b in BITS):
            prefill_decode.weight_bytes(params, bits)
            prefill_decode.critical_batch(hardware, bits)
            for batch in BATCHES:
                prefill_decode.decode_step_time(params, bits, batch, hardware)
            for prompt in PROMPTS:
                prefill_decode.prefill_flops(params, prompt)
                prefill_decode.prefill_time(params, bits, prompt, hardware)


def widget_roofline(this_machine=None, formulas: prefill_decode.Formulas = prefill_decode.REFERENCE) -> None:
    """Sliders for parameters, bits, batch, prompt length and hardware over :class:`RooflineChart`.

    ``this_machine``: a measured :class:`course.prefill_decode.Hardware` added to the presets;
    ``formulas`` compute what the chart shows.
    """
    hardware = list(prefill_decode.PRESETS.items()) + ([(this_machine.name, this_machine)] if this_machine else [])
    controls = {
        "params": slider(
            "SelectionSlider", options=[(f"{p:g}B", p * 1e9) for p in PARAMS], value=8e9, description="parameters"
        ),
        "bits": slider("SelectionSlider", options=list(BITS), value=16, description="bits"),
        "batch": slider("SelectionSlider", options=list(BATCHES), value=1, description="batch"),
        "prompt": slider("SelectionSlider", options=list(PROMPTS), value=256, description="prompt tokens"),
        "hardware": slider(
            "Dropdown", options=hardware, value=prefill_decode.PRESETS["A100-80G"], description="hardware"
        ),
    }
    interactive(RooflineChart(formulas=formulas), controls, "Prefill and decode on the roofline")


def plot_decode_batch(
    params: float,
    bits: int,
    hardware,
    measured: dict[int, float] | None = None,
    batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    formulas: prefill_decode.Formulas | None = prefill_decode.REFERENCE,
) -> Figure:
    """Predicted decode throughput (tokens/s, whole batch) against batch size, measured points on
    top; ``formulas`` predict (None: the measured points only)."""
    hw = _hardware(hardware)
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    if formulas is not None:
        predicted = [b / prefill_decode.decode_step_time(params, bits, b, hw, formulas) for b in batches]
        ax.loglog(batches, predicted, "-", color=GREY, label="roofline prediction")
        critical = prefill_decode.critical_batch(hw, bits, formulas)
        ax.axvline(critical, color=GREY, ls=":", lw=1, label="critical batch")
    if measured:
        ax.loglog(list(measured), list(measured.values()), "o-", color=RED, label="measured")
    plain_log_ticks(ax, y_unit="")  # 10 k, 1 M: short enough for the axis label to fit
    ax.set_xticks(list(batches), [str(b) for b in batches])
    ax.set(xlabel="batch size", ylabel="generated tokens/s (all sequences)", title=f"decode throughput: {hw.name}")
    ax.legend(fontsize=8)
    return fig


class BatchingChart(Chart):
    """Static against continuous batching on one request trace: latencies, time to first token, and
    the summary numbers. Requests are drawn in order of arrival, so the axes stay put as the rate changes."""

    def __init__(
        self,
        params: float = 8e9,
        hardware="A100-80G",
        n: int = 200,
        seed: int = 0,
        formulas: prefill_decode.Formulas = prefill_decode.REFERENCE,
    ):
        super().__init__(11, 3.4, left=0.07, wspace=0.3)
        self.params, self.hw, self.n, self.seed, self.formulas = params, _hardware(hardware), n, seed, formulas
        self.ax_lat, self.ax_ttft, text_ax = self.figure.subplots(1, 3, gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
        self.kinds = ((False, ORANGE, "static"), (True, BLUE, "continuous"))
        self.points, self.hists = {}, {}
        for _, color, name in self.kinds:
            self.points[name] = self.moving(*self.ax_lat.plot([], [], ".", color=color, ms=4, label=name))
            self.hists[name] = self.moving(self.ax_ttft.stairs([0], [0, 1], fill=True, color=color, alpha=0.6))
        self.ax_lat.set_xlim(-0.02 * n, 1.02 * n)
        self.ax_lat.set(xlabel="request (in order of arrival)", ylabel="latency (s)", title="each request's latency")
        self.ax_lat.legend(fontsize=8, loc="upper left")
        self.ax_ttft.set(xlabel="time to first token (s)", ylabel="requests", title="time to first token")
        text_ax.axis("off")
        self.numbers = self.moving(text_ax.text(0, 0.98, "", va="top", fontsize=9, family="monospace"))

    def update(self, rate: float = 8.0, max_batch: int = 16) -> BatchingChart:
        trace = prefill_decode.make_trace(self.n, rate, seed=self.seed)
        try:
            served = {
                name: prefill_decode.simulate(trace, self.params, 16, self.hw, max_batch, continuous, self.formulas)
                for continuous, _, name in self.kinds
            }
        except NotRecorded:  # the learners' copy, with the course's formulas: recorded at the default view only
            raise ValueError(
                f"the learners' copy has the course's simulation at the default sliders only: write your "
                f"{prefill_decode.YOURS} and run this cell again to move them"
            ) from None
        latest = max(s.latency for runs in served.values() for s in runs)
        slowest = max(s.ttft for runs in served.values() for s in runs)
        edges = np.linspace(0, nice_ceiling(slowest), 31)
        tallest = 1
        lines = [f"{rate:g} requests/s, batch <= {max_batch}", ""]
        for name, runs in served.items():
            self.points[name].set_data(np.arange(len(runs)), [s.latency for s in runs])
            counts, _ = np.histogram([s.ttft for s in runs], bins=edges)
            self.hists[name].set_data(counts, edges)
            tallest = max(tallest, counts.max())
            numbers = prefill_decode.summarise(runs)
            lines += [
                f"{name}:",
                f"  {numbers['throughput']:7.0f} tokens/s",
                f"  TTFT   {numbers['median_ttft']:6.2f} s median",
                f"  latency {numbers['median_latency']:5.2f} s median",
                f"  latency {numbers['p90_latency']:5.2f} s p90",
            ]
        self.ax_lat.set_ylim(0, nice_ceiling(latest * 1.05))
        self.ax_ttft.set_xlim(0, edges[-1])
        self.ax_ttft.set_ylim(0, nice_ceiling(tallest * 1.05))
        self.numbers.set_text("\n".join(lines))
        return self


def plot_batching(
    rate: float = 8.0,
    max_batch: int = 16,
    params: float = 8e9,
    hardware="A100-80G",
    n: int = 200,
    seed: int = 0,
    formulas: prefill_decode.Formulas = prefill_decode.REFERENCE,
) -> Figure:
    """Static against continuous batching on one request trace: latencies, and the summary numbers."""
    return BatchingChart(params, hardware, n, seed, formulas).update(rate, max_batch).figure


def widget_batching(formulas: prefill_decode.Formulas = prefill_decode.REFERENCE) -> None:
    """Sliders for the arrival rate and the batch limit over :class:`BatchingChart` (``formulas`` cost its steps)."""
    controls = {
        "rate": slider("FloatSlider", value=8.0, min=1.0, max=40.0, step=1.0, description="requests/s"),
        "max_batch": slider("SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64], value=16, description="max batch"),
    }
    interactive(BatchingChart(formulas=formulas), controls, "Static against continuous batching")
