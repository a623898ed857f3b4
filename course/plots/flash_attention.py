"""Chapter 5's figures: the online softmax block by block, the IO model, measured timings. The
online softmax's chart takes the update it draws as an argument (a notebook's own, or by default
the course's answer) and asks it, when built, every trace its sliders can show."""

from __future__ import annotations

import math

import numpy as np
import torch
from matplotlib.figure import Figure

from course import flash_attention
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


def _example(n: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=generator, dtype=torch.float64) * 2
    scores[int(0.7 * n)] += 5  # a late maximum, so the rescaling shows
    values = torch.randn(n, 2, generator=generator, dtype=torch.float64)
    return scores, values


def _exact(scores, values):
    """Softmax attention of one query whose scores are ``scores``, over ``values``."""
    return flash_attention.naive_attention(scores.new_ones(1, 1), scores[:, None], values)[0]  # q k = the score


class OnlineSoftmaxChart(Chart):
    """One query's scores, the blocks seen so far, and the running m, l and output, folded in by
    ``online_softmax_update`` when given (a notebook's own), else by the course's answer: asked, when
    the chart is built, for the trace at every block size of the widget."""

    def __init__(self, online_softmax_update=None, n: int = 48, seed: int = 0):
        super().__init__(11, 3.4, left=0.06, wspace=0.3)
        self.n = n
        self.update_function = online_softmax_update or flash_attention.course_answer("online_softmax_update")
        self.scores, self.values = _example(n, seed)
        self.exact = _exact(self.scores, self.values)
        self.traces = {block: self._trace(block) for block in BLOCK_SIZES}
        self.ax_s, self.ax_m, self.ax_o = self.figure.subplots(1, 3)
        scores, exact = self.scores, self.exact
        self.bars = self.moving(*self.ax_s.bar(range(n), scores.numpy(), color=GREY))
        self.running_max = self.moving(self.ax_s.axhline(0, color=RED, ls="--", label=" "))
        self.edges = self.moving(self.ax_s.vlines([], 0, 1, color="black", lw=0.4, alpha=0.4))
        self.edges.set_transform(self.ax_s.get_xaxis_transform())  # edges span the axes' height
        low, high = scores.min().item(), scores.max().item()
        self.ax_s.set(xlim=(-1, n), ylim=(low - 0.1 * (high - low), high + 0.1 * (high - low)))
        self.ax_s.set(xlabel="key", ylabel="score")
        self.moving(self.ax_s.title)
        self.legend = self.moving(self.ax_s.legend(fontsize=8, loc="lower left"))
        self.m_line = self.moving(*self.ax_m.plot([], [], "o-", color=RED, label="m (running max)"))
        self.lse_line = self.moving(*self.ax_m.plot([], [], "s-", color=ORANGE, label="m + log l (log-sum-exp)"))
        self.now = self.moving(self.ax_m.axvline(1, color=GREY, ls=":"))
        self.ax_m.set(xlabel="blocks seen", ylabel="score", title="the running statistics")
        self.ax_m.legend(fontsize=8, loc="lower right")
        self.path = self.moving(*self.ax_o.plot([], [], "o-", color=BLUE, label="o / l after each block"))
        self.ax_o.plot([exact[0].item()], [exact[1].item()], "*", color=RED, ms=14, label="exact softmax output")
        self.ax_o.set(xlabel="output[0]", ylabel="output[1]", title="the normalised output so far")
        self.ax_o.legend(fontsize=8, loc="best")

    def _trace(self, block: int) -> list[dict]:
        return flash_attention.online_softmax_trace(self.scores, self.values, block, self.update_function)

    def update(self, step: int = 1, block: int = 8) -> OnlineSoftmaxChart:
        if block not in self.traces:
            self.traces[block] = self._trace(block)
        states, exact = self.traces[block], self.exact
        step = max(1, min(step, len(states)))
        state = states[step - 1]
        for i, bar in enumerate(self.bars):
            bar.set_facecolor(BLUE if i < state["seen"] else GREY)
        self.running_max.set_ydata([state["m"], state["m"]])
        self.legend.get_texts()[0].set_text(f"running max m = {state['m']:.2f}")
        self.edges.set_segments([[(edge - 0.5, 0), (edge - 0.5, 1)] for edge in range(block, self.n, block)])
        self.ax_s.set_title(f"after block {step} of {len(states)}")
        blocks = np.arange(1, len(states) + 1)
        m = [s["m"] for s in states]
        lse = [math.log(s["l"]) + s["m"] for s in states]
        self.m_line.set_data(blocks, m)
        self.lse_line.set_data(blocks, lse)
        self.now.set_xdata([step, step])
        self.ax_m.set_xlim(0.5, len(states) + 0.5)
        low, high = min(m + lse), max(m + lse)
        self.ax_m.set_ylim(low - 0.1 * (high - low) - 0.1, high + 0.1 * (high - low) + 0.1)
        path = np.array([(s["o"] / s["l"]).numpy() for s in states])
        self.path.set_data(path[:step, 0], path[:step, 1])
        corners = np.vstack([path, exact.numpy()[None]])  # limits from the whole path: fixed for a block size
        pad = 0.08 * (corners.max(axis=0) - corners.min(axis=0)) + 1e-3
        self.ax_o.set_xlim(corners[:, 0].min() - pad[0], corners[:, 0].max() + pad[0])
        self.ax_o.set_ylim(corners[:, 1].min() - pad[1], corners[:, 1].max() + pad[1])
        return self


