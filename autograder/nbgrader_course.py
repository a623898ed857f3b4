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
import warnings
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.converters import Autograde
from nbgrader.preprocessors import (
    Execute,
    NbGraderPreprocessor,
    OverwriteCells,
    SaveAutoGrades,
)
from traitlets import Float, Integer, List, Unicode
from traitlets.config import Config

from autograder import grade, release, sandbox, shards
from autograder.chapters import CHAPTERS
from autograder.notebook import without_hidden_tests

CONFIG = Path(__file__).with_name("nbgrader_config.py")  # the course's settings for stock nbgrader
TEMPLATES = Path(__file__).with_name("templates")  # the feedback page's template (offline: no MathJax)
REPORT = "sandbox_report"  # where SandboxGrade leaves the report for SandboxComments (nbgrader's resources)
LEARNER_VIEW = "course_learner_view"  # a grade cell's metadata: its output as released feedback shows it
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
                exercise = checked_exercise(cell)
                cell.outputs = cell_outputs(report, exercise, float(cell.metadata.nbgrader["points"]))
                cell.metadata[LEARNER_VIEW] = learner_view(report, exercise)
        self.log.info("%s: %g / %g in the sandbox", name, report.score, report.max_score)
        return nb, resources


def _exercise_tests(report: grade.Report, exercise: str | None) -> list[tuple]:
    """(test, check) of each of ``exercise``'s checks in ``report``."""
    known = {c.id: c for e in CHAPTERS.get(report.chapter, []) if e.grade_id == exercise for c in e.checks}
    return [(t, known[t.id]) for t in report.tests if t.id in known]


def cell_outputs(report: grade.Report, exercise: str | None, max_points: float) -> list:
    """A grade cell's outputs: the lines of its exercise's checks on stdout, and its points as the
    cell's value (which nbgrader reads as partial credit), scaled to ``max_points``."""
    tests = _exercise_tests(report, exercise)
    lines = [f"{'ok  ' if t.passed else 'FAIL'} {check.what} [{t.max_points:g} pt]" for t, check in tests]
    lines += [f"     hint: {t.hint}" for t, _ in tests if not t.passed]
    if not tests:
        lines.append(
            f"this cell was not graded: {exercise or 'it checks no exercise'} is not among the checks "
            f"of {report.chapter or 'this notebook'} (grade it by hand)"
        )
    lines += [f"note: {message}" for message in report.messages]
    possible = sum(t.max_points for t, _ in tests)
    points = sum(t.points for t, _ in tests) * max_points / possible if possible else 0.0
    return [
        nbformat.v4.new_output("stream", name="stdout", text="\n".join(lines) + "\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=None),
    ]


def learner_view(report: grade.Report, exercise: str | None) -> str:
    """What released feedback shows of a grade cell: each visible check, with its hint when it
    failed, and the hidden checks only as a count and their points (their names, inputs and hints
    would tell learners what the hidden inputs are)."""
    tests = _exercise_tests(report, exercise)
    lines = []
    for t, check in tests:
        if check.visible:
            lines.append(f"{'ok  ' if t.passed else 'FAIL'} {check.what} [{t.max_points:g} pt]")
            lines += [f"     hint: {t.hint}"] if not t.passed else []
    hidden = [t for t, check in tests if not check.visible]
    if hidden:
        passed = [t for t in hidden if t.passed]
        lines.append(
            f"hidden checks: {len(passed)} of {len(hidden)} passed, "
            f"{sum(t.points for t in hidden):g} of {sum(t.max_points for t in hidden):g} pt"
        )
    if not tests:
        lines.append("this cell was not graded automatically (your instructor grades it by hand)")
    return "\n".join(lines) + "\n"


class SandboxComments(NbGraderPreprocessor):
    """Write the hints of each exercise's failed visible checks, and how many hidden checks failed,
    as the comment on its answer cell (after ``SaveAutoGrades``, which sets the comments nbgrader
    itself gives), one Markdown list item each: released feedback renders comments as Markdown."""

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
                lines += [f"- {hint}" for hint in hints[grade_id]]
                comment.auto_comment = "\n".join(lines) or None
            gradebook.db.commit()
        return nb, resources


def failed_hints(report: grade.Report, exercise) -> list[str]:
    """A line per distinct hint of the failed visible checks of ``exercise``, led by the checks
    that gave it, then one line for the failed hidden checks, whose hints stay with the instructor
    (the grade cell's output in formgrader shows them)."""
    visible = {c.id for c in exercise.checks if c.visible}
    hidden = {c.id for c in exercise.checks if not c.visible}
    by_hint: dict[str, list[str]] = {}
    failed_hidden = 0
    for test in report.tests:
        if test.passed:
            continue
        if test.id in visible:
            by_hint.setdefault(test.hint, []).append(test.id)
        failed_hidden += test.id in hidden
    lines = [f"{', '.join(checks)}: {hint}" for hint, checks in by_hint.items()]
    if failed_hidden:
        lines.append(
            f"{failed_hidden} hidden check{'s' * (failed_hidden > 1)} failed: "
            "they test what the visible checks do on other inputs"
        )
    return lines


class HiddenTestsRestored(OverwriteCells):
    """nbgrader's ``OverwriteCells`` without its false alarm for grade cells with hidden tests: the
    student copies never held those lines, so every honest submission's checksum "changed"
    (nbgrader issue 1961). A change beyond the hidden tests is still reported."""

    def preprocess_cell(self, cell, resources, cell_index):
        self._submitted = cell.get("source", "")
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name, attr, old, new):
        if attr == "checksum":
            source = self.gradebook.find_source_cell(name, self.notebook_id, self.assignment_id).source
            if without_hidden_tests(source) == self._submitted:
                return
        super().report_change(name, attr, old, new)


