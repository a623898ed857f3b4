"""The first cell of every notebook: in Colab it installs the course, anywhere else it does nothing.

The chapter sources do not carry it: the release inserts it into every notebook it builds, from
the one template below, with the repository taken from ``pyproject.toml``
(``[project.urls] Repository``), the only place the address is written.
"""

from __future__ import annotations

import tomllib

from course import paths

TAG = "colab"
TEMPLATE = """\
# Course setup: in Colab this installs the course (about a minute); anywhere else it does nothing.
import sys

if "google.colab" in sys.modules:
    !git clone -q --depth 1 {repository} /content/course
    %pip install -q -e /content/course
    sys.path.insert(0, "/content/course")
    from google.colab import output

    output.enable_custom_widget_manager()"""


def repository() -> str:
    """The course's repository, as ``pyproject.toml`` gives it."""
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"]


def source() -> str:
    """The cell's code, with this repository filled in."""
    return TEMPLATE.format(repository=repository())


def cell():
    """The cell as an nbformat code cell, tagged ``colab``."""
    import nbformat

    return nbformat.v4.new_code_cell(source(), metadata={"tags": [TAG]})
