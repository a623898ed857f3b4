"""How a sandbox is isolated: the modes, what a submission may reach in each, the command that
starts Python in each, and which mode is chosen on this machine.

Every mode but ``limits`` is an allowlist. A submission reads the interpreter, the libraries it
imports and the system's shared libraries (:func:`readable`), read-only; writes its own work folder
and nothing else; and reaches no network. Nothing else of the file system is there: no home, no
other copy of the course, nothing under ``/opt``, ``/srv`` or ``/home`` that is not the interpreter.

- ``bubblewrap+landlock`` (Linux with ``bwrap`` where a namespace can be made): bubblewrap mounts
  only the allowlist, read-only, with a private ``/tmp``, ``/dev/shm`` and a minimal ``/dev``, in
  new network, pid, IPC and user namespaces (``--unshare-all``); then each sandbox's process
  confines itself with Landlock to its own work folder (:mod:`autograder.sandbox.confine`), so that
  children of one warm sandbox reach neither each other's folders nor, where the kernel scopes
  them (ABI 6), each other's processes;
- ``bubblewrap``: the same, where the kernel has no Landlock: a new interpreter and a new bwrap per
  submission, which mounts only its own work folder;
- ``landlock`` (Linux where no namespace can be made: Ubuntu 24.04's AppArmor, a container's
  seccomp profile; ``AUTOGRADER_ISOLATION=landlock`` forces it): the same allowlist through Landlock
  alone; TCP is refused from ABI 4, signals and abstract sockets to other processes from ABI 6;
- ``sandbox-exec`` (macOS): a Seatbelt profile per submission: no writes outside its work folder,
  no network, no reading of ``/Users``, ``/Volumes`` or the temporary folders but the interpreter's
  and its own; no signals outside it;
- ``limits``: a plain process with the limits of :mod:`autograder.sandbox.limits` (Windows, and
  wherever nothing else starts): nothing is hidden, and every report says so.

As root, the sandbox's processes run as a user of their own in the bubblewrap modes, and in the
``landlock`` mode where every user can read the interpreter (:func:`own_user`), so that a process
limit counts theirs alone and no signal reaches another user's process.

Not handled: UDP and named Unix sockets in the ``landlock`` mode (no Landlock ABI covers them yet);
on macOS, services reached through Mach messages; side channels between submissions graded at the
same time (timing), which cannot change a score.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import site
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from autograder.sandbox import system

MODES = ("bubblewrap+landlock", "bubblewrap", "landlock", "sandbox-exec", "limits")
HIDES_FILES = MODES[:-1]  # the allowlists
BUBBLEWRAP = ("bubblewrap+landlock", "bubblewrap")
LANDLOCK = ("bubblewrap+landlock", "landlock")
WARM = ("bubblewrap+landlock", "landlock", "limits")  # where each child of a warm sandbox can be kept to itself
FIRST_SANDBOX_UID = 200_000  # unused by any account: as root, each sandbox gets its own
# what the system's programs and shared libraries need, read-only, where they exist
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")
PRIVATE_TMP_BYTES = 16 * 2**20  # bubblewrap's /tmp and /dev/shm, which Landlock keeps a submission from writing
_next_uid = itertools.count()
_uid_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start on this machine: the grader's own failure, never the learner's."""


def sandbox_uid() -> int:
    """A user id for one sandbox, distinct from every other sandbox of this grader run."""
    with _uid_lock:
        return FIRST_SANDBOX_UID + (os.getpid() % 1000) * 1000 + next(_next_uid) % 1000


