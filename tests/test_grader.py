"""The grader: full marks for every chapter's solution, none for its blank copy, a report for files
that are not notebooks. All submissions are graded as one batch, in parallel, so the batch itself
shows that one submission cannot cost another anything. Each chapter's planted mistakes and the
hints that must name them (``autograder/mistakes/<slug>.py``) are graded in its own test file."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from autograder import grade, sandbox
from autograder.chapters import CHAPTERS
from course import paths

from conftest import GENEROUS, chapter_cases, copy_into


@pytest.fixture(scope="module")
def batch(copies_graded):
    """Every chapter's solution and blank copy, and broken files, graded in one batch (conftest's
    ``copies_graded``)."""
    return copies_graded


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_solution_gets_full_marks(batch, chapter):
    report = batch[0][f"solution/{chapter}"]
    assert report.max_score == sum(e.points for e in CHAPTERS[chapter]) > 0
    assert report.score == report.max_score, report.text()
    assert not any("(yours" in m for m in report.messages), "the chapter's own cells must not run: " + report.text()


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_blank_copy_gets_no_exercise_points(batch, chapter):
    report = batch[0][f"blank/{chapter}"]
    assert report.score == 0 and report.max_score > 0
    assert all("not answered yet" in t.hint for t in report.tests)


QUANTIZATION_POINTS = sum(e.points for e in CHAPTERS["03_quantization"])


def test_metadata_stripped_by_an_editor_still_grades(batch):
    report = batch[0]["stripped"]
    assert report.chapter == "03_quantization" and report.score == QUANTIZATION_POINTS, report.text()
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

    from autograder.sandbox.modes import outermost

    root = paths.ROOT
    found = outermost([root / "submissions", root, root / "feedback", Path("/elsewhere/class")])
    assert sorted(found) == sorted([root, Path("/elsewhere/class")])
    assert outermost([root / "a" / "b", root / "a"]) == [root / "a"]


def test_submissions_and_feedback_nested_inside_each_other(instructor_notebooks, tmp_path):
    """As `make autograde` lays them out (both inside the repository): nested hidden folders."""
    folder = tmp_path / "class"
    copy_into(instructor_notebooks["03_quantization"], folder / "ada", "03_quantization.ipynb")
    reports = grade.grade_folder(folder, folder / "feedback", GENEROUS, seed=2)
    assert [r.score for r in reports] == [QUANTIZATION_POINTS], reports[0].text()


def test_command_line_json(instructor_notebooks):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autograder",
            "grade",
            str(instructor_notebooks["03_quantization"]),
            "--json",
            "--seed",
            "3",
            "--timeout",
            str(GENEROUS.wall_seconds),
            "--call-timeout",
            str(GENEROUS.probe_seconds),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )  # a ceiling for a hang
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"notebook", "score", "max_score", "tests"} <= set(report)
    assert report["score"] == report["max_score"] == QUANTIZATION_POINTS
    assert all({"id", "points", "max_points", "passed", "hint"} <= set(t) for t in report["tests"])


@pytest.mark.parametrize("flag", ["--timeout", "--call-timeout"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "ten"])
def test_command_line_refuses_a_time_limit_that_is_not_one(flag, value, capsys):
    from autograder.__main__ import main

    with pytest.raises(SystemExit) as ended:
        main(["grade", "any.ipynb", flag, value])
    assert ended.value.code == 2
    assert f"{value!r} is not a time limit: give a positive number of seconds" in capsys.readouterr().err


def test_scenarios_run_on_their_own():
    """A scenario travels to the sandbox as text and runs with nothing of its module around it:
    with the course's own answers (each chapter's ``SCENARIO_ANSWERS``), every check that uses one passes."""
    from autograder import quiz
    from autograder.chapters import exercise_by_id
    from autograder.selfcheck import run_in_process

    answers = {name: answer for found in chapter_cases("SCENARIO_ANSWERS").values() for name, answer in found.items()}
    driven = [
        c
        for exercises in CHAPTERS.values()
        for e in exercises
        for c in e.checks
        if c.probe(np.random.default_rng(0)).get("scenario")
    ]
    quizzes = {f"quiz_{paths.slug(chapter)}": paths.slug(chapter) for chapter in CHAPTERS}
    assert {c.exercise for c in driven} >= set(quizzes) and len(driven) > len(quizzes)
    for index, check in enumerate(driven):
        if check.exercise in quizzes:
            key = quiz.key(quizzes[check.exercise])
            answers["quiz_answers"] = lambda key=key: key
        else:
            name = exercise_by_id(check.exercise).defines[0]
            assert name in answers, f"{check.id} drives {name}: list the course's own in its chapter's SCENARIO_ANSWERS"
        assert run_in_process(check, answers, index).passed, check.id


# --- what each exercise requires, and the checks that cover it -------------------------------------


def test_every_requirement_names_checks_of_its_exercise_and_every_check_covers_one():
    from autograder import coverage

    assert coverage.problems() == []
    for chapter in CHAPTERS:
        table = coverage.table(chapter)
        for exercise in CHAPTERS[chapter]:
            assert all(r.text.replace("|", "\\|") in table for r in exercise.requirements)


def test_coverage_finds_a_requirement_that_names_no_existing_check(monkeypatch):
    from autograder import coverage
    from autograder.checks import Requirement

    exercise = CHAPTERS["05_flash_attention"][1]
    broken = [*exercise.requirements, Requirement("a requirement with a typo", ("nope",))]
    monkeypatch.setattr(exercise, "requirements", broken)
    assert any("names nope, which is not one of its checks" in p for p in coverage.problems())


# --- learners' own cells -------------------------------------------------------------------------------

HELPER_CELL = "import math as m2\n\ndef _block_scores(q, k_block):\n    return q @ k_block.T / m2.sqrt(q.shape[-1])\n"
BLOCKWISE_WITH_HELPER = """
def blockwise_attention(q, k, v, block):
    m = torch.full((q.shape[0], 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[0], 1, dtype=q.dtype)
    o = torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)
    for start in range(0, k.shape[0], block):
        m, l, o = online_softmax_update(m, l, o, _block_scores(q, k[start:start + block]), v[start:start + block])
    return o / l
