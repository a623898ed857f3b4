"""Windows and macOS learners, simulated (``tests/_platforms.py`` says what is taken away and what is
not): the check cells and the grader give them what they give a Linux learner, on every chapter's
solution, its blank copy and one of its planted mistakes: the same verdicts, and hints in the same
words.

A chapter's planted mistake is the first of its ``PLANTED`` (``autograder/mistakes/<slug>.py``), put
into the blank student copy (with the solution's answers to the exercises it builds on), so that
only that exercise's checks cost time. Linux runs the same blanks and mistakes here, unsimulated, to compare
with; a solution must pass every check everywhere.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import grade, release
from autograder.chapters import exercise_by_id
from autograder.mistakes import planted
from course import paths

from conftest import COPIES_SEED, GENEROUS, _replace_answer

HERE = Path(__file__).resolve().parent
SIMULATED = ("windows", "macos")
KINDS = ("solution", "blank", "mistake")
SEED = COPIES_SEED  # the blanks' Linux reports are conftest's copies_graded
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def words(text: str) -> str:
    """A hint without its numbers: a planted mistake may draw from an unseeded generator (a B not
    zero, say), so what it got differs from run to run while its verdict and the hint's words do not."""
    return NUMBER.sub("#", text)


def _answer_source(notebook: dict, grade_id: str) -> str:
    for cell in notebook["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    raise KeyError(grade_id)


@pytest.fixture(scope="module")
def cases(instructor_notebooks, tmp_path_factory) -> dict:
    """The submissions, a folder per kind (``solution/``, ``blank/``, ``mistake/``), and what the
    check cells run on: label -> the plan entry of ``tests/_check_cells.py``."""
    folder = tmp_path_factory.mktemp("platforms")
    plan = {}
    for source in release.chapters():
        chapter, slug = source.stem, paths.slug(source)
        student = paths.NOTEBOOKS / f"{chapter}.ipynb"
        solution = json.loads(instructor_notebooks[chapter].read_text())
        mistake = json.loads(student.read_text())
        wrong = next(iter(planted(slug).values()))
        for helper in exercise_by_id(wrong.grade_id).builds_on:
            _replace_answer(mistake, helper, _answer_source(solution, helper))
        _replace_answer(mistake, wrong.grade_id, wrong.source)
        files = {
            "solution": json.dumps(solution),
            "blank": student.read_text(),
            "mistake": json.dumps(mistake),
        }
        for kind, text in files.items():
            (folder / kind).mkdir(exist_ok=True)
            (folder / kind / f"{chapter}.ipynb").write_text(text)
        answers = {kind: str(folder / kind / f"{chapter}.ipynb") for kind in files}
        plan[f"{chapter} solution"] = {"notebook": str(student), "answers": answers["solution"]}
        plan[f"{chapter} blank"] = {"notebook": str(student)}
        only = [wrong.grade_id, *sorted(wrong.calls_it)]
        plan[f"{chapter} mistake"] = {"notebook": str(student), "answers": answers["mistake"], "only": only}
    (folder / "plan.json").write_text(json.dumps(plan))
    unsimulated = {label: job for label, job in plan.items() if not label.endswith("solution")}
    (folder / "plan-linux.json").write_text(json.dumps(unsimulated))
    return {"folder": folder, "plan": plan}


def _simulated(system: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HERE / "_platforms.py"), system, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=paths.ROOT,
    )


@pytest.fixture(scope="module")
def check_cells(cases, artifacts) -> dict[str, dict]:
    """system -> label -> each check cell's report (``tests/_check_cells.py``); the counts of ``ok``
    and ``FAIL`` also go to ``test-artifacts/platforms-check-cells.json``."""
    found = {}
    for system in ("linux", *SIMULATED):
        script = [str(HERE / "_check_cells.py")]
        if system == "linux":
            done = subprocess.run(
                [sys.executable, *script, str(cases["folder"] / "plan-linux.json")],
                capture_output=True,
                text=True,
                timeout=1800,
            )
        else:
            done = _simulated(system, *script, str(cases["folder"] / "plan.json"))
        assert done.returncode == 0, done.stderr[-3000:]
        found[system] = json.loads(done.stdout)
    counts = {
        system: {
            label: [sum(c["ok"] for c in v.values()), sum(c["fail"] for c in v.values())] for label, v in runs.items()
        }
        for system, runs in found.items()
    }
    (artifacts / "platforms-check-cells.json").write_text(json.dumps(counts, indent=1))
    return found


@pytest.fixture(scope="module")
def grades(cases, copies_graded, tmp_path_factory, artifacts) -> dict[str, dict]:
    """system -> "kind/chapter" -> the report as JSON, every kind graded in one run per system (Linux:
    the mistakes, in this process, and the blanks of conftest's ``copies_graded``, graded there with
    the same seed and the same paths); the scores also go to ``test-artifacts/platforms-grades.json``."""
    folder, found = cases["folder"], {}
    for system in SIMULATED:
        out = tmp_path_factory.mktemp(f"graded-{system}")
        done = _simulated(
            system,
            *("-m", "autograder", "grade-folder", str(folder), "--out", str(out), "--seed", str(SEED)),
            *("--timeout", str(GENEROUS.wall_seconds), "--call-timeout", str(GENEROUS.probe_seconds)),
        )  # Linux's limits: a busy machine (a second make test) must not time a call out here alone
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        found[system] = _reports(out)
    linux = tmp_path_factory.mktemp("linux-cases")
    shutil.copytree(folder / "mistake", linux / "mistake")
    out = tmp_path_factory.mktemp("graded-linux")
    grade.grade_folder(linux, out, GENEROUS, seed=SEED)
    blanks = {key: report.as_json() for key, report in copies_graded[0].items() if key.startswith("blank/")}
    found["linux"] = _reports(out) | blanks
    scores = {
        system: {key: [r["score"], r["max_score"], r["isolation"]] for key, r in sorted(reports.items())}
        for system, reports in found.items()
    }
    (artifacts / "platforms-grades.json").write_text(json.dumps(scores, indent=1))
    return found


