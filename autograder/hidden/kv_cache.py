"""Chapter 4's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

from autograder.chapters.kv_cache import bytes_probe, judge_bytes, judge_pages, judge_step, pages_probe, step_probe
from autograder.checks import Check, Requirement


def _random_bytes_probe(rng):
    args = [
        int(rng.integers(2, 96)),
        int(rng.choice([1, 2, 4, 8])),
        int(rng.choice([64, 80, 128])),
        int(rng.integers(100, 40000)),
    ]
    kwargs = {"batch": int(rng.integers(2, 33)), "bytes_per_element": int(rng.choice([1, 4]))}
    return bytes_probe(args, kwargs)(rng)


def _random_pages_probe(rng):
    page = int(rng.choice([8, 16, 32]))
    lengths = [int(x) for x in rng.integers(1, 500, 30)] + [page * 3, page]
    return pages_probe([lengths, page])(rng)


HIDDEN = {
    "kv_cache_bytes": [Check("random", 1, "other sizes, batches and dtypes", _random_bytes_probe, judge_bytes)],
    "attention_step": [Check("large", 1, "a long cache and large scores", step_probe(300, 64, True), judge_step)],
    "pages_needed": [Check("random", 1, "a longer list, with exact multiples", _random_pages_probe, judge_pages)],
}

REQUIREMENTS = {
    "kv_cache_bytes": [
        Requirement(
            "2 x layers x kv heads x head dim x tokens x batch x bytes per element",
            ("llama2_token", "gqa_32k", "random"),
        ),
        Requirement("batch=1 and bytes_per_element=2 by default", ("llama2_token",)),
        Requirement("batch and bytes_per_element given", ("gqa_32k", "random")),
        Requirement("the bytes as a whole number", ("llama2_token", "gqa_32k", "random")),
    ],
    "attention_step": [
        Requirement("caches of shape (t + 1, D): the new row appended at the end", ("small", "empty", "large")),
        Requirement("output (D,): softmax(K q / sqrt(D)) V over all t + 1 positions", ("small", "empty", "large")),
        Requirement("returns (output, cache_k, cache_v)", ("small",)),
        Requirement("an empty cache, t = 0 (edge case)", ("empty",)),
        Requirement("large scores stay finite", ("large",)),
    ],
    "pages_needed": [
        Requirement("each sequence its own pages: ceil(length / page_size), summed", ("example", "random")),
        Requirement("a partly filled page counts whole", ("example", "random")),
        Requirement("exact multiples need no extra page (edge case)", ("example", "random")),
    ],
}
