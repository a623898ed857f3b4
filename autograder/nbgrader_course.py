"""nbgrader as the course's distribution and gradebook, with the sandbox as its grader.

nbgrader's ``autograde`` sanitizes each submitted notebook (locked and test cells restored from
its database), then runs a list of preprocessors over it: ``Execute`` runs every cell in the
learner's kernel, ``SaveAutoGrades`` reads each grade cell's points from its outputs into the
gradebook database, ``AssignLatePenalties`` applies the late-submission plugin. :data:`PREPROCESSORS`
is that list with ``Execute`` replaced by :class:`SandboxGrade`, which grades the notebook with
:func:`autograder.grade.grade` (answer cells only, in the sandbox, judged out of the learner's
reach) and writes each grade cell's result as its output: the checks' ``ok``/``FAIL`` lines and
the points as the cell's value. nbgrader's own steps then store the scores, the submission, the
timestamp, the late penalty and the ``autograded/`` notebook that ``generate_feedback`` renders;
:class:`SandboxComments` adds the hints of the failed checks as comments on the answer cells.

:func:`autograde` runs nbgrader's ``autograde`` app in this process with these preprocessors
(``python -m autograder nbgrader COURSE ASSIGNMENT``); :func:`write_source` puts chapters into a
course's ``source/`` with the course's ``nbgrader_config.py``.

Not handled: a grade cell that checks no exercise of the course (one an instructor added) gets
0 points and a note asking for a manual grade; a grade cell's points that differ from the
exercise's are scaled to them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, SaveAutoGrades
from traitlets import Float, Integer, List, Unicode
from traitlets.config import Config

from autograder import grade, release, sandbox, shards
from autograder.chapters import CHAPTERS

CONFIG = Path(__file__).with_name("nbgrader_config.py")  # the course's settings for stock nbgrader
REPORT = "sandbox_report"  # where SandboxGrade leaves the report for SandboxComments (nbgrader's resources)
_CHECKED = re.compile(r"""\bcheck\(\s*["'](\w+)["']""")


def checked_exercise(cell: dict) -> str | None:
    """The exercise a grade cell checks: the first ``check("...")`` of its source."""
    found = _CHECKED.search(cell.get("source", ""))
    return found.group(1) if found else None


class SandboxGrade(NbGraderPreprocessor):
    """Grade the notebook in the sandbox and write each grade cell's points as its output."""

    seed = Integer(None, allow_none=True, help="the class seed of the hidden inputs (fresh when None)").tag(config=True)
    wall_seconds = Float(sandbox.Limits.wall_seconds, help="seconds per submission").tag(config=True)
    memory_gib = Float(sandbox.Limits.memory_bytes / 2**30, help="GiB of resident memory per submission").tag(
        config=True
    )
    hide = List(Unicode(), help="folders the sandbox hides (the course directory)").tag(config=True)

    def preprocess(self, nb, resources):
        where = resources["nbgrader"]
        name = f"{where['notebook']}.ipynb"
        limits = sandbox.Limits(wall_seconds=self.wall_seconds, memory_bytes=int(self.memory_gib * 2**30))
        seed = None if self.seed is None else shards.submission_seed(self.seed, f"{where['student']}/{name}")
        with tempfile.TemporaryDirectory(prefix="nbgrader-sandbox-") as work:
            nbformat.write(nb, Path(work) / name)
            report = grade.grade(Path(work) / name, limits, seed, hide=[Path(p) for p in self.hide])
        resources[REPORT] = report
        for cell in nb.cells:
            if utils.is_grade(cell) and cell.cell_type == "code":
                cell.outputs = cell_outputs(report, checked_exercise(cell), float(cell.metadata.nbgrader["points"]))
        self.log.info("%s: %g / %g in the sandbox", name, report.score, report.max_score)
        return nb, resources


def cell_outputs(report: grade.Report, exercise: str | None, max_points: float) -> list:
    """A grade cell's outputs: the lines of its exercise's checks on stdout, and its points as the
    cell's value (which nbgrader reads as partial credit), scaled to ``max_points``."""
    known = {c.id: c for e in CHAPTERS.get(report.chapter, []) if e.grade_id == exercise for c in e.checks}
    tests = [t for t in report.tests if t.id in known]
    lines = [f"{'ok  ' if t.passed else 'FAIL'} {known[t.id].what} [{t.max_points:g} pt]" for t in tests]
    lines += [f"     hint: {t.hint}" for t in tests if not t.passed]
    if not tests:
        lines.append(
            f"this cell was not graded: {exercise or 'it checks no exercise'} is not among the checks "
            f"of {report.chapter or 'this notebook'} (grade it by hand)"
        )
    lines += [f"note: {message}" for message in report.messages]
    possible = sum(t.max_points for t in tests)
    points = sum(t.points for t in tests) * max_points / possible if possible else 0.0
    return [
        nbformat.v4.new_output("stream", name="stdout", text="\n".join(lines) + "\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=None),
    ]


class SandboxComments(NbGraderPreprocessor):
    """Write the hints of each exercise's failed checks as the comment on its answer cell (after
    ``SaveAutoGrades``, which sets the comments nbgrader itself gives)."""

    def preprocess(self, nb, resources):
        report = resources.get(REPORT)
        where = resources["nbgrader"]
        if report is None:
            return nb, resources
        hints = {e.grade_id: failed_hints(report, e) for e in CHAPTERS.get(report.chapter, [])}
        with Gradebook(where["db_url"]) as gradebook:
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if not utils.is_solution(cell) or grade_id not in hints:
                    continue
                comment = gradebook.find_comment(grade_id, where["notebook"], where["assignment"], where["student"])
                lines = [comment.auto_comment] if comment.auto_comment else []
                lines += hints[grade_id]
                comment.auto_comment = "\n".join(lines) or None
            gradebook.db.commit()
        return nb, resources


def failed_hints(report: grade.Report, exercise) -> list[str]:
    """A line per distinct hint of the failed checks of ``exercise``, led by the checks that gave it."""
    ids = {c.id for c in exercise.checks}
    by_hint: dict[str, list[str]] = {}
    for test in report.tests:
        if test.id in ids and not test.passed:
            by_hint.setdefault(test.hint, []).append(test.id)
    return [f"{', '.join(checks)}: {hint}" for hint, checks in by_hint.items()]


def preprocessors() -> list:
    """nbgrader's own autograde steps with :class:`SandboxGrade` in place of ``Execute``, and
    :class:`SandboxComments` right after ``SaveAutoGrades``."""
    steps = []
    for step in Autograde.class_traits()["autograde_preprocessors"].default():
        steps.append(SandboxGrade if step is Execute else step)
        if step is SaveAutoGrades:
            steps.append(SandboxComments)
    return steps


@contextlib.contextmanager
def _in_course(course: Path):
    """Inside the course directory (nbgrader reads its config there), with this environment's
    scripts first on PATH (nbgrader runs ``alembic`` from PATH when it creates a database)."""
    old_cwd, old_path = Path.cwd(), os.environ.get("PATH", "")
    os.chdir(course)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{old_path}"
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ["PATH"] = old_path


def run_app(course: Path, argv: list[str], extra: Config | None = None) -> int:
    """Run ``nbgrader ARGV`` in this process on ``course``; return its exit status. ``extra``
    config is laid over the course's own."""
    from jupyter_core.application import NoStart
    from nbgrader.apps import NbGraderApp

    with _in_course(Path(course)):
        app = NbGraderApp.instance()
        try:
            app.initialize(argv)
            if extra is not None:
                app.subapp.update_config(extra)
            app.start()
        except NoStart:  # how jupyter's apps end once their subcommand has run
            return 0
        except SystemExit as stop:  # nbgrader's apps exit with 1 when a notebook could not be processed
            return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        finally:
            if app.subapp is not None:
                type(app.subapp).clear_instance()
            NbGraderApp.clear_instance()
    return 0


def autograde(
    course: Path, assignment: str, student: str = "*", limits: sandbox.Limits | None = None, seed: int | None = None
) -> int:
    """``nbgrader autograde ASSIGNMENT --force`` on ``course`` with the sandbox as the grader:
    every submission of ``student`` (all by default) is graded by :func:`autograder.grade.grade`
    and its scores, comments, late penalty and autograded notebook go where nbgrader keeps them.
    Returns nbgrader's exit status. Raises :class:`sandbox.SandboxUnavailable` before grading
    anything when the sandbox cannot start."""
    course = Path(course).resolve()
    limits = limits or sandbox.Limits()
    sandbox.isolation(limits.memory_bytes)
    extra = Config()
    extra.Autograde.autograde_preprocessors = preprocessors()
    extra.SandboxGrade.seed = seed
    extra.SandboxGrade.wall_seconds = limits.wall_seconds
    extra.SandboxGrade.memory_gib = limits.memory_bytes / 2**30
    extra.SandboxGrade.hide = [str(course)]
    return run_app(course, ["autograde", assignment, "--force", f"--student={student}"], extra)


class UnknownChapter(ValueError):
    """A chapter name that is not one of the course's."""


def write_source(course: Path, assignment: str, chapters: list[str]) -> list[Path]:
    """Put each chapter (its name, ``05_flash_attention``, or slug) into ``course/source/ASSIGNMENT/``
    as the instructor's notebook (solutions and hidden tests included), and the course's
    ``nbgrader_config.py`` into ``course`` when it has none. Returns the paths written."""
    by_name = {source.stem: source for source in release.chapters()}
    by_name |= {source.stem.split("_", 1)[1]: source for source in release.chapters()}
    unknown = [name for name in chapters if name not in by_name]
    if unknown:
        raise UnknownChapter(f"unknown chapter {', '.join(unknown)}: choose from {', '.join(sorted(by_name))}")
    folder = Path(course) / "source" / assignment
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in chapters:
        source = by_name[name]
        nbformat.write(release.instructor_notebook(source), folder / f"{source.stem}.ipynb")
        written.append(folder / f"{source.stem}.ipynb")
    config = Path(course) / "nbgrader_config.py"
    if not config.exists():
        shutil.copy(CONFIG, config)
        written.append(config)
    return written
