"""Chapter 6's figures: speculation's tokens per call and speed-up against the draft length, and the
measured drafts placed on the formula's map of alpha and c."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from course import speculative_decoding
from course.plots._widgets import (
    BLUE,
    GREY,
    ORANGE,
    RED,
    Chart,
    interactive,
    new_figure,
    nice_ceiling,
    plain_log_ticks,
    slider,
)

LONGEST = 32  # the longest draft the best k is sought among
ALPHAS = [round(0.1 + 0.01 * i, 2) for i in range(90)]  # the widget's choices: 0.1 to 0.99
COSTS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5)


class SpeculativeChart(Chart):
    """Expected tokens per target call and wall-clock speed-up against the draft length k, by the
    chapter's ``expected_tokens_per_call`` and ``speculative_speedup`` (None: the course's answers),
    and the tokens per call of simulated calls of the course's rule (dots). Built, it asks both
    functions every view the widget's sliders can show (:data:`ALPHAS` x :data:`COSTS`), and other
    alphas and costs when drawn."""

    KS = list(range(1, 17))

    def __init__(self, expected_tokens_per_call=None, speculative_speedup=None, simulate: bool = True):
        super().__init__(10, 3.4, left=0.07, wspace=0.28)
        self.tokens_per_call = expected_tokens_per_call or speculative_decoding.course_answer(
            "expected_tokens_per_call"
        )
        self.speedup = speculative_speedup or speculative_decoding.course_answer("speculative_speedup")
        self.simulate = simulate
        self.tokens, self.speeds = {}, {}
        for alpha in ALPHAS:
            self._tokens(alpha)
            for cost in COSTS:
                self._speeds(alpha, cost)
        self.simulated = {}
        if simulate:
            ks = self.KS[::3]
            table = speculative_decoding.COURSE.simulated_tokens_per_call(ALPHAS, ks)
            self.simulated = dict(zip(ALPHAS, table, strict=True))
        self.ax_t, self.ax_s = self.figure.subplots(1, 2)
        self.formula = self.moving(*self.ax_t.plot([], [], "-", color=GREY, label="formula"))
        handles = [self.formula]
        if simulate:
            self.sims = self.moving(*self.ax_t.plot([], [], "o", color=BLUE, label="simulated"))
            handles.append(self.sims)
        self.star_t = self.moving(*self.ax_t.plot([], [], "*", color=RED, ms=12))
        self.ax_t.set_xlim(0, 17)
        self.ax_t.set(xlabel="tokens drafted per call k", ylabel="tokens per target call")
        self.moving(self.ax_t.title)
        self.legend_t = self.moving(self.ax_t.legend(handles=handles, fontsize=8, loc="upper left"))
        self.speed = self.moving(*self.ax_s.plot([], [], "-", color=GREY))
        self.star_s = self.moving(*self.ax_s.plot([], [], "*", color=RED, ms=12, label=" "))
        self.best = self.moving(self.ax_s.axvline(1, color=BLUE, ls=":", label=" "))
        self.ax_s.axhline(1, color="black", lw=0.5)
        self.ax_s.set_xlim(0, 17)
        self.ax_s.set(xlabel="tokens drafted per call k", ylabel="speed-up over the target alone")
        self.moving(self.ax_s.title)
        self.legend_s = self.moving(self.ax_s.legend(fontsize=8, loc="upper right"))

    def _tokens(self, alpha: float) -> list[float]:
        """The tokens per call at ``alpha`` for each of :attr:`KS`."""
        if alpha not in self.tokens:
            self.tokens[alpha] = [self.tokens_per_call(alpha, k) for k in self.KS]
        return self.tokens[alpha]

    def _speeds(self, alpha: float, cost: float) -> list[float]:
        """The speed-ups at ``alpha`` and ``cost`` for k = 1 to :data:`LONGEST`."""
        if (alpha, cost) not in self.speeds:
            self.speeds[alpha, cost] = speculative_decoding.speedups(
                [alpha], list(range(1, LONGEST + 1)), [cost], self.speedup
            )[0][0]
        return self.speeds[alpha, cost]

    def update(self, alpha: float = 0.8, k: int = 4, cost: float = 0.05) -> SpeculativeChart:
        alpha = round(alpha, 2) if abs(alpha - round(alpha, 2)) < 1e-9 else alpha  # a slider's 0.8000000000000002
        tokens, speeds = self._tokens(alpha), self._speeds(alpha, cost)
        best = 1 + speeds.index(max(speeds))
        self.formula.set_data(self.KS, tokens)
        if self.simulate:
            sims = (
                self.simulated.get(alpha)
                or speculative_decoding.COURSE.simulated_tokens_per_call([alpha], self.KS[::3])[0]
            )
            self.sims.set_data(self.KS[::3], sims)
        self.star_t.set_data([k], [tokens[k - 1]])
        self.ax_t.set_ylim(0, nice_ceiling(max(tokens) * 1.1))
        self.ax_t.set_title(f"alpha = {alpha:.2f}")
        speed = speeds[: len(self.KS)]
        self.speed.set_data(self.KS, speed)
        self.star_s.set_data([k], [speed[k - 1]])
        self.best.set_xdata([best, best])
        labels = self.legend_s.get_texts()
        labels[0].set_text(f"k = {k}: {speed[k - 1]:.2f}x")
        labels[1].set_text(f"best k = {best}: {speeds[best - 1]:.2f}x")
        self.ax_s.set_ylim(0, nice_ceiling(max(speed) * 1.15))
        self.ax_s.set_title(f"draft cost c = {cost:g} of a target step")
        return self


def plot_speculative(alpha: float = 0.8, k: int = 4, cost: float = 0.05, simulate: bool = True) -> Figure:
    """Expected tokens per target call and wall-clock speed-up against the draft length k, by the course's answers."""
    return SpeculativeChart(simulate=simulate).update(alpha, k, cost).figure


