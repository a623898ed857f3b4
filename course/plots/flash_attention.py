"""Chapter 5's figures: the online softmax block by block, the IO model, measured timings."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from course import flash_attention
from course.plots._widgets import BLUE, GREY, ORANGE, RED, interactive, new_figure, plain_log_ticks, slider


def _example(n: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=generator, dtype=torch.float64) * 2
    scores[int(0.7 * n)] += 5  # a late maximum, so the rescaling shows
    values = torch.randn(n, 2, generator=generator, dtype=torch.float64)
    return scores, values


def plot_online_softmax(step: int = 1, block: int = 8, n: int = 48, seed: int = 0) -> Figure:
    """One query's scores, the blocks seen after ``step`` blocks, and the running m, l and output."""
    scores, values = _example(n, seed)
    states = flash_attention.online_softmax_trace(scores, values, block)
    step = max(1, min(step, len(states)))
    state = states[step - 1]
    exact = torch.softmax(scores, 0) @ values
    fig = new_figure(11, 3.4, left=0.06, wspace=0.3)
    ax_s, ax_m, ax_o = fig.subplots(1, 3)
    colors = [BLUE if i < state["seen"] else GREY for i in range(n)]
    ax_s.bar(range(n), scores.numpy(), color=colors)
    ax_s.axhline(state["m"], color=RED, ls="--", label=f"running max m = {state['m']:.2f}")
    for edge in range(block, n, block):
        ax_s.axvline(edge - 0.5, color="black", lw=0.4, alpha=0.4)
    ax_s.set(xlabel="key", ylabel="score", title=f"after block {step} of {len(states)}")
    ax_s.legend(fontsize=8, loc="lower left")
    blocks = np.arange(1, len(states) + 1)
    ax_m.plot(blocks, [s["m"] for s in states], "o-", color=RED, label="m (running max)")
    ax_m.plot(blocks, [math.log(s["l"]) + s["m"] for s in states], "s-", color=ORANGE, label="m + log l (log-sum-exp)")
    ax_m.axvline(step, color=GREY, ls=":")
    ax_m.set(xlabel="blocks seen", title="the running statistics")
    ax_m.legend(fontsize=8)
    path = np.array([(s["o"] / s["l"]).numpy() for s in states[:step]])
    ax_o.plot(path[:, 0], path[:, 1], "o-", color=BLUE, label="o / l after each block")
    ax_o.plot([exact[0].item()], [exact[1].item()], "*", color=RED, ms=14, label="exact softmax output")
    ax_o.set(xlabel="output[0]", ylabel="output[1]", title="the normalised output so far")
    ax_o.legend(fontsize=8)
    return fig


def widget_online_softmax() -> None:
    """A slider for the block index (and the block size) over :func:`plot_online_softmax`."""
    controls = {
        "step": slider("IntSlider", min=1, max=48, value=1, description="blocks seen"),
        "block": slider("SelectionSlider", options=[1, 4, 8, 16, 48], value=8, description="block size"),
    }
    interactive(plot_online_softmax, controls, "The online softmax, block by block")


def plot_io(n: int = 4096, d: int = 64, sram_kib: int = 192, bytes_per_element: int = 2) -> Figure:
    """Slow-memory traffic of standard and tiled attention against sequence length (one head)."""
    sram = sram_kib * 1024 / bytes_per_element
    lengths = np.array([2**i for i in range(8, 18)])
    standard = np.array([flash_attention.standard_io_elements(int(x), d) for x in lengths]) * bytes_per_element
    tiled = np.array([flash_attention.tiled_io_elements(int(x), d, sram) for x in lengths]) * bytes_per_element
    fig = new_figure(10, 3.4, left=0.08, wspace=0.3)
    ax, ax_ratio = fig.subplots(1, 2)
    ax.loglog(lengths, standard, "o-", color=ORANGE, label="standard: Theta(N d + N^2)")
    ax.loglog(lengths, tiled, "o-", color=BLUE, label="tiled: Theta(N^2 d^2 / M)")
    here_s, here_t = (
        flash_attention.standard_io_elements(n, d) * bytes_per_element,
        flash_attention.tiled_io_elements(n, d, sram) * bytes_per_element,
    )
    ax.plot([n, n], [here_s, here_t], "*", color=RED, ms=12)
    plain_log_ticks(ax, "B")
    ax.set(xlabel="sequence length N", ylabel="bytes moved (one head)", title=f"d = {d}, fast memory {sram_kib} KiB")
    ax.legend(fontsize=8)
    ax_ratio.semilogx(lengths, standard / tiled, "o-", color=RED)
    ax_ratio.axhline(1, color=GREY, ls=":")
    ax_ratio.set(
        xlabel="sequence length N",
        ylabel="standard / tiled",
        title=f"N = {n:,}: {here_s / here_t:.1f}x less traffic tiled",
    )
    return fig


def widget_io() -> None:
    controls = {
        "n": slider("SelectionSlider", options=[2**i for i in range(8, 18)], value=4096, description="N"),
        "d": slider("SelectionSlider", options=[32, 64, 128, 256], value=64, description="head dim"),
        "sram_kib": slider(
            "SelectionSlider", options=[16, 48, 100, 192, 228], value=192, description="fast memory (KiB)"
        ),
    }
    interactive(plot_io, controls, "Memory traffic of attention")


def plot_attention_timing(
    lengths: list[int], seconds: dict[str, list[float]], peak_mib: dict[str, list[float]]
) -> Figure:
    """Measured time and memory of the attention implementations against sequence length."""
    fig = new_figure(10, 3.4, left=0.08, wspace=0.3)
    ax_t, ax_m = fig.subplots(1, 2)
    for (name, times), color in zip(seconds.items(), (ORANGE, BLUE, RED, GREY), strict=False):
        ax_t.loglog(lengths, [1e3 * t for t in times], "o-", color=color, label=name)
        ax_m.loglog(lengths, peak_mib[name], "o-", color=color, label=name)
    for ax in (ax_t, ax_m):
        plain_log_ticks(ax)
        ax.set_xticks(lengths, [str(x) for x in lengths])
        ax.legend(fontsize=8)
    ax_t.set(xlabel="sequence length", ylabel="milliseconds", title="time")
    ax_m.set(xlabel="sequence length", ylabel="MiB", title="largest intermediate (peak memory on a GPU)")
    return fig
