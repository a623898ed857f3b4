"""Chapter 1's figures: prefill and decode on the roofline, decode throughput against the batch,
static against continuous batching."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from course import prefill_decode, readings
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


PARAMS = (1, 3, 8, 13, 34, 70, 180, 405)  # billions: the roofline widget's choices
BITS = (4, 8, 16)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PROMPTS = (16, 64, 256, 1024, 4096, 16384)


class RooflineChart(Chart):
    """The roofline of a machine with one model's decode step and prefill on it, and the numbers.

    ``measured``: (label, FLOPs per byte, FLOP/s achieved) points drawn beside the predictions.
    ``formulas`` compute the predictions (:class:`course.prefill_decode.Formulas`): a prediction
    whose formulas are missing (None, or a notebook's not written yet) is left out, and the legend
    lists only what is drawn; the numbers beside the chart say what is left out and why. Built, it
    asks the formulas for every view its widget offers on the presets (:meth:`ask_every_view`).
    """

    def __init__(
        self,
        measured: list[tuple[str, float, float]] = (),
        formulas: prefill_decode.Formulas | None = prefill_decode.REFERENCE,
    ):
        super().__init__(11, 3.6, left=0.1, wspace=0.3)
        self.formulas = formulas if formulas is not None else prefill_decode.Formulas(None, None, None, None)
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
        self.predicted = [  # the predictions these formulas draw, each with the formulas it needs
            artist
            for artist, needs in ((self.decode, prefill_decode.DECODE), (self.prefill, prefill_decode.PREFILL))
            if self.formulas.can(*needs)
        ]
        ax.set_xlim(0.1, 1e4)
        ax.set(xlabel="arithmetic intensity (FLOPs per byte of weights)", ylabel="FLOP/s achievable")
        plain_log_ticks(ax, y_unit="")  # 100 T, 10 T: the unit is in the axis label
        self.moving(ax.title)
        handles = [*self.predicted, *points]
        self.legend = self.moving(ax.legend(handles=handles, fontsize=8, loc="lower right")) if handles else None
        text_ax.axis("off")
        self.numbers = self.moving(text_ax.text(0, 0.95, "", va="top", fontsize=10, family="monospace"))
        self.ask_every_view()

    def ask_every_view(self) -> None:
        """Compute what every view of the presets shows, once: the instructor's notebook, recorded,
        then records every call the learners' copy's chart makes to the course's formulas, however
        its sliders move. In the learners' copy, the course's formulas beside a notebook's answer
        they were never recorded with stop the asking; the views say so as they are drawn."""
        f = self.formulas
        can_prefill, can_decode = f.can(*prefill_decode.PREFILL), f.can(*prefill_decode.DECODE)
        try:
            for hardware in prefill_decode.PRESETS.values():
                for params, bits in ((p * 1e9, b) for p in PARAMS for b in BITS):
                    if f.can("weight_bytes"):
                        f.weight_bytes(params, bits)
                    if f.can("critical_batch_of"):
                        prefill_decode.critical_batch(hardware, bits, f)
                    for batch in BATCHES if can_decode else ():
                        prefill_decode.decode_step_time(params, bits, batch, hardware, f)
                    for prompt in PROMPTS if f.can("prefill_flops") else ():
                        f.prefill_flops(params, prompt)
                        if can_prefill:
                            prefill_decode.prefill_time(params, bits, prompt, hardware, f)
        except NotRecorded:
            pass

    def update(self, params: float = 8e9, bits: int = 16, batch: int = 1, prompt: int = 512, hardware="A100-80G"):
        hw = _hardware(hardware)
        self.roof.set_data(self.intensity, np.minimum(hw.peak_flops, self.intensity * hw.bandwidth))
        self.ridge.set_xdata([hw.ridge, hw.ridge])
        self.ridge_label.set_position((hw.ridge * 1.1, hw.peak_flops * 0.02))
        self.ridge_label.set_text(f"ridge {hw.ridge:.0f} FLOP/B")
        self.ax.set_ylim(hw.peak_flops * 1e-4, hw.peak_flops * 3)
        self.ax.set_title(f"the roofline of {hw.name}")
        labels = {self.decode: f"decode, batch {batch}", self.prefill: f"prefill, {prompt} tokens"}
        for artist, text in zip(self.predicted, self.legend.get_texts() if self.legend else (), strict=False):
            text.set_text(labels[artist])
        self.decode.set_data([], [])
        self.prefill.set_data([], [])
        try:
            lines, drawn = self._numbers(params, bits, batch, prompt, hw), True
        except NotRecorded:  # the learners' copy: the course's formulas beside a notebook's answer it never saw
            self.decode.set_data([], [])
            self.prefill.set_data([], [])
            lines, drawn = [_not_recorded(self.formulas.not_yours())], False
        if self.legend:  # it lists the predictions: not while they are not drawn
            self.legend.set_visible(drawn or not self.predicted)
        self.numbers.set_text("\n".join(lines))
        return self

    def _numbers(self, params, bits, batch, prompt, hw) -> list[str]:
        """Place the predicted points; return the lines of numbers, and of what is left out."""
        f = self.formulas
        lines = []
        if f.can("weight_bytes"):
            weights = f.weight_bytes(params, bits)
            lines += [
                f"weights: {weights / 1e9:.1f} GB ({count_label(params)} at {bits:g} bits)",
                f"fits in {hw.memory_bytes / 1e9:.0f} GB: {'yes' if weights < hw.memory_bytes else 'NO'}",
            ]
        if f.can(*prefill_decode.PREFILL):
            ttft = prefill_decode.prefill_time(params, bits, prompt, hw, f)
            prefill = f.prefill_flops(params, prompt)
            self.prefill.set_data([prefill / weights], [prefill / ttft])
            lines.append(f"time to first token: {1e3 * ttft:.1f} ms")
        if f.can(*prefill_decode.DECODE):
            step = prefill_decode.decode_step_time(params, bits, batch, hw, f)
            self.decode.set_data([prefill_decode.decode_intensity(batch, bits)], [2 * params * batch / step])
            lines += [
                f"decode step: {1e3 * step:.2f} ms",
                f"tokens/s per sequence: {1 / step:.0f}",
                f"tokens/s, whole batch: {batch / step:.0f}",
            ]
        if f.can("critical_batch_of"):
            critical = prefill_decode.critical_batch(hw, bits, f)
            lines += [
                f"critical batch: {critical:.0f}",
                "decode is " + ("compute-bound" if batch >= critical else "memory-bound"),
            ]
        if f.missing():
            lines += ["", "not written yet, so left out:", *(f"  {name}" for name in f.missing())]
        return lines


def _not_recorded(names: list[str], at_defaults: bool = False) -> str:
    """Why the learners' copy cannot draw a view: the course's formulas for ``names`` stand in for
    exercises not written yet, and their results are recorded on the course's own numbers only
    (``at_defaults``: and at the default sliders only)."""
    where = ["are recorded at the default", "sliders, on the course's own", "numbers, only: write yours"]
    if not at_defaults:
        where = ["are recorded on the course's", "own numbers only: write yours"]
    lines = [
        "the course's formulas for",
        *(f"  {name}" for name in names),
        *where,
        "(or check the ones you wrote",
        "with their check cells), then",
        "run the cell again",
    ]
    return "\n".join(lines)


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


def readable_log_y(ax, at_least: int = 4) -> None:
    """Ticks on a log y axis at 1, 2 and 5 per decade (1 to 9 where the data span less than a decade,
    one per decade where they span many), so that at least ``at_least`` labels fall within the
    data's range: a span from 50 to 700 tokens/s had one label, 100."""
    from matplotlib.ticker import LogLocator

    low, high = ax.get_ylim()
    for subs in ((1.0,), (1.0, 2.0, 5.0), tuple(float(s) for s in range(1, 10))):
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=40))
        inside = [t for t in ax.get_yticks() if low <= t <= high]
        if len(inside) >= at_least:
            break
    ax.set_ylim(low, high)


