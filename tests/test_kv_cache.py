"""Chapter 4: the cache's size against published figures, cached steps against full attention,
paged against contiguous allocation, the chapter's figures, and the grader's hints for planted mistakes."""

import re

import pytest
import torch

from autograder.mistakes import judged, planted
from course import kv_cache, paths, withheld
from course.model import attention_reference, causal_mask
from course.plots import kv_cache as plots
from course.plots._widgets import figure_png

from conftest import assert_named, check_cell, judged_in_process

ANSWERS = withheld.answers("04_kv_cache")  # the solution cells


def test_cache_bytes_match_published_figures():
    sized = {"kv_cache_bytes": ANSWERS.kv_cache_bytes}
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 1, **sized) == 512 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-3-8B"], 1, **sized) == 128 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 32768, **sized) == pytest.approx(17.18e9, rel=1e-3)


def test_cached_steps_equal_causal_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    cache_k, cache_v, outs = torch.zeros(0, 16, dtype=torch.float64), torch.zeros(0, 16, dtype=torch.float64), []
    for t in range(40):
        out, cache_k, cache_v = ANSWERS.attention_step(q[t], k[t], v[t], cache_k, cache_v)
        outs.append(out)
    assert torch.allclose(torch.stack(outs), attention_reference(q, k, v, causal_mask(40, 40)), atol=1e-12)


def test_paging_uses_memory_better_than_contiguous():
    trace = kv_cache.request_trace(120, seed=3)
    contiguous = kv_cache.simulate_allocation(trace, 32768, None)
    paged = kv_cache.simulate_allocation(trace, 32768, 16, pages_needed=ANSWERS.pages_needed)
    assert 0.15 < contiguous.used_share < 0.45  # PagedAttention measured 20.4-38.2% in earlier systems
    assert paged.used_share > 0.96  # vLLM: under 4% waste
    assert paged.mean_batch > 2 * contiguous.mean_batch and paged.steps < contiguous.steps
    for reserved, used, _ in paged.timeline:
        assert used <= reserved <= 32768
    assert ANSWERS.pages_needed([5, 16, 17], 16) == 4
    with pytest.raises(ValueError, match="pass it"):
        kv_cache.simulate_allocation(trace, 32768, 16)


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_kv_cache("Llama-3-8B", 32768, 4, n_kv_heads=32, bytes_per_element=1),  # the course's
        lambda: plots.plot_paging(64, 16384, n=60),
        lambda: plots.plot_cache_speed([16, 32, 64], [0.1, 0.2, 0.4], [0.2, 0.8, 3.0]),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


PLANTED = planted("kv_cache")  # autograder/mistakes/kv_cache.py


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("kv_cache")  # more plausible mistakes, judged in this process (conftest.assert_caught)
BYTES = "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):\n    return "

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


@pytest.mark.parametrize("name", ["step_returns_v", "step_divides_by_d", "pages_counts_sequences"])
def test_the_check_cell_names_a_mistake_that_once_passed_or_went_unnamed(name, capsys):
    """Issue 55: attention_step returning v earned the empty-cache check (on an empty cache the
    output is v itself: the check now goes on decoding on the caches it returns); scores divided by
    D were told only "8 of 8 values differ"; pages_needed returning len(lengths) was told "pooled
    the sequences" (the same count on the old example). Each is named before grading."""
    printed = check_cell(MISTAKES[name].grade_id, MISTAKES[name].source, capsys)
    assert MISTAKES[name].words in printed and "pooled" not in printed, printed
    assert "ok  " not in printed, printed  # no visible check of the exercise passes it


def test_the_gqa_demo_says_what_is_equal_and_what_is_not():
    """Issue 55: the demo printed "GQA equals MHA with repeated key-value heads", which led to the quiz's
    wrong choice that a model with fewer key-value heads gives the 32-head model's outputs."""
    source = (paths.SOLUTIONS / "04_kv_cache.py").read_text()
    section = re.sub(
        r"\n# ?", " ", source[source.index("## 3. MHA, GQA, MQA") : source.index("## 4. Paging the cache")]
    )
    assert "GQA equals MHA" not in section
    assert "computes what MHA computes over those 2 heads repeated" in section
    assert "so its outputs differ from the 32-head model's" in section


def test_mistakes_that_give_the_same_number_share_a_hint_naming_each():
    """bytes_per_element taken as 2 gives, at 4 bytes, the number of a cache without its factor 2: the
    hint names both, never the factor 2 alone."""
    from autograder.mistakes import kv_cache as known

    expected = 2 * 32 * 8 * 128 * 100 * 2 * 4
    mistakes = known.of_kv_cache_bytes(32, 8, 128, 100, 2, 4)
    hints = [hint for hint, value in mistakes if value == expected / 2]
    assert len(hints) == 1 and "factor 2 is missing" in hints[0] and "taken as 2" in hints[0], hints
    at_one_byte = known.of_kv_cache_bytes(32, 8, 128, 100, 2, 1)
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


