"""Chapter 4's planted mistakes: the KV cache's size."""

from autograder.planted import Planted

PLANTED = {
    "kv_no_factor_2": Planted(
        "kv_cache_bytes",
        "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):\n"
        "    return n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element\n",
        {"kv_cache_bytes.llama2_token", "kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "factor 2",
    ),
}
