"""Chapter 8's planted mistakes: the KV cache and LoRA counted from a config, NF4 packing."""

from autograder.planted import Planted

PLANTED = {
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
