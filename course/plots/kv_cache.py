"""Chapter 4's figures: the cache against the weights, paged allocation, cached decoding's speed.

A chart sized or counted by one of the chapter's exercises takes it as an argument (a notebook's
own, or by default the course's answer) and asks it, when built, everything its controls can show:
moving a slider asks nothing more.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap

import numpy as np
from matplotlib.figure import Figure

from course import kv_cache
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

DTYPES = {"fp32": 4, "fp16 / bf16": 2, "fp8 / int8": 1, "int4": 0.5}


def _architecture(model: str, n_kv_heads: int = 0) -> kv_cache.Architecture:
    """The published ``model``, with ``n_kv_heads`` key-value heads (capped at its query heads) unless 0."""
    arch = kv_cache.PUBLISHED[model]
    return dataclasses.replace(arch, n_kv_heads=min(n_kv_heads, arch.n_heads)) if n_kv_heads else arch


def size_label(n_bytes: float) -> str:
    """Bytes as they read: three significant figures in TB, GB, MB or kB (decimal, as the chart's
    axis), ``"17.2 GB"``, ``"67.1 MB"``, ``"262 kB"``; bytes themselves below a kilobyte."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= 0.9995 * scale:  # what rounds to 1000 of a unit reads as 1 of the next
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.3g} bytes"


class KVCacheChart(Chart):
    """The cache of ``batch`` sequences against context length, next to the fp16 weights, sized by
    ``kv_cache_bytes`` when given (a notebook's own), else by the course's answer: asked, when the
    chart is built, for every model, kv-head count and dtype of the widget."""

    CONTEXTS = np.array([2**i for i in range(7, 18)])

    def __init__(self, kv_cache_bytes=None):
        super().__init__(10, 3.5, left=0.08, wspace=0.35)
        self.kv_cache_bytes = functools.cache(kv_cache_bytes or kv_cache.course_answer("kv_cache_bytes"))
        for model in kv_cache.PUBLISHED:  # every view the widget can show, asked now
            for n_kv_heads in (0, *KV_HEADS):
                for bytes_per_element in DTYPES.values():
                    kv_cache.cache_bytes(
                        _architecture(model, n_kv_heads), 1, 1, bytes_per_element, kv_cache_bytes=self.kv_cache_bytes
                    )
        self.ax, self.ax_bar = self.figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
        ax = self.ax
        ax.set_xscale("log")
        ax.set_yscale("log")
        self.curve = self.moving(*ax.plot([], [], "-", color=BLUE, label=" "))
        self.weights = self.moving(ax.axhline(1, color=GREY, ls="--", label=" "))
        self.here = self.moving(*ax.plot([], [], "o", color=RED, ms=8, label=" "))
        self.cross = self.moving(ax.axvline(1, color=ORANGE, ls=":", label=" "))
        ax.set_xlim(self.CONTEXTS[0] / 1.3, self.CONTEXTS[-1] * 1.3)
        plain_log_ticks(ax)
        ax.set(xlabel="context length (tokens per sequence)", ylabel="GB")
        self.moving(ax.title)
        self.legend = self.moving(ax.legend(fontsize=8, loc="upper left"))
        self.bars = self.moving(*self.ax_bar.bar(["weights", "KV cache"], [0, 0], color=[GREY, BLUE]))
        self.bar_values = [
            self.moving(self.ax_bar.text(x, 0, "", ha="center", va="bottom", fontsize=9)) for x in (0, 1)
        ]
        self.ax_bar.set_ylabel("GB")
        self.moving(self.ax_bar.title)

    def update(
        self,
        model: str = "Llama-2-7B",
        context: int = 4096,
        batch: int = 1,
        n_kv_heads: int = 0,
        bytes_per_element: float = 2,
    ) -> KVCacheChart:
        arch = _architecture(model, n_kv_heads)
        per_token = kv_cache.cache_bytes(arch, 1, 1, bytes_per_element, kv_cache_bytes=self.kv_cache_bytes)
        cache = per_token * self.CONTEXTS * batch / 1e9
        weights = arch.params * 2 / 1e9
        here = per_token * context * batch / 1e9
        cross = kv_cache.crossover_tokens(arch, batch, bytes_per_element, kv_cache_bytes=self.kv_cache_bytes)
        self.curve.set_data(self.CONTEXTS, cache)
        self.weights.set_ydata([weights, weights])
        self.here.set_data([context], [here])
        shown = self.CONTEXTS[0] <= cross <= self.CONTEXTS[-1]
        self.cross.set_xdata([cross, cross])
        self.cross.set_visible(shown)
        labels = self.legend.get_texts()
        labels[0].set_text(f"KV cache, batch {batch}")
        labels[1].set_text(f"fp16 weights: {size_label(weights * 1e9)}")
        labels[2].set_text(f"{context:,} tokens: {size_label(here * 1e9)}")
        labels[3].set_text(f"cache = weights at {cross:,} tokens" if shown else "cache < weights at every length")
        self.ax.set_ylim(*decades(cache[0], cache[-1], weights))
        self.ax.set_title(f"{model} ({arch.kind}): {per_token / 2**10:.0f} KiB per token")
        for bar, text, value in zip(self.bars, self.bar_values, (weights, here), strict=True):
            bar.set_height(value)
            text.set_position((text.get_position()[0], value))
            text.set_text(size_label(value * 1e9))
        self.ax_bar.set_ylim(0, nice_ceiling(max(weights, here) * 1.12))
        self.ax_bar.set_title(f"at {context:,} tokens x {batch}")
        return self


