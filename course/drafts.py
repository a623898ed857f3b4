"""Drafts for the capstone, and the greedy loop that verifies their guesses: the draft trained on
the text (chapter 6), the one distilled from the target (chapter 7), or none; each a course model
from ``data/models``, kept in float32.

Not handled: quantized drafts, other kinds of draft (n-gram, prompt lookup: a subclass of
:class:`Draft` would add one), sampling (greedy only, so that the figures are deterministic).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from course import checkpoints, speculative_decoding
from course.model import LanguageModel, generate
from course.withheld import withheld


@dataclass(frozen=True)
class Draft:
    """A way to propose tokens for the target to verify: a course model from ``data/models``, or
    none. A new kind of draft (n-gram, prompt lookup) is a subclass that overrides :meth:`load`
    and :meth:`run`, added to :data:`DRAFTS`."""

    name: str
    short: str  # for a legend
    about: str
    checkpoint: str | None = None

    def load(self, device: torch.device | str = "cpu") -> nn.Module | None:
        return checkpoints.load(self.checkpoint, device) if self.checkpoint else None

    def run(self, target: LanguageModel, drafter, prompt: torch.Tensor, k: int, new_tokens: int) -> dict:
        """Greedy generation of ``new_tokens`` after ``prompt`` (1, T): ``{"tokens", "target_calls"}``."""
        if drafter is None:
            return {"tokens": generate(target, prompt, new_tokens), "target_calls": new_tokens}
        tokens, rounds = speculative_decoding.speculative_generate(
            target, drafter, prompt, k, new_tokens, temperature=0
        )
        return {"tokens": tokens, "target_calls": len(rounds)}


DRAFTS = {
    draft.name: draft
    for draft in (
        Draft("none", "no draft", "no draft: the target decodes alone"),
        Draft("draft", "draft trained on the text", "the small model trained on the text (chapter 6)", "draft"),
        Draft("distilled", "distilled draft", "the small model distilled from the target (chapter 7)", "distilled"),
    )
}


@functools.cache
def draft_model(name: str) -> nn.Module | None:
    """The draft ``name`` of :data:`DRAFTS` on the CPU, loaded once (None for no draft)."""
    return DRAFTS[name].load("cpu")


@withheld
@torch.no_grad()
def greedy_speculative(
    target,
    draft,
    prompt: torch.Tensor,
    k: int,
    new_tokens: int,
    roll_back_target: bool = True,
    kept_extra: int = 0,
    roll_back_draft: bool = True,
) -> list[int]:
    """Greedy speculative decoding with a KV cache in each model: the draft proposes ``k`` tokens
    one at a time from its cache, the target scores them all in one call from its cache, the
    longest prefix equal to the target's own greedy choices is kept, then the target's token after
    it. Both caches are rolled back to what was kept. Returns the prompt (1, T) and ``new_tokens``
    new tokens as a list: exactly the target's greedy decoding.

    ``target`` and ``draft`` have the course model's interface: ``model(tokens, cache)`` and
    ``model.new_cache(1, max_len)``, whose ``length`` counts the positions cached. The grader's
    planted mistakes are this loop with one part changed: ``roll_back_target`` False leaves the
    target's cache as the call left it after a rejection (it overflows, a ValueError);
    ``kept_extra`` 1 keeps one position too many (the target's own token counted as cached before
    it was fed); ``roll_back_draft`` False leaves the draft's cache past the tokens kept (it is fed
    nothing next round: an error). Not handled: sampling (chapter 6's rule at temperature above 0), batches of
    several sequences.
    """
    tokens = prompt[0].tolist()
    goal = len(tokens) + new_tokens
    target_cache, draft_cache = target.new_cache(1, goal + k + 1), draft.new_cache(1, goal + k + 1)
    while len(tokens) < goal:
        n, proposed = len(tokens), []
        fresh = tokens[draft_cache.length :]  # what the draft has not seen (at least the last token)
        for _ in range(k):
            logits = draft(torch.tensor([fresh], device=prompt.device), draft_cache)[0, -1]
            proposed.append(int(logits.argmax()))
            fresh = proposed[-1:]
        feed = tokens[target_cache.length :] + proposed
        choices = target(torch.tensor([feed], device=prompt.device), target_cache)[0, -(k + 1) :].argmax(-1).tolist()
        accepted = 0
        while accepted < k and proposed[accepted] == choices[accepted]:
            accepted += 1
        tokens += proposed[:accepted] + [choices[accepted]]
        if roll_back_target:
            target_cache.length = n + accepted + kept_extra  # the target's token after them is fed next round
        if roll_back_draft:
            draft_cache.length = min(draft_cache.length, n + accepted)
    return tokens[:goal]
