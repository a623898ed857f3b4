"""Chapter 8's exercises, with their visible checks: kv_cache_bytes_from_config,
lora_trainable_parameters (both from a transformers config as a dict) and pack_nf4 (bitsandbytes'
byte layout), judged against the chapter's answers (``ANSWERS``, its solution cells) and the
mistakes each can name in its hint (``MISTAKES``, ``autograder/mistakes/in_practice.py``). The
hidden checks are ``autograder/hidden/in_practice.py``'s."""

from __future__ import annotations

import math

import torch

from autograder.checks import (
    Check,
    Exercise,
    Verdict,
    as_tensor,
    diagnose,
    judge_number,
    judges_value,
    outcome,
)
from course import withheld

ANSWERS = withheld.answers("08_in_practice")
MISTAKES = withheld.module("autograder.mistakes.in_practice")

SMOLLM2 = {  # SmolLM2-135M's config.json, the numbers the exercises use
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "hidden_size": 576,
    "intermediate_size": 1536,
}
GEMMA_7B = {  # a head_dim of its own, larger than hidden_size // num_attention_heads (3072 / 16 = 192)
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "head_dim": 256,
}


def _merged(mistakes: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """``mistakes`` with those that give the same number on these inputs as one entry, their hints
    joined by "or": a check that cannot tell them apart names each, not the first alone."""
    merged: list[tuple[list[str], float]] = []
    for hint, wrong in mistakes:
        same = next((entry for entry in merged if math.isclose(entry[1], wrong, rel_tol=1e-9)), None)
        if same is None:
            merged.append(([hint], wrong))
        elif hint not in same[0]:
            same[0].append(hint)
    return [("; or ".join(hints), wrong) for hints, wrong in merged]


def _with_inputs(verdict: Verdict, inputs: str) -> Verdict:
    """``verdict``, its hint led by the call's inputs when it failed (some are drawn afresh, so the
    check's line cannot print them)."""
    return verdict if verdict.passed else Verdict(False, f"with {inputs}: {verdict.hint}")


# --- kv_cache_bytes_from_config ------------------------------------------------------------------------


@judges_value
def judge_kv(probe, got):
    config, seq_len = probe["args"]
    batch = probe["kwargs"].get("batch", 1)
    element = probe["kwargs"].get("bytes_per_element", 2)
    expected = ANSWERS.kv_cache_bytes_from_config(config, seq_len, batch, element)
    mistakes = _merged(MISTAKES.of_kv_cache_bytes_from_config(config, seq_len, batch, element))
    verdict = judge_number(got, expected, mistakes, "the cache size in bytes")
    return _with_inputs(verdict, f"seq_len={seq_len}, batch={batch}, bytes_per_element={element}")


def kv_probe(config: dict, seq_len: int, kwargs: dict):
    def make(rng):
        return {"call": "kv_cache_bytes_from_config", "args": [dict(config), seq_len], "kwargs": dict(kwargs)}

    return make


def _gemma_kv_probe(rng):
    """Gemma-7B's config in float32, its length and batch drawn afresh (a graded notebook gets its
    own: the printed value is no answer to hard-code)."""
    extra = {"batch": int(rng.integers(2, 9)), "bytes_per_element": 4}
    return kv_probe(GEMMA_7B, int(rng.integers(256, 8193)), extra)(rng)


KV_FROM_CONFIG = Exercise(
    "kv_cache_bytes_from_config",
    ("kv_cache_bytes_from_config",),
    [
        Check(
            "smollm2",
            1,
            "SmolLM2-135M, one token in fp16: 23,040 bytes",
            kv_probe(SMOLLM2, 1, {}),
            judge_kv,
            visible=True,
        ),
        Check(
            "head_dim",
            1,
            "Gemma-7B's config, which gives its own head_dim, in float32 (4 bytes an element): a length and a "
            "batch drawn afresh",
            _gemma_kv_probe,
            judge_kv,
            visible=True,
        ),
    ],
)


# --- lora_trainable_parameters ---------------------------------------------------------------------------


@judges_value
def judge_lora(probe, got):
    config, targets, r = probe["args"]
    expected = ANSWERS.lora_trainable_parameters(config, targets, r)
    mistakes = _merged(MISTAKES.of_lora_trainable_parameters(config, targets, r))
    verdict = judge_number(got, expected, mistakes, "the number of trainable parameters")
    return _with_inputs(verdict, f"target_modules={list(targets)}, r={r}")


def lora_probe(config: dict, targets: list[str], r: int):
    def make(rng):
        return {"call": "lora_trainable_parameters", "args": [dict(config), list(targets), r]}

    return make


def _gemma_lora_probe(rng):
    """Gemma-7B's config, two to four of its attention layers (whose widths head_dim sets) and the
    rank drawn afresh (a graded notebook gets its own: the printed value is no answer to hard-code)."""
    attention = ["q_proj", "k_proj", "v_proj", "o_proj"]
    targets = [name for name in attention if name in rng.choice(attention, size=int(rng.integers(2, 5)), replace=False)]
    return lora_probe(GEMMA_7B, targets, int(rng.integers(2, 129)))(rng)


LORA_PARAMETERS = Exercise(
    "lora_trainable_parameters",
    ("lora_trainable_parameters",),
    [
        Check(
            "smollm2_qv",
            1,
            "SmolLM2-135M, rank 8 on q_proj and v_proj: 460,800, as peft counts",
            lora_probe(SMOLLM2, ["q_proj", "v_proj"], 8),
            judge_lora,
            visible=True,
        ),
        Check(
            "head_dim",
            1,
            "Gemma-7B's config, which gives its own head_dim: attention layers and a rank drawn afresh",
            _gemma_lora_probe,
            judge_lora,
            visible=True,
        ),
    ],
)


# --- pack_nf4 ------------------------------------------------------------------------------------------------


def judge_pack(probe, result):  # reads the raw result too: the dtype is part of the answer
    got, failed = outcome(result)
    if failed:
        return failed
    packed, problem = as_tensor(got, "the packed bytes")
    if problem:
        return Verdict(False, problem)
    codes = probe["args"][0]
    expected = ANSWERS.pack_nf4(codes)
    if packed.numel() == codes.numel():
        return Verdict(False, f"returned {packed.numel()} values for {codes.numel()} codes: two codes go in one byte")
    if packed.numel() != expected.numel():
        return Verdict(False, f"returned {packed.numel()} values; {codes.numel()} codes make {expected.numel()} bytes")
    if packed.dim() != 1:
        return Verdict(
            False,
            f"returned shape {tuple(packed.shape)}: the bytes are a 1-D tensor of half the codes' length, "
            f"({expected.numel()},)",
        )
    dtype = result["returned"].get("torch_dtype")
    flat = packed.flatten()
    if torch.equal(flat, expected.double()):
        if dtype != "uint8":
            return Verdict(
                False, f"the values are right but the dtype is {dtype}: bytes are torch.uint8 (.to(torch.uint8))"
            )
        return Verdict(True)
    return diagnose(flat, expected, lambda: MISTAKES.of_pack_nf4(codes), "the bytes", rtol=0, atol=0)


def pack_probe(codes):
    def make(rng):
        return {"call": "pack_nf4", "args": [torch.tensor(codes, dtype=torch.uint8)]}

    return make


PACK_NF4 = Exercise(
    "pack_nf4",
    ("pack_nf4",),
    [
        Check(
            "example",
            1,
            "codes 1, 2, 3, 15: bytes 0x12 and 0x3f",
            pack_probe([1, 2, 3, 15]),
            judge_pack,
            visible=True,
        ),
    ],
)

EXERCISES = [KV_FROM_CONFIG, LORA_PARAMETERS, PACK_NF4]
