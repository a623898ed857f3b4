"""Chapter 4's figures: the cache against the weights, paged allocation, cached decoding's speed."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from matplotlib.figure import Figure

from course import kv_cache
from course.plots._widgets import BLUE, GREY, ORANGE, RED, interactive, new_figure, plain_log_ticks, slider

DTYPES = {"fp32": 4, "fp16 / bf16": 2, "fp8 / int8": 1, "int4": 0.5}


def plot_kv_cache(
    model: str = "Llama-2-7B", context: int = 4096, batch: int = 1, n_kv_heads: int = 0, bytes_per_element: float = 2
) -> Figure:
    """The cache of ``batch`` sequences against context length, next to the fp16 weights.

    ``n_kv_heads`` overrides the model's (capped at its query heads); 0 keeps the published number."""
    arch = kv_cache.PUBLISHED[model]
    if n_kv_heads:
        n_kv_heads = min(n_kv_heads, arch.n_heads)
        arch = dataclasses.replace(arch, n_kv_heads=n_kv_heads)
    contexts = np.array([2**i for i in range(7, 18)])
    cache = np.array([kv_cache.cache_bytes(arch, int(c), batch, bytes_per_element) for c in contexts]) / 1e9
    weights = arch.params * 2 / 1e9
    fig = new_figure(10, 3.5, left=0.07, wspace=0.35)
    ax, ax_bar = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    ax.loglog(contexts, cache, "-", color=BLUE, label=f"KV cache, batch {batch}")
    ax.axhline(weights, color=GREY, ls="--", label=f"fp16 weights: {weights:.1f} GB")
    here = kv_cache.cache_bytes(arch, context, batch, bytes_per_element) / 1e9
    ax.plot([context], [here], "o", color=RED, ms=8, label=f"{context:,} tokens: {here:.1f} GB")
    cross = kv_cache.crossover_tokens(arch, batch, bytes_per_element)
    if contexts[0] <= cross <= contexts[-1]:
        ax.axvline(cross, color=ORANGE, ls=":", label=f"cache = weights at {cross:,} tokens")
    plain_log_ticks(ax)
    ax.set(
        xlabel="context length (tokens per sequence)",
        ylabel="GB",
        title=f"{model} ({arch.kind}): {kv_cache.cache_bytes(arch, 1, 1, bytes_per_element) / 2**10:.0f} KiB per token",
    )
    ax.legend(fontsize=8, loc="upper left")
    ax_bar.bar(["weights", "KV cache"], [weights, here], color=[GREY, BLUE])
    ax_bar.set(ylabel="GB", title=f"at {context:,} tokens x {batch}")
    for x, value in enumerate((weights, here)):
        ax_bar.text(x, value, f"{value:.1f}", ha="center", va="bottom", fontsize=9)
    return fig


def widget_kv_cache() -> None:
    """Sliders for the model, context, batch, kv heads and cache dtype over :func:`plot_kv_cache`."""
    controls = {
        "model": slider("Dropdown", options=list(kv_cache.PUBLISHED), value="Llama-2-7B", description="model"),
        "context": slider("SelectionSlider", options=[2**i for i in range(9, 18)], value=4096, description="context"),
        "batch": slider("SelectionSlider", options=[1, 2, 4, 8, 16, 32, 64], value=1, description="batch"),
        "n_kv_heads": slider(
            "SelectionSlider",
            options=[("as published", 0)] + [(str(n), n) for n in (1, 2, 4, 8, 16, 32, 64)],
            value=0,
            description="kv heads",
        ),
        "bytes_per_element": slider("Dropdown", options=list(DTYPES.items()), value=2, description="cache dtype"),
    }
    interactive(plot_kv_cache, controls, "When does the cache outgrow the model?")


@functools.lru_cache(maxsize=64)
def _served(capacity_tokens: int, page_size: int | None, n: int, seed: int) -> kv_cache.AllocationResult:
    """One simulation, kept: moving the page size slider re-runs only the paged side."""
    return kv_cache.simulate_allocation(kv_cache.request_trace(n, seed=seed), capacity_tokens, page_size)


def plot_paging(page_size: int = 16, capacity_tokens: int = 32768, n: int = 200, seed: int = 0) -> Figure:
    """Reserved and used cache memory over time: contiguous reservation to the maximum length vs pages."""
    fig = new_figure(10, 3.4, left=0.1, wspace=0.2)
    ax_mem, ax_text = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.8, 1]})
    lines = [f"{n} requests, cache of {capacity_tokens:,} tokens", ""]
    for page, color, name in ((None, ORANGE, "contiguous"), (page_size, BLUE, f"pages of {page_size}")):
        result = _served(capacity_tokens, page, n, seed)
        used = [u for _, u, _ in result.timeline]
        ax_mem.plot(used, color=color, label=f"{name}: tokens stored")
        lines += [
            f"{name}:",
            f"  {100 * result.used_share:5.1f}% of reserved memory used",
            f"  {result.mean_batch:5.1f} sequences at a time",
            f"  {result.steps:5d} steps for the trace",
            f"  {result.preemptions:5d} preemptions",
        ]
    ax_mem.axhline(capacity_tokens, color=GREY, ls="--", label="capacity")
    ax_mem.set(xlabel="decode step", ylabel="tokens in the cache", title="what the cache holds")
    ax_mem.legend(fontsize=8, loc="upper right")
    ax_text.axis("off")
    ax_text.text(0, 0.98, "\n".join(lines), va="top", fontsize=9, family="monospace")
    return fig


def widget_paging() -> None:
    controls = {
        "page_size": slider("SelectionSlider", options=[1, 4, 16, 64, 256, 1024], value=16, description="page size"),
        "capacity_tokens": slider(
            "SelectionSlider", options=[8192, 16384, 32768, 65536], value=32768, description="cache capacity (tokens)"
        ),
    }
    interactive(plot_paging, controls, "Contiguous against paged allocation")


def plot_cache_speed(lengths: list[int], with_cache: list[float], without_cache: list[float]) -> Figure:
    """Measured generation time against length, with and without the cache."""
    fig = new_figure(6, 3.4, left=0.13)
    ax = fig.subplots()
    ax.plot(lengths, without_cache, "o-", color=ORANGE, label="recompute everything (no cache)")
    ax.plot(lengths, with_cache, "o-", color=BLUE, label="KV cache")
    ax.set(xlabel="tokens generated", ylabel="seconds", title="generating with the course model")
    ax.legend(fontsize=8)
    return fig
