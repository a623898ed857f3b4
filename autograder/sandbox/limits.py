"""A sandbox's resource limits, and the ones the kernel enforces as it starts (``setrlimit``).

Every mode gets: CPU seconds, file size, open files, processes, no core dumps (here), and a wall
clock, a cap on what it may print (:mod:`autograder.sandbox.launch`) and resident memory
(:mod:`autograder.sandbox.memory`). Address space is not limited: a CUDA build of torch reserves
gigabytes of it at import. Not handled: a process limit where there is no /proc to count this
user's processes in (a mode that shares the grader's user then runs without one).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

from autograder.sandbox.modes import OWN_UID


@dataclass
class Limits:
    wall_seconds: float = 60.0
    probe_seconds: float = 10.0
    cell_seconds: int = 10
    added_seconds: float = 20.0  # all the cells a learner added together; answer cells run whatever they took
    memory_bytes: int = 3 * 2**30  # resident memory of all the sandbox's processes together
    output_bytes: int = 2**20
    file_bytes: int = 16 * 2**20
    processes: int = 64  # per sandbox (threads count too)


def _own_processes() -> int | None:
    """How many processes this user has now (what RLIMIT_NPROC counts when the sandbox shares our
    uid), or None where there is no /proc to count them in."""
    if not os.path.isdir("/proc"):
        return None
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def preexec(limits: Limits, mode: str):
    """The function the sandbox's first process runs before Python starts: a session of its own,
    then the limits."""
    if mode in OWN_UID:  # a uid of its own: the count is the sandbox's alone
        processes = limits.processes
    else:  # sharing our uid: on top of what we already run
        ours = _own_processes()
        processes = None if ours is None else ours + limits.processes

    def apply() -> None:
        os.setsid()
        settings = [
            ("RLIMIT_CPU", int(limits.wall_seconds) + 5),
            ("RLIMIT_FSIZE", limits.file_bytes),
            ("RLIMIT_NOFILE", 256),
            ("RLIMIT_CORE", 0),
        ] + ([("RLIMIT_NPROC", processes)] if processes is not None else [])
        for name, value in settings:
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply
