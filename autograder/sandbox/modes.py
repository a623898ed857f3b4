"""How a sandbox is isolated: the modes, the command that starts Python in each, and which is chosen.

The strongest mode that works on this machine is chosen (see :func:`strongest`):

- ``namespace`` (root): new mount, network and pid namespaces (``unshare``) in which the course's
  folders, the submissions and the grader's output are covered by empty tmpfs mounts, then a user id
  of the sandbox's own (``setpriv``), so that a process limit is per sandbox;
- ``user-namespace`` (any user, where the kernel allows unprivileged user namespaces): the same
  namespaces and mounts inside a user namespace, then a nested one that locks those mounts, with
  every capability dropped;
- ``unprivileged`` (root where namespaces fail): a user id of its own only;
- ``limits``: a plain process with the limits of :mod:`autograder.sandbox.limits` (macOS, Windows,
  kernels that forbid user namespaces, or ``AUTOGRADER_ISOLATION=limits``). The report says so, and
  on Windows also that calls share one process (:mod:`autograder.sandbox.system`).

Not handled: side channels between submissions graded at the same time (timing, /tmp), which
cannot change a score.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from autograder.sandbox import system

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
OWN_UID = ("namespace", "unprivileged")  # the modes whose sandbox runs as a user of its own
# the modes whose process limit is set inside the sandbox's innermost user namespace, where the
# kernel counts the sandbox's own processes against it (and ours in the namespaces above against
# our own limit): set before, it would count every process of our uid, another sandbox's too
PROCESSES_INSIDE = ("user-namespace",)
# what a warm sandbox (serve.py) keeps to give each child a user of its own, and namespaces
SERVER_CAPABILITIES = {"namespace": "+setuid,+setgid,+sys_admin", "unprivileged": "+setuid,+setgid"}
_next_uid = itertools.count()
_uid_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start on this machine: the grader's own failure, never the learner's."""


def sandbox_uid() -> int:
    """A user id for one sandbox, distinct from every other sandbox of this grader run."""
    with _uid_lock:
        return FIRST_SANDBOX_UID + (os.getpid() % 1000) * 1000 + next(_next_uid) % 1000


def describe(mode: str) -> str:
    """What ``mode`` means for the learner and the instructor, for every report."""
    return {
        "namespace": "full sandbox (namespaces, a user of its own)",
        "user-namespace": "full sandbox (unprivileged user namespaces)",
        "unprivileged": "a user of its own and limits, but no namespaces: the network and the course's files "
        "were reachable",
        "limits": "limits only: the network and the course's files were reachable (this system allows no "
        "user namespaces; see How grading stays fair in the instructors' guide)"
        + (
            f"; this system lacks {system.summary()}, so every call runs in the sandbox's one process"
            if not system.FORKS
            else ""
        ),
    }[mode]


def candidates() -> list[str]:
    """The modes worth trying here, strongest first."""
    if sys.platform != "linux" or not system.SESSIONS or os.environ.get("AUTOGRADER_ISOLATION") == "limits":
        return ["limits"]
    have = {tool: shutil.which(tool) is not None for tool in ("unshare", "setpriv", "prlimit")}
    if not have["setpriv"]:
        return ["limits"]
    modes = ["namespace", "user-namespace", "unprivileged"] if os.geteuid() == 0 else ["user-namespace"]
    if not have["unshare"]:
        modes = [m for m in modes if m not in HIDES_FILES]
    if not have["prlimit"]:
        modes = [m for m in modes if m not in PROCESSES_INSIDE]
    return modes + ["limits"]


def strongest(failure: Callable[[str], str], memory_bytes: int) -> str:
    """The first of :func:`candidates` for which ``failure(mode)`` (a sandbox started in that mode)
    says nothing went wrong.

    Raises :class:`SandboxUnavailable` when not even ``limits`` works: grading would give every
    submission zero for the grader's own fault, so it must stop and say why instead.
    """
    failures = []
    for mode in candidates():
        problem = failure(mode)
        if not problem:
            return mode
        failures.append(f"{mode}: {problem}")
    raise SandboxUnavailable(
        "the grader's sandbox cannot start on this machine, so nothing was graded (no submission is at fault).\n"
        + "\n".join(f"  {line}" for line in failures)
        + f"\nCheck that `{sys.executable} -I -c 'import torch, numpy'` works; if torch needs more memory than the "
        f"limit ({memory_bytes / 2**30:.1f} GiB), raise it with --memory."
    )


def _drop(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]


def _python_in(work: Path) -> Path:
    """This environment's Python as seen through ``work/venv`` (where the namespace modes bind it)."""
    executable = Path(sys.executable)
    return work / "venv" / executable.relative_to(sys.prefix) if executable.is_relative_to(sys.prefix) else executable


def command(mode: str, work: Path, hide: list[Path], args: list[str], processes: int) -> list[str]:
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
            outer = ["unshare", "--user", "--map-root-user", *NAMESPACES, "--"]
            inner = [*LOCK_AND_DROP, "prlimit", f"--nproc={processes}", "--"]  # PROCESSES_INSIDE
        return [*outer, "sh", "-c", script, "sandbox", *inner, str(_python_in(work)), *args]
    if mode == "unprivileged":
        return _drop(sandbox_uid()) + [sys.executable, *args]
    return [sys.executable, *args]


def server_command(mode: str, work: Path, hide: list[Path], args: list[str]) -> list[str]:
    """The command that starts a warm sandbox (``serve.py``) in ``mode``: :func:`command`'s mount
    and network namespaces and covered folders, but no pid namespace, which the server's children
    make each for themselves. In the modes with a user of the sandbox's own, the server runs as
    one too (so that its Python finds the files a sandbox's user can read, as a fresh sandbox's
    does), keeping only what its children need to become theirs: :data:`SERVER_CAPABILITIES`."""
    python = str(_python_in(work)) if mode in HIDES_FILES else sys.executable
    if mode in OWN_UID:
        uid, caps = sandbox_uid(), SERVER_CAPABILITIES[mode]
        python_args = [*_drop(uid)[:-2], f"--inh-caps={caps}", f"--ambient-caps={caps}", "--", python, *args]
    else:
        python_args = [python, *args]
    if mode in HIDES_FILES:
        script = _hide_script(Path(sys.prefix).resolve(), outermost(hide)) + '\nexec "$@"'
        users = ["--user", "--map-root-user"] if mode == "user-namespace" else []
        return ["unshare", *users, "--mount", "--net", "--", "sh", "-c", script, "sandbox", *python_args]
    return python_args


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
