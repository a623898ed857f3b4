"""The memory watch: a sandbox's processes and the memory they hold, read from outside (psutil).

:class:`MemoryWatch` keeps a sandbox within its limit; :func:`tree_bytes` is what ``make bench``
reads for the grader and its sandboxes together. psutil reads processes on Linux, macOS and
Windows alike. A process's share of memory shared after fork() is its proportional size (PSS) on
Linux; where the system has no such figure (macOS, Windows) it is the memory that process alone
holds (USS), and the resident size for the sandbox's first process, which holds the shared pages.
Not handled: memory a process maps but never touches, which costs nothing; in the ``limits`` mode,
a process that leaves both the sandbox's process tree and its session.
"""

from __future__ import annotations

import os
import signal
from collections import defaultdict

import psutil

from autograder.sandbox import system

WATCH_SECONDS = 0.1  # how often the memory of a sandbox is read
HINT = "look for a tensor or list far larger than the exercise needs"  # for the learner, whatever ran out


def members(leader: int) -> list[psutil.Process]:
    """``leader`` and every process under it or in its session (a process that left the tree by
    forking twice stays in it), those that still run (none for a leader of 0: one that was never seen)."""
    if leader <= 0:
        return []
    try:
        root = psutil.Process(leader)
        found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.Error:
        return []
    if system.SESSIONS:
        for pid in psutil.pids():
            try:
                if pid not in found and os.getsid(pid) == leader:
                    found[pid] = psutil.Process(pid)
            except (OSError, psutil.Error):
                pass
    return [found[pid] for pid in sorted(found)]


def resident_bytes(process: psutil.Process) -> int:
    """What ``process`` holds in memory, shared pages counted in full (0 once it has ended)."""
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def proportional_bytes(process: psutil.Process, leader: int) -> int:
    """The share of memory ``process`` holds, pages shared after fork() counted once in all (see
    the module's docstring for systems without proportional sizes)."""
    try:
        full = process.memory_full_info()
    except psutil.Error:
        return resident_bytes(process)
    if hasattr(full, "pss"):
        return full.pss
    return full.rss if process.pid == leader else full.uss


def group_of(process: psutil.Process, leader: int) -> int:
    """The process group a call's processes share (its own per forked call), or ``leader`` for the
    sandbox's main group: ``leader``'s own, the one its pid namespace's first process leads (see
    ``inside.run_job``), and the only one where the system has no process groups (Windows)."""
    if not system.SESSIONS:
        return leader
    try:
        group = os.getpgid(process.pid)
    except OSError:
        return leader
    return leader if _first_of_its_pid_namespace(group) else group


def _first_of_its_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` is pid 1 of a pid namespace below ours; False on systems without ``/proc``."""
    numbers = namespace_pids(pid)
    return len(numbers) > 1 and numbers[-1] == 1


def namespace_pids(pid: int) -> list[int]:
    """``pid``'s number in each pid namespace it is in, ours first, innermost last (Linux's
    ``NSpid`` line); ``[pid]`` on systems without ``/proc``, [0] for a process that is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return [int(n) for n in line.split()[1:]]
    except FileNotFoundError:
        return [0] if os.path.isdir("/proc") else [pid]
    except OSError:
        pass
    return [pid]


def kill_sandbox(leader: int) -> None:
    """Kill the sandbox whose first process is ``leader`` and whatever it started: every process
    group its processes are in (a pid namespace's first process leads one of its own, which ends
    the namespace), or each process of its tree where the system has no process groups. A leader
    of 0 (one that was never seen) is no process: nothing is killed."""
    if leader <= 0:
        return
    found = members(leader)
    if not system.SESSIONS:
        for member in reversed(found):
            try:
                member.kill()
            except psutil.Error:
                pass
        return
    groups = {leader}
    for process in found:
        try:
            groups.add(os.getpgid(process.pid))
        except OSError:
            pass
    for group in sorted(groups, key=lambda g: g != leader):
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tree_bytes(leader: int) -> int:
    """The memory ``leader`` and every process under it (or in its session) hold now, shared pages
    counted once."""
    return sum(proportional_bytes(p, leader) for p in members(leader))


class MemoryWatch:
    """Keeps a sandbox within its memory limit by watching it from outside.

    The sandbox's processes are the tree under its first process plus its session. Resident sizes
    are cheap to read and overcount memory shared between forked processes, so only when their sum
    is over the limit are the exact proportional sizes read. Over the limit, the process group that
    holds the most is killed: a probe's (one function call: it fails alone), or the main one (the
    whole run stops; where each call does not run in a process of its own, that is every time).
    """

    def __init__(self, leader: int, limit: int):
        self.leader, self.limit = leader, limit
        self.stopped: list[str] = []  # what was killed, for the report

    def check(self, calling: bool = False) -> bool:
        """Enforce the limit once; True when the whole sandbox had to be stopped (``calling``: for
        the call it was running, where calls share the sandbox's process)."""
        found = members(self.leader)
        if sum(map(resident_bytes, found)) <= self.limit:
            return False
        by_group: dict[int, int] = defaultdict(int)
        for process in found:
            by_group[group_of(process, self.leader)] += proportional_bytes(process, self.leader)
        if sum(by_group.values()) <= self.limit:
            return False
        group = max(by_group, key=by_group.get)
        over = f"{sum(by_group.values()) / 2**30:.1f} GiB of memory, over the limit of {self.limit / 2**30:.1f} GiB"
        if group == self.leader:
            self.stopped.append(f"a call was stopped at {over}" if calling else f"the submission used {over}")
            return True
        try:
            os.killpg(group, signal.SIGKILL)
            self.stopped.append(f"a call was stopped at {over}")
        except (ProcessLookupError, PermissionError):
            pass
        return False
