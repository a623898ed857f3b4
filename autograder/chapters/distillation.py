"""Chapter 7's exercises, with their visible checks. distillation_loss, judged against the chapter's
answer (``ANSWERS``, its solution cells) and the mistakes it can name (``MISTAKES``,
``autograder/mistakes/distillation.py``: no T^2, the KL reversed, no temperature, the
cross-entropy, a sum over positions, and torch.nn.functional.kl_div's reductions, which average over
the wrong things on (B, T, vocab)). prune_smallest, judged against the chapter's magnitude pruning,
which counts like torch.nn.utils.prune (round(share * numel)), and its usual mistakes (the largest
weights pruned, signed values ranked instead of magnitudes, each row ranked on its own, the count
truncated or its halves rounded up, one weight too many or too few, a flattened result, the input
changed in place). The hidden checks are ``autograder/hidden/distillation.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Verdict,
    diagnose,
    judge_number,
    judges_value,
    number,
)
from course import withheld

ANSWERS = withheld.answers("07_distillation")
MISTAKES = withheld.module("autograder.mistakes.distillation")

# --- distillation_loss -------------------------------------------------------------------------------


def logits_probe(temperature, positions=(4, 7), vocab=10, scale=3.0, dtype=np.float32):
    def make(rng):
        shape = (*positions, vocab)
        student = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        teacher = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        return {"call": "distillation_loss", "args": [student, teacher, temperature]}

    return make


@judges_value
def judge_distill(probe, got):
    student, teacher, t = probe["args"]
    expected = ANSWERS.distillation_loss(student.double(), teacher.double(), t).item()
    value, _ = number(got, "the loss")
    if value is not None and value != value:
        return Verdict(
            False,
            "the loss is NaN: a log of a probability that is zero or negative. If you use F.kl_div, its target "
            "must be probabilities (softmax), or pass log_target=True with log-probabilities",
        )
    mistakes = MISTAKES.of_distillation_loss(*probe["args"])
    return judge_number(got, expected, mistakes, "the distillation loss", rel=1e-4, abs_tol=1e-6)


# --- prune_smallest ------------------------------------------------------------------------------------


def pruned_copy(function, weight, share, whole_share=None) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function(weight, share)``,
    whether the call changed ``weight`` itself, and, given ``whole_share`` (a share of ``weight``
    that is a whole number of weights), how many weights a call at that share zeroes
    (``whole_zeros``): a count that is off by one there too is not a rounding of the share's
    fraction."""
    before = weight.clone()
    pruned = function(weight, share)
    found = {"pruned": pruned, "input_changed": not bool((weight == before).all())}
    if whole_share is not None:
        again = function(before.clone(), whole_share)
        found["whole_zeros"] = int((again == 0).sum()) if hasattr(again, "shape") else None
    return found


# Where a rounding of the count and an off-by-one give the same matrix (18.75 truncated to 18 is
# also 19 - 1), the call at a whole share tells them apart: a rounding mistake counts a whole number
# right, an off-by-one misses it there too.
TWINS = {"truncated": ("one_less", -1), "half_up": ("one_more", +1)}


def told_apart(mistakes: list, weight: torch.Tensor, share: float, whole_share, whole_zeros) -> list:
    """``mistakes`` (kind, hint, matrix) less those this input cannot tell apart from their twin
    (:data:`TWINS`): the one the call at ``whole_share`` rules out, or, without that call, both
    twins' hints replaced by what was seen."""
    matrices = {kind: matrix for kind, _, matrix in mistakes}
    count = round(share * weight.numel())  # as torch.nn.utils.prune counts
    kept = list(mistakes)
    for rounding, (off_by_one, step) in TWINS.items():
        if not torch.equal(matrices[rounding], matrices[off_by_one]):
            continue
        if whole_share is not None and whole_zeros is not None:
            whole = round(whole_share * weight.numel())
            ruled_out = rounding if whole_zeros == whole + step else off_by_one
            kept = [m for m in kept if m[0] != ruled_out]
            continue
        seen = (
            f"zeroed {count + step} weights, one too {'few' if step < 0 else 'many'}: the count is round(share * "
            f"numel) = round({share * weight.numel():g}) = {count}, as torch.nn.utils.prune.l1_unstructured counts"
        )
        kept = [(kind, seen, m) if kind in (rounding, off_by_one) else (kind, hint, m) for kind, hint, m in kept]
    return kept


def _wrong_shape(got: torch.Tensor, weight: torch.Tensor) -> Verdict | None:
    """A failing verdict when the result does not have the shape of the matrix passed in."""
    if tuple(got.shape) == tuple(weight.shape):
        return None
    return Verdict(
        False,
        f"the output has the wrong shape: {tuple(got.shape)} for a {tuple(weight.shape)} matrix; return the "
        "pruned matrix in the shape of weight (a flattened copy goes back with .reshape(weight.shape))",
    )


def prune_probe(share, shape=(8, 12), rows_apart=False, fixed=None, whole_share=None):
    def make(rng):
        if fixed is not None:
            weight = fixed.clone()
        else:
            weight = torch.from_numpy(rng.normal(size=shape).astype(np.float32))
            if rows_apart:  # rows of very different sizes: ranking each row on its own shows
                weight = weight * torch.logspace(-2, 1, shape[0])[:, None]
        probe = {"call": "prune_smallest", "args": [weight, share], "scenario": pruned_copy}
        if whole_share is not None:
            probe["kwargs"] = {"whole_share": whole_share}
        return probe

    return make


