"""Chapter 4's exercises: kv_cache_bytes, attention_step (one cached decoding step) and
pages_needed, with their visible checks. Each judge compares with the chapter's answer
(``ANSWERS``, its solution cells) and names the known mistake it matches (``MISTAKES``,
``autograder/mistakes/kv_cache.py``); the hidden checks are ``autograder/hidden/kv_cache.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Verdict,
    as_tensor,
    compare_tensors,
    diagnose,
    judge_number,
    judges_value,
)
from course import withheld

ANSWERS = withheld.answers("04_kv_cache")
MISTAKES = withheld.module("autograder.mistakes.kv_cache")

# --- kv_cache_bytes --------------------------------------------------------------------------------


@judges_value
def judge_bytes(probe, got):
    expected = ANSWERS.kv_cache_bytes(*probe["args"], **probe["kwargs"])
    mistakes = MISTAKES.of_kv_cache_bytes(*probe["args"], **probe["kwargs"])
    return judge_number(got, expected, mistakes, "the cache size in bytes")


def bytes_probe(args, kwargs):
    def make(rng):
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
            bytes_probe([32, 32, 128, 1], {}),
            judge_bytes,
            visible=True,
        ),
        Check(
            "gqa_32k",
            1,
            "Llama-3-8B (8 kv heads), 32k tokens, batch 4, an fp8 cache (bytes_per_element=1)",
            bytes_probe([32, 8, 128, 32768], {"batch": 4, "bytes_per_element": 1}),
            judge_bytes,
            visible=True,
        ),
    ],
)


# --- attention_step ----------------------------------------------------------------------------------


def step_probe(t, d, large=False):
    def make(rng):
        g = lambda *shape: torch.from_numpy(rng.normal(0, 1, size=shape).astype(np.float32))  # noqa: E731
        q, k, v = g(d), g(d), g(d)
        if large:
            q = q * 40
        return {"call": "attention_step", "args": [q, k, v, g(t, d), g(t, d)]}

    return make


@judges_value
def judge_step(probe, got):
    cache_k = probe["args"][3].double()
    answer, keys, values = ANSWERS.attention_step(*(a.double() for a in probe["args"]))
    known = MISTAKES.of_attention_step(*probe["args"])
    weights = known["weights"]
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
    if tuple(output.shape) == tuple(weights.shape) != tuple(answer.shape):
        if compare_tensors(output, weights, rtol=1e-4, atol=1e-5)[0]:
            return Verdict(False, "returned the attention weights: multiply them by the values, weights @ cache_v")
    if torch.isnan(output).any() or torch.isinf(output).any():  # the reference is always finite
        difference = compare_tensors(output, answer, rtol=1e-4, atol=1e-5)[1]
        return Verdict(
            False, f"NaN or inf for large scores: torch.softmax is stable, exp(scores) alone is not ({difference})"
        )
    mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in known["mistakes"]]
    return diagnose(output, answer, mistakes, what="the output", rtol=1e-4, atol=1e-5)


ATTENTION_STEP = Exercise(
    "attention_step",
    ("attention_step",),
    [
        Check("small", 2, "a cache of 5 tokens, head dim 8", step_probe(5, 8), judge_step, visible=True),
        Check("empty", 1, "the first token (an empty cache)", step_probe(0, 16), judge_step, visible=True),
    ],
)


# --- pages_needed --------------------------------------------------------------------------------------


@judges_value
def judge_pages(probe, got):
    expected = ANSWERS.pages_needed(*probe["args"])
    return judge_number(got, expected, MISTAKES.of_pages_needed(*probe["args"]), "the number of pages")


def pages_probe(fixed):
    def make(rng):
        return {"call": "pages_needed", "args": fixed}

    return make


PAGES = Exercise(
    "pages_needed",
    ("pages_needed",),
    [
        Check(
            "example",
            1,
            "lengths 5, 16, 17 in pages of 16: 4 pages",
            pages_probe([[5, 16, 17], 16]),
            judge_pages,
            visible=True,
        ),
    ],
)

EXERCISES = [KV_BYTES, ATTENTION_STEP, PAGES]
