"""Hostile neighbours: a class of chapter 5 graded with ``python -m autograder grade-folder``, in each
sandbox mode this machine can run, as this user and, where the tests run as root, as a normal user
(``useradd``) whose own files are the ones attacked.

Some learners left their answers blank and added a cell that attacks the grader: it writes the
grader's ``~/.bashrc`` and IPython start-up folder, its environment (a ``.pth`` file that would run
at every start of its Python, torch's and numpy's ``__init__``), other learners' submitted notebooks
and an earlier assignment's gradebook; it reads a copy of the solutions left in a world-readable
folder outside the course, and the other learners' notebooks, to answer with them; it sends
``SIGKILL`` to every process it may (``kill(-1)``) and to the grader's process group; it fills
``/tmp`` and ``/dev/shm``; it fetches the answers from a TCP listener on 127.0.0.1 and sends a UDP
datagram to another. Every honest learner keeps full marks, every attacker gets 0, the gradebook is
written, no file of the grader's home, environment or class changes (their hashes before and
after), nothing is left in ``/tmp``, ``/dev/shm`` or the grader's temporary folder, and neither
listener heard from anyone.

The attacks are harmless where they land (a comment line, a file that says so), and the two that
could end other processes first check, from inside, that the sandbox keeps them from this test's
process and from the process above them: where it does not, they do nothing but raise, and the
report shows it. A forced ``landlock`` mode stands for Ubuntu 24.04 and Kubernetes pods (no
namespace can be made there), a forced ``bubblewrap`` mode for a kernel without Landlock.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pwd
import secrets
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy
import pytest
import torch

from autograder.chapters import CHAPTERS
from autograder.sandbox import modes
from course import paths

CHAPTER = "05_flash_attention"
FULL = sum(e.points for e in CHAPTERS[CHAPTER])
HONEST = ("honest_a", "honest_z")
ANSWERED = ("online_softmax_update", "blockwise_attention", "quiz_answers")
TRY = "def attempt(action):\n    try:\n        action()\n    except Exception:\n        pass\n"
# each attacker's added cell, formatted with the world's paths (see World.context)
ATTACKS = {
    "writes_home": TRY + "attempt(lambda: open({home!r} + '/.bashrc', 'a').write('\\n# a neighbour was here\\n'))\n"
    "attempt(lambda: os.makedirs({home!r} + '/.ipython/profile_default/startup', exist_ok=True))\n"
    "attempt(lambda: open({home!r} + '/.ipython/profile_default/startup/00-neighbour.py', 'w')"
    ".write('# a neighbour was here\\n'))\n",
    "writes_environment": TRY
    + "attempt(lambda: open({site!r} + '/neighbour.pth', 'w').write('# a neighbour was here\\n'))\n"
    "attempt(lambda: open({torch_init!r}, 'a').write('\\n# a neighbour was here\\n'))\n"
    "attempt(lambda: open({numpy_init!r}, 'a').write('\\n# a neighbour was here\\n'))\n",
    "writes_class_and_gradebook": TRY + "for learner in {honest!r}:\n"
    "    attempt(lambda: open({submissions!r} + f'/{{learner}}/{chapter}.ipynb', 'w').write('{{}}'))\n"
    "attempt(lambda: open({old_gradebook!r}, 'a').write('writes_class_and_gradebook,9999\\n'))\n",
    "reads_the_solutions": "import re\n"
    "try:\n    source = open({solutions!r}).read()\nexcept OSError:\n    source = ''\n"
    "for found in re.findall(r'^def (?:{answered})\\(.*?### END SOLUTION', source, re.S | re.M):\n"
    "    exec(found)\n",
    "reads_the_neighbours": "import json\n"
    "try:\n    cells = json.load(open({submissions!r} + '/{first_honest}/{chapter}.ipynb'))['cells']\n"
    "except OSError:\n    cells = []\n"
    "for cell in cells:\n"
    "    if cell.get('metadata', {{}}).get('nbgrader', {{}}).get('solution'):\n"
    "        exec(''.join(cell['source']))\n",
    "kills_everyone": "import os, signal\n"
    "for outside in (os.getppid(), {test_pid}):\n"
    "    if outside > 0:\n"
    "        try:\n            os.kill(outside, 0)\n        except OSError:\n            continue\n"
    "        raise RuntimeError(f'NOT CONTAINED: process {{outside}} could be signalled, nothing was killed')\n"
    "for target in (lambda: os.kill(-1, signal.SIGKILL), lambda: os.killpg({test_group}, signal.SIGKILL)):\n"
    "    try:\n        target()\n    except OSError:\n        pass\n",
    "fills_tmp": TRY + "for folder in ('/tmp', '/dev/shm'):\n"
    "    for i in range(8):\n"
    "        attempt(lambda: open(f'{{folder}}/{token}-{{i}}', 'wb').write(b'x' * 2**23))\n",
    "fetches_the_answers": TRY + "import socket\n"
    "def fetch():\n"
    "    with socket.create_connection(('127.0.0.1', {tcp_port}), timeout=5) as connection:\n"
    "        exec(connection.makefile().read(), globals())\n"
    "attempt(fetch)\n"
    "attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hello', ('127.0.0.1', {udp_port})))\n",
}
ATTACKS = {name: "import os\n" + source for name, source in ATTACKS.items()}


def _answers(solution: dict) -> str:
    """The solution's answer cells, as the listener hands them out."""
    return "\n".join(
        "".join(cell["source"]) for cell in solution["cells"] if cell["metadata"].get("nbgrader", {}).get("solution")
    )


