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


def gqa_probe(rng):
    """Llama-3-8B's shape with a context and a batch drawn afresh (a graded notebook gets its own)."""
    return bytes_probe(
        [32, 8, 128, int(rng.integers(1000, 33000))], {"batch": int(rng.integers(2, 9)), "bytes_per_element": 1}
    )(rng)


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
            "Llama-3-8B's shape (8 kv heads), thousands of tokens, a batch of several, an fp8 cache "
            "(bytes_per_element=1)",
            gqa_probe,
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


def _step_verdict(probe, got):
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


judge_step = judges_value(_step_verdict)


def decode_from_empty(function, q, k, v):
    """The scenario (run in the sandbox, see checks.scenario_source): decode ``len(q)`` tokens
    from an empty cache, each step given the caches the step before returned; report every step's
    result, stopping after one whose caches are not (t + 1, D) tensors (the judge names it)."""
    import torch

    cache_k, cache_v = k[:0], v[:0]
    steps = []
    for t in range(q.shape[0]):
        got = function(q[t], k[t], v[t], cache_k, cache_v)
        steps.append(got)
        grown = isinstance(got, tuple) and len(got) == 3 and all(isinstance(x, torch.Tensor) for x in got[1:])
        if not grown or tuple(got[1].shape) != (t + 1, k.shape[1]) or tuple(got[2].shape) != (t + 1, k.shape[1]):
            break
        cache_k, cache_v = got[1], got[2]
    return steps


def from_empty_probe(n, d):
    def make(rng):
        g = lambda *shape: torch.from_numpy(rng.normal(0, 1, size=shape).astype(np.float32))  # noqa: E731
        return {"call": "attention_step", "args": [g(n, d), g(n, d), g(n, d)], "scenario": decode_from_empty}

    return make


@judges_value
def judge_from_empty(probe, steps):
    """Each step judged as one cached step on the caches of the tokens before it: the first on an
    empty cache, where the output is v itself, then on the caches the learner's steps built."""
    q, k, v = probe["args"]
    if not isinstance(steps, list) or not steps:
        return Verdict(False, f"attention_step could not be run step by step: {steps!r}"[:200])
    for t, got in enumerate(steps):
        verdict = _step_verdict({"args": [q[t], k[t], v[t], k[:t], v[:t]]}, got)
        if not verdict.passed:
            where = "the first token (an empty cache)" if t == 0 else f"step {t + 1}, on the caches your steps built"
            return Verdict(False, f"{where}: {verdict.hint}")
    return Verdict(True)


ATTENTION_STEP = Exercise(
    "attention_step",
    ("attention_step",),
    [
        Check("small", 2, "a cache of 5 tokens, head dim 8", step_probe(5, 8), judge_step, visible=True),
        Check(
            "empty",
            1,
            "the first token (an empty cache), then 3 more steps on the caches it returns",
            from_empty_probe(4, 16),
            judge_from_empty,
            visible=True,
        ),
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


def few_pages_probe(rng):
    """Four lengths drawn afresh (a graded notebook gets its own), one a multiple of the page."""
    lengths = [int(n) for n in rng.integers(1, 70, 3)] + [16 * int(rng.integers(1, 4))]
    return pages_probe([[lengths[i] for i in rng.permutation(4)], 16])(rng)


PAGES = Exercise(
    "pages_needed",
    ("pages_needed",),
    [
        Check(
            "example",
            1,
            "a few sequences in pages of 16, one filling its pages exactly",
            few_pages_probe,
            judge_pages,
            visible=True,
        ),
    ],
)

EXERCISES = [KV_BYTES, ATTENTION_STEP, PAGES]
