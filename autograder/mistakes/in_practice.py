"""Chapter 8's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/in_practice.py`` name a mistake by it), and wrong answers written out: the
KV cache and LoRA counted from a config, NF4 packing."""

from __future__ import annotations

import torch

from autograder.mistakes import Planted
from course import withheld

ANSWERS = withheld.answers("08_in_practice")


def _with(config: dict, **changes) -> dict:
    return {**config, **changes}


# --- kv_cache_bytes_from_config ------------------------------------------------------------------------


def of_kv_cache_bytes_from_config(config: dict, seq_len: int, batch: int, element: int) -> list[tuple[str, float]]:
    """The cache size each known mistake gives for these inputs, with the hint that names it."""
    expected = ANSWERS.kv_cache_bytes_from_config(config, seq_len, batch, element)

    def formula(**changes):
        return ANSWERS.kv_cache_bytes_from_config(_with(config, **changes), seq_len, batch, element)

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


# --- lora_trainable_parameters ---------------------------------------------------------------------------


def _linear_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each linear layer of one Llama-style block, by its name: what the mistakes
    that count one factor only, or whole matrices, count over."""
    width, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d, ffn = config.get("head_dim") or width // heads, config["intermediate_size"]
    return {
        "q_proj": (width, heads * d),
        "k_proj": (width, kv_heads * d),
        "v_proj": (width, kv_heads * d),
        "o_proj": (heads * d, width),
        "gate_proj": (width, ffn),
        "up_proj": (width, ffn),
        "down_proj": (ffn, width),
    }


def of_lora_trainable_parameters(config: dict, targets: list, r: int) -> list[tuple[str, float]]:
    """The count each known mistake gives for these inputs, with the hint that names it."""
    expected = ANSWERS.lora_trainable_parameters(config, targets, r)
    layers = config["num_hidden_layers"]
    shapes = _linear_shapes(config)

    def each(count):
        return layers * sum(count(*shapes[name]) for name in set(targets))

    return [
        (
            "k_proj and v_proj sized like q_proj: with grouped-query attention they output "
            "num_key_value_heads * head_dim, fewer than the queries",
            ANSWERS.lora_trainable_parameters(
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
            ANSWERS.lora_trainable_parameters(
                _with(config, head_dim=config["hidden_size"] // config["num_attention_heads"]), targets, r
            ),
        ),
        (
            "head_dim taken as hidden_size // num_key_value_heads: the head dimension comes from the query heads",
            ANSWERS.lora_trainable_parameters(
                _with(config, head_dim=config["hidden_size"] // config["num_key_value_heads"]), targets, r
            ),
        ),
        ("left out the number of layers: peft adds the adapters to every layer", expected / layers),
    ]


# --- pack_nf4 ------------------------------------------------------------------------------------------------


def of_pack_nf4(codes: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
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


# --- wrong answers written out ---------------------------------------------------------------------------

PLANTED = {  # graded end to end
    "kv_query_heads": Planted(
        "kv_cache_bytes_from_config",
        "def kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2):\n"
        "    d = config.get('head_dim') or config['hidden_size'] // config['num_attention_heads']\n"
        "    heads = config['num_attention_heads']\n"
        "    return 2 * config['num_hidden_layers'] * heads * d * seq_len * batch * bytes_per_element\n",
        {  # not Gemma-7B's check: that model has a key-value head per query head
            "kv_cache_bytes_from_config.smollm2",
            "kv_cache_bytes_from_config.llama3",
            "kv_cache_bytes_from_config.random",
        },
        "num_key_value_heads",
    ),
    "kv_ignores_head_dim": Planted(
        "kv_cache_bytes_from_config",
        "def kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2):\n"
        "    d = config['hidden_size'] // config['num_attention_heads']\n"
        "    kv = config['num_key_value_heads']\n"
        "    return 2 * config['num_hidden_layers'] * kv * d * seq_len * batch * bytes_per_element\n",
        {"kv_cache_bytes_from_config.head_dim", "kv_cache_bytes_from_config.random"},
        "head_dim",
    ),
    "lora_kv_like_q": Planted(
        "lora_trainable_parameters",
        "def lora_trainable_parameters(config, target_modules, r):\n"
        "    h, f = config['hidden_size'], config['intermediate_size']\n"
        "    shapes = {'q_proj': (h, h), 'k_proj': (h, h), 'v_proj': (h, h), 'o_proj': (h, h),\n"
        "              'gate_proj': (h, f), 'up_proj': (h, f), 'down_proj': (f, h)}\n"
        "    return config['num_hidden_layers'] * sum(r * sum(shapes[n]) for n in target_modules)\n",
        {"lora_trainable_parameters.smollm2_qv", "lora_trainable_parameters.all_linear"},
        "num_key_value_heads",
    ),
    "lora_a_only": Planted(
        "lora_trainable_parameters",
        "def lora_trainable_parameters(config, target_modules, r):\n"
        "    h, f = config['hidden_size'], config['intermediate_size']\n"
        "    ins = {'q_proj': h, 'k_proj': h, 'v_proj': h, 'o_proj': h, 'gate_proj': h, 'up_proj': h, 'down_proj': f}\n"
        "    return config['num_hidden_layers'] * sum(r * ins[n] for n in target_modules)\n",
        {
            "lora_trainable_parameters.smollm2_qv",
            "lora_trainable_parameters.all_linear",
            "lora_trainable_parameters.random",
        },
        "counted A only",
    ),
    "lora_ignores_head_dim": Planted(
        "lora_trainable_parameters",
        "def lora_trainable_parameters(config, target_modules, r):\n"
        "    h, f = config['hidden_size'], config['intermediate_size']\n"
        "    kv = config['num_key_value_heads'] * h // config['num_attention_heads']\n"
        "    shapes = {'q_proj': (h, h), 'k_proj': (h, kv), 'v_proj': (h, kv), 'o_proj': (h, h),\n"
        "              'gate_proj': (h, f), 'up_proj': (h, f), 'down_proj': (f, h)}\n"
        "    return config['num_hidden_layers'] * sum(r * sum(shapes[n]) for n in target_modules)\n",
        {"lora_trainable_parameters.head_dim"},
        "head_dim",
    ),
    "pack_keeps_pairs_2d": Planted(
        "pack_nf4",
        "def pack_nf4(codes):\n    pairs = codes.reshape(-1, 1, 2)\n    return (pairs[..., 0] << 4) | pairs[..., 1]\n",
        {"pack_nf4.example", "pack_nf4.random"},
        "1-D",
    ),
    "pack_low_first": Planted(
        "pack_nf4",
        "def pack_nf4(codes):\n    return (codes[1::2] << 4) | codes[0::2]\n",
        {"pack_nf4.example", "pack_nf4.random"},
        "high nibble",
    ),
    "pack_int64": Planted(
        "pack_nf4",
        "def pack_nf4(codes):\n    codes = codes.long()\n    return codes[0::2] * 16 + codes[1::2]\n",
        {"pack_nf4.example", "pack_nf4.random"},
        "torch.uint8",
    ),
}

KV = "def kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2):\n"
KV_HEAD_DIM = "    d = config.get('head_dim') or config['hidden_size'] // config['num_attention_heads']\n"
LORA = (
    "def lora_trainable_parameters(config, target_modules, r):\n"
    "    h, f, heads, kv = (config[key] for key in ('hidden_size', 'intermediate_size', "
    "'num_attention_heads', 'num_key_value_heads'))\n"
    "{head_dim}"
    "    shapes = {{'q_proj': (h, heads * d), 'k_proj': (h, kv * d), 'v_proj': (h, kv * d), 'o_proj': (heads * d, h),\n"
    "              'gate_proj': (h, f), 'up_proj': (h, f), 'down_proj': (f, h)}}\n"
    "    return config['num_hidden_layers'] * sum(r * sum(shapes[n]) for n in set(target_modules))\n"
)
KV_ALL = {f"kv_cache_bytes_from_config.{name}" for name in ("smollm2", "llama3", "head_dim", "random")}

JUDGED = {  # judged in the tests' process (conftest.assert_caught)
    "kv_without_batch": Planted(
        "kv_cache_bytes_from_config",
        KV + KV_HEAD_DIM + "    return 2 * config['num_hidden_layers'] * config['num_key_value_heads'] * d * seq_len"
        " * bytes_per_element\n",
        {
            "kv_cache_bytes_from_config.llama3",
            "kv_cache_bytes_from_config.head_dim",
            "kv_cache_bytes_from_config.random",
        },
        "left out the batch",
    ),
    "kv_without_bytes": Planted(
        "kv_cache_bytes_from_config",
        KV + KV_HEAD_DIM + "    return 2 * config['num_hidden_layers'] * config['num_key_value_heads'] * d * seq_len"
        " * batch\n",
        KV_ALL - {"kv_cache_bytes_from_config.random"},  # whose draw is 1 byte an element here
        # (at SmolLM2's and Llama's default of 2 bytes it reads as the factor 2 missing too, and says both)
        "left out bytes_per_element",
    ),
    "kv_fp16_always": Planted(
        "kv_cache_bytes_from_config",
        KV + KV_HEAD_DIM + "    return 2 * config['num_hidden_layers'] * config['num_key_value_heads'] * d * seq_len"
        " * batch * 2\n",
        {"kv_cache_bytes_from_config.head_dim", "kv_cache_bytes_from_config.random"},
        "bytes_per_element fixed at 2",
    ),
    "kv_head_dim_of_the_kv_heads": Planted(
        "kv_cache_bytes_from_config",
        KV + "    d = config.get('head_dim') or config['hidden_size'] // config['num_key_value_heads']\n"
        "    return 2 * config['num_hidden_layers'] * config['num_key_value_heads'] * d * seq_len * batch"
        " * bytes_per_element\n",
        {"kv_cache_bytes_from_config.smollm2", "kv_cache_bytes_from_config.llama3"},
        "hidden_size // num_key_value_heads",
    ),
    "lora_head_dim_of_the_kv_heads": Planted(
        "lora_trainable_parameters",
        LORA.format(head_dim="    d = config.get('head_dim') or h // kv\n"),
        {"lora_trainable_parameters.smollm2_qv", "lora_trainable_parameters.all_linear"},
        "hidden_size // num_key_value_heads",
    ),
}
