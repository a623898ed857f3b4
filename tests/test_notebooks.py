"""Every chapter executes headless: the instructor's source without any error, the student copy
with errors only in its check cells (the exercises are blank), each cell within the per-cell limit
(``autograder.headless``), and every picture opaque, so dark themes show it as drawn. How long a
chapter takes is a benchmark, not a test: `make bench` times every chapter and reports those over
the budget."""

import base64
import io

import pytest
from PIL import Image

from course import paths

from conftest import assert_every_figure_drawn, chapter_names, errors, execute, printed


def see_through_pictures(executed: dict) -> list[int]:
    """Cells with a PNG that has transparent pixels: on a dark theme its black text is unreadable."""
    found = []
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                picture = Image.open(io.BytesIO(base64.b64decode(png)))
                if picture.mode in ("RGBA", "LA", "P") and picture.convert("RGBA").getextrema()[3][0] < 255:
                    found.append(index)
    return found


@pytest.mark.parametrize("chapter", chapter_names())
def test_solution_executes_without_errors(chapter, executed_solution):
    from autograder.chapters import CHAPTERS

    executed = executed_solution(chapter)
    assert errors(executed) == []
    assert see_through_pictures(executed) == []
    said = printed(executed)
    assert "FAIL" not in said and said.count("ok  ") >= sum(len(e.checks) for e in CHAPTERS[chapter])


@pytest.mark.parametrize("chapter", chapter_names())
def test_student_copy_executes_with_only_its_checks_failing(chapter, kernel, artifacts):
    executed = execute(paths.NOTEBOOKS / f"{chapter}.ipynb", artifacts / f"{chapter}.student.ipynb", kernel)
    found = errors(executed)
    assert found, "the blank exercises should fail their checks"
    assert all("raises-exception" in tags and name == "AssertionError" for _, tags, name in found), found
    assert "not answered yet" in printed(executed)
    assert_every_figure_drawn(executed)
    assert see_through_pictures(executed) == []
