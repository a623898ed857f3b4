"""Chapter 5: exact blockwise attention at every block size, its stability, the IO model, the Triton
kernel through its interpreter, the chapter's figures, and the grader's hints for planted mistakes."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from autograder.mistakes import judged, planted
from autograder.mistakes.flash_attention import LOOP, RIGHT_UPDATE
from course import flash_attention, withheld
from course.plots import flash_attention as plots
from course.plots._widgets import figure_png

from conftest import assert_named, judged_in_process


@pytest.mark.parametrize("block", [1, 7, 16, 64, 100, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_attention_is_exact(block, causal):
    g = torch.Generator().manual_seed(block)
    q, k, v = (torch.randn(2, 3, 100, 16, generator=g, dtype=torch.float64) for _ in range(3))
    assert torch.allclose(
        flash_attention.batched_blockwise_attention(q, k, v, block, causal),
        flash_attention.naive_attention(q, k, v, causal),
        atol=1e-12,
    )


def test_blockwise_attention_is_stable_for_large_scores_and_checks_shapes():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(8, 16, generator=g) for _ in range(3))
    out = flash_attention.batched_blockwise_attention(q * 1000, k, v, 3)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="head dim"):
        flash_attention.batched_blockwise_attention(q, k[:, :8], v, 4)
    with pytest.raises(ValueError, match="block"):
        flash_attention.batched_blockwise_attention(q, k, v, 0)


def test_the_dispatcher_takes_the_torch_path_for_cpu_tensors():
    from course import kernels

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 30, 16, generator=g) for _ in range(3))
    expected = flash_attention.batched_blockwise_attention(q, k, v, 16, causal=True)
    assert torch.equal(kernels.attention(q, k, v, 16, causal=True), expected)


def test_io_model_tiled_moves_less_at_long_sequences():
    sram = 192 * 1024 / 2
    assert flash_attention.tiled_io_elements(16384, 64, sram) < flash_attention.standard_io_elements(16384, 64) / 5
    ratio = flash_attention.tiled_io_elements(32768, 64, sram) / flash_attention.tiled_io_elements(16384, 64, sram)
    assert 3.5 < ratio < 4.5  # Theta(N^2 d^2 / M): quadratic in N


TRITON_SCRIPT = textwrap.dedent("""
    import torch
    from course import flash_attention
    from course.kernels import flash_attention as kernel
    g = torch.Generator().manual_seed(0)
    cases = [((2, 3, 100, 32), False, 16), ((1, 2, 77, 16), True, 32), ((1, 1, 64, 64), True, 64),
             ((2, 50, 16), False, 16), ((1, 1, 40, 16), False, 128)]
    for shape, causal, block in cases:
        q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
        expected = flash_attention.naive_attention(q, k, v, causal)
        error = (kernel.blockwise_attention(q, k, v, block, causal) - expected).abs().max()
        assert error < 1e-5, (shape, causal, block, float(error))
    try:
        kernel.blockwise_attention(q, k, v, 24)
    except ValueError as e:
        assert "block" in str(e)
    else:
        raise AssertionError("block 24 accepted")
    print("ok", len(cases))
""")


def test_triton_kernel_matches_the_reference_in_the_interpreter():
    pytest.importorskip("triton", reason="triton is installed with the dev extra on Linux: pip install triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    # the interpreter is slow: the timeout is a ceiling for a hang, not a time budget
    done = subprocess.run([sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0 and "ok 5" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_online_softmax(step=3, block=4),
        lambda: plots.plot_io(n=16384, d=128, sram_kib=100),
        lambda: plots.plot_attention_timing(
            [128, 256], {"a": [1e-3, 3e-3], "b": [2e-3, 4e-3]}, {"a": [1.0, 4.0], "b": [0.5, 1.0]}
        ),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


PLANTED = planted("flash_attention")  # autograder/mistakes/flash_attention.py


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("flash_attention")  # more plausible mistakes, judged in this process (conftest.assert_caught)

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "update_written_with_numpy": (
        "online_softmax_update",
        RIGHT_UPDATE.replace("torch.exp(m - m_new)", "torch.from_numpy(np.exp((m - m_new).numpy()))"),
    ),
    "blockwise_numpy_loops_float64": (
        "blockwise_attention",
        """
