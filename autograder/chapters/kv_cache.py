"""Chapter 4's exercises: kv_cache_bytes, attention_step (one cached decoding step) and
pages_needed. Each check names the mistakes it can recognise in its hint."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    as_tensor,
    compare_tensors,
    diagnose,
    judge_number,
    judges_value,
)
from course import kv_cache
from course.withheld import withheld

# --- kv_cache_bytes --------------------------------------------------------------------------------


@withheld
def _bytes_numbers(n_layers, n_kv_heads, head_dim, seq_len, batch, element) -> tuple[float, list[tuple[str, float]]]:
    """The cache's bytes, and the common mistakes' numbers with their hints (mistakes that give the
    same number on these inputs share one hint, naming each: the check cannot tell them apart)."""
    one = n_layers * n_kv_heads * head_dim * seq_len * batch * element
    mistakes = [
        ("the factor 2 is missing: the cache holds a key and a value per head", one),
        ("counted bits, not bytes: bytes_per_element is already in bytes", 2 * one * 8),
        ("left out the batch: every sequence keeps its own cache", 2 * one / batch),
        ("left out bytes_per_element", 2 * one / element),
        (
            f"bytes_per_element was taken as 2 whatever it is ({element:g} here): multiply by bytes_per_element",
            4 * one / element,
        ),
        ("left out the number of layers: every layer caches its own keys and values", 2 * one / n_layers),
        ("returned GB (1e9 bytes): return the bytes themselves", 2 * one / 1e9),
        ("returned GiB: return the bytes themselves", 2 * one / 2**30),
        ("returned MiB: return the bytes themselves", 2 * one / 2**20),
    ]
    return 2 * one, _alike_said_together(mistakes, 2 * one)


def _alike_said_together(mistakes: list[tuple[str, float]], expected: float) -> list[tuple[str, float]]:
    """``mistakes`` with those that give the same number (and not ``expected``) merged into one, whose
    hint names each: "one of these, which give the same number here: ...; or ..."."""
    merged: list[tuple[list[str], float]] = []
    for hint, value in mistakes:
        if math.isclose(value, expected, rel_tol=1e-9):
            continue
        same = next((entry for entry in merged if math.isclose(entry[1], value, rel_tol=1e-9)), None)
        if same:
            same[0].append(hint)
        else:
            merged.append(([hint], value))
    together = "one of these, which give the same number here: "
    return [(hints[0] if len(hints) == 1 else together + "; or ".join(hints), value) for hints, value in merged]


@judges_value
def _judge_bytes(probe, got):
    batch = probe["kwargs"].get("batch", 1)
    element = probe["kwargs"].get("bytes_per_element", 2)
    return judge_number(got, *_bytes_numbers(*probe["args"], batch, element), "the cache size in bytes")


def _bytes_probe(fixed=None):
    def make(rng):
        if fixed:
            args, kwargs = fixed
        else:
            args = [
                int(rng.integers(2, 96)),
                int(rng.choice([1, 2, 4, 8])),
                int(rng.choice([64, 80, 128])),
                int(rng.integers(100, 40000)),
            ]
            kwargs = {"batch": int(rng.integers(2, 33)), "bytes_per_element": int(rng.choice([1, 4]))}
        return {"call": "kv_cache_bytes", "args": list(args), "kwargs": dict(kwargs)}

    return make


KV_BYTES = Exercise(
    "kv_cache_bytes",
    ("kv_cache_bytes",),
    [
        Check(
            "llama2_token",
            1,
            "Llama-2-7B, one token in fp16: 524,288 bytes",
            _bytes_probe(([32, 32, 128, 1], {})),
            _judge_bytes,
            visible=True,
        ),
        Check(
            "gqa_32k",
            1,
            "Llama-3-8B (8 kv heads), 32k tokens, batch 4, an fp8 cache (bytes_per_element=1)",
            _bytes_probe(([32, 8, 128, 32768], {"batch": 4, "bytes_per_element": 1})),
            _judge_bytes,
            visible=True,
        ),
        Check("random", 1, "other sizes, batches and dtypes", _bytes_probe(), _judge_bytes),
    ],
    requirements=[
        Requirement(
            "2 x layers x kv heads x head dim x tokens x batch x bytes per element",
            ("llama2_token", "gqa_32k", "random"),
        ),
        Requirement("batch=1 and bytes_per_element=2 by default", ("llama2_token",)),
        Requirement("batch and bytes_per_element given", ("gqa_32k", "random")),
        Requirement("the bytes as a whole number", ("llama2_token", "gqa_32k", "random")),
    ],
)


# --- attention_step ----------------------------------------------------------------------------------


def _step_probe(t, d, large=False):
    def make(rng):
        g = lambda *shape: torch.from_numpy(rng.normal(0, 1, size=shape).astype(np.float32))  # noqa: E731
        q, k, v = g(d), g(d), g(d)
        if large:
            q = q * 40
        return {"call": "attention_step", "args": [q, k, v, g(t, d), g(t, d)]}

    return make


@withheld
def _attend(q, keys, values, scale=True):
    """Single-head attention of ``q`` over ``keys`` and ``values``, with or without the 1 / sqrt(D) scale."""
    scores = keys @ q / (math.sqrt(q.shape[-1]) if scale else 1.0)
    return torch.softmax(scores, dim=0) @ values


@withheld
def _step_reference(q, k, v, cache_k, cache_v) -> dict:
    """The probe's caches after appending (``keys``, ``values``), the output (``expected``), the
    attention ``weights`` and the common mistakes' outputs (``mistakes``, with their hints), in float64."""
    q, k, v, cache_k, cache_v = (a.double() for a in (q, k, v, cache_k, cache_v))
    keys, values = torch.cat([cache_k, k[None]]), torch.cat([cache_v, v[None]])
    mistakes = [
        (
            "the new token did not attend to itself: append k and v before computing the scores",
            _attend(q, cache_k, cache_v),
        ),
        ("the scores were not divided by sqrt(D)", _attend(q, keys, values, scale=False)),
        ("attended to the new token only: the point of the cache is to attend to every earlier token too", v),
        ("the softmax is over the wrong axis or missing", (keys @ q / math.sqrt(q.shape[-1])) @ values),
    ]
    return {
        "keys": keys,
        "values": values,
        "expected": _attend(q, keys, values),
        "weights": torch.softmax(keys @ q / math.sqrt(q.shape[-1]), dim=0),
        "mistakes": mistakes,
    }


