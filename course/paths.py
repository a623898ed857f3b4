"""Where the course's files live: the repository's ``data/`` and ``solutions/`` folders.

The package is used from a checkout (``pip install -e .``, also what the Colab cell does), so the
folders are found next to the package. Not handled: a plain wheel install, which has no ``data/``.
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
            "needs a full checkout of its repository (git clone, then `pip install -e .`)"
        )
    return path
