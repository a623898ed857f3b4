"""Speculative decoding: a small draft proposes, the target verifies, the output is the target's.

The rule (Leviathan et al., 2211.17192; Chen et al., 2302.01318): draw x from the draft's q,
accept it with probability min(1, p(x) / q(x)), and on rejection draw from max(0, p - q),
normalised. Every token is then distributed exactly as the target's p. A worked example:
p = (0.6, 0.4), q = (0.9, 0.1): alpha = min(.6,.9) + min(.4,.1) = 0.7, and with k = 4 drafted
tokens each target call yields (1 - 0.7**5) / 0.3 = 2.77 tokens on average.

The chapter's exercises (``acceptance_rate``, ``speculative_token``, ``expected_tokens_per_call``,
``speculative_speedup``, ``ngram_draft``) are the learner's: what here needs one takes it as a
parameter, and a notebook cell passes the learner's function once written, the course's answer
before that (:func:`yours`, the chapter's solution cells through ``course.withheld``).

Four drafts plug into one loop: a small language model, an n-gram table over bytes and prompt
lookup (:class:`PromptLookupDraft`), which copies what followed the last few bytes earlier in the
text. The last two cost almost nothing next to a target step; prompt lookup, and the n-gram table at
temperature 0, are deterministic: their q puts all its mass on the proposed token. The loop
(chapter 9's ``speculative_greedy`` generalised), the model draft and the n-gram table (chapter 6's
``ngram_draft`` generalised) are the course's answers, ``course/answers/speculative_decoding.py``:
:func:`speculative_generate`, :func:`greedy_run`, :func:`table_proposals` and
:func:`drafts_measured` call them across the line between the copies (in the learners' copy, which
leaves them out, their recorded calls: the chapters' own runs, the drafts named by
:data:`COURSE_DRAFTS`).

Not handled: batches of more than one sequence, top-k or top-p sampling (temperature only),
tree-shaped drafts, vocabularies larger than 256 tokens in prompt lookup unless it is given one.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from course import readings, withheld

CHAPTER = "06_speculative_decoding"
COURSE = withheld.module("course.answers.speculative_decoding")

TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "expected_tokens_per_call": (0.5, 4),
    "speculative_speedup": (0.8, 4, 0.05),
}


def yours(namespace: dict, name: str, what: str):
    """The notebook's own ``name`` (``expected_tokens_per_call`` or ``speculative_speedup``) once
    written, the course's answer before that, with the line saying whose numbers ``what`` shows
    (:func:`course.withheld.yours_or_course`)."""
    return withheld.yours_or_course(namespace, CHAPTER, name, TRIED_ON[name], what)


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


# --- the formula -------------------------------------------------------------------------------------


def speedups(alphas: list[float], draft_lengths: list[int], costs: list[float], speculative_speedup) -> list:
    """``speculative_speedup(alpha, k, cost)`` (the chapter's exercise) at every cost, alpha and draft
    length, as nested lists ``[cost][alpha][k]``: what a curve or a map draws."""
    return [[[speculative_speedup(alpha, k, cost) for k in draft_lengths] for alpha in alphas] for cost in costs]


# --- what rounds of the loop add up to ----------------------------------------------------------------

Round = tuple[int, int]  # one target call: (tokens the draft proposed, how many of them were accepted)


def round_counts(rounds: list[Round], k: int) -> dict:
    """What rounds of :func:`speculative_generate` add up to: ``target_calls``, ``draft_calls`` (tokens
    proposed), and for each drafted position how often a proposal there was ``proposed`` to the rule
    (verified: the positions up to the first rejection) and ``accepted``."""
    accepted, verified = [0] * k, [0] * k
    for m, a in rounds:
        for i in range(min(a + 1, m)):
            verified[i] += 1
            accepted[i] += i < a
    return {
        "target_calls": len(rounds),
        "draft_calls": sum(m for m, _ in rounds),
        "accepted": accepted,
        "proposed": verified,
    }


def summarise(rounds: list[Round], tokens_per_call=None) -> dict:
    """Acceptance rate, tokens per target call, and the formula's tokens per call at that rate, over the
    rounds of runs of :func:`speculative_generate`.

    alpha is accepted / verified proposals. The formula (``tokens_per_call(alpha, k)``, chapter 6's
    ``expected_tokens_per_call``; None leaves it out) is averaged over the rounds, each with the
    number of tokens its draft proposed (a lookup draft sometimes proposes fewer than k, or none).
    """
    verified = sum(min(a + 1, m) for m, a in rounds)
    alpha = sum(a for _, a in rounds) / verified if verified else 0.0
    per_call = sum(a + 1 for _, a in rounds) / len(rounds)
    formula = sum(tokens_per_call(alpha, m) for m, _ in rounds) / len(rounds) if tokens_per_call else None
    drafted = sum(m for m, _ in rounds) / len(rounds)
    return {"alpha": alpha, "tokens_per_call": per_call, "formula": formula, "drafted_per_call": drafted}


def with_formula(results: dict[str, dict], tokens_per_call) -> dict[str, dict]:
    """``results`` of :func:`measure_drafts` with the formula's numbers by ``tokens_per_call(alpha,
    k)`` (chapter 6's ``expected_tokens_per_call``): ``formula``, averaged over the rounds with the
    tokens each proposed (as :func:`summarise`), and ``formula_speedup``."""
    out = {}
    for name, r in results.items():
        formula = sum(tokens_per_call(r["alpha"], m) for m in r["drafted"]) / len(r["drafted"])
        out[name] = {**r, "formula": formula, "formula_speedup": formula / (1 + r["cost"] * r["drafted_per_call"])}
    return out


def pair_reading(results: dict[str, dict], name: str, base_name: str, words: dict[str, str] | None = None) -> str:
    """Why draft ``name`` is faster or slower than ``base_name`` (keys of :func:`measure_drafts`'
    results), by chapter 6's formula at each draft's own alpha and c: its speed-up over the other's
    is the ratio of their tokens per call (what the acceptance buys) times the inverse ratio of a
    round's cost, 1 + c x drafted tokens (what the cost takes). The reading says which of the two
    counts for more, and whether the clock (the repeats' paired ratios) agrees. ``words``: how to
    name each draft."""
    words = words or {}
    a, b = results[name], results[base_name]
    said_a, said_b = words.get(name, name), words.get(base_name, base_name)
    tokens = a["formula"] / b["formula"]  # tokens per call at each alpha
    round_a, round_b = (1 + r["cost"] * r["drafted_per_call"] for r in (a, b))  # target steps per round
    cost = round_b / round_a
    if (tokens > 1) == (cost > 1):
        decided = f"both favour {said_a if tokens > 1 else said_b}"
    else:
        decided = f"the {'acceptance' if abs(np.log(tokens)) > abs(np.log(cost)) else 'cost'} counts for more"
    modelled = tokens * cost
    paired = [x / y for x, y in zip(a.get("speedups", [a["speedup"]]), b.get("speedups", [b["speedup"]]), strict=True)]
    if min(paired) > 1 or max(paired) < 1:
        agrees = (min(paired) > 1) == (modelled > 1)
        clock = (
            "the clock agrees"
            if agrees
            else "the clock says the other way round: what the formula leaves out (a verifying call dearer "
            "than one step, the clock's noise) decided it"
        )
    else:
        clock = "the clock cannot tell them apart"
    return (
        f"by chapter 6's formula, {said_a}'s acceptance ({a['alpha']:.2f} against {b['alpha']:.2f}) gives it "
        f"{tokens:.2f}x the tokens per call and its cost (c = {a['cost']:.2f} against {b['cost']:.2f}: a round of "
        f"1 + c k = {round_a:.2f} target steps against {round_b:.2f}) {cost:.2f}x the rounds per second, "
        f"{modelled:.2f}x in all, in which {decided}; measured {statistics.median(paired):.2f}x: {clock}"
    )


def drafts_reading(results: dict[str, dict], goal: float = 2.0) -> str:
    """What :func:`measure_drafts` shows: how each draft's tokens per call compare with the formula,
    which draft was fastest and whether it reached ``goal``, and what held the others back."""
    lines = []
    for name, r in results.items():
        if r["formula"] is not None:
            lines.append(
                f"{name}: {r['tokens_per_call']:.2f} tokens per call, "
                + readings.versus(r["tokens_per_call"], r["formula"], f"the formula's {r['formula']:.2f}")
            )
    best = max(results, key=lambda name: results[name]["speedup"])
    top = results[best]
    verdict = "reaching" if top["speedup"] >= goal else "short of"
    lines.append(f"fastest: the {best}, {top['speedup']:.2f}x the target alone, {verdict} {goal:g}x")
    for name, r in results.items():
        ratios = r.get("speedups", [r["speedup"]])
        if min(ratios) <= 1:  # not faster in every repeat: slower, or within the noise
            lines.append(readings.against_one(ratios, f"the {name}", "the target alone"))
        if r["cost"] * r["drafted_per_call"] > 0.5:
            lines.append(
                f"the {name} spends {r['cost'] * r['drafted_per_call']:.2f} target steps drafting per call "
                f"(c = {r['cost']:.2f}), which eats much of what its alpha {r['alpha']:.2f} wins"
            )
        if r["drafted_per_call"] < 0.5 * r["k"]:
            lines.append(
                f"the {name} found something to propose for only {r['drafted_per_call']:.1f} of the "
                f"{r['k']} positions per call on average"
            )
    slow = [name for name, r in results.items() if r["verify"] > 1.25]
    if slow:
        costs = readings.listing([f"{results[name]['verify']:.2f}" for name in slow])
        lines.append(
            f"a verifying call of the target costs {costs} one-token steps for the {readings.listing(slow)} "
            "(the formula assumes 1)"
        )
    return ";\n".join(lines)


# --- the drafts without a model -----------------------------------------------------------------------


class ByteDraft:
    """What the drafts without a model share: nothing to roll back, no position limit, bytes."""

    max_seq_len = float("inf")
    vocab_size = 256

    def start(self, total: int, device=None) -> None:
        pass

    def keep(self, length: int) -> None:
        pass


def one_hot(token: int, vocab: int) -> torch.Tensor:
    """The q of a deterministic proposal: all the draft's mass on the proposed token."""
    q = torch.zeros(vocab, dtype=torch.float64)
    q[token] = 1.0
    return q


class PromptLookupDraft(ByteDraft):
    """Prompt lookup: find the last ``longest`` tokens (then fewer, down to ``shortest``) earlier in
    the text so far, and propose what followed their most recent occurrence; q is one-hot.

    No table and no model: it pays when the text repeats itself (code, quotations, a summary of a
    given document, a model that loops). With "to be or not to be" so far, the last five bytes
    "to be" occurred at the start, followed by " or ", which it proposes for k = 4. It proposes
    nothing when no match is found, and the round is then an ordinary target step. Tokens are
    bytes by default; give ``vocab_size`` for another tokenizer's ids (transformers' prompt lookup
    is ``longest=2, shortest=1``).
    """

    name = "prompt lookup"

    def __init__(self, longest: int = 8, shortest: int = 3, vocab_size: int = 256):
        if not 1 <= shortest <= longest:
            raise ValueError(f"need 1 <= shortest <= longest, got shortest {shortest}, longest {longest}")
        self.longest, self.shortest, self.vocab_size = longest, shortest, vocab_size

    def continuation(self, tokens: list[int], k: int) -> list[int]:
        """What followed the most recent earlier occurrence of the longest suffix found, up to k tokens."""
        text = bytes(tokens) if max(tokens, default=0) < 256 else tokens  # bytes: their own fast search
        for n in range(min(self.longest, len(text) - 1), self.shortest - 1, -1):
            at = _last_occurrence(text, n, len(text) - 1)  # an earlier occurrence, not the end itself
            if at >= 0:
                return list(text[at + n : at + n + k])
        return []

    def propose(self, tokens: list[int], k: int, temperature: float, generator: torch.Generator):
        proposed = self.continuation(tokens, k)
        return proposed, [one_hot(x, self.vocab_size) for x in proposed]


def _last_occurrence(text: bytes | list[int], n: int, end: int) -> int:
    """Where the last occurrence of ``text``'s last ``n`` tokens within ``text[:end]`` starts, or -1
    (bytes' own search for bytes, a scan from the end for a list of ids)."""
    pattern = text[-n:]
    if isinstance(text, bytes):
        return text.rfind(pattern, 0, end)
    return next((start for start in range(end - n, -1, -1) if text[start : start + n] == pattern), -1)


# --- the loop and the chapters' runs, across the line between the copies ------------------------------


def speculative_generate(target, draft, prompt: torch.Tensor, k: int, max_new_tokens: int, *args, **kwargs):
    """The course's loop (``course/answers/speculative_decoding.py``), then ``temperature`` (1.0),
    ``generator`` and ``rule``: ``draft`` proposes up to ``k`` tokens per round and ``target``
    verifies them in one call, with chapter 6's rule at ``temperature`` (``rule``: a notebook's
    ``speculative_token``; None: the course's). Returns the tokens (1, T + new) and the rounds, one
    ``(proposed, accepted)`` per target call. At temperature 0 the tokens are exactly the target's
    greedy output. The learners' copy, which leaves the loop out, has no recorded call of it with
    models: the chapters' runs below answer there."""
    return COURSE.speculative_generate(target, draft, prompt, k, max_new_tokens, *args, **kwargs)


COURSE_DRAFTS = ("draft model", "distilled draft", "n-gram table", "prompt lookup")


def greedy_run(draft: str, prompt: list[int], k: int, new_tokens: int) -> tuple[list[int], list[list[int]]]:
    """:func:`speculative_generate` at temperature 0 with the course's target and its draft ``draft``
    (:data:`COURSE_DRAFTS`), on the fastest device, from the tokens ``prompt``: the tokens (the
    prompt and ``new_tokens`` more) and the rounds, each ``[proposed, accepted]``."""
    return COURSE.greedy_run(draft, list(prompt), k, new_tokens)


def table_proposals(context: list[int], k: int) -> list[int]:
    """What the course's n-gram table over the training plays proposes after ``context`` at
    temperature 0: up to ``k`` tokens."""
    return COURSE.table_proposals(list(context), k)


def drafts_measured(
    names,
    starts,
    prompt_length: int,
    k: int,
    new_tokens: int,
    temperature: float,
    repeats: int = 3,
    rule=None,
    tokens_per_call=None,
    formula: bool = False,
) -> dict[str, dict]:
    """What chapters 6 and 7 measure: the course's loop with its drafts ``names``
    (:data:`COURSE_DRAFTS`) against its target alone, from the held-out prompts of ``prompt_length``
    tokens at ``starts``, on this machine (each result's ``machine``), with ``rule`` verifying the
    sampled runs (chapter 6's ``speculative_token``; None: the course's) and ``tokens_per_call``
    (chapter 6's ``expected_tokens_per_call``) or, with ``formula``, the course's formula giving the
    formula's numbers (:func:`with_formula`; neither: None).

    In the learners' copy, which holds neither the loop nor these drafts, the numbers are those
    recorded when the copy was made, on the machine that made it, with the course's rule: ``rule``
    is not used there (and while the copy records, so that it records the course's)."""
    args = (list(names), list(starts), prompt_length, k, new_tokens, float(temperature), repeats, formula)
    if rule is None or withheld.in_learners_copy() or withheld.is_recording():
        try:
            results = COURSE.drafts_measurement(*args)
        except withheld.NotRecorded:
            raise ValueError(
                "this copy of the course holds the drafts' measurements at the chapter's own sizes only (the loop "
                "that makes them is withheld): run the chapter with its default parameters"
            ) from None
    else:
        results = COURSE.drafts_measurement(*args, rule=rule)
    return with_formula(results, tokens_per_call) if tokens_per_call else results


def copy_note() -> str:
    """What a cell of chapter 6 or 7 says where its loop's numbers are recorded (the learners' copy),
    or "" where the loop runs."""
    if not withheld.in_learners_copy():
        return ""
    return (
        "The course's loop and its model and n-gram drafts are held back in this copy of the course (chapter 9 asks "
        "you to write the loop, and this chapter the n-gram draft): these numbers are the ones they gave when the "
        "copy was made, on the machine named below, the sampled runs verified by the course's rule (your own "
        "functions do not change them here)."
    )
