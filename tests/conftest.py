"""Shared fixtures: instructor notebooks built from solutions/, executed with papermill once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import release
from course import paths

ARTIFACTS = paths.ROOT / "test-artifacts"
KERNEL = "course"


def chapter_names() -> list[str]:
    return [p.stem for p in release.chapters()]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def instructor_notebooks(tmp_path_factory) -> dict[str, Path]:
    """Each chapter's source as an .ipynb with solutions and hidden tests (what the instructor runs)."""
    import nbformat

    folder = tmp_path_factory.mktemp("instructor")
    built = {}
    for source in release.chapters():
        path = folder / f"{source.stem}.ipynb"
        nbformat.write(release.instructor_notebook(source), path)
        built[source.stem] = path
    return built


@pytest.fixture(scope="session")
def kernel() -> str:
    """The course kernel of this environment, registered if missing (`make` registers it too)."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if KERNEL not in specs or not Path(specs[KERNEL]).resolve().is_relative_to(Path(sys.prefix).resolve()):
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL],
                       check=True, capture_output=True)
    return KERNEL


def execute(notebook: Path, output: Path, kernel: str, timeout: int = 300) -> dict:
    """Run ``notebook`` headless with papermill; return the executed notebook as a dict.

    papermill raises when any cell has an error output, even a cell tagged ``raises-exception``
    that it ran through; the caller decides from the returned notebook which errors were allowed.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    try:
        papermill.execute_notebook(str(notebook), str(output), kernel_name=kernel, cwd=str(paths.NOTEBOOKS),
                                   execution_timeout=timeout, progress_bar=False)
    except PapermillExecutionError:
        pass
    return json.loads(output.read_text())


def errors(executed: dict) -> list[tuple[int, list[str], str]]:
    """(cell index, tags, error name) for every cell that raised."""
    found = []
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append((index, cell.get("metadata", {}).get("tags", []), out["ename"]))
    return found


def copy_into(path: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(path, folder / (name or path.name)))
