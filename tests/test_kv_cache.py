"""Chapter 4: the cache's size against published figures, cached steps against full attention,
paged against contiguous allocation, the chapter's figures, and the grader's hints for planted mistakes."""

import pytest
import torch

from autograder.planted import Planted, planted
from course import kv_cache
from course.model import attention_reference, causal_mask
from course.plots import kv_cache as plots
from course.plots._widgets import figure_png

from conftest import assert_named, check_cell, judged_in_process


def test_cache_bytes_match_published_figures():
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 1) == 512 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-3-8B"], 1) == 128 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 32768) == pytest.approx(17.18e9, rel=1e-3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_cache.kv_cache_bytes(32, 0, 128, 10)


def test_cached_steps_equal_causal_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    cache_k, cache_v, outs = torch.zeros(0, 16, dtype=torch.float64), torch.zeros(0, 16, dtype=torch.float64), []
    for t in range(40):
        out, cache_k, cache_v = kv_cache.attention_step(q[t], k[t], v[t], cache_k, cache_v)
        outs.append(out)
    assert torch.allclose(torch.stack(outs), attention_reference(q, k, v, causal_mask(40, 40)), atol=1e-12)


def test_paging_uses_memory_better_than_contiguous():
    trace = kv_cache.request_trace(120, seed=3)
    contiguous = kv_cache.simulate_allocation(trace, 32768, None)
    paged = kv_cache.simulate_allocation(trace, 32768, 16)
    assert 0.15 < contiguous.used_share < 0.45  # PagedAttention measured 20.4-38.2% in earlier systems
    assert paged.used_share > 0.96  # vLLM: under 4% waste
    assert paged.mean_batch > 2 * contiguous.mean_batch and paged.steps < contiguous.steps
    for reserved, used, _ in paged.timeline:
        assert used <= reserved <= 32768
    assert kv_cache.pages_needed([5, 16, 17], 16) == 4


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_kv_cache("Llama-3-8B", 32768, 4, n_kv_heads=32, bytes_per_element=1),
        lambda: plots.plot_paging(64, 16384, n=60),
        lambda: plots.plot_cache_speed([16, 32, 64], [0.1, 0.2, 0.4], [0.2, 0.8, 3.0]),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


PLANTED = planted("kv_cache")


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


STEP = """
def attention_step(q, k, v, cache_k, cache_v):
    cache_k = torch.cat([cache_k, k[None]], dim=0)
    cache_v = torch.cat([cache_v, v[None]], dim=0)
    weights = torch.softmax(cache_k @ q / math.sqrt(q.shape[-1]), dim=0)
    return {returned}
"""
ALL_STEPS = {"attention_step.small", "attention_step.empty", "attention_step.large"}
BYTES = "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):\n    return "

