"""Chapter 6's figures: speculation's tokens per call and speed-up against the draft length, and the
measured drafts placed on the formula's map of alpha and c."""

from __future__ import annotations

import functools

import numpy as np
import torch
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


def _pair_with_alpha(alpha: float):
    """A target p and a draft q with sum min(p, q) = alpha exactly: they share alpha of their mass."""
    p = torch.tensor([alpha, 1 - alpha, 0.0], dtype=torch.float64)
    q = torch.tensor([alpha, 0.0, 1 - alpha], dtype=torch.float64)
    return p, q


@functools.lru_cache(maxsize=128)
def _simulated(alpha: float, ks: tuple[int, ...]) -> tuple[float, list[float]]:
    p, q = _pair_with_alpha(alpha)
    sims = [speculative_decoding.simulate_tokens_per_call(p, q, x, 5000, seed=x) for x in ks]
    return speculative_decoding.acceptance_rate(p, q), sims


class SpeculativeChart(Chart):
    """Expected tokens per target call and wall-clock speed-up against the draft length k."""

    KS = list(range(1, 17))

    def __init__(self, simulate: bool = True):
        super().__init__(10, 3.4, left=0.07, wspace=0.28)
        self.simulate = simulate
        self.ax_t, self.ax_s = self.figure.subplots(1, 2)
        self.formula = self.moving(*self.ax_t.plot([], [], "-", color=GREY, label="formula"))
        handles = [self.formula]
        if simulate:
            self.sims = self.moving(*self.ax_t.plot([], [], "o", color=BLUE, label=" "))
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

    def update(self, alpha: float = 0.8, k: int = 4, cost: float = 0.05) -> SpeculativeChart:
        tokens = [speculative_decoding.expected_tokens_per_call(alpha, x) for x in self.KS]
        self.formula.set_data(self.KS, tokens)
        if self.simulate:
            measured, sims = _simulated(alpha, tuple(self.KS[::3]))
            self.sims.set_data(self.KS[::3], sims)
            self.legend_t.get_texts()[1].set_text(f"simulated (alpha {measured:.2f})")
        self.star_t.set_data([k], [tokens[k - 1]])
        self.ax_t.set_ylim(0, nice_ceiling(max(tokens) * 1.1))
        self.ax_t.set_title(f"alpha = {alpha:.2f}")
        speed = [speculative_decoding.speedup(alpha, x, cost) for x in self.KS]
        best = speculative_decoding.best_draft_length(alpha, cost)
        self.speed.set_data(self.KS, speed)
        self.star_s.set_data([k], [speed[k - 1]])
        self.best.set_xdata([best, best])
        labels = self.legend_s.get_texts()
        labels[0].set_text(f"k = {k}: {speed[k - 1]:.2f}x")
        labels[1].set_text(f"best k = {best}: {speculative_decoding.speedup(alpha, best, cost):.2f}x")
        self.ax_s.set_ylim(0, nice_ceiling(max(speed) * 1.15))
        self.ax_s.set_title(f"draft cost c = {cost:g} of a target step")
        return self


def plot_speculative(alpha: float = 0.8, k: int = 4, cost: float = 0.05, simulate: bool = True) -> Figure:
    """Expected tokens per target call and wall-clock speed-up against the draft length k."""
    return SpeculativeChart(simulate).update(alpha, k, cost).figure


def widget_speculative() -> None:
    """Sliders for the acceptance rate, the draft length and the draft's cost over :class:`SpeculativeChart`."""
    controls = {
        "alpha": slider("FloatSlider", min=0.1, max=0.99, step=0.01, value=0.8, description="alpha"),
        "k": slider("IntSlider", min=1, max=16, value=4, description="k"),
        "cost": slider(
            "SelectionSlider", options=[0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5], value=0.05, description="draft cost c"
        ),
    }
    interactive(SpeculativeChart(), controls, "How much does speculation buy?")


DRAFT_COLOURS = (GREY, BLUE, ORANGE, RED)


def plot_drafts(measured: dict[str, dict], k: int = 4) -> Figure:
    """The formula's speed-up at ``k`` drafted tokens as a map over alpha and c, with each measured
    draft placed at its own alpha and c and labelled with the speed-up it really achieved.

    ``measured`` maps a label to a result of :func:`course.speculative_decoding.measure_drafts`
    (``alpha``, ``cost``, ``speedup``, ``temperature``); greedy runs are filled markers, sampled
    runs hollow ones, one colour per draft.
    """
    alphas = np.linspace(0.0, 0.99, 100)
    costs = np.logspace(-3, 0, 100)
    grid = np.array([[speculative_decoding.speedup(float(a), k, float(c)) for a in alphas] for c in costs])
    fig = new_figure(10.5, 4.2, left=0.08, right=0.66, bottom=0.13, top=0.9)
    ax = fig.subplots()
    levels = [0.5, 1, 1.5, 2, 3, 4]
    ax.contourf(alphas, costs, grid, levels=[0, *levels, k + 1], cmap="Greys", alpha=0.35)
    lines = ax.contour(alphas, costs, grid, levels=levels, colors=GREY, linewidths=0.8)
    for label in ax.clabel(lines, fmt=lambda v: f"{v:g}x", fontsize=8):
        x, y = label.get_position()
        if not (0.04 < x < 0.95 and 1.4e-3 < y < 0.75):  # a label at the frame would cross it
            label.remove()
    drafts = dict.fromkeys(name.split(",")[0] for name in measured)  # in order, once each
    colours = dict(zip(drafts, DRAFT_COLOURS * 2, strict=False))
    for name, r in measured.items():
        draft = name.split(",")[0]
        greedy = r.get("temperature", 0) == 0
        ax.plot(
            [min(r["alpha"], 0.99)],
            [min(max(r["cost"], 1.05e-3), 0.95)],
            "o",
            ms=9,
            color=colours[draft],
            markerfacecolor=colours[draft] if greedy else "white",
            markeredgewidth=2,
            label=f"{name}: measured {r['speedup']:.2f}x",
        )
    ax.set_yscale("log")
    plain_log_ticks(ax)
    ax.set(
        xlabel="acceptance rate alpha",
        ylabel="draft cost c (target steps per drafted token)",
        title=f"formula's speed-up at k = {k} (contours) and the drafts measured here",
    )
    ax.legend(
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        title="filled: greedy, hollow: sampled",
        title_fontsize=8,
    )
    return fig