EXAMPLE_WEIGHT = torch.tensor([[0.5, -2.0, 0.1, 3.0], [-0.3, 1.0, -4.0, 0.2]])


def _pruned_tensor(got) -> tuple[torch.Tensor | None, Verdict | None]:
    """The pruned matrix a :func:`pruned_copy` scenario reported, or why there is none."""
    if not isinstance(got, dict) or "pruned" not in got:
        return None, Verdict(False, f"prune_smallest could not be tested: {got!r}"[:200])
    pruned = got["pruned"]
    if not isinstance(pruned, torch.Tensor):
        return None, Verdict(False, f"returned {type(pruned).__name__}; prune_smallest should return a torch.Tensor")
    return pruned, None


def pruned_values(probe, got) -> Verdict:
    """The pruned matrix's values against the answer's, naming the mistake they match."""
    weight, share = probe["args"]
    pruned, failed = _pruned_tensor(got)
    if failed:
        return failed
    wrong_shape = _wrong_shape(pruned, weight)
    if wrong_shape:
        return wrong_shape
    whole_share = probe.get("kwargs", {}).get("whole_share")

    def mistakes():
        known = told_apart(
            MISTAKES.of_prune_smallest(weight, share), weight, share, whole_share, got.get("whole_zeros")
        )
        return [(hint, wrong) for _, hint, wrong in known]

    return diagnose(
        pruned.double(),
        ANSWERS.prune_smallest(weight.double(), share),
        mistakes,
        what="the pruned matrix",
        rtol=0,
        atol=1e-7,
    )


@judges_value
def judge_prune(probe, got):
    """The pruned matrix's values (whether the input was changed is the copy check's)."""
    return pruned_values(probe, got)


@judges_value
def judge_pruned_copy(probe, got):
    """The pruned matrix's values, and the matrix passed in left as it was: an answer that leaves it
    as it was by doing nothing earns nothing."""
    values = pruned_values(probe, got)
    if not values.passed:
        return values
    if got.get("input_changed"):
        return Verdict(
            False,
            "the matrix passed in was changed: work on a copy (weight.clone()) and zero the weights there, "
            "as the chapter prunes copies of the target at several shares",
        )
    return Verdict(True)


def edge_shares(function, weight) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function`` at shares 0 and 1,
    each call on its own copy of ``weight`` (a call that prunes in place must not spoil the other)."""
    return {"none": function(weight.clone(), 0.0), "all": function(weight.clone(), 1.0)}


@judges_value
def judge_edges(probe, got):
    (weight,) = probe["args"]
    if not isinstance(got, dict) or not all(isinstance(got.get(k), torch.Tensor) for k in ("none", "all")):
        return Verdict(False, f"prune_smallest at shares 0 and 1 did not return tensors: {got!r}"[:200])
    for key in ("none", "all"):
        wrong_shape = _wrong_shape(got[key], weight)
        if wrong_shape:
            return wrong_shape
    if not torch.equal(got["none"].double(), weight.double()):
        zeroed = int((got["none"] == 0).sum())
        return Verdict(
            False,
            f"share 0 zeroed {zeroed} weight(s): round(0 * numel) is 0, so nothing is pruned "
            "(kthvalue needs k >= 1: count first, and prune only when the count is positive)",
        )
    if int((got["all"] != 0).sum()):
        return Verdict(False, f"share 1 left {int((got['all'] != 0).sum())} weight(s) standing: every weight goes")
    return Verdict(True)


EXERCISES = [
    Exercise(
        "distillation_loss",
        ("distillation_loss",),
        [
            Check(
                "batch_t2",
                1,
                "a batch of sequences (B, T, vocab) at temperature 2",
                logits_probe(2.0, positions=(3, 5)),
                judge_distill,
                visible=True,
            ),
            Check(
                "4d",
                1,
                "(B, H, T, vocab) at temperature 0.5, float64 logits",
                logits_probe(
                    0.5, positions=(2, 3, 5), dtype=np.float64
                ),  # T^2 x 5 is not 1: no mistake looks like another
                judge_distill,
                visible=True,
            ),
        ],
    ),
    Exercise(
        "prune_smallest",
        ("prune_smallest",),
        [
            Check(
                "example",
                1,
                "the prompt's 2 x 4 example, share 0.5",
                prune_probe(0.5, fixed=EXAMPLE_WEIGHT),
                judge_prune,
                visible=True,
            ),
            Check(
                "whole_matrix",
                1,
                "rows of very different sizes, share 0.4: ranked over the whole matrix",
                prune_probe(0.4, rows_apart=True),
                judge_prune,
                visible=True,
            ),
            Check(
                "rounding",
                1,
                "a 5 x 5 matrix, share 0.75: round(18.75) = 19 weights zeroed, as torch.nn.utils.prune counts",
                prune_probe(0.75, shape=(5, 5), whole_share=0.76),  # 0.76 x 25 = 19 exactly
                judge_prune,
                visible=True,
            ),
            Check(
                "copy",
                1,
                "an 8 x 12 matrix, share 0.25, pruned in a copy: the matrix passed in is left unchanged",
                prune_probe(0.25),
                judge_pruned_copy,
                visible=True,
            ),
        ],
    ),
]
