"""Start one sandbox for a job, and bring back its plain-data results.

The job (see :mod:`autograder.sandbox.inside`) runs in the mode :func:`isolation` chose, under
:class:`~autograder.sandbox.limits.Limits`; while it runs, its output and its results are read
here (by a thread per stream, which every system allows), with a wall clock on the whole sandbox,
a cap on what it may print, a cap on what it sends back, and the memory watch. Where the system
forks, the sandbox is a child of a warm sandbox (:mod:`autograder.sandbox.warm`), read, watched and
killed here as a new interpreter is (``AUTOGRADER_WARM=0``: a new interpreter). Where the system
cannot fork a process per call (Windows), a call that ends the sandbox (an exit, a crash, the
memory limit, a hang that ignores its timer) costs that call only: it is reported as on the other
systems, and the sandbox starts again with the calls after it. Not handled: a sandbox that cannot
read its job from a folder under the system's temporary directory.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.sandbox import inside, memory, modes, system
from autograder.sandbox import warm as _warm
from autograder.sandbox.limits import Limits, preexec, settings
from autograder.sandbox.memory import HINT, WATCH_SECONDS, MemoryWatch
from course import paths

INSIDE = Path(__file__).resolve().with_name("inside.py")
CONFINE = INSIDE.with_name("confine.py")
WIRE = Path(__file__).resolve().parent.parent.parent / "course" / "plain_data.py"
MAX_RESULTS = 64 * 2**20
PRINTED_KEPT = 4096  # what the report keeps of what a submission printed
OVERTIME_SECONDS = 2.0  # past a call's own limit, where only a timer thread enforces it, the sandbox is stopped
FOLDER_FILES = 1000  # files and folders a sandbox may make in its work folder


@dataclass
class Outcome:
    """What came back from one sandbox run."""

    results: dict | None  # {"cells": [...], "probes": {id: {...}}} or None when nothing came back
    problem: str = ""  # why nothing (or not everything) came back
    output: str = ""  # the first part of what the submission printed
    seconds: float = 0.0
    isolation: str = ""
    notes: list[str] = field(default_factory=list)
    warm: bool = False  # run as a warm sandbox's child


@functools.cache
def isolation(memory_bytes: int = Limits.memory_bytes) -> str:
    """The strongest mode in which the sandbox starts here with the command grading runs (it
    imports torch and numpy under the memory limit). Tried once per process.

    Raises :class:`~autograder.sandbox.modes.SandboxUnavailable` when none starts.
    """

    def failure(mode: str) -> str:
        outcome = run(
            {"setup": [], "answers": [], "probes": []}, Limits(memory_bytes=memory_bytes), mode=mode, warm=False
        )
        if outcome.results is not None:
            return ""
        return outcome.problem + (f"; it printed: {outcome.output[-600:]}" if outcome.output else "")

    return modes.strongest(failure, memory_bytes)


def hides_files() -> bool:
    """Whether submissions here run with the course's files, other submissions and the network out of reach."""
    return isolation() in modes.HIDES_FILES


