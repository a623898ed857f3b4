"""The program that runs a submission inside the sandbox: define the answers, call them, report.

Usage (by the grader, never by hand): ``python -I inside.py JOB.json RESULTS [POLICY]``, RESULTS
being the descriptor of the result pipe or, where a pipe cannot be handed over by number (Windows),
a file's path, and POLICY the JSON of what the process does to itself before anything of the job
runs (``modes.policy``, carried out by ``confine.py``, copied beside this file). The job holds the
instructor's setup cells, the learner's cells (answer cells and the cells the learner added, in
notebook order) and the probes: calls of the learner's functions on inputs the grader chose. The
course's own packages cannot be imported here, in every isolation mode alike (:func:`unavailable`
says so), and the visible checks say the same. Where the system forks (``job["fork"]``), each probe
runs in a forked child with its own alarm, so an exit, a crash or a hang in one function costs that
probe only; elsewhere probes run here one after another under a timer thread, and the grader starts
the sandbox again after the probe that ended it (:mod:`autograder.sandbox.launch`). Results go out
as JSON lines (:func:`report`) as they come. Only plain data comes back (see ``plain_data.py``); whether
an answer is right is decided by the grader, outside this process.

This file is copied into the sandbox and must import only the standard library, numpy and torch. The
visible checks in a notebook call :func:`call` too, so both probe the learner's code alike.
"""

from __future__ import annotations

import _thread
import contextlib
import io
import json
import linecache
import os
import select
import signal
import sys
import threading
import time
import traceback

try:  # in a notebook's own kernel (the visible checks), and where the course is importable
    from course import plain_data
except (ImportError, OSError):  # in the sandbox, where the course is hidden: the copy beside this file
    sys.dont_write_bytecode = True  # no __pycache__ of the grader's in the sandbox's folder, which answers see
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plain_data

MAX_PAYLOAD = 8 * 2**20
BLOCKED_PACKAGES = ("course", "autograder")  # what answers may not use: grading has neither
FORK_RETRY_SECONDS = 3.0  # a neighbour's fork bomb can fill the process limit for a moment


def describe(error: BaseException, filename_prefix: str = "<") -> dict:
    """An exception as plain data, with the learner's own lines of the traceback."""
    try:
        message = str(error)[:500]
    except BaseException:
        message = "<message could not be printed>"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(filename_prefix)]
    where = [f"{f.filename}, line {f.lineno}: {(f.line or '').strip()[:120]}" for f in frames[-3:]]
    return {"raised": type(error).__name__, "message": message, "where": where}


def unavailable(name: str) -> str:
    """Why importing the course's package ``name`` fails at grading: the learner sees this message
    from the grader and, before grading, from the visible check."""
    return (
        f"No module named '{name}': answers are graded without the course's own packages, "
        "so write them yourself with torch, numpy and math"
    )