def landlock_abi() -> int:
    """The Landlock ABI the sandbox uses: this kernel's (``system.LANDLOCK_ABI``), at most
    ``AUTOGRADER_LANDLOCK_ABI`` where set (to see what an older kernel's sandbox contains)."""
    cap = os.environ.get("AUTOGRADER_LANDLOCK_ABI", "")
    return min(system.LANDLOCK_ABI, int(cap)) if cap.isdigit() else system.LANDLOCK_ABI


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@functools.cache
def readable() -> tuple[str, ...]:
    """What a submission may read: the interpreter, the folders its imports come from (this
    environment's prefixes, and every ``site-packages`` or ``dist-packages`` on ``sys.path``, such as
    one a ``.pth`` file adds) and the system's shared libraries, as the paths that exist here, each
    as Python names it and as it resolves (a symlink at the top, such as ``/lib`` on a merged
    ``/usr``, stays one). The course's own folder is never among them, though an editable install
    puts it on ``sys.path``, nor anything else there (``PYTHONPATH``, the working folder)."""
    prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    prefixes += [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    prefixes.append(str(Path(sys.executable).resolve().parent.parent))
    found = [os.path.abspath(p) for p in prefixes] + [os.path.realpath(p) for p in prefixes]
    found += [p for p in (*SYSTEM, *SYSTEM_FILES)]
    return tuple(str(p) for p in outermost(p for p in found if os.path.lexists(p)))


def exposed(hidden) -> list[str]:
    """The folders of ``hidden`` (the course, the class's) that lie inside what every submission may
    read (:func:`readable`): none, unless the environment or the interpreter holds one of them."""
    allowed = [Path(p).resolve() for p in readable()]
    return [str(h) for h in hidden if any(Path(h).resolve().is_relative_to(folder) for folder in allowed)]


def own_user(mode: str) -> bool:
    """Whether a sandbox in ``mode`` runs as a user of its own: as root, where it can still read
    the interpreter as that user (bubblewrap's mounts make every folder above them reachable)."""
    if not is_root() or mode not in (*BUBBLEWRAP, "landlock"):
        return False
    return mode in BUBBLEWRAP or all(_reachable_by_all(Path(p)) for p in readable())


def _reachable_by_all(path: Path) -> bool:
    """Whether any user can read ``path``: readable by others, and every folder above it searchable."""
    return bool(path.stat().st_mode & 0o004) and all(p.stat().st_mode & 0o001 for p in path.parents)


def policy(mode: str, work: Path, processes: int, uid: int | None) -> dict:
    """What a sandbox's own process does to itself before any learner's code runs
    (:func:`autograder.sandbox.confine.confine`): a user of its own (``uid``), the process limit
    once its processes count alone, Landlock's allowlist, no new sockets (seccomp); and, for a warm
    sandbox's child in the bubblewrap modes, user and pid namespaces of its own (``namespaces``)."""
    if mode not in (*BUBBLEWRAP, "landlock"):
        return {}
    abi = landlock_abi() if mode in LANDLOCK else 0
    alone = uid is not None or mode in BUBBLEWRAP
    return {
        "uid": uid,
        "processes": processes if alone else None,
        "landlock": abi,
        "read": [*readable(), "/proc", "/sys/devices/system/cpu", *DEVICES, str(work)],
        "write": [str(work), *WRITABLE_DEVICES],
        "namespaces": mode in BUBBLEWRAP,
        "sockets": False if system.REFUSES_SOCKETS else None,
    }


def describe(mode: str) -> str:
    """What ``mode`` contained and what it did not, in a line for every report."""
    abi = landlock_abi()
    user = ", a user of its own" if own_user(mode) else ""
    files = "nothing of the machine's files but the interpreter's and its own folder"
    landlock = f"Landlock ABI {abi} (writes only in its own folder" + (", no TCP" if abi >= 4 else "")
    landlock += (", no signal or abstract socket outside it" if abi >= 6 else "") + ")"
    open_ = []
    sockets = ", no sockets (seccomp)" if system.REFUSES_SOCKETS else ""
    if mode == "landlock":
        open_ += [] if system.REFUSES_SOCKETS else ["UDP and named Unix sockets"] + ([] if abi >= 4 else ["TCP"])
        whose = "every process of root's" if is_root() else "the grader's processes"
        open_ += [] if abi >= 6 or own_user(mode) else [f"signals to {whose} (Landlock before ABI 6)"]
    found = {
        "bubblewrap+landlock": f"bubblewrap ({files}; no network; private /tmp; its own processes only) + "
        f"{landlock}{sockets}",
        "bubblewrap": f"bubblewrap ({files}; no network; private /tmp; its own processes only; a new one per "
        "submission: this kernel has no Landlock)",
        "landlock": f"{landlock}{sockets}: {files}",
        "sandbox-exec": "sandbox-exec (a Seatbelt profile: no network, no writes outside its own folder, no "
        "signal to other processes, nothing of /Users, /Volumes or the temporary folders but its own)",
        "limits": "limits only: the network and the machine's files were reachable (no sandbox tool works here; "
        "see `python -m autograder doctor`)"
        + (
            f"; this system lacks {system.summary()}, so every call runs in the sandbox's one process"
            if not system.FORKS
            else ""
        ),
    }[mode] + user
    if mode == "sandbox-exec":
        open_ += ["macOS services reached by Mach messages"]
    return found + (f"; not contained: {', '.join(open_)}" if open_ else "")


def candidates() -> list[str]:
    """The modes worth trying here, strongest first (``AUTOGRADER_ISOLATION`` names one alone)."""
    forced = os.environ.get("AUTOGRADER_ISOLATION")
    if forced:
        if forced not in MODES:
            raise SandboxUnavailable(f"AUTOGRADER_ISOLATION={forced} is not one of the modes: {', '.join(MODES)}")
        return [forced]
    if not system.SESSIONS:
        return ["limits"]
    if sys.platform == "darwin":
        return (["sandbox-exec"] if shutil.which("sandbox-exec") else []) + ["limits"]
    if sys.platform != "linux":
        return ["limits"]
    abi, found = landlock_abi(), []
    if shutil.which("bwrap"):
        found.append("bubblewrap+landlock" if abi else "bubblewrap")
    if abi:
        found.append("landlock")
    return found + ["limits"]


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
        f"limit ({memory_bytes / 2**30:.1f} GiB), raise it with --memory. `python -m autograder doctor` says "
        "what this machine allows."
    )


