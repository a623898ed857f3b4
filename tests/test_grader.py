"""The grader: full marks for the solution, none for the blank copy, and each planted mistake
loses points with a hint that names it. All submissions are graded as one batch, in parallel,
so the batch itself shows that one submission cannot cost another anything."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from autograder import grade
from autograder.chapters import CHAPTERS
from course import paths

from conftest import copy_into

QUANTIZE = '''
def quantize_dequantize(weight, bits, group_size=None):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group:
        raise ValueError("group_size must divide the columns")
    levels = {levels}
    grouped = weight.reshape(rows, cols // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True) / levels
    {guard}
    return ({rounding}(grouped / scale).clamp(-levels, levels) * scale).reshape(rows, cols)
'''
SAFE = "scale = torch.where(scale > 0, scale, torch.ones_like(scale))"


def quantize_variant(levels="2 ** (bits - 1) - 1", rounding="torch.round", guard=SAFE):
    return QUANTIZE.format(levels=levels, rounding=rounding, guard=guard)


# Every check of these must fail with the mistake named, not only the first.
ALL_ROUND_TRIPS = {f"quantize_dequantize.{c}" for c in ("int8_per_row", "int4_groups", "other_bits", "six_bits", "zero_groups")}
GROUPED_ROUND_TRIPS = {f"quantize_dequantize.{c}" for c in ("int4_groups", "other_bits", "zero_groups")}

# name -> (answer cell, its code, check ids that must fail, words the hint must contain)
PLANTED_CH1 = {
    "roofline_sum": ("roofline_step_time", "def roofline_step_time(flops, n_bytes, peak_flops, bandwidth):\n"
                     "    return flops / peak_flops + n_bytes / bandwidth\n",
                     {"roofline_step_time.memory_bound", "roofline_step_time.compute_bound"}, "added the two times"),
    "critical_no_half": ("critical_batch_size", "def critical_batch_size(peak_flops, bandwidth, bytes_per_param):\n"
                         "    return peak_flops / bandwidth * bytes_per_param\n",
                         {"critical_batch_size.a100_bf16"}, "division by 2 is missing"),
    "static_mean": ("static_batch_throughput", "def static_batch_throughput(output_lengths, batch_size, step_seconds):\n"
                    "    chunks = [output_lengths[i:i + batch_size] for i in range(0, len(output_lengths), batch_size)]\n"
                    "    return sum(output_lengths) / (sum(sum(c) / len(c) for c in chunks) * step_seconds)\n",
                    {"static_batch_throughput.example", "static_batch_throughput.random"}, "mean length"),
    "memory_in_bits": ("weight_memory_gb", "def weight_memory_gb(params, bits):\n    return params * bits / 1e9\n",
                       {"weight_memory_gb.70b", "weight_memory_gb.other"}, "divided by 8"),
}
PLANTED = {
    "too_many_levels": ("quantize_dequantize", quantize_variant(levels="2 ** bits - 1"),
                        ALL_ROUND_TRIPS, "levels instead of"),
    "one_level_too_many": ("quantize_dequantize", quantize_variant(levels="2 ** (bits - 1)"),
                           {"quantize_dequantize.int8_per_row"}, "one level too many"),
    "truncation": ("quantize_dequantize", quantize_variant(rounding="torch.trunc"),
                   ALL_ROUND_TRIPS, "truncated"),
    "nan_on_zero_group": ("quantize_dequantize", quantize_variant(guard="pass"),
                          {"quantize_dequantize.zero_groups"}, "all-zero group"),
    "groups_ignored": ("quantize_dequantize", '''
def quantize_dequantize(weight, bits, group_size=None):
    if group_size is not None and weight.shape[1] % group_size:
        raise ValueError("bad group")
    levels = 2 ** (bits - 1) - 1
    scale = weight.abs().amax(dim=1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(weight / scale).clamp(-levels, levels) * scale
''', GROUPED_ROUND_TRIPS, "group_size was ignored"),
    "groups_down_the_rows": ("quantize_dequantize", '''
def quantize_dequantize(weight, bits, group_size=None):
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group:
        raise ValueError("bad group")
    levels = 2 ** (bits - 1) - 1
    if group_size is None:
        grouped = weight.reshape(rows, 1, cols)
    else:
        grouped = weight.T.reshape(cols, rows // group, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    out = torch.round(grouped / scale).clamp(-levels, levels) * scale
    return out.reshape(rows, cols) if group_size is None else out.reshape(cols, rows).T
''', GROUPED_ROUND_TRIPS, "groups were taken down the columns"),
    "no_value_error": ("quantize_dequantize", quantize_variant().replace(
        'raise ValueError("group_size must divide the columns")', "group = cols"),
        {"quantize_dequantize.bad_group"}, "expected ValueError"),
    "squared_error": ("relative_error", '''
def relative_error(weight, approx):
    return ((weight - approx).norm() ** 2 / weight.norm() ** 2).item()
''', {"relative_error.random", "relative_error.zeros"}, "square root"),
    "int8_scale_128": ("int8", '''
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 128
    return torch.round(weight / scale).clamp(-128, 127).to(torch.int8), scale

def dequantize_int8(codes, scale):
    return codes.float() * scale
''', {"int8.codes_and_scale"}, "absmax / 128"),
    "int8_float_codes": ("int8", '''
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127
    return torch.round(weight / scale), scale

def dequantize_int8(codes, scale):
    return codes.float() * scale
''', {"int8.codes_and_scale"}, "torch.int8"),
    "bits_upside_down": ("effective_bits", '''
def effective_bits(bits, group_size, scale_bits=16):
    return bits + group_size / scale_bits
''', {"effective_bits.int4_g64", "effective_bits.other"}, "upside down"),
}


LORA_CLASS = """
class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha=None):
        super().__init__()
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.scale = {scale}
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter({b_init}(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)

    def merge(self):
        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        with torch.no_grad():
            merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                merged.bias.copy_(self.base.bias)
        return merged
"""
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
SPECULATIVE_TOKEN = """
def speculative_token(target, draft, generator):
    x = int(torch.multinomial(draft, 1, generator=generator))
    if torch.rand(1, generator=generator).item() < min(1.0, (target[x] / draft[x]).item()):
        return x, True
    leftover = {leftover}
    return int(torch.multinomial(leftover / leftover.sum(), 1, generator=generator)), False
"""

# Chapters 2, 4 to 7: the mistakes named in the course's contract.
PLANTED_LATER = {
    "lora_b_not_zero": ("02_lora", "lora_linear", LORA_CLASS.format(scale="(rank if alpha is None else alpha) / rank",
                                                                    b_init="torch.randn"),
                        {"lora_linear.starts_at_base"}, "initialise lora_B to zeros"),
    "lora_scale_not_divided": ("02_lora", "lora_linear", LORA_CLASS.format(scale="(rank if alpha is None else alpha)",
                                                                           b_init="torch.zeros"),
                               {"lora_linear.forward", "lora_linear.alpha"}, "not divided by the rank"),
    "kv_no_factor_2": ("04_kv_cache", "kv_cache_bytes",
                       "def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):\n"
                       "    return n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element\n",
                       {"kv_cache_bytes.llama2_token", "kv_cache_bytes.gqa_32k", "kv_cache_bytes.random"}, "factor 2"),
    "flash_no_rescale": ("05_flash_attention", "online_softmax_update",
                         BLOCKWISE.format(correction="torch.ones_like(m)", shift="m_new"),
                         {"online_softmax_update.larger", "blockwise_attention.block16"}, "rescaled"),
    "flash_overflow": ("05_flash_attention", "online_softmax_update",
                       BLOCKWISE.format(correction="torch.ones_like(m)", shift="0"),
                       {"blockwise_attention.large_scores"}, "overflows"),
    "resample_from_p": ("06_speculative_decoding", "speculative_token", SPECULATIVE_TOKEN.format(leftover="target"),
                        {"speculative_token.distribution", "speculative_token.random"}, "resampled from p"),
    "series_off_by_one": ("06_speculative_decoding", "expected_tokens_per_call",
                          "def expected_tokens_per_call(alpha, draft_length):\n"
                          "    return (1 - alpha ** draft_length) / (1 - alpha)\n",
                          {"expected_tokens_per_call.example", "expected_tokens_per_call.random"}, "one term short"),
    "distill_no_t_squared": ("07_distillation", "distillation_loss",
                             "def distillation_loss(student_logits, teacher_logits, temperature):\n"
                             "    s = torch.log_softmax(student_logits / temperature, -1)\n"
                             "    t = torch.log_softmax(teacher_logits / temperature, -1)\n"
                             "    return (t.exp() * (t - s)).sum(-1).mean()\n",
                             {"distillation_loss.t4", "distillation_loss.3d"}, "T^2 factor"),
}


def _replace_answer(notebook: dict, grade_id: str, source: str) -> dict:
    for cell in notebook["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = source
            return notebook
    raise KeyError(grade_id)


@pytest.fixture(scope="module")
def batch(instructor_notebooks, tmp_path_factory):
    """Grade every chapter's solution and blank copy, the planted bugs and broken files in one batch."""
    folder = tmp_path_factory.mktemp("submissions")
    for chapter, path in instructor_notebooks.items():
        copy_into(path, folder / "solution", f"{chapter}.ipynb")
        copy_into(paths.NOTEBOOKS / f"{chapter}.ipynb", folder / "blank")
    solution = instructor_notebooks["03_quantization"]
    for planted, chapter in ((PLANTED, "03_quantization"), (PLANTED_CH1, "01_prefill_decode")):
        for name, (grade_id, source, _, _) in planted.items():
            notebook = _replace_answer(json.loads(instructor_notebooks[chapter].read_text()), grade_id, source)
            (folder / name).mkdir()
            (folder / name / f"{chapter}.ipynb").write_text(json.dumps(notebook))
    for name, (chapter, grade_id, source, _, _) in PLANTED_LATER.items():
        notebook = _replace_answer(json.loads(instructor_notebooks[chapter].read_text()), grade_id, source)
        (folder / name).mkdir()
        (folder / name / f"{chapter}.ipynb").write_text(json.dumps(notebook))
    stripped = json.loads(solution.read_text())  # as an editor that drops cell metadata saves it
    stripped["metadata"] = {}
    for cell in stripped["cells"]:
        cell["metadata"] = {}
    (folder / "stripped").mkdir()
    (folder / "stripped" / "chapter3.ipynb").write_text(json.dumps(stripped))
    (folder / "broken").mkdir()
    (folder / "broken" / "03_quantization.ipynb").write_text('{"cells": [')
    out = tmp_path_factory.mktemp("feedback")
    reports = grade.grade_folder(folder, out, seed=7)
    files = sorted(p for p in folder.rglob("*.ipynb"))
    by_learner = {}
    for path, report in zip(files, reports):
        learner = grade._learner(folder, path)
        by_learner[learner if learner not in ("solution", "blank") else f"{learner}/{path.stem}"] = report
    return by_learner, out


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_solution_gets_full_marks(batch, chapter):
    report = batch[0][f"solution/{chapter}"]
    assert report.max_score == sum(e.points for e in CHAPTERS[chapter]) > 0
    assert report.score == report.max_score, report.text()


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_blank_copy_gets_no_exercise_points(batch, chapter):
    report = batch[0][f"blank/{chapter}"]
    assert report.score == 0 and report.max_score > 0
    assert all("not answered yet" in t.hint for t in report.tests)


@pytest.mark.parametrize("name", sorted(PLANTED) + sorted(PLANTED_CH1))
def test_planted_mistake_loses_points_with_a_hint(batch, name):
    _, _, must_fail, words = {**PLANTED, **PLANTED_CH1}[name]
    report = batch[0][name]
    failed = {t.id: t.hint for t in report.tests if not t.passed}
    assert must_fail <= set(failed), report.text()
    assert all(words in failed[i] for i in must_fail), report.text()
    assert report.score < report.max_score
    exercise = {**PLANTED, **PLANTED_CH1}[name][0]
    others = [t for t in report.tests if not t.id.startswith(exercise + ".")]
    assert all(t.passed for t in others), "a mistake in one exercise must not cost another"


def test_metadata_stripped_by_an_editor_still_grades(batch):
    report = batch[0]["stripped"]
    assert report.chapter == "03_quantization" and report.score == 16, report.text()
    assert any("found by its content" in m for m in report.messages)


def test_invalid_json_is_reported_not_raised(batch):
    report = batch[0]["broken"]
    assert report.score == 0 and any("invalid JSON" in m for m in report.messages)


def test_gradebook_has_a_row_and_feedback_for_every_submission(batch):
    reports, out = batch
    with open(out / "gradebook.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(reports)
    assert {r["learner"] for r in rows} == {name.split("/")[0] for name in reports}
    solutions = [r for r in rows if r["learner"] == "solution"]
    assert all(float(r["score"]) == float(r["max_score"]) for r in solutions) and len(solutions) == len(CHAPTERS)
    assert len(list(out.glob("*.txt"))) == len(reports) and len(list(out.glob("*.json"))) == len(reports)


def test_outermost_folders_only():
    from pathlib import Path

    from autograder.runner import outermost

    root = paths.ROOT
    found = outermost([root / "submissions", root, root / "feedback", Path("/elsewhere/class")])
    assert sorted(found) == sorted([root, Path("/elsewhere/class")])
    assert outermost([root / "a" / "b", root / "a"]) == [root / "a"]


def test_submissions_and_feedback_nested_inside_each_other(instructor_notebooks, tmp_path):
    """As `make autograde` lays them out (both inside the repository): nested hidden folders."""
    folder = tmp_path / "class"
    copy_into(instructor_notebooks["03_quantization"], folder / "ada", "03_quantization.ipynb")
    reports = grade.grade_folder(folder, folder / "feedback", seed=2)
    assert [r.score for r in reports] == [16], reports[0].text()


def test_command_line_json(instructor_notebooks):
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(instructor_notebooks["03_quantization"]),
                           "--json", "--seed", "3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"notebook", "score", "max_score", "tests"} <= set(report)
    assert report["score"] == report["max_score"] == 16
    assert all({"id", "points", "max_points", "passed", "hint"} <= set(t) for t in report["tests"])


@pytest.mark.parametrize("name", sorted(PLANTED_LATER))
def test_planted_mistake_in_later_chapters(batch, name):
    _, grade_id, _, must_fail, words = PLANTED_LATER[name]
    report = batch[0][name]
    failed = {t.id: t.hint for t in report.tests if not t.passed}
    assert must_fail <= set(failed), report.text()
    assert all(words in failed[i] for i in must_fail), report.text()
    # exercises that call the learner's own earlier answer may lose points with it
    calls_it = {"online_softmax_update": {"blockwise_attention"}, "expected_tokens_per_call": {"speculative_speedup"}}
    touched = {i.split(".")[0] for i in must_fail} | {grade_id} | calls_it.get(grade_id, set())
    assert all(t.passed for t in report.tests if t.id.split(".")[0] not in touched), report.text()
