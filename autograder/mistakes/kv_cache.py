"""Chapter 4's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/kv_cache.py`` name a mistake by it), and wrong answers written out."""

from __future__ import annotations

import math

import torch

from autograder.mistakes import Planted

# --- kv_cache_bytes --------------------------------------------------------------------------------


def of_kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2) -> list[tuple[str, float]]:
    """The common mistakes' numbers with their hints (mistakes that give the same number on these
    inputs share one hint, naming each: the check cannot tell them apart); none that gives the answer."""
    element = bytes_per_element
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
    return _alike_said_together(mistakes, 2 * one)


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


# --- attention_step ----------------------------------------------------------------------------------


def _attend(q, keys, values, scale=True):
    """Single-head attention of ``q`` over ``keys`` and ``values``, with or without the 1 / sqrt(D) scale."""
    scores = keys @ q / (math.sqrt(q.shape[-1]) if scale else 1.0)
    return torch.softmax(scores, dim=0) @ values


def of_attention_step(q, k, v, cache_k, cache_v) -> dict:
    """In float64: the attention ``weights`` over the caches after appending (a learner who returns
    them is told so), and the common mistakes' outputs with their hints (``mistakes``)."""
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
    return {"weights": torch.softmax(keys @ q / math.sqrt(q.shape[-1]), dim=0), "mistakes": mistakes}


# --- pages_needed --------------------------------------------------------------------------------------


def of_pages_needed(lengths, page) -> list[tuple[str, float]]:
    """The common mistakes' page counts, with their hints."""
    return [
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


# --- wrong answers written out -----------------------------------------------------------------------

BYTES = "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):\n    return "
ALL_BYTES = {"kv_cache_bytes.llama2_token", "kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"}
STEP = """
def attention_step(q, k, v, cache_k, cache_v):
    cache_k = torch.cat([cache_k, k[None]], dim=0)
    cache_v = torch.cat([cache_v, v[None]], dim=0)
    weights = torch.softmax(cache_k @ q / math.sqrt(q.shape[-1]), dim=0)
    return {returned}
"""
ALL_STEPS = {"attention_step.small", "attention_step.empty", "attention_step.large"}

PLANTED = {  # graded end to end
    "kv_no_factor_2": Planted(
        "kv_cache_bytes",
        BYTES + "n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element\n",
        ALL_BYTES,
        "factor 2",
    ),
}

JUDGED = {  # judged in the tests' process
    "bytes_in_gb": Planted(
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element / 1e9\n",
        ALL_BYTES,
        "returned GB",
    ),
    "bytes_without_batch": Planted(
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element\n",
        {"kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "left out the batch",
    ),
    "bytes_per_element_taken_as_2": Planted(  # an fp16 cache written in: the factor 2 is there, the dtype's is not
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch * 2\n",
        {"kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "bytes_per_element was taken as 2",
    ),
    "bytes_without_bytes_per_element": Planted(  # at the default 2 bytes, the same number as without the factor 2
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch\n",
        {"kv_cache_bytes.llama2_token", "kv_cache_bytes.random"},
        "left out bytes_per_element",
    ),
    "step_returns_the_weights": Planted(
        "attention_step", STEP.format(returned="weights, cache_k, cache_v"), ALL_STEPS, "attention weights"
    ),
    "step_caches_swapped": Planted(
        "attention_step", STEP.format(returned="weights @ cache_v, cache_v, cache_k"), ALL_STEPS, "swapped"
    ),
    "step_new_row_first": Planted(
        "attention_step",
        STEP.format(returned="weights @ cache_v, cache_k, cache_v").replace(
            "torch.cat([cache_k, k[None]], dim=0)", "torch.cat([k[None], cache_k], dim=0)"
        ),
        {"attention_step.small", "attention_step.large"},
        "the new row went first",
    ),
    "pages_pooled": Planted(
        "pages_needed",
        "def pages_needed(lengths, page_size):\n    return math.ceil(sum(lengths) / page_size)\n",
        {"pages_needed.example", "pages_needed.random"},
        "pooled the sequences",
    ),
}
