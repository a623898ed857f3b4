"""Grade one submission, or a folder of them into a gradebook: the stages end to end.

``grade`` runs the stages in order: load (``notebook.load``), identify the chapter, extract the
answers, run them in the sandbox, judge, report. It never raises for a bad submission: every
problem becomes a message in the report and the points it costs. A folder is graded in parallel,
one sandbox per submission, and yields a row for every file whatever happens to the others; a
class too large for one machine is graded in shards (``shards.py``) and merged back into the same
files: the gradebook and its LMS exports (``gradebook.py``), a page of feedback per submission
(``feedback.py``), and the answers that look copied (``similarity.py``).
"""

from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
from tqdm import tqdm

from autograder import feedback, gradebook, notebook, sandbox, shards, similarity
from autograder.chapters import CHAPTERS, class_file_writers, exercise_by_id, reported_figures
from autograder.checks import Check, Verdict, builds_on_note, encode_probe
from course import timing


@dataclass
class TestResult:
    id: str
    points: float
    max_points: float
    passed: bool
    hint: str
    data: dict | None = None  # the verdict's figures (chapter 9's capstone), if any


@dataclass
class Report:
    notebook: str
    chapter: str
    score: float
    max_score: float
    tests: list[TestResult] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0
    seed: int = 0
    isolation: str = ""
    answers: dict[str, str] = field(default_factory=dict)  # grade_id -> the learner's code (not in as_json)
    reported: dict = field(default_factory=dict)  # what the submission's own outputs report; never graded

    def as_json(self) -> dict:
        return {
            "notebook": self.notebook,
            "chapter": self.chapter,
            "score": self.score,
            "max_score": self.max_score,
            "tests": [{k: v for k, v in asdict(t).items() if v is not None} for t in self.tests],
            "messages": self.messages,
            "seconds": round(self.seconds, 2),
            "seed": self.seed,
            "isolation": self.isolation,
            "reported": self.reported,
        }

    @classmethod
    def from_json(cls, data: dict, answers: dict[str, str] | None = None) -> Report:
        """The report that :meth:`as_json` wrote (in a shard's part of the gradebook)."""
        plain = {f.name for f in fields(cls)} - {"tests", "answers"}
        report = cls(**{key: value for key, value in data.items() if key in plain})
        report.tests = [TestResult(**test) for test in data.get("tests", [])]
        report.answers = dict(answers or {})
        return report

    def text(self) -> str:
        lines = [f"{self.notebook} ({self.chapter or 'unknown chapter'}): {self.score:g} / {self.max_score:g} points"]
        lines += [f"  note: {m}" for m in self.messages]
        last_hint = ""
        for test in self.tests:
            mark = "ok  " if test.passed else "FAIL"
            lines.append(f"  {mark} {test.id:<40} {test.points:g}/{test.max_points:g}")
            if not test.passed:
                lines.append(f"       hint: {test.hint if test.hint != last_hint else '(as above)'}")
                last_hint = test.hint
        return "\n".join(lines)


NOTES = "class-notes.md"  # the notes on a class's files, for the instructor


def _max_score(chapter: str) -> float:
    return float(sum(e.points for e in CHAPTERS.get(chapter, [])))


