"""Student copies: up to date with their sources, without answers, with consistent points."""

import json
import re

import pytest

from autograder import colab, release
from autograder import notebook as submission
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
def test_each_answer_cell_is_an_exercise_and_each_grade_cell_checks_one(chapter, instructor_notebooks):
    cells = json.loads(instructor_notebooks[chapter].read_text())["cells"]
    answers, graded = set(), set()
    for cell in cells:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            answers.add(meta["grade_id"])
        if meta.get("grade"):
            exercise = re.search(r'check\("(\w+)"\)', "".join(cell["source"])).group(1)
            assert meta["grade_id"] == f"test_{exercise}"
            graded.add(exercise)
    assert answers == graded == {e.grade_id for e in CHAPTERS[chapter]}


GRADE_CELL = (
    '# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_int8", "locked": true, '
    '"points": {points}, "schema_version": 3, "solution": false}\nautograder.check("int8")\n'
)


def test_the_release_writes_each_grade_cells_points_from_its_exercises_checks():
    """A grade cell's points are written by `make release`: hand-edited points are put back, and
    `--check` (the test above) calls a source with other points stale."""
    int8 = next(e for e in CHAPTERS["03_quantization"] if e.grade_id == "int8")
    assert [c.points for c in int8.checks] == [1, 1, 1, 1]  # four checks of a point each, read off the declaration
    source = "# %% [markdown]\n# text\n\n" + GRADE_CELL.replace("{points}", "7")
    assert release.with_points(source, "03_quantization") == source.replace('"points": 7', '"points": 4')
    with pytest.raises(ValueError, match="test_nothing checks no exercise"):
        release.with_points(GRADE_CELL.replace("test_int8", "test_nothing").replace("{points}", "4"), "03_quantization")


def test_the_release_writes_the_readme_chapter_table_and_keeps_its_topics():
    readme = (paths.ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| [03_quantization]"))
    topic, said, badge = row.split(" | ")[1:]
    wrong = readme.replace(row, row.replace(said, "1 + 1 questions (1 + 1 points)"))
    assert wrong != readme and release.with_chapter_table(wrong, release.chapters()) == readme
    unbadged = readme.replace(row, row.replace(badge, "- |"))
    assert unbadged != readme and release.with_chapter_table(unbadged, release.chapters()) == readme
    # the quantization chapter: four answer cells, six quiz questions (data/quizzes/quantization.toml)
    cells = (paths.SOLUTIONS / "03_quantization.py").read_text().count('"solution": true')
    questions = (paths.DATA / "quizzes" / "quantization.toml").read_text().count("[[question]]")
    assert said.startswith(f"{cells - 1} + {questions} questions (") and topic
    assert badge == f"[![Open in Colab]({colab.BADGE})]({colab.notebook_url('03_quantization')}) |"
    without = readme.replace(row + "\n", "")
    added = next(
        line
        for line in release.with_chapter_table(without, release.chapters()).splitlines()
        if line.startswith("| [03_quantization]")
    )
    link = "[03_quantization](notebooks/03_quantization.ipynb)"
    assert added == f"| {link} | Quantization error and outliers | {said} | {badge}"


@pytest.mark.parametrize("chapter", chapter_names())
def test_grader_setup_cells_need_nothing_from_the_course(chapter):
    setup = submission.setup_sources(submission.released(chapter))
    assert setup, "the exercises' imports cell should be tagged grader-setup"
    assert not any(re.search(r"\b(course|autograder)\b", s) for s in setup)


def test_check_ids_are_unique():
    ids = [c.id for exercises in CHAPTERS.values() for e in exercises for c in e.checks]
    assert len(ids) == len(set(ids))
    assert all(any(c.visible for c in e.checks) for exercises in CHAPTERS.values() for e in exercises)