class BlockedPackages:
    """An import hook that refuses the course's own packages (first on ``sys.meta_path``)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED_PACKAGES:
            raise ModuleNotFoundError(unavailable(top), name=name)
        return None


def block_course_packages() -> None:
    """From now on ``import course`` (or ``autograder``) fails as :func:`unavailable` says, even
    where the files are reachable (the ``limits`` isolation mode)."""
    for loaded in [m for m in sys.modules if m.partition(".")[0] in BLOCKED_PACKAGES]:
        del sys.modules[loaded]
    sys.meta_path.insert(0, BlockedPackages())


class Discard(io.TextIOBase):
    """Where the learner's printing goes while cells and probes run: nowhere. A debugging print
    left in a function called thousands of times costs nothing, and cannot fill the output that
    the grader caps (writes to the file descriptors themselves still count against that cap)."""

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        return len(text) if isinstance(text, str) else 0


class OutOfTime(BaseException):
    """Raised by the alarm; a BaseException so that ``except Exception`` in learner code misses it."""


def _on_alarm(signum, frame):
    raise OutOfTime()


class TimeLimit:
    """``with limit(seconds):`` raises :class:`OutOfTime` in the block once ``seconds`` have passed:
    by SIGALRM where the system forks (the alarm survives into a forked child), otherwise by a timer
    thread that interrupts the main thread (Windows has no SIGALRM). A late timer finds the limit
    disarmed and does nothing. Code stuck inside one C call is interrupted only when it returns."""

    def __init__(self, alarm: bool):
        self.alarm = alarm
        self.armed = 0  # the number of the limit in force, 0 for none
        self.count = 0
        if alarm:
            signal.signal(signal.SIGALRM, _on_alarm)
        else:
            signal.signal(signal.SIGINT, self._on_interrupt)

    def _on_interrupt(self, signum, frame):
        if self.armed:
            raise OutOfTime()

    def _fire(self, number: int) -> None:
        if self.armed == number:
            _thread.interrupt_main(signal.SIGINT)

    @contextlib.contextmanager
    def __call__(self, seconds: float):
        if self.alarm:
            signal.alarm(max(1, int(seconds)))
            try:
                yield
            finally:
                signal.alarm(0)
            return
        self.count += 1
        self.armed = number = self.count
        timer = threading.Timer(seconds, self._fire, (number,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            self.armed = 0
            timer.cancel()


def define(job: dict, limit: TimeLimit) -> tuple[dict, list]:
    """Execute the setup cells, then the learner's cells in notebook order, in one namespace;
    collect what each cell raised. A learner's cell is ``{"grade_id", "source"}`` (an answer cell)
    or ``{"added", "source"}`` (a cell the learner added, ``added`` its label). Added cells share a
    time budget (``added_seconds``): once it is spent, the rest of them are skipped, answers still run."""
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    problems = []
    cells = [(f"setup {i}", s, False) for i, s in enumerate(job["setup"])]
    cells += [(a.get("added") or f"answer {a['grade_id']}", a["source"], "added" in a) for a in job["answers"]]
    budget = job.get("added_seconds", float("inf"))
    with contextlib.redirect_stdout(Discard()), contextlib.redirect_stderr(Discard()):
        _run_cells(cells, namespace, problems, job["cell_seconds"], budget, limit)
    return namespace, problems


def _run_cells(cells: list, namespace: dict, problems: list, seconds: int, budget: float, limit: TimeLimit) -> None:
    spent = 0.0
    for label, source, added in cells:
        if added and spent >= budget:
            problems.append(
                {"cell": label, "raised": "skipped", "message": f"not run: the cells you added took their {budget:g} s"}
            )
            continue
        started = time.monotonic()
        filename = f"<{label}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # lines in tracebacks
        try:
            with limit(seconds):
                exec(compile(source, filename, "exec"), namespace)
        except OutOfTime:
            problems.append(
                {"cell": label, "raised": "timeout", "message": f"did not finish within {seconds} s (an endless loop?)"}
            )
        except BaseException as error:  # SystemExit and KeyboardInterrupt too: keep going
            problems.append({"cell": label, **describe(error)})
        finally:
            spent += (time.monotonic() - started) if added else 0.0


def call(namespace: dict, probe: dict, shared: dict | None = None):
    """The generic probe: ``namespace[probe["call"]](*args, **kwargs)``, or, when the probe carries
    a scenario (its name and source, written beside its chapter's checks), that scenario's
    ``scenario(namespace[probe["call"]], *args, **kwargs)``. ``shared``: the job's table of arrays
    that its probes name (``plain_data.encode``); each call decodes its own copy of them."""
    function = namespace.get(probe["call"])
    if function is None:
        raise NameError(f"{probe['call']} is not defined: run the cell that defines it, keeping its name")
    args = [plain_data.decode(a, shared) for a in probe.get("args", [])]
    kwargs = {k: plain_data.decode(v, shared) for k, v in probe.get("kwargs", {}).items()}
    if probe.get("scenario"):
        return scenario(probe["scenario"])(function, *args, **kwargs)
    return function(*args, **kwargs)


def scenario(sent: dict):
    """The scenario function defined by the source the grader sent (it imports what it needs)."""
    defined: dict = {"__name__": "scenario", "__builtins__": __builtins__}
    exec(compile(sent["source"], f"scenario {sent['name']}", "exec"), defined)
    return defined[sent["name"]]


def _fork() -> int:
    """``os.fork()``, retried for a moment while the process limit is full."""
    deadline = time.monotonic() + FORK_RETRY_SECONDS
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run_probe_here(namespace: dict, probe: dict, seconds: float, limit: TimeLimit, shared: dict | None = None) -> dict:
    """Run one probe in this process (where the system cannot fork): its result, or what became of it."""
    with contextlib.redirect_stdout(Discard()), contextlib.redirect_stderr(Discard()):
        try:
            with limit(seconds):
                return {"returned": plain_data.encode(call(namespace, probe, shared))}
        except OutOfTime:
            return {"timeout": seconds}
        except BaseException as error:
            return describe(error)


def run_probe(namespace: dict, probe: dict, seconds: float, memory_bytes: int = 0, shared: dict | None = None) -> dict:
    """Run one probe in a forked child; the child's result, or what became of it (``memory_bytes``,
    the sandbox's limit, is named when the child was killed; ``shared``, as :func:`call` takes it)."""
    read_end, write_end = os.pipe()
    pid = _fork()
    if pid == 0:  # child, in a process group of its own so that its descendants die with it
        os.setpgid(0, 0)
        me = os.getpid()
        os.close(read_end)
        sys.stdout = sys.stderr = Discard()
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(max(1, int(seconds)))
        try:
            payload = {"returned": plain_data.encode(call(namespace, probe, shared))}
        except OutOfTime:
            payload = {"timeout": seconds}
        except BaseException as error:
            payload = describe(error)
        signal.alarm(0)
        if os.getpid() != me:  # a process the learner's code forked: only the probe itself reports
            os._exit(0)
        try:
            data = json.dumps(payload).encode()
        except BaseException:
            data = json.dumps({"raised": "EncodeError", "message": "the result could not be sent back"}).encode()
        view = memoryview(data[:MAX_PAYLOAD])
        while view:
            view = view[os.write(write_end, view) :]
        os._exit(0)
    os.close(write_end)
    chunks, size, deadline = [], 0, time.monotonic() + seconds + 2
    timed_out = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_end], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        size += len(chunk)
        if size <= MAX_PAYLOAD:
            chunks.append(chunk)
    os.close(read_end)
    try:
        os.killpg(pid, signal.SIGKILL)  # the child if it hangs, and whatever it started
    except (ProcessLookupError, PermissionError):
        pass
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {"timeout": seconds}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        if os.WIFSIGNALED(status):
            return crashed(probe["call"], signal.Signals(os.WTERMSIG(status)).name, memory_bytes=memory_bytes)
        return crashed(probe["call"], exit_code=os.WEXITSTATUS(status))


