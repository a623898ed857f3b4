"""Chapter 6's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

import torch

from autograder.chapters.speculative_decoding import (
    alpha_probe,
    judge_alpha,
    judge_ngram,
    judge_sampling,
    judge_speedup,
    judge_tokens,
    sampling_probe,
    speedup_probe,
    tokens_probe,
)
from autograder.checks import Check, Requirement
from autograder.mistakes.speculative_decoding import NOT_GROWN, TIES, ngram_variant


def _ngram_case(rng, alphabet=4, length=300):
    text = torch.tensor(rng.integers(0, alphabet, length), dtype=torch.long)
    n = int(rng.integers(1, 4))
    start = int(rng.integers(0, length - n - 3))
    context = [int(t) for t in rng.integers(0, alphabet, 3)] + text[start : start + n].tolist()
    return text, context, n


def ngram_probe(kind):
    """A random case where the context not grown shows, and is named; for "tie", one where each wrong
    tie-break shows, differently, and so does the context not grown."""

    def make(rng):
        for _ in range(200):
            text, context, n = _ngram_case(rng, alphabet=3 if kind == "tie" else 4, length=60 if kind == "tie" else 300)
            probe = {"call": "ngram_draft", "args": [text, context, n, 6]}
            not_grown = ngram_variant(text, context, n, 6, grow=False)
            named = NOT_GROWN in judge_ngram.__wrapped__(probe, not_grown).hint
            named = named and len(set(ngram_variant(text, context, n, 6))) > 1  # zeros of its length are wrong
            if kind == "tie":
                outputs = [ngram_variant(text, context, n, 6, tie=rule) for rule in ("smallest", *TIES)]
                named = named and len({tuple(o) for o in outputs}) == len(outputs)
            if named:
                break
        return probe

    return make


HIDDEN = {
    "acceptance_rate": [Check("random", 1, "a random pair over 50 tokens", alpha_probe(), judge_alpha)],
    "expected_tokens_per_call": [Check("random", 1, "other alpha and k", tokens_probe, judge_tokens)],
    "speculative_token": [
        Check(
            "random",
            2,
            "20,000 draws, another pair of distributions",
            sampling_probe(20000, fixed=False),
            judge_sampling,
        ),
    ],
    "speculative_speedup": [Check("random", 1, "other values", speedup_probe(), judge_speedup)],
    "ngram_draft": [
        Check("random", 1, "a random text over 4 tokens", ngram_probe("random"), judge_ngram),
        Check("tie", 1, "continuations that tie", ngram_probe("tie"), judge_ngram),
    ],
}

REQUIREMENTS = {
    "acceptance_rate": [
        Requirement("alpha = sum over tokens of min(p, q)", ("example", "random")),
        Requirement("returned as a Python float", ("example",)),
    ],
    "expected_tokens_per_call": [
        Requirement("(1 - alpha^(k+1)) / (1 - alpha)", ("example", "random")),
        Requirement("alpha = 1 allowed: k + 1 (edge case)", ("alpha1",)),
    ],
    "speculative_token": [
        Requirement("accept the draft's token with probability min(1, p(x) / q(x))", ("distribution", "random")),
        Requirement(
            "on rejection, draw from max(0, p - q) normalised: the tokens follow p", ("distribution", "random")
        ),
        Requirement("accepted is True exactly when the draft's token was kept", ("distribution",)),
        Requirement("returns (token, accepted): an int and a bool", ("contract",)),
        Requirement("every random draw uses `generator` (reproducible)", ("contract",)),
        Requirement(
            "the proposal is the first draw, torch.multinomial(draft, 1, generator=generator), before torch.rand",
            ("contract",),
        ),
    ],
    "speculative_speedup": [
        Requirement("(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))", ("paper", "random")),
    ],
    "ngram_draft": [
        Requirement(
            "each proposal: the token that most often follows the context's last n tokens in text",
            ("example", "random"),
        ),
        Requirement("on a tie, the smallest token", ("tie",)),
        Requirement("each proposal joins the context before the next lookup", ("example", "random")),
        Requirement(
            "stops when the last n tokens are never followed by a token, returning the proposals so far (maybe none); "
            "no back-off to a shorter context",
            ("stop",),
        ),
        Requirement("a list of at most k ints", ("example", "random", "tie", "stop")),
    ],
}