def widget_speculative(expected_tokens_per_call=None, speculative_speedup=None) -> None:
    """Sliders for the acceptance rate, the draft length and the draft's cost over :class:`SpeculativeChart`
    (drawn by ``expected_tokens_per_call`` and ``speculative_speedup``; None: the course's answers)."""
    controls = {
        "alpha": slider("FloatSlider", min=0.1, max=0.99, step=0.01, value=0.8, description="alpha"),
        "k": slider("IntSlider", min=1, max=16, value=4, description="k"),
        "cost": slider("SelectionSlider", options=list(COSTS), value=0.05, description="draft cost c"),
    }
    chart = SpeculativeChart(expected_tokens_per_call, speculative_speedup)
    interactive(chart, controls, "How much does speculation buy?")


DRAFT_COLOURS = (GREY, BLUE, ORANGE, RED)


DRAFT_MARKERS = ("o", "s", "D", "^")
LABEL_OFFSETS = ((10, -4), (-42, -4), (10, 8), (-42, 8), (10, -16), (-42, -16), (-16, 12), (-16, -20))  # points


def _free_offset(point, taken, scale, frame, width=34.0, height=11.0):
    """The first of :data:`LABEL_OFFSETS` (points; ``scale`` pixels a point) at which a label
    beside ``point`` stays inside ``frame`` (x0, y0, x1, y1) and overlaps none of the boxes in
    ``taken`` (all in display pixels); failing that, the first that stays inside ``frame``."""

    def box(dx, dy):
        left, bottom = point[0] + dx * scale, point[1] + dy * scale
        return (left, bottom, left + width * scale, bottom + height * scale)

    def fits(b):
        return frame[0] < b[0] and b[2] < frame[2] and frame[1] < b[1] and b[3] < frame[3]

    inside = [(offset, box(*offset)) for offset in LABEL_OFFSETS if fits(box(*offset))] or [
        (LABEL_OFFSETS[0], box(*LABEL_OFFSETS[0]))
    ]
    for offset, candidate in inside:
        if all(candidate[2] < b[0] or candidate[0] > b[2] or candidate[3] < b[1] or candidate[1] > b[3] for b in taken):
            return offset, candidate
    return inside[0]


