"""The sandbox a submission is graded in: one fresh one per submission, with limits, from which only
plain data comes back.

- ``inside.py``: the program that runs inside it (define the answers, call them, report); it is
  copied into the sandbox with ``wire.py`` and imports only the standard library, numpy and torch;
- ``modes.py``: how it is isolated (namespaces, a user of its own, limits only) and which mode is
  chosen on this machine;
- ``limits.py``: its resource limits, and those the kernel enforces as it starts;
- ``memory.py``: the memory watch, from outside, and the memory a process tree holds (``make bench``);
- ``launch.py``: starts one for a job and reads its output and results, enforcing the wall clock,
  the output cap and the memory limit.

Not handled: see each module.
"""

from autograder.sandbox.launch import Outcome, hides_files, isolation, run
from autograder.sandbox.limits import Limits
from autograder.sandbox.memory import tree_bytes
from autograder.sandbox.modes import HIDES_FILES, MODES, SandboxUnavailable, describe

__all__ = [
    "HIDES_FILES",
    "MODES",
    "Limits",
    "Outcome",
    "SandboxUnavailable",
    "describe",
    "hides_files",
    "isolation",
    "run",
    "tree_bytes",
]
