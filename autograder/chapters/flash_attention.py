"""Chapter 5's exercises: online_softmax_update and blockwise_attention. Each check names the
mistakes it can recognise in its hint (a missing rescale, no running maximum, no 1/sqrt(D), ...)."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import Check, Exercise, Verdict, as_tensor, compare_tensors, diagnose, judges_value
from course import flash_attention


def _randn(rng, *shape, scale=1.0):
    return torch.from_numpy((rng.normal(0, 1, size=shape) * scale).astype(np.float32))


def _variant(q, k, v, block, rescale=True, subtract_max=True, scale=True, normalise_each=False):
    """Blockwise attention with one thing changed, for naming a learner's mistake."""
    s = 1 / math.sqrt(q.shape[-1]) if scale else 1.0
    m = torch.full((q.shape[0], 1), float("-inf"), dtype=torch.float64)
    l = torch.zeros(q.shape[0], 1, dtype=torch.float64)
    o = torch.zeros(q.shape[0], v.shape[-1], dtype=torch.float64)
    outs = []
    for start in range(0, k.shape[0], block):
        scores = q @ k[start : start + block].T * s
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True)) if subtract_max else torch.zeros_like(m)
        correction = torch.exp(m - m_new) if rescale and subtract_max else torch.ones_like(m)
        correction = torch.nan_to_num(correction, nan=0.0)
        p = torch.exp(scores - m_new)
        l = l * correction + p.sum(dim=-1, keepdim=True)
        o = o * correction + p @ v[start : start + block]
        outs.append(p @ v[start : start + block] / p.sum(dim=-1, keepdim=True))
        m = m_new
    if normalise_each:
        return sum(outs) / len(outs)
    return o / l


def _mistakes(q, k, v, block):
    q, k, v = q.double(), k.double(), v.double()
    return [
        (
            "the running output and normaliser were not rescaled by exp(m_old - m_new) when the maximum grew",
            lambda: _variant(q, k, v, block, rescale=False),
        ),
        ("the scores were not divided by sqrt(D)", lambda: _variant(q, k, v, block, scale=False)),
        (
            "each block was normalised on its own and the blocks averaged: keep one running normaliser l",
            lambda: _variant(q, k, v, block, normalise_each=True),
        ),
        (
            "only the last block counted: carry m, l and o from block to block",
            lambda: flash_attention.naive_attention(
                q, k[-((k.shape[0] - 1) % block + 1) :], v[-((k.shape[0] - 1) % block + 1) :]
            ),
        ),
    ]


def _attention_probe(n_q, n_k, d, block, large=False):
    def make(rng):
        q = _randn(rng, n_q, d, scale=60.0 if large else 1.0)  # scores far past exp()'s float32 range
        return {"call": "blockwise_attention", "args": [q, _randn(rng, n_k, d), _randn(rng, n_k, d), block]}

    return make


def _match(got: torch.Tensor, expected: torch.Tensor, mistakes, what: str) -> Verdict:
    if torch.isnan(got).any() or torch.isinf(got).any():  # the reference is always finite
        difference = compare_tensors(got, expected, rtol=1e-4, atol=1e-5)[1]
        return Verdict(
            False,
            f"{what} has NaN or inf: exp() of large scores overflows; subtract the running "
            f"maximum before exponentiating ({difference})",
        )
    return diagnose(got, expected, mistakes, what=what, rtol=1e-4, atol=1e-5)


@judges_value
def _judge_attention(probe, got):
    q, k, v, block = probe["args"]
    tensor, problem = as_tensor(got, "the attention output")
    if problem:
        return Verdict(False, problem)
    expected = flash_attention.naive_attention(q.double(), k.double(), v.double())
    return _match(tensor, expected, _mistakes(q, k, v, block), "the output")


