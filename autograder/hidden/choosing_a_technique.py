"""Chapter 9's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

from autograder.chapters.choosing_a_technique.advice import cases_probe, judge_advice, judge_unknown_need
from autograder.chapters.choosing_a_technique.int4_layer import (
    judge_layer_bytes,
    judge_layer_output,
    judge_layer_tensors,
    judge_model,
    layer_probe,
    loss_probe,
)
from autograder.chapters.choosing_a_technique.packing import codes_probe, judge_pack
from autograder.chapters.choosing_a_technique.speculative import loop_judge, loop_probe
from autograder.checks import Check, Requirement
from course import choosing_a_technique as technique

HIDDEN = {
    "fine_tuning_advice": [
        Check("all", 2, "every need, changing or not, prompting tried or not", cases_probe(), judge_advice),
        Check(
            "unknown",
            1,
            "an unknown need raises ValueError",
            lambda rng: {"call": "fine_tuning_advice", "args": ["vibes", False, True]},
            judge_unknown_need,
        ),
    ],
    "pack_int4": [
        Check("random", 2, "random codes, 16 x 64", codes_probe(16, 64), judge_pack),
    ],
    "int4_linear": [
        Check(
            "random",
            2,
            "a 48 x 256 weight, groups of 64: codes and scales",
            layer_probe(48, 256, 64),
            judge_layer_tensors,
        ),
        Check(
            "forward",
            1,
            "forward(x) on a batch of sequences",
            layer_probe(32, 128, 32, batch=(2, 5)),
            judge_layer_output,
        ),
        Check("bytes", 1, "the layer keeps only codes and scales", layer_probe(16, 128, 64), judge_layer_bytes),
        Check(
            "model",
            1,
            "the course's target served through your layers: held-out loss and bytes",
            loss_probe(64),
            judge_model,
        ),
    ],
    "speculative_greedy": [
        Check(
            "calls",
            1,
            "the distilled draft, k = 4: target calls counted",
            loop_probe("distilled", 1, 4),
            loop_judge("calls"),
        ),
        Check(
            "caches",
            1,
            "both models fed only what their caches have not seen",
            loop_probe("draft", 2, 3),
            loop_judge("caches"),
        ),
        Check("k1", 1, "k = 1 with chapter 6's draft", loop_probe("draft", 1, 1), loop_judge("calls")),
        Check("k7", 1, "k = 7 with chapter 6's draft", loop_probe("draft", 0, 7), loop_judge("calls")),
    ],
}

REQUIREMENTS = {
    "fine_tuning_advice": [
        Requirement("need 'knowledge': 'retrieval', whatever else holds", ("notes", "all")),
        Requirement("need 'instructions': 'prompting'", ("all",)),
        Requirement(
            "format, tone, narrow_task: 'prompting' when what the model must learn changes often", ("notes", "all")
        ),
        Requirement(
            "format, tone, narrow_task: 'prompting' until prompting has seriously been tried", ("notes", "all")
        ),
        Requirement(
            "format, tone, narrow_task: 'fine-tuning' when it does not change often and prompting was tried",
            ("notes", "all"),
        ),
        Requirement("returns one of 'retrieval', 'prompting', 'fine-tuning'", ("notes", "all")),
        Requirement("ValueError for a need not on the list (error)", ("unknown",)),
    ],
    "pack_int4": [
        Requirement(
            "byte = (c0 + 8) * 16 + (c1 + 8): each code shifted by 8, the first of each pair in the high four bits",
            ("example", "random"),
        ),
        Requirement("codes from -8 to 7, both ends included (edge case)", ("example", "random")),
        Requirement("shape (rows, cols // 2)", ("example", "random")),
        Requirement("returns torch.uint8", ("example", "random")),
        Requirement("any integer tensor of codes (int32, int64)", ("example", "random")),
        Requirement("ValueError for an odd number of columns (error)", ("odd",)),
    ],
    "int4_linear": [
        Requirement(
            "codes: round(weight / scale) with scale = absmax / 7 per group, packed with pack_int4", ("codes", "random")
        ),
        Requirement(
            "buffers named codes (uint8, (out, in // 2)) and scale (float16, (out, in // group_size))",
            ("codes", "random", "bytes"),
        ),
        Requirement(
            "forward(x) = x @ W.T for W rebuilt from the codes and scales, any leading shape", ("forward", "model")
        ),
        Requirement("no float copy of the weight kept", ("bytes", "model", "calibrated")),
        Requirement(
            "Int4Linear(weight, group_size, codes=codes, scale=scale) keeps the signed codes (packed) and the "
            "scales given, instead of rounding the weight",
            ("calibrated",),
        ),
    ],
    "speculative_greedy": [
        Requirement(
            "the prompt and the new tokens, exactly the target's greedy decoding",
            ("greedy", "calls", "caches", "k1", "k7"),
        ),
        Requirement("one target call per round, verifying the k guesses", ("calls", "k1", "k7")),
        Requirement(
            "both models keep a KV cache, rolled back to the positions kept after a rejection",
            ("greedy", "calls", "caches"),
        ),
        Requirement("any k from 1 up (edge case: k = 1)", ("k1", "k7")),
    ],
    "capstone_configuration": [
        Requirement(
            "a dict with the keys weights, group_size, calibration, draft and draft_length, naming a configuration "
            "the capstone serves",
            tuple(technique.BUDGET),
        ),
        *(Requirement(words, (part,)) for part, words in technique.BUDGET_WORDS.items()),
    ],
}