def grade(
    path: Path, limits: sandbox.Limits | None = None, seed: int | None = None, hide=(), chapter: str | None = None
) -> Report:
    """Grade ``path`` in stages: load it, identify its chapter, extract the answers, run them in the
    sandbox, judge what came back, report. Every failure is a message and a score, never an exception.

    With ``chapter``, a notebook of any other chapter scores 0 out of that chapter's points.
    Raises :class:`sandbox.SandboxUnavailable` when the sandbox cannot start on this machine (the
    grader's failure: no score is given rather than a zero that blames the learner).
    """
    started = time.monotonic()
    seed = secrets.randbelow(2**31) if seed is None else seed
    report = Report(Path(path).name, "", 0.0, 0.0, seed=seed)
    try:
        submitted = notebook.load(path)
        report.chapter = identify_chapter(submitted, Path(path), chapter, report.messages)
    except notebook.NotebookError as error:
        return ungradable(report, error, chapter, started)
    report.max_score = _max_score(report.chapter)
    release = notebook.released(report.chapter)
    report.messages += [note for note in [notebook.other_release(submitted, release)] if note]
    answers = extract_answers(submitted, report.chapter, release, report.messages)
    report.reported = reported_figures(report.chapter, submitted)
    report.answers = dict(answers.sources)
    checks, probes = draw_probes(report.chapter, seed)
    outcome = run_in_sandbox(release, answers, checks, probes, limits or sandbox.Limits(), hide, report.messages)
    report.isolation = sandbox.describe(outcome.isolation)  # the layers that applied, and what was not contained
    report.tests = judge(checks, probes, answers, outcome)
    return finish(report, started)


def draw_probes(chapter: str, seed: int) -> tuple[list[Check], dict[str, dict]]:
    """The chapter's checks in order, and each one's probe, drawn from one generator of the
    submission's ``seed`` in that order (the probes a submission graded with ``seed`` gets)."""
    checks = [c for e in CHAPTERS[chapter] for c in e.checks]
    rng = np.random.default_rng(seed)
    return checks, {c.id: c.probe(rng) for c in checks}


def identify_chapter(submitted: dict, path: Path, expected: str | None, messages: list[str]) -> str:
    """Which chapter the submission is; NotebookError when it is not the ``expected`` one."""
    found, notes = notebook.identify(submitted, path)
    messages += notes
    if expected and found != expected:
        raise notebook.NotebookError(f"this is {found}, not {expected}: submit the {expected} notebook")
    return found


def ungradable(report: Report, error: notebook.NotebookError, expected: str | None, started: float) -> Report:
    """A file that cannot be graded: the reason, and 0 out of the expected chapter's points."""
    report.messages.append(f"expected {expected}: {error}" if expected else str(error))
    if expected:
        report.chapter, report.max_score = expected, _max_score(expected)
    return finish(report, started)


def extract_answers(submitted: dict, chapter: str, release: dict, messages: list[str]) -> notebook.Answers:
    """The learner's answer cells and added cells, and what the notebook shows was edited or lost."""
    answers = notebook.answers(submitted, CHAPTERS[chapter], release)
    messages += answers.notes
    return answers


def run_in_sandbox(
    release: dict,
    answers: notebook.Answers,
    checks: list[Check],
    probes: dict[str, dict],
    limits: sandbox.Limits,
    hide,
    messages: list[str],
) -> sandbox.Outcome:
    """The release's setup cells, then the learner's answer cells and added cells in notebook
    order, and the probes of answered exercises, in a fresh sandbox; what went wrong there
    (isolation, limits, cells that raised) becomes a message."""
    shared: dict = {}  # the arrays that several probes hand over (a model's weights), sent once
    sent = [{"id": c.id, **encode_probe(probes[c.id], shared)} for c in checks if c.exercise in answers.sources]
    job = {
        "setup": notebook.setup_sources(release),
        "answers": answers.cells,
        "added_seconds": limits.added_seconds,
        "probes": sent,
        "shared": shared,
    }
    outcome = sandbox.run(job, limits, hide=hide)
    if outcome.isolation not in sandbox.HIDES_FILES:
        messages.append(f"isolation: {sandbox.describe(outcome.isolation)}")
    messages += outcome.notes
    if outcome.problem:
        messages.append(f"grading stopped: {outcome.problem}")
    for cell in (outcome.results or {}).get("cells", []):
        where = f" at {cell['where'][-1]}" if cell.get("where") else ""
        if cell["raised"] in ("timeout", "skipped"):
            messages.append(f"cell {cell['cell']} {cell['message']}")
        else:
            messages.append(f"cell {cell['cell']} raised {cell['raised']}: {cell['message'][:200]}{where}")
    return outcome


