"""Chapter 2: the paper's arithmetic, the SVD floor, the adapter's contract, adapters hot-swapped
on the course model, the chapter's figures, and the grader's hints for planted mistakes."""

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from autograder.mistakes import judged, planted
from autograder.mistakes.lora import lora_class
from course import checkpoints, corpus, lora, withheld
from course.plots import lora as plots
from course.plots._widgets import figure_png

from conftest import assert_named, check_cell, judged_in_process, verdicts

ANSWERS = withheld.answers("02_lora")  # the solution cells
COURSE = withheld.module("course.answers.lora")  # the course's runs with them


def test_trainable_parameters():
    assert ANSWERS.lora_parameters(4096, 4096, 8) == 65_536
    assert ANSWERS.lora_parameters(4096, 4096, 8) / 4096**2 == pytest.approx(0.0039, abs=1e-4)
    assert ANSWERS.lora_parameters(1000, 1000, 8) == 16_000


def test_svd_floor_drops_to_the_noise_at_the_true_rank():
    delta = lora.low_rank_change(256, 256, true_rank=4, noise=0.03, seed=0)
    errors = [ANSWERS.best_low_rank_error(delta, r) for r in range(1, 9)]
    assert all(a >= b for a, b in itertools.pairwise(errors))
    assert errors[2] > 0.2 and errors[3] < 0.05  # below rank 4 the change cannot be captured
    assert errors[7] == pytest.approx(errors[3], abs=0.01)  # beyond it, more rank buys nothing


def test_svd_floor_matches_an_explicit_truncated_svd_and_beats_other_factorisations():
    delta = torch.randn(40, 30, generator=torch.Generator().manual_seed(1))
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    approx = (u[:, :5] * s[:5]) @ vh[:5]
    assert ANSWERS.best_low_rank_error(delta, 5) == pytest.approx(((delta - approx).norm() / delta.norm()).item())
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        b, a = torch.randn(40, 5, generator=g), torch.randn(5, 30, generator=g)
        coefficient = ((b @ a) * delta).sum() / (b @ a).square().sum()  # best scale of this rank-5 guess
        guess = coefficient * (b @ a)
        assert ((delta - guess).norm() / delta.norm()).item() >= ANSWERS.best_low_rank_error(delta, 5)


def test_adapter_starts_equal_to_the_base_and_trains_only_its_factors():
    torch.manual_seed(0)
    base = nn.Linear(32, 24)
    adapted = ANSWERS.LoRALinear(base, rank=4, alpha=8)
    x = torch.randn(5, 32)
    assert torch.equal(adapted(x), base(x))
    assert (adapted.lora_B == 0).all() and adapted.scale == 2.0
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert trainable == {"lora_A", "lora_B"}
    assert ANSWERS.LoRALinear(nn.Linear(8, 8), rank=2).scale == 1.0  # alpha defaults to the rank
    assert adapted.base is base


def test_merge_gives_identical_outputs_and_leaves_the_base_alone():
    torch.manual_seed(0)
    base = nn.Linear(16, 12)
    before = base.weight.detach().clone()
    adapted = ANSWERS.LoRALinear(base, rank=3, alpha=6)
    with torch.no_grad():
        adapted.lora_B.normal_()
    x = torch.randn(7, 16)
    merged = adapted.merge()
    assert torch.allclose(merged(x), adapted(x), atol=1e-5)
    assert torch.equal(base.weight, before)


def test_rank_one_adapter_learns_a_rank_one_change():
    torch.manual_seed(0)
    base = nn.Linear(20, 20, bias=False)
    target_change = torch.outer(torch.randn(20), torch.randn(20)) * 0.3
    adapted = ANSWERS.LoRALinear(base, rank=1)
    optimizer = torch.optim.Adam([adapted.lora_A, adapted.lora_B], lr=0.03)
    x = torch.randn(256, 20)
    wanted = x @ (base.weight + target_change).detach().T
    for _ in range(600):
        loss = (adapted(x) - wanted).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    learned = adapted.merge().weight.detach() - base.weight.detach()
    assert (learned - target_change).norm() / target_change.norm() < 0.05


