"""The sandbox a submission is graded in: one fresh one per submission, with limits, from which only
plain data comes back; where the system forks, a child of a warm sandbox that imported torch once.

- ``inside.py``: the program that runs inside it (define the answers, call them, report); it is
  copied into the sandbox with ``course/plain_data.py`` and imports only the standard library, numpy and torch;
- ``modes.py``: how it is isolated (bubblewrap, Landlock, both, a Seatbelt profile on macOS, limits
  only), what a submission may read there (an allowlist), and which mode is chosen on this machine;
- ``confine.py``: what a sandbox's process does to itself before the learner's code runs (Landlock,
  a user and namespaces of its own, no capabilities, no sockets); copied into the sandbox;
- ``doctor.py``: ``python -m autograder doctor``, what this machine allows and how to make it stronger;
- ``limits.py``: its resource limits, and those the kernel enforces as it starts;
- ``memory.py``: the memory watch, from outside, and the memory a process tree holds (``make bench``);
- ``launch.py``: starts one for a job and reads its output and results, enforcing the wall clock,
  the output cap and the memory limit;
- ``warm.py``: the warm sandboxes, kept by the grader, and ``serve.py``, their program inside: one
  interpreter with torch imported, which forks each submission's sandbox with its own confinement,
  limits and pipes;
- ``system.py``: what this operating system offers (fork, sessions, resource limits, Landlock),
  which the modules above ask instead of the system's name.

Not handled: see each module. The names below are imported on first use, so that a notebook's check
cells, which need only ``inside.py``, import nothing that one system lacks.
"""

import importlib

_WHERE = {
    "Outcome": "launch",
    "end_warm": "launch",
    "hides_files": "launch",
    "isolation": "launch",
    "run": "launch",
    "Limits": "limits",
    "tree_bytes": "memory",
    "HIDES_FILES": "modes",
    "MODES": "modes",
    "SandboxUnavailable": "modes",
    "describe": "modes",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"autograder.sandbox.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'autograder.sandbox' has no attribute {name!r}")


__all__ = sorted(_WHERE)
