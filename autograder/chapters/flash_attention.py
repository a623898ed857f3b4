"""Chapter 5's exercises: online_softmax_update and blockwise_attention, with their visible checks.
Each judge compares with the chapter's answer (``ANSWERS``, its solution cells, or the full
softmax) and names the known mistake it matches (``MISTAKES``, ``autograder/mistakes/flash_attention.py``:
a missing rescale, no running maximum, no 1/sqrt(D), ...), and blockwise_attention is also checked
for what it must not do: form the (n_q, n_k) score matrix, or score a query (or a block of
queries) against all keys at once (a torch dispatch mode records what the learner's function
creates, and whether it was switched off). The hidden checks are ``autograder/hidden/flash_attention.py``'s."""

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
    judges_value,
)
from course import flash_attention, withheld

ANSWERS = withheld.answers("05_flash_attention")
MISTAKES = withheld.module("autograder.mistakes.flash_attention")


def _randn(rng, *shape, scale=1.0):
    return torch.from_numpy((rng.normal(0, 1, size=shape) * scale).astype(np.float32))


def attention_probe(n_q, n_k, d, block, large=False, dtype=torch.float32):
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
    mistakes = lambda: MISTAKES.of_blockwise_attention(q, k, v, block)  # noqa: E731 (asked only when wrong)
    return _match(tensor, expected, mistakes, "the output", k.shape[0], block)


judge_attention = judges_value(_attention_verdict)


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
        return {**attention_probe(n_q, n_k, d, block)(rng), "scenario": largest_intermediate}

    return make


BLOCKWISE = Exercise(
    "blockwise_attention",
    ("blockwise_attention",),
    [
        Check(
            "block16",
            1,
            "64 queries and keys, blocks of 16",
            attention_probe(64, 64, 16, 16),
            judge_attention,
            visible=True,
        ),
        Check(
            "uneven",
            1,
            "blocks of 7 over 50 keys (a short last block)",
            attention_probe(20, 50, 8, 7),
            judge_attention,
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
            attention_probe(16, 40, 16, 8, large=True),
            judge_attention,
            visible=True,
        ),
    ],
    builds_on=("online_softmax_update",),
)


# --- online_softmax_update ---------------------------------------------------------------------------


def update_probe(first: bool, larger: bool):
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


@judges_value
def judge_update(probe, got):
    m, l, o, scores, v = (a.double() for a in probe["args"])
    if not isinstance(got, tuple) or len(got) != 3:
        return Verdict(False, f"return a tuple (m, l, o); got {type(got).__name__}")
    expected = ANSWERS.online_softmax_update(m, l, o, scores, v)
    variants = MISTAKES.of_online_softmax_update(m, l, o, scores, v)
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
        Check("larger", 1, "a block with a larger maximum", update_probe(False, True), judge_update, visible=True),
        Check(
            "first", 1, "the first block (m = -inf, l = o = 0)", update_probe(True, True), judge_update, visible=True
        ),
    ],
)

EXERCISES = [UPDATE, BLOCKWISE]
