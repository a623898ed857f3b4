"""Build notebooks from the chapter sources: the instructor's notebook and the student copy.

``python -m autograder.release`` (``make release``) turns each ``solutions/NN_name.py`` (jupytext
percent format, carrying nbgrader cell metadata) into ``notebooks/NN_name.ipynb`` through
nbgrader's generate step, which removes the solutions and the hidden tests, and clears outputs.
Every notebook it builds starts with the Colab cell (``colab.py``), and the README's chapter table
gives each chapter a Colab badge from the same repository address. What the exercises' declaration
(``autograder/chapters/<slug>.py``) decides is written from it, never by hand: the nbgrader
``points`` of every grade cell in ``solutions/`` and the exercise and point counts in the README's
chapter table (a row is added for a chapter that has none, its topic from its title; a row's topic
is kept).
``--check`` builds into a temporary folder and reports whatever is out of date.

Student copies are never paired or synced with jupytext: that could put answers back in.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import colab
from autograder.checks import Exercise
from course import paths

GENERATED = "# Student copy generated from solutions/{source} by `make release`: edit the source, not this file.\n"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def chapters() -> list[Path]:
    """The chapter sources, in course order (see :func:`course.paths.chapter_sources`)."""
    return paths.chapter_sources()


def notebook_metadata(source: Path) -> dict:
    """What every notebook built from ``source`` carries: a plain kernel spec and its chapter."""
    return {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}, "course": {"chapter": source.stem}}


def instructor_notebook(source: Path):
    """The source as an nbformat notebook, solutions and hidden tests included, after the Colab cell."""
    import jupytext

    notebook = jupytext.read(source)
    notebook.metadata = notebook_metadata(source)
    notebook.cells.insert(0, colab.cell())
    for index, cell in enumerate(notebook.cells):
        cell.metadata.pop("lines_to_next_cell", None)
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = f"c{index:03d}-{grade_id or cell.cell_type}"  # stable ids keep releases reproducible
    return notebook


def _normalise(notebook: dict, source: Path) -> dict:
    """Fix what nbgrader leaves varying, and say on line 1 where the copy comes from."""
    notebook["metadata"] = notebook_metadata(source)
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell.update(execution_count=None, outputs=[])
    first = notebook["cells"][0]
    first["source"] = GENERATED.format(source=source.name) + "".join(first["source"])
    return notebook


def build(sources: list[Path], out: Path) -> list[Path]:
    """Write the student copy of each source into ``out``; return the paths written."""
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="release-") as work:
        root = Path(work)
        for source in sources:
            name = source.stem
            folder = root / "source" / name
            folder.mkdir(parents=True)
            nbformat.write(instructor_notebook(source), folder / f"{name}.ipynb")
            command = [
                sys.executable,
                "-m",
                "nbgrader",
                "generate_assignment",
                name,
                "--force",
                "--log-level=ERROR",
                f"--CourseDirectory.root={root}",
                f"--CourseDirectory.db_url=sqlite:///{root / 'gradebook.db'}",
            ]
            # nbgrader runs `alembic` from PATH: put this environment's scripts first.
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
            done = subprocess.run(command, capture_output=True, text=True, cwd=root, env=env)
            generated = root / "release" / name / f"{name}.ipynb"
            if done.returncode != 0 or not generated.exists():
                raise RuntimeError(f"nbgrader could not release {source.name}:\n{done.stdout}\n{done.stderr}")
            notebook = _normalise(json.loads(generated.read_text()), source)
            target = out / f"{name}.ipynb"
            target.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
            written.append(target)
    return written


GRADE_CELL = re.compile(r'^(# %%.* nbgrader=)(\{.*"grade": true.*\})$', re.MULTILINE)
README_ROW = re.compile(r"^\| \[(\d\d_\w+)\]\(notebooks/\1\.ipynb\) \| (.*?) \|.*$", re.MULTILINE)
README_HEADER = "| chapter | topic | exercises + quiz | Colab |"


def _exercises(chapter: str) -> list[Exercise]:
    from autograder.chapters import exercises  # imports every chapter's checks: only when points are needed

    return exercises(chapter)


def with_points(text: str, chapter: str) -> str:
    """The source ``text`` of ``chapter`` with the nbgrader ``points`` of each grade cell, named
    ``test_<grade_id>``, set to its exercise's points (the sum of its checks')."""
    exercises = {f"test_{e.grade_id}": e for e in _exercises(chapter)}

    def set_points(match: re.Match) -> str:
        metadata = json.loads(match.group(2))
        exercise = exercises.get(metadata["grade_id"])
        if exercise is None:
            raise ValueError(
                f"{chapter}: the grade cell {metadata['grade_id']} checks no exercise of the chapter's checks "
                f"module; name it test_<grade_id of its answer cell> ({', '.join(exercises)})"
            )
        return match.group(1) + json.dumps({**metadata, "points": exercise.points}, sort_keys=True)

    return GRADE_CELL.sub(set_points, text)


def chapter_counts(exercises: list[Exercise]) -> str:
    """What the README's chapter table says of a chapter: exercises + quiz questions, and their points."""
    quiz = [e for e in exercises if e.grade_id.startswith("quiz_")]
    graded = [e for e in exercises if e not in quiz]
    points, quiz_points = sum(e.points for e in graded), sum(e.points for e in quiz)
    questions = sum(1 for e in quiz for c in e.checks if c.points)  # a point a question; its answered check has none
    return f"{len(graded)} + {questions} questions ({points:g} + {quiz_points:g} points)"