def plot_online_softmax(
    step: int = 1, block: int = 8, n: int = 48, seed: int = 0, online_softmax_update=None
) -> Figure:
    """One query's scores, the blocks seen after ``step`` blocks, and the running m, l and output,
    folded in by ``online_softmax_update`` (a notebook's own) or the course's answer."""
    return OnlineSoftmaxChart(online_softmax_update, n, seed).update(step, block).figure


BLOCK_SIZES = (1, 4, 8, 16, 48)  # the widget's choices


def widget_online_softmax(online_softmax_update=None) -> None:
    """A slider for the block index (and the block size) over :class:`OnlineSoftmaxChart`, the running
    values folded in by ``online_softmax_update`` when given (a notebook's own), else by the course's answer."""
    controls = {
        "step": slider("IntSlider", min=1, max=48, value=1, description="blocks seen"),
        "block": slider("SelectionSlider", options=list(BLOCK_SIZES), value=8, description="block size"),
    }
    interactive(OnlineSoftmaxChart(online_softmax_update), controls, "The online softmax, block by block")


class IOChart(Chart):
    """Slow-memory traffic of standard and tiled attention against sequence length (one head)."""

    LENGTHS = np.array([2**i for i in range(8, 18)])

    def __init__(self, bytes_per_element: int = 2):
        super().__init__(10, 3.4, left=0.1, wspace=0.3)
        self.bytes_per_element = bytes_per_element
        self.ax, self.ax_ratio = self.figure.subplots(1, 2)
        ax = self.ax
        ax.set_xscale("log")
        ax.set_yscale("log")
        self.standard = self.moving(*ax.plot([], [], "o-", color=ORANGE, label="standard: Theta(N d + N^2)"))
        self.tiled = self.moving(*ax.plot([], [], "o-", color=BLUE, label="tiled: Theta(N^2 d^2 / M)"))
        self.here = self.moving(*ax.plot([], [], "*", color=RED, ms=12))
        ax.set_xlim(self.LENGTHS[0] / 1.3, self.LENGTHS[-1] * 1.3)
        plain_log_ticks(ax, "B")
        ax.set(xlabel="sequence length N", ylabel="bytes moved (one head)")
        self.moving(ax.title)
        ax.legend(fontsize=8, loc="upper left")
        self.ax_ratio.set_xscale("log")
        self.ratio = self.moving(*self.ax_ratio.plot([], [], "o-", color=RED))
        self.ratio_here = self.moving(*self.ax_ratio.plot([], [], "*", color=RED, ms=12))
        self.ax_ratio.axhline(1, color=GREY, ls=":")
        self.ax_ratio.set_xlim(self.LENGTHS[0] / 1.3, self.LENGTHS[-1] * 1.3)
        plain_log_ticks(self.ax_ratio)
        self.ax_ratio.set(xlabel="sequence length N", ylabel="standard / tiled")
        self.moving(self.ax_ratio.title)

    def update(self, n: int = 4096, d: int = 64, sram_kib: int = 192) -> IOChart:
        size = self.bytes_per_element
        sram = sram_kib * 1024 / size
        standard = np.array([flash_attention.standard_io_elements(int(x), d) for x in self.LENGTHS]) * size
        tiled = np.array([flash_attention.tiled_io_elements(int(x), d, sram) for x in self.LENGTHS]) * size
        here_s = flash_attention.standard_io_elements(n, d) * size
        here_t = flash_attention.tiled_io_elements(n, d, sram) * size
        self.standard.set_data(self.LENGTHS, standard)
        self.tiled.set_data(self.LENGTHS, tiled)
        self.here.set_data([n, n], [here_s, here_t])
        self.ax.set_ylim(*decades(standard.min(), tiled.min(), standard.max(), tiled.max()))
        self.ax.set_title(f"d = {d}, fast memory {sram_kib} KiB")
        ratio = standard / tiled
        self.ratio.set_data(self.LENGTHS, ratio)
        self.ratio_here.set_data([n], [here_s / here_t])
        self.ax_ratio.set_ylim(0, nice_ceiling(ratio.max() * 1.05))
        self.ax_ratio.set_title(f"N = {n:,}: {here_s / here_t:.1f}x less traffic tiled")
        return self