def plot_drafts(measured: dict[str, dict], k: int = 4, speculative_speedup=None) -> Figure:
    """The formula's speed-up at ``k`` drafted tokens as a map over alpha and c, with each measured
    draft placed at its own alpha and c and labelled, on the map, with the speed-up it really
    achieved (the labels are moved apart where points crowd).

    ``measured`` maps a label to a result of :func:`course.speculative_decoding.measure_drafts`
    (``alpha``, ``cost``, ``speedup``, ``temperature``); greedy runs are filled markers, sampled
    runs hollow ones, one colour and one shape per draft. The map is ``speculative_speedup``'s (the
    chapter's exercise; None: the course's answer) on a grid of 60 alphas by 60 costs.
    """
    speculative_speedup = speculative_speedup or speculative_decoding.course_answer("speculative_speedup")
    alphas = np.linspace(0.0, 0.99, 60)
    costs = np.logspace(-3, 0, 60)
    grid = speculative_decoding.speedups(alphas.tolist(), [k], costs.tolist(), speculative_speedup)
    grid = np.array(grid)[:, :, 0]  # (costs, alphas)
    fig = new_figure(8.6, 5.6, left=0.1, right=0.97, bottom=0.3, top=0.93)
    ax = fig.subplots()
    levels = [0.5, 1, 1.5, 2, 3, 4]
    ax.contourf(alphas, costs, grid, levels=[0, *levels, k + 1], cmap="Greys", alpha=0.3)
    lines = ax.contour(alphas, costs, grid, levels=levels, colors="#555555", linewidths=0.9)
    ax.set_yscale("log")
    ax.set(xlim=(0.0, 1.0), ylim=(1e-3, 1.0))
    scale = fig.dpi / 72  # pixels a point
    places = {name: (min(r["alpha"], 0.99), min(max(r["cost"], 1.05e-3), 0.95)) for name, r in measured.items()}
    points = [ax.transData.transform(place) for place in places.values()]

    def clear(x, y):  # a contour label there, of 28 x 14 points, leaves every marker (12 points) in sight
        centre = ax.transData.transform((x, y))
        return all(abs(centre[0] - p[0]) > 20 * scale or abs(centre[1] - p[1]) > 13 * scale for p in points)

    inside = lambda x, y: 0.04 < x < 0.95 and 1.4e-3 < y < 0.75  # noqa: E731 (a label at the frame would cross it)
    kept = []
    for label in ax.clabel(lines, fmt=lambda v: f"{v:g}x", fontsize=10, colors="#222222"):
        if inside(*label.get_position()) and clear(*label.get_position()):
            kept.append(label)
        else:
            label.remove()
    labelled = {label.get_text() for label in kept}
    for level, segments in zip(levels, lines.allsegs, strict=True):  # a level whose label fell at the frame
        points_on = [(x, y) for seg in segments for x, y in seg if inside(x, y) and 3e-3 < y < 0.3 and clear(x, y)]
        if f"{level:g}x" not in labelled and points_on:
            x, y = points_on[len(points_on) // 2]
            kept += ax.clabel(lines, [level], manual=[(x, y)], fmt=lambda v: f"{v:g}x", fontsize=10, colors="#222222")
    drafts = dict.fromkeys(name.split(",")[0] for name in measured)  # in order, once each
    colours = dict(zip(drafts, DRAFT_COLOURS * 2, strict=False))
    markers = dict(zip(drafts, DRAFT_MARKERS * 2, strict=False))
    taken = []
    for label in kept:  # the measured labels keep clear of the contours' labels
        centre = ax.transData.transform(label.get_position())
        taken.append((centre[0] - 14 * scale, centre[1] - 7 * scale, centre[0] + 14 * scale, centre[1] + 7 * scale))
    for name, r in measured.items():
        draft = name.split(",")[0]
        greedy = r.get("temperature", 0) == 0
        x, y = places[name]
        ax.plot(
            [x],
            [y],
            markers[draft],
            ms=7 if greedy else 12,  # a filled marker fits inside a hollow one at the same place
            color=colours[draft],
            markerfacecolor=colours[draft] if greedy else "none",
            markeredgewidth=2,
            zorder=4 if greedy else 3,
            label=f"{name}: measured {r['speedup']:.2f}x",
        )
        point, half = ax.transData.transform((x, y)), (3.5 if greedy else 6) * scale
        taken.append((point[0] - half, point[1] - half, point[0] + half, point[1] + half))
    for name, r in measured.items():
        x, y = places[name]
        offset, box = _free_offset(ax.transData.transform((x, y)), taken, scale, ax.bbox.padded(-3).extents)
        taken.append(box)
        ax.annotate(
            f"{r['speedup']:.2f}x",
            (x, y),
            xytext=offset,
            textcoords="offset points",
            fontsize=9,
            color=colours[name.split(",")[0]],
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            zorder=5,
        )
    plain_log_ticks(ax)
    ax.set(
        xlabel="acceptance rate alpha",
        ylabel="draft cost c (target steps per drafted token)",
        title=f"formula's speed-up at k = {k} (contours) and the measured speed-ups (labels)",
    )
    ax.legend(
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=2,
        title="filled: greedy, hollow: sampled",
        title_fontsize=8,
    )
    return fig