BLOCKWISE = Exercise(
    "blockwise_attention",
    ("blockwise_attention",),
    [
        Check(
            "blockwise_attention.block16",
            "blockwise_attention",
            2,
            "64 queries and keys, blocks of 16",
            _attention_probe(64, 64, 16, 16),
            _judge_attention,
            visible=True,
        ),
        Check(
            "blockwise_attention.uneven",
            "blockwise_attention",
            1,
            "blocks of 7 over 50 keys (a short last block)",
            _attention_probe(20, 50, 8, 7),
            _judge_attention,
            visible=True,
        ),
        Check(
            "blockwise_attention.block1",
            "blockwise_attention",
            1,
            "blocks of one key",
            _attention_probe(9, 13, 4, 1),
            _judge_attention,
        ),
        Check(
            "blockwise_attention.one_block",
            "blockwise_attention",
            1,
            "one block larger than the keys",
            _attention_probe(5, 30, 8, 64),
            _judge_attention,
        ),
        Check(
            "blockwise_attention.large_scores",
            "blockwise_attention",
            1,
            "large scores (no overflow allowed)",
            _attention_probe(16, 40, 16, 8, large=True),
            _judge_attention,
        ),
    ],
)


# --- online_softmax_update ---------------------------------------------------------------------------


def _update_probe(first: bool, larger: bool):
    """A state after some keys, then a block whose maximum is (or is not) larger than the running one."""

    def make(rng):
        n, d, b = 6, 4, 5
        seen = _randn(rng, n, 7)
        m = torch.full((n, 1), float("-inf")) if first else seen.amax(dim=-1, keepdim=True)
        l = torch.zeros(n, 1) if first else torch.exp(seen - m).sum(dim=-1, keepdim=True)
        o = torch.zeros(n, d) if first else torch.exp(seen - m) @ _randn(rng, 7, d)
        scores = _randn(rng, n, b) + (3.0 if larger else -3.0)
        return {"call": "online_softmax_update", "args": [m, l, o, scores, _randn(rng, b, d)]}

    return make


@judges_value
def _judge_update(probe, got):
    m, l, o, scores, v = (a.double() for a in probe["args"])
    if not isinstance(got, tuple) or len(got) != 3:
        return Verdict(False, f"return a tuple (m, l, o); got {type(got).__name__}")
    expected = flash_attention.online_softmax_update(m, l, o, scores, v)
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    no_rescale = (m_new, l + torch.exp(scores - m_new).sum(-1, keepdim=True), o + torch.exp(scores - m_new) @ v)
    upside_down = torch.nan_to_num(torch.exp(m_new - m), nan=0.0, posinf=0.0)
    flipped = (
        m_new,
        l * upside_down + torch.exp(scores - m_new).sum(-1, keepdim=True),
        o * upside_down + torch.exp(scores - m_new) @ v,
    )
    for index, name in enumerate(("m", "l", "o")):
        tensor, problem = as_tensor(got[index], name)
        if problem:
            return Verdict(False, problem)
        same, difference = compare_tensors(tensor, expected[index], rtol=1e-4, atol=1e-6)
        if same:
            continue
        if torch.isnan(tensor).any():
            return Verdict(
                False,
                f"{name} has NaN: on the first block m is -inf, and exp(-inf - (-inf)) is NaN; "
                f"the correction must be 0 there (torch.exp(m - m_new) with m_new finite)",
            )
        if compare_tensors(tensor, no_rescale[index], rtol=1e-4, atol=1e-6)[0]:
            return Verdict(False, f"{name} was not rescaled by exp(m_old - m_new) ({difference})")
        if compare_tensors(tensor, flipped[index], rtol=1e-4, atol=1e-6)[0]:
            return Verdict(
                False, f"{name}: the correction is upside down; multiply by exp(m_old - m_new) <= 1 ({difference})"
            )
        return Verdict(False, f"{name}: {difference}")
    return Verdict(True)


UPDATE = Exercise(
    "online_softmax_update",
    ("online_softmax_update",),
    [
        Check(
            "online_softmax_update.larger",
            "online_softmax_update",
            1,
            "a block with a larger maximum",
            _update_probe(False, True),
            _judge_update,
            visible=True,
        ),
        Check(
            "online_softmax_update.smaller",
            "online_softmax_update",
            1,
            "a block with a smaller maximum",
            _update_probe(False, False),
            _judge_update,
        ),
        Check(
            "online_softmax_update.first",
            "online_softmax_update",
            1,
            "the first block (m = -inf, l = o = 0)",
            _update_probe(True, True),
            _judge_update,
        ),
    ],
)

EXERCISES = [UPDATE, BLOCKWISE]
