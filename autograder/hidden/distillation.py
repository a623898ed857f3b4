"""Chapter 7's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

import numpy as np
import torch

from autograder.chapters.distillation import (
    edge_shares,
    judge_distill,
    judge_edges,
    judge_prune,
    logits_probe,
    prune_probe,
)
from autograder.checks import Check, Requirement, judge_raises


def _edges_probe(rng):
    weight = torch.from_numpy(rng.normal(size=(4, 6)).astype(np.float32))
    return {"call": "prune_smallest", "args": [weight], "scenario": edge_shares}


def _judge_bad_share(probe, result):
    return judge_raises(result, "ValueError", "a share outside [0, 1] means nothing: say what is allowed")


HIDDEN = {
    "distillation_loss": [
        Check("t1", 1, "temperature 1", logits_probe(1.0), judge_distill),
        Check("t4", 1, "temperature 4", logits_probe(4.0), judge_distill),
    ],
    "prune_smallest": [
        Check("edges", 1, "shares 0 (nothing pruned) and 1 (everything)", _edges_probe, judge_edges),
        Check(
            "half",
            1,
            "a 3 x 3 matrix, share 0.5: round(4.5) = 4 weights zeroed (halves go to the even number)",
            prune_probe(0.5, shape=(3, 3), whole_share=4 / 9),  # 4 / 9 x 9 = 4 exactly
            judge_prune,
        ),
        Check(
            "bad_share",
            1,
            "a share of 1.5 raises ValueError",
            lambda rng: {"call": "prune_smallest", "args": [torch.ones(2, 2), 1.5]},
            _judge_bad_share,
        ),
    ],
}

REQUIREMENTS = {
    "distillation_loss": [
        Requirement("T^2 * KL(teacher || student) of the temperature-softened distributions", ("batch_t2", "t1", "t4")),
        Requirement("averaged over all leading positions of (..., vocab) logits", ("batch_t2", "4d")),
        Requirement("any temperature (1, above and below 1)", ("t1", "4d")),
        Requirement("a 0-d tensor or a float", ("batch_t2",)),
    ],
    "prune_smallest": [
        Requirement(
            "zeroes the round(share * numel) weights of smallest magnitude |w|",
            ("example", "whole_matrix", "rounding"),
        ),
        Requirement(
            "counts like torch.nn.utils.prune.l1_unstructured: round(share * numel), halves to even",
            ("rounding", "half"),
        ),
        Requirement("ranked over the whole matrix, not row by row", ("whole_matrix",)),
        Requirement("returns a pruned copy in the shape of weight", ("example", "whole_matrix", "edges")),
        Requirement("the matrix passed in is left unchanged", ("copy",)),
        Requirement("share 0 prunes nothing, share 1 everything (edge cases)", ("edges",)),
        Requirement("ValueError for a share outside [0, 1] (error)", ("bad_share",)),
    ],
}