def run(job: dict, limits: Limits, hide: list[Path] = (), mode: str | None = None, warm: bool | None = None) -> Outcome:
    """Run ``job`` (see :mod:`autograder.sandbox.inside`) in a fresh sandbox and collect its results:
    a child of a warm sandbox (:mod:`autograder.sandbox.warm`) where the system forks and the mode
    keeps each child to itself (``modes.WARM``), unless ``warm`` is False (by default: unless
    ``AUTOGRADER_WARM=0``), else a new interpreter. ``hide``: the class's folders, which no mode
    but ``limits`` lets a submission reach (none is on the allowlist); a class's warm sandbox is
    ended with them (:func:`end_warm`).

    ``mode`` defaults to :func:`isolation`'s choice (which may raise :class:`SandboxUnavailable`).
    """
    job = {
        **job,
        "probe_seconds": limits.probe_seconds,
        "cell_seconds": limits.cell_seconds,
        "memory_bytes": limits.memory_bytes,
        "fork": system.FORKS,
    }
    mode = mode or isolation(limits.memory_bytes)
    hidden = [paths.ROOT, *hide]
    if mode in modes.HIDES_FILES and (found := modes.exposed(hidden)):
        raise modes.SandboxUnavailable(
            f"{', '.join(found)} lies inside the Python environment or interpreter that every submission may read: "
            "keep the course, the submissions and the feedback folder outside it"
        )
    server = None
    if warm is None:
        warm = os.environ.get("AUTOGRADER_WARM") != "0"
    if system.FORKS and warm and mode in modes.WARM:
        server = _warm.server(mode, hidden, _environment(Path(tempfile.gettempdir())))
    uid = modes.sandbox_uid() if modes.own_user(mode) else None
    work = Path(tempfile.mkdtemp(prefix="autograder-", dir=server.work if server else None))
    started = time.monotonic()
    try:
        for source in (INSIDE, CONFINE, WIRE):
            shutil.copy(source, work / source.name)
        if (
            uid is not None
        ):  # the sandbox's own; readable, so that Python started as root without capabilities imports from it
            os.chown(work, uid, uid)
            work.chmod(0o755)
        policy = modes.policy(mode, work, limits.processes, uid)
        args = ["-I", str(work / INSIDE.name), str(work / "job.json")]
        command = modes.command(mode, work, args)
        watch = MemoryWatch(0, limits.memory_bytes)
        deadline = started + limits.wall_seconds
        attempt = None
        if server is not None:
            start = _warm_start(server, work, limits, mode, policy)
            attempt = Attempt.run(job, start, work, limits, watch, deadline)
            if attempt.unstarted:  # before any of the learner's code ran: a fresh sandbox instead
                if not attempt.server_lost:
                    _warm.give_up(server, attempt.unstarted)
                attempt, watch = None, MemoryWatch(0, limits.memory_bytes)
        if attempt is None:
            start = _fresh_start(command, work, limits, mode, policy)
            attempt = Attempt.run(job, start, work, limits, watch, deadline)
        if not system.FORKS:
            attempt = _resumed(attempt, job, command, work, limits, mode, watch, deadline)
        if not attempt.done and not attempt.problem:
            attempt.problem = attempt.ended()
        results = None if attempt.problem else {"cells": attempt.cells, "probes": attempt.probes}
        seconds = time.monotonic() - started
        return Outcome(results, attempt.problem, attempt.printed, seconds, mode, list(watch.stopped), attempt.warm)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def end_warm(hide: list[Path] = ()) -> None:
    """End the warm sandboxes that :func:`run` keeps for ``hide`` (a class's folders, once it is graded)."""
    _warm.close([paths.ROOT, *hide])


def _fresh_start(command: list[str], work: Path, limits: Limits, mode: str, policy: dict):
    """How :meth:`Attempt.run` starts a new interpreter for the sandbox (which confines itself as
    ``policy`` says before the learner's code runs: ``inside.main``)."""

    def start(channel: ResultChannel) -> subprocess.Popen:
        return subprocess.Popen(
            command + [channel.argument, json.dumps(policy)],
            cwd=work,
            env=_environment(work),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec(limits),
            **channel.popen_options,
        )

    return start


def _warm_start(server: _warm.Server, work: Path, limits: Limits, mode: str, policy: dict):
    """How :meth:`Attempt.run` has the warm sandbox fork a child for the sandbox: the same
    environment, limits and confinement as :func:`_fresh_start` gives a new interpreter."""

    def start(channel: ResultChannel) -> _warm.Child:
        return server.start(work, _environment(work), settings(limits), policy, channel.write_end)

    start.warm = True
    return start


