"""Chapters 6 and 7's figures: speculation's tokens per call and speed-up, drafts compared, pruning."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from course import speculative as sp
from course.viz import BLUE, GREY, RED, interactive, new_figure, slider


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
    ax_t.plot(ks, [sp.expected_tokens_per_call(alpha, x) for x in ks], "-", color=GREY, label="formula")
    if simulate:
        p, q = _pair_with_alpha(alpha)
        measured = sp.acceptance_rate(p, q)
        sims = [sp.simulate_tokens_per_call(p, q, x, 5000, seed=x) for x in ks[::3]]
        ax_t.plot(ks[::3], sims, "o", color=BLUE, label=f"simulated (alpha {measured:.2f})")
    ax_t.plot([k], [sp.expected_tokens_per_call(alpha, k)], "*", color=RED, ms=12)
    ax_t.set(xlabel="tokens drafted per call k", ylabel="tokens per target call", title=f"alpha = {alpha:.2f}")
    ax_t.legend(fontsize=8)
    speed = [sp.speedup(alpha, x, cost) for x in ks]
    best = sp.best_draft_length(alpha, cost)
    ax_s.plot(ks, speed, "-", color=GREY)
    ax_s.plot([k], [sp.speedup(alpha, k, cost)], "*", color=RED, ms=12, label=f"k = {k}: {sp.speedup(alpha, k, cost):.2f}x")
    ax_s.axvline(best, color=BLUE, ls=":", label=f"best k = {best}: {sp.speedup(alpha, best, cost):.2f}x")
    ax_s.axhline(1, color="black", lw=0.5)
    ax_s.set(xlabel="tokens drafted per call k", ylabel="speed-up over the target alone",
             title=f"draft cost c = {cost:g} of a target step")
    ax_s.legend(fontsize=8)
    return fig


def widget_speculative() -> None:
    controls = {
        "alpha": slider("FloatSlider", min=0.1, max=0.99, step=0.01, value=0.8, description="alpha"),
        "k": slider("IntSlider", min=1, max=16, value=4, description="k"),
        "cost": slider("SelectionSlider", options=[0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5], value=0.05,
                       description="draft cost c"),
    }
    interactive(plot_speculative, controls, "How much does speculation buy?")


def plot_drafts_and_pruning(overlap: dict[str, float], shares: list[float], unstructured: list[float],
                            structured: list[float], baseline: float) -> Figure:
    """Left: each draft's overlap with the target (its acceptance rate). Right: loss against pruning."""
    fig = new_figure(10, 3.4, left=0.07, wspace=0.3)
    ax_d, ax_p = fig.subplots(1, 2)
    names = list(overlap)
    ax_d.bar(names, [overlap[n] for n in names], color=[GREY, BLUE][: len(names)])
    for x, name in enumerate(names):
        ax_d.text(x, overlap[name], f"{overlap[name]:.3f}", ha="center", va="bottom", fontsize=9)
    ax_d.set_ylim(0, 1)
    ax_d.set(ylabel="sum min(p, q) on held-out text", title="acceptance rate of each draft")
    percent = [100 * s for s in shares]
    ax_p.plot(percent, unstructured, "o-", color=BLUE, label="unstructured (smallest weights)")
    ax_p.plot(percent, structured, "s-", color=RED, label="structured (whole hidden units)")
    ax_p.axhline(baseline, color=GREY, ls=":", label=f"unpruned: {baseline:.3f}")
    ax_p.set(xlabel="% of feed-forward weights removed", ylabel="held-out loss (nats/byte)", title="pruning the target")
    ax_p.legend(fontsize=8)
    return fig