def crashed(called: str, signal_name: str = "", exit_code: int | None = None, memory_bytes: int = 0) -> dict:
    """What a call reports that ended its process: by exiting (``exit_code``), or killed by a signal
    (``signal_name``; none named where the grader stopped it without one), for memory where the
    limit (``memory_bytes``) is given and the kill is one the memory watch makes."""
    if exit_code is not None:
        return {"crashed": f"{called} ended its process (exit code {exit_code}) before returning"}
    killed = f"{called} was killed" + (f" by signal {signal_name}" if signal_name else "")
    if memory_bytes and signal_name in ("", "SIGKILL"):
        killed += f", most likely for using more than the memory limit of {memory_bytes / 2**30:.1f} GiB"
    return {"crashed": killed}


def report(results, line: dict) -> None:
    """One JSON line to the grader: ``{"cells": [...]}`` first, then ``{"start": id}`` and
    ``{"probe": id, "result": {...}}`` for each probe, and ``{"done": true}`` last."""
    results.write(json.dumps(line) + "\n")
    results.flush()


def open_results(where: str):
    """The grader's result channel: a pipe's descriptor number, or a file's path."""
    return os.fdopen(int(where), "w") if where.isdigit() else open(where, "w")


def main() -> None:
    policy = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    if policy:  # Linux only: the grader sends no policy elsewhere
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import confine  # the copy beside this file

        confine.confine(policy)
    run_job(sys.argv[1], sys.argv[2])


def run_job(job_path: str, where: str) -> None:
    """Run the job at ``job_path``, reporting to the result channel ``where`` (see :func:`open_results`);
    ends the process. A fresh interpreter runs it from :func:`main`, a warm sandbox's child
    (``serve.py``) directly, with torch already imported."""
    with open(job_path) as handle:
        job = json.load(handle)
    results = open_results(where)  # opened before learner code can close it
    if os.getpid() == 1 and os.getpgrp() != 1:  # the first process of the sandbox's pid namespace
        # a process group of its own: the one it was started in holds the process above it, outside
        # the namespace, so that a learner's kill(0, ...) would end that process, and with it the
        # sandbox, or not, as the scheduler ran them (the grader kills every group of a sandbox)
        os.setpgid(0, 0)
    forks = job.get("fork", True)
    import torch

    torch.set_num_threads(1)  # before any parallel work, so that fork() is safe
    block_course_packages()
    limit = TimeLimit(alarm=forks)
    namespace, problems = define(job, limit)
    shared = plain_data.unpacked(job.pop("shared", {}))  # decoded once here, copied by each call
    report(results, {"cells": problems})
    hung = set()
    for probe in job["probes"]:
        if probe["call"] in hung:  # one endless loop must not eat the time of every other exercise
            result = {"skipped": f"an earlier call of {probe['call']} did not finish"}
        else:
            report(results, {"start": probe["id"]})
            if forks:
                result = run_probe(namespace, probe, job["probe_seconds"], job.get("memory_bytes", 0), shared)
            else:
                result = run_probe_here(namespace, probe, job["probe_seconds"], limit, shared)
        if "timeout" in result:
            hung.add(probe["call"])
        report(results, {"probe": probe["id"], "result": result})
    report(results, {"done": True})
    os._exit(0)  # skip interpreter teardown, which learner code could hook


if __name__ == "__main__":
    main()