def test_fine_tuning_memory_for_7b():
    assert ANSWERS.finetune_memory_gib(7e9, "full") == pytest.approx(104.3, abs=0.1)
    assert ANSWERS.finetune_memory_gib(7e9, "lora") == pytest.approx(13.04, abs=0.01)
    assert ANSWERS.finetune_memory_gib(7e9, "qlora") == pytest.approx(3.26, abs=0.01)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: lora.low_rank_change(10, 10, 0), "true_rank must be a positive"),
        (lambda: lora.low_rank_change(10.5, 10, 2), "d_out must be a positive"),
        (lambda: lora.make_adapter(nn.Sequential(nn.Linear(4, 4)), 2, layer=ANSWERS.LoRALinear), "no nn.Linear named"),
        (lambda: lora.finetune(nn.Linear(2, 2), [], torch.zeros(10, dtype=torch.long), 1, 1e-3), "nothing to train"),
    ],
)
def test_bad_arguments_say_what_to_do(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- adapters on the whole model -----------------------------------------------------------------


def test_adapters_hot_swap_without_touching_the_base():
    model = checkpoints.load("draft")
    fingerprint = lora.weights_fingerprint(model)
    windows = corpus.tokens("validation")[: 2 * 65].reshape(2, 65)[:, :-1]
    with torch.no_grad():
        plain = model(windows)
    first = lora.make_adapter(model, 2, layer=ANSWERS.LoRALinear)
    second = lora.make_adapter(model, 4, seed=1, layer=ANSWERS.LoRALinear)
    lora.use_adapter(model, first)
    with torch.no_grad():
        assert torch.allclose(model(windows), plain, atol=1e-6)  # B = 0: the adapter starts at the base
    lora.finetune(
        model,
        lora.adapter_parameters(first),
        corpus.domain_tokens("adapt"),
        3,
        lr=1e-2,
        batch=2,
        seq_len=32,
        progress=False,
    )
    with torch.no_grad():
        adapted = model(windows)
    assert not torch.allclose(adapted, plain, atol=1e-4)
    lora.use_adapter(model, second)
    with torch.no_grad():
        assert torch.allclose(model(windows), plain, atol=1e-6)
    lora.use_adapter(model, first)
    with torch.no_grad():
        assert torch.equal(model(windows), adapted)
    lora.use_adapter(model, None)
    assert lora.weights_fingerprint(model) == fingerprint
    other = checkpoints.load("draft")
    with pytest.raises(ValueError, match="another model"):
        lora.use_adapter(other, first)


def _notebook_class(source: str) -> type:
    namespace = {"math": math, "torch": torch, "nn": nn}
    exec(source, namespace)
    return namespace["LoRALinear"]


BLANK_CLASS = """
class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha=None):
        super().__init__()
        raise NotImplementedError()
"""


def test_a_notebooks_own_lora_linear_makes_and_swaps_the_adapters():
    """The chapter's adapters are the learner's LoRALinear once written (written_layer): make_adapter
    builds it on each target, use_adapter swaps it in and out; the blank class gives None."""
    own = _notebook_class(lora_class())
    assert lora.written_layer({"LoRALinear": own}) is own
    assert lora.written_layer({"LoRALinear": _notebook_class(BLANK_CLASS)}) is None
    assert lora.written_layer({}) is None
    model = checkpoints.load("draft")
    fingerprint = lora.weights_fingerprint(model)
    adapter = lora.make_adapter(model, 2, layer=own)
    assert all(type(layer) is own for layer in adapter.values()) and len(adapter) == 4 * len(model.blocks)
    lora.use_adapter(model, adapter)
    assert sum(type(m) is own for m in model.modules()) == len(adapter)
    lora.use_adapter(model, lora.make_adapter(model, 4, layer=ANSWERS.LoRALinear))  # the course's own replaces it
    assert not any(type(m) is own for m in model.modules())
    lora.use_adapter(model, None)
    assert lora.weights_fingerprint(model) == fingerprint


def test_rank_errors_are_the_best_low_rank_errors_and_the_charts_ask_every_view_when_built():
    """The course's errors by change are the solution's best_low_rank_error on that change; a chart
    asks, when built, everything its sliders can show: moving them asks nothing more (the learners'
    copy records every view from the first)."""
    delta = lora.low_rank_change(64, 64, 3, 0.1, seed=2)
    errors = COURSE.rank_errors(64, 64, 3, 0.1, 2, [1, 3, 8])
    assert errors == [ANSWERS.best_low_rank_error(delta, r) for r in (1, 3, 8)]
    with withheld.recording() as built:
        rank_chart, memory_chart = plots.RankErrorChart(), plots.FinetuneMemoryChart()
    assert len(built["course.answers.lora.rank_errors"]) == len(plots.TRUE_RANKS) * len(plots.NOISES)
    with withheld.recording() as moved:
        rank_chart.update(rank=5, true_rank=16, noise=0.5)
        memory_chart.update(70e9, 80.0)
    assert moved == {}


def test_domain_split_keeps_evaluation_plays_apart():
    adapt, evaluation = corpus.domain_tokens("adapt"), corpus.domain_tokens("eval")
    assert len(adapt) > 2 * len(evaluation) > 0
    assert corpus.encode("MALVOLIO").tolist() not in [adapt[i : i + 8].tolist() for i in range(0, 2000)]
    with pytest.raises(ValueError, match="adapt"):
        corpus.domain_tokens("train")


# --- figures --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_rank_error(rank=2, noise=0.1),
        lambda: plots.plot_finetune_memory(13e9, 80.0),
        lambda: plots.plot_adapter_losses(1.9, {1: 1.8, 4: 1.7, 16: 1.65}, full=1.6, qlora={4: 1.72}),
        lambda: plots.plot_adapter_losses(1.9, {}, full=1.6),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


# --- the grader names planted mistakes --------------------------------------------------------------

PLANTED = planted("lora")


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("lora")  # more plausible mistakes, judged in this process (conftest.assert_caught)

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "parameters_from_shapes": (
        "lora_parameters",
        "def lora_parameters(d_in, d_out, rank):\n    shapes = [(rank, d_in), (d_out, rank)]\n"
        "    return sum(a * b for a, b in shapes)\n",
    ),
    "error_numpy_svd": (
        "best_low_rank_error",
        "def best_low_rank_error(delta, rank):\n"
        "    s = np.linalg.svd(delta.numpy().astype(np.float64), compute_uv=False)\n"
        "    return float(np.sqrt((s[rank:] ** 2).sum() / (s ** 2).sum()))\n",
    ),
    "error_from_the_truncation_itself": (
        "best_low_rank_error",
        "def best_low_rank_error(delta, rank):\n    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)\n"
        "    approx = u[:, :rank] @ torch.diag(s[:rank]) @ vh[:rank]\n"
        "    return ((delta.double() - approx).norm() / delta.double().norm()).item()\n",
    ),
    "lora_float64_einsum": (
        "lora_linear",
        lora_class().replace(
            "self.scale * (x @ self.lora_A.T @ self.lora_B.T)",
            "self.scale * torch.einsum('...i,ri,or->...o', x.double(), self.lora_A.double(), "
            "self.lora_B.double()).float()",
        ),
    ),
    "lora_merge_with_copy_and_functional": (
        "lora_linear",
        lora_class(
            merge="        import copy\n        merged = copy.deepcopy(self.base)\n        with torch.no_grad():\n"
            "            merged.weight += self.scale * (self.lora_B @ self.lora_A)\n        return merged"
        ),
    ),
    "memory_branches": (
        "finetune_memory",
        "def finetune_memory_gib(params, method):\n    if method == 'full':\n        per = 16\n"
        "    elif method == 'lora':\n        per = 2\n    else:\n        per = 4 / 8\n"
        "    return params * per / 1024 ** 3\n",
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)

FOUND_BY_LEARNERS = [  # mistakes that passed every visible check, or got a hint that did not fit, before
    "parameters_d_in_twice",
    "lora_forward_unscaled",
    "lora_base_not_frozen",
    "lora_init_reversed",
    "lora_forward_through_data",
    "memory_qlora_4_bytes",
    "memory_qlora_base_at_16_bits",
    "lora_forward_without_base",  # told "initialise lora_B to zeros" though it was zeros
    "lora_forward_returns_input",
    "lora_only_the_base",  # earned starts_at_base and frozen
]


@pytest.mark.parametrize("name", FOUND_BY_LEARNERS)
def test_the_check_cell_fails_what_learners_found_with_its_hint(name, capsys):
    """The learner's check cell (the visible checks, as seeded there) fails each, naming what the
    answer did; a raising step is told in words before torch's message."""
    mistake = MISTAKES[name]
    printed = check_cell(mistake.grade_id, mistake.source, capsys)
    assert "FAIL" in printed and mistake.words in printed, printed
    assert "hint: training: raised" not in printed and "LoRA keeps them in bf16" not in printed, printed


ONLY_THE_BASE = """
class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha=None):
        super().__init__()
        self.base = base

    def forward(self, x):
        return self.base(x)

    def merge(self):
        return self.base
"""
DOING_NOTHING = {  # answers that do no work: a constant, the first argument, zeros, the base layer alone
    "lora_parameters": ["return 0.0", "return d_in", "return 0"],
    "best_low_rank_error": ["return 0.0", "return delta", "return torch.zeros(())"],
    "finetune_memory": ["return 0.0", "return params", "return torch.zeros(())"],
}
SIGNATURES = {
    "lora_parameters": "def lora_parameters(d_in, d_out, rank):\n    ",
    "best_low_rank_error": "def best_low_rank_error(delta, rank):\n    ",
    "finetune_memory": "def finetune_memory_gib(params, method):\n    ",
}
NOTHING_CASES = [
    (grade_id, SIGNATURES[grade_id] + body + "\n") for grade_id, bodies in DOING_NOTHING.items() for body in bodies
]
NOTHING_CASES += [
    ("lora_linear", ONLY_THE_BASE),
    ("lora_linear", "def LoRALinear(base, rank, alpha=None):\n    return base\n"),
    ("lora_linear", MISTAKES["lora_only_the_base"].source),  # factors made, forward base(x), merge a copy
]


@pytest.mark.parametrize("grade_id, source", NOTHING_CASES)
def test_an_answer_that_does_no_work_earns_no_point(grade_id, source):
    found = verdicts(grade_id, source)
    assert not any(v.passed for v in found.values()), {i: v.hint for i, v in found.items()}


def _hard_coded(grade_id: str) -> str:
    """An answer that returns the values the exercise's visible checks print, for the inputs they
    print (the check cell's), and 0.0 for any other."""
    from autograder.chapters import exercise_by_id
    from autograder.selfcheck import VISIBLE_SEED

    printed = {
        "lora_parameters": lambda: {repr((4096, 11008, 8)): ANSWERS.lora_parameters(4096, 11008, 8)},
        "finetune_memory": lambda: {
            repr((7e9, m)): ANSWERS.finetune_memory_gib(7e9, m) for m in ("full", "lora", "qlora")
        },
    }
    if grade_id in printed:
        table = printed[grade_id]()
    else:  # best_low_rank_error: the value its visible check prints, whatever the change
        (check,) = [c for c in exercise_by_id(grade_id).checks if c.visible]
        probe = check.probe(np.random.default_rng(VISIBLE_SEED))
        table = {"any": ANSWERS.best_low_rank_error(*probe["args"])}
        return f"def best_low_rank_error(delta, rank):\n    return {table['any']!r}\n"
    signature = SIGNATURES[grade_id]
    arguments = "(d_in, d_out, rank)" if grade_id == "lora_parameters" else "(params, method)"
    return f"{signature}return {table!r}.get(repr({arguments}), 0.0)\n"


@pytest.mark.parametrize("grade_id", ["lora_parameters", "best_low_rank_error", "finetune_memory"])
def test_hard_coding_the_printed_values_earns_at_most_a_third(grade_id):
    from autograder.chapters import exercise_by_id

    exercise = exercise_by_id(grade_id)
    found = verdicts(grade_id, _hard_coded(grade_id))
    earned = sum(c.points for c in exercise.checks if found[c.id].passed)
    assert earned <= exercise.points / 3, {i: v.hint for i, v in found.items()}


def test_the_memory_prose_is_in_the_tables_unit():
    """Section 4 speaks in GiB, as its table and exercise do: the figure without the master copy too."""
    text = (Path(__file__).parents[1] / "solutions" / "02_lora.py").read_text()
    section = text.partition("## 4. The memory bill")[2].partition("## 5.")[0]
    assert " GB" not in section
    (found,) = re.findall(r"(\d+) bytes, (\d+) GiB for 7B", section)
    assert int(found[1]) == round(7e9 * int(found[0]) / 2**30) == 78


def test_the_gains_reading_follows_the_gains():
    """Section 5's reading of the adapters' gains: at 200 steps rank 1 gained four times rank 16's,
    which is not close together."""
    far = lora.gains_reading({1: 0.043, 4: 0.030, 16: 0.011}, 0.05)
    assert "close together" not in far and "the smallest rank gains most, rank 1 +0.043, 3.9x rank 16's +0.011" in far
    close = lora.gains_reading({1: 0.040, 4: 0.042, 16: 0.041}, 0.05)
    assert "the ranks sit close together: the least gain (rank 1, +0.040) is 95% of the most (rank 4, +0.042)" in close
    assert "no adapter gained" in lora.gains_reading({1: -0.01, 4: -0.02}, 0.05)


def test_before_the_learners_class_the_adapter_cells_show_the_courses_runs():
    """With no LoRALinear written, an experiment is the course's run with the solution's class (in
    the learners' copy, its recording: tests/test_learners_copy_runs.py runs the blank copy, where an
    unrecorded call raises), so the adapter-loss chart has a curve to read, labelled whose it is."""
    learned = lora.experiment("learned_change", None)
    assert learned["untouched"] and learned["error"] < 0.05
    figure = plots.plot_adapter_losses(
        1.6, {1: 1.5, 4: 1.45}, 1.42, adapters="LoRA (the course's LoRALinear, recorded)"
    )
    (curve,) = [line for line in figure.axes[0].get_lines() if line.get_label().startswith("LoRA (")]
    assert list(curve.get_ydata()) == [1.5, 1.45] and "recorded" in curve.get_label()


def test_the_rank_reading_follows_the_errors():
    """Section 2's last line: where the errors reach the noise, what the ranks below leave and what
    the largest buys, said from the numbers (the chapter's own and made-up ones)."""
    change = lora.SECTION_CHANGE
    errors = dict(zip(lora.SECTION_RANKS, COURSE.rank_errors(**change, ranks=lora.SECTION_RANKS), strict=True))
    said = lora.rank_reading(errors, lora.noise_share(**change))
    assert said.startswith("Rank 4 gets down") and "rank 2 leaves 60.0%" in said and "fitting part of the noise" in said
    flat = lora.rank_reading({1: 0.8, 2: 0.6, 4: 0.047, 8: 0.046, 32: 0.045}, 0.05)
    assert "rank 32 buys almost nothing more (4.5%), for 8x the parameters of rank 4" in flat
    assert "noise" not in flat.partition("rank 32")[2]
    assert lora.rank_reading({1: 0.8, 2: 0.6}, 0.05).startswith("No rank shown gets near the noise's own size (5.0%)")
    assert lora.noise_share(**change) == pytest.approx(0.05, abs=1e-3)


@pytest.mark.parametrize(
    "losses, words",
    [
        ((1.505, 1.507, 1.470, 1.470), "too little here (within 0.005) to tell"),
        ((1.5, 1.6, 1.45, 1.5), "the adapter made up 50% of the rounding's cost"),
        ((1.5, 1.6, 1.45, 1.452), "the adapter made up the rounding's cost"),
        ((1.5, 1.6, 1.45, 1.56), "made up none of the rounding's cost"),
    ],
)
def test_the_qlora_reading_follows_the_losses(losses, words):
    assert words in lora.qlora_reading(*losses)


def test_the_chapters_cells_and_sliders_use_the_learners_functions_once_written(capsys):
    """Each cell that shows an exercise's numbers says whose they are: the notebook's own function
    once written (the sliders' charts drawn by it), the course's recorded ones before."""
    blank = _notebook_class(BLANK_CLASS)  # any callable that raises NotImplementedError

    def best_low_rank_error(delta, rank):
        return 0.25

    def finetune_memory_gib(params, method):
        return 1.5

    namespace = {"best_low_rank_error": best_low_rank_error, "lora_parameters": blank}
    errors = lora.your_rank_errors(namespace, "the chart")
    assert lora.yours(namespace, "lora_parameters", "its title") is lora.course_answer("lora_parameters")
    assert lora.your_rank_errors({}, "these errors") is COURSE.rank_errors
    assert lora.your_layer({}, "these adapters") is None
    assert lora.your_layer({"LoRALinear": ANSWERS.LoRALinear}, "these adapters") is ANSWERS.LoRALinear
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "Your `best_low_rank_error` draws the chart.",
        "Your `lora_parameters` is not written yet: the course's numbers, recorded on the same inputs, draw its "
        "title (write it, then run this cell again).",
        "Your `best_low_rank_error` is not written yet: the course's numbers, recorded on the same inputs, draw "
        "these errors (write it, then run this cell again).",
        "Your `LoRALinear` is not written yet: the course's numbers, recorded with its own LoRALinear on the same "
        "settings, stand in for these adapters (write it, then run this cell again).",
        "Your `LoRALinear` trains these adapters.",
    ]
    chart = plots.RankErrorChart(rank_errors=errors, lora_parameters=lambda *_: 7).update(rank=3)
    assert list(chart.curve.get_ydata()) == [0.25] * len(plots.RANKS) and "7 numbers" in chart.ax_e.get_title()
    totals = plots.FinetuneMemoryChart(finetune_memory_gib).update(7e9)
    assert [text.get_text() for text in totals.totals] == ["1.5 GiB"] * 3


