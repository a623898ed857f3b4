"""Chapter 8's exercises: kv_cache_bytes_from_config, lora_trainable_parameters (both from a
transformers config as a dict) and pack_nf4 (bitsandbytes' byte layout). Each check names the
mistakes it can recognise in its hint."""

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
    diagnose,
    judge_number,
    judges_value,
    outcome,
)
from course import in_practice
from course.withheld import withheld

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
LLAMA3_8B = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
}


def _random_config(rng: np.random.Generator, with_head_dim: bool = False) -> dict:
    heads = int(rng.choice([8, 12, 16, 32]))
    d = int(rng.choice([64, 80, 128]))
    config = {
        "num_hidden_layers": int(rng.integers(4, 60)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0 and k < heads])),
        "hidden_size": heads * d,
        "intermediate_size": int(rng.integers(2, 6)) * heads * d,
    }
    if with_head_dim:
        config["head_dim"] = 3 * d // 2  # differs from hidden_size // heads (and not by 2): it must be used as given
    return config


def _with(config: dict, **changes) -> dict:
    return {**config, **changes}


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
def _judge_kv(probe, got):
    config, seq_len = probe["args"]
    batch = probe["kwargs"].get("batch", 1)
    element = probe["kwargs"].get("bytes_per_element", 2)
    expected = in_practice.kv_cache_bytes_from_config(config, seq_len, batch, element)
    mistakes = _merged(_kv_mistakes(config, seq_len, batch, element))
    verdict = judge_number(got, expected, mistakes, "the cache size in bytes")
    return _with_inputs(verdict, f"seq_len={seq_len}, batch={batch}, bytes_per_element={element}")