@dataclass
class Attempt:
    """One start of the sandbox, and what it sent back (JSON lines: see :func:`inside.report`)."""

    probes: dict = field(default_factory=dict)
    cells: list | None = None
    running: dict | None = None  # the probe under way when the sandbox ended, if any
    running_since: float = 0.0
    done: bool = False
    problem: str = ""  # why it was stopped from here (time, output, memory)
    stopped_for_memory: bool = False
    overtime: bool = False
    printed: str = ""
    code: int | None = None
    warm: bool = False  # a warm sandbox's child (see autograder.sandbox.warm)
    unstarted: str = ""  # why a warm sandbox's child could not set itself up, before any learner code ran
    started: bool = False  # the child said it set itself up (a warm sandbox's only)
    server_lost: bool = False  # the warm sandbox itself had ended or did not answer
    given: tuple[int, int] = (0, 0)  # the bytes and files its work folder held as it started

    @classmethod
    def run(cls, job: dict, start, work: Path, limits: Limits, watch: MemoryWatch, deadline: float) -> Attempt:
        """Start the sandbox on ``job`` (``start(channel)``: :func:`_fresh_start` or
        :func:`_warm_start`) and read it until it ends or is stopped."""
        (work / "job.json").write_text(json.dumps(job))
        for item in work.iterdir():
            item.chmod(0o644)
        attempt = cls(warm=getattr(start, "warm", False), given=folder_use(work))
        by_id = {p["id"]: p for p in job["probes"]}
        channel = ResultChannel(work)
        try:
            process = start(channel)
        except _warm.WarmUnavailable as error:
            channel.close()
            attempt.unstarted, attempt.server_lost = str(error), True
            return attempt
        except OSError as error:
            channel.close()
            attempt.problem = f"the sandbox could not start: {error}"
            return attempt
        channel.started()
        watch.leader = process.pid
        printed = Reader(process.stdout, PRINTED_KEPT)
        wake = threading.Event()
        _wake_when_it_ends(process, wake)
        printed.start(wake)
        channel.reader.start(wake)
        attempt.pump(process, printed, channel.reader, work, limits, watch, deadline, by_id, wake)
        _kill(process)
        for reader in (printed, channel.reader):
            reader.finish()
        attempt.take(channel.reader, by_id)
        channel.close()
        if not printed.thread.is_alive():
            process.stdout.close()
        attempt.printed = printed.text()
        attempt.code = process.returncode
        return attempt

    def pump(self, process, printed, results, work: Path, limits: Limits, watch: MemoryWatch, deadline, by_id, wake):
        """Read output and results until the process ends, enforcing the wall clock, the output cap,
        the memory limit, what its work folder holds and, where calls do not fork, each call's own
        time limit."""
        next_watch = 0.0
        while not (printed.ended and (results.ended or results.follows_process) and _finished(process)):
            wake.wait(WATCH_SECONDS)
            wake.clear()
            self.take(results, by_id)
            now = time.monotonic()
            if self.unstarted:
                return
            if now >= deadline:
                self.problem = f"stopped after the time limit of {limits.wall_seconds:.0f} s (an endless loop?)"
                return
            if printed.total > limits.output_bytes:
                self.problem = f"printed more than {limits.output_bytes // 1024} KiB; remove the printing loop"
                return
            if results.total > MAX_RESULTS:
                self.problem = "sent back more than 64 MiB of results"
                return
            if now >= next_watch:
                next_watch = now + WATCH_SECONDS
                if watch.check(calling=not system.FORKS and self.running is not None):
                    self.problem, self.stopped_for_memory = f"{watch.stopped[-1]}: {HINT}", True
                    return
                most = (self.given[0] + limits.folder_bytes, self.given[1] + FOLDER_FILES)
                if any(used > allowed for used, allowed in zip(folder_use(work, most), most, strict=True)):
                    self.problem = f"wrote more than {limits.folder_bytes // 2**20} MiB or {FOLDER_FILES} files"
                    return
            if not system.FORKS and self.running and now - self.running_since > limits.probe_seconds + OVERTIME_SECONDS:
                self.overtime = True
                return

    def take(self, results: Reader, by_id: dict) -> None:
        """The complete lines that arrived since the last call."""
        for line in results.lines():
            if self.warm and not self.started and not self.cells:  # the child's own, before the learner's code
                self.started = bool(line.get("started"))
                self.unstarted = "" if self.started else str(line.get("unstarted", "no word from the child"))
                continue
            if "cells" in line:
                self.cells = line["cells"]
            elif "start" in line:
                self.running, self.running_since = by_id[line["start"]], time.monotonic()
            elif "probe" in line:
                self.probes[line["probe"]] = line["result"]
                self.running = None
            elif line.get("done"):
                self.done = True

    def ended(self) -> str:
        """Why the sandbox sent back no complete report, when nothing here stopped it."""
        code = self.code
        if code is not None and code < 0:
            problem = f"the grading process was killed by signal {signal.Signals(-code).name}"
        else:
            problem = f"the grading process ended (exit code {code}) before reporting"
        if "MemoryError" in self.printed or code == -getattr(signal, "SIGKILL", 9):
            problem += "; it may have run out of memory"
        last = next((line.strip() for line in reversed(self.printed.splitlines()) if line.strip()), "")
        if last:  # where the sandbox itself failed, its traceback's last line says why
            problem += f"; it printed: …{last[:200]}"
        return problem