def test_a_layer_that_cannot_train_is_told_in_words_before_the_chapter_trains_it():
    through_data = lora_class().replace("self.lora_A.T @ self.lora_B.T", "self.lora_A.data.T @ self.lora_B.data.T")
    with pytest.raises(ValueError, match="does not depend on any parameter that trains.*not .data"):
        lora.written_layer({"LoRALinear": _notebook_class(through_data)})


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.RankErrorChart: ({"rank": 4}, {"rank": 9, "noise": 0.2}),
    plots.FinetuneMemoryChart: ({}, {"params": 70e9, "gpu_gib": 80.0}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_adapter_losses": lambda: plots.plot_adapter_losses(1.6, {1: 1.5, 4: 1.45, 16: 1.44}, 1.42, {4: 1.47}),
}


PROSE_WARNINGS = {  # mistakes the chapter's prose or prompt warns about: its visible checks must catch each
    "merge_changes_the_base": "class LoRALinear(nn.Module):\n    def __init__(self, base, rank, alpha=None):\n"
    "        super().__init__()\n        self.base = base.requires_grad_(False)\n"
    "        self.scale = (alpha or rank) / rank\n"
    "        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))\n"
    "        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))\n\n    def forward(self, x):\n"
    "        return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)\n\n    def merge(self):\n"
    "        with torch.no_grad():\n            self.base.weight += self.scale * self.lora_B @ self.lora_A\n"
    "        return self.base\n",
}

# the course's answers to the exercises its checks drive with a scenario
SCENARIO_ANSWERS = {
    "LoRALinear": ANSWERS.LoRALinear,
    "finetune_memory_gib": ANSWERS.finetune_memory_gib,
    "best_low_rank_error": ANSWERS.best_low_rank_error,
}

SEED_QUESTIONS = [  # the tutorial's questions that sit in this chapter's quiz, by the words that identify them
    "initialise B to zero",
    "rank-16 adapter",
    "rank-32 adapter",
]
