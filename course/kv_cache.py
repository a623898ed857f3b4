"""The KV cache: its size for published models, paged against contiguous allocation, and generation
with and without it, measured.

Bytes per token = 2 (keys and values) x layers x kv heads x head dim x bytes per element. A worked
example: a 7B model with 32 layers of 32 heads of 128 in fp16 keeps 2 * 32 * 32 * 128 * 2 =
524,288 bytes (0.5 MiB) per token, so 32k tokens take 17.2 GB, more than its 13.5 GB of weights.

The chapter's exercises (``kv_cache_bytes``, ``attention_step``, ``pages_needed``) are the
learner's: what here needs one takes it as a parameter, and a notebook cell passes the learner's
function once written, the course's answer before that (:func:`yours`, the chapter's solution
cells through ``course.withheld``).

The paging simulation is a model of a server's cache memory, not a server: one decode step per
tick, requests admitted first come first served, a preempted request starts over. Not handled:
prefix sharing between requests, swapping to CPU memory, chunked prefill.

:func:`cache_timings` measures generation with and without the cache on a real model and
:func:`cache_speed_reading` says what the numbers show, from the numbers.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import torch

from course import prefill_decode, readings, withheld
from course.device import synchronize

CHAPTER = "04_kv_cache"


@dataclass(frozen=True)
class Architecture:
    """The numbers of a published decoder that decide its weights and its KV cache."""

    name: str
    params: float
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int

    @property
    def kind(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else f"GQA ({self.n_heads // self.n_kv_heads} queries per kv head)"


# From the models' published configurations (config.json): layers, heads, kv heads, head dim.
PUBLISHED = {
    "Llama-2-7B": Architecture("Llama-2-7B", 6.74e9, 32, 32, 32, 128),
    "Llama-3-8B": Architecture("Llama-3-8B", 8.03e9, 32, 32, 8, 128),
    "Llama-2-70B": Architecture("Llama-2-70B", 69.0e9, 80, 64, 8, 128),
    "Falcon-7B": Architecture("Falcon-7B", 7.22e9, 32, 71, 1, 64),
}


def cache_bytes(
    arch: Architecture, seq_len: int, batch: int = 1, bytes_per_element: float = 2, *, kv_cache_bytes
) -> int:
    """The cache of ``arch`` for ``batch`` sequences of ``seq_len`` tokens, sized by ``kv_cache_bytes``
    (the chapter's exercise: a notebook's own, or the course's answer)."""
    return kv_cache_bytes(arch.n_layers, arch.n_kv_heads, arch.head_dim, seq_len, batch, bytes_per_element)


def crossover_tokens(
    arch: Architecture, batch: int = 1, bytes_per_element: float = 2, weight_bits: int = 16, *, kv_cache_bytes
) -> int:
    """Total cached tokens (all sequences of the batch) at which the cache outweighs the weights."""
    per_token = cache_bytes(arch, 1, 1, bytes_per_element, kv_cache_bytes=kv_cache_bytes)
    return math.ceil(prefill_decode.weight_bytes(arch.params, weight_bits) / per_token / batch)


def published_rows(kv_cache_bytes) -> list[dict]:
    """Each published model of :data:`PUBLISHED` in fp16: its kind, cache bytes per token and at 32k
    tokens, fp16 weight bytes, and the tokens at which the cache outweighs the weights, sized by
    ``kv_cache_bytes``."""
    return [
        {
            "name": name,
            "kind": arch.kind,
            "per_token": cache_bytes(arch, 1, kv_cache_bytes=kv_cache_bytes),
            "at_32k": cache_bytes(arch, 32768, kv_cache_bytes=kv_cache_bytes),
            "weights": arch.params * 2,
            "crossover": crossover_tokens(arch, kv_cache_bytes=kv_cache_bytes),
        }
        for name, arch in PUBLISHED.items()
    ]


def head_sharing_sizes(config, tokens: int = 512, bytes_per_element: float = 4, *, kv_cache_bytes) -> dict:
    """The cache of ``tokens`` tokens of a model of ``config`` (a ``course.model.ModelConfig``) with as
    many key-value heads as query heads (MHA), as trained (GQA) and one (MQA), sized by
    ``kv_cache_bytes``: name -> (kv heads, bytes)."""
    shared = (("MHA", config.n_heads), ("GQA (as trained)", config.n_kv_heads), ("MQA", 1))
    return {
        name: (heads, kv_cache_bytes(config.n_layers, heads, config.head_dim, tokens, 1, bytes_per_element))
        for name, heads in shared
    }


TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "kv_cache_bytes": (32, 32, 128, 1),
    "pages_needed": ([5, 16, 17], 16),
}