class LearnerFeedback(NbGraderPreprocessor):
    """Released feedback as learners may see it: each grade cell's source without its hidden tests,
    and its output as :func:`learner_view` wrote it at grading (formgrader keeps the full one)."""

    # configurable, as in nbgrader's GetGrades: the feedback page's exporter sets it for every step
    display_data_priority = List(NbGraderPreprocessor.class_traits()["display_data_priority"].default()).tag(
        config=True
    )

    def preprocess_cell(self, cell, resources, cell_index):
        if utils.is_grade(cell) and cell.cell_type == "code":
            cell.source = without_hidden_tests(cell.source)
            view = cell.metadata.pop(LEARNER_VIEW, None)
            if view is not None:
                kept = [o for o in cell.outputs if o.get("output_type") == "execute_result"]
                cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=view), *kept]
        return cell, resources


def quiet_database_notices() -> None:
    """SQLAlchemy 2's notice each time nbgrader builds a submission's records before adding them to
    its session (``Object of type <SubmittedAssignment> not in session ...``): the records are added
    right after, so it says nothing about the submission."""
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", message=r"Object of type <\w+> not in session", category=SAWarning)


def preprocessors() -> list:
    """nbgrader's own autograde steps with :class:`SandboxGrade` in place of ``Execute``, and
    :class:`SandboxComments` right after ``SaveAutoGrades``."""
    steps = []
    for step in Autograde.class_traits()["autograde_preprocessors"].default():
        steps.append(SandboxGrade if step is Execute else step)
        if step is SaveAutoGrades:
            steps.append(SandboxComments)
    return steps


def sanitize_preprocessors() -> list:
    """nbgrader's steps that restore a submission's locked cells, with :class:`HiddenTestsRestored`
    in place of ``OverwriteCells``."""
    steps = Autograde.class_traits()["sanitize_preprocessors"].default()
    return [HiddenTestsRestored if step is OverwriteCells else step for step in steps]


def feedback_settings(config) -> None:
    """Set ``config`` (nbgrader's, or a ``Config``) so that ``generate_feedback`` writes feedback
    fit to hand back: :class:`LearnerFeedback`'s cells, on a page that needs no internet (the
    course's template leaves MathJax out: formulas show as their TeX source)."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.preprocessors import GetGrades

    assert GenerateFeedback.class_traits()["preprocessors"].default() == [GetGrades, CSSHTMLHeaderPreprocessor]
    config.GenerateFeedback.preprocessors = [GetGrades, LearnerFeedback, CSSHTMLHeaderPreprocessor]
    config.HTMLExporter.template_name = "course_feedback"
    nbgrader_templates = Path(utils.__file__).parent / "server_extensions" / "formgrader" / "templates"
    config.HTMLExporter.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates)]


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

    quiet_database_notices()
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
    extra.Autograde.sanitize_preprocessors = sanitize_preprocessors()
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