def plot_decode_batch(
    params: float,
    bits: int,
    hardware,
    measured: dict[int, float] | None = None,
    batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    formulas: prefill_decode.Formulas | None = prefill_decode.REFERENCE,
) -> Figure:
    """Predicted decode throughput (tokens/s, whole batch) against batch size, measured points on
    top; ``formulas`` predict (None, or a notebook's not written yet: that prediction is left out,
    and the legend's title names what it waits for)."""
    hw = _hardware(hardware)
    formulas = formulas if formulas is not None else prefill_decode.Formulas(None, None, None, None)
    fig = new_figure(6, 3.4, left=0.14)
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    left_out = []
    if formulas.can(*prefill_decode.DECODE):
        predicted = [b / prefill_decode.decode_step_time(params, bits, b, hw, formulas) for b in batches]
        ax.plot(batches, predicted, "-", color=GREY, label="roofline prediction")
    else:
        left_out.append(f"roofline prediction ({readings.listing(formulas.missing(*prefill_decode.DECODE))})")
    if formulas.can("critical_batch_of"):
        critical = prefill_decode.critical_batch(hw, bits, formulas)
        ax.axvline(critical, color=GREY, ls=":", lw=1, label="critical batch")
    else:
        left_out.append("critical batch (critical_batch_size)")
    if measured:
        ax.plot(list(measured), list(measured.values()), "o-", color=RED, label="measured")
    plain_log_ticks(ax, y_unit="")  # 10 k, 1 M: short enough for the axis label to fit
    readable_log_y(ax)
    if measured:
        for batch, rate in measured.items():
            ax.annotate(
                f"{rate:.3g}", (batch, rate), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7
            )
    ax.set_xticks(list(batches), [str(b) for b in batches])
    ax.set(xlabel="batch size", ylabel="generated tokens/s (all sequences)", title=f"decode throughput: {hw.name}")
    title = "not written yet, so not drawn:\n" + "\n".join(left_out) if left_out else None
    ax.legend(handles=ax.get_legend_handles_labels()[0], fontsize=8, title=title, title_fontsize=7)
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
            for name in self.points:
                self.points[name].set_data([], [])
                self.hists[name].set_data([0], [0, 1])
            self.ax_lat.set_ylim(0, 1)
            self.ax_ttft.set(xlim=(0, 1), ylim=(0, 1))
            self.numbers.set_text(_not_recorded(self.formulas.not_yours(*prefill_decode.PREFILL), at_defaults=True))
            return self
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
