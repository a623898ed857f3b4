"""Grade one submission, or a folder of them into a gradebook: the stages end to end.

``grade`` runs the stages in order: load (``notebook.load``), identify the chapter, extract the
answers, run them in the sandbox, judge, report. It never raises for a bad submission: every
problem becomes a message in the report and the points it costs. A folder is graded in parallel,
one sandbox per submission, and yields a row for every file whatever happens to the others.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from autograder import leaderboard, notebook, runner
from autograder.chapters import CHAPTERS
from autograder.checks import Check, Verdict, encode_probe


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
        }

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


def _max_score(chapter: str) -> float:
    return float(sum(e.points for e in CHAPTERS.get(chapter, [])))


def grade(
    path: Path, limits: runner.Limits | None = None, seed: int | None = None, hide=(), chapter: str | None = None
) -> Report:
    """Grade ``path`` in stages: load it, identify its chapter, extract the answers, run them in the
    sandbox, judge what came back, report. Every failure is a message and a score, never an exception.

    With ``chapter``, a notebook of any other chapter scores 0 out of that chapter's points.
    Raises :class:`runner.SandboxUnavailable` when the sandbox cannot start on this machine (the
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
    answers = extract_answers(submitted, report.chapter, release, report.messages)
    checks = [c for e in CHAPTERS[report.chapter] for c in e.checks]
    rng = np.random.default_rng(seed)
    probes = {c.id: c.probe(rng) for c in checks}
    outcome = run_in_sandbox(release, answers, checks, probes, limits or runner.Limits(), hide, report.messages)
    report.isolation = outcome.isolation
    report.tests = judge(checks, probes, answers, outcome)
    return finish(report, started)


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
    """The learner's answer cells, and what the notebook shows was edited or lost."""
    answers = notebook.answers(submitted, CHAPTERS[chapter], release)
    messages += answers.notes
    return answers


def run_in_sandbox(
    release: dict,
    answers: notebook.Answers,
    checks: list[Check],
    probes: dict[str, dict],
    limits: runner.Limits,
    hide,
    messages: list[str],
) -> runner.Outcome:
    """The release's setup cells, the answers and the probes of answered exercises, in a fresh
    sandbox; what went wrong there (isolation, limits, cells that raised) becomes a message."""
    job = {
        "setup": notebook.setup_sources(release),
        "answers": [{"grade_id": g, "source": s} for g, s in answers.sources.items()],
        "probes": [{"id": c.id, **encode_probe(probes[c.id])} for c in checks if c.exercise in answers.sources],
    }
    outcome = runner.run(job, limits, hide=hide)
    if outcome.isolation not in runner.HIDES_FILES:
        messages.append(f"isolation: {runner.describe(outcome.isolation)}")
    messages += outcome.notes
    if outcome.problem:
        messages.append(f"grading stopped: {outcome.problem}")
    for cell in (outcome.results or {}).get("cells", []):
        where = f" at {cell['where'][-1]}" if cell.get("where") else ""
        if cell["raised"] == "timeout":
            messages.append(f"cell {cell['cell']} {cell['message']}")
        else:
            messages.append(f"cell {cell['cell']} raised {cell['raised']}: {cell['message'][:200]}{where}")
    return outcome


def judge(
    checks: list[Check], probes: dict[str, dict], answers: notebook.Answers, outcome: runner.Outcome
) -> list[TestResult]:
    """Each check's verdict on its probe's result, decided here, out of the learner's reach."""
    results = (outcome.results or {}).get("probes", {})
    tests = []
    for check in checks:
        if check.exercise not in answers.sources:
            verdict = Verdict(False, f"no answer cell for {check.exercise} was found")
        elif check.id not in results:
            verdict = Verdict(False, outcome.problem or "the grading process ended before this test ran")
        else:
            try:
                verdict = check.judge(probes[check.id], results[check.id])
            except Exception as error:  # a result shaped so oddly that judging it failed
                verdict = Verdict(False, f"the result could not be judged ({type(error).__name__}: {error})")
        tests.append(
            TestResult(
                check.id,
                check.points if verdict.passed else 0,
                check.points,
                verdict.passed,
                verdict.hint,
                verdict.data,
            )
        )
    return tests


def finish(report: Report, started: float) -> Report:
    """The report's score and time."""
    report.score = float(sum(t.points for t in report.tests))
    report.seconds = time.monotonic() - started
    return report


def grade_folder(
    folder: Path,
    out: Path,
    limits: runner.Limits | None = None,
    workers: int | None = None,
    seed: int | None = None,
    chapter: str | None = None,
) -> list[Report]:
    """Grade every ``*.ipynb`` under ``folder``; write ``gradebook.csv`` and a feedback file each,
    and the capstone's ``leaderboard.csv`` when chapter 9 is among them (``leaderboard.py``).

    The learner is the first folder under ``folder`` (``folder/alice/03_quantization.ipynb``),
    or the file name for files directly in it.
    """
    folder, out = Path(folder), Path(out)
    files = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    workers = workers or os.cpu_count() or 1
    limits = limits or runner.Limits()
    runner.isolation(limits.memory_bytes)  # before any submission: SandboxUnavailable stops the run here
    hide = [folder.resolve(), out.resolve()]
    out.mkdir(parents=True, exist_ok=True)

    def one(path: Path) -> Report:
        try:
            return grade(path, limits, seed, hide=hide, chapter=chapter)
        except Exception as error:  # the grader's own failure: still a row, with the reason
            return Report(path.name, "", 0.0, 0.0, messages=[f"grader error: {type(error).__name__}: {error}"])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        reports = list(pool.map(one, files))
    ids = sorted({t.id for r in reports for t in r.tests})
    with open(out / "gradebook.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["learner", "notebook", "chapter", "score", "max_score", *ids, "messages"])
        for path, report in zip(files, reports, strict=True):
            learner = _learner(folder, path)
            points = {t.id: t.points for t in report.tests}
            writer.writerow(
                [
                    learner,
                    path.name,
                    report.chapter,
                    report.score,
                    report.max_score,
                    *[points.get(i, "") for i in ids],
                    " | ".join(report.messages),
                ]
            )
            stem = f"{learner}__{path.stem}" if learner != path.stem else learner
            (out / f"{stem}.txt").write_text(report.text() + "\n")
            (out / f"{stem}.json").write_text(json.dumps(report.as_json(), indent=1) + "\n")
    leaderboard.write(out, [(_learner(folder, path), report) for path, report in zip(files, reports, strict=True)])
    return reports


def _learner(folder: Path, path: Path) -> str:
    relative = path.relative_to(folder)
    return relative.parts[0] if len(relative.parts) > 1 else path.stem
