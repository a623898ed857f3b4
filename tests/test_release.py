"""Student copies: up to date with their sources, without answers, with consistent points."""

import json
import re

import pytest

from autograder import notebook as submission
from autograder import release
from autograder.chapters import CHAPTERS
from course import paths

from conftest import chapter_names


def test_student_notebooks_are_up_to_date():
    assert release.stale() == [], "run `make release` and commit notebooks/"


@pytest.mark.parametrize("chapter", chapter_names())
def test_student_copy_has_no_solutions_or_hidden_tests(chapter):
    text = (paths.NOTEBOOKS / f"{chapter}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "hidden=True"):
        assert marker not in text
    cells = json.loads(text)["cells"]
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code")
    assert "Student copy generated from solutions/" in "".join(cells[0]["source"]).splitlines()[0]


@pytest.mark.parametrize("chapter", chapter_names())
def test_source_and_grader_agree_on_exercises_and_points(chapter, instructor_notebooks):
    cells = json.loads(instructor_notebooks[chapter].read_text())["cells"]
    answers, points = set(), {}
    for cell in cells:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            answers.add(meta["grade_id"])
        if meta.get("grade"):
            points[meta["grade_id"]] = meta["points"]
            exercise = re.search(r'check\("(\w+)"\)', "".join(cell["source"])).group(1)
            assert meta["grade_id"] == f"test_{exercise}"
    exercises = {e.grade_id: e for e in CHAPTERS[chapter]}
    assert answers == set(exercises)
    assert points == {f"test_{g}": e.points for g, e in exercises.items()}


@pytest.mark.parametrize("chapter", chapter_names())
def test_grader_setup_cells_need_nothing_from_the_course(chapter):
    setup = submission.setup_sources(submission.released(chapter))
    assert setup, "the exercises' imports cell should be tagged grader-setup"
    assert not any(re.search(r"\b(course|autograder)\b", s) for s in setup)


def test_check_ids_are_unique():
    ids = [c.id for exercises in CHAPTERS.values() for e in exercises for c in e.checks]
    assert len(ids) == len(set(ids))
    assert all(c.exercise == e.grade_id for exercises in CHAPTERS.values() for e in exercises for c in e.checks)
    assert all(any(c.visible for c in e.checks) for exercises in CHAPTERS.values() for e in exercises)


def test_readme_counts_each_chapters_exercises_questions_and_points():
    """The README's table of chapters says what the grader grades: exercises + quiz questions, and their points."""
    readme = (paths.ROOT / "README.md").read_text()
    for chapter, exercises in CHAPTERS.items():
        quiz = [e for e in exercises if e.grade_id.startswith("quiz_")]
        graded = [e for e in exercises if e not in quiz]
        questions, points = sum(len(e.checks) for e in quiz), sum(e.points for e in graded)
        said = f"{len(graded)} + {questions} questions ({points:g} + {sum(e.points for e in quiz):g} points)"
        row = next((line for line in readme.splitlines() if line.startswith(f"| [{chapter}]")), "")
        assert said in row, f"README's row for {chapter} should say {said!r}: {row}"
