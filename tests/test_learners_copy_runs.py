"""The learners' copy's chapters, executed headless from the copy: blank, as a learner first opens
them, and solved, with the solution's answers written in. The copy is built once a test run
(``conftest.learners_copy_folder``), and each chapter's blank run is made once (``conftest.blank_run``),
for these tests and the site's pages; these tests go to whichever worker is free. The build and these
runs give the chapters the same sizes of measurements (``conftest.MEASUREMENT_SIZES``)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import (
    MEASUREMENT_SIZES,
    assert_every_figure_drawn,
    errors,
    learners_copy_chapters,
    long_tracebacks,
    printed,
    see_through_pictures,
    with_the_solutions_answers,
)


def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", text)


MEASURED = re.compile(
    r"\btiming\.|perf_counter|memory_bandwidth|choose_threads|measure_drafts"
)  # a cell that measures this machine


def _readings(executed: dict) -> list[tuple[int, list[str]]]:
    """The numbers each code cell printed (its stdout: stderr carries libraries' logs, with their
    clocks, and progress bars) but the answer and check cells (the verdicts are compared
    above, and the instructor's check cells run the hidden checks too) and the cells that measure
    this machine (tagged ``measures``, or their source times, or reads the bandwidth or threads) or
    print what a library computes differently from one run to the next (tagged ``varies``: chapter
    8's llmcompressor GPTQ, whose threaded sums differ in the last bits): those differ between runs."""
    found = []
    for index, cell in enumerate(c for c in executed["cells"] if c["cell_type"] == "code"):
        metadata = cell.get("metadata", {})
        tags = metadata.get("tags", [])
        measures = "measures" in tags or "varies" in tags or MEASURED.search("".join(cell["source"]))
        if not metadata.get("nbgrader") and not measures:
            said = "".join("".join(o["text"]) for o in cell.get("outputs", []) if o.get("name") == "stdout")
            found.append((index, _numbers(said)))
    return found


def _as_the_copy_prints(executed: dict) -> dict:
    """The instructor's run as the learners' copy prints it: the capstone's reading of the course's
    own configuration, whose figures would name it, replaced by the copy's sentence that says so
    (``course.choosing_a_technique.NOT_IN_THIS_COPY``); every other output as it was."""
    from course import choosing_a_technique

    reading = choosing_a_technique.stored_reference_reading()  # this process is the instructor's copy
    copy = json.loads(json.dumps(executed))
    for cell in copy["cells"]:
        for output in cell.get("outputs", []):
            if output.get("name") == "stdout":
                output["text"] = "".join(output["text"]).replace(reading, choosing_a_technique.NOT_IN_THIS_COPY)
    return copy


RUNNING = learners_copy_chapters()


@pytest.mark.parametrize("kind", ["blank", "solved"])
@pytest.mark.parametrize("chapter", RUNNING)
def test_the_learners_copy_runs_headless(
    chapter, kind, learners_copy_folder, kernel, executed_solution, blank_run, tmp_path, monkeypatch
):
    """The chapters that run without the answers do, every figure drawn and opaque (dark themes
    show it as drawn), no withheld call left unanswered. Blank (the student copy as learners get
    it): no cell raises but the check cells, with the blank answers' AssertionError. Solved (the
    solution's answers in the copy's notebook): no cell raises, and every cell prints the numbers
    the instructor's copy prints (the cells that measure this machine aside)."""
    import nbformat

    from autograder import headless

    instructor = executed_solution(chapter)  # before the copy is on the path: its kernel is the instructor's
    if kind == "blank":  # run once for this test and the site's page of the chapter (tests/test_site.py)
        executed = json.loads(blank_run(chapter).read_text())
    else:
        monkeypatch.setenv("PYTHONPATH", str(learners_copy_folder))
        notebook = tmp_path / f"{chapter}.ipynb"
        nbformat.write(with_the_solutions_answers(chapter, learners_copy_folder), notebook)
        sizes = MEASUREMENT_SIZES.get(chapter)  # the build's: its recordings answer these
        executed = headless.execute(
            notebook, tmp_path / "out.ipynb", kernel, cwd=learners_copy_folder / "notebooks", parameters=sizes
        )
    found = errors(executed)
    said = printed(executed)
    assert "withheld from the learners' copy" not in said
    assert_every_figure_drawn(executed)
    assert see_through_pictures(executed) == []
    if kind == "blank":
        assert found, "the blank exercises should fail their checks"
        assert all("raises-exception" in tags and name == "AssertionError" for _, tags, name in found), found
        assert long_tracebacks(executed) == []
        assert "not answered yet" in said
        assert "not written yet" in said  # a cell the learner's function drives says it waits for it
    else:
        assert found == [], found
        assert "not written yet" not in said
        readings = _readings(executed)
        assert any(numbers for _, numbers in readings)  # the chapter prints readings to compare
        assert readings == _readings(_as_the_copy_prints(instructor))