def bubblewrap(writable: Path, chdir: Path) -> list[str]:
    """``bwrap`` and its options: the allowlist read-only, ``writable`` read-write, new namespaces.
    As root, no user namespace (the sandbox's process keeps the two capabilities it needs to become
    a user of its own, then drops them); as any other user, a user namespace of its own."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--as-pid-1"]  # no signal from inside ends pid 1
    if is_root():
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for private in ("/tmp", "/dev/shm"):
        args += ["--size", str(PRIVATE_TMP_BYTES), "--tmpfs", private]
    mounted = [*readable(), str(writable)]
    above = sorted({str(p) for path in mounted for p in Path(path).parents if p != Path("/")}, key=len)
    for folder in above:  # searchable by the sandbox's own user, whatever the folder's mode outside
        args += ["--perms", "0755", "--dir", folder]
    for path in readable():
        if os.path.islink(path):  # /lib -> usr/lib on a merged /usr
            args += ["--symlink", os.readlink(path), path]
        else:
            args += ["--ro-bind", path, path]
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    args += ["--bind", str(writable), str(writable), "--chdir", str(chdir)]
    return args


def seatbelt_profile(work: Path) -> str:
    """The sandbox-exec profile of one sandbox (macOS): later rules win over earlier ones."""

    def paths(kind: str, found) -> str:
        return " ".join(f'({kind} "{Path(p).resolve()}")' for p in found)

    hidden = ["/Users", "/Volumes", "/private/tmp", "/private/var/folders"]
    return "\n".join(
        [
            "(version 1)",
            "(allow default)",
            "(deny network*)",
            "(deny file-write*)",
            f"(allow file-write* {paths('subpath', [work])} {paths('literal', WRITABLE_DEVICES)})",
            f"(deny file-read* {paths('subpath', hidden)})",
            f"(allow file-read* {paths('subpath', [*readable(), work])})",
            "(deny signal)",
            "(allow signal (target same-sandbox))",
        ]
    )


def command(mode: str, work: Path, args: list[str]) -> list[str]:
    """The command that runs ``python args`` in ``mode`` for a new interpreter's sandbox, from
    ``work`` (its process confines itself as ``policy`` says: ``inside.main``)."""
    python = [sys.executable, *args]
    if mode in BUBBLEWRAP:
        return [*bubblewrap(work, work), "--", *python]
    if mode == "sandbox-exec":
        return ["sandbox-exec", "-p", seatbelt_profile(work), *python]
    return python


def server_command(mode: str, jobs: Path, args: list[str]) -> list[str]:
    """The command that starts a warm sandbox (``serve.py``) in ``mode``: in the bubblewrap modes,
    inside bubblewrap with the class's jobs folder writable (each child keeps itself to its own
    folder in it); elsewhere a plain interpreter, which confines itself once its imports are done."""
    python = [sys.executable, *args]
    if mode in BUBBLEWRAP:
        return [*bubblewrap(jobs, jobs), "--", *python]
    return python


def outermost(folders) -> list[Path]:
    """The folders not inside another one of them."""
    resolved = sorted({Path(f) for f in folders}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for folder in resolved:
        if not any(folder.is_relative_to(outer) for outer in kept):
            kept.append(folder)
    return kept
