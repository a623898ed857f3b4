"""The grader: full marks for every chapter's solution, none for its blank copy, a report for files
that are not notebooks. All submissions are graded as one batch, in parallel, so the batch itself
shows that one submission cannot cost another anything. Each chapter's planted mistakes, and the
hints that must name them, are in its own test file (``PLANTED`` in ``tests/test_<slug>.py``)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from autograder import grade
from autograder.chapters import CHAPTERS
from course import paths

from conftest import GENEROUS, copy_into


@pytest.fixture(scope="module")
def batch(instructor_notebooks, tmp_path_factory):
    """Grade every chapter's solution and blank copy, and broken files, in one batch."""
    folder = tmp_path_factory.mktemp("submissions")
    for chapter, path in instructor_notebooks.items():
        copy_into(path, folder / "solution", f"{chapter}.ipynb")
        copy_into(paths.NOTEBOOKS / f"{chapter}.ipynb", folder / "blank")
    stripped = json.loads(
        instructor_notebooks["03_quantization"].read_text()
    )  # as an editor that drops metadata saves it
    stripped["metadata"] = {}
    for cell in stripped["cells"]:
        cell["metadata"] = {}
    (folder / "stripped").mkdir()
    (folder / "stripped" / "chapter3.ipynb").write_text(json.dumps(stripped))
    (folder / "broken").mkdir()
    (folder / "broken" / "03_quantization.ipynb").write_text('{"cells": [')
    out = tmp_path_factory.mktemp("feedback")
    reports = grade.grade_folder(folder, out, GENEROUS, seed=7)
    files = sorted(p for p in folder.rglob("*.ipynb"))
    by_learner = {}
    for path, report in zip(files, reports, strict=True):
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

    from autograder.runner import outermost

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


def test_scenarios_run_on_their_own():
    """A scenario travels to the sandbox as text and runs with nothing of its module around it:
    with the course's own answers, every check that uses one passes."""
    from autograder import quiz
    from autograder.selfcheck import run_in_process
    from course import choosing_a_technique, lora, speculative_decoding

    answers = {
        "LoRALinear": lora.LoRALinear,
        "speculative_token": speculative_decoding.speculative_token,
        "fine_tuning_advice": choosing_a_technique.fine_tuning_advice,
    }
    driven = [
        c
        for exercises in CHAPTERS.values()
        for e in exercises
        for c in e.checks
        if c.probe(np.random.default_rng(0)).get("scenario")
    ]
    quizzes = {f"quiz_{paths.slug(chapter)}": paths.slug(chapter) for chapter in CHAPTERS}
    assert {c.exercise for c in driven} == {"lora_linear", "speculative_token", "fine_tuning_advice", *quizzes}
    for index, check in enumerate(driven):
        if check.exercise in quizzes:
            key = quiz.key(quizzes[check.exercise])
            answers["quiz_answers"] = lambda key=key: key
        assert run_in_process(check, answers, index).passed, check.id