def plot_kv_cache(
    model: str = "Llama-2-7B",
    context: int = 4096,
    batch: int = 1,
    n_kv_heads: int = 0,
    bytes_per_element: float = 2,
    kv_cache_bytes=None,
) -> Figure:
    """The cache of ``batch`` sequences against context length, next to the fp16 weights.

    ``n_kv_heads`` overrides the model's (capped at its query heads); 0 keeps the published number.
    ``kv_cache_bytes`` (a notebook's own) sizes the cache instead of the course's answer."""
    return KVCacheChart(kv_cache_bytes).update(model, context, batch, n_kv_heads, bytes_per_element).figure


KV_HEADS = (1, 2, 4, 8, 16, 32, 64)  # the widget's choices besides the published number
PAGE_SIZES = (1, 4, 16, 64, 256, 1024)


def widget_kv_cache(kv_cache_bytes=None) -> None:
    """Sliders for the model, context, batch, kv heads and cache dtype over :class:`KVCacheChart`,
    sized by ``kv_cache_bytes`` when given (a notebook's own), else by the course's answer."""
    controls = {
        "model": slider("Dropdown", options=list(kv_cache.PUBLISHED), value="Llama-2-7B", description="model"),
        "context": slider("SelectionSlider", options=[2**i for i in range(9, 18)], value=4096, description="context"),
        "batch": slider("SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64], value=1, description="batch"),
        "n_kv_heads": slider(
            "SelectionSlider",
            options=[("as published", 0)] + [(str(n), n) for n in KV_HEADS],
            value=0,
            description="kv heads",
        ),
        "bytes_per_element": slider("Dropdown", options=list(DTYPES.items()), value=2, description="cache dtype"),
    }
    interactive(KVCacheChart(kv_cache_bytes), controls, "When does the cache outgrow the model?")


class PagingChart(Chart):
    """Reserved and used cache memory over time: contiguous reservation to the maximum length vs pages,
    the pages counted by ``pages_needed`` when given (a notebook's own), else by the course's answer:
    asked, when the chart is built, for the admissions of the trace at every page size of the widget."""

    def __init__(self, pages_needed=None, n: int = 200, seed: int = 0):
        super().__init__(10, 3.9, left=0.1, wspace=0.2)
        self.trace = kv_cache.request_trace(n, seed=seed)
        self.count = pages_needed or kv_cache.course_answer("pages_needed")
        self.admissions = {page: kv_cache.admission_pages(self.trace, page, self.count) for page in PAGE_SIZES}
        self.served: dict[tuple, kv_cache.AllocationResult] = {}  # a slider's move re-runs only the paged side
        self.ax, text_ax = self.figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.8, 1]})
        self.lines = [self.moving(*self.ax.plot([], [], color=color, label=" ")) for color in (ORANGE, BLUE)]
        self.capacity = self.moving(self.ax.axhline(0, color=GREY, ls="--", label="capacity"))
        self.ax.set(xlabel="decode step", ylabel="tokens in the cache", title="what the cache holds")
        text_ax.axis("off")  # the legend goes under the numbers, where it cannot cover a line
        text_ax.set_position([text_ax.get_position().x0, 0.03, text_ax.get_position().width, 0.94])
        handles = [*self.lines, self.capacity]
        self.legend = self.moving(text_ax.legend(handles, [" ", " ", "capacity"], fontsize=8, loc="lower left"))
        self.numbers = self.moving(text_ax.text(0, 0.98, "", va="top", fontsize=9, family="monospace"))

    def _counted(self, lengths: list[int], page_size: int) -> int:
        """The pages of ``lengths``, each its own, from the counts asked when the chart was built."""
        if page_size not in self.admissions:
            self.admissions[page_size] = kv_cache.admission_pages(self.trace, page_size, self.count)
        return sum(self.admissions[page_size][n] for n in lengths)

    def _served(self, capacity_tokens: int, page_size: int | None) -> kv_cache.AllocationResult:
        if (capacity_tokens, page_size) not in self.served:
            self.served[capacity_tokens, page_size] = kv_cache.simulate_allocation(
                self.trace, capacity_tokens, page_size, pages_needed=self._counted
            )
        return self.served[capacity_tokens, page_size]

    def update(self, page_size: int = 16, capacity_tokens: int = 32768) -> PagingChart:
        lines = [f"{len(self.trace)} requests, cache of {capacity_tokens:,} tokens", ""]
        steps, results = 1, []
        runs = ((None, "contiguous"), (page_size, f"pages of {page_size}"))
        for line, label, (page, name) in zip(self.lines, self.legend.get_texts(), runs, strict=False):
            result = self._served(capacity_tokens, page)
            results.append(result)
            line.set_data(np.arange(len(result.timeline)), [u for _, u, _ in result.timeline])
            label.set_text(f"{name}: tokens stored")
            steps = max(steps, len(result.timeline))
            lines += [
                f"{name}:",
                f"  {100 * result.used_share:5.1f}% of reserved memory used",
                f"  {result.mean_batch:5.1f} sequences at a time",
                f"  {result.steps:5d} steps for the trace",
                f"  {result.preemptions:5d} preemptions",
            ]
        self.capacity.set_ydata([capacity_tokens, capacity_tokens])
        self.ax.set_xlim(0, nice_ceiling(steps))
        self.ax.set_ylim(0, capacity_tokens * 1.08)
        reading = kv_cache.paging_reading(*results, page_size)
        self.numbers.set_text("\n".join([*lines, "", *textwrap.wrap(reading, 38)]))
        return self


