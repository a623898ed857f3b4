"""Chapter 5's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/flash_attention.py`` name a mistake by it), and wrong answers written out."""

from __future__ import annotations

import math

import torch

from autograder.mistakes import Planted
from course import flash_attention, withheld

SOLUTION = withheld.answers("05_flash_attention")

# --- online_softmax_update ---------------------------------------------------------------------------


def of_online_softmax_update(m, l, o, scores, v) -> list[tuple[str, tuple]]:
    """(m, l, o) as the common wrong updates give them, each with the hint that names it ("{name}"
    stands for the value compared: m, l or o)."""
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    p = torch.exp(scores - m_new)
    upside_down = torch.nan_to_num(torch.exp(m_new - m), nan=0.0, posinf=0.0)
    right = SOLUTION.online_softmax_update(m, l, o, scores, v)
    twice = SOLUTION.online_softmax_update(m, l, o, scores / math.sqrt(v.shape[-1]), v)
    return [
        ("{name} was not rescaled by exp(m_old - m_new)", (m_new, l + p.sum(-1, keepdim=True), o + p @ v)),
        (
            "{name}: the correction is upside down; multiply by exp(m_old - m_new) <= 1",
            (m_new, l * upside_down + p.sum(-1, keepdim=True), o * upside_down + p @ v),
        ),
        (
            "{name}: the running maximum was not updated; m_new = max(m, the block's largest score)",
            (m, *right[1:]),
        ),
        (
            "{name}: o was divided by l; keep o unnormalised and divide once, after the last block",
            (right[0], right[1], right[2] / right[1]),
        ),
        ("{name}: the scores were divided by sqrt(D) again; they arrive already scaled", twice),
    ]


# --- blockwise_attention -----------------------------------------------------------------------------


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


def _variant_l(q, k, block):
    """The final running normaliser l (n_q, 1) of exact blockwise attention."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    m = scores.amax(dim=-1, keepdim=True)
    return torch.exp(scores - m).sum(dim=-1, keepdim=True)


def of_blockwise_attention(q, k, v, block) -> list[tuple[str, torch.Tensor]]:
    """The common mistakes' outputs on these inputs, in float64, with their hints (a mistake that
    cannot be computed on them is left out)."""
    q, k, v = q.double(), k.double(), v.double()
    whole = k.shape[0] // block * block  # keys in full blocks
    skipped_last = [  # only where a full block comes before a shorter one
        (
            f"the last, shorter block was skipped (only the first {whole} of {k.shape[0]} keys were used): "
            "range(0, n_k, block) visits it, and slicing k[start:start + block] stops at the end by itself",
            lambda: flash_attention.naive_attention(q, k[:whole], v[:whole]),
        )
    ]
    mistakes = [
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
    computed = []
    for hint, make in mistakes:
        try:
            computed.append((hint, make()))
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue
    return computed


# --- wrong answers written out -----------------------------------------------------------------------

BLOCKWISE = """
def online_softmax_update(m, l, o, scores, v):
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    correction = {correction}
    p = torch.exp(scores - {shift})
    return m_new, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v

def blockwise_attention(q, k, v, block):
    m = torch.full((q.shape[0], 1), float("-inf"))
    l = torch.zeros(q.shape[0], 1)
    o = torch.zeros(q.shape[0], v.shape[-1])
    for start in range(0, k.shape[0], block):
        scores = q @ k[start:start + block].T / math.sqrt(q.shape[-1])
        m, l, o = online_softmax_update(m, l, o, scores, v[start:start + block])
    return o / l