def plot_io(n: int = 4096, d: int = 64, sram_kib: int = 192, bytes_per_element: int = 2) -> Figure:
    """Slow-memory traffic of standard and tiled attention against sequence length (one head)."""
    return IOChart(bytes_per_element).update(n, d, sram_kib).figure


def widget_io() -> None:
    """Sliders for the sequence length, head dimension and fast memory over :class:`IOChart`."""
    controls = {
        "n": slider("SelectionSlider", options=[2**i for i in range(8, 18)], value=4096, description="N"),
        "d": slider("SelectionSlider", options=[32, 64, 128, 256], value=64, description="head dim"),
        "sram_kib": slider(
            "SelectionSlider", options=[16, 48, 100, 192, 228], value=192, description="fast memory (KiB)"
        ),
    }
    interactive(IOChart(), controls, "Memory traffic of attention")


def plot_attention_timing(
    lengths: list[int], seconds: dict[str, list[float]], peak_mib: dict[str, list[float]]
) -> Figure:
    """Measured time and memory of the attention implementations against sequence length."""
    fig = new_figure(10, 3.4, left=0.08, wspace=0.3)
    ax_t, ax_m = fig.subplots(1, 2)
    for ax, series in ((ax_t, {name: [1e3 * t for t in times] for name, times in seconds.items()}), (ax_m, peak_mib)):
        drawn = {}
        for (name, values), color in zip(series.items(), (ORANGE, BLUE, RED, GREY), strict=False):
            twin = next((other for other, seen in drawn.items() if np.allclose(seen, values, rtol=0.02)), None)
            if twin is None:  # a line of its own
                ax.loglog(lengths, values, "o-", color=color, label=name)
            else:  # the same numbers as a line already drawn: dashed, hollow markers, so neither hides
                ax.loglog(lengths, values, "o--", color=color, mfc="none", ms=10, label=f"{name} (= {twin})")
            drawn[name] = values
    for ax in (ax_t, ax_m):
        plain_log_ticks(ax)
        ax.set_xticks(lengths, [str(x) for x in lengths])
        ax.legend(fontsize=8)
    ax_t.set(xlabel="sequence length", ylabel="milliseconds", title="time")
    ax_m.set(xlabel="sequence length", ylabel="MiB", title="largest intermediate (peak memory on a GPU)")
    return fig
