"""Every chapter executes headless: the instructor's source without any error, the student copy
with errors only in its check cells (the exercises are blank)."""

import time

import pytest

from course import paths

from conftest import chapter_names, errors, execute

BUDGET_SECONDS = 120  # a chapter must run in minutes on 2 cores; the goal is 90 s


@pytest.mark.parametrize("chapter", chapter_names())
def test_solution_executes_without_errors(chapter, instructor_notebooks, kernel, artifacts):
    started = time.monotonic()
    executed = execute(instructor_notebooks[chapter], artifacts / f"{chapter}.solution.ipynb", kernel)
    assert errors(executed) == []
    assert time.monotonic() - started < BUDGET_SECONDS
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "FAIL" not in printed and printed.count("ok  ") >= 10


@pytest.mark.parametrize("chapter", chapter_names())
def test_student_copy_executes_with_only_its_checks_failing(chapter, kernel, artifacts):
    executed = execute(paths.NOTEBOOKS / f"{chapter}.ipynb", artifacts / f"{chapter}.student.ipynb", kernel)
    found = errors(executed)
    assert found, "the blank exercises should fail their checks"
    assert all("raises-exception" in tags and name == "AssertionError" for _, tags, name in found), found
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "not answered yet" in printed
    figures = sum(1 for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    assert figures >= 5, "the chapter's figures (and the widget's static view) should render headless"
