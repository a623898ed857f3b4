"""Start the sandbox for one submission, with limits, and bring back its plain-data results.

Layers, strongest first, each used where this machine allows it (see :func:`isolation`):

- a new network and mount namespace (``unshare``), in which the course's folders, the
  submissions and the grader's output are covered by empty tmpfs mounts;
- an unprivileged user of its own (``setpriv`` to an unused uid, no new privileges), so that the
  process limit of one sandbox is not shared with another;
- resource limits: address space, CPU seconds, file size, open files, no core dumps;
- a wall-clock limit on the whole process group and a cap on what it may print.

Without root the first two are skipped and the report says so. Not handled: side channels
between submissions graded at the same time (timing, /tmp), which cannot change a score.
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
from dataclasses import dataclass, field
from pathlib import Path

from course import paths

HERE = Path(__file__).resolve().parent
FIRST_SANDBOX_UID = 200_000  # unused by any account: each sandbox gets its own, so limits are per sandbox
UNSHARE = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
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
    memory_bytes: int = 3 * 2**30
    output_bytes: int = 2**20
    file_bytes: int = 16 * 2**20
    processes: int = 64  # per sandbox user: threads count too


@dataclass
class Outcome:
    """What came back from one sandbox run."""

    results: dict | None  # {"cells": [...], "probes": {id: {...}}} or None when nothing came back
    problem: str = ""  # why nothing (or not everything) came back
    output: str = ""  # the first part of what the submission printed
    seconds: float = 0.0
    isolation: str = ""
    notes: list[str] = field(default_factory=list)


def _can_run(command: list[str], env: dict | None = None) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=60, env=env).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _drop(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]


def _namespace_command(work: Path, hide: list[Path], uid: int, args: list[str]) -> list[str]:
    """Run ``python args`` as ``uid`` in new namespaces, with ``hide`` covered, from ``work``.

    The Python environment is bound onto ``work/venv`` first and run from there: ``work`` is
    readable by every user, while the environment's own folder may sit under one that is not
    (a clone in a mode-700 folder), and may itself be hidden.
    """
    venv = Path(sys.prefix).resolve()
    executable = Path(sys.executable)
    python = (work / "venv" / executable.relative_to(sys.prefix) if executable.is_relative_to(sys.prefix)
              else executable)
    script = _hide_script(venv, outermost(hide)) + '\nexec "$@"'
    return UNSHARE + ["sh", "-c", script, "sandbox", *_drop(uid), str(python), *args]


@functools.lru_cache(maxsize=None)
def isolation() -> str:
    """'namespace' (root: unshare, then setpriv to a user of its own), 'unprivileged' (setpriv
    only) or 'limits' (neither: not root, or ``AUTOGRADER_ISOLATION=limits``). Each is tried
    with the command grading runs, importing torch."""
    if os.name != "posix" or os.geteuid() != 0 or os.environ.get("AUTOGRADER_ISOLATION") == "limits":
        return "limits"
    if not shutil.which("setpriv"):
        return "limits"
    probe = ["-I", "-c", "import torch"]
    if shutil.which("unshare"):
        work = Path(tempfile.mkdtemp(prefix="autograder-probe-"))
        try:
            work.chmod(0o755)
            command = _namespace_command(work, [paths.ROOT], FIRST_SANDBOX_UID, probe)
            if _can_run(command, {**os.environ, "WORK": str(work)}):
                return "namespace"
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if _can_run(_drop(FIRST_SANDBOX_UID) + [sys.executable, *probe]):
        return "unprivileged"
    return "limits"


def _preexec(limits: Limits, own_user: bool):
    def apply() -> None:
        os.setsid()
        cpu = int(limits.wall_seconds) + 5
        settings = [
            ("RLIMIT_AS", limits.memory_bytes),
            ("RLIMIT_CPU", cpu),
            ("RLIMIT_FSIZE", limits.file_bytes),
            ("RLIMIT_NOFILE", 256),
            ("RLIMIT_CORE", 0),
        ]
        if own_user:  # counted per user: only meaningful for a user of the sandbox's own
            settings.append(("RLIMIT_NPROC", limits.processes))
        for name, value in settings:
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply


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
    """Shell lines, run as root inside the new mount namespace: bind the Python environment onto
    ``$WORK/venv``, then cover each folder of ``hide`` with an empty tmpfs."""
    lines = ["set -e", "mount --make-rprivate /", f'mkdir -p "$WORK/venv" && mount --bind "{venv}" "$WORK/venv"']
    lines += [f'mount -t tmpfs -o size=64k,mode=755 none "{folder}"' for folder in hide if folder.is_dir()]
    if Path("/dev/shm").is_dir():
        lines.append("mount -t tmpfs -o size=16m none /dev/shm")
    return "\n".join(lines)


def run(job: dict, limits: Limits, hide: list[Path] = ()) -> Outcome:
    """Run ``job`` (see ``sandbox.py``) in a fresh sandbox and collect its results."""
    job = {**job, "probe_seconds": limits.probe_seconds, "cell_seconds": limits.cell_seconds}
    mode = isolation()
    work = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        for name in ("sandbox.py", "wire.py"):
            shutil.copy(HERE / name, work / name)
        (work / "job.json").write_text(json.dumps(job))
        work.chmod(0o755)
        for item in work.iterdir():
            item.chmod(0o644)
        args = ["-I", str(work / "sandbox.py"), str(work / "job.json")]
        uid = sandbox_uid()
        if mode == "namespace":
            command = _namespace_command(work, [paths.ROOT, *hide], uid, args)
        elif mode == "unprivileged":
            command = _drop(uid) + [sys.executable, *args]
        else:
            command = [sys.executable, *args]
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(work),
            "WORK": str(work),
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        return _collect(command, env, work, limits, mode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _collect(command: list[str], env: dict, work: Path, limits: Limits, mode: str) -> Outcome:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    started = time.monotonic()
    process = subprocess.Popen(
        command + [str(write_end)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_end,),
        preexec_fn=_preexec(limits, own_user=mode != "limits"),
    )
    os.close(write_end)
    problem, printed, result = _pump(process, read_end, started, limits)
    seconds = time.monotonic() - started
    outcome = Outcome(None, problem, printed.decode("utf-8", "replace"), seconds, mode)
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


def _pump(process: subprocess.Popen, result_fd: int, started: float, limits: Limits):
    """Read output and results until the process ends, enforcing the wall clock and output cap."""
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "output")
    selector.register(result_fd, selectors.EVENT_READ, "result")
    printed, result, problem = bytearray(), bytearray(), ""
    total_printed = 0
    open_streams = 2
    while open_streams:
        remaining = limits.wall_seconds - (time.monotonic() - started)
        if remaining <= 0:
            problem = f"stopped after the time limit of {limits.wall_seconds:.0f} s (an endless loop?)"
            break
        for key, _ in selector.select(timeout=min(remaining, 1.0)):
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