def folder_use(work: Path, most: tuple[int, int] = (2**62, 2**62)) -> tuple[int, int]:
    """The bytes and files the sandbox's work folder, the one place it may write, holds: counted
    until either passes ``most`` (its own disk quota, where no file system gives one)."""
    total, count, folders = 0, 0, [str(work)]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue
        for entry in entries:
            count += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
            if total > most[0] or count > most[1]:
                return total, count
    return total, count


def _wake_when_it_ends(process, wake: threading.Event) -> None:
    """Set ``wake`` once the sandbox's first process has ended, so that :meth:`Attempt.pump` sees it
    then rather than at its next look (a warm sandbox's child when the server says so, a process of
    ours when a thread has reaped it)."""
    if isinstance(process, _warm.Child):
        process.when_ended = wake
        if process.finished():
            wake.set()
        return

    def reap() -> None:
        process.wait()
        wake.set()

    threading.Thread(target=reap, daemon=True).start()


def _finished(process) -> bool:
    """Whether the sandbox's first process has ended (a warm sandbox's child may end unreaped)."""
    return process.finished() if isinstance(process, _warm.Child) else process.poll() is not None


def _resumed(attempt: Attempt, job, command, work, limits: Limits, mode, watch, deadline) -> Attempt:
    """Where calls do not fork: while the sandbox ends during a call (its own exit or crash, the
    memory limit, a hang), that call gets what a forked call would have reported, and the sandbox
    starts again with the calls after it, but for those of a function that did not finish (as
    :func:`inside.main` skips them). A stop for the wall clock or the output ends it all."""
    probes, cells = dict(attempt.probes), attempt.cells
    while attempt.running and not attempt.done and (not attempt.problem or attempt.stopped_for_memory):
        probes[attempt.running["id"]] = _lost_call(attempt, attempt.running["call"], limits)
        hung = {p["call"] for p in job["probes"] if "timeout" in probes.get(p["id"], {})}
        pending = []
        for probe in job["probes"]:
            if probe["id"] in probes:
                continue
            if probe["call"] in hung:
                probes[probe["id"]] = {"skipped": f"an earlier call of {probe['call']} did not finish"}
            else:
                pending.append(probe)
        if not pending:
            attempt = Attempt(done=True, printed=attempt.printed)
            break
        start = _fresh_start(command, work, limits, mode, {})
        attempt = Attempt.run({**job, "probes": pending}, start, work, limits, watch, deadline)
        probes.update(attempt.probes)
    attempt.probes, attempt.cells = probes, cells  # the cells as the first start ran them: each start runs them alike
    return attempt