def yours(namespace: dict, name: str, what: str):
    """The notebook's own ``name`` (``kv_cache_bytes`` or ``pages_needed``) once written, the course's
    answer before that, with the line saying whose numbers ``what`` shows
    (:func:`course.withheld.yours_or_course`)."""
    return withheld.yours_or_course(namespace, CHAPTER, name, TRIED_ON[name], what)


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


# --- a server's cache memory under a request trace -------------------------------------------


@dataclass(frozen=True)
class CacheRequest:
    prompt: int
    output: int

    @property
    def length(self) -> int:
        return self.prompt + self.output


def request_trace(n: int = 200, max_len: int = 2048, seed: int = 0) -> list[CacheRequest]:
    """Requests with prompts and outputs of very different lengths (log-uniform), all queued at the start."""
    generator = torch.Generator().manual_seed(seed)
    requests = []
    for _ in range(n):
        prompt = int(math.exp(torch.empty(1).uniform_(math.log(16), math.log(max_len // 2), generator=generator)))
        output = int(math.exp(torch.empty(1).uniform_(math.log(8), math.log(max_len // 2), generator=generator)))
        requests.append(CacheRequest(prompt, output))
    return requests


def admission_pages(trace: list[CacheRequest], page_size: int, pages_needed) -> dict[int, int]:
    """The pages a request of ``trace`` reserves when admitted (its prompt and its first new token), by
    that length, counted by ``pages_needed`` (the chapter's exercise), asked once a length."""
    return {n: pages_needed([n], page_size) for n in sorted({r.prompt + 1 for r in trace})}


@dataclass
class AllocationResult:
    steps: int  # decode steps to serve the whole trace
    mean_batch: float  # sequences decoding together, on average
    used_share: float  # tokens actually stored / cache memory reserved, averaged over steps
    preemptions: int
    timeline: list[tuple[int, int, int]]  # per step: (reserved tokens, used tokens, running sequences)


def simulate_allocation(
    trace: list[CacheRequest], capacity_tokens: int, page_size: int | None, max_len: int = 2048, pages_needed=None
) -> AllocationResult:
    """Serve ``trace`` with a KV cache of ``capacity_tokens`` tokens.

    ``page_size=None``: each request reserves ``max_len`` tokens up front, as systems without
    paging did, since the output length is unknown in advance. Otherwise memory is handed out in
    pages of ``page_size`` tokens as a sequence grows; when a page is needed and none is free, the
    newest running request is preempted (its pages freed, it starts over later). A request's pages
    at admission are counted by ``pages_needed`` (the chapter's exercise), which paging needs.
    """
    if page_size is not None and (page_size < 1 or capacity_tokens < page_size):
        raise ValueError(f"page_size must be between 1 and the capacity ({capacity_tokens}), got {page_size}")
    if page_size is not None and pages_needed is None:
        raise ValueError("paged allocation counts pages with pages_needed: pass it (yours, or the course's)")
    if any(r.length > max_len for r in trace):
        raise ValueError(f"a request is longer than max_len {max_len}")
    if capacity_tokens < max_len:
        raise ValueError(f"capacity {capacity_tokens} tokens cannot hold one request of max_len {max_len}")
    queue = list(trace)
    running: list[list] = []  # [request, tokens stored, tokens reserved]
    reserved_total, used_total, steps, preemptions, timeline = 0, 0, 0, 0, []
    unit = page_size or max_len
    pages = {} if page_size is None else admission_pages(trace, page_size, pages_needed)

    def reservation(tokens: int) -> int:
        return max_len if page_size is None else pages[tokens] * page_size

    while queue or running:
        while queue:  # admit in order while the first waiting request fits
            need = reservation(queue[0].prompt + 1)
            if reserved_total + need > capacity_tokens:
                break
            request = queue.pop(0)
            running.append([request, request.prompt, need])
            reserved_total += need
            used_total += request.prompt
        steps += 1
        index = 0
        while index < len(running):  # one decode step: every running sequence stores one more token
            entry = running[index]
            index += 1
            if page_size is not None and entry[1] + 1 > entry[2]:
                while reserved_total + unit > capacity_tokens and running[-1] is not entry:
                    victim = running.pop()  # the newest: always after this entry, so the loop stays valid
                    reserved_total -= victim[2]
                    used_total -= victim[1]
                    queue.insert(0, victim[0])
                    preemptions += 1
                if reserved_total + unit > capacity_tokens:
                    continue  # it is the newest itself and cannot grow: it waits a step
                entry[2] += unit
                reserved_total += unit
            entry[1] += 1
            used_total += 1
        timeline.append((reserved_total, used_total, len(running)))
        for entry in [e for e in running if e[1] >= e[0].length]:
            running.remove(entry)
            reserved_total -= entry[2]
            used_total -= entry[1]
    used = [u / r for r, u, _ in timeline if r]
    return AllocationResult(
        steps, sum(n for _, _, n in timeline) / len(timeline), sum(used) / len(used), preemptions, timeline
    )


def paging_reading(contiguous: AllocationResult, paged: AllocationResult, page_size: int, within: float = 0.1) -> str:
    """What two :func:`simulate_allocation` runs of one trace show: the share of reserved memory that
    holds tokens with pages of ``page_size`` against contiguous allocation's, and the sequences run
    at a time; "about as much" when the shares are within ``within`` of each other."""
    ratio = paged.used_share / contiguous.used_share
    shares = f"({100 * paged.used_share:.1f}% against {100 * contiguous.used_share:.1f}%)"
    if abs(ratio - 1) <= within:
        said = f"pages of {page_size} use about as much of their memory as contiguous allocation {shares}"
    elif ratio > 1:
        said = f"pages of {page_size} use {ratio:.1f}x contiguous allocation's share of memory {shares}"
    else:
        said = f"pages of {page_size} use less of their memory than contiguous allocation {shares}"
    return f"{said} and run {paged.mean_batch / contiguous.mean_batch:.1f}x the sequences at a time"


# --- generation with and without the cache, measured ------------------------------------------------


def cache_timings(model, prompt: torch.Tensor, lengths: list[int], repeats: int = 3, progress: bool = True) -> dict:
    """Median seconds to generate each of ``lengths`` tokens greedily from ``prompt``, with the KV
    cache and without it (every step reruns the whole sequence).

    Each repeat times every length both ways, alternating, so a burst of other work on the machine
    falls on both sides of a ratio; the medians over repeats are returned as
    ``{"lengths", "with_cache", "without_cache"}`` (seconds per whole generation).
    """
    from tqdm.auto import tqdm

    from course.model import generate

    if repeats < 1 or not lengths:
        raise ValueError(f"need at least one length and one repeat, got {lengths!r} and {repeats!r}")
    device = prompt.device
    generate(model, prompt, 4)  # warm-up
    times = {(n, cached): [] for n in lengths for cached in (True, False)}
    for _ in tqdm(range(repeats), desc="with and without the cache", disable=not progress, leave=False):
        for n in lengths:
            for cached in (True, False):
                synchronize(device)
                started = time.perf_counter()
                generate(model, prompt, n, use_cache=cached)
                synchronize(device)
                times[n, cached].append(time.perf_counter() - started)
    return {
        "lengths": list(lengths),
        "with_cache": [statistics.median(times[n, True]) for n in lengths],
        "without_cache": [statistics.median(times[n, False]) for n in lengths],
    }


def cache_speed_reading(lengths, with_cache, without_cache, levels=(2, 5, 10)) -> str:
    """What :func:`cache_timings` shows: the speed-up at the longest length, from which length on the
    cache is at least 2x, 5x, 10x faster, and how each time grows with the length."""
    speedups = [b / a for a, b in zip(with_cache, without_cache, strict=True)]
    lines = [readings.faster(without_cache[-1], with_cache[-1], "the cache", "recomputing", within=0.05)]
    lines[0] += f" at {lengths[-1]} tokens"
    held = [(level, readings.holds_from(lengths, [s >= level for s in speedups])) for level in levels]
    held = [(level, start) for level, start in held if start is not None]
    if held:
        lines.append(
            "at least "
            + readings.listing([f"{level}x faster from {start} tokens on" for level, start in held])
            + f" (of the lengths {readings.listing(lengths)})"
        )
    else:
        lines.append(f"not yet 2x faster at any of the lengths {readings.listing(lengths)}")
    if len(lengths) > 1:
        grow = lengths[-1] / lengths[0]
        lines.append(
            f"from {lengths[0]} to {lengths[-1]} tokens ({grow:.0f}x the length) the time grew "
            f"{with_cache[-1] / with_cache[0]:.1f}x with the cache and {without_cache[-1] / without_cache[0]:.1f}x "
            "without"
        )
    return "; ".join(lines)