@judges_value
def _judge_step(probe, got):
    cache_k = probe["args"][3].double()
    reference = _step_reference(*probe["args"])
    keys, values, weights = reference["keys"], reference["values"], reference["weights"]
    if not isinstance(got, tuple) or len(got) != 3:
        return Verdict(False, f"return a tuple (output, cache_k, cache_v); got {type(got).__name__}")
    out, new_k, new_v = got
    for name, value, expected, other in (("cache_k", new_k, keys, values), ("cache_v", new_v, values, keys)):
        tensor, problem = as_tensor(value, name)
        if problem:
            return Verdict(False, problem)
        same, difference = compare_tensors(tensor, expected, rtol=1e-5, atol=1e-6)
        if not same and compare_tensors(tensor, other, rtol=1e-5, atol=1e-6)[0]:
            return Verdict(False, "cache_k and cache_v were swapped: return (output, cache_k, cache_v)")
        if not same:
            if tuple(tensor.shape) == tuple(cache_k.shape):
                return Verdict(False, f"{name} was not extended: append the new token's row with torch.cat")
            if (
                tuple(tensor.shape) == tuple(expected.shape)
                and compare_tensors(tensor, torch.cat([expected[-1:], expected[:-1]]), rtol=1e-5, atol=1e-6)[0]
            ):
                return Verdict(False, f"{name}: the new row went first; append it at the end (position t)")
            return Verdict(False, f"{name}: {difference}")
    output, problem = as_tensor(out, "the output")
    if problem:
        return Verdict(False, problem)
    expected = reference["expected"]
    if tuple(output.shape) == tuple(weights.shape) != tuple(expected.shape):
        if compare_tensors(output, weights, rtol=1e-4, atol=1e-5)[0]:
            return Verdict(False, "returned the attention weights: multiply them by the values, weights @ cache_v")
    if torch.isnan(output).any() or torch.isinf(output).any():  # the reference is always finite
        difference = compare_tensors(output, expected, rtol=1e-4, atol=1e-5)[1]
        return Verdict(
            False, f"NaN or inf for large scores: torch.softmax is stable, exp(scores) alone is not ({difference})"
        )
    mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in reference["mistakes"]]
    return diagnose(output, expected, mistakes, what="the output", rtol=1e-4, atol=1e-5)