def judge(
    checks: list[Check], probes: dict[str, dict], answers: notebook.Answers, outcome: sandbox.Outcome
) -> list[TestResult]:
    """Each check's verdict on its probe's result, decided here, out of the learner's reach. A
    function missing because its answer cell raised is failed with that cell's error, and a
    failure of an answer that calls an earlier answer which fails too says which one."""
    results = (outcome.results or {}).get("probes", {})
    raised = {c["cell"]: c for c in (outcome.results or {}).get("cells", [])}
    verdicts = {}
    for check in checks:
        if check.exercise not in answers.sources:
            verdict = Verdict(False, f"no answer cell for {check.exercise} was found")
        elif check.id not in results:
            verdict = Verdict(False, outcome.problem or "the grading process ended before this test ran")
        elif f"answer {check.exercise}" in raised and _never_defined(probes[check.id], results[check.id]):
            cell = raised[f"answer {check.exercise}"]
            verdict = Verdict(False, f"your answer cell raised {cell['raised']}: {cell['message'][:300]}")
        else:
            try:
                verdict = check.judge(probes[check.id], results[check.id])
            except Exception as error:  # a result shaped so oddly that judging it failed
                verdict = Verdict(False, f"the result could not be judged ({type(error).__name__}: {error})")
        verdicts[check.id] = verdict
    for check in checks:
        if not verdicts[check.id].passed:
            verdicts[check.id].hint += _helper_notes(check, answers, verdicts)
    return [
        TestResult(c.id, c.points if v.passed else 0, c.points, v.passed, v.hint, v.data)
        for c in checks
        for v in [verdicts[c.id]]
    ]


def _never_defined(probe: dict, result: dict) -> bool:
    """Whether the probe failed because the function it calls was never defined (see sandbox.inside.call)."""
    message = str(result.get("message", ""))
    return result.get("raised") == "NameError" and message.startswith(f"{probe['call']} is not defined")


def _helper_notes(check: Check, answers: notebook.Answers, verdicts: dict[str, Verdict]) -> str:
    """For a failed check of an exercise whose answer calls the learner's answer to an earlier one
    that fails its own checks: which one, so that the learner fixes the right function."""
    exercise = exercise_by_id(check.exercise)
    notes = ""
    for helper in map(exercise_by_id, exercise.builds_on):
        calls = set(helper.defines) & notebook.names_read(answers.sources.get(exercise.grade_id, ""))
        failed = [c.id for c in helper.checks if c.id in verdicts and not verdicts[c.id].passed]
        if calls and failed:
            notes += builds_on_note(exercise, helper, failed)
    return notes


def finish(report: Report, started: float) -> Report:
    """The report's score and time."""
    report.score = float(sum(t.points for t in report.tests))
    report.seconds = time.monotonic() - started
    return report