def plot_paging(
    page_size: int = 16, capacity_tokens: int = 32768, n: int = 200, seed: int = 0, pages_needed=None
) -> Figure:
    """Reserved and used cache memory over time: contiguous reservation to the maximum length vs pages,
    counted by ``pages_needed`` (a notebook's own) or the course's answer."""
    return PagingChart(pages_needed, n, seed).update(page_size, capacity_tokens).figure


def widget_paging(pages_needed=None) -> None:
    """Sliders for the page size and the cache's capacity over :class:`PagingChart`, the pages counted
    by ``pages_needed`` when given (a notebook's own), else by the course's answer."""
    controls = {
        "page_size": slider("SelectionSlider", options=list(PAGE_SIZES), value=16, description="page size"),
        "capacity_tokens": slider(
            "SelectionSlider", options=[8192, 16384, 32768, 65536], value=32768, description="cache capacity (tokens)"
        ),
    }
    interactive(PagingChart(pages_needed=pages_needed), controls, "Contiguous against paged allocation")


def plot_cache_speed(lengths: list[int], with_cache: list[float], without_cache: list[float]) -> Figure:
    """Measured generation time against length, with and without the cache."""
    fig = new_figure(6, 3.4, left=0.13)
    ax = fig.subplots()
    ax.plot(lengths, without_cache, "o-", color=ORANGE, label="recompute everything (no cache)")
    ax.plot(lengths, with_cache, "o-", color=BLUE, label="KV cache")
    ax.set(xlabel="tokens generated", ylabel="seconds", title="generating with the course model")
    ax.legend(fontsize=8)
    return fig