def blockwise_attention(q, k, v, block):
    q, k, v = (t.numpy().astype(np.float64) for t in (q, k, v))
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        m, l, o = -np.inf, 0.0, np.zeros(v.shape[1])
        for start in range(0, k.shape[0], block):
            s = k[start:start + block] @ q[i] / math.sqrt(q.shape[1])
            m_new = max(m, s.max())
            p = np.exp(s - m_new)
            l = l * math.exp(m - m_new) + p.sum()
            o = o * math.exp(m - m_new) + p @ v[start:start + block]
            m = m_new
        out[i] = o / l
    return torch.from_numpy(out)
""",
    ),
    "blockwise_one_query_at_a_time": (
        "blockwise_attention",
        RIGHT_UPDATE
        + """
def blockwise_attention(q, k, v, block):
    rows = []
    for i in range(q.shape[0]):
        m, l, o = torch.tensor([[-math.inf]]), torch.zeros(1, 1), torch.zeros(1, v.shape[1])
        for start in range(0, k.shape[0], block):
            scores = q[i:i + 1] @ k[start:start + block].T / math.sqrt(q.shape[1])
            m, l, o = online_softmax_update(m, l, o, scores, v[start:start + block])
        rows.append(o / l)
    return torch.cat(rows)
""",
    ),
    "blockwise_float64_inside": (
        "blockwise_attention",
        RIGHT_UPDATE
        + LOOP.format(starts="range(0, k.shape[0], block)", returned="(o / l)").replace(
            "    m = torch.full", "    q, k, v = q.double(), k.double(), v.double()\n    m = torch.full"
        ),
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.OnlineSoftmaxChart: ({"step": 2}, {"step": 5, "block": 4}),
    plots.IOChart: ({}, {"n": 65536, "d": 128}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_attention_timing": lambda: plots.plot_attention_timing(
        [256, 1024],
        {"sdpa": [1e-3, 9e-3], "blockwise": [2e-3, 3e-2]},
        {"sdpa": [1.0, 4.0], "blockwise": [1.0, 4.0]},
    ),
}


def test_two_series_with_the_same_numbers_are_both_visible():
    """Blockwise attention's memory once hid exactly under SDPA's: a twin is drawn dashed and hollow."""
    ax_memory = FIGURES["plot_attention_timing"]().axes[1]
    first, twin = ax_memory.get_lines()
    assert torch.allclose(torch.as_tensor(first.get_ydata()), torch.as_tensor(twin.get_ydata()))
    assert (first.get_linestyle(), first.get_markerfacecolor()) != (twin.get_linestyle(), twin.get_markerfacecolor())
    assert "(= sdpa)" in twin.get_label()


PROSE_WARNINGS = {  # mistakes the chapter's prose or prompt warns about: its visible checks must catch each
    "full_score_matrix": "def blockwise_attention(q, k, v, block):\n"
    "    return torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1) @ v\n",
    "query_blocks_against_all_keys": "def blockwise_attention(q, k, v, block):\n"
    "    return torch.cat([torch.softmax(q[s:s + block] @ k.T / math.sqrt(q.shape[-1]), -1) @ v\n"
    "                      for s in range(0, q.shape[0], block)])\n",
}

# the course's answers to the exercises its checks drive with a scenario
SCENARIO_ANSWERS = {"blockwise_attention": withheld.answers("05_flash_attention").blockwise_attention}

SEED_QUESTIONS = [  # the tutorial's questions that sit in this chapter's quiz, by the words that identify them
    "stay exact while never forming the full score matrix",
]


@pytest.mark.parametrize("name, above", [("larger", True), ("smaller", False)])
def test_update_probes_put_every_rows_block_maximum_where_the_check_says(name, above):
    """A row whose block maximum fell on the other side would let an answer that never rescales
    pass "larger" or fail "smaller" by the draw of the hidden inputs (7 in 5,000 draws did)."""
    from autograder.chapters import exercise_by_id

    check = next(c for c in exercise_by_id("online_softmax_update").checks if c.name == name)
    for seed in range(500):
        m, _, _, scores, _ = check.probe(np.random.default_rng(seed))["args"]
        block_max = scores.amax(dim=-1, keepdim=True)
        assert bool(((block_max > m) if above else (block_max < m)).all()), seed
