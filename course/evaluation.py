"""Measure a language model: loss and perplexity on a text, and how fast it prefills and decodes.

Speeds are medians of repeats after a warm-up, with the device synchronised (``course.timing``).
Not handled: padding batches of different lengths, memory measurement.
"""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.nn.functional as F

from course import readings, timing
from course.device import synchronize
from course.model import LanguageModel


@torch.no_grad()
def text_loss(
    model: LanguageModel, tokens: torch.Tensor, seq_len: int = 256, batch: int = 16, max_windows: int | None = None
) -> float:
    """Mean next-byte cross-entropy in nats over non-overlapping ``seq_len`` windows of ``tokens``.

    ``max_windows`` evaluates evenly spaced windows only: a quick estimate of the whole text.
    """
    if tokens.dim() != 1 or len(tokens) < seq_len + 1:
        raise ValueError(f"need a 1-D text of at least {seq_len + 1} tokens, got shape {tuple(tokens.shape)}")
    device = model.embed.weight.device
    n = (len(tokens) - 1) // seq_len
    starts = torch.arange(n) * seq_len
    if max_windows is not None and max_windows < n:
        starts = starts[torch.linspace(0, n - 1, max_windows).long()]
    total, count = 0.0, 0
    for first in range(0, len(starts), batch):
        chosen = starts[first : first + batch]
        windows = torch.stack([tokens[s : s + seq_len + 1] for s in chosen.tolist()]).to(device)  # (b, T + 1)
        logits = model(windows[:, :-1])  # (b, T, vocab)
        total += F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1), reduction="sum"
        ).item()
        count += windows[:, 1:].numel()
    return total / count


def perplexity(loss_nats: float) -> float:
    """exp(loss): the effective number of bytes the model hesitates between."""
    return math.exp(loss_nats)


def _prompt(model: LanguageModel, batch: int, length: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(32, 127, (batch, length), generator=generator).to(model.embed.weight.device)


@torch.no_grad()
def prefill_seconds_per_token(model: LanguageModel, batch: int = 1, prompt_len: int = 256, repeats: int = 5) -> float:
    """Seconds per prompt token of one forward pass over a (batch, prompt_len) prompt."""
    prompt = _prompt(model, batch, prompt_len)
    seconds = timing.median_seconds(lambda: model(prompt), model.embed.weight.device, warmup=1, repeats=repeats)
    return seconds / (batch * prompt_len)


@torch.no_grad()
def decode_step_seconds(model: LanguageModel, batch: int = 1, context: int = 8, steps: int = 4) -> float:
    """Median seconds of one cached decode step for ``batch`` sequences after a ``context``-token prefill.

    One step produces ``batch`` tokens; this is the quantity the roofline predicts.
    """
    device = model.embed.weight.device
    cache = model.new_cache(batch, context + steps + 1)
    model(_prompt(model, batch, context), cache)
    token = _prompt(model, batch, 1)
    times = []
    for step in range(steps + 1):  # the first step warms up
        synchronize(device)
        start = time.perf_counter()
        model(token, cache)
        synchronize(device)
        if step:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_throughput(model: LanguageModel, batches, steps: int = 4) -> dict[int, float]:
    """Tokens per second (the whole batch counted) of a cached decode step, for each batch size."""
    return {batch: batch / decode_step_seconds(model, batch, steps=steps) for batch in batches}


def scaling_efficiency(throughput: dict[int, float]) -> dict[int, float]:
    """Each batch's throughput as a share of perfect scaling from the smallest batch."""
    first = min(throughput)
    return {batch: rate * first / (batch * throughput[first]) for batch, rate in throughput.items()}


@torch.no_grad()
def linear_row_cost(model: LanguageModel, rows=(1, 2, 4, 8), repeats: int = 9) -> dict[int, float]:
    """Seconds of ``x @ W.T`` with the model's largest weight matrix for ``rows`` rows of activations
    (a decode step's product at that batch), each relative to one row.

    The roofline expects 2 rows to cost what 1 costs (the weights are read once either way); on many
    CPUs torch multiplies one row with a matrix-vector kernel and several with a general matrix
    kernel that is slower at this shape.
    """
    weight = max((p for p in model.parameters() if p.dim() == 2), key=lambda p: p.numel()).detach()
    device = weight.device
    seconds = {}
    for n in rows:
        x = torch.randn(n, weight.shape[1], generator=torch.Generator().manual_seed(n)).to(device, weight.dtype)
        seconds[n] = timing.median_seconds(lambda x=x: F.linear(x, weight), device, warmup=2, repeats=repeats)
    return {n: t / seconds[rows[0]] for n, t in seconds.items()}


def describe_row_cost(row_cost: dict[int, float]) -> str:
    """:func:`linear_row_cost`'s numbers as one printed line."""
    times = ", ".join(f"{n} row{'s' if n > 1 else ''} {cost:.2f}x" for n, cost in row_cost.items())
    return f"one product with the model's largest weight matrix: {times} the time of 1 row"


def decode_batch_reading(throughput: dict[int, float], row_cost: dict[int, float]) -> str:
    """What a decode-throughput measurement says: the best batch, the batches slower than batch 1, and
    whether the cost of multiplying more rows (:func:`linear_row_cost`) explains them."""
    first = min(throughput)
    best = max(throughput, key=throughput.get)
    lines = [
        f"the most tokens per second came at batch {best}: {throughput[best] / throughput[first]:.1f}x batch {first}"
    ]
    slower = [b for b in sorted(throughput) if b > first and throughput[b] < throughput[first]]
    if slower:
        lines.append(f"batch {readings.listing(slower)} decoded fewer tokens per second than batch {first}")
        two = row_cost.get(2)
        if two is not None and two >= 1.5:
            lines.append(
                f"why: here a product with 2 rows of activations takes {two:.1f}x as long as with 1 row, where "
                "the roofline expects the same time; torch multiplies a single row with a matrix-vector kernel "
                "that streams the weights fast, and several rows with a general matrix kernel that is slower "
                "at this shape, until the batch is large enough to pay for it"
            )
        elif two is not None:
            lines.append(
                f"a product with 2 rows takes only {two:.1f}x as long as 1 row here, so the kernels do not explain "
                "it: other work on the machine during the measurement is the likely cause (run the cell again)"
            )
    else:
        lines.append(f"every batch decoded at least as many tokens per second as batch {first}")
    return "; ".join(lines)


def scaling_bend(throughput: dict[int, float], share: float = 0.5) -> int | None:
    """The first batch size whose scaling efficiency falls below ``share``: where the curve bends."""
    return next((b for b, e in sorted(scaling_efficiency(throughput).items()) if e < share), None)