def _reports(out: Path) -> dict[str, dict]:
    return {
        f"{path.name.split('__')[0]}/{path.stem.split('__')[1]}": json.loads(path.read_text())
        for path in out.glob("*__*.json")
    }


def _tests(report: dict) -> list[tuple]:
    return [(t["id"], t["points"], words(t["hint"])) for t in report["tests"]]


def _cells(found: dict) -> dict:
    return {grade_id: {**cell, "lines": [words(line) for line in cell["lines"]]} for grade_id, cell in found.items()}


@pytest.mark.parametrize("system", SIMULATED)
def test_check_cells_pass_every_solution(check_cells, cases, system):
    for label in (label for label in cases["plan"] if label.endswith("solution")):
        cells = check_cells[system][label]
        assert cells and all(c["raised"] is None and c["fail"] == 0 and c["ok"] > 0 for c in cells.values()), (
            f"{system}, {label}: {cells}"
        )


@pytest.mark.parametrize("system", SIMULATED)
def test_check_cells_say_on_blanks_and_mistakes_what_they_say_on_linux(check_cells, cases, system):
    for label in check_cells["linux"]:
        assert _cells(check_cells[system][label]) == _cells(check_cells["linux"][label]), label
        if label.endswith("mistake"):  # the mistake is caught there too, not merely alike
            assert any(c["fail"] for c in check_cells[system][label].values()), label


@pytest.mark.parametrize("system", SIMULATED)
def test_the_grader_gives_solutions_full_marks(grades, system):
    solutions = {key: r for key, r in grades[system].items() if key.startswith("solution/")}
    assert len(solutions) == len(release.chapters())
    for key, report in solutions.items():
        assert report["score"] == report["max_score"] > 0, (key, [t for t in report["tests"] if not t["passed"]])


@pytest.mark.parametrize("system", SIMULATED)
def test_the_grader_grades_blanks_and_mistakes_as_on_linux(grades, system):
    compared = [key for key in grades["linux"] if not key.startswith("solution/")]
    assert len(compared) == 2 * len(release.chapters())
    for key in compared:
        assert _tests(grades[system][key]) == _tests(grades["linux"][key]), key
        if key.startswith("blank/"):
            assert grades[system][key]["score"] == 0, key


@pytest.mark.parametrize("system", SIMULATED)
def test_each_system_reports_the_mode_it_graded_in(grades, system):
    modes = {report["isolation"] for report in grades[system].values()}
    assert len(modes) == 1 and next(iter(modes)).startswith("limits only"), modes
    notes = {m for report in grades[system].values() for m in report["messages"] if m.startswith("isolation:")}
    assert len(notes) == 1, notes
    (note,) = notes
    assert "limits only" in note
    assert ("every call runs in the sandbox's one process" in note) == (system == "windows"), note


HOSTILE_ON_WINDOWS = '''
import json
from autograder import sandbox
answer = """
import os, time
def two():
    return 2
def leave():
    os._exit(3)
def spin():
    while True:
        pass
def stubborn():
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
def hog():
    held = [bytearray(2**26) for _ in range(64)]  # 4 GiB, 64 MiB at a time
    return len(held)
"""
calls = ["two", "leave", "two", "spin", "two", "spin", "stubborn", "hog", "two"]
job = {
    "setup": [],
    "answers": [{"grade_id": "answer", "source": answer}],
    "probes": [{"id": f"{i} {name}", "call": name, "args": [], "kwargs": {}} for i, name in enumerate(calls)],
}
limits = sandbox.Limits(wall_seconds=300, probe_seconds=5, cell_seconds=10, memory_bytes=2**30)
outcome = sandbox.run(job, limits)
print(json.dumps({"probes": outcome.results["probes"], "problem": outcome.problem, "notes": outcome.notes}))
'''


def test_on_windows_a_call_that_ends_the_sandbox_costs_that_call_only(tmp_path):
    """Without fork, calls share the sandbox's process: an exit, a hang (one that ignores its timer
    too) and the memory limit each fail their own call, and the calls after them still run."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE_ON_WINDOWS)
    done = _simulated("windows", str(script))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    probes = found["probes"]
    assert [probes[k] for k in ("0 two", "2 two", "4 two", "8 two")] == [{"returned": 2}] * 4, probes
    assert probes["1 leave"] == {"crashed": "leave ended its process (exit code 3) before returning"}
    assert probes["3 spin"] == {"timeout": 5} and probes["6 stubborn"] == {"timeout": 5}
    assert probes["5 spin"] == {"skipped": "an earlier call of spin did not finish"}
    assert "memory limit of 1.0 GiB" in probes["7 hog"]["crashed"], probes["7 hog"]
    assert found["problem"] == "" and len(found["notes"]) == 1, found
    assert found["notes"][0].startswith("a call was stopped at") and "over the limit of 1.0 GiB" in found["notes"][0]