def grade_folder(
    folder: Path,
    out: Path,
    limits: sandbox.Limits | None = None,
    workers: int | None = None,
    seed: int | None = None,
    chapter: str | None = None,
    shard: tuple[int, int] = (0, 1),
    roster: Path | None = None,
    threshold: float = similarity.THRESHOLD,
) -> list[Report]:
    """Grade every ``*.ipynb`` under ``folder`` into ``out``: a feedback file each (text, JSON,
    HTML), then the class's files (:func:`write_class`). Returns the reports in file order.

    The learner is the first folder under ``folder`` (``folder/alice/03_quantization.ipynb``),
    or the file name for files directly in it. Each submission's hidden inputs come from ``seed``
    (the class seed; fresh when None) and its path. With ``shard=(i, n)`` and n > 1, only the
    share of shard i is graded (:func:`shards.owns`), and the class's files wait for :func:`merge`;
    every run leaves its part of the gradebook in ``out/parts/``.
    """
    folder, out = Path(folder), Path(out)
    index, count = shards.check_shard(shard)
    if count > 1 and seed is None:
        raise shards.ShardError("the shards of a class need one seed for its hidden inputs: give each the same --seed")
    if roster and count > 1:
        raise shards.ShardError("a shard writes no LMS export: give the roster to the merge (merge OUT --roster FILE)")
    people = gradebook.read_roster(roster) if roster else None  # a bad roster stops the run before grading
    class_seed = secrets.randbelow(2**31) if seed is None else seed
    files = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    relatives = [p.relative_to(folder).as_posix() for p in files]
    mine = [(p, r) for p, r in zip(files, relatives, strict=True) if shards.owns(r, index, count)]
    workers = workers or timing.usable_cpus()  # a container's CPU quota, not the host's cores
    limits = limits or sandbox.Limits()
    sandbox.isolation(limits.memory_bytes)  # before any submission: SandboxUnavailable stops the run here
    hide = [folder.resolve(), out.resolve()]
    out.mkdir(parents=True, exist_ok=True)

    def one(item: tuple[Path, str]) -> Report:
        path, relative = item
        try:
            return grade(path, limits, shards.submission_seed(class_seed, relative), hide=hide, chapter=chapter)
        except Exception as error:  # the grader's own failure: still a row, with the reason
            return Report(path.name, "", 0.0, 0.0, messages=[f"grader error: {type(error).__name__}: {error}"])

    graded = []
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = tqdm(pool.map(one, mine), total=len(mine), unit="notebook", desc="grading", disable=None)
            for (path, relative), report in zip(mine, done, strict=True):
                graded.append(shards.Graded(relative, _learner(folder, path), report))
                feedback.write(out, graded[-1])  # as soon as it is graded: a run cut short keeps what it did
    finally:
        sandbox.end_warm(hide)
    reports = [g.report for g in graded]
    shards.write_part(out, graded, (index, count), class_seed, chapter, relatives)
    if count == 1:
        write_class(out, graded, people, threshold)
    return reports


def write_class(
    out: Path,
    graded: list[shards.Graded],
    roster: gradebook.Roster | None = None,
    threshold: float = similarity.THRESHOLD,
) -> list[str]:
    """The class's files in ``out``: ``gradebook.csv``, ``canvas.csv`` and ``grades/<chapter>.csv``
    (learners named by ``roster``), ``similarity.csv`` and ``.html``, and ``class-notes.md``
    (what the instructor should know about them, also returned)."""
    gradebook.write_gradebook(out, graded)
    notes = gradebook.write_exports(out, graded, roster)
    by_exercise, total = similarity.write_report(out, graded, threshold)
    for chapter, write in class_file_writers().items():  # chapter 9's leaderboard, when graded
        write(out, [(g.learner, g.report) for g in graded if g.report.chapter == chapter])
    notes.append(f"{total} (similarity.html)")
    (Path(out) / NOTES).write_text(
        "# What to know about this gradebook\n\n"
        + "".join(f"- {line}\n" for line in notes)
        + "\n## Similar answers, exercise by exercise\n\n"
        + "".join(f"- {line}\n" for line in by_exercise),
        **feedback.TEXT,
    )
    return notes


def merge(
    out: Path, roster: Path | None = None, count: int | None = None, threshold: float = similarity.THRESHOLD
) -> tuple[list[shards.Graded], list[str]]:
    """The shards' parts in ``out/parts/`` as one class: writes what one run over the whole folder
    writes (:func:`write_class`); returns the graded submissions and the notes. Raises
    :class:`shards.MergeError` (parts missing or not of one class) or ``gradebook.RosterError``."""
    people = gradebook.read_roster(roster) if roster else None
    _, entries = shards.read_parts(out, count)
    graded = [shards.Graded(e["relative"], e["learner"], Report.from_json(e["report"], e["answers"])) for e in entries]
    return graded, write_class(out, graded, people, threshold)


def _learner(folder: Path, path: Path) -> str:
    relative = path.relative_to(folder)
    return relative.parts[0] if len(relative.parts) > 1 else path.stem
