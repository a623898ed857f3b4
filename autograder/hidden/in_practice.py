"""Chapter 8's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

import numpy as np

from autograder.chapters.in_practice import judge_kv, judge_lora, judge_pack, kv_probe, lora_probe, pack_probe
from autograder.checks import Check, Requirement

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # one Llama block's
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


def _random_kv_probe(rng):
    config = _random_config(rng, with_head_dim=True)
    length = int(rng.integers(100, 9000))
    extra = {"batch": int(rng.integers(2, 17)), "bytes_per_element": int(rng.choice([1, 4]))}
    return kv_probe(config, length, extra)(rng)


def _random_lora_probe(rng):
    config = _random_config(rng)
    names = sorted(rng.choice(list(LINEARS), size=int(rng.integers(2, 6)), replace=False).tolist())
    return lora_probe(config, names, int(rng.choice([2, 4, 16, 64])))(rng)


def _random_pack_probe(rng):
    return pack_probe(rng.integers(0, 16, size=4096))(rng)


HIDDEN = {
    "kv_cache_bytes_from_config": [
        Check(
            "llama3",
            1,
            "Llama-3-8B's config, 8,192 tokens, batch 4",
            kv_probe(LLAMA3_8B, 8192, {"batch": 4}),
            judge_kv,
        ),
        Check(
            "random",
            1,
            "other configs, batches and dtypes, some with their own head_dim",
            _random_kv_probe,
            judge_kv,
        ),
    ],
    "lora_trainable_parameters": [
        Check(
            "all_linear",
            1,
            "Llama-3-8B's config, rank 16 on all seven linear layers of a block",
            lora_probe(LLAMA3_8B, list(LINEARS), 16),
            judge_lora,
        ),
        Check("random", 1, "other configs, ranks and target_modules", _random_lora_probe, judge_lora),
    ],
    "pack_nf4": [
        Check("random", 2, "4,096 random codes, every value from 0 to 15", _random_pack_probe, judge_pack),
    ],
}

REQUIREMENTS = {
    "kv_cache_bytes_from_config": [
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
    "lora_trainable_parameters": [
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
    "pack_nf4": [
        Requirement("two codes per byte: a 1-D tensor of half the length", ("example", "random")),
        Requirement(
            "the first code of each pair in the high four bits, the second in the low four", ("example", "random")
        ),
        Requirement("every code from 0 to 15, 15 included (edge case)", ("example", "random")),
        Requirement("returns torch.uint8", ("example", "random")),
    ],
}
