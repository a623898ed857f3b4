"""The notebooks the stand-in runs: the course as the Colab cell fetches it (a snapshot of the
working tree as git sees it), the Colab cell pointed at that snapshot, and what an executed notebook
shows (its output, errors, the quiz's fallback, the widget manager's marks, pip's complaints).

Not handled: the upload-a-zip path of the Colab cell, and the learners' copy's notebooks (the same
cell, another address)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from . import ROOT
from .runtime import KERNEL

CONTENT = "/content"  # Colab's working folder, which the Colab cell names


# --- the course, as the Colab cell fetches it --------------------------------------------------------


def snapshot(folder: Path, root: Path = ROOT) -> str:
    """A bare git repository in ``folder`` whose branch ``main`` holds the working tree of ``root`` as
    git sees it (tracked files as they are now, untracked files git does not ignore); its ``file://``
    address."""
    index = folder / "index"
    env = {
        **os.environ,
        "GIT_INDEX_FILE": str(index),
        "GIT_AUTHOR_NAME": "colab-check",
        "GIT_AUTHOR_EMAIL": "colab-check@localhost",
        "GIT_COMMITTER_NAME": "colab-check",
        "GIT_COMMITTER_EMAIL": "colab-check@localhost",
    }

    def git(*args: str, cwd: Path = root) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    git("add", "-A")
    tree = git("write-tree").strip()
    commit = git("commit-tree", tree, "-m", "the working tree, for make colab-check").strip()
    bare = folder / "course.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(bare)], check=True)
    git("push", "-q", str(bare), f"{commit}:refs/heads/main")
    return f"file://{bare}"


def in_standin(source: str, repository: str, content: Path) -> str:
    """The Colab cell's ``source`` with the repository's address and ``/content`` replaced."""
    from autograder import colab

    if colab.repository() not in source or CONTENT not in source:
        raise SystemExit("the notebook's first cell is not the Colab cell of autograder/colab.py: make release")
    return source.replace(colab.repository(), repository).replace(CONTENT, str(content))


def colab_notebook(notebook, repository: str, content: Path, after: list[str] = ()):
    """``notebook`` (nbformat) as the stand-in runs it: its Colab cell pointed at the snapshot and at
    ``content``, and ``after`` (cells' sources) inserted after it."""
    import nbformat

    from autograder import colab

    cells = notebook.cells
    first = next(i for i, c in enumerate(cells) if colab.TAG in c.metadata.get("tags", []))
    cells[first].source = in_standin(cells[first].source, repository, content)
    for offset, source in enumerate(after, start=1):
        lines = source.replace(CONTENT, str(content))
        cells.insert(first + offset, nbformat.v4.new_code_cell(lines, metadata={"tags": ["colab-standin"]}))
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    return notebook


# --- what a run shows -------------------------------------------------------------------------------


def outputs(executed: dict):
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            yield index, cell, out


def printed(executed: dict) -> str:
    return "".join("".join(out.get("text", "")) for _, _, out in outputs(executed))


def errors(executed: dict) -> list[tuple[int, list[str], str, str]]:
    """(cell, tags, error name, its message) of every error."""
    return [
        (i, cell.get("metadata", {}).get("tags", []), out["ename"], out.get("evalue", ""))
        for i, cell, out in outputs(executed)
        if out.get("output_type") == "error"
    ]


def quiz_fallback(executed: dict) -> str | None:
    """What is wrong with the quiz's display, or None: the widget with the questions as text and HTML."""
    shown = [
        out.get("data", {})
        for _, cell, out in outputs(executed)
        if "quiz.show(" in "".join(cell.get("source", ""))
        and "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]
    if not shown:
        return "the quiz shows no widget"
    text = "".join(shown[0].get("text/plain", ""))
    if not text.startswith("Quiz:") or "<" not in "".join(shown[0].get("text/html", "")):
        return "the quiz's text or HTML is missing"
    return None


def custom_manager_marks(executed: dict) -> int:
    """Widget outputs marked for Colab's custom widget manager."""
    return sum(
        "colab" in out.get("metadata", {}).get("application/vnd.jupyter.widget-view+json", {})
        for _, _, out in outputs(executed)
    )


def cell_seconds(executed: dict, tag: str) -> float:
    return sum(
        cell.get("metadata", {}).get("papermill", {}).get("duration") or 0.0
        for cell in executed["cells"]
        if tag in cell.get("metadata", {}).get("tags", [])
    )


def pip_complaints(executed: dict, tags=("colab", "colab-standin")) -> list[str]:
    """What pip printed in the set-up cells (with -q: only warnings and errors)."""
    lines = []
    for _, cell, out in outputs(executed):
        if set(cell.get("metadata", {}).get("tags", [])) & set(tags):
            said = "".join(out.get("text", "")) + "\n".join(out.get("traceback", []))
            lines += [line for line in said.splitlines() if re.search(r"ERROR|error|conflict|incompatible", line)]
    return lines
