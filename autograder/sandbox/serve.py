"""The warm sandbox's program: an interpreter that imports torch and ``inside.py`` once, then forks
a fresh sandbox for each submission (started and spoken to by :mod:`autograder.sandbox.warm`).

Usage (by the grader, never by hand): ``python -I serve.py MODE REQUESTS REPLIES``, MODE the
isolation mode this server was started in (``modes.server_command``), REQUESTS the descriptor of
a datagram socket on which each request arrives (JSON, with the submission's output and result
pipes attached), REPLIES a pipe's descriptor for JSON lines back: ``{"ready": true}`` once the
imports are done, ``{"id": ..., "pid": ...}`` for each child started, ``{"exited": pid, "status":
...}`` as each one ends.

This process never runs a learner's code and never reads a job: it reads only the grader's
requests, so every child starts from the state it had when its imports were done (sys.modules,
torch's and numpy's settings, no files open but its own, which each child closes). A child, before
any of the learner's code runs, does what a fresh sandbox's start does (``modes.command`` and
``limits.preexec``): a session of its own and the limits; in the namespace modes new mount,
network and pid namespaces, its own ``/proc`` and ``/dev/shm`` (a forked grandchild is the pid
namespace's first process, as ``unshare --fork --kill-child`` makes it, so that nothing it leaves
behind outlives it); a user id of its own (``namespace``, ``unprivileged``) or every capability
dropped behind a nested user namespace (``user-namespace``); the grader's environment variables,
its own working folder and descriptors, fresh seeds for ``random``, numpy and torch (as a fresh
interpreter draws them at import); then
:func:`inside.run_job`. ``{"started": true}`` on the result pipe says that all of that succeeded,
``{"unstarted": why}`` that it did not (then the grader grades the submission in a fresh sandbox).

This file is copied into the sandbox and must import only the standard library, numpy and torch.
Not handled: systems without ``fork`` (the grader starts a fresh sandbox per submission there); the
hash seed of ``str``, the same in every child of one server (it carries nothing from one submission
to another); outside Linux, a learner's process that leaves the session is not ended with it (as in
a fresh sandbox in the ``limits`` mode).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves this file's folder out
import inside  # noqa: E402  (the copy beside this file)

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 36, 38
CAPABILITY_VERSION_3 = 0x20080522
HIDES_FILES = ("namespace", "user-namespace")  # as in modes.py, which this file cannot import
PROCESSES_INSIDE = ("user-namespace",)  # as in modes.py: the process limit is set in the innermost namespace
RESULTS = 3  # the result pipe's descriptor in a child, as its argv says
LINUX = sys.platform == "linux"
_libc = ctypes.CDLL(None, use_errno=True) if LINUX else None


def _call(name: str, *args) -> None:
    """A libc call that fails loudly (OSError with the errno)."""
    if getattr(_libc, name)(*args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}: {os.strerror(error)}")


def _prctl(option: int, value: int) -> None:
    _call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _mount(source: str, target: str, kind: str, flags: int, data: str | None = None) -> None:
    _call("mount", source.encode(), target.encode(), kind.encode(), ctypes.c_ulong(flags), data and data.encode())


def _own_mounts() -> None:
    """This pid namespace's ``/proc`` and a ``/dev/shm`` of its own (as ``--mount-proc`` and the hide script)."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir("/dev/shm"):
        _mount("none", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m")


def _lock_and_drop() -> None:
    """As ``modes.LOCK_AND_DROP``: a nested user namespace whose mount namespace locks the mounts
    made before it, then no capability left, and none to be gained."""
    _call("unshare", CLONE_NEWUSER | CLONE_NEWNS)
    for name, text in (("setgroups", "deny"), ("uid_map", "0 0 1"), ("gid_map", "0 0 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for capability in range(last + 1):
        _prctl(PR_CAPBSET_DROP, capability)
    _no_capabilities()


def _no_capabilities() -> None:
    """No effective, permitted, inheritable or ambient capability left, and none to be gained by exec."""
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 capabilities): all none
    _call("capset", header, data)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _drop_to(uid: int) -> None:
    """As ``setpriv --reuid --regid --clear-groups --no-new-privs``: a user of the sandbox's own,
    without the capabilities the server kept to make it (``modes.SERVER_CAPABILITIES``)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if LINUX:
        _no_capabilities()


def _fresh_seeds() -> None:
    """New seeds from the system, as a fresh interpreter's imports draw them."""
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    torch.seed()


def _grandchild(request: dict, mode: str) -> None:
    """The sandbox's own process, where the submission runs (never returns)."""
    if LINUX:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # with the process above it, as --kill-child does
    if mode in HIDES_FILES:
        _own_mounts()
    if mode == "user-namespace":
        _lock_and_drop()
    elif request.get("uid") is not None:
        _drop_to(request["uid"])
    if mode in PROCESSES_INSIDE:  # now in the namespace whose processes are the sandbox's alone
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (dict(request["rlimits"])["RLIMIT_NPROC"],) * 2)
    if LINUX:
        _prctl(PR_SET_DUMPABLE, 1)  # as after exec: a change of user id clears it
    os.environ.clear()
    os.environ.update(request["env"])
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


def _child(request: dict, fds: list[int], mode: str) -> None:
    """The forked child for one submission (never returns): its descriptors, session and limits,
    then its namespaces and the grandchild that runs the submission; it ends as the grandchild did."""
    output, results = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (output, 1), (output, 2), (results, RESULTS)):
        os.dup2(source, target)
    os.closerange(RESULTS + 1, 1 << 20)  # nothing of the server's, nor of another submission's
    signal.set_wakeup_fd(-1)  # the server's, whose descriptor closerange closed
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        os.setsid()
        import resource

        for name, value in request["rlimits"]:
            if not (name == "RLIMIT_NPROC" and mode in PROCESSES_INSIDE):  # the grandchild's, in its namespace
                resource.setrlimit(getattr(resource, name), (value, value))
        if LINUX:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        if mode in HIDES_FILES:
            _call("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
        pid = os.fork()
        if pid == 0:
            try:
                _grandchild(request, mode)
            except BaseException as error:
                os.write(RESULTS, (json.dumps({"unstarted": f"{type(error).__name__}: {error}"}) + "\n").encode())
            os._exit(1)
    except BaseException as error:
        os.write(RESULTS, (json.dumps({"unstarted": f"{type(error).__name__}: {error}"}) + "\n").encode())
        os._exit(1)
    for fd in (0, 1, 2, RESULTS):
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    if LINUX and mode not in HIDES_FILES:
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


def serve(mode: str, requests: socket.socket, replies) -> None:
    """Fork a child per request until the grader says quit or goes away."""

    def reply(line: dict) -> None:
        replies.write(json.dumps(line) + "\n")
        replies.flush()

    parent, children = os.getppid(), set()
    ended = _child_exits()
    reply({"ready": True})
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
                _child(request, fds, mode)
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
    mode, requests, replies = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import numpy  # noqa: F401  (what a job imports, imported once here)
    import torch

    torch.set_num_threads(1)  # before any fork, as inside.run_job does
    if LINUX:
        _prctl(PR_SET_DUMPABLE, 0)  # no child may trace this process or read its memory
    serve(mode, socket.socket(fileno=requests), os.fdopen(replies, "w"))
    os._exit(0)


if __name__ == "__main__":
    main()
