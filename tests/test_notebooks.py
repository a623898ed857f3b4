"""Every chapter's instructor source executes headless without any error (the student copies run
blank from the learners' copy, with errors only in their check cells: tests/test_learners_copy_runs.py),
each cell within the per-cell limit (``autograder.headless``), and every picture opaque, so dark themes show
it as drawn. How long a chapter takes is a benchmark, not a test: `make bench` times every chapter
and reports those over the budget."""

import pytest

from conftest import (
    chapter_names,
    errors,
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