ATTENTION_STEP = Exercise(
    "attention_step",
    ("attention_step",),
    [
        Check("small", 2, "a cache of 5 tokens, head dim 8", _step_probe(5, 8), _judge_step, visible=True),
        Check("empty", 1, "the first token (an empty cache)", _step_probe(0, 16), _judge_step, visible=True),
        Check("large", 1, "a long cache and large scores", _step_probe(300, 64, True), _judge_step),
    ],
    requirements=[
        Requirement("caches of shape (t + 1, D): the new row appended at the end", ("small", "empty", "large")),
        Requirement("output (D,): softmax(K q / sqrt(D)) V over all t + 1 positions", ("small", "empty", "large")),
        Requirement("returns (output, cache_k, cache_v)", ("small",)),
        Requirement("an empty cache, t = 0 (edge case)", ("empty",)),
        Requirement("large scores stay finite", ("large",)),
    ],
)


# --- pages_needed --------------------------------------------------------------------------------------


@withheld
def _pages_numbers(lengths, page) -> tuple[int, list[tuple[str, float]]]:
    """The pages that ``lengths`` occupy, and the common mistakes' numbers with their hints."""
    mistakes = [
        (
            "rounded down: a sequence that fills part of a page still needs the whole page (ceil)",
            sum(n // page for n in lengths),
        ),
        (
            "pooled the sequences: each sequence has pages of its own, so round up per sequence",
            math.ceil(sum(lengths) / page),
        ),
        (
            "added a page to every sequence: use ceil(length / page_size), exact multiples need no extra page",
            sum(n // page + 1 for n in lengths),
        ),
        ("returned tokens, not pages", sum(math.ceil(n / page) * page for n in lengths)),
    ]
    return kv_cache.pages_needed(lengths, page), mistakes


@judges_value
def _judge_pages(probe, got):
    return judge_number(got, *_pages_numbers(*probe["args"]), "the number of pages")


def _pages_probe(fixed=None):
    def make(rng):
        if fixed:
            return {"call": "pages_needed", "args": fixed}
        page = int(rng.choice([8, 16, 32]))
        lengths = [int(x) for x in rng.integers(1, 500, 30)] + [page * 3, page]
        return {"call": "pages_needed", "args": [lengths, page]}

    return make


PAGES = Exercise(
    "pages_needed",
    ("pages_needed",),
    [
        Check(
            "example",
            1,
            "lengths 5, 16, 17 in pages of 16: 4 pages",
            _pages_probe([[5, 16, 17], 16]),
            _judge_pages,
            visible=True,
        ),
        Check("random", 1, "a longer list, with exact multiples", _pages_probe(), _judge_pages),
    ],
    requirements=[
        Requirement("each sequence its own pages: ceil(length / page_size), summed", ("example", "random")),
        Requirement("a partly filled page counts whole", ("example", "random")),
        Requirement("exact multiples need no extra page (edge case)", ("example", "random")),
    ],
)

EXERCISES = [KV_BYTES, ATTENTION_STEP, PAGES]