"""
PLANTED = {  # graded end to end; blockwise_attention calls the learner's own online_softmax_update
    "flash_no_rescale": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="m_new"),
        {"online_softmax_update.larger", "blockwise_attention.block16"},
        "rescaled",
        calls_it={"blockwise_attention"},
    ),
    "flash_overflow": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="0"),
        {"blockwise_attention.large_scores"},
        "overflows",
        calls_it={"blockwise_attention"},
    ),
    "flash_says_which_helper_is_wrong": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="m_new"),
        {"blockwise_attention.block16", "blockwise_attention.uneven"},
        "calls your online_softmax_update, which fails its own checks",
        calls_it={"blockwise_attention"},
    ),
    "flash_full_score_matrix": Planted(  # the case: right numbers, the exercise's point missed
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix"},
        "as large as the whole",
    ),
    "flash_hides_from_the_recorder": Planted(  # right numbers, the full matrix computed out of the recorder's sight
        "blockwise_attention",
        "from torch.utils._python_dispatch import _disable_current_modes\n\n"
        "def blockwise_attention(q, k, v, block):\n"
        "    with _disable_current_modes():\n"
        "        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix", "blockwise_attention.key_blocks"},
        "switched off torch's dispatch modes",
    ),
    "flash_query_blocks": Planted(  # saves memory, but an ordinary softmax over all keys per block of queries
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    rows = [torch.softmax(q[s:s + block] @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n"
        "            for s in range(0, q.shape[0], block)]\n"
        "    return torch.cat(rows)\n",
        {"blockwise_attention.key_blocks"},
        "a block of 16 queries against all 97 keys",
    ),
}

UPDATE = """
def online_softmax_update(m, l, o, scores, v):
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    correction = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return {returned}
"""
RIGHT_UPDATE = UPDATE.format(returned="m_new, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v")
LOOP = """
def blockwise_attention(q, k, v, block):
    m = torch.full((q.shape[0], 1), float("-inf"))
    l = torch.zeros(q.shape[0], 1)
    o = torch.zeros(q.shape[0], v.shape[-1])
    for start in {starts}:
        scores = q @ k[start:start + block].T / math.sqrt(q.shape[-1])
        m, l, o = online_softmax_update(m, l, o, scores, v[start:start + block])
    return {returned}
"""
EVERY_SIZE = {
    f"blockwise_attention.{c}" for c in ("block16", "uneven", "no_score_matrix", "key_blocks", "large_scores", "block1")
}

JUDGED = {  # judged in the tests' process
    "update_keeps_the_old_maximum": Planted(
        "online_softmax_update",
        UPDATE.format(returned="m, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v"),
        {"online_softmax_update.larger", "online_softmax_update.first"},
        "running maximum was not updated",
    ),
    "update_normalises_o": Planted(
        "online_softmax_update",
        UPDATE.format(
            returned="m_new, l * correction + p.sum(dim=-1, keepdim=True), "
            "(o * correction + p @ v) / (l * correction + p.sum(dim=-1, keepdim=True))"
        ),
        {"online_softmax_update.larger", "online_softmax_update.first", "online_softmax_update.smaller"},
        "o was divided by l",
    ),
    "update_scales_again": Planted(
        "online_softmax_update",
        RIGHT_UPDATE.replace(
            "def online_softmax_update(m, l, o, scores, v):\n",
            "def online_softmax_update(m, l, o, scores, v):\n    scores = scores / math.sqrt(v.shape[-1])\n",
        ),
        {"online_softmax_update.larger", "online_softmax_update.first"},
        "divided by sqrt(D) again",
    ),
    "blockwise_no_final_division": Planted(
        "blockwise_attention",
        RIGHT_UPDATE + LOOP.format(starts="range(0, k.shape[0], block)", returned="o"),
        EVERY_SIZE,
        "not divided by the normaliser l",
    ),
    "blockwise_skips_the_short_block": Planted(
        "blockwise_attention",
        RIGHT_UPDATE + LOOP.format(starts="range(0, k.shape[0] - block + 1, block)", returned="o / l"),
        {"blockwise_attention.uneven"},
        "the last, shorter block was skipped",
    ),
    "blockwise_stacks_every_block": Planted(
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    parts = [q @ k[s:s + block].T / math.sqrt(q.shape[-1]) for s in range(0, k.shape[0], block)]\n"
        "    return torch.softmax(torch.cat(parts, dim=1), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix"},
        "as large as the whole",
    ),
    "blockwise_one_query_against_all_keys": Planted(
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    return torch.stack([torch.softmax(k @ q[i] / math.sqrt(q.shape[-1]), dim=0) @ v\n"
        "                        for i in range(q.shape[0])])\n",
        {"blockwise_attention.key_blocks"},
        "the scores of one query against all 97 keys",
    ),
    "blockwise_hides_from_the_recorder_by_popping": Planted(
        "blockwise_attention",
        "import torch.utils._python_dispatch as dispatch\n\n"
        "def blockwise_attention(q, k, v, block):\n"
        "    with dispatch._pop_mode_temporarily():\n"
        "        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix", "blockwise_attention.key_blocks"},
        "switched off torch's dispatch modes",
    ),
    "blockwise_sdpa": Planted(
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])[0]\n",
        {"blockwise_attention.no_score_matrix"},
        "as large as the whole",
    ),
}
