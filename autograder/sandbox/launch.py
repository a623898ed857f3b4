"""Start one sandbox for a job, and bring back its plain-data results.

The job (see :mod:`autograder.sandbox.inside`) runs in the mode :func:`isolation` chose, under
:class:`~autograder.sandbox.limits.Limits`; while it runs, its output and its results are read
here, with a wall clock on the whole sandbox, a cap on what it may print, a cap on what it sends
back, and the memory watch. Not handled: a sandbox that cannot read its job from a folder under
the system's temporary directory.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import modes
from autograder.sandbox.limits import Limits, preexec
from autograder.sandbox.memory import HINT, WATCH_SECONDS, MemoryWatch
from course import paths

INSIDE = Path(__file__).resolve().with_name("inside.py")
WIRE = Path(__file__).resolve().parent.parent / "wire.py"
MAX_RESULTS = 64 * 2**20
PRINTED_KEPT = 4096  # what the report keeps of what a submission printed


@dataclass
class Outcome:
    """What came back from one sandbox run."""

    results: dict | None  # {"cells": [...], "probes": {id: {...}}} or None when nothing came back
    problem: str = ""  # why nothing (or not everything) came back
    output: str = ""  # the first part of what the submission printed
    seconds: float = 0.0
    isolation: str = ""
    notes: list[str] = field(default_factory=list)


@functools.cache
def isolation(memory_bytes: int = Limits.memory_bytes) -> str:
    """The strongest mode in which the sandbox starts here with the command grading runs (it
    imports torch and numpy under the memory limit). Tried once per process.

    Raises :class:`~autograder.sandbox.modes.SandboxUnavailable` when none starts.
    """

    def failure(mode: str) -> str:
        outcome = run({"setup": [], "answers": [], "probes": []}, Limits(memory_bytes=memory_bytes), mode=mode)
        if outcome.results is not None:
            return ""
        return outcome.problem + (f"; it printed: {outcome.output[-600:]}" if outcome.output else "")

    return modes.strongest(failure, memory_bytes)


def hides_files() -> bool:
    """Whether submissions here run with the course's files, other submissions and the network out of reach."""
    return isolation() in modes.HIDES_FILES


def run(job: dict, limits: Limits, hide: list[Path] = (), mode: str | None = None) -> Outcome:
    """Run ``job`` (see :mod:`autograder.sandbox.inside`) in a fresh sandbox and collect its results.

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
        for source in (INSIDE, WIRE):
            shutil.copy(source, work / source.name)
        (work / "job.json").write_text(json.dumps(job))
        work.chmod(0o755)
        for item in work.iterdir():
            item.chmod(0o644)
        args = ["-I", str(work / INSIDE.name), str(work / "job.json")]
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
        return _collect(modes.command(mode, work, [paths.ROOT, *hide], args), env, work, limits, mode)
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
            preexec_fn=preexec(limits, mode),
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
                problem = f"{watch.stopped[-1]}: {HINT}"
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
                if len(printed) < PRINTED_KEPT:
                    printed += chunk[: PRINTED_KEPT - len(printed)]
                if total_printed > limits.output_bytes:
                    problem = f"printed more than {limits.output_bytes // 1024} KiB; remove the printing loop"
                    open_streams = 0
                    break
            else:
                result += chunk
                if len(result) > MAX_RESULTS:
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
