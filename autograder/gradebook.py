"""The class's grades as files: ``gradebook.csv``, a plain CSV per chapter, and Canvas's import format.

``gradebook.csv`` has a row per submission and a column per check. ``grades/NN_<slug>.csv`` has a
row per learner: score, maximum, percent. ``canvas.csv`` is what Canvas's Gradebook > Import takes:
the columns ``Student, ID, SIS User ID, SIS Login ID, Section`` in that order, a column per chapter,
and a ``Points Possible`` row.

A learner is the first folder under the submissions folder (``alice/03_quantization.ipynb``). With
a roster, learners get the identity the LMS knows them by. Canvas's own gradebook export (Grades >
Export > Export Entire Gradebook) is a roster as it is: a folder is matched to the row whose
``SIS Login ID``, ``SIS User ID`` or ``ID`` equals its name, or to a ``learner`` column added to the
file when folders are named otherwise; a chapter column goes to the roster's assignment column
of the same name (``03_quantization (4321)``), so that Canvas updates that assignment instead of
creating one. Without a roster the folder name is the SIS Login ID.

Not handled: other LMSs' formats (the per-chapter CSVs are plain enough for a spreadsheet), and
learners of the roster who submitted nothing (left out: Canvas leaves their grades as they are).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from autograder.feedback import TEXT

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MATCH_COLUMNS = ("learner", "SIS Login ID", "SIS User ID", "ID")
POINTS_POSSIBLE = "Points Possible"


class RosterError(ValueError):
    """The roster cannot be used; the message says what to fix."""


@dataclass
class Roster:
    """Learners as the LMS knows them: a row per learner, reachable by every identifier it has."""

    rows: dict[str, dict[str, str]]  # folder name or identifier -> the learner's row
    columns: list[str]

    def find(self, learner: str) -> dict[str, str] | None:
        return self.rows.get(learner)


def read_roster(path: Path) -> Roster:
    """The roster at ``path`` (see the module docstring); RosterError saying what is wrong."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # -sig: files saved by Excel
            reader = csv.DictReader(handle)
            columns = [c.strip() for c in reader.fieldnames or []]
            lines = [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"cannot read the roster {path}: {error}") from None
    keys = [c for c in MATCH_COLUMNS if c in columns]
    if not keys:
        raise RosterError(
            f"the roster {path} has none of the columns {', '.join(MATCH_COLUMNS)}: use Canvas's gradebook "
            "export, or add a column `learner` holding each learner's folder name"
        )
    rows: dict[str, dict[str, str]] = {}
    clashes = set()
    for line in lines:
        if not any(line.values()) or POINTS_POSSIBLE in line.get(columns[0], ""):
            continue
        for key in keys:
            value = line.get(key, "")
            if value and rows.setdefault(value, line) is not line:
                clashes.add(value)
    if clashes:
        raise RosterError(
            f"the roster {path} gives {len(clashes)} identifiers to more than one learner "
            f"({', '.join(sorted(clashes)[:5])}): each learner's folder name must pick out one row"
        )
    return Roster(rows, columns)


def write_gradebook(out: Path, graded: list) -> Path:
    """``gradebook.csv``: a row per submission (``shards.Graded``), a column per check."""
    ids = sorted({t.id for g in graded for t in g.report.tests})
    path = Path(out) / "gradebook.csv"
    with open(path, "w", newline="", **TEXT) as handle:
        writer = csv.writer(handle)
        writer.writerow(["learner", "notebook", "chapter", "score", "max_score", *ids, "messages"])
        for g in graded:
            report = g.report
            points = {t.id: t.points for t in report.tests}
            writer.writerow(
                [
                    g.learner,
                    report.notebook,
                    report.chapter,
                    report.score,
                    report.max_score,
                    *[points.get(i, "") for i in ids],
                    " | ".join(report.messages),
                ]
            )
    return path


def best_per_chapter(graded: list) -> tuple[dict[tuple[str, str], object], list[str]]:
    """(learner, chapter) -> the report that counts (the higher score when a learner handed in a
    chapter twice), and notes on what could not be counted."""
    chosen: dict[tuple[str, str], list] = defaultdict(list)
    notes = []
    for g in graded:
        if not g.report.chapter:
            notes.append(f"{g.relative}: its chapter is unknown, so no LMS column takes it (see gradebook.csv)")
            continue
        chosen[(g.learner, g.report.chapter)].append(g)
    best = {}
    for (learner, chapter), entries in sorted(chosen.items()):
        top = max(entries, key=lambda g: g.report.score)
        if len(entries) > 1:
            files = ", ".join(g.relative for g in entries)
            notes.append(f"{learner} handed in {chapter} {len(entries)} times ({files}): the highest score counts")
        best[(learner, chapter)] = top.report
    return best, notes


def _identity(learner: str, roster: Roster | None) -> dict[str, str] | None:
    if roster is None:
        return {"Student": learner, "SIS Login ID": learner}
    return roster.find(learner)


def _canvas_column(chapter: str, roster: Roster | None) -> str:
    """The roster's assignment column for ``chapter`` (``03_quantization (4321)``), else the chapter."""
    for column in roster.columns if roster else []:
        if re.fullmatch(rf"{re.escape(chapter)}\s*\(\d+\)", column):
            return column
    return chapter


def write_exports(out: Path, graded: list, roster: Roster | None = None) -> list[str]:
    """``canvas.csv`` and ``grades/<chapter>.csv``; returns notes for the instructor."""
    out = Path(out)
    best, notes = best_per_chapter(graded)
    chapters = sorted({chapter for _, chapter in best})
    learners = sorted({learner for learner, _ in best})
    unknown = [learner for learner in learners if _identity(learner, roster) is None]
    if unknown:
        notes.append(
            f"{len(unknown)} learners are not in the roster and were left out of canvas.csv: {', '.join(unknown[:10])}"
            + (" ..." if len(unknown) > 10 else "")
        )
    maximum = {c: max(r.max_score for (_, chapter), r in best.items() if chapter == c) for c in chapters}

    folder = out / "grades"
    folder.mkdir(parents=True, exist_ok=True)
    for chapter in chapters:
        with open(folder / f"{chapter}.csv", "w", newline="", **TEXT) as handle:
            writer = csv.writer(handle)
            writer.writerow(["learner", "name", "sis_login_id", "score", "max_score", "percent", "notebook"])
            for learner in learners:
                report = best.get((learner, chapter))
                if report is None:
                    continue
                who = _identity(learner, roster) or {}
                share = 100 * report.score / report.max_score if report.max_score else 0.0
                writer.writerow(
                    [
                        learner,
                        who.get("Student", ""),
                        who.get("SIS Login ID", ""),
                        f"{report.score:g}",
                        f"{report.max_score:g}",
                        f"{share:.1f}",
                        report.notebook,
                    ]
                )

    with open(out / "canvas.csv", "w", newline="", **TEXT) as handle:
        writer = csv.writer(handle)
        writer.writerow([*CANVAS_COLUMNS, *[_canvas_column(c, roster) for c in chapters]])
        writer.writerow([POINTS_POSSIBLE, "", "", "", "", *[f"{maximum[c]:g}" for c in chapters]])
        for learner in learners:
            who = _identity(learner, roster)
            if who is None:
                continue
            scores = ["" if (r := best.get((learner, c))) is None else f"{r.score:g}" for c in chapters]
            writer.writerow([who.get(column, "") for column in CANVAS_COLUMNS] + scores)
    return notes
