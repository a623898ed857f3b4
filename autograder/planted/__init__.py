"""The older home of the chapters' planted mistakes, for the chapters not converted yet: their
``autograder/planted/<slug>.py``. The home is ``autograder/mistakes/`` (see its docstring), which
reads these modules too; this package goes with the last chapter's conversion."""

from autograder.mistakes import Planted, misjudged, planted

__all__ = ["Planted", "misjudged", "planted"]
