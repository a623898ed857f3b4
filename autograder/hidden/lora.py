"""Chapter 2's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

from autograder.chapters.lora import (
    ANSWERS,
    MISTAKES,
    change_probe,
    judge_error,
    judge_forward,
    judge_frozen,
    judge_memory,
    judge_parameters,
    layer_probe,
    sizes_probe,
)
from autograder.checks import Check, Requirement, Verdict, judge_number, judges_value


def errors_at_ranks(function, delta, ranks) -> list:
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's function on one
    change at each of ``ranks``."""
    return [function(delta, rank) for rank in ranks]


def exact_probe(rng):
    """An exactly rank-3 change, at rank 2 (a real error) and at rank 3 (zero): the zero earns its
    point only beside an error the function computed."""
    made = change_probe(30, 50, 3, 0.0, 3)(rng)
    return {**made, "scenario": errors_at_ranks, "args": [made["args"][0], [2, 3]]}


@judges_value
def judge_exact(probe, got):
    delta, ranks = probe["args"]
    if not isinstance(got, list | tuple) or len(got) != len(ranks):
        return Verdict(False, f"expected one error for each of the ranks {ranks}, got {got!r}"[:300])
    for rank, value in zip(ranks, got, strict=True):
        verdict = judge_number(
            value,
            ANSWERS.best_low_rank_error(delta, rank),
            MISTAKES.of_best_low_rank_error(delta, rank),
            "the relative error",
            rel=1e-4,
            abs_tol=1e-5,
        )
        if not verdict.passed:
            return Verdict(False, f"at rank {rank} of this rank-3 change: {verdict.hint}")
    return Verdict(True)


def _memory(method):
    def make(rng):
        return {"call": "finetune_memory_gib", "args": [float(rng.integers(1, 80)) * 1e9, method]}

    return make


HIDDEN = {
    "lora_parameters": [Check("other", 2, "a rectangular layer", sizes_probe(), judge_parameters)],
    "best_low_rank_error": [
        Check(
            "at_rank",
            1,
            "the same kind of change at rank 4 and 6 (the noise)",
            change_probe(64, 40, 4, 0.1, 6),
            judge_error,
        ),
        Check("exact", 1, "an exactly rank-3 change at rank 2, and at rank 3 (zero)", exact_probe, judge_exact),
    ],
    "lora_linear": [
        Check(
            "alpha",
            1,
            "forward with alpha = 16, rank 4, a bias, inputs (2, 3, d_in)",
            layer_probe(20, 8, 4, 16.0, True, batch=(2, 3)),
            judge_forward,
        ),
        Check(
            "frozen",
            1,
            "only lora_A and lora_B train; the base is kept as self.base",
            layer_probe(12, 10, 2, None, True),
            judge_frozen,
        ),
    ],
    "finetune_memory": [
        Check("lora", 1, "LoRA, another size", _memory("lora"), judge_memory),
        Check("qlora", 1, "QLoRA, another size", _memory("qlora"), judge_memory),
    ],
}

REQUIREMENTS = {
    "lora_parameters": [
        Requirement("the trainable numbers of A (r x d_in) and B (d_out x r): r (d_in + d_out)", ("mlp", "other")),
        Requirement("d_in and d_out may differ", ("mlp", "other")),
    ],
    "best_low_rank_error": [
        Requirement(
            "sqrt(sum of sigma_i^2 beyond rank / sum of all sigma_i^2), the largest singular values kept",
            ("below", "at_rank"),
        ),
        Requirement("returned as a Python float", ("below",)),
        Requirement("an exactly low-rank change gives 0 (edge case)", ("exact",)),
    ],
    "lora_linear": [
        Requirement("the base's parameters frozen, the layer itself kept as self.base", ("frozen", "trains")),
        Requirement(
            "lora_A: a random nn.Parameter (rank, in_features); lora_B: a zero nn.Parameter (out_features, rank)",
            ("starts_at_base", "trains", "frozen"),
        ),
        Requirement("equals the base layer before training (B = 0)", ("starts_at_base",)),
        Requirement(
            "forward: base(x) + (alpha / rank) x A^T B^T, for x of shape (..., in_features)",
            ("forward", "alpha", "merge"),
        ),
        Requirement("alpha defaults to the rank (scale 1)", ("forward",)),
        Requirement("both factors can train (and only they): each gets a gradient, the output moves", ("trains",)),
        Requirement(
            "merge(): a new nn.Linear with weight + (alpha / rank) B A and the base's bias, same outputs", ("merge",)
        ),
        Requirement("merge() leaves the base layer unchanged", ("merge",)),
    ],
    "finetune_memory": [
        Requirement("full: 16 bytes per parameter (2 + 2 + 8 + 4)", ("7b",)),
        Requirement("lora: 2 bytes per parameter", ("7b", "lora")),
        Requirement("qlora: 0.5 bytes per parameter", ("7b", "qlora")),
        Requirement("in GiB (2**30 bytes)", ("7b", "lora", "qlora")),
    ],
}
