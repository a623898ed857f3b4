"""What this operating system gives the sandbox, found once, by looking for each piece itself.

Linux has everything (Landlock from 5.13, where its security module is enabled); macOS has fork,
sessions and resource limits but no ``/proc``, no proportional memory sizes and no Landlock; Windows
has none of fork, sessions, process groups, ``resource`` or ``signal.alarm``. The sandbox asks these
names instead of the system's, so that a test can take the pieces away (``tests/_platforms.py``) and
see what a learner on that system gets. Not handled: a POSIX system that has fork but no sessions
(none that runs torch).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys

FORKS = hasattr(os, "fork")  # a probe in a forked child of its own (Linux, macOS)
SESSIONS = all(hasattr(os, name) for name in ("setsid", "killpg", "getpgid", "getsid"))
ALARMS = hasattr(signal, "alarm")  # a cell's time limit by SIGALRM; elsewhere by a timer thread
RLIMITS = importlib.util.find_spec("resource") is not None  # setrlimit as the sandbox starts
PASSES_FDS = os.name == "posix" and FORKS  # the result pipe handed to the sandbox by number
THREADS_ARE_PROCESSES = sys.platform.startswith("linux")  # RLIMIT_NPROC counts each thread (elsewhere: processes)


def _linux_confinement() -> tuple[int, bool]:
    if not sys.platform.startswith("linux"):
        return 0, False
    from autograder.sandbox import confine

    return confine.landlock_abi(), confine.sockets_can_be_refused()


# this kernel's Landlock ABI version (0 for none), and whether a seccomp filter can refuse sockets
LANDLOCK_ABI, REFUSES_SOCKETS = _linux_confinement()


def summary() -> str:
    """What the sandbox does without, in a few words, for a report ('' where nothing is missing)."""
    missing = [
        what
        for what, have in (
            ("fork", FORKS),
            ("sessions and process groups", SESSIONS),
            ("resource limits", RLIMITS),
        )
        if not have
    ]
    return ", ".join(missing)
