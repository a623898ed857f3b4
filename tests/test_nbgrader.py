"""The course inside nbgrader's own workflow: a throwaway course directory with chapter 5 (the
fastest), ``generate_assignment``, submissions, then both ways of grading them. nbgrader's apps run
in this process (each CLI call would spend seconds importing).

The sandbox path (``python -m autograder nbgrader``) must put into nbgrader's gradebook exactly
what ``python -m autograder grade`` gives, and nothing for a cheat in the learner's kernel; stock
``nbgrader autograde`` with the course's config must give the planted bug its partial credit and
a correct answer that warns its full marks.
"""

from __future__ import annotations

import csv
import datetime
import json
import shutil
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from autograder import check, grade, nbgrader_course, shards
from autograder.__main__ import main
from autograder.chapters import CHAPTERS
from autograder.mistakes import planted
from autograder.mistakes.flash_attention import BLOCKWISE
from course import timing

pytest.importorskip("nbgrader")

CHAPTER = "05_flash_attention"
NAME = f"{CHAPTER}.ipynb"
SEED = 2026
BUG = planted("flash_attention")["flash_no_rescale"]  # the running output not rescaled
CHEAT = "import autograder.selfcheck as s\ns.run_in_process = lambda *a, **k: s.Verdict(True)\n"
WARNS = "    m = torch.tensor(m)  # correct, but torch warns: UserWarning\n"


def _answers(notebook: dict) -> dict[str, str]:
    return {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in notebook["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution")
    }


def _submit(course, student: str, answers: dict[str, str], when: str = "08:00") -> None:
    notebook = json.loads((course / "release" / "ps1" / NAME).read_text())
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    folder = course / "submitted" / student / "ps1"
    folder.mkdir(parents=True)
    (folder / NAME).write_text(json.dumps(notebook))
    (folder / "timestamp.txt").write_text(f"2026-12-01 {when}:00.000000 UTC")


@pytest.fixture(scope="module")
def course(tmp_path_factory, kernel):
    """A course directory with the chapter released as ps1, due at 09:00, and five submissions
    (the planted bug an hour late)."""
    from nbgrader.api import Gradebook

    root = tmp_path_factory.mktemp("nbgrader-course")
    nbgrader_course.write_source(root, "ps1", [CHAPTER])
    source = root / "source" / "ps1" / NAME
    notebook = json.loads(source.read_text())
    for cell in notebook["cells"]:  # the measurements are not this test's subject: their smallest sizes
        if "parameters" in cell["metadata"].get("tags", []):
            cell["source"] = "LENGTHS = [64, 128]\nHEADS, HEAD_DIM = 1, 16\n"
    source.write_text(json.dumps(notebook))
    assert nbgrader_course.run_app(root, ["generate_assignment", "ps1", "--force"]) == 0
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        gradebook.update_or_create_assignment("ps1", duedate=datetime.datetime(2026, 12, 1, 9))
    solution = _answers(json.loads(source.read_text()))
    warns = solution["online_softmax_update"].replace("### BEGIN SOLUTION\n", "### BEGIN SOLUTION\n" + WARNS)
    _submit(root, "solution", solution)
    _submit(root, "blank", {})
    _submit(root, "bug", {**solution, BUG.grade_id: BUG.source}, when="10:00")
    _submit(root, "cheat", {"online_softmax_update": CHEAT})
    _submit(root, "warns", {**solution, "online_softmax_update": warns})
    return root


