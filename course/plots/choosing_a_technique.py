"""Chapter 9's figures: the guide from a problem to a technique, where a capstone configuration sits
among the alternatives, and the measured speed-ups."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course import choosing_a_technique as technique
from course import lora
from course.drafts import DRAFTS, draft_model
from course.plots._widgets import (
    BLUE,
    GREY,
    ORANGE,
    RED,
    Chart,
    decades,
    interactive,
    new_figure,
    nice_ceiling,
    plain_log_ticks,
    slider,
)
from course.stored_weights import CALIBRATED, FORMAT_BITS, GROUPED, weight_bytes
from course.technique_guide import HEADROOM, TABLE, recommend, weights_gib

GREEN = "#2ca02c"
PARAMS = [1, 3, 7, 13, 34, 70, 180, 405]  # billions, the sizes people serve
GPUS = [8, 12, 16, 24, 40, 48, 80, 141]  # GiB


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


class GuideChart(Chart):
    """Left: the table, the row of a problem highlighted, and the advice for a model and a GPU.
    Right: what the model needs in memory, in each form, against the GPU."""

    BARS = ("weights\n16-bit", "weights\n8-bit", "weights\n4-bit", "full\nfine-tune", "LoRA", "QLoRA")
    ROW = 0.1  # the table's row height, in the left axes' units

    def __init__(self):
        super().__init__(12, 4.6, left=0.01, right=0.98, bottom=0.12, top=0.9, wspace=0.12)
        self.memory = lora.course_answer("finetune_memory_gib")  # chapter 2's: every size the control offers, asked now
        self.fine_tuning = {(p, k): self.memory(p * 1e9, k) for p in PARAMS for k in ("full", "lora", "qlora")}
        grid = self.figure.add_gridspec(1, 2, width_ratios=[2.1, 1])
        ax, self.ax_m = self.figure.add_subplot(grid[0]), self.figure.add_subplot(grid[1])
        ax.set_axis_off()
        ax.set(xlim=(0, 1), ylim=(0, 1))
        columns = [(0.0, "problem", 24), (0.3, "first thing to try", 34), (0.72, "changes behaviour?", 22)]
        for x, title, _ in columns:
            ax.text(x + 0.01, 0.97, title, fontsize=9, fontweight="bold", va="top")
        for index, row in enumerate(TABLE):
            for (x, _, width), text in zip(columns, (row.label, row.first, row.changes), strict=True):
                ax.text(x + 0.01, 0.89 - index * self.ROW, _wrap(text, width), fontsize=8, va="top")
        self.highlight = self.moving(ax.add_patch(Rectangle((0, 0), 1, self.ROW - 0.01, color=BLUE, alpha=0.15, lw=0)))
        self.answer = self.moving(ax.text(0.01, 0.36, "", fontsize=10, fontweight="bold", va="top", color=BLUE))
        self.why = self.moving(ax.text(0.01, 0.29, "", fontsize=8.5, va="top"))
        self.where = self.moving(ax.text(0.01, 0.06, "", fontsize=8.5, va="top", style="italic"))
        self.bars = self.moving(*self.ax_m.bar(self.BARS, [1.0] * len(self.BARS)).patches)
        self.gpu = self.moving(self.ax_m.axhline(1, color=RED, lw=1.2, label=" "))
        self.room = self.moving(self.ax_m.axhline(1, color=RED, lw=0.8, ls=":", label=" "))
        self.ax_m.set_yscale("log")
        plain_log_ticks(self.ax_m)
        self.ax_m.set_xticks(range(len(self.BARS)), self.BARS, fontsize=7)
        self.ax_m.set_ylabel("GiB")
        self.moving(self.ax_m.title)
        self.ax_m.title.set_fontsize(9)
        self.legend = self.moving(self.ax_m.legend(fontsize=7, loc="upper right"))

    def _fine_tuning(self, params_billion: float, kind: str) -> float:
        if (params_billion, kind) not in self.fine_tuning:  # a size the control does not offer (plot_guide's)
            self.fine_tuning[params_billion, kind] = lora.course_answer("finetune_memory_gib")(
                params_billion * 1e9, kind
            )
        return self.fine_tuning[params_billion, kind]

    def update(
        self, problem: str = "serve", params_billion: float = 70, gpu_gib: float = 80, first_done: bool = False
    ) -> GuideChart:
        advice = recommend(problem, params_billion, gpu_gib, first_done)
        row = next(i for i, r in enumerate(TABLE) if r.problem == problem)
        self.highlight.set_y(0.9 - (row + 1) * self.ROW + 0.005)
        self.answer.set_text(f"First try: {advice.technique}" if not first_done else f"Then: {advice.technique}")
        self.why.set_text(_wrap(advice.why, 110))
        self.where.set_text(f"Changes behaviour: {advice.changes_behaviour}.  Measured in {advice.chapter}.")
        needs = [weights_gib(params_billion, bits) for bits in (16, 8, 4)]
        needs += [self._fine_tuning(params_billion, kind) for kind in ("full", "lora", "qlora")]
        room = HEADROOM * gpu_gib
        for i, (bar, gib) in enumerate(zip(self.bars, needs, strict=True)):
            bar.set_height(gib)
            bar.set_color(GREY if gib > room else BLUE if i < 3 else ORANGE)
        self.gpu.set_ydata([gpu_gib, gpu_gib])
        self.room.set_ydata([room, room])
        labels = self.legend.get_texts()
        labels[0].set_text(f"GPU: {gpu_gib:g} GiB")
        labels[1].set_text(f"{HEADROOM:.0%} of it for weights")
        self.ax_m.set_ylim(*decades(min(needs) / 2, max(max(needs), gpu_gib) * 2))
        self.ax_m.set_title(f"memory of a {params_billion:g}B model")
        return self


def plot_guide(
    problem: str = "serve", params_billion: float = 70, gpu_gib: float = 80, first_done: bool = False
) -> Figure:
    """The guide for ``problem`` with a model of ``params_billion`` and a GPU of ``gpu_gib`` (:class:`GuideChart`)."""
    return GuideChart().update(problem, params_billion, gpu_gib, first_done).figure


def widget_guide() -> None:
    problems = [(row.label, row.problem) for row in TABLE]
    controls = {
        "problem": slider("Dropdown", options=problems, value="serve", description="problem"),
        "params_billion": slider("SelectionSlider", options=PARAMS, value=70, description="parameters (B)"),
        "gpu_gib": slider("SelectionSlider", options=GPUS, value=80, description="GPU memory (GiB)"),
        "first_done": slider("Checkbox", value=False, description="done that; still not enough"),
    }
    interactive(GuideChart(), controls, "From a problem to the first technique to try")


class CapstoneChart(Chart):
    """Left: bytes served (target and draft) against held-out loss for every weight format of the
    table (rounded to nearest), the budget shaded. Right: the modelled speed-up against the draft
    length for each draft, with the target in the chosen format. The star (hollow, so that the
    marker under it shows) is the configuration: on the right at its draft and k, and not there at
    all without a draft (every call yields one token, whatever k; the panel's title says so). The
    title says which budget parts it meets, above the panels' titles (room is kept for a right title
    of two lines). The linear inset zooms on the bytes budget's line, and shows only when a marker
    falls within it (without a draft none does: every format then sits far from 3.7 MB)."""

    TOP = 0.015  # losses above this gap are drawn at the top edge, their value in the legend
    ZOOM = 0.25  # MB either side of the bytes budget in the linear inset

    def __init__(self):
        super().__init__(11, 4.0, left=0.09, wspace=0.3, top=0.8)
        budget = technique.BUDGET
        self.ax_l, self.ax_t = self.figure.subplots(1, 2)
        self.ax_l.add_patch(
            Rectangle((0, -1), budget["weight_bytes"] / 1e6, 1 + budget["loss_gap"], color=GREEN, alpha=0.12, lw=0)
        )
        self.fp32_bytes, self.fp32_loss = technique.format_figures("fp32", None)
        self.table = technique.format_table()
        self.formats = []
        for row, marker in zip(self.table, "os^vDPX<>", strict=False):
            off_scale = row["loss_gap"] > self.TOP
            label = technique.format_label(row["weights"], row["group_size"]) + (
                f" ({row['loss_gap']:+.2f})" if off_scale else ""
            )
            self.formats.append(  # hollow: formats of nearly the same bytes and loss stay apart as outlines
                self.moving(*self.ax_l.plot([], [], marker, color=BLUE, ms=8, mfc="none", mew=1.3, label=label))
            )
        self.star_l = self.moving(  # hollow, above the formats: the chosen format's marker shows through it
            *self.ax_l.plot([], [], "*", color=RED, ms=20, mfc="none", mew=1.6, zorder=5, label="your choice")
        )
        self.ax_l.legend(fontsize=7, ncol=2, loc="upper right")
        # at the budget's line the log axis puts 3.68 and 3.7 MB on one pixel: a linear inset, zoomed
        limit = budget["weight_bytes"] / 1e6
        self.zoom = self.ax_l.inset_axes([0.54, 0.22, 0.42, 0.42])  # right of every marker above y = 0
        self.zoom.add_patch(Rectangle((0, -1), limit, 1 + budget["loss_gap"], color=GREEN, alpha=0.12, lw=0))
        self.zoom_formats = [
            self.moving(*self.zoom.plot([], [], line.get_marker(), color=BLUE, ms=6, mfc="none", mew=1.1))
            for line in self.formats
        ]
        self.zoom_star = self.moving(*self.zoom.plot([], [], "*", color=RED, ms=14, mfc="none", mew=1.4, zorder=5))
        self.zoom.axvline(limit, color=GREEN, ls="--", lw=1)
        self.zoom.axhline(budget["loss_gap"], color=GREEN, ls="--", lw=1)
        self.zoom.set_xlim(limit - self.ZOOM, limit + self.ZOOM)
        self.zoom.set_ylim(-0.002, self.TOP + 0.002)
        self.zoom.tick_params(labelsize=6)
        self.zoom.set_title(f"zoomed: {limit - self.ZOOM:.2f} to {limit + self.ZOOM:.2f} MB, linear", fontsize=6)
        self.ax_l.axvline(limit, color=GREEN, ls="--", lw=1)
        self.ax_l.axhline(budget["loss_gap"], color=GREEN, ls="--", lw=1)
        self.ax_l.set(
            xscale="log",
            xlim=(1, 30),
            ylim=(-0.002, self.TOP + 0.002),
            ylabel="held-out loss - fp32's (nats/byte)",
            title="bytes against quality (shaded: the budget)",
        )
        self.ks = list(technique.DRAFT_LENGTHS)
        models = [name for name, draft in DRAFTS.items() if draft.checkpoint is not None]
        self.curves = {
            name: self.moving(*self.ax_t.plot([], [], "o-", color=colour, ms=4, label=DRAFTS[name].short))
            for name, colour in zip(models, (GREY, BLUE), strict=False)
        }
        self.ax_t.axhline(1, color="black", lw=0.8, label="no draft: 1")
        least = budget["modelled_speedup"]
        self.ax_t.axhline(least, color=GREEN, ls="--", lw=1, label=f"budget: {least:g}")
        self.star_t = self.moving(*self.ax_t.plot([], [], "*", color=RED, ms=18, mfc="none", mew=1.6, zorder=5))
        self.ax_t.set(
            xlabel="tokens drafted per call k",
            ylabel=f"modelled speed-up\ntokens per call / (1 + {technique.DRAFT_COST:g} k)",
        )
        self.ax_t.set_xlim(0.5, self.ks[-1] + 0.5)
        self.moving(self.ax_t.title)
        self.ax_t.legend(fontsize=8, loc="upper left")
        self.verdict = self.moving(self.figure.suptitle(" ", fontsize=11))

    def update(
        self,
        weights: str = "int4",
        group_size: int | None = 64,
        draft: str = "distilled",
        draft_length: int = 4,
        calibration: str = "none",
    ) -> CapstoneChart:
        config = technique.Configuration(weights, group_size, draft, draft_length, calibration)
        draft_bytes = weight_bytes(draft_model(draft))
        for lines, row in zip(zip(self.formats, self.zoom_formats, strict=True), self.table, strict=False):
            for line in lines:
                line.set_data([(row["bytes"] + draft_bytes) / 1e6], [min(row["loss_gap"], self.TOP)])
        n_bytes, loss = technique.format_figures(*config.format)
        for star in (self.star_l, self.zoom_star):
            star.set_data([(n_bytes + draft_bytes) / 1e6], [min(loss - self.fp32_loss, self.TOP)])
        self.ax_l.set_xlabel(f"weights served, MB (target and draft: {draft})")
        low, high = self.zoom.get_xlim()
        served = [line.get_xdata()[0] for line in [*self.zoom_formats, self.zoom_star]]
        self.zoom.set_visible(any(low <= x <= high for x in served))  # an inset with no marker is left out
        self.layout = draft, self.zoom.get_visible()  # the axis label and the inset are drawn with the fixed parts
        curves = {
            name: [technique.modelled_speedup(per_call, k) for k, per_call in zip(self.ks, curve, strict=True)]
            for name, curve in technique.draft_curves(*config.format).items()
        }
        for name, line in self.curves.items():
            line.set_data(self.ks, curves[name])
        speedup = curves[draft][draft_length - 1] if draft in curves else 1.0
        self.star_t.set_data(([draft_length], [speedup]) if draft in curves else ([], []))
        highest = max(technique.BUDGET["modelled_speedup"], *(max(c) for c in curves.values()))
        self.ax_t.set_ylim(0.8, nice_ceiling(highest * 1.1))
        self.ax_t.set_title(
            f"speculation with the target in {config.weights_label()}"
            + ("" if draft in curves else "\nyour choice: no draft, 1 token per call whatever k")
        )
        met = technique.within_budget(n_bytes + draft_bytes, loss - self.fp32_loss, speedup)
        missed = [name.replace("_", " ") for name, ok in met.items() if not ok]
        self.verdict.set_text(
            f"{config.label()}: " + ("within the budget" if not missed else "misses: " + ", ".join(missed))
        )
        self.verdict.set_color(GREEN if not missed else RED)
        return self


def plot_capstone(
    weights: str = "int4",
    group_size: int | None = 64,
    draft: str = "distilled",
    draft_length: int = 4,
    calibration: str = "none",
) -> Figure:
    """The capstone configuration among the alternatives (:class:`CapstoneChart`)."""
    return CapstoneChart().update(weights, group_size, draft, draft_length, calibration).figure


class _FormatChoice(CapstoneChart):
    """The capstone chart driven by one control for the weight format (a (weights, group size) pair)
    and one for the calibration (a format GPTQ cannot calibrate is drawn rounded to nearest, and says so)."""

    def update(
        self, fmt=("fp32", None), calibration: str = "none", draft: str = "none", draft_length: int = 1
    ) -> CapstoneChart:
        calibrated = calibration if fmt[0] in CALIBRATED else "none"
        super().update(fmt[0], fmt[1], draft, draft_length, calibrated)
        if calibrated != calibration:
            self.verdict.set_text(self.verdict.get_text() + f" (GPTQ calibrates {', '.join(CALIBRATED)})")
        return self


def every_format() -> list[tuple[str, int | None, str]]:
    """Every (weights, group size, calibration) the capstone widget offers."""
    return [
        (w, g, c)
        for w in FORMAT_BITS
        for g in _groups(w)
        for c in (technique.CALIBRATIONS if w in CALIBRATED else ("none",))
    ]


def widget_capstone() -> None:
    """The capstone chart with a control for each part of a configuration. Every format's figures
    are asked first (about a minute the first time in the instructor's copy, as GPTQ calibrates
    nine of them; the learners' copy has them recorded), so that no control waits after that."""
    from tqdm.auto import tqdm

    for fmt in tqdm(every_format(), desc="every weight format's bytes, loss and drafts", leave=False):
        technique.format_figures(*fmt)
        technique.draft_curves(*fmt)
    formats = [(technique.format_label(w, g), (w, g)) for w in FORMAT_BITS for g in _groups(w)]
    controls = {
        "fmt": slider("Dropdown", options=formats, value=("fp32", None), description="weights"),  # neutral start
        "calibration": slider(
            "Dropdown", options=list(technique.CALIBRATIONS), value="none", description="calibration"
        ),
        "draft": slider("Dropdown", options=list(DRAFTS), value="none", description="draft"),
        "draft_length": slider("IntSlider", min=1, max=8, value=1, description="k"),
    }
    interactive(
        _FormatChoice(),
        controls,
        "Try a configuration",
    )


def _groups(weights: str) -> tuple:
    return technique.GROUP_SIZES if weights in GROUPED else (None,)


def plot_speedups(speedups: dict[str, float]) -> Figure:
    """Measured speed-ups over the fp32 target alone, one bar each, the line at 1 = no change."""
    fig = new_figure(7, 3.2, left=0.3, bottom=0.17)
    ax = fig.subplots()
    names = list(speedups)
    values = [speedups[n] for n in names]
    ax.barh(names, values, color=[GREEN if v >= 1 else RED for v in values])
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f}x", va="center", fontsize=9)
    ax.axvline(1, color="black", lw=0.8)
    ax.invert_yaxis()
    ax.set(xlabel="speed-up over the fp32 target alone (measured here)", xlim=(0, max(values) * 1.25))
    return fig
