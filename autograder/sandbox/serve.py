"""The warm sandbox's program: an interpreter that imports torch and ``inside.py`` once, then forks
a fresh sandbox for each submission (started and spoken to by :mod:`autograder.sandbox.warm`).

Usage (by the grader, never by hand): ``python -I serve.py POLICY REQUESTS REPLIES``, POLICY the
JSON of what this server keeps itself to once its imports are done (``modes.policy`` for the
class's jobs folder: Landlock, where the mode has it), REQUESTS the descriptor of a datagram socket
on which each request arrives (JSON, with the submission's output and result pipes attached),
REPLIES a pipe's descriptor for JSON lines back: ``{"ready": true}`` once the imports are done,
``{"id": ..., "pid": ...}`` for each child started, ``{"exited": pid, "status": ...}`` as each
one ends.

This process never runs a learner's code and never reads a job: it reads only the grader's
requests, so every child starts from the state it had when its imports were done (sys.modules,
torch's and numpy's settings, no files open but its own, which each child closes). A child, before
any of the learner's code runs, does what a fresh sandbox's start does (``limits.preexec`` and
``inside.main``): a session of its own and the limits; as root a user of its own; in the
bubblewrap modes user and pid namespaces of its own, where the kernel lets it make them (a forked
grandchild is the pid namespace's first process, so that nothing it leaves behind outlives it and
no signal it sends leaves it); then, in that grandchild, no capabilities, its process limit and
Landlock's allowlist for its own work folder (``confine.confine``); the grader's environment
variables, its own working folder and descriptors, fresh seeds for ``random``, numpy and torch
(as a fresh interpreter draws them at import); then :func:`inside.run_job`. ``{"started": true}``
on the result pipe says that all of that succeeded, ``{"unstarted": why}`` that it did not (then
the grader grades the submission in a fresh sandbox).

This file is copied into the sandbox and must import only the standard library, numpy and torch.
Not handled: systems without ``fork`` (the grader starts a fresh sandbox per submission there); the
hash seed of ``str``, the same in every child of one server (it carries nothing from one submission
to another); outside Linux, a learner's process that leaves the session is not ended with it (as in
a fresh sandbox in the ``limits`` mode).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this file's folder out
import inside  # noqa: E402  (the copies beside this file)

LINUX = sys.platform == "linux"
if LINUX:
    import confine  # noqa: E402

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
CAP_SETGID, CAP_SETUID = 6, 7
RESULTS = 3  # the result pipe's descriptor in a child, as its argv says


def _fresh_seeds() -> None:
    """New seeds from the system, as a fresh interpreter's imports draw them."""
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    torch.seed()


def _grandchild(request: dict, policy: dict) -> None:
    """The sandbox's own process, where the submission runs (never returns)."""
    if LINUX:
        confine.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # with the process above it
    if policy:
        confine.confine(policy)
    if LINUX:
        confine.prctl(PR_SET_DUMPABLE, 1)  # as after exec: readable by itself (the server is not)
    os.environ.clear()
    os.environ.update(request["env"])
    if "tempfile" in sys.modules:  # its temporary folder from the new TMPDIR, not the server's
        sys.modules["tempfile"].tempdir = None
    work = request["work"]
    os.chdir(work)
    sys.path[0] = work
    sys.argv = [os.path.join(work, "inside.py"), os.path.join(work, "job.json"), str(RESULTS)]
    _fresh_seeds()
    os.write(RESULTS, b'{"started": true}\n')
    inside.run_job(sys.argv[1], sys.argv[2])


def _end_leftovers() -> None:
    """Where this process is the subreaper (Linux, no pid namespace): end the processes the
    submission left, which were handed to it."""
    for _ in range(100):
        found = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as handle:
                found += [int(pid) for pid in handle.read().split()]
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _child(request: dict, fds: list[int]) -> None:
    """The forked child for one submission (never returns): its descriptors, session and limits,
    its user and namespaces, then the grandchild that runs the submission; it ends as the
    grandchild did."""
    output, results = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (output, 1), (output, 2), (results, RESULTS)):
        os.dup2(source, target)
    os.closerange(RESULTS + 1, 1 << 20)  # nothing of the server's, nor of another submission's
    signal.set_wakeup_fd(-1)  # the server's, whose descriptor closerange closed
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    policy, namespaced = dict(request["confine"]), False
    try:
        os.setsid()
        import resource

        for name, value in request["rlimits"]:
            resource.setrlimit(getattr(resource, name), (value, value))
        if LINUX:
            confine.prctl(PR_SET_CHILD_SUBREAPER, 1)
            confine.prctl(PR_SET_DUMPABLE, 1)  # as after exec: its own /proc/self is its own (the server's is not)
        uid = policy.pop("uid", None)
        if uid is not None:
            confine.become(uid)
        if policy.pop("namespaces", False):
            namespaced = confine.own_namespaces()
            if not namespaced and uid is None:  # its processes count with the server's
                policy["processes"] = None
        pid = os.fork()
        if pid == 0:
            try:
                _grandchild(request, policy)
            except BaseException as error:
                os.write(RESULTS, (json.dumps({"unstarted": f"{type(error).__name__}: {error}"}) + "\n").encode())
            os._exit(1)
    except BaseException as error:
        os.write(RESULTS, (json.dumps({"unstarted": f"{type(error).__name__}: {error}"}) + "\n").encode())
        os._exit(1)
    for fd in (0, 1, 2, RESULTS):
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    if LINUX and not namespaced:
        _end_leftovers()
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _child_exits() -> int:
    """A descriptor that becomes readable each time a child ends (SIGCHLD, by Python's wake-up fd),
    so that the server reaps it and says so at once rather than at its next look."""
    read_end, write_end = os.pipe()
    for fd in (read_end, write_end):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    return read_end


def serve(requests: socket.socket, replies) -> None:
    """Fork a child per request until the grader says quit or goes away."""

    def reply(line: dict) -> None:
        replies.write(json.dumps(line) + "\n")
        replies.flush()

    parent, children = os.getppid(), set()
    ended = _child_exits()
    reply({"ready": True, "pid": os.getpid()})
    while os.getppid() == parent:
        ready, _, _ = select.select([requests, ended], [], [], 0.05)
        if ended in ready:
            os.read(ended, 4096)
        if requests in ready:
            message, fds, _, _ = socket.recv_fds(requests, 1 << 20, 2)
            request = json.loads(message)
            if request.get("quit"):
                break
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds)
            for fd in fds:
                os.close(fd)  # the child's only: the grader sees the end of its output when the child ends
            children.add(pid)
            reply({"id": request["id"], "pid": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            reply({"exited": pid, "status": status})
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main() -> None:
    policy, requests, replies = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    import numpy  # noqa: F401  (what a job imports, imported once here)
    import torch

    torch.set_num_threads(1)  # before any fork, as inside.run_job does
    if LINUX:
        confine.prctl(PR_SET_DUMPABLE, 0)  # no child may trace this process or read its memory
        if policy.get("landlock") and not policy.get("namespaces"):  # the class's jobs folder, where no
            # bubblewrap keeps the server to it; each child keeps to its own folder in it
            confine.landlock(policy["read"], policy["write"], policy["landlock"])
        if os.geteuid() == 0:  # what its children need to become users of their own, nothing more
            confine.keep_capabilities((CAP_SETGID, CAP_SETUID))
    serve(socket.socket(fileno=requests), os.fdopen(replies, "w"))
    os._exit(0)


if __name__ == "__main__":
    main()