"""
CHAPTER5_POINTS = sum(e.points for e in CHAPTERS["05_flash_attention"])


def _code_cell(source: str, cell_id: str) -> dict:
    return {
        "cell_type": "code",
        "id": cell_id,
        "metadata": {},
        "execution_count": None,
        "outputs": [],
        "source": source,
    }


def _cell_index(notebook: dict, grade_id: str) -> int:
    return next(
        i
        for i, c in enumerate(notebook["cells"])
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id
    )


def _with_cells(notebook: dict, before: str, *sources: str) -> dict:
    """``notebook`` with new code cells (a learner's) inserted before the cell ``before``."""
    index = _cell_index(notebook, before)
    notebook["cells"][index:index] = [_code_cell(s, f"added{i}") for i, s in enumerate(sources)]
    return notebook


def _answer(notebook: dict, grade_id: str, source: str) -> dict:
    notebook["cells"][_cell_index(notebook, grade_id)]["source"] = source
    return notebook


def _strip(notebook: dict) -> dict:
    notebook["metadata"] = {}
    for cell in notebook["cells"]:
        cell["metadata"] = {}
        cell.pop("id", None)
    return notebook


def _edit_chapter_cell(notebook: dict) -> dict:
    cell = next(c for c in notebook["cells"] if "".join(c["source"]).startswith("generator = torch.Generator()"))
    cell["source"] = "".join(cell["source"]).replace("manual_seed(0)", "manual_seed(1)")
    return notebook


LEARNERS = {  # name -> (how the chapter 5 solution is changed, points lost, what the report must say)
    "helper_in_an_added_cell": (
        lambda nb: _answer(
            _with_cells(nb, "blockwise_attention", HELPER_CELL), "blockwise_attention", BLOCKWISE_WITH_HELPER
        ),
        0,
        "",
    ),
    "helper_in_an_added_cell_metadata_stripped": (
        lambda nb: _strip(
            _answer(_with_cells(nb, "blockwise_attention", HELPER_CELL), "blockwise_attention", BLOCKWISE_WITH_HELPER)
        ),
        0,
        "found by its content",
    ),
    "helper_beside_a_check_call": (  # the grader's own lines are left out, the helper runs
        lambda nb: _answer(
            _with_cells(nb, "blockwise_attention", "from autograder import check\n" + HELPER_CELL + "check('x')\n"),
            "blockwise_attention",
            BLOCKWISE_WITH_HELPER,
        ),
        0,
        "",
    ),
    "added_cells_that_fail": (
        lambda nb: _with_cells(nb, "online_softmax_update", "raise RuntimeError('scratch work')", "print(undefined)"),
        0,
        "(yours: `raise RuntimeError('scratch work')`) raised RuntimeError: scratch work",
    ),
    "added_cells_that_never_end": (
        lambda nb: _with_cells(nb, "blockwise_attention", *["while True:\n    pass"] * 3, "x = 1"),
        0,
        "not run: the cells you added took their",
    ),
    "an_edited_chapter_cell_runs_as_the_learners": (_edit_chapter_cell, 0, "raised NameError: name 'flash_attention'"),
    "an_answer_from_the_course_package": (
        lambda nb: _answer(nb, "blockwise_attention", "from course.flash_attention import blockwise_attention\n"),
        7,
        "No module named 'course': answers are graded without the course's own packages",
    ),
    "an_answer_that_reads_a_chapter_cells_name": (
        lambda nb: _answer(
            nb,
            "blockwise_attention",
            BLOCKWISE_WITH_HELPER.replace("_block_scores(q, k[start:start + block])", "HEAD_DIM"),
        ),
        7,
        "NameError: name 'HEAD_DIM' is not defined",
    ),
}
QUICK = sandbox.Limits(wall_seconds=600, probe_seconds=300, cell_seconds=3, added_seconds=5)


@pytest.fixture(scope="module")
def learners(instructor_notebooks, tmp_path_factory):
    folder = tmp_path_factory.mktemp("learners")
    for name, (change, _, _) in LEARNERS.items():
        built = change(json.loads(instructor_notebooks["05_flash_attention"].read_text()))
        (folder / name).mkdir()
        (folder / name / "05_flash_attention.ipynb").write_text(json.dumps(built))
    reports = grade.grade_folder(folder, tmp_path_factory.mktemp("learners-feedback"), QUICK, seed=5)
    return {grade._learner(folder, p): r for p, r in zip(sorted(folder.rglob("*.ipynb")), reports, strict=True)}


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learners_own_cells_run_with_the_answers(learners, name):
    _, lost, said = LEARNERS[name]
    report = learners[name]
    assert report.score == CHAPTER5_POINTS - lost, report.text()
    assert said in report.text(), report.text()


def test_an_untouched_chapter_cell_never_runs_but_a_learners_cell_does():
    from autograder import notebook

    release = notebook.released("05_flash_attention")
    submitted = _with_cells(json.loads(json.dumps(release)), "online_softmax_update", "helper = 1")
    found = notebook.answers(submitted, CHAPTERS["05_flash_attention"], release)
    assert [c.get("added", c.get("grade_id")) for c in found.cells] == [
        f"{_cell_index(submitted, 'online_softmax_update')} (yours: `helper = 1`)",
        "online_softmax_update",
        "blockwise_attention",
        "quiz_flash_attention",
    ]


# --- the visible check says what grading will say ------------------------------------------------------


def _kernel(chapter: str, *cells: str) -> dict:
    """A namespace as the learner's kernel has it after running ``cells`` (they become its ``In``)."""
    from autograder import notebook

    namespace: dict = {"__name__": "__main__", "In": ["", *cells]}
    for source in notebook.setup_sources(notebook.released(chapter)) + list(cells):
        exec(source, namespace)
    return namespace


def _visible(exercise: str, namespace: dict, capsys) -> str:
    from autograder.selfcheck import check

    try:
        check(exercise, namespace=namespace)
    except AssertionError:
        pass
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "answer",
    [
        "from course.quantization import relative_error\n",
        "from course import quantization\n\ndef relative_error(weight, approx):\n"
        "    return quantization.relative_error(weight, approx)\n",
        "def _norm(x):\n    import course.quantization\n    return x.norm()\n\n"
        "def relative_error(weight, approx):\n    return (_norm(weight - approx) / _norm(weight)).item()\n",
        "import course.quantization\n\ndef relative_error(weight, approx):\n"
        "    return ((weight - approx).norm() / weight.norm()).item()\n",
    ],
    ids=["imported", "through_a_module", "imported_by_a_helper", "imported_in_its_cell_unused"],
)
def test_visible_check_fails_an_answer_that_uses_the_course_package(answer, capsys):
    from autograder.sandbox.inside import unavailable

    printed = _visible("relative_error", _kernel("03_quantization", answer), capsys)
    assert "ok  " not in printed and unavailable("course") in printed, printed


