"""Chapter 7's figure: each draft's acceptance rate, and the target's loss against pruning."""

from __future__ import annotations

from matplotlib.figure import Figure

from course.plots._widgets import BLUE, GREY, RED, new_figure


def plot_drafts_and_pruning(
    overlap: dict[str, float],
    shares: list[float],
    unstructured: list[float] | None,
    structured: list[float],
    baseline: float,
) -> Figure:
    """Left: each draft's overlap with the target (its acceptance rate). Right: loss against pruning
    (``unstructured`` None: structured pruning only)."""
    fig = new_figure(10, 3.4, left=0.07, wspace=0.3)
    ax_d, ax_p = fig.subplots(1, 2)
    names = list(overlap)
    ax_d.bar(names, [overlap[n] for n in names], color=[GREY, BLUE][: len(names)])
    for x, name in enumerate(names):
        ax_d.text(x, overlap[name], f"{overlap[name]:.3f}", ha="center", va="bottom", fontsize=9)
    ax_d.set_ylim(0, 1.12)  # a rate near 1 keeps its label inside the frame
    ax_d.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1])
    ax_d.set(ylabel="sum min(p, q) on held-out text", title="acceptance rate of each draft")
    percent = [100 * s for s in shares]
    if unstructured is not None:
        ax_p.plot(percent, unstructured, "o-", color=BLUE, label="unstructured (smallest weights)")
    ax_p.plot(percent, structured, "s-", color=RED, label="structured (whole hidden units)")
    ax_p.axhline(baseline, color=GREY, ls=":", label=f"unpruned: {baseline:.3f}")
    ax_p.set(xlabel="% of feed-forward weights removed", ylabel="held-out loss (nats/byte)", title="pruning the target")
    ax_p.legend(fontsize=8)
    return fig
