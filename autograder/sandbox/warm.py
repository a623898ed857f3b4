"""Warm sandboxes: one server per isolation mode and class (its hidden folders), with torch imported
once (``serve.py``), that forks a fresh sandbox for each submission. The server's folder is the
class's jobs folder: each submission's work folder is made in it, and its child keeps to that one
(``modes.policy``).

:func:`server` starts one on first use and keeps it for the grader's process (:func:`close` ends
those of one class); :meth:`Server.start` asks it for a child and returns a :class:`Child`, which
:mod:`autograder.sandbox.launch` reads, watches and kills as it does a fresh sandbox's process: its
pid is this process's view of it (in the bubblewrap modes the server has a pid namespace of its
own, whose numbers mean nothing here: :meth:`Server.seen_here` translates them), it leads its own
session, and its output and result pipes are the grader's. A server that cannot start, or whose
child cannot set itself up, is not used again in this process: grading goes on in fresh sandboxes.
Not handled: systems without ``fork`` (see :data:`system.FORKS`).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from autograder.sandbox import memory, modes

SERVE = Path(__file__).resolve().with_name("serve.py")
WIRE = SERVE.parent.parent.parent / "course" / "plain_data.py"
START_SECONDS = 120.0  # for the server's imports, on a busy machine
REPLY_SECONDS = 30.0  # for the pid of a child the server forks


class WarmUnavailable(OSError):
    """The warm sandbox did not start or went away: the caller starts a fresh one instead."""


class Child:
    """A submission's sandbox forked by a server, with what ``launch.Attempt`` asks of a process:
    ``pid`` as this process sees it (0 where it had ended before it could be seen)."""

    def __init__(self, pid: int, stdout):
        self.pid, self.stdout = pid, stdout
        self.returncode: int | None = None
        self._ended = threading.Event()
        self.when_ended: threading.Event | None = None  # also set once it has ended (the grader's wake-up)

    def ended(self, status: int | None) -> None:
        """Its exit status as the server reaped it (None: the server went away first)."""
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
        self._ended.set()
        if self.when_ended is not None:
            self.when_ended.set()

    def finished(self) -> bool:
        """Whether it has ended: as the server said, or, once the server has gone, as the system shows."""
        if not self._ended.is_set():
            return False
        if self.returncode is not None or self.pid <= 0:
            return True
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def poll(self) -> int | None:
        """Its exit code, as ``Popen.poll`` gives it; None while it runs, and where it ended unreaped."""
        return self.returncode if self.finished() else None

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.finished():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"sandbox {self.pid}", timeout)
            self._ended.wait(0.05)
            if self._ended.is_set():
                time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        memory.kill_sandbox(self.pid)


class Server:
    """One warm sandbox and the grader's end of its two channels."""

    def __init__(self, mode: str, hide: list[Path], env: dict):
        self.mode, self.broken = mode, ""
        self.work = Path(tempfile.mkdtemp(prefix="autograder-jobs-"))
        for source in (SERVE, *(SERVE.with_name(name) for name in ("inside.py", "confine.py")), WIRE):
            shutil.copy(source, self.work / source.name)
            (self.work / source.name).chmod(0o644)
        self.work.chmod(0o711 if modes.own_user(mode) else 0o700)  # children reach their own folders only
        self.requests, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        read_end, write_end = os.pipe()
        policy = json.dumps(modes.policy(mode, self.work, 0, None))
        args = ["-I", str(self.work / SERVE.name), policy, str(theirs.fileno()), str(write_end)]
        self.log = self.work / "server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                modes.server_command(mode, self.work, args),
                cwd=self.work,
                env={**env, "HOME": str(self.work), "WORK": str(self.work)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(), write_end),
                start_new_session=True,
            )
        theirs.close()
        os.close(write_end)
        self.lock, self.count = threading.Lock(), 0
        self.waiting: dict[int, queue.Queue] = {}
        self.children: dict[int, Child] = {}
        self.ready = threading.Event()
        self.alive, self.inside = True, 0
        self.reader = threading.Thread(target=self._read, args=(os.fdopen(read_end, "rb"),), daemon=True)
        self.reader.start()
        if not self.ready.wait(START_SECONDS) or not self.alive:
            problem = self.problem()
            self.close()
            raise WarmUnavailable(f"the warm sandbox did not start: {problem}")

    def problem(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-600:] or f"exit code {self.process.poll()}"
        except OSError:
            return f"exit code {self.process.poll()}"

    def _read(self, replies) -> None:
        for raw in replies:
            line = json.loads(raw)
            if line.get("ready"):
                self.inside = self._seen_from(line["pid"])
                self.ready.set()
            elif "id" in line:
                with self.lock:
                    waiter = self.waiting.pop(line["id"])
                    child = self.children[line["pid"]] = Child(self.seen_here(line["pid"]), None)
                waiter.put(child)
            elif "exited" in line:
                with self.lock:
                    child = self.children.pop(line["exited"], None)
                if child:
                    child.ended(line["status"])
        with self.lock:  # the server went away: nothing more will come
            self.alive = False
            for waiter in self.waiting.values():
                waiter.put(None)
            for child in self.children.values():
                child.ended(None)
            self.waiting.clear()
            self.children.clear()
        self.ready.set()

    def _seen_from(self, pid: int) -> int:
        """The server's own pid here, from its pid in its namespace (0 if it is gone)."""
        try:
            found = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.Error:
            return 0
        return next((p.pid for p in found if memory.namespace_pids(p.pid)[-1] == pid), 0)

    def seen_here(self, pid: int) -> int:
        """A child's pid here, from its pid in the server's namespace (0 where it has ended and
        been reaped already: the server's word that it exited follows)."""
        if not self.inside or memory.namespace_pids(self.inside) == [self.inside]:
            return pid  # the server shares our pid namespace
        try:
            children = psutil.Process(self.inside).children()
        except psutil.Error:
            return 0
        return next((p.pid for p in children if memory.namespace_pids(p.pid)[1:2] == [pid]), 0)

    def start(self, work: Path, env: dict, rlimits: list, policy: dict, results_end: int) -> Child:
        """Fork a child for the job in ``work``, confined as ``policy`` says (``modes.policy``);
        WarmUnavailable when the server has gone away."""
        read_end, write_end = os.pipe()
        answer: queue.Queue = queue.Queue()
        request = {"work": str(work), "env": env, "rlimits": rlimits, "confine": policy}
        try:
            with self.lock:
                if not self.alive:
                    raise WarmUnavailable("the warm sandbox has ended")
                self.count += 1
                request["id"] = self.count
                self.waiting[self.count] = answer
                socket.send_fds(self.requests, [json.dumps(request).encode()], [write_end, results_end])
            child = answer.get(timeout=REPLY_SECONDS)
        except (OSError, queue.Empty) as error:
            os.close(read_end)
            raise WarmUnavailable(f"the warm sandbox did not answer: {error}") from None
        finally:
            os.close(write_end)
        if child is None:
            os.close(read_end)
            raise WarmUnavailable("the warm sandbox has ended")
        child.stdout = os.fdopen(read_end, "rb", buffering=0)
        return child

    def close(self) -> None:
        try:
            self.requests.send(json.dumps({"quit": True}).encode())
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.requests.close()
        shutil.rmtree(self.work, ignore_errors=True)


