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
    pruned_values,
)
from autograder.checks import Check, Requirement, Verdict, judges_value


def _edges_probe(rng):
    weight = torch.from_numpy(rng.normal(size=(4, 6)).astype(np.float32))
    return {"call": "prune_smallest", "args": [weight], "scenario": edge_shares}


def share_checked(function, weight, share, bad):
    """The scenario (run in the sandbox, see checks.scenario_source): ``function(weight, share)``, and
    the name of what ``function`` raised at the share ``bad`` (None where it returned)."""
    pruned = function(weight.clone(), share)
    try:
        function(weight.clone(), bad)
    except Exception as error:
        raised = type(error).__name__
    else:
        raised = None
    return {"pruned": pruned, "raised": raised}


def _bad_share_probe(rng):
    weight = torch.from_numpy(rng.normal(size=(6, 5)).astype(np.float32))
    bad = float(rng.choice([1.5, -0.25]))
    return {"call": "prune_smallest", "args": [weight, 0.3], "kwargs": {"bad": bad}, "scenario": share_checked}


@judges_value
def judge_share_checked(probe, got):
    """The pruned matrix at a share in [0, 1], and ValueError at one outside: refusing a share earns
    nothing without the pruning."""
    values = pruned_values(probe, got)
    if not values.passed:
        return values
    bad, raised = probe["kwargs"]["bad"], got.get("raised")
    if raised == "ValueError":
        return Verdict(True)
    what = f"raised {raised}" if raised else "returned a result"
    return Verdict(False, f"share {bad:g} {what}; expected ValueError: a share outside [0, 1] means nothing")


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
            "a 6 x 5 matrix pruned at share 0.3, and a share outside [0, 1] raises ValueError",
            _bad_share_probe,
            judge_share_checked,
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
            ("example", "whole_matrix", "rounding", "copy"),
        ),
        Requirement(
            "counts like torch.nn.utils.prune.l1_unstructured: round(share * numel), halves to even",
            ("rounding", "half"),
        ),
        Requirement("ranked over the whole matrix, not row by row", ("whole_matrix",)),
        Requirement("returns a pruned copy in the shape of weight", ("example", "whole_matrix", "edges")),
        Requirement("the matrix passed in is left unchanged, beside a pruned copy", ("copy",)),
        Requirement("share 0 prunes nothing, share 1 everything (edge cases)", ("edges",)),
        Requirement("ValueError for a share outside [0, 1] (error), beside a pruned copy", ("bad_share",)),
    ],
}