@withheld
def _kv_mistakes(config: dict, seq_len: int, batch: int, element: int) -> list[tuple[str, float]]:
    """The cache size each known mistake gives for these inputs, with the hint that names it."""
    expected = in_practice.kv_cache_bytes_from_config(config, seq_len, batch, element)

    def formula(**changes):
        return in_practice.kv_cache_bytes_from_config(_with(config, **changes), seq_len, batch, element)

    width_per_head = config["hidden_size"] // config["num_attention_heads"]
    return [
        (
            "used num_attention_heads: the cache keeps key-value heads only (num_key_value_heads), "
            "which grouped-query attention makes fewer",
            formula(num_key_value_heads=config["num_attention_heads"]),
        ),
        ("the factor 2 is missing: the cache holds a key and a value per head", expected / 2),
        (
            "ignored the config's head_dim: when a config gives head_dim, use it "
            "(only without one is it hidden_size // num_attention_heads)",
            formula(head_dim=width_per_head),
        ),
        (
            "head_dim taken as hidden_size // num_key_value_heads: the head dimension comes from the query heads",
            formula(head_dim=config["hidden_size"] // config["num_key_value_heads"]),
        ),
        (
            "left out the number of layers: every layer caches its own keys and values",
            expected / config["num_hidden_layers"],
        ),
        ("left out the batch: every sequence keeps its own cache", expected / batch),
        ("left out bytes_per_element: every element takes that many bytes", expected / element),
        (
            "bytes_per_element fixed at 2 (fp16): use the bytes_per_element given (2 is only its default)",
            expected * 2 / element,
        ),
    ]


def _kv_probe(config=None, seq_len=None, kwargs=None, with_head_dim=False):
    def make(rng):
        chosen = config or _random_config(rng, with_head_dim)
        length = seq_len or int(rng.integers(100, 9000))
        extra = (
            kwargs
            if kwargs is not None
            else {"batch": int(rng.integers(2, 17)), "bytes_per_element": int(rng.choice([1, 4]))}
        )
        return {"call": "kv_cache_bytes_from_config", "args": [dict(chosen), length], "kwargs": dict(extra)}

    return make


def _gemma_kv_probe(rng):
    """Gemma-7B's config in float32, its length and batch drawn afresh (a graded notebook gets its
    own: the printed value is no answer to hard-code)."""
    extra = {"batch": int(rng.integers(2, 9)), "bytes_per_element": 4}
    return _kv_probe(GEMMA_7B, int(rng.integers(256, 8193)), extra)(rng)


KV_FROM_CONFIG = Exercise(
    "kv_cache_bytes_from_config",
    ("kv_cache_bytes_from_config",),
    [
        Check(
            "smollm2",
            1,
            "SmolLM2-135M, one token in fp16: 23,040 bytes",
            _kv_probe(SMOLLM2, 1, {}),
            _judge_kv,
            visible=True,
        ),
        Check(
            "llama3",
            1,
            "Llama-3-8B's config, 8,192 tokens, batch 4",
            _kv_probe(LLAMA3_8B, 8192, {"batch": 4}),
            _judge_kv,
        ),
        Check(
            "head_dim",
            1,
            "Gemma-7B's config, which gives its own head_dim, in float32 (4 bytes an element): a length and a "
            "batch drawn afresh",
            _gemma_kv_probe,
            _judge_kv,
            visible=True,
        ),
        Check(
            "random",
            1,
            "other configs, batches and dtypes, some with their own head_dim",
            _kv_probe(with_head_dim=True),
            _judge_kv,
        ),
    ],
    requirements=[
        Requirement(
            "2 x layers x kv heads x head_dim x seq_len x batch x bytes_per_element, read off the config",
            ("smollm2", "llama3", "head_dim", "random"),
        ),
        Requirement(
            "key-value heads only (num_key_value_heads, fewer with grouped-query attention)",
            ("smollm2", "llama3", "random"),
        ),
        Requirement("the config's head_dim used when it has one", ("head_dim", "random")),
        Requirement("without head_dim: hidden_size // num_attention_heads", ("smollm2", "llama3")),
        Requirement("batch=1 and bytes_per_element=2 by default", ("smollm2", "llama3")),
        Requirement("batch and bytes_per_element given", ("llama3", "head_dim", "random")),
    ],
)


# --- lora_trainable_parameters ---------------------------------------------------------------------------


@judges_value
def _judge_lora(probe, got):
    config, targets, r = probe["args"]
    expected = in_practice.lora_trainable_parameters(config, targets, r)
    mistakes = _merged(_lora_mistakes(config, targets, r))
    verdict = judge_number(got, expected, mistakes, "the number of trainable parameters")
    return _with_inputs(verdict, f"target_modules={list(targets)}, r={r}")


@withheld
def _lora_mistakes(config: dict, targets: list, r: int) -> list[tuple[str, float]]:
    """The count each known mistake gives for these inputs, with the hint that names it."""
    expected = in_practice.lora_trainable_parameters(config, targets, r)
    layers = config["num_hidden_layers"]
    shapes = in_practice.linear_shapes(config)

    def each(count):
        return layers * sum(count(*shapes[name]) for name in set(targets))

    return [
        (
            "k_proj and v_proj sized like q_proj: with grouped-query attention they output "
            "num_key_value_heads * head_dim, fewer than the queries",
            in_practice.lora_trainable_parameters(
                _with(config, num_key_value_heads=config["num_attention_heads"]), targets, r
            ),
        ),
        ("counted A only (r x d_in): B (d_out x r) trains too", each(lambda d_in, d_out: r * d_in)),
        ("counted B only (d_out x r): A (r x d_in) trains too", each(lambda d_in, d_out: r * d_out)),
        (
            "counted the whole weight matrices (d_in x d_out): an adapter trains r (d_in + d_out)",
            each(lambda d_in, d_out: d_in * d_out),
        ),
        (
            "ignored the config's head_dim: when a config gives head_dim, the attention layers are "
            "heads x head_dim wide (only without one is it hidden_size // num_attention_heads)",
            in_practice.lora_trainable_parameters(
                _with(config, head_dim=config["hidden_size"] // config["num_attention_heads"]), targets, r
            ),
        ),
        (
            "head_dim taken as hidden_size // num_key_value_heads: the head dimension comes from the query heads",
            in_practice.lora_trainable_parameters(
                _with(config, head_dim=config["hidden_size"] // config["num_key_value_heads"]), targets, r
            ),
        ),
        ("left out the number of layers: peft adds the adapters to every layer", expected / layers),
    ]


def _lora_probe(config=None, targets=None, r=None):
    def make(rng):
        chosen = config or _random_config(rng)
        names = targets or sorted(
            rng.choice(list(in_practice.LLAMA_LINEARS), size=int(rng.integers(2, 6)), replace=False).tolist()
        )
        return {
            "call": "lora_trainable_parameters",
            "args": [dict(chosen), list(names), r or int(rng.choice([2, 4, 16, 64]))],
        }

    return make


def _gemma_lora_probe(rng):
    """Gemma-7B's config, two to four of its attention layers (whose widths head_dim sets) and the
    rank drawn afresh (a graded notebook gets its own: the printed value is no answer to hard-code)."""
    attention = ["q_proj", "k_proj", "v_proj", "o_proj"]
    targets = [name for name in attention if name in rng.choice(attention, size=int(rng.integers(2, 5)), replace=False)]
    return _lora_probe(GEMMA_7B, targets, int(rng.integers(2, 129)))(rng)


LORA_PARAMETERS = Exercise(
    "lora_trainable_parameters",
    ("lora_trainable_parameters",),
    [
        Check(
            "smollm2_qv",
            1,
            "SmolLM2-135M, rank 8 on q_proj and v_proj: 460,800, as peft counts",
            _lora_probe(SMOLLM2, ["q_proj", "v_proj"], 8),
            _judge_lora,
            visible=True,
        ),
        Check(
            "all_linear",
            1,
            "Llama-3-8B's config, rank 16 on all seven linear layers of a block",
            _lora_probe(LLAMA3_8B, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 16),
            _judge_lora,
        ),
        Check(
            "head_dim",
            1,
            "Gemma-7B's config, which gives its own head_dim: attention layers and a rank drawn afresh",
            _gemma_lora_probe,
            _judge_lora,
            visible=True,
        ),
        Check("random", 1, "other configs, ranks and target_modules", _lora_probe(), _judge_lora),
    ],
    requirements=[
        Requirement(
            "r x (d_in + d_out) for each layer named in target_modules (A and B both train)",
            ("smollm2_qv", "all_linear", "head_dim", "random"),
        ),
        Requirement(
            "times num_hidden_layers: the adapters go on every layer",
            ("smollm2_qv", "all_linear", "head_dim", "random"),
        ),
        Requirement(
            "the table's shapes: k_proj and v_proj output kv heads x head_dim",
            ("smollm2_qv", "all_linear", "random"),
        ),
        Requirement(
            "the table's shapes: gate_proj, up_proj and down_proj through intermediate_size", ("all_linear", "random")
        ),
        Requirement("the config's head_dim used when it has one", ("head_dim",)),
        Requirement(
            "without head_dim: hidden_size // num_attention_heads",
            ("smollm2_qv", "all_linear", "random"),
        ),
        Requirement("any subset of the seven layers in target_modules", ("smollm2_qv", "random")),
    ],
)


# --- pack_nf4 ------------------------------------------------------------------------------------------------


def _judge_pack(probe, result):  # reads the raw result too: the dtype is part of the answer
    got, failed = outcome(result)
    if failed:
        return failed
    packed, problem = as_tensor(got, "the packed bytes")
    if problem:
        return Verdict(False, problem)
    codes = probe["args"][0]
    expected = in_practice.pack_nf4(codes)
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
    mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in _nf4_mistakes(codes)]
    return diagnose(flat, expected, mistakes, "the bytes", rtol=0, atol=0)


@withheld
def _nf4_mistakes(codes: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The bytes (as float64) each known packing mistake makes of ``codes``, with the hint that names it."""
    first, second = codes[0::2].double(), codes[1::2].double()
    return [
        (
            "the second code went into the high nibble: bitsandbytes puts the first code high, the second low",
            second * 16 + first,
        ),
        ("the first code's bits are lost: shift it by 4 bits (x << 4), a byte holds only 8", second),
        ("shifted by 8 instead of 4 without losing the bits: a byte's high nibble is x << 4", first * 256 + second),
    ]


def _pack_probe(n=None, fixed=None):
    def make(rng):
        codes = fixed if fixed is not None else rng.integers(0, 16, size=n)
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
            _pack_probe(fixed=[1, 2, 3, 15]),
            _judge_pack,
            visible=True,
        ),
        Check("random", 2, "4,096 random codes, every value from 0 to 15", _pack_probe(4096), _judge_pack),
    ],
    requirements=[
        Requirement("two codes per byte: a 1-D tensor of half the length", ("example", "random")),
        Requirement(
            "the first code of each pair in the high four bits, the second in the low four", ("example", "random")
        ),
        Requirement("every code from 0 to 15, 15 included (edge case)", ("example", "random")),
        Requirement("returns torch.uint8", ("example", "random")),
    ],
)

EXERCISES = [KV_FROM_CONFIG, LORA_PARAMETERS, PACK_NF4]
