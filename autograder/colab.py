"""Colab: the first cell of every notebook (in Colab it installs the course, anywhere else it does
nothing), each chapter's "Open in Colab" address and badge, and the learners' copy's block of badges.

The repository's address is written in one place, ``pyproject.toml`` (``[project.urls]
Repository``); the release (``make release``) writes it into every notebook's first cell and into
the badges of the README's chapter table, between the markers below. When the clone fails (a private repository,
no network), the cell unpacks a zip of the course uploaded to Colab's Files pane, or says how to
install the course from a folder instead.

Not handled: repositories outside GitHub get no Colab address (Colab opens notebooks from GitHub).
"""

from __future__ import annotations

import tomllib

from course import paths

TAG = "colab"
BRANCH = "main"  # the branch Colab opens the notebooks from
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
README_START = "<!-- colab: written by `make release` from pyproject.toml's Repository; edit it there -->"
README_END = "<!-- /colab -->"
TEMPLATE = """\
# Course setup: in Colab this installs the course (about a minute); anywhere else it does nothing.
import sys

if "google.colab" in sys.modules:
    import glob, os, subprocess, zipfile

    REPOSITORY, COURSE = "{repository}", "/content/course"
    problem = ""
    if not os.path.exists(COURSE + "/pyproject.toml"):
        uploaded = sorted(glob.glob("/content/*.zip"), key=os.path.getmtime)
        if uploaded:  # the course uploaded as a zip through the Files pane
            zipfile.ZipFile(uploaded[-1]).extractall("/content/unpacked")
            found = sorted(glob.glob("/content/unpacked/**/pyproject.toml", recursive=True), key=len)
            if found:
                os.rename(os.path.dirname(found[0]), COURSE)
            else:
                problem = "no pyproject.toml in " + uploaded[-1]
        else:
            clone = ["git", "clone", "-q", "--depth", "1", REPOSITORY, COURSE]
            problem = subprocess.run(clone, capture_output=True, text=True).stderr.strip() or "git clone failed"
    if not os.path.exists(COURSE + "/pyproject.toml"):
        raise RuntimeError(
            "The course could not be fetched (" + problem + "). Instead: download the course as a .zip "
            "(GitHub's Code > Download ZIP on " + REPOSITORY + ", or the copy your instructor gave you), "
            "drag it into the Files pane on the left, and run this cell again. With the course in a "
            "folder already (Google Drive, for example), install it from there: %pip install -e FOLDER"
        )
    %pip install -q -e /content/course
    sys.path.insert(0, COURSE)
    from google.colab import output

    output.enable_custom_widget_manager()"""


def repository(entry: str = "Repository") -> str:
    """The course's repository, as ``pyproject.toml``'s ``[project.urls]`` gives it: the
    instructor's (``Repository``) or the learners' copy's (``Learners``)."""
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"][entry]


def source(url: str | None = None) -> str:
    """The cell's code, with this repository (or ``url``) filled in."""
    return TEMPLATE.format(repository=url or repository())


def cell(url: str | None = None):
    """The cell as an nbformat code cell, tagged ``colab``."""
    import nbformat

    return nbformat.v4.new_code_cell(source(url), metadata={"tags": [TAG]})


def notebook_url(chapter: str, url: str | None = None) -> str | None:
    """Where Colab opens ``notebooks/<chapter>.ipynb`` of the repository (None outside GitHub)."""
    url = (url or repository()).removesuffix(".git").rstrip("/")
    prefix = "https://github.com/"
    if not url.startswith(prefix) or url.count("/") != prefix.count("/") + 1:
        return None
    return (
        f"https://colab.research.google.com/github/{url.removeprefix(prefix)}/blob/{BRANCH}/notebooks/{chapter}.ipynb"
    )


def badge(chapter: str, url: str | None = None) -> str:
    """The Markdown badge that opens ``chapter`` in Colab (a note where the repository is not on GitHub)."""
    link = notebook_url(chapter, url)
    return f"[![Open in Colab]({BADGE})]({link})" if link else "(not on GitHub: Colab cannot open it)"


def readme_block(chapters: list[str], url: str | None = None, markers: bool = True) -> str:
    """A README's Colab block: one badge per chapter, between the markers (without them for a
    README that no release rewrites: the learners' copy's)."""
    lines = [README_START, ""] if markers else []
    if all(notebook_url(chapter, url) for chapter in chapters):
        lines += ["| chapter | |", "| --- | --- |"]
        lines += [f"| {chapter} | {badge(chapter, url)} |" for chapter in chapters]
    else:
        lines.append(
            f"The repository ({url or repository()}) is not on GitHub, so Colab cannot open its notebooks directly."
        )
    lines += ["", README_END] if markers else []
    return "\n".join(lines)
