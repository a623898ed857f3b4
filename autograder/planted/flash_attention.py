"""Chapter 5's planted mistakes: the online-softmax update (``BLOCKWISE``) and blockwise attention."""

from autograder.planted import Planted

BLOCKWISE = """
def online_softmax_update(m, l, o, scores, v):
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    correction = {correction}
    p = torch.exp(scores - {shift})
    return m_new, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v

def blockwise_attention(q, k, v, block):
    m = torch.full((q.shape[0], 1), float("-inf"))
    l = torch.zeros(q.shape[0], 1)
    o = torch.zeros(q.shape[0], v.shape[-1])
    for start in range(0, k.shape[0], block):
        scores = q @ k[start:start + block].T / math.sqrt(q.shape[-1])
        m, l, o = online_softmax_update(m, l, o, scores, v[start:start + block])
    return o / l
"""
PLANTED = {  # blockwise_attention calls the learner's own online_softmax_update
    "flash_no_rescale": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="m_new"),
        {"online_softmax_update.larger", "blockwise_attention.block16"},
        "rescaled",
        calls_it={"blockwise_attention"},
    ),
    "flash_overflow": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="0"),
        {"blockwise_attention.large_scores"},
        "overflows",
        calls_it={"blockwise_attention"},
    ),
    "flash_says_which_helper_is_wrong": Planted(
        "online_softmax_update",
        BLOCKWISE.format(correction="torch.ones_like(m)", shift="m_new"),
        {"blockwise_attention.block16", "blockwise_attention.uneven"},
        "calls your online_softmax_update, which fails its own checks",
        calls_it={"blockwise_attention"},
    ),
    "flash_full_score_matrix": Planted(  # the case: right numbers, the exercise's point missed
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix"},
        "as large as the whole",
    ),
    "flash_hides_from_the_recorder": Planted(  # right numbers, the full matrix computed out of the recorder's sight
        "blockwise_attention",
        "from torch.utils._python_dispatch import _disable_current_modes\n\n"
        "def blockwise_attention(q, k, v, block):\n"
        "    with _disable_current_modes():\n"
        "        return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n",
        {"blockwise_attention.no_score_matrix", "blockwise_attention.key_blocks"},
        "switched off torch's dispatch modes",
    ),
    "flash_query_blocks": Planted(  # saves memory, but an ordinary softmax over all keys per block of queries
        "blockwise_attention",
        "def blockwise_attention(q, k, v, block):\n"
        "    rows = [torch.softmax(q[s:s + block] @ k.T / math.sqrt(q.shape[-1]), dim=-1) @ v\n"
        "            for s in range(0, q.shape[0], block)]\n"
        "    return torch.cat(rows)\n",
        {"blockwise_attention.key_blocks"},
        "a block of 16 queries against all 97 keys",
    ),
}
