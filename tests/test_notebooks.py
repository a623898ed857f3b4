"""Every chapter executes headless: the instructor's source without any error, the student copy
with errors only in its check cells (the exercises are blank), each cell within the per-cell limit
(``autograder.headless``), and every picture opaque, so dark themes show it as drawn. How long a
chapter takes is a benchmark, not a test: `make bench` times every chapter and reports those over
the budget."""

import base64
import io
import re

import pytest
from PIL import Image

from course import paths

from conftest import chapter_names, errors, execute


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
def test_solution_executes_without_errors(chapter, instructor_notebooks, kernel, artifacts):
    executed = execute(instructor_notebooks[chapter], artifacts / f"{chapter}.solution.ipynb", kernel)
    assert errors(executed) == []
    assert see_through_pictures(executed) == []
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    from autograder.chapters import CHAPTERS

    assert "FAIL" not in printed and printed.count("ok  ") >= sum(len(e.checks) for e in CHAPTERS[chapter])


@pytest.mark.parametrize("chapter", chapter_names())
def test_student_copy_executes_with_only_its_checks_failing(chapter, kernel, artifacts):
    executed = execute(paths.NOTEBOOKS / f"{chapter}.ipynb", artifacts / f"{chapter}.student.ipynb", kernel)
    found = errors(executed)
    assert found, "the blank exercises should fail their checks"
    assert all("raises-exception" in tags and name == "AssertionError" for _, tags, name in found), found
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "not answered yet" in printed
    drawing = [
        c
        for c in executed["cells"]
        if c["cell_type"] == "code" and re.search(r"\bplots\.(plot|widget)_", "".join(c["source"]))
    ]
    assert drawing, "every chapter has figures"
    assert see_through_pictures(executed) == []
    for cell in drawing:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert images, f"no figure rendered headless for: {''.join(cell['source'])[:80]}"
        if re.search(
            r"\bplots\.widget_", "".join(cell["source"])
        ):  # the widget's static view, for front ends without widgets
            assert any("application/vnd.jupyter.widget-view+json" in o["data"] for o in images)
