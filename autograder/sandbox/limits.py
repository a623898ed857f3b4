"""A sandbox's resource limits, and the ones the kernel enforces as it starts (``setrlimit``).

Every mode gets: CPU seconds, file size, open files, processes, no core dumps (here), and a wall
clock, a cap on what it may print and on what its work folder may hold
(:mod:`autograder.sandbox.launch`), and resident memory (:mod:`autograder.sandbox.memory`). Address
space is not limited: a CUDA build of torch reserves gigabytes of it at import. Where the system has
no ``resource`` module (Windows), only the wall clock, the output cap and the memory watch apply,
and where it has no sessions the sandbox is not put in one of its own
(:mod:`autograder.sandbox.system`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from autograder.sandbox import system

ROOM_FOR_OURS = 256  # a sandbox sharing our uid: the processes our other programs may start while it runs


@dataclass
class Limits:
    wall_seconds: float = 60.0
    probe_seconds: float = 10.0
    cell_seconds: int = 10
    added_seconds: float = 20.0  # all the cells a learner added together; answer cells run whatever they took
    memory_bytes: int = 3 * 2**30  # resident memory of all the sandbox's processes together
    output_bytes: int = 2**20
    folder_bytes: int = 64 * 2**20  # what its work folder, the one place it may write, may hold
    file_bytes: int = 16 * 2**20
    processes: int = 64  # per sandbox (threads count too)


def _own_tasks() -> int:
    """What RLIMIT_NPROC counts of this user's now (when the sandbox shares our uid): on Linux every
    thread, which the kernel counts as a process of its own; elsewhere processes."""
    uid, count = os.getuid(), 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        uids = process.info["uids"]
        if uids is not None and uids.real == uid:
            count += (process.info["num_threads"] or 1) if system.THREADS_ARE_PROCESSES else 1
    return count


def settings(limits: Limits) -> list[tuple[str, int]]:
    """The ``resource`` limits a sandbox starts with, by name: what :func:`preexec` sets, and what a
    warm sandbox's child sets for itself (``serve.py``). The process limit is set while the sandbox
    still counts against our user: on top of what we already run, and what our other programs
    (other sandboxes, a second make test, a browser) may start meanwhile. Where its processes then
    count alone (a user or a user namespace of its own), the sandbox sets its own
    (``limits.processes``: ``modes.policy``)."""
    return [
        ("RLIMIT_CPU", int(limits.wall_seconds) + 5),
        ("RLIMIT_FSIZE", limits.file_bytes),
        ("RLIMIT_NOFILE", 256),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", _own_tasks() + ROOM_FOR_OURS + limits.processes),
    ]


def preexec(limits: Limits):
    """The function the sandbox's first process runs before Python starts: a session of its own,
    then the limits; None where the system starts processes without one (Windows)."""
    if not system.RLIMITS:
        return os.setsid if system.SESSIONS else None
    import resource

    chosen = settings(limits)

    def apply() -> None:
        os.setsid()
        for name, value in chosen:
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply
