"""Chapter 4's measurements for ``make bench``: the course models' loss, decoding with and without the
KV cache, a prompt token against a generated one."""

from __future__ import annotations

import torch

from course import checkpoints, corpus, evaluation
from course.kv_cache import cache_speed_reading, cache_timings

CACHE_LENGTHS = [64, 128, 256, 512]  # generated tokens, with and without the KV cache


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter on ``device`` (printed; ratios returned for
    ``data/performance.json``): the course models' held-out loss, then decoding with and without the
    cache at each of :data:`CACHE_LENGTHS`, and a prompt token's cost against a generated one's.
    (``bound``, the memory bandwidth, is not used here.)"""
    print("\n== chapter 4: the course model, decoding with and without the KV cache (median of 3 repeats) ==")
    for name in ("target", "draft"):
        model = checkpoints.load(name, device)
        loss = evaluation.text_loss(model, corpus.tokens("validation").to(device))
        print(
            f"{name}: {model.num_parameters():,} parameters, {loss:.3f} nats/byte on all held-out plays "
            f"(perplexity {evaluation.perplexity(loss):.2f})"
        )
    target = checkpoints.load("target", device, max_seq_len=1024)
    measured = cache_timings(target, corpus.encode("\n")[None].to(device), CACHE_LENGTHS, repeats=3)
    for length, a, b in zip(CACHE_LENGTHS, measured["with_cache"], measured["without_cache"], strict=True):
        print(
            f"decode, {length:3d} generated tokens: cache {a:6.2f} s, no cache {b:6.2f} s: {b / a:5.1f}x "
            "(goal 10x at 512)"
        )
    print(cache_speed_reading(**measured))
    prefill = evaluation.prefill_seconds_per_token(target, 1, 256)
    step = evaluation.decode_step_seconds(target, 1)
    print(
        f"prefill {1e3 * prefill:.3f} ms per prompt token, decode {1e3 * step:.2f} ms per generated token: "
        f"a generated token costs {step / prefill:.0f}x a prompt token"
    )
    speedups = [b / a for a, b in zip(measured["with_cache"], measured["without_cache"], strict=True)]
    return {f"cache_speedup_{n}": x for n, x in zip(CACHE_LENGTHS, speedups, strict=True)}
