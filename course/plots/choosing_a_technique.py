"""Chapter 9's figures: the guide from a problem to a technique, where a capstone configuration sits
among the alternatives, and the measured speed-ups."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course import choosing_a_technique as technique
from course.plots._widgets import BLUE, GREY, ORANGE, RED, interactive, new_figure, plain_log_ticks, slider

GREEN = "#2ca02c"
PARAMS = [1, 3, 7, 13, 34, 70, 180, 405]  # billions, the sizes people serve
GPUS = [8, 12, 16, 24, 40, 48, 80, 141]  # GiB


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))


def plot_guide(
    problem: str = "serve", params_billion: float = 70, gpu_gib: float = 80, first_done: bool = False
) -> Figure:
    """Left: the table, the row of ``problem`` highlighted, and the advice for this model and GPU.
    Right: what the model needs in memory, in each form, against the GPU."""
    advice = technique.recommend(problem, params_billion, gpu_gib, first_done)
    fig = new_figure(12, 4.6, left=0.01, right=0.98, bottom=0.12, top=0.9, wspace=0.12)
    grid = fig.add_gridspec(1, 2, width_ratios=[2.1, 1])
    ax, ax_m = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    ax.set_axis_off()
    ax.set(xlim=(0, 1), ylim=(0, 1))
    columns = [(0.0, "problem", 24), (0.3, "first thing to try", 34), (0.72, "changes behaviour?", 22)]
    for x, title, _ in columns:
        ax.text(x + 0.01, 0.97, title, fontsize=9, fontweight="bold", va="top")
    height = 0.1
    for index, row in enumerate(technique.TABLE):
        top = 0.9 - index * height
        if row.problem == problem:
            ax.add_patch(Rectangle((0, top - height + 0.005), 1, height - 0.01, color=BLUE, alpha=0.15, lw=0))
        for (x, _, width), text in zip(columns, (row.label, row.first, row.changes), strict=True):
            ax.text(x + 0.01, top - 0.01, _wrap(text, width), fontsize=8, va="top")
    answer = f"First try: {advice.technique}" if not first_done else f"Then: {advice.technique}"
    ax.text(0.01, 0.36, answer, fontsize=10, fontweight="bold", va="top", color=BLUE)
    ax.text(0.01, 0.29, _wrap(advice.why, 110), fontsize=8.5, va="top")
    ax.text(
        0.01,
        0.06,
        f"Changes behaviour: {advice.changes_behaviour}.  Measured in {advice.chapter}.",
        fontsize=8.5,
        va="top",
        style="italic",
    )
    bars = {
        "weights\n16-bit": technique.weights_gib(params_billion, 16),
        "weights\n8-bit": technique.weights_gib(params_billion, 8),
        "weights\n4-bit": technique.weights_gib(params_billion, 4),
        "full\nfine-tune": technique.lora.finetune_memory_gib(params_billion * 1e9, "full"),
        "LoRA": technique.lora.finetune_memory_gib(params_billion * 1e9, "lora"),
        "QLoRA": technique.lora.finetune_memory_gib(params_billion * 1e9, "qlora"),
    }
    room = technique.HEADROOM * gpu_gib
    colours = [
        (BLUE if gib <= room else GREY) if i < 3 else (ORANGE if gib <= room else GREY)
        for i, gib in enumerate(bars.values())
    ]
    ax_m.bar(list(bars), list(bars.values()), color=colours)
    ax_m.axhline(gpu_gib, color=RED, lw=1.2, label=f"GPU: {gpu_gib:g} GiB")
    ax_m.axhline(room, color=RED, lw=0.8, ls=":", label=f"{technique.HEADROOM:.0%} of it for weights")
    ax_m.set_yscale("log")
    plain_log_ticks(ax_m)
    ax_m.set_xticks(range(len(bars)), list(bars), fontsize=7)
    ax_m.set_ylim(min(bars.values()) / 2, max(max(bars.values()), gpu_gib) * 2)
    ax_m.set(ylabel="GiB", title=f"{params_billion:g}B parameters: serving and fine-tuning memory")
    ax_m.title.set_fontsize(9)
    ax_m.legend(fontsize=7, loc="upper right")
    return fig


def widget_guide() -> None:
    problems = [(row.label, row.problem) for row in technique.TABLE]
    controls = {
        "problem": slider("Dropdown", options=problems, value="serve", description="problem"),
        "params_billion": slider("SelectionSlider", options=PARAMS, value=70, description="parameters (B)"),
        "gpu_gib": slider("SelectionSlider", options=GPUS, value=80, description="GPU memory (GiB)"),
        "first_done": slider("Checkbox", value=False, description="done that; still not enough"),
    }
    interactive(plot_guide, controls, "From a problem to the first technique to try")


def _format_label(weights: str, group_size: int | None) -> str:
    return weights + (f" g{group_size}" if group_size else "")


def plot_capstone(
    weights: str = "int4", group_size: int | None = 64, draft: str = "distilled", draft_length: int = 4
) -> Figure:
    """Left: bytes served (target and draft) against held-out loss for every weight format, the
    budget shaded. Right: tokens per target call against the draft length for each draft, with the
    target in ``weights``. The star is the configuration; the title says which budget parts it meets."""
    config = technique.Configuration(weights, group_size, draft, draft_length)
    budget = technique.BUDGET
    draft_bytes = technique.weight_bytes(technique.draft_model(draft))
    fp32_bytes, _ = technique.format_figures("fp32", None)
    fig = new_figure(11, 4.0, left=0.07, wspace=0.27, top=0.85)
    ax_l, ax_t = fig.subplots(1, 2)
    top = 0.06
    ax_l.add_patch(
        Rectangle((0, -1), 100 * budget["weights_share"], 1 + budget["loss_gap"], color=GREEN, alpha=0.12, lw=0)
    )
    for row, marker in zip(technique.format_table(), "os^vDPX<>", strict=False):
        share = 100 * (row["bytes"] + draft_bytes) / fp32_bytes
        off_scale = row["loss_gap"] > top  # drawn at the top edge, its value in the legend
        label = _format_label(row["weights"], row["group_size"]) + (f" ({row['loss_gap']:+.2f})" if off_scale else "")
        ax_l.plot([share], [min(row["loss_gap"], top)], marker, color=BLUE, ms=7, alpha=0.8, label=label)
    n_bytes, loss = technique.format_figures(weights, group_size)
    fp32_loss = technique.format_figures("fp32", None)[1]
    share = (n_bytes + draft_bytes) / fp32_bytes
    ax_l.plot([100 * share], [min(loss - fp32_loss, top)], "*", color=RED, ms=15, label="your choice")
    ax_l.legend(fontsize=7, ncol=2, loc="upper right")
    ax_l.axvline(100 * budget["weights_share"], color=GREEN, ls="--", lw=1)
    ax_l.axhline(budget["loss_gap"], color=GREEN, ls="--", lw=1)
    ax_l.set(
        xlim=(0, 110),
        ylim=(-0.005, top + 0.008),
        xlabel=f"weights served, % of fp32 target (draft: {draft})",
        ylabel="held-out loss - fp32's (nats/byte)",
        title="bytes against quality (shaded: the budget)",
    )
    ks = list(technique.DRAFT_LENGTHS)
    curves = technique.draft_curves(weights, group_size)
    for name, colour in zip(curves, (GREY, BLUE), strict=False):
        ax_t.plot(ks, curves[name], "o-", color=colour, ms=4, label=technique.DRAFTS[name].short)
    ax_t.axhline(1, color="black", lw=0.8, label="no draft: 1")
    ax_t.axhline(budget["tokens_per_call"], color=GREEN, ls="--", lw=1, label=f"budget: {budget['tokens_per_call']:g}")
    per_call = curves[draft][draft_length - 1] if draft in curves else 1.0
    ax_t.plot([draft_length], [per_call], "*", color=RED, ms=14)
    ax_t.set(
        xlabel="tokens drafted per call k",
        ylabel="tokens per target call (greedy)",
        title=f"speculation with the target in {_format_label(weights, group_size)}",
    )
    ax_t.legend(fontsize=8, loc="upper left")
    met = {
        "weights_share": share <= budget["weights_share"],
        "loss_gap": loss - fp32_loss <= budget["loss_gap"],
        "tokens_per_call": per_call >= budget["tokens_per_call"],
    }
    missed = [name.replace("_", " ") for name, ok in met.items() if not ok]
    verdict = "within the budget" if not missed else "misses: " + ", ".join(missed)
    fig.suptitle(f"{config.label()}: {verdict}", fontsize=11, color=GREEN if not missed else RED)
    return fig


def widget_capstone() -> None:
    formats = [(_format_label(w, g), (w, g)) for w, g in technique.ALTERNATIVES]

    def plot(fmt=("int4", 64), draft="distilled", draft_length=4):
        return plot_capstone(fmt[0], fmt[1], draft, draft_length)

    controls = {
        "fmt": slider("Dropdown", options=formats, value=("int4", 64), description="weights"),
        "draft": slider("Dropdown", options=list(technique.DRAFTS), value="distilled", description="draft"),
        "draft_length": slider("IntSlider", min=1, max=8, value=4, description="k"),
    }
    interactive(plot, controls, "Try a configuration (each new weight format takes a few seconds the first time)")


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
