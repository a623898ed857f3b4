"""Build notebooks from the chapter sources: the instructor's notebook and the student copy.

``python -m autograder.release`` (``make release``) turns each ``solutions/NN_name.py`` (jupytext
percent format, carrying nbgrader cell metadata) into ``notebooks/NN_name.ipynb`` through
nbgrader's generate step, which removes the solutions and the hidden tests, and clears outputs.
Every notebook it builds starts with the Colab cell (``colab.py``), and the README's Colab block
(a badge per chapter) is written from the same repository address.
``--check`` builds into a temporary folder and reports student copies that are out of date.

Student copies are never paired or synced with jupytext: that could put answers back in.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder import colab
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
    readme = (paths.ROOT / "README.md").read_text()
    if readme != colab.with_readme_block(readme, [source.stem for source in sources]):
        problems.append("README.md: its Colab badges do not match the chapters and pyproject.toml's repository")
    return problems


def write_readme(sources: list[Path]) -> None:
    """Write the README's Colab block (a badge per chapter) from the repository pyproject.toml names."""
    readme = paths.ROOT / "README.md"
    readme.write_text(colab.with_readme_block(readme.read_text(), [source.stem for source in sources]))


def main() -> int:
    parser = argparse.ArgumentParser(description="Build the student notebooks from solutions/.")
    parser.add_argument("--check", action="store_true", help="only report out-of-date student copies")
    args = parser.parse_args()
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: {problem} (run `make release`)")
        return 1 if problems else 0
    for path in build(chapters(), paths.NOTEBOOKS):
        print(f"wrote {path.relative_to(paths.ROOT)}")
    write_readme(chapters())
    print("wrote README.md's Colab badges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
