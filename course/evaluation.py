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

from course import timing
from course.device import synchronize
from course.model import LanguageModel, generate


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


def bits_per_byte(loss_nats: float) -> float:
    return loss_nats / math.log(2)


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


def scaling_bend(throughput: dict[int, float], share: float = 0.5) -> int | None:
    """The first batch size whose scaling efficiency falls below ``share``: where the curve bends."""
    return next((b for b, e in sorted(scaling_efficiency(throughput).items()) if e < share), None)


@torch.no_grad()
def decode_tokens_per_second(
    model: LanguageModel,
    batch: int = 1,
    new_tokens: int = 128,
    prompt_len: int = 8,
    use_cache: bool = True,
    repeats: int = 3,
) -> float:
    """Generated tokens per second (all sequences of the batch counted), greedy, after the prompt."""
    prompt = _prompt(model, batch, prompt_len)
    device = model.embed.weight.device
    total = timing.median_seconds(
        lambda: generate(model, prompt, new_tokens, use_cache=use_cache), device, warmup=1, repeats=repeats
    )
    prefill = timing.median_seconds(lambda: model(prompt), device, warmup=1, repeats=repeats)
    return batch * new_tokens / max(total - prefill, 1e-9)