def test_the_paging_reading_follows_the_numbers():
    """The prose once said paging was "barely better" at pages of 1024, beside 49.9% against 29.0%."""

    def run(share, batch):
        return kv_cache.AllocationResult(100, batch, share, 0, [])

    reading = kv_cache.paging_reading(run(0.290, 13.6), run(0.499, 21.2), 1024)
    assert reading == (
        "pages of 1024 use 1.7x contiguous allocation's share of memory (49.9% against 29.0%) and run 1.6x "
        "the sequences at a time"
    )
    assert "about as much of their memory" in kv_cache.paging_reading(run(0.29, 13.6), run(0.30, 14.0), 2048)
    assert "use less of their memory" in kv_cache.paging_reading(run(0.5, 10.0), run(0.3, 8.0), 2048)
    trace = kv_cache.request_trace(200)
    measured = [
        kv_cache.simulate_allocation(trace, 32768, page, pages_needed=ANSWERS.pages_needed) for page in (None, 1024)
    ]
    assert "1.7x contiguous allocation's share" in kv_cache.paging_reading(*measured, 1024)


def test_sizes_read_in_the_unit_that_fits():
    """A small cache read "0.0 GB" on the chart; three significant figures in the unit that fits."""
    labels = [plots.size_label(n) for n in (17.18e9, 67.1e6, 262144, 999.96e6, 512, 2.7e12)]
    assert labels == ["17.2 GB", "67.1 MB", "262 kB", "1 GB", "512 bytes", "2.7 TB"]
    chart = plots.KVCacheChart().update("Falcon-7B", 512, 1, 1, 0.5)
    texts = [t.get_text() for t in chart.legend.get_texts()] + [t.get_text() for t in chart.bar_values]
    assert "512 tokens: 1.05 MB" in texts and "1.05 MB" in texts and not any("0.0" in t for t in texts), texts


def test_the_table_and_widgets_use_the_learners_functions_once_written(capsys):
    """Before kv_cache_bytes and pages_needed are written, the table, the course model's sizes, the
    simulation and both widgets say they show the course's numbers; once written, that they use the
    learner's, and they do."""
    from course.model import ModelConfig

    def blank(*args):
        raise NotImplementedError

    assert kv_cache.yours({"kv_cache_bytes": blank}, "kv_cache_bytes", "this table").__name__ == "kv_cache_bytes"
    assert "Your `kv_cache_bytes` is not written yet: the course's" in capsys.readouterr().out

    def doubled(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):
        return 4 * n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element

    def one_page_each(lengths, page_size):
        return len(lengths)

    namespace = {"kv_cache_bytes": doubled, "pages_needed": one_page_each}
    assert kv_cache.yours(namespace, "kv_cache_bytes", "this table") is doubled
    assert "Your `kv_cache_bytes` draws this table." in capsys.readouterr().out
    course, mine = kv_cache.published_rows(ANSWERS.kv_cache_bytes), kv_cache.published_rows(doubled)
    assert [r["at_32k"] * 2 for r in course] == [r["at_32k"] for r in mine]
    assert [-(-r["crossover"] // 2) for r in course] == [r["crossover"] for r in mine]
    config = ModelConfig(vocab_size=256, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
    assert kv_cache.head_sharing_sizes(config, kv_cache_bytes=doubled)["MQA"] == (
        1,
        2 * kv_cache.head_sharing_sizes(config, kv_cache_bytes=ANSWERS.kv_cache_bytes)["MQA"][1],
    )
    trace = kv_cache.request_trace(50, seed=1)
    ours = kv_cache.simulate_allocation(trace, 8192, 16, pages_needed=ANSWERS.pages_needed)
    theirs = kv_cache.simulate_allocation(trace, 8192, 16, pages_needed=one_page_each)
    assert ours.timeline != theirs.timeline
    assert plots.KVCacheChart(doubled).update().figure and plots.PagingChart(one_page_each, 50, 1).update(16, 8192)


def test_a_chart_asks_its_function_for_every_view_when_built():
    """The charts ask the exercise's function, when built, everything their sliders can show, so the
    learners' copy's recording of a notebook's first view holds every view (no hook in the charts)."""
    asked = []

    def counting(*args):
        asked.append(args)
        return ANSWERS.kv_cache_bytes(*args)

    chart = plots.KVCacheChart(counting)
    before = len(asked)
    assert before >= len(kv_cache.PUBLISHED) * len(plots.DTYPES)
    for model in kv_cache.PUBLISHED:
        for heads in (0, *plots.KV_HEADS):
            for element in plots.DTYPES.values():
                chart.update(model, 4096, 8, heads, element)
    assert len(asked) == before
    pages = []
    paging = plots.PagingChart(lambda lengths, page: pages.append(page) or ANSWERS.pages_needed(lengths, page))
    counted = len(pages)
    for page in plots.PAGE_SIZES:
        paging.update(page, 16384)
    assert len(pages) == counted and set(pages) == set(plots.PAGE_SIZES)


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


# The course's own answer to the exercise a scenario drives (attention_step.empty decodes from an empty
# cache on the caches it returns), for test_grader's check that scenarios run on their own.
SCENARIO_ANSWERS = {"attention_step": ANSWERS.attention_step}