def _scores(course) -> dict[str, dict[str, float]]:
    """Each student's points per grade cell, from nbgrader's gradebook database."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {
            s.id: {g.name: g.score for g in gradebook.find_submission_notebook(CHAPTER, "ps1", s.id).grades}
            for s in gradebook.students
        }


def _by_cell(report: grade.Report) -> dict[str, float]:
    """The grader's points per exercise, named as nbgrader names the exercise's grade cell."""
    points = {t.id: t.points for t in report.tests}
    return {f"test_{e.grade_id}": sum(points[c.id] for c in e.checks) for e in CHAPTERS[CHAPTER]}


@pytest.fixture(scope="module")
def bridged(course, tmp_path_factory):
    """The course graded by ``python -m autograder nbgrader`` (the sandbox into nbgrader's gradebook),
    a late submission's score set to 0 by nbgrader's late-submission plugin."""
    root = tmp_path_factory.mktemp("bridged") / "course"
    shutil.copytree(course, root)
    with open(root / "nbgrader_config.py", "a") as config:
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    assert main(["nbgrader", str(root), "ps1", "--seed", str(SEED)]) == 0
    return root


def test_the_gradebook_holds_the_graders_scores_and_the_cheat_gets_nothing(bridged):
    scores = _scores(bridged)

    def graded(student: str) -> grade.Report:
        path = bridged / "submitted" / student / "ps1" / NAME
        return grade.grade(path, seed=shards.submission_seed(SEED, f"{student}/{NAME}"))

    with ThreadPoolExecutor(max_workers=timing.usable_cpus()) as pool:  # each in a sandbox of its own
        reports = dict(zip(scores, pool.map(graded, scores), strict=True))
    for student, cells in scores.items():
        assert cells == _by_cell(reports[student]), student
    full = {f"test_{e.grade_id}": float(e.points) for e in CHAPTERS[CHAPTER]}
    assert scores["solution"] == scores["warns"] == full
    assert sum(scores["blank"].values()) == sum(scores["cheat"].values()) == 0
    assert 0 < sum(scores["bug"].values()) < sum(full.values())


def test_nbgrader_feedback_export_late_penalty_and_comments_show_the_sandboxs_grades(bridged):
    from nbgrader.api import Gradebook

    assert nbgrader_course.run_app(bridged, ["generate_feedback", "ps1", "--force"]) == 0
    page = (bridged / "feedback" / "bug" / "ps1" / f"{CHAPTER}.html").read_text()
    assert "rescaled" in page  # the hint, as the check cell's output
    assert nbgrader_course.run_app(bridged, ["export", f"--to={bridged / 'grades.csv'}"]) == 0
    with open(bridged / "grades.csv") as file:
        exported = {row["student_id"]: row for row in csv.DictReader(file)}
    for student, cells in _scores(bridged).items():
        assert float(exported[student]["raw_score"]) == sum(cells.values()), student
        late = student == "bug"
        assert float(exported[student]["score"]) == (0 if late else sum(cells.values())), student
    with Gradebook(f"sqlite:///{bridged / 'gradebook.db'}") as gradebook:
        comment = gradebook.find_comment(BUG.grade_id, CHAPTER, "ps1", "bug").comment
    assert "rescaled" in comment and "online_softmax_update.larger" in comment


def test_stock_autograde_gives_partial_credit_and_keeps_warnings_from_zeroing(course, tmp_path_factory):
    """``nbgrader autograde`` with the course's config: the checks run in the learner's kernel."""
    root = tmp_path_factory.mktemp("stock") / "course"
    shutil.copytree(course, root)
    assert nbgrader_course.run_app(root, ["autograde", "ps1", "--force"]) == 0
    scores = _scores(root)
    full = {f"test_{e.grade_id}": float(e.points) for e in CHAPTERS[CHAPTER]}
    assert scores["solution"] == scores["warns"] == full
    assert sum(scores["blank"].values()) == 0
    assert sum(scores["bug"].values()) > 0
    for exercise in CHAPTERS[CHAPTER]:  # partial credit: the points of the checks the bug fails are lost, no more
        lost = sum(c.points for c in exercise.checks if c.id in BUG.must_fail)
        assert scores["bug"][f"test_{exercise.grade_id}"] <= exercise.points - lost
    assert scores["bug"]["test_quiz_flash_attention"] == full["test_quiz_flash_attention"]
    # What in-kernel grading cannot prevent (the nbgrader guide says so): the cheat's two lines get full marks.
    assert scores["cheat"] == full


def _namespace(source: str) -> dict:
    namespace = {}
    exec("import math\nimport warnings\nimport torch\n" + source, namespace)
    return namespace


def test_check_returns_the_points_under_autograde_and_prints_warnings_on_stdout(monkeypatch, capsys):
    right = BLOCKWISE.format(correction="torch.exp(m - m_new)", shift="m_new")
    warning = right.replace("    m_new =", "    warnings.warn('deprecated', UserWarning)\n    m_new =", 1)
    with pytest.raises(AssertionError):
        check("online_softmax_update", hidden=True, namespace=_namespace(BUG.source))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escaped check() would raise here
        assert check("online_softmax_update", hidden=True, namespace=_namespace(warning)) == 3
        assert check("online_softmax_update", hidden=True, namespace=_namespace(BUG.source)) == 2
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "note: your code warned" in shown.out and "UserWarning: deprecated" in shown.out


def test_source_names_an_unknown_chapter(tmp_path, capsys):
    assert main(["nbgrader-source", str(tmp_path), "ps1", "06_flash"]) == 2
    assert "unknown chapter 06_flash" in capsys.readouterr().err


def test_hidden_tests_are_removed_as_nbgrader_removes_them():
    """The one removal of hidden tests (``notebook.without_hidden_tests``, which the grader and the
    nbgrader glue use) gives nbgrader's release's own result on every check cell of every chapter,
    and on a region in the middle of a cell."""
    import nbformat
    from nbgrader.preprocessors import ClearHiddenTests

    from autograder import notebook, release

    middle = "check('a')\n### BEGIN HIDDEN TESTS\ncheck('a', hidden=True)\n### END HIDDEN TESTS\nprint('after')\n"
    sources = [middle] + [
        cell.source
        for source in release.chapters()
        for cell in release.instructor_notebook(source).cells
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade")
    ]
    assert sum("BEGIN HIDDEN TESTS" in s for s in sources) > 10
    for source in sources:
        cell = nbformat.v4.new_code_cell(source)
        ClearHiddenTests()._remove_hidden_test_region(cell)
        assert notebook.without_hidden_tests(source) == cell.source
