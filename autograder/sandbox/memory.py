"""The memory watch: a sandbox's processes and the memory they hold, read from outside (``/proc``).

:class:`MemoryWatch` keeps a sandbox within its limit; :func:`tree_bytes` is what ``make bench``
reads for the grader and its sandboxes together. Not handled: systems without ``/proc`` (macOS),
where nothing is watched; memory a process maps but never touches, which costs nothing; in the
``limits`` mode, a process that leaves both the sandbox's process tree and its session.
"""

from __future__ import annotations

import os
import signal
from collections import defaultdict

WATCH_SECONDS = 0.1  # how often the memory of a sandbox is read
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
HINT = "look for a tensor or list far larger than the exercise needs"  # for the learner, whatever ran out


def processes() -> dict[int, tuple[int, int, int, int]]:
    """Every process this machine shows: pid -> (parent pid, process group, session, resident bytes)."""
    found = {}
    if not os.path.isdir("/proc"):  # not Linux: no way to watch memory from outside
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # fields from the third (state) on
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[3]), int(fields[21]) * PAGE_BYTES)
    return found


def proportional_bytes(pid: int, resident: int) -> int:
    """The process's share of the memory it uses (PSS): pages shared after fork() count once in all.
    ``resident`` where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return resident


def members(leader: int, table: dict) -> list[int]:
    """The processes of ``table`` (see :func:`processes`) in the tree under ``leader`` or in its session."""
    children = defaultdict(list)
    for pid, (parent, _, _, _) in table.items():
        children[parent].append(pid)
    found, stack = set(), [leader]
    while stack:
        pid = stack.pop()
        if pid in table and pid not in found:
            found.add(pid)
            stack += children[pid]
    return sorted(found | {pid for pid, row in table.items() if row[2] == leader})


def tree_bytes(leader: int) -> int:
    """The memory ``leader`` and every process under it (or in its session) hold now, shared pages
    counted once."""
    table = processes()
    return sum(proportional_bytes(pid, table[pid][3]) for pid in members(leader, table))


class MemoryWatch:
    """Keeps a sandbox within its memory limit by watching it from outside.

    The sandbox's processes are the tree under its first process plus its session. Resident sizes
    are cheap to read and overcount memory shared between forked processes, so only when their sum
    is over the limit are the exact proportional sizes read. Over the limit, the process group that
    holds the most is killed: a probe's (one function call: it fails alone), or the main one (the
    whole run stops).
    """

    def __init__(self, leader: int, limit: int):
        self.leader, self.limit = leader, limit
        self.stopped: list[str] = []  # what was killed, for the report

    def check(self) -> bool:
        """Enforce the limit once; True when the whole sandbox had to be stopped."""
        table = processes()
        found = members(self.leader, table)
        if sum(table[pid][3] for pid in found) <= self.limit:
            return False
        by_group: dict[int, int] = defaultdict(int)
        for pid in found:
            by_group[table[pid][1]] += proportional_bytes(pid, table[pid][3])
        if sum(by_group.values()) <= self.limit:
            return False
        group = max(by_group, key=by_group.get)
        used = f"{sum(by_group.values()) / 2**30:.1f} GiB"
        if group == self.leader:
            self.stopped.append(f"the submission used {used} of memory, over the limit of {self.limit / 2**30:.1f} GiB")
            return True
        try:
            os.killpg(group, signal.SIGKILL)
            self.stopped.append(
                f"a call was stopped at {used} of memory, over the limit of {self.limit / 2**30:.1f} GiB"
            )
        except (ProcessLookupError, PermissionError):
            pass
        return False