_servers: dict[tuple, Server | None] = {}
_retired: list[tuple[tuple, Server]] = []  # no longer given work; ended with the others (children may still run)
_lock = threading.Lock()


def _key(mode: str, hide: list[Path]) -> tuple:
    return mode, _folders(hide)


def _folders(hide: list[Path]) -> tuple:
    return tuple(modes.outermost(Path(folder).resolve() for folder in hide))


def server(mode: str, hide: list[Path], env: dict) -> Server | None:
    """The warm sandbox for ``mode`` and ``hide``, started now if there is none (or it ended);
    None where it cannot start or has failed to set up a child in this process (said once, on stderr)."""
    key = _key(mode, hide)
    with _lock:
        found = _servers.get(key, False)
        if found is None:
            return None
        if found and found.alive:
            return found
        if found:
            _retired.append((key, found))
        try:
            _servers[key] = Server(mode, hide, env)
        except WarmUnavailable as error:
            _servers[key] = None
            print(f"grading in a fresh sandbox per submission: {error}", file=sys.stderr)
        return _servers[key]


def give_up(found: Server, why: str) -> None:
    """A child of ``found`` could not set itself up: fresh sandboxes from now on (said on stderr)."""
    with _lock:
        for key, value in list(_servers.items()):
            if value is found:
                _servers[key] = None
                _retired.append((key, found))
    print(f"grading in a fresh sandbox per submission: the warm sandbox's child: {why}", file=sys.stderr)


def close(hide: list[Path] | None = None) -> None:
    """End the warm sandboxes started for ``hide`` (every one, with None), once their children are done."""
    with _lock:
        chosen = [k for k in _servers if hide is None or k[1] == _folders(hide)]
        ended = [_servers.pop(k) for k in chosen]
        ended += [found for key, found in _retired if hide is None or key[1] == _folders(hide)]
        _retired[:] = [(key, found) for key, found in _retired if found not in ended]
    for found in ended:
        if found:
            found.close()


atexit.register(close)
