"""Chapter 5's exercises: online_softmax_update and blockwise_attention. Each check names the
mistakes it can recognise in its hint (a missing rescale, no running maximum, no 1/sqrt(D), ...),
and blockwise_attention is also checked for what it must not do: form the (n_q, n_k) score matrix,
or score a query (or a block of queries) against all keys at once (a torch dispatch mode records
what the learner's function creates, and whether it was switched off)."""

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
    judges_value,
)
from course import flash_attention
from course.withheld import withheld


def _randn(rng, *shape, scale=1.0):
    return torch.from_numpy((rng.normal(0, 1, size=shape) * scale).astype(np.float32))


@withheld
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
    whole = k.shape[0] // block * block  # keys in full blocks
    skipped_last = [  # only where a full block comes before a shorter one
        (
            f"the last, shorter block was skipped (only the first {whole} of {k.shape[0]} keys were used): "
            "range(0, n_k, block) visits it, and slicing k[start:start + block] stops at the end by itself",
            lambda: flash_attention.naive_attention(q, k[:whole], v[:whole]),
        )
    ]
    return [
        (
            "the output was not divided by the normaliser l at the end: return o / l",
            lambda: _variant(q, k, v, block) * _variant_l(q, k, block),
        ),
        *(skipped_last if 0 < whole < k.shape[0] else []),
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


@withheld
def _variant_l(q, k, block):
    """The final running normaliser l (n_q, 1) of exact blockwise attention."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    m = scores.amax(dim=-1, keepdim=True)
    return torch.exp(scores - m).sum(dim=-1, keepdim=True)


def _attention_probe(n_q, n_k, d, block, large=False, dtype=torch.float32):
    def make(rng):
        q = _randn(rng, n_q, d, scale=60.0 if large else 1.0)  # scores far past exp()'s float32 range
        q, k, v = (t.to(dtype) for t in (q, _randn(rng, n_k, d), _randn(rng, n_k, d)))
        return {"call": "blockwise_attention", "args": [q, k, v, block]}

    return make


def _match(got: torch.Tensor, expected: torch.Tensor, mistakes, what: str, keys: int, block: int) -> Verdict:
    if torch.isnan(got).all() and block > keys:
        return Verdict(
            False,
            f"{what} is all NaN, 0 / 0: no block of keys was visited. With block {block} larger than the "
            f"{keys} keys, the one block is all of them: loop with range(0, n_k, block)",
        )
    if torch.isnan(got).any() or torch.isinf(got).any():  # the reference is always finite
        difference = compare_tensors(got, expected, rtol=1e-4, atol=1e-5)[1]
        return Verdict(
            False,
            f"{what} has NaN or inf: exp() of large scores overflows; subtract the running "
            f"maximum before exponentiating ({difference})",
        )
    return diagnose(got, expected, mistakes, what=what, rtol=1e-4, atol=1e-5)


def _attention_verdict(probe, got):
    q, k, v, block = probe["args"]
    tensor, problem = as_tensor(got, "the attention output")
    if problem:
        return Verdict(False, problem)
    expected = flash_attention.naive_attention(q.double(), k.double(), v.double())
    return _match(tensor, expected, _mistakes(q, k, v, block), "the output", k.shape[0], block)


_judge_attention = judges_value(_attention_verdict)


def largest_intermediate(function, q, k, v, block) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): call ``function(q, k, v, block)``
    while a torch dispatch mode records what every torch operation creates (views of existing
    tensors do not count): the largest tensor's size, shape and operation, and the distinct shapes
    with a dimension of ``n_k`` (a softmax over all keys at once leaves one). Report those and the
    output, and whether the recorder was switched off during the call (``_disable_current_modes``
    and the like pop it from torch's stack of modes: a pop is recorded, by whatever name it was
    called). Not seen: arrays made by numpy or plain Python, which torch never dispatches."""
    import torch
    import torch.utils._python_dispatch as dispatch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    n_k = k.shape[0]

    class Recorder(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):  # nothing is compiled here: spare the seconds torch._dynamo takes to import
            return False

        def __init__(self):
            super().__init__()
            self.size, self.shape, self.op = 0, [], ""
            self.across_keys: dict[tuple, str] = {}
            self.watching, self.popped = False, False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not getattr(func, "is_view", False):
                for tensor in tree_leaves(out):
                    if not isinstance(tensor, torch.Tensor):
                        continue
                    if tensor.numel() > self.size:
                        self.size, self.shape = tensor.numel(), list(tensor.shape)
                        self.op = func.overloadpacket.__name__
                    if n_k in tensor.shape and len(self.across_keys) < 20:
                        self.across_keys.setdefault(tuple(tensor.shape), func.overloadpacket.__name__)
            return out

    mode = Recorder()
    pops = {"_pop_mode": dispatch._pop_mode, "_pop_torch_dispatch_stack": dispatch._pop_torch_dispatch_stack}

    def watched(original):
        def pop(*args, **kwargs):
            mode.popped = mode.popped or mode.watching
            return original(*args, **kwargs)

        return pop

    for name, original in pops.items():
        setattr(dispatch, name, watched(original))
    try:
        with mode:
            mode.watching = True
            try:
                output = function(q, k, v, block)
            finally:
                mode.watching = False
    finally:
        for name, original in pops.items():
            setattr(dispatch, name, original)
    return {
        "output": output,
        "largest": mode.size,
        "shape": mode.shape,
        "op": mode.op,
        "across_keys": [[list(shape), op] for shape, op in mode.across_keys.items()],
        "popped": mode.popped,
    }


def _recorded(probe, found) -> Verdict:
    """The output judged, and the recorder known to have watched the whole call."""
    if not isinstance(found, dict) or "output" not in found:
        return Verdict(False, f"blockwise_attention could not be measured: {found!r}"[:200])
    verdict = _attention_verdict(probe, found["output"])
    if verdict.passed and found.get("popped"):
        return Verdict(
            False,
            "the output is right, but your function switched off torch's dispatch modes "
            "(torch.utils._python_dispatch._disable_current_modes or a pop of the mode stack), which hides "
            "what it computes from the check: compute with ordinary torch operations",
        )
    return verdict


@judges_value
def _judge_no_score_matrix(probe, found):
    """Correct output, and no tensor as large as the (n_q, n_k) score matrix on the way."""
    q, k = probe["args"][:2]
    verdict = _recorded(probe, found)
    if not verdict.passed:
        return verdict
    n_q, n_k = q.shape[0], k.shape[0]
    if found["largest"] >= n_q * n_k:
        shape = " x ".join(str(n) for n in found["shape"])
        return Verdict(
            False,
            f"the output is right, but your function created a {shape} tensor (torch's {found['op']}): as large as "
            f"the whole ({n_q}, {n_k}) score matrix, which blockwise attention never forms. Compute the scores of "
            "one block of keys at a time, q @ k[start:start + block].T, and fold each block into m, l and o",
        )
    return Verdict(True)


@judges_value
def _judge_key_blocks(probe, found):
    """Correct output, and no tensor spanning all n_k keys other than a copy of k or v: scores over
    all keys for one query, or for a block of queries, are a softmax that did not visit keys in blocks."""
    q, k, _, block = probe["args"]
    verdict = _recorded(probe, found)
    if not verdict.passed:
        return verdict
    n_k, d = k.shape[0], q.shape[1]
    for shape, op in found["across_keys"]:
        if sorted(shape) == sorted([n_k, d]):  # k or v, copied, converted or transposed
            continue
        rows = [n for n in shape if n != n_k]
        queries = "one query" if all(n == 1 for n in rows) else f"a block of {max(rows)} queries"
        return Verdict(
            False,
            f"the output is right, but your function made a {' x '.join(map(str, shape))} tensor (torch's {op}): "
            f"the scores of {queries} against all {n_k} keys at once, an ordinary softmax over every key. "
            f"Saving memory by looping over queries is not the exercise: visit {block} keys at a time, "
            "q @ k[start:start + block].T, and fold each block into m, l and o with the online softmax",
        )
    return Verdict(True)


def _structure_probe(n_q, n_k, d, block):
    def make(rng):
        return {**_attention_probe(n_q, n_k, d, block)(rng), "scenario": largest_intermediate}

    return make


BLOCKWISE = Exercise(
    "blockwise_attention",
    ("blockwise_attention",),
    [
        Check(
            "block16",
            1,
            "64 queries and keys, blocks of 16",
            _attention_probe(64, 64, 16, 16),
            _judge_attention,
            visible=True,
        ),
        Check(
            "uneven",
            1,
            "blocks of 7 over 50 keys (a short last block)",
            _attention_probe(20, 50, 8, 7),
            _judge_attention,
            visible=True,
        ),
        Check(
            "no_score_matrix",
            1,
            "never forms the (n_q, n_k) score matrix: 48 queries, 256 keys, blocks of 16",
            _structure_probe(48, 256, 8, 16),
            _judge_no_score_matrix,
            visible=True,
        ),
        Check(
            "key_blocks",
            1,
            "visits the keys a block at a time: no scores of a query against all 97 keys (40 queries, blocks of 16)",
            _structure_probe(40, 97, 8, 16),
            _judge_key_blocks,
            visible=True,
        ),
        Check(
            "large_scores",
            1,
            "large scores (no overflow allowed)",
            _attention_probe(16, 40, 16, 8, large=True),
            _judge_attention,
            visible=True,
        ),
        Check("block1", 1, "blocks of one key", _attention_probe(9, 13, 4, 1), _judge_attention),
        Check(
            "one_block",
            1,
            "one block larger than the keys, float64 inputs",
            _attention_probe(5, 30, 8, 64, dtype=torch.float64),
            _judge_attention,
        ),
    ],
    requirements=[
        Requirement(
            "equals ordinary softmax attention, (n_q, D), for every block size",
            ("block16", "uneven", "block1", "one_block"),
        ),
        Requirement("visits `block` keys at a time; the last block may be shorter", ("uneven", "block1", "key_blocks")),
        Requirement("a block larger than the keys (edge case); float64 inputs work too", ("one_block",)),
        Requirement(
            "never forms the full (n_q, n_k) score matrix (largest torch intermediate recorded, "
            "the recorder not switched off)",
            ("no_score_matrix", "key_blocks"),
        ),
        Requirement("survives large scores (no overflow)", ("large_scores",)),
    ],
    builds_on=("online_softmax_update",),
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
        scores = _randn(rng, n, b)
        if first:
            scores = scores + 3.0
        else:  # in every row the block's maximum lies 2 above (or below) the running one, whatever the draw
            scores = scores - scores.amax(dim=-1, keepdim=True) + m + (2.0 if larger else -2.0)
        return {"call": "online_softmax_update", "args": [m, l, o, scores, _randn(rng, b, d)]}

    return make


@withheld
def _update_variants(m, l, o, scores, v) -> list[tuple[str, tuple]]:
    """(m, l, o) as the common wrong updates give them, each with the hint that names it."""
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    p = torch.exp(scores - m_new)
    upside_down = torch.nan_to_num(torch.exp(m_new - m), nan=0.0, posinf=0.0)
    right = flash_attention.online_softmax_update(m, l, o, scores, v)
    twice = flash_attention.online_softmax_update(m, l, o, scores / math.sqrt(v.shape[-1]), v)
    return [
        ("{name} was not rescaled by exp(m_old - m_new)", (m_new, l + p.sum(-1, keepdim=True), o + p @ v)),
        (
            "{name}: the correction is upside down; multiply by exp(m_old - m_new) <= 1",
            (m_new, l * upside_down + p.sum(-1, keepdim=True), o * upside_down + p @ v),
        ),
        (
            "{name}: the running maximum was not updated; m_new = max(m, the block's largest score)",
            (m, *flash_attention.online_softmax_update(m, l, o, scores, v)[1:]),
        ),
        (
            "{name}: o was divided by l; keep o unnormalised and divide once, after the last block",
            (right[0], right[1], right[2] / right[1]),
        ),
        (
            "{name}: the scores were divided by sqrt(D) again; they arrive already scaled",
            twice,
        ),
    ]


@judges_value
def _judge_update(probe, got):
    m, l, o, scores, v = (a.double() for a in probe["args"])
    if not isinstance(got, tuple) or len(got) != 3:
        return Verdict(False, f"return a tuple (m, l, o); got {type(got).__name__}")
    expected = flash_attention.online_softmax_update(m, l, o, scores, v)
    variants = _update_variants(m, l, o, scores, v)
    for index, name in enumerate(("m", "l", "o")):
        tensor, problem = as_tensor(got[index], name)
        if problem:
            return Verdict(False, problem)
        mistakes = [(hint.format(name=name), lambda wrong=variant[index]: wrong) for hint, variant in variants]
        verdict = diagnose(tensor, expected[index], mistakes, what=name, rtol=1e-4, atol=1e-6)
        if verdict.passed:
            continue
        if torch.isnan(tensor).any():
            return Verdict(
                False,
                f"{name} has NaN: on the first block m is -inf, and exp(-inf - (-inf)) is NaN; "
                f"the correction must be 0 there (torch.exp(m - m_new) with m_new finite)",
            )
        return verdict
    return Verdict(True)


UPDATE = Exercise(
    "online_softmax_update",
    ("online_softmax_update",),
    [
        Check("larger", 1, "a block with a larger maximum", _update_probe(False, True), _judge_update, visible=True),
        Check(
            "first", 1, "the first block (m = -inf, l = o = 0)", _update_probe(True, True), _judge_update, visible=True
        ),
        Check("smaller", 1, "a block with a smaller maximum", _update_probe(False, False), _judge_update),
    ],
    requirements=[
        Requirement("returns the new (m, l, o): (n_q, 1), (n_q, 1), (n_q, D)", ("larger", "first", "smaller")),
        Requirement(
            "m_new = max(m, the block's largest score); l and o rescaled by exp(m - m_new)", ("larger", "smaller")
        ),
        Requirement("the scores arrive already scaled by 1/sqrt(D)", ("larger",)),
        Requirement("before the first block (m = -inf, l = o = 0): no NaN", ("first",)),
    ],
)

EXERCISES = [UPDATE, BLOCKWISE]