def _lost_call(attempt: Attempt, call: str, limits: Limits) -> dict:
    """What a forked call would have reported, had it ended as this sandbox did."""
    if attempt.overtime:
        return {"timeout": limits.probe_seconds}
    if attempt.stopped_for_memory:
        return inside.crashed(call, memory_bytes=limits.memory_bytes)
    code = attempt.code
    if code is not None and code < 0:
        return inside.crashed(call, signal.Signals(-code).name)
    return inside.crashed(call, exit_code=code)


class Reader:
    """A stream read to its end by a thread of its own: the first ``kept`` bytes kept, all counted."""

    follows_process = False  # whether the stream ends only when it is told the process has

    def __init__(self, stream, kept: int):
        self.stream, self.kept = stream, kept
        self.data, self.total, self.ended, self._parsed = bytearray(), 0, False, 0
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self, wake: threading.Event) -> None:
        self.wake = wake
        self.thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self.stream.fileno(), 65536):
                self.add(chunk)
        except (OSError, ValueError):
            pass
        self.ended = True
        self.wake.set()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.data) < self.kept:
            self.data += chunk[: self.kept - len(self.data)]
        self.wake.set()

    def finish(self) -> None:
        """Wait a moment for the rest once the process has ended (a process the learner left behind
        may hold the stream open: it is not waited for)."""
        self.thread.join(timeout=2)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")

    def lines(self):
        """The JSON lines completed since the last call."""
        end = self.data.rfind(b"\n") + 1
        if end > self._parsed:
            for raw in bytes(self.data[self._parsed : end]).splitlines():
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(line, dict):
                    yield line
            self._parsed = end


class FileTail(Reader):
    """A results file read as it grows (where a pipe cannot be handed to the sandbox by number)."""

    follows_process = True

    def __init__(self, path: Path, kept: int):
        super().__init__(None, kept)
        self.path, self.stop = path, threading.Event()

    def _read(self) -> None:
        with open(self.path, "rb") as handle:
            while True:
                stopping = self.stop.is_set()
                while chunk := handle.read(65536):
                    self.add(chunk)
                if stopping:
                    break
                self.stop.wait(WATCH_SECONDS / 2)
        self.ended = True
        self.wake.set()

    def finish(self) -> None:
        self.stop.set()
        super().finish()


class ResultChannel:
    """How the sandbox's results come back: a pipe whose write end the sandbox inherits by number
    (POSIX), or a file in its folder (Windows, where only handles are inherited)."""

    def __init__(self, work: Path):
        if system.PASSES_FDS:
            read_end, self.write_end = os.pipe()
            os.set_inheritable(self.write_end, True)
            self.argument, self.popen_options = str(self.write_end), {"pass_fds": (self.write_end,)}
            self.reader = Reader(os.fdopen(read_end, "rb", buffering=0), MAX_RESULTS + 1)
        else:
            path = work / "results.jsonl"
            path.write_bytes(b"")
            path.chmod(0o666)
            self.write_end, self.argument, self.popen_options = None, str(path), {}
            self.reader = FileTail(path, MAX_RESULTS + 1)

    def started(self) -> None:
        """Once the sandbox has its copy of the write end: ours closes, so the end of the sandbox is seen."""
        if self.write_end is not None:
            os.close(self.write_end)
            self.write_end = None

    def close(self) -> None:
        self.started()
        if self.reader.stream is not None and not self.reader.thread.is_alive():
            self.reader.stream.close()


def _environment(work: Path) -> dict:
    """The sandbox's environment variables: nothing of the grader's but what Python needs to start."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work),
        "WORK": str(work),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",  # grading never needs a GPU, and a CUDA context costs memory
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if os.name == "nt":  # Windows starts no Python without these; its PATH finds torch's DLLs
        env.update({k: os.environ[k] for k in ("SYSTEMROOT", "PATH", "TEMP", "TMP") if k in os.environ})
        env["USERPROFILE"] = str(work)
    return env


def _kill(process: subprocess.Popen) -> None:
    """The sandbox and whatever it started (:func:`memory.kill_sandbox`), then its exit reaped."""
    memory.kill_sandbox(process.pid)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
