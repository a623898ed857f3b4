"""Windows and macOS, as far as one Linux process can stand in for them: what each lacks is taken
away before anything of the course is imported, then a module or script runs as ``__main__``.

    python tests/_platforms.py windows -m autograder grade notebook.ipynb
    python tests/_platforms.py macos tests/_check_cells.py PLAN.json

What is taken away:

- both: ``/proc`` (``open``, ``os.scandir``, ``os.listdir`` and ``os.path`` find nothing there,
  except for psutil, which stands in for its own macOS and Windows backends), Landlock and the
  seccomp filter (``autograder.sandbox.system``), and the ``bwrap`` and ``sandbox-exec`` programs
  (so that macOS's Seatbelt profile is not tried: it cannot run here);
- macOS: psutil's proportional memory sizes (``pss``), which its macOS backend lacks;
- Windows: the modules ``resource``, ``fcntl``, ``termios``, ``pty``, ``tty``, ``pwd`` and ``grp``;
  ``os.fork``, sessions and process groups, user ids, ``os.sysconf``; ``signal.alarm``,
  ``signal.setitimer``, ``SIGALRM`` and ``SIGKILL``. The grader's sandboxes start under the same
  simulation (``sys.executable`` becomes a wrapper that runs this file first).

Not simulated: ``os.name``, ``sys.platform`` and the path separator stay Linux's, and so does
``subprocess`` (Windows' ``Popen`` rejects ``preexec_fn`` and ``pass_fds``: the sandbox passes
neither where the system lacks fork), ``select`` on pipes (Windows' works on sockets only: the
sandbox reads its streams with threads everywhere), and everything inside torch.
"""

from __future__ import annotations

import builtins
import io
import os
import runpy
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path

SYSTEMS = ("windows", "macos")
WINDOWS_MODULES = ("resource", "fcntl", "termios", "pty", "tty", "pwd", "grp")
WINDOWS_OS = (
    "fork",
    "forkpty",
    "setsid",
    "setpgid",
    "getpgid",
    "getsid",
    "killpg",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "sysconf",
)
WINDOWS_SIGNAL = ("alarm", "setitimer", "SIGALRM", "SIGKILL")
NO_PROGRAMS = ("bwrap", "sandbox-exec")


def _from_psutil() -> bool:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__", "").startswith("psutil")


def _in_proc(path) -> bool:
    try:
        text = os.fspath(path)
    except TypeError:
        return False
    text = text.decode() if isinstance(text, bytes) else str(text)
    return text == "/proc" or text.startswith("/proc/")


def _hide_proc() -> None:
    """``/proc`` as absent, for everything but psutil."""

    def refusing(original, absent):
        def wrapper(path, *args, **kwargs):
            if _in_proc(path) and not _from_psutil():
                return absent(path)
            return original(path, *args, **kwargs)

        return wrapper

    def raise_missing(path):
        raise FileNotFoundError(2, "No such file or directory (simulated: no /proc)", os.fspath(path))

    builtins.open = io.open = refusing(builtins.open, raise_missing)
    os.scandir = refusing(os.scandir, raise_missing)
    os.listdir = refusing(os.listdir, raise_missing)
    for name in ("exists", "isdir", "isfile"):
        setattr(os.path, name, refusing(getattr(os.path, name), lambda path: False))


def _no_programs() -> None:
    which = shutil.which

    def without(name, *args, **kwargs):
        return None if os.path.basename(name) in NO_PROGRAMS else which(name, *args, **kwargs)

    shutil.which = without


def _macos() -> None:
    import psutil

    full = psutil.Process.memory_full_info

    def without_pss(self):
        info = full(self)
        return _MacFull(info.rss, info.vms, info.uss)

    from collections import namedtuple

    _MacFull = namedtuple("pfullmem", ["rss", "vms", "uss"])
    psutil.Process.memory_full_info = without_pss


def _windows() -> None:
    # Linux's asyncio (sys.platform stays Linux's: Windows has its own event loops) reads os.sysconf at
    # import from Python 3.13 on: imported before sysconf goes, as Windows' asyncio needs none
    import asyncio  # noqa: F401

    import psutil  # its Linux backend stands in for its Windows one, which needs none of what goes

    kill_signal = signal.SIGKILL
    psutil.Process.kill = lambda self: self.send_signal(kill_signal)  # psutil's Windows kill needs no SIGKILL
    for name in WINDOWS_MODULES:
        sys.modules[name] = None  # import fails ("import of resource halted"), find_spec finds nothing
    for name in WINDOWS_OS:
        if hasattr(os, name):
            delattr(os, name)
    for name in WINDOWS_SIGNAL:
        if hasattr(signal, name):
            delattr(signal, name)
    sys.executable = str(_wrapper("windows"))


def _wrapper(system: str) -> Path:
    """An executable that starts this interpreter with the simulation, for the sandboxes."""
    folder = Path(tempfile.mkdtemp(prefix=f"simulated-{system}-"))
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{Path(__file__).resolve()}" {system} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    folder.chmod(0o755)
    return wrapper


def _no_linux_confinement() -> None:
    from autograder.sandbox import system  # found once, from what the simulation left: then taken away

    system.LANDLOCK_ABI, system.REFUSES_SOCKETS = 0, False


def simulate(system: str) -> None:
    """Take away what ``system`` lacks, in this process."""
    if system not in SYSTEMS:
        raise SystemExit(f"simulate one of {', '.join(SYSTEMS)}, not {system!r}")
    _no_programs()
    _hide_proc()
    if system == "macos":
        _macos()
    else:
        _windows()
    _no_linux_confinement()


def main(argv: list[str]) -> None:
    system, rest = argv[0], argv[1:]
    if rest[:1] == ["-I"]:  # how the sandbox is started: python -I inside.py ...
        rest = rest[1:]
    simulate(system)
    if rest[:1] == ["-m"]:
        sys.argv = [rest[1], *rest[2:]]
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = rest
        sys.path.insert(0, str(Path(rest[0]).resolve().parent))
        runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    if sys.path and sys.path[0] == str(Path(__file__).resolve().parent):
        sys.path.pop(0)  # this folder: the tests' own modules stay out of the simulated program's way
    main(sys.argv[1:])
