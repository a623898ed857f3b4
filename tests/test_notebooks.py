"""Every chapter executes headless: the instructor's source without any error, the student copy
with errors only in its check cells (the exercises are blank; the chapters that run without the
answers run blank from the learners' copy instead, tests/test_learners_copy_runs.py), each cell
within the per-cell limit (``autograder.headless``), and every picture opaque, so dark themes show
it as drawn. How long a chapter takes is a benchmark, not a test: `make bench` times every chapter
and reports those over the budget."""

import pytest

from autograder import learners_copy
from course import paths

from conftest import (
    assert_every_figure_drawn,
    chapter_names,
    errors,
    execute,
    long_tracebacks,
    printed,
    see_through_pictures,
)


@pytest.mark.parametrize("chapter", chapter_names())
def test_solution_executes_without_errors(chapter, executed_solution):
    from autograder.chapters import CHAPTERS

    executed = executed_solution(chapter)
    assert errors(executed) == []
    assert see_through_pictures(executed) == []
    said = printed(executed)
    assert "FAIL" not in said and said.count("ok  ") >= sum(len(e.checks) for e in CHAPTERS[chapter])


@pytest.mark.parametrize("chapter", [c for c in chapter_names() if c not in learners_copy.RUNS_WITHOUT_ANSWERS])
def test_student_copy_executes_with_only_its_checks_failing(chapter, kernel, artifacts):
    """The chapters the learners' copy cannot run blank yet; the others' student copies run blank
    from the learners' copy, which holds the same cells (tests/test_learners_copy_runs.py)."""
    executed = execute(paths.NOTEBOOKS / f"{chapter}.ipynb", artifacts / f"{chapter}.student.ipynb", kernel)
    found = errors(executed)
    assert found, "the blank exercises should fail their checks"
    assert all("raises-exception" in tags and name == "AssertionError" for _, tags, name in found), found
    assert long_tracebacks(executed) == []
    assert "not answered yet" in printed(executed)
    assert_every_figure_drawn(executed)
    assert see_through_pictures(executed) == []
