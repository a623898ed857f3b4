"""Start the sandbox for one submission, with limits, and bring back its plain-data results.

Isolation, the strongest mode that works on this machine (see :func:`isolation`):

- ``namespace`` (root): new mount, network and pid namespaces (``unshare``) in which the course's
  folders, the submissions and the grader's output are covered by empty tmpfs mounts, then a user id
  of the sandbox's own (``setpriv``), so that a process limit is per sandbox;
- ``user-namespace`` (any user, where the kernel allows unprivileged user namespaces): the same
  namespaces and mounts inside a user namespace, then a nested one that locks those mounts, with
  every capability dropped;
- ``unprivileged`` (root where namespaces fail): a user id of its own only;
- ``limits``: a plain process with the limits below (macOS, kernels that forbid user namespaces, or
  ``AUTOGRADER_ISOLATION=limits``). The report says so.

In every mode: resident memory (the grader watches the sandbox's processes and stops the one that
takes the sandbox over its limit, see :class:`MemoryWatch`), CPU seconds, file size, open files,
processes, no core dumps, a wall clock on the whole sandbox and a cap on what it may print.
Address space is not limited: a CUDA build of torch reserves gigabytes of it at import.

Not handled: side channels between submissions graded at the same time (timing, /tmp), which
cannot change a score; in ``limits`` mode, a process that leaves both the sandbox's process tree
and its session escapes the memory watch.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from course import paths

HERE = Path(__file__).resolve().parent
FIRST_SANDBOX_UID = 200_000  # unused by any account: each sandbox gets its own, so limits are per sandbox
NAMESPACES = ["--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
# inside the user namespace: a nested one, whose new mount namespace locks the mounts made before
# it (they cannot be undone from inside), then every capability dropped before Python starts
LOCK_AND_DROP = [
    "unshare",
    "--user",
    "--map-root-user",
    "--mount",
    "--",
    "setpriv",
    "--no-new-privs",
    "--bounding-set=-all",
    "--inh-caps=-all",
    "--",
]
MODES = ("namespace", "user-namespace", "unprivileged", "limits")
HIDES_FILES = ("namespace", "user-namespace")
WATCH_SECONDS = 0.1  # how often the memory of a sandbox is read
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_next_uid = itertools.count()
_uid_lock = threading.Lock()


def sandbox_uid() -> int:
    """A user id for one sandbox, distinct from every other sandbox of this grader run."""
    with _uid_lock:
        return FIRST_SANDBOX_UID + (os.getpid() % 1000) * 1000 + next(_next_uid) % 1000


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


@dataclass
class Outcome:
    """What came back from one sandbox run."""

    results: dict | None  # {"cells": [...], "probes": {id: {...}}} or None when nothing came back
    problem: str = ""  # why nothing (or not everything) came back
    output: str = ""  # the first part of what the submission printed
    seconds: float = 0.0
    isolation: str = ""
    notes: list[str] = field(default_factory=list)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start on this machine: the grader's own failure, never the learner's."""


# --- the command of each mode ----------------------------------------------------------------------


def _drop(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]


def _python_in(work: Path) -> Path:
    """This environment's Python as seen through ``work/venv`` (where the namespace modes bind it)."""
    executable = Path(sys.executable)
    return work / "venv" / executable.relative_to(sys.prefix) if executable.is_relative_to(sys.prefix) else executable


def command(mode: str, work: Path, hide: list[Path], args: list[str]) -> list[str]:
    """The command that runs ``python args`` in ``mode``, from ``work``, with ``hide`` covered.

    In the namespace modes the Python environment is bound onto ``work/venv`` first and run from
    there: ``work`` is readable by every user, while the environment's own folder may sit under one
    that is not (a clone in a mode-700 folder), and may itself be hidden.
    """
    if mode in HIDES_FILES:
        script = _hide_script(Path(sys.prefix).resolve(), outermost(hide)) + '\nexec "$@"'
        if mode == "namespace":
            outer, inner = ["unshare", *NAMESPACES, "--"], _drop(sandbox_uid())
        else:
            outer, inner = ["unshare", "--user", "--map-root-user", *NAMESPACES, "--"], LOCK_AND_DROP
        return [*outer, "sh", "-c", script, "sandbox", *inner, str(_python_in(work)), *args]
    if mode == "unprivileged":
        return _drop(sandbox_uid()) + [sys.executable, *args]
    return [sys.executable, *args]