# More plausible mistakes, judged in this process (conftest.assert_caught).
MISTAKES = {
    "bytes_in_gb": Planted(
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element / 1e9\n",
        {"kv_cache_bytes.llama2_token", "kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "returned GB",
    ),
    "bytes_without_batch": Planted(
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * bytes_per_element\n",
        {"kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "left out the batch",
    ),
    "bytes_per_element_taken_as_2": Planted(  # an fp16 cache written in: the factor 2 is there, the dtype's is not
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch * 2\n",
        {"kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"},
        "bytes_per_element was taken as 2",
    ),
    "bytes_without_bytes_per_element": Planted(  # at the default 2 bytes, the same number as without the factor 2
        "kv_cache_bytes",
        BYTES + "2 * n_layers * n_kv_heads * head_dim * seq_len * batch\n",
        {"kv_cache_bytes.llama2_token", "kv_cache_bytes.random"},
        "left out bytes_per_element",
    ),
    "step_returns_the_weights": Planted(
        "attention_step", STEP.format(returned="weights, cache_k, cache_v"), ALL_STEPS, "attention weights"
    ),
    "step_caches_swapped": Planted(
        "attention_step", STEP.format(returned="weights @ cache_v, cache_v, cache_k"), ALL_STEPS, "swapped"
    ),
    "step_new_row_first": Planted(
        "attention_step",
        STEP.format(returned="weights @ cache_v, cache_k, cache_v").replace(
            "torch.cat([cache_k, k[None]], dim=0)", "torch.cat([k[None], cache_k], dim=0)"
        ),
        {"attention_step.small", "attention_step.large"},
        "the new row went first",
    ),
    "pages_pooled": Planted(
        "pages_needed",
        "def pages_needed(lengths, page_size):\n    return math.ceil(sum(lengths) / page_size)\n",
        {"pages_needed.example", "pages_needed.random"},
        "pooled the sequences",
    ),
}

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "bytes_math_prod": (
        "kv_cache_bytes",
        BYTES + "math.prod([2, n_layers, n_kv_heads, head_dim, seq_len, batch, bytes_per_element])\n",
    ),
    "step_numpy_float64": (
        "attention_step",
        """
def attention_step(q, k, v, cache_k, cache_v):
    keys = np.vstack([cache_k.numpy(), k.numpy()[None]]).astype(np.float64)
    values = np.vstack([cache_v.numpy(), v.numpy()[None]]).astype(np.float64)
    scores = keys @ q.numpy().astype(np.float64) / np.sqrt(q.shape[0])
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    return torch.from_numpy(weights @ values), torch.from_numpy(keys), torch.from_numpy(values)
""",
    ),
    "step_sdpa": (
        "attention_step",
        """
def attention_step(q, k, v, cache_k, cache_v):
    cache_k, cache_v = torch.cat([cache_k, k.unsqueeze(0)]), torch.cat([cache_v, v.unsqueeze(0)])
    out = torch.nn.functional.scaled_dot_product_attention(q[None, None], cache_k[None], cache_v[None])
    return out.reshape(-1), cache_k, cache_v
""",
    ),
    "pages_integer_ceiling": (
        "pages_needed",
        "def pages_needed(lengths, page_size):\n    return sum(-(-n // page_size) for n in lengths)\n",
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)


@pytest.mark.parametrize("name", ["bytes_without_batch", "bytes_per_element_taken_as_2"])
def test_the_check_cell_catches_a_cache_size_that_ignores_an_argument(name, capsys):
    """A visible check gives a batch and a bytes_per_element other than the defaults: an answer that
    ignores either fails before grading, with its hint (the batch was once caught by hidden checks only)."""
    printed = check_cell("kv_cache_bytes", MISTAKES[name].source, capsys)
    assert "FAIL" in printed and MISTAKES[name].words in printed, printed


def test_mistakes_that_give_the_same_number_share_a_hint_naming_each():
    """bytes_per_element taken as 2 gives, at 4 bytes, the number of a cache without its factor 2: the
    hint names both, never the factor 2 alone."""
    from autograder.chapters import kv_cache as checks

    expected, mistakes = checks._bytes_numbers(32, 8, 128, 100, 2, 4)
    assert expected == 2 * 32 * 8 * 128 * 100 * 2 * 4
    hints = [hint for hint, value in mistakes if value == expected / 2]
    assert len(hints) == 1 and "factor 2 is missing" in hints[0] and "taken as 2" in hints[0], hints
    _, at_one_byte = checks._bytes_numbers(32, 8, 128, 100, 2, 1)
    assert "left out bytes_per_element" not in " ".join(h for h, _ in at_one_byte)  # the same as the answer there


def test_cache_speed_reading_states_the_length_from_which_each_factor_holds():
    reading = kv_cache.cache_speed_reading([32, 64, 128, 256], [0.1, 0.2, 0.4, 0.8], [0.15, 0.5, 2.2, 8.8])
    assert reading.startswith("the cache is 11.00x faster than recomputing at 256 tokens")
    assert (
        "at least 2x faster from 64 tokens on, 5x faster from 128 tokens on and 10x faster from 256 tokens on"
        in reading
    )
    assert "(8x the length) the time grew 8.0x with the cache and 58.7x without" in reading
    dip = kv_cache.cache_speed_reading([32, 64, 128], [1.0, 1.0, 1.0], [2.5, 1.5, 2.5])
    assert "at least 2x faster from 128 tokens on" in dip  # 64 tokens broke the run
    none = kv_cache.cache_speed_reading([32, 64], [1.0, 1.0], [1.2, 1.5])
    assert "not yet 2x faster at any of the lengths 32 and 64" in none


def test_cache_timings_time_both_ways_for_every_length():
    from course import checkpoints, corpus

    target = checkpoints.load("target")
    measured = kv_cache.cache_timings(target, corpus.encode("\n")[None], [4, 8], repeats=2, progress=False)
    assert measured["lengths"] == [4, 8]
    assert len(measured["with_cache"]) == len(measured["without_cache"]) == 2
    assert all(t > 0 for t in measured["with_cache"] + measured["without_cache"])
    with pytest.raises(ValueError, match="repeat"):
        kv_cache.cache_timings(target, corpus.encode("\n")[None], [4], repeats=0)


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.KVCacheChart: ({}, {"model": "Llama-3-8B", "batch": 8}),
    plots.PagingChart: ({}, {"page_size": 256}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_cache_speed": lambda: plots.plot_cache_speed([64, 256], [0.1, 0.4], [0.3, 4.0]),
}