def test_visible_check_fails_a_name_only_the_chapters_cells_define(capsys):
    from autograder import notebook

    parameters = next(
        s for s in notebook.release_cells(notebook.released("05_flash_attention")).chapter_sources if "HEAD_DIM" in s
    )
    answer = "def online_softmax_update(m, l, o, scores, v):\n    return m, l, o * HEAD_DIM\n"
    printed = _visible("online_softmax_update", _kernel("05_flash_attention", parameters, answer), capsys)
    assert "NameError: name 'HEAD_DIM' is not defined" in printed and "ok  " not in printed, printed
    mine = _visible("online_softmax_update", _kernel("05_flash_attention", parameters, "HEAD_DIM = 64", answer), capsys)
    assert "NameError" not in mine, "a name the learner's own cell defines is fine: " + mine


def test_visible_check_says_which_earlier_answer_is_wrong(capsys):
    wrong_update = "def online_softmax_update(m, l, o, scores, v):\n    return m, l, o\n"
    printed = _visible(
        "blockwise_attention",
        _kernel(
            "05_flash_attention",
            wrong_update,
            BLOCKWISE_WITH_HELPER.replace(
                "_block_scores(q, k[start:start + block])", "q @ k[start:start + block].T / math.sqrt(q.shape[-1])"
            ),
        ),
        capsys,
    )
    assert "calls your online_softmax_update, which fails its own checks" in printed, printed