class Listeners:
    """A TCP listener on 127.0.0.1 that hands out the answers, and a UDP socket beside it: each
    counts who reached it."""

    def __init__(self, answers: str):
        self.connections, self.datagrams = 0, 0
        outer = self

        class Hand(socketserver.StreamRequestHandler):
            def handle(self):
                outer.connections += 1
                self.wfile.write(answers.encode())

        self.tcp = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Hand)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.stop = threading.Event()
        for target in (self.tcp.serve_forever, self._count_datagrams):
            threading.Thread(target=target, daemon=True).start()

    def _count_datagrams(self):
        while not self.stop.is_set():
            try:
                self.udp.recv(64)
                self.datagrams += 1
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.tcp.shutdown()
        self.udp.close()


def _digest(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder``: its content's hash, or its listing's."""
    found = {}
    for path in sorted([folder, *folder.rglob("*")]):
        if path.is_symlink():
            found[str(path)] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[str(path)] = "dir " + " ".join(sorted(p.name for p in path.iterdir()))
        else:
            found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _leftovers(token: str) -> list[str]:
    return [str(p) for folder in (Path("/tmp"), Path("/dev/shm")) if folder.is_dir() for p in folder.glob(f"*{token}*")]


class World:
    """A grader's machine for one class: its home (with the course, a Python environment of its
    own, dotfiles, an earlier gradebook and the class's submissions), a copy of the solutions in a
    world-readable folder outside it, and a user (None: this process's)."""

    def __init__(self, root: Path, user: str | None, instructor_notebooks: dict[str, Path]):
        self.root, self.user, self.token = root, user, f"neighbour{secrets.token_hex(4)}"
        self.home = root / "home"
        self.course, self.venv = self.home / "course", self.home / "venv"
        self.submissions = self.home / "class" / "submissions"
        self.old_gradebook = self.home / "old-assignment" / "gradebook.csv"
        self.out, self.tmp = root / "feedback", root / "tmp"
        self.solutions = root / "opt" / "course" / "solutions" / f"{CHAPTER}.py"
        self._build(instructor_notebooks)

    def _build(self, instructor_notebooks: dict[str, Path]) -> None:
        for folder in (self.home, self.out, self.tmp, self.solutions.parent):
            folder.mkdir(parents=True)
        (self.home / ".bashrc").write_text("# the instructor's own\n")
        startup = self.home / ".ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True)
        (startup / "00-mine.py").write_text("# the instructor's own\n")
        self.old_gradebook.parent.mkdir()
        self.old_gradebook.write_text("learner,score\nhonest_a,12\n")
        shutil.copy(paths.SOLUTIONS / f"{CHAPTER}.py", self.solutions)
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=paths.ROOT, capture_output=True, check=True).stdout
        for name in tracked.decode().split("\0"):
            if name and (paths.ROOT / name).is_file():
                (self.course / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(paths.ROOT / name, self.course / name)
        python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        subprocess.run([str(python), "-m", "venv", "--without-pip", str(self.venv)], check=True)
        (self.site / "course-environment.pth").write_text(f"{Path(torch.__file__).parents[1]}\n")
        solution = json.loads(instructor_notebooks[CHAPTER].read_text())
        for learner in HONEST:
            (self.submissions / learner).mkdir(parents=True)
            (self.submissions / learner / f"{CHAPTER}.ipynb").write_text(json.dumps(solution))
        self.listeners = Listeners(_answers(solution))
        blank = json.loads((paths.NOTEBOOKS / f"{CHAPTER}.ipynb").read_text())
        for name, attack in ATTACKS.items():
            added = {"cell_type": "code", "id": "mine", "metadata": {}, "outputs": [], "execution_count": None}
            notebook = {**blank, "cells": [*blank["cells"], {**added, "source": attack.format(**self.context)}]}
            (self.submissions / name).mkdir()
            (self.submissions / name / f"{CHAPTER}.ipynb").write_text(json.dumps(notebook))
        for folder in (self.root, self.root / "opt", self.solutions.parents[1], self.solutions.parent):
            folder.chmod(0o755)
        if self.user:
            uid = pwd.getpwnam(self.user).pw_uid
            for path in [self.home, *self.home.rglob("*"), self.out, self.tmp]:
                os.chown(path, uid, uid, follow_symlinks=False)

    @property
    def site(self) -> Path:
        return next(self.venv.glob("lib/python3*/site-packages"))

    @property
    def context(self) -> dict:
        return {
            "home": str(self.home),
            "site": str(self.site),
            "torch_init": torch.__file__,
            "numpy_init": numpy.__file__,
            "submissions": str(self.submissions),
            "honest": list(HONEST),
            "first_honest": HONEST[0],
            "chapter": CHAPTER,
            "old_gradebook": str(self.old_gradebook),
            "solutions": str(self.solutions),
            "answered": "|".join(ANSWERED),
            "test_pid": os.getpid(),
            "test_group": os.getpgid(0),
            "token": self.token,
            "tcp_port": self.listeners.tcp.server_address[1],
            "udp_port": self.listeners.udp.getsockname()[1],
        }

    def watched(self) -> dict[str, str]:
        """What no submission may change: the home (the course, the environment, the dotfiles, the
        class, the earlier gradebook), the copy of the solutions, torch's and numpy's own files."""
        found = _digest(self.home) | _digest(self.solutions.parent)
        for init in (torch.__file__, numpy.__file__):
            found[init] = hashlib.sha256(Path(init).read_bytes()).hexdigest()
        found["site-packages"] = " ".join(sorted(p.name for p in Path(torch.__file__).parents[1].iterdir()))
        return found

    def grade(self, mode: str) -> subprocess.CompletedProcess:
        command = [str(self.venv / "bin" / "python"), "-m", "autograder", "grade-folder", str(self.submissions)]
        command += ["--out", str(self.out), "--seed", "5", "--chapter", CHAPTER, "--workers", "2"]
        command += ["--timeout", "300", "--call-timeout", "120"]
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "AUTOGRADER_ISOLATION": mode,
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",  # the grader's own imports leave nothing in the course either
            "MPLCONFIGDIR": str(self.root / "matplotlib"),
        }
        if self.user:
            command = as_user(self.user, command, self.root / "stage")
        return subprocess.run(command, cwd=self.course, env=env, capture_output=True, text=True, timeout=900)


def as_user(user: str, command: list[str], stage: Path) -> list[str]:
    """``command`` as ``user``, with no capability, in a mount namespace of its own where this
    Python's folders are reachable (a Python installed under root's home, mode 0700, is not): each
    folder above them that others cannot search is covered by an empty one that they can, with
    only those folders mounted in it again, from ``stage`` (the shell runs as root, then hands over)."""
    needed = [Path(p) for p in (sys.base_prefix, sys.prefix)]
    covers: dict[Path, list[Path]] = {}
    for path in needed:
        closed = [p for p in reversed(path.parents) if p.is_dir() and not p.stat().st_mode & 0o001]
        if closed:
            covers.setdefault(closed[0], []).append(path)
    lines = ["set -e", "mount --make-rprivate /", f'stage="{stage}"', 'mkdir -p "$stage"']
    for cover, inside in covers.items():
        for i, path in enumerate(inside):
            lines += [f'mkdir "$stage/{i}"', f'mount --bind "{path}" "$stage/{i}"']
        lines.append(f'mount -t tmpfs -o mode=755 none "{cover}"')
        for i, path in enumerate(inside):
            lines += [f'mkdir -p "{path}"', f'mount --move "$stage/{i}" "{path}"']
    uid = pwd.getpwnam(user).pw_uid
    lines.append(f'exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all -- "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines), "sh", *command]


def _modes_here() -> list[str]:
    found = []
    if shutil.which("bwrap") and modes.landlock_abi():
        found.append("bubblewrap+landlock")
    if modes.landlock_abi():
        found.append("landlock")
    if shutil.which("bwrap"):
        found.append("bubblewrap")
    return found


USERS = ["this user", "a normal user"]


@pytest.fixture(scope="module")
def normal_user(request):
    """A Unix user of this run, removed when the module is done (needs root, useradd, setpriv, unshare)."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("useradd", "setpriv", "unshare"))):
        pytest.skip("needs root with useradd, setpriv and unshare: the normal user is made for the test")
    name = f"grader-{os.getpid()}"
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
    assert made.returncode == 0
    request.addfinalizer(lambda: subprocess.run(["userdel", name], capture_output=True))
    return name


@pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap and Landlock are Linux's")
@pytest.mark.parametrize("who", USERS)
@pytest.mark.parametrize("mode", _modes_here())
def test_hostile_neighbours_change_nothing_outside_their_own_folders(mode, who, request, instructor_notebooks):
    user = request.getfixturevalue("normal_user") if who == "a normal user" else None
    root = Path(tempfile.mkdtemp(prefix="neighbours-"))
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    world = World(root, user, instructor_notebooks)
    try:
        before = world.watched()
        done = world.grade(mode)
        after = world.watched()
    finally:
        world.listeners.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"sandbox: {modes.describe(mode)}".split(";")[0] in done.stderr, done.stderr[-2000:]
    if mode in modes.WARM:  # each submission a child of the class's warm sandbox, none a new interpreter
        assert "fresh sandbox per submission" not in done.stderr, done.stderr[-2000:]
    with open(world.out / "gradebook.csv") as handle:
        scores = {row["learner"]: float(row["score"]) for row in csv.DictReader(handle)}
    reports = {p.name.split("__")[0]: json.loads(p.read_text()) for p in world.out.glob(f"*__{CHAPTER}.json")}
    assert set(scores) == {*HONEST, *ATTACKS}, scores
    assert {name: scores[name] for name in HONEST} == dict.fromkeys(HONEST, FULL), reports
    assert {name: scores[name] for name in ATTACKS} == dict.fromkeys(ATTACKS, 0), scores
    assert not [m for r in reports.values() for m in r["messages"] if "NOT CONTAINED" in m], reports["kills_everyone"]
    assert {path: digest for path, digest in after.items() if before.get(path) != digest} == {}
    assert _leftovers(world.token) == [] and list(world.tmp.iterdir()) == []
    assert (world.listeners.connections, world.listeners.datagrams) == (0, 0)