def _title(source: Path) -> str:
    """A chapter's topic until the README says it shorter: the source's title."""
    title = re.search(r"^# # (?:Chapter \d+: )?(.+)$", source.read_text(), re.MULTILINE)
    return title.group(1) if title else source.stem


def with_chapter_table(readme: str, sources: list[Path]) -> str:
    """The README with its chapter table, between the Colab markers, written anew: one row per
    chapter in course order, each keeping its topic (a new chapter's is its title), with its
    exercise and point counts from the declaration and its Colab badge from pyproject.toml's
    repository; rows of chapters without a source go."""
    start, end = readme.find(colab.README_START), readme.find(colab.README_END)
    if start < 0 or end < start:
        raise ValueError(
            f"README.md needs the lines {colab.README_START!r} and {colab.README_END!r}, where its chapter table goes"
        )
    topics = {match.group(1): match.group(2) for match in README_ROW.finditer(readme[start:end])}
    rows = [
        f"| [{s.stem}](notebooks/{s.stem}.ipynb) | {topics.get(s.stem) or _title(s)} "
        f"| {chapter_counts(_exercises(s.stem))} | {colab.badge(s.stem)} |"
        for s in sources
    ]
    table = [colab.README_START, "", README_HEADER, "| --- | --- | --- | --- |", *rows, "", colab.README_END]
    return readme[:start] + "\n".join(table) + readme[end + len(colab.README_END) :]


def stale(sources: list[Path] | None = None) -> list[str]:
    """Names of student copies in ``notebooks/`` that differ from a fresh build (or are missing)."""
    sources = chapters() if sources is None else sources
    with tempfile.TemporaryDirectory(prefix="release-check-") as work:
        fresh = build(sources, Path(work))
        problems = []
        for path in fresh:
            committed = paths.NOTEBOOKS / path.name
            if not committed.exists():
                problems.append(f"{path.name}: missing")
            elif committed.read_text() != path.read_text():
                problems.append(f"{path.name}: differs from its source")
        extra = {p.name for p in paths.NOTEBOOKS.glob("*.ipynb")} - {p.name for p in fresh}
        problems += [f"{name}: has no source in solutions/" for name in sorted(extra)]
    problems += [
        f"{source.relative_to(paths.ROOT)}: a grade cell's points differ from its exercise's checks"
        for source in sources
        if source.read_text() != with_points(source.read_text(), source.stem)
    ]
    readme = (paths.ROOT / "README.md").read_text()
    if readme != with_chapter_table(readme, sources):
        problems.append(
            "README.md: its chapter table's exercises, points or Colab badges differ from the chapters' checks "
            "and pyproject.toml's repository"
        )
    return problems


def write_points(sources: list[Path]) -> list[Path]:
    """Write each grade cell's points into the sources from the declaration; return the sources changed."""
    changed = []
    for source in sources:
        text = source.read_text()
        if text != with_points(text, source.stem):
            source.write_text(with_points(text, source.stem))
            changed.append(source)
    return changed


def write_readme(sources: list[Path]) -> None:
    """Write the README's chapter table: its counts from the chapters' checks, its Colab badges from
    the repository pyproject.toml names."""
    readme = paths.ROOT / "README.md"
    readme.write_text(with_chapter_table(readme.read_text(), sources))


def main() -> int:
    parser = argparse.ArgumentParser(description="Build the student notebooks from solutions/.")
    parser.add_argument("--check", action="store_true", help="only report out-of-date student copies")
    args = parser.parse_args()
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: {problem} (run `make release`)")
        return 1 if problems else 0
    for source in write_points(chapters()):
        print(f"wrote the points of {source.relative_to(paths.ROOT)}'s grade cells")
    for path in build(chapters(), paths.NOTEBOOKS):
        print(f"wrote {path.relative_to(paths.ROOT)}")
    write_readme(chapters())
    print("wrote README.md's chapter table and its Colab badges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