PROSE_WARNINGS = {  # (slug, name): source, from each chapter's tests/test_<slug>.py
    (slug, name): source
    for slug, warnings in chapter_cases("PROSE_WARNINGS").items()
    for name, source in warnings.items()
}


@pytest.mark.parametrize("slug, name", sorted(PROSE_WARNINGS))
def test_visible_checks_catch_what_the_prose_warns_about(slug, name, capsys):
    """Mistakes a chapter's prose or prompt warns about: its visible checks must catch each."""
    from autograder import notebook

    chapter, source = next(c for c in CHAPTERS if paths.slug(c) == slug), PROSE_WARNINGS[slug, name]
    exercise = next(e for e in CHAPTERS[chapter] if e.defines[0] in notebook.defined_names(source))
    printed = _visible(exercise.grade_id, _kernel(chapter, source), capsys)
    assert "FAIL" in printed, printed


def test_an_all_zeros_answer_is_told_so_first():
    """Zeros are named as zeros: with the mistake that gives zeros on the same input, or as work
    not done; chapter 5 no longer offers 'the last, shorter block was skipped' where the keys fit
    in less than one block (it read 'only the first 0 of 30 keys were used' for a zero answer)."""
    import torch

    from autograder.checks import diagnose
    from autograder.mistakes import flash_attention

    expected, zeros = torch.ones(3, 4), torch.zeros(3, 4)
    gives_zeros = [("the scale was multiplied by the number of levels", lambda: torch.zeros(3, 4))]
    told = diagnose(zeros, expected, gives_zeros, "the output").hint
    assert told.startswith("the output is all zeros: the scale was multiplied"), told
    assert "all zeros: is the work done but not returned" in diagnose(zeros, expected, [], "the output").hint
    assert diagnose(expected * 2, expected, [("doubled", lambda: expected * 2)]).hint.startswith("doubled")

    q, k, v = torch.randn(4, 8), torch.randn(30, 8), torch.randn(30, 8)
    assert not [h for h, _ in flash_attention.of_blockwise_attention(q, k, v, 32) if "skipped" in h]
    assert [h for h, _ in flash_attention.of_blockwise_attention(q, k, v, 8) if "first 24 of 30 keys" in h]


def test_a_check_cell_leaves_the_learners_random_streams_as_they_were():
    """An answer that draws from torch's, numpy's and Python's global streams, checked (every check,
    as the instructor's copy runs them): the cell after the check draws what it would have drawn
    without it, so the two copies' later cells print the same numbers."""
    import random

    import torch

    from autograder import notebook
    from autograder.selfcheck import check

    namespace: dict = {"__name__": "__main__"}
    for setup in notebook.setup_sources(notebook.released("05_flash_attention")):
        exec(setup, namespace)
    exec(
        "import random, numpy, torch\n"
        "def online_softmax_update(*args, **kwargs):\n"
        "    return torch.rand(1) + numpy.random.rand() + random.random()\n",
        namespace,
    )

    def draws(checked: bool) -> tuple:
        torch.manual_seed(0), np.random.seed(0), random.seed(0)
        if checked:
            with pytest.raises(AssertionError):
                check("online_softmax_update", hidden=True, namespace=namespace)
        return torch.rand(1).item(), np.random.rand(), random.random()

    assert draws(checked=True) == draws(checked=False)