def _candidates() -> list[str]:
    """The modes worth trying here, strongest first."""
    if os.name != "posix" or sys.platform != "linux" or os.environ.get("AUTOGRADER_ISOLATION") == "limits":
        return ["limits"]
    have = {tool: shutil.which(tool) is not None for tool in ("unshare", "setpriv")}
    if not have["setpriv"]:
        return ["limits"]
    modes = ["namespace", "user-namespace", "unprivileged"] if os.geteuid() == 0 else ["user-namespace"]
    if not have["unshare"]:
        modes = [m for m in modes if m not in HIDES_FILES]
    return modes + ["limits"]


@functools.cache
def isolation(memory_bytes: int = Limits.memory_bytes) -> str:
    """The strongest mode in which the sandbox starts here with the command grading runs (it
    imports torch and numpy under the memory limit). Tried once per process.

    Raises :class:`SandboxUnavailable` when not even ``limits`` works: grading would give every
    submission zero for the grader's own fault, so it must stop and say why instead.
    """
    failures = []
    for mode in _candidates():
        outcome = run({"setup": [], "answers": [], "probes": []}, Limits(memory_bytes=memory_bytes), mode=mode)
        if outcome.results is not None:
            return mode
        failures.append(
            f"{mode}: {outcome.problem}" + (f"; it printed: {outcome.output[-600:]}" if outcome.output else "")
        )
    raise SandboxUnavailable(
        "the grader's sandbox cannot start on this machine, so nothing was graded (no submission is at fault).\n"
        + "\n".join(f"  {line}" for line in failures)
        + f"\nCheck that `{sys.executable} -I -c 'import torch, numpy'` works; if torch needs more memory than the "
        f"limit ({memory_bytes / 2**30:.1f} GiB), raise it with --memory."
    )


def hides_files() -> bool:
    """Whether submissions here run with the course's files, other submissions and the network out of reach."""
    return isolation() in HIDES_FILES


def describe(mode: str) -> str:
    """What ``mode`` means for the learner and the instructor, for every report."""
    return {
        "namespace": "full sandbox (namespaces, a user of its own)",
        "user-namespace": "full sandbox (unprivileged user namespaces)",
        "unprivileged": "a user of its own and limits, but no namespaces: the network and the course's files "
        "were reachable",
        "limits": "limits only: the network and the course's files were reachable (this system allows no "
        "user namespaces; see the README)",
    }[mode]


# --- limits ------------------------------------------------------------------------------------------


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


def _preexec(limits: Limits, mode: str):
    if mode in ("namespace", "unprivileged"):  # a uid of its own: the count is the sandbox's alone
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


def _processes() -> dict[int, tuple[int, int, int, int]]:
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


