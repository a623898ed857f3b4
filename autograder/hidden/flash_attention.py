"""Chapter 5's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

import torch

from autograder.chapters.flash_attention import attention_probe, judge_attention, judge_update, update_probe
from autograder.checks import Check, Requirement

HIDDEN = {
    "online_softmax_update": [
        Check("smaller", 1, "a block with a smaller maximum", update_probe(False, False), judge_update),
    ],
    "blockwise_attention": [
        Check("block1", 1, "blocks of one key", attention_probe(9, 13, 4, 1), judge_attention),
        Check(
            "one_block",
            1,
            "one block larger than the keys, float64 inputs",
            attention_probe(5, 30, 8, 64, dtype=torch.float64),
            judge_attention,
        ),
    ],
}

REQUIREMENTS = {
    "online_softmax_update": [
        Requirement("returns the new (m, l, o): (n_q, 1), (n_q, 1), (n_q, D)", ("larger", "first", "smaller")),
        Requirement(
            "m_new = max(m, the block's largest score); l and o rescaled by exp(m - m_new)", ("larger", "smaller")
        ),
        Requirement("the scores arrive already scaled by 1/sqrt(D)", ("larger",)),
        Requirement("before the first block (m = -inf, l = o = 0): no NaN", ("first",)),
    ],
    "blockwise_attention": [
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
}
