"""Chapter 6's figures: speculation's tokens per call and speed-up against the draft length."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from course import speculative_decoding
from course.plots._widgets import BLUE, GREY, RED, interactive, new_figure, slider


def _pair_with_alpha(alpha: float):
    """A target p and a draft q with sum min(p, q) = alpha exactly: they share alpha of their mass."""
    p = torch.tensor([alpha, 1 - alpha, 0.0], dtype=torch.float64)
    q = torch.tensor([alpha, 0.0, 1 - alpha], dtype=torch.float64)
    return p, q


def plot_speculative(alpha: float = 0.8, k: int = 4, cost: float = 0.05, simulate: bool = True) -> Figure:
    """Expected tokens per target call and wall-clock speed-up against the draft length k."""
    ks = list(range(1, 17))
    fig = new_figure(10, 3.4, left=0.07, wspace=0.28)
    ax_t, ax_s = fig.subplots(1, 2)
    ax_t.plot(
        ks, [speculative_decoding.expected_tokens_per_call(alpha, x) for x in ks], "-", color=GREY, label="formula"
    )
    if simulate:
        p, q = _pair_with_alpha(alpha)
        measured = speculative_decoding.acceptance_rate(p, q)
        sims = [speculative_decoding.simulate_tokens_per_call(p, q, x, 5000, seed=x) for x in ks[::3]]
        ax_t.plot(ks[::3], sims, "o", color=BLUE, label=f"simulated (alpha {measured:.2f})")
    ax_t.plot([k], [speculative_decoding.expected_tokens_per_call(alpha, k)], "*", color=RED, ms=12)
    ax_t.set(xlabel="tokens drafted per call k", ylabel="tokens per target call", title=f"alpha = {alpha:.2f}")
    ax_t.legend(fontsize=8)
    speed = [speculative_decoding.speedup(alpha, x, cost) for x in ks]
    best = speculative_decoding.best_draft_length(alpha, cost)
    ax_s.plot(ks, speed, "-", color=GREY)
    ax_s.plot(
        [k],
        [speculative_decoding.speedup(alpha, k, cost)],
        "*",
        color=RED,
        ms=12,
        label=f"k = {k}: {speculative_decoding.speedup(alpha, k, cost):.2f}x",
    )
    ax_s.axvline(
        best, color=BLUE, ls=":", label=f"best k = {best}: {speculative_decoding.speedup(alpha, best, cost):.2f}x"
    )
    ax_s.axhline(1, color="black", lw=0.5)
    ax_s.set(
        xlabel="tokens drafted per call k",
        ylabel="speed-up over the target alone",
        title=f"draft cost c = {cost:g} of a target step",
    )
    ax_s.legend(fontsize=8)
    return fig


def widget_speculative() -> None:
    controls = {
        "alpha": slider("FloatSlider", min=0.1, max=0.99, step=0.01, value=0.8, description="alpha"),
        "k": slider("IntSlider", min=1, max=16, value=4, description="k"),
        "cost": slider(
            "SelectionSlider", options=[0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5], value=0.05, description="draft cost c"
        ),
    }
    interactive(plot_speculative, controls, "How much does speculation buy?")