def _proportional_bytes(pid: int, resident: int) -> int:
    """The process's share of the memory it uses (PSS): pages shared after fork() count once in all."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return resident


class MemoryWatch:
    """Keeps a sandbox within its memory limit by watching it from outside.

    The sandbox's processes are the tree under its first process plus its session. Resident sizes
    are cheap to read and overcount memory shared between forked processes, so only when their sum
    is over the limit are the exact proportional sizes read. Over the limit, the process group that
    holds the most is killed: a probe's (one function call: it fails alone), or the main one (the
    whole run stops). Not handled: memory a process maps but never touches, which costs nothing.
    """

    def __init__(self, leader: int, limit: int):
        self.leader, self.limit = leader, limit
        self.stopped: list[str] = []  # what was killed, for the report

    def members(self, table: dict) -> list[int]:
        children = defaultdict(list)
        for pid, (parent, _, _, _) in table.items():
            children[parent].append(pid)
        found, stack = set(), [self.leader]
        while stack:
            pid = stack.pop()
            if pid in table and pid not in found:
                found.add(pid)
                stack += children[pid]
        return sorted(found | {pid for pid, row in table.items() if row[2] == self.leader})

    def check(self) -> bool:
        """Enforce the limit once; True when the whole sandbox had to be stopped."""
        table = _processes()
        members = self.members(table)
        if sum(table[pid][3] for pid in members) <= self.limit:
            return False
        by_group: dict[int, int] = defaultdict(int)
        for pid in members:
            by_group[table[pid][1]] += _proportional_bytes(pid, table[pid][3])
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


# --- running ------------------------------------------------------------------------------------------


def outermost(folders) -> list[Path]:
    """The folders not inside another one of them: a folder inside a hidden one is hidden already,
    and once its parent is covered it no longer exists to mount on."""
    resolved = sorted({Path(f).resolve() for f in folders}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for folder in resolved:
        if not any(folder.is_relative_to(outer) for outer in kept):
            kept.append(folder)
    return kept


def _hide_script(venv: Path, hide: list[Path]) -> str:
    """Shell lines, run as (namespace) root inside the new mount namespace: bind the Python
    environment onto ``$WORK/venv``, then cover each folder of ``hide`` with an empty tmpfs."""
    lines = ["set -e", "mount --make-rprivate /", f'mkdir -p "$WORK/venv" && mount --bind "{venv}" "$WORK/venv"']
    lines += [f'mount -t tmpfs -o size=64k,mode=755 none "{folder}"' for folder in hide if folder.is_dir()]
    if Path("/dev/shm").is_dir():
        lines.append("mount -t tmpfs -o size=16m none /dev/shm")
    return "\n".join(lines)


def run(job: dict, limits: Limits, hide: list[Path] = (), mode: str | None = None) -> Outcome:
    """Run ``job`` (see ``sandbox.py``) in a fresh sandbox and collect its results.

    ``mode`` defaults to :func:`isolation`'s choice (which may raise :class:`SandboxUnavailable`).
    """
    job = {
        **job,
        "probe_seconds": limits.probe_seconds,
        "cell_seconds": limits.cell_seconds,
        "memory_bytes": limits.memory_bytes,
    }
    mode = mode or isolation(limits.memory_bytes)
    work = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        for name in ("sandbox.py", "wire.py"):
            shutil.copy(HERE / name, work / name)
        (work / "job.json").write_text(json.dumps(job))
        work.chmod(0o755)
        for item in work.iterdir():
            item.chmod(0o644)
        args = ["-I", str(work / "sandbox.py"), str(work / "job.json")]
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "WORK": str(work),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",  # grading never needs a GPU, and a CUDA context costs memory
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return _collect(command(mode, work, [paths.ROOT, *hide], args), env, work, limits, mode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _collect(argv: list[str], env: dict, work: Path, limits: Limits, mode: str) -> Outcome:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            argv + [str(write_end)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write_end,),
            preexec_fn=_preexec(limits, mode),
        )
    except OSError as error:
        os.close(read_end)
        os.close(write_end)
        return Outcome(None, f"the sandbox could not start: {error}", isolation=mode)
    os.close(write_end)
    watch = MemoryWatch(process.pid, limits.memory_bytes)
    problem, printed, result = _pump(process, read_end, started, limits, watch)
    seconds = time.monotonic() - started
    outcome = Outcome(None, problem, printed.decode("utf-8", "replace"), seconds, mode, list(watch.stopped))
    if not problem:
        try:
            outcome.results = json.loads(result)
        except ValueError:
            code = process.returncode
            if code is not None and code < 0:
                outcome.problem = f"the grading process was killed by signal {signal.Signals(-code).name}"
            else:
                outcome.problem = f"the grading process ended (exit code {code}) before reporting"
            if "MemoryError" in outcome.output or code == -signal.SIGKILL:
                outcome.problem += "; it may have run out of memory"
    return outcome


def _pump(process: subprocess.Popen, result_fd: int, started: float, limits: Limits, watch: MemoryWatch):
    """Read output and results until the process ends, enforcing the wall clock, the output cap and
    the memory limit."""
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "output")
    selector.register(result_fd, selectors.EVENT_READ, "result")
    printed, result, problem = bytearray(), bytearray(), ""
    total_printed = 0
    open_streams = 2
    next_watch = 0.0
    while open_streams:
        now = time.monotonic()
        remaining = limits.wall_seconds - (now - started)
        if remaining <= 0:
            problem = f"stopped after the time limit of {limits.wall_seconds:.0f} s (an endless loop?)"
            break
        if now >= next_watch:
            next_watch = now + WATCH_SECONDS
            if watch.check():
                problem = watch.stopped[-1] + ": look for a tensor or list far larger than the exercise needs"
                break
        for key, _ in selector.select(timeout=min(remaining, WATCH_SECONDS)):
            fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
            chunk = os.read(fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            if key.data == "output":
                total_printed += len(chunk)
                if len(printed) < 4096:
                    printed += chunk[: 4096 - len(printed)]
                if total_printed > limits.output_bytes:
                    problem = f"printed more than {limits.output_bytes // 1024} KiB; remove the printing loop"
                    open_streams = 0
                    break
            else:
                result += chunk
                if len(result) > 64 * 2**20:
                    problem = "sent back more than 64 MiB of results"
                    open_streams = 0
                    break
    _kill(process)
    selector.close()
    os.close(result_fd)
    return problem, bytes(printed), bytes(result)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
