"""Drafts for the capstone, and the greedy loop that verifies their guesses: the draft trained on
the text (chapter 6), the one distilled from the target (chapter 7), or none; each a course model
from ``data/models``, kept in float32.

Not handled: quantized drafts, other kinds of draft (n-gram, prompt lookup: a subclass of
:class:`Draft` would add one), sampling (greedy only, so that the figures are deterministic). The
loop is chapter 6's (``course.speculative_decoding.speculative_generate``), at temperature 0.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from course import checkpoints, speculative_decoding
from course.model import LanguageModel, generate


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


def greedy_speculative(target, draft, prompt: torch.Tensor, k: int, new_tokens: int) -> list[int]:
    """Greedy speculative decoding with a KV cache in each model (chapter 9's ``speculative_greedy``):
    the course's loop at temperature 0 (:func:`course.speculative_decoding.speculative_generate`),
    the prompt (1, T) and ``new_tokens`` new tokens as a list: exactly the target's greedy decoding.
    ``target`` and ``draft`` need only the course model's interface: ``model(tokens, cache)`` and
    ``model.new_cache(1, max_len)``."""
    return speculative_decoding.speculative_generate(target, draft, prompt, k, new_tokens, temperature=0)[0][0].tolist()
