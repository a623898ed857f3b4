"""Where the course's files live (the repository's ``data/``, ``solutions/``, ``notebooks/``), and
the list of chapters that every registry of the course is read from.

The package is used from its folder (``pip install -e .`` of a checkout or of the learners' copy,
also what the Colab cell does), so the folders are found next to the package. Not handled: a plain
wheel install, which has no ``data/``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
REFERENCE = DATA / "reference"
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"


def require(path: Path) -> Path:
    """Return ``path``, or raise FileNotFoundError saying how to get the course's files."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} is missing: the course "
            "reads its files beside the package, so install its whole folder (a git clone, or the learners' "
            "copy your instructor gave you) with `pip install -e <folder>`, not a plain `pip install`"
        )
    return path


def chapter_sources() -> list[Path]:
    """The chapters' sources, ``solutions/NN_<slug>.py``, in course order: the one list that the
    release, the grader's registry and the reference numbers are all read from. The learners' copy
    has no ``solutions/``: there the list is read off its notebooks, ``notebooks/NN_<slug>.ipynb``,
    each a chapter whose figures the package has (``course/plots/<slug>.py``): a learner's own copy
    of a notebook beside them (``09_choosing_a_technique-Copy1.ipynb``, ``09_mine.ipynb``) is not."""
    sources = sorted(SOLUTIONS.glob("[0-9][0-9]_*.py"))
    if sources:
        return sources
    return [
        notebook
        for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
        if (ROOT / "course" / "plots" / f"{notebook.stem.partition('_')[2]}.py").is_file()
    ]


def slug(chapter: str | Path) -> str:
    """The name that every file of a chapter carries: ``03_quantization`` (or its source) -> ``quantization``."""
    number, _, name = Path(chapter).stem.partition("_")
    if not (number.isdigit() and name):
        raise ValueError(f"{chapter} is not a chapter: chapters are named NN_<slug>, like 03_quantization")
    return name
