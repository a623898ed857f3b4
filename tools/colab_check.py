"""``make colab-check`` (``python tools/colab_check.py``): the course in a stand-in for Colab's CPU runtime.

Colab runs the course on its own packages, which are not the course's: Python 3.13, IPython 7.34,
ipywidgets 7.7.1, torch 2.11, numpy 2.1, transformers 5.15 (``data/colab/pip-freeze.txt``, Colab's
own list, with its date and commit). This command builds an environment from that list and runs the
course in it as a learner does in Colab:

1. **The runtime**: a virtual environment (``.colab-runtime/``, ``COLAB_RUNTIME`` moves it) of Python
   3.13, found by a rule it prints: ``COLAB_PYTHON`` when set, else the first ``python3.13`` on
   ``PATH`` that runs, else the newest 3.13 under pyenv's ``versions/`` (``PYENV_ROOT``, else
   ``~/.pyenv``). Colab's pip first, then torch and its requirements, then every other package of
   the list at its version with ``--no-deps``, less :data:`LEFT_OUT` (what PyPI cannot give, each
   with why). torch, torchvision, torchaudio and torchcodec come from PyTorch's CPU index in Colab;
   here they come from PyPI at the same versions, which on Linux is the CUDA build (it runs on the
   CPU), with the CUDA libraries it pins (the list's nvidia-nccl-cu13 gives way to torch's). About
   13 GB installed, built once (26 minutes on 2 busy cores); each step below starts from it again
   (:meth:`Runtime.reset`: what a step installed is uninstalled, what it changed is put back), as
   each Colab notebook starts on a fresh machine.
   ``google.colab`` is a stand-in module (Colab's own package is not on PyPI), imported when the
   kernel starts, as Colab's kernel has it; its ``output.enable_custom_widget_manager`` marks the
   widget outputs as Colab's does, so that the report says whether any output asked for that manager.
2. **The Colab cell**, exactly as the notebooks carry it, with two strings replaced: the
   repository's address by a git repository holding this working tree as git sees it (tracked and
   untracked files, not the ignored ones), and ``/content`` by a temporary folder. Measured: its
   time, which packages it added, changed or removed (torch among them or not), and whether the
   kernel needs a restart (it does when the cell changed a package Colab ships: a running kernel
   may hold the old one).
3. **Every chapter**, in a fresh runtime each: the instructor's notebook (every check ``ok``, no
   error) and the student copy (only its check cells fail, each with an ``AssertionError``), both
   headless in Colab's kernel with the Colab cell first, and the quiz's fallback (the questions as
   HTML and text, for front ends without widgets) in both. Chapter 8 runs the lines that
   ``course.pretrained.COLAB_INSTALL`` gives (the README quotes them) after the Colab cell.
4. **The widgets**: every control of every chapter's widgets moved under Colab's ipywidgets and
   IPython (``tests/_widget_driver.py``), every quiz answered, and the widget models listed: those
   outside ipywidgets' own need Colab's custom widget manager.

It prints a table (step, result, seconds, detail), writes it to ``data/colab_check.json`` (after
every step, so that a stopped run keeps its rows, with ``finished`` false), keeps the
executed notebooks in ``test-artifacts/colab-check/`` and exits 1 when anything failed.
``--chapters 01_prefill_decode,08_in_practice`` (``make colab-check CHAPTERS=...``) runs some
chapters only.

Not handled: Colab's GPU runtime (``make gpu-check`` covers the CUDA path), its front end (the
widgets' callbacks run in the kernel as a front end's messages would call them; the browser test
draws them in JupyterLab), the learners' copy's notebooks (the same cell, another address),
Python 3.13.15 itself where the machine has another 3.13 (the report names the one used), and the
upload-a-zip path of the Colab cell, and Windows (the runtime is built the Linux and macOS way).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import _row, table  # noqa: E402 (make gpu-check's rows and table: check, result, seconds, detail)

FREEZE = ROOT / "data" / "colab" / "pip-freeze.txt"
REPORT = ROOT / "data" / "colab_check.json"
ARTIFACTS = ROOT / "test-artifacts" / "colab-check"  # the executed notebooks (ignored by git)
PYTHON_VERSION = "3.13"
KERNEL = "colab-standin"
CONTENT = "/content"  # Colab's working folder, which the Colab cell names
# What PyPI cannot give for Python 3.13 on Linux x86_64 (found by installing the list here), and why.
LEFT_OUT = {
    "google-colab": "Colab's own package (file:///colabtools), not on PyPI: a stand-in module gives what the "
    "Colab cell uses (google.colab in sys.modules, output.enable_custom_widget_manager)",
    "jupyter-kernel-gateway": "Colab's fork, from git: it serves Colab's front end, which is not run here",
    "en-core-web-sm": "a spaCy model from GitHub's release pages, not PyPI",
    "python-apt": "Ubuntu's apt bindings (version 0.0.0 is the system's), not on PyPI",
    "pygobject": "no wheel; its build needs GObject introspection's C library, which this machine lacks",
    "pycairo": "no wheel; its build needs cairo's C library, which this machine lacks",
    "dbus-python": "no wheel; its build needs D-Bus's C library, which this machine lacks",
    "gdal": "no wheel; its build needs GDAL's C library (gdal-config), which this machine lacks",
    "rpy2": "no wheel; its build needs R, which this machine lacks",
    "cyipopt": "no wheel; its build needs the Ipopt C library, which this machine lacks",
    # PyPI gives these two, at a cost nothing of the course's needs: left out by choice
    "dlib": "no wheel; a C++ build of many minutes on 2 cores (not tried), and the course never imports it",
    "pyspark": "no wheel; a 300 MB source archive, and the course never imports it",
}
PYTORCH_INDEX = "https://download.pytorch.org/whl/"  # Colab's torch builds come from there; PyPI gives ours


# --- the interpreter ------------------------------------------------------------------------------


def _version(python: str) -> str | None:
    """``python``'s version (``3.13.0``), or None when it does not run (a pyenv shim without it)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def find_python(environ: dict | None = None) -> tuple[str, str, str]:
    """(interpreter, its version, how it was found), by the rule of the module's docstring; raises
    SystemExit saying what to do when there is none."""
    environ = os.environ if environ is None else environ
    chosen = environ.get("COLAB_PYTHON")
    if chosen:
        version = _version(chosen)
        if version is None:
            raise SystemExit(f"COLAB_PYTHON={chosen} does not run")
        return chosen, version, "COLAB_PYTHON"
    for folder in environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / f"python{PYTHON_VERSION}"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            version = _version(str(candidate))
            if version and version.startswith(PYTHON_VERSION + "."):
                return str(candidate), version, f"python{PYTHON_VERSION} on PATH"
    pyenv = Path(environ.get("PYENV_ROOT") or Path(environ.get("HOME", "~")).expanduser() / ".pyenv") / "versions"
    found = []
    for folder in pyenv.glob(f"{PYTHON_VERSION}.*"):
        parts = folder.name.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and (folder / "bin" / "python3").is_file():
            found.append((tuple(map(int, parts)), folder / "bin" / "python3"))
    if found:
        python = str(max(found)[1])
        return python, _version(python) or max(found)[0], f"the newest {PYTHON_VERSION} under {pyenv}"
    raise SystemExit(
        f"no Python {PYTHON_VERSION}, which Colab runs: install it (python.org, Homebrew, `pyenv install "
        f"{PYTHON_VERSION}`, or your system's python{PYTHON_VERSION} package), or name one: "
        "COLAB_PYTHON=/path/to/python"
    )


# --- Colab's list of packages ----------------------------------------------------------------------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def header(text: str) -> dict[str, str]:
    """The ``# key: value`` lines at the top of the list: where it comes from (source, commit, date, python)."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"# (source|commit|date|python): (.*)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def plan(text: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Colab's list as (requirements to install, replaced: name -> what is installed instead,
    left out: name -> why). Every package of the list is in one of the three (a replaced one is in
    the first too where the replacement is installed by the list's name)."""
    install, replaced, left_out = [], {}, {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = canonical(re.split(r"\s*(?:==| @ )", line)[0])
        if name in LEFT_OUT:
            left_out[name] = LEFT_OUT[name]
        elif name.startswith("nvidia-"):  # Colab's CPU torch needs none; the list's serve its other packages
            replaced[name] = f"{name} at the version PyPI's torch requires, not the list's {line.split('==')[-1]}"
        elif " @ " in line:
            url = line.split(" @ ", 1)[1]
            wheel = re.search(r"/[^/]+?-([0-9][^-]*?)(?:%2B|\+)[a-z0-9]+-cp", url)
            if not (url.startswith(PYTORCH_INDEX) and wheel):
                raise SystemExit(f"{FREEZE.name}: no rule for {line!r}; add it to LEFT_OUT with why")
            install.append(f"{name}=={wheel.group(1)}")
            replaced[name] = f"{name}=={wheel.group(1)} from PyPI (Colab's is PyTorch's CPU build)"
        else:
            install.append(line)
    return install, replaced, left_out


# --- the runtime -------------------------------------------------------------------------------------


class Runtime:
    """The stand-in's environment: ``folder/venv`` built from Colab's list, and the list of what it
    held when built (``image.json``), which :meth:`reset` returns it to."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.venv = folder / "venv"
        self.python = self.venv / "bin" / "python"
        self.image = folder / "image.json"
        self.stamp = folder / "built-from.json"

    def pip(self, *args: str, quiet: bool = False) -> subprocess.CompletedProcess:
        command = [str(self.python), "-m", "pip", *args]
        print("+ pip", " ".join(args)[:150], flush=True)
        done = subprocess.run(command, capture_output=quiet, text=True, stdin=subprocess.DEVNULL)
        if done.returncode:
            raise SystemExit(f"this step failed (exit code {done.returncode}): pip {' '.join(args)[:300]}")
        return done

    def packages(self) -> dict[str, str]:
        """Installed distributions, canonical name -> version."""
        listed = self.pip("list", "--format=json", "--disable-pip-version-check", quiet=True).stdout
        return {canonical(p["name"]): p["version"] for p in json.loads(listed)}

    def build(self, python: str, text: str) -> None:
        """Create the environment from Colab's list, unless it was built from this list and interpreter."""
        install, _, _ = plan(text)
        wanted = {"python": python, "list": text, "left_out": sorted(LEFT_OUT)}
        if self.stamp.exists() and json.loads(self.stamp.read_text()) == wanted and self.image.exists():
            return
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        print(f"building Colab's runtime in {self.folder} (once: a few GB to download)", flush=True)
        subprocess.run([python, "-m", "venv", str(self.venv)], check=True)
        by_name = {canonical(re.split(r"==", r)[0]): r for r in install}
        # torch with its requirements (PyPI's build needs CUDA's libraries), at Colab's versions where
        # listed, CUDA's aside: PyPI's torch pins its own (the list's nvidia-nccl-cu13 is another)
        pins = self.folder / "colab-pins.txt"
        pins.write_text("\n".join(r for name, r in by_name.items() if not name.startswith("nvidia-")) + "\n")
        self.pip("install", "-q", by_name.pop("pip"))  # Colab's pip installs the rest, and runs %pip
        self.pip("install", "-q", by_name.pop("torch"), "-c", str(pins))
        rest = self.folder / "colab-rest.txt"
        rest.write_text("\n".join(by_name.values()) + "\n")
        self.pip("install", "-q", "--no-deps", "--prefer-binary", "-r", str(rest))
        self._install_google_colab()
        self.image.write_text(json.dumps(self.packages(), indent=0, sort_keys=True))
        self.stamp.write_text(json.dumps(wanted))

    def _install_google_colab(self) -> None:
        """The stand-in ``google.colab`` in the environment's site-packages, and a startup file that
        imports it in every kernel (Colab's kernel is ``google.colab``'s)."""
        site = Path(
            subprocess.run(
                [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        package = site / "google" / "colab"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(GOOGLE_COLAB)
        (package / "output.py").write_text(GOOGLE_COLAB_OUTPUT)
        startup = self.folder / "ipython" / "profile_default" / "startup"
        startup.mkdir(parents=True, exist_ok=True)
        (startup / "00-colab.py").write_text("import google.colab  # as in Colab's kernel\n")

    def reset(self) -> None:
        """Back to the environment as built: what was installed since is uninstalled, what changed is
        installed again at its version."""
        image = json.loads(self.image.read_text())
        now = self.packages()
        extra = sorted(set(now) - set(image))
        changed = sorted(name for name in image if now.get(name) != image[name])
        if extra:
            self.pip("uninstall", "-q", "-y", *extra)
        if changed:
            self.pip("install", "-q", "--no-deps", *(f"{name}=={image[name]}" for name in changed))

    def kernel_env(self, cache: Path) -> dict[str, str]:
        """The kernel's environment: this runtime's, with nothing of the course's own environment."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env.get("PATH", "")])
        env["IPYTHONDIR"] = str(self.folder / "ipython")
        env["COURSE_CACHE"] = str(cache)  # chapter 8 converts its model afresh, as on a new Colab machine
        env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # Python 3.13's frozen modules: debugpy's note at start
        return env

    def kernelspec(self, jupyter_path: Path) -> None:
        """Register the runtime's kernel where this process's Jupyter looks (``JUPYTER_PATH``)."""
        folder = jupyter_path / "kernels" / KERNEL
        folder.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": [str(self.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (Colab stand-in)",
            "language": "python",
        }
        (folder / "kernel.json").write_text(json.dumps(spec))
        os.environ["JUPYTER_PATH"] = os.pathsep.join([str(jupyter_path), os.environ.get("JUPYTER_PATH", "")])


GOOGLE_COLAB = '''"""A stand-in for Colab's ``google.colab`` (make colab-check): what the Colab cell uses."""
'''
GOOGLE_COLAB_OUTPUT = '''"""A stand-in for ``google.colab.output``: the custom widget manager's switch. As
Colab's does, it registers a display hook that marks every widget output with the manager's
address; the check reads that mark to tell whether a cell turned the manager on."""

import IPython

_URL = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/manager.min.js"
_WIDGET = "application/vnd.jupyter.widget-view+json"
_installed = None


def _mark(message):
    content = message.get("content") or {}
    if _installed and _WIDGET in content.get("data", {}):
        content.setdefault("metadata", {}).setdefault(_WIDGET, {})["colab"] = {
            "custom_widget_manager": {"url": _installed}
        }
    return message


def enable_custom_widget_manager(*args, **kwargs):
    global _installed
    if not _installed:
        IPython.get_ipython().display_pub.register_hook(_mark)
    _installed = _URL


def disable_custom_widget_manager():
    global _installed
    if _installed:
        IPython.get_ipython().display_pub.unregister_hook(_mark)
    _installed = None
'''


# --- the course, as the Colab cell fetches it --------------------------------------------------------


def snapshot(folder: Path, root: Path = ROOT) -> str:
    """A bare git repository in ``folder`` whose branch ``main`` holds the working tree of ``root`` as
    git sees it (tracked files as they are now, untracked files git does not ignore); its ``file://``
    address."""
    index = folder / "index"
    env = {
        **os.environ,
        "GIT_INDEX_FILE": str(index),
        "GIT_AUTHOR_NAME": "colab-check",
        "GIT_AUTHOR_EMAIL": "colab-check@localhost",
        "GIT_COMMITTER_NAME": "colab-check",
        "GIT_COMMITTER_EMAIL": "colab-check@localhost",
    }

    def git(*args: str, cwd: Path = root) -> str:
        return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout

    git("add", "-A")
    tree = git("write-tree").strip()
    commit = git("commit-tree", tree, "-m", "the working tree, for make colab-check").strip()
    bare = folder / "course.git"
    subprocess.run(["git", "init", "-q", "--bare", "--initial-branch=main", str(bare)], check=True)
    git("push", "-q", str(bare), f"{commit}:refs/heads/main")
    return f"file://{bare}"


def in_standin(source: str, repository: str, content: Path) -> str:
    """The Colab cell's ``source`` with the repository's address and ``/content`` replaced."""
    from autograder import colab

    if colab.repository() not in source or CONTENT not in source:
        raise SystemExit("the notebook's first cell is not the Colab cell of autograder/colab.py: make release")
    return source.replace(colab.repository(), repository).replace(CONTENT, str(content))


def colab_notebook(notebook, repository: str, content: Path, after: list[str] = ()):
    """``notebook`` (nbformat) as the stand-in runs it: its Colab cell pointed at the snapshot and at
    ``content``, and ``after`` (cells' sources) inserted after it."""
    import nbformat

    from autograder import colab

    cells = notebook.cells
    first = next(i for i, c in enumerate(cells) if colab.TAG in c.metadata.get("tags", []))
    cells[first].source = in_standin(cells[first].source, repository, content)
    for offset, source in enumerate(after, start=1):
        lines = source.replace(CONTENT, str(content))
        cells.insert(first + offset, nbformat.v4.new_code_cell(lines, metadata={"tags": ["colab-standin"]}))
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    return notebook


# --- what a run shows -------------------------------------------------------------------------------


def outputs(executed: dict):
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            yield index, cell, out


def printed(executed: dict) -> str:
    return "".join("".join(out.get("text", "")) for _, _, out in outputs(executed))


def errors(executed: dict) -> list[tuple[int, list[str], str, str]]:
    """(cell, tags, error name, its message) of every error."""
    return [
        (i, cell.get("metadata", {}).get("tags", []), out["ename"], out.get("evalue", ""))
        for i, cell, out in outputs(executed)
        if out.get("output_type") == "error"
    ]


def quiz_fallback(executed: dict) -> str | None:
    """What is wrong with the quiz's display, or None: the widget with the questions as text and HTML."""
    shown = [
        out.get("data", {})
        for _, cell, out in outputs(executed)
        if "quiz.show(" in "".join(cell.get("source", ""))
        and "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]
    if not shown:
        return "the quiz shows no widget"
    text = "".join(shown[0].get("text/plain", ""))
    if not text.startswith("Quiz:") or "<" not in "".join(shown[0].get("text/html", "")):
        return "the quiz's text or HTML is missing"
    return None


def custom_manager_marks(executed: dict) -> int:
    """Widget outputs marked for Colab's custom widget manager."""
    return sum(
        "colab" in out.get("metadata", {}).get("application/vnd.jupyter.widget-view+json", {})
        for _, _, out in outputs(executed)
    )


def cell_seconds(executed: dict, tag: str) -> float:
    return sum(
        cell.get("metadata", {}).get("papermill", {}).get("duration") or 0.0
        for cell in executed["cells"]
        if tag in cell.get("metadata", {}).get("tags", [])
    )


def pip_complaints(executed: dict, tags=("colab", "colab-standin")) -> list[str]:
    """What pip printed in the set-up cells (with -q: only warnings and errors)."""
    lines = []
    for _, cell, out in outputs(executed):
        if set(cell.get("metadata", {}).get("tags", [])) & set(tags):
            said = "".join(out.get("text", "")) + "\n".join(out.get("traceback", []))
            lines += [line for line in said.splitlines() if re.search(r"ERROR|error|conflict|incompatible", line)]
    return lines


def changes(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """What was added ("name version"), changed ("name old -> new") and removed between two package lists."""
    added = sorted(f"{n} {after[n]}" for n in set(after) - set(before))
    changed = sorted(f"{n} {before[n]} -> {after[n]}" for n in before if n in after and before[n] != after[n])
    return added, changed, sorted(set(before) - set(after))


# --- the steps --------------------------------------------------------------------------------------


class Check:
    """One run of the stand-in: the runtime, the snapshot of the course, a folder for the notebooks."""

    def __init__(self, runtime: Runtime, work: Path):
        self.runtime = runtime
        self.work = work
        self.repository = snapshot(work)
        jupyter = work / "jupyter"
        runtime.kernelspec(jupyter)

    def fresh_content(self, name: str) -> Path:
        content = self.work / f"content-{name}"
        shutil.rmtree(content, ignore_errors=True)
        content.mkdir()
        return content

    def execute(self, notebook, name: str, content: Path) -> tuple[dict, float]:
        import nbformat

        from autograder import headless

        path = self.work / f"{name}.ipynb"
        nbformat.write(notebook, path)
        started = time.perf_counter()
        env = self.runtime.kernel_env(self.work / "model-cache")
        out = ARTIFACTS / f"{name}.ipynb"  # kept for reading after the run
        out.parent.mkdir(parents=True, exist_ok=True)
        executed = headless.execute(path, out, KERNEL, cwd=content, env=env)
        return executed, time.perf_counter() - started

    def colab_cell(self) -> tuple[dict, dict]:
        """The Colab cell alone in a fresh runtime, then what it left: a row and the figures."""
        import nbformat

        self.runtime.reset()
        before = self.runtime.packages()
        first = nbformat.read(ROOT / "notebooks" / "01_prefill_decode.ipynb", as_version=4)
        probe = (
            "import importlib.metadata as m, sys, torch, ipywidgets, IPython, numpy, course\n"
            "print('after the cell:', 'torch', torch.__version__, 'ipywidgets', ipywidgets.__version__, "
            "'IPython', IPython.__version__, 'numpy', numpy.__version__, 'course from', course.__file__)"
        )
        notebook = nbformat.v4.new_notebook(cells=[first.cells[0], nbformat.v4.new_code_cell(probe)])
        content = self.fresh_content("cell")
        executed, seconds = self.execute(colab_notebook(notebook, self.repository, content), "colab-cell", content)
        added, changed, removed = changes(before, self.runtime.packages())
        cell = cell_seconds(executed, "colab")
        found = errors(executed)
        torch_replaced = any(line.startswith("torch ") for line in changed) or "torch" in removed
        restart = bool(changed or removed)
        figures = {
            "cell_seconds": round(cell, 1),
            "added": added,
            "changed": changed,
            "removed": removed,
            "torch_replaced": torch_replaced,
            "restart_needed": restart,
            "custom_widget_manager": "enable_custom_widget_manager" in first.cells[0].source,
            "pip_said": pip_complaints(executed),
            "probe": [line.replace(str(content), CONTENT) for line in printed(executed).strip().splitlines()[-1:]]
            if not found
            else [],
        }
        detail = (
            f"installed the course in {cell:.0f} s; added {len(added)} ({', '.join(added)}), changed "
            f"{len(changed)}{' (' + ', '.join(changed) + ')' if changed else ''}, removed {len(removed)}; "
            f"torch {'REPLACED' if torch_replaced else 'kept'}; restart {'needed' if restart else 'not needed'}"
        )
        if found:
            detail += f"; cell {found[0][0]} raised {found[0][2]}: {found[0][3][:200]}"
        ok = not found and not torch_replaced and not restart
        return _row("the Colab cell (fresh runtime)", ok, seconds, detail), figures

    def chapter(self, chapter: str) -> list[dict]:
        """The chapter's instructor notebook, then its student copy, in one fresh runtime."""
        import nbformat

        from autograder import release
        from autograder.chapters import CHAPTERS
        from course import paths, pretrained

        self.runtime.reset()
        before = self.runtime.packages()
        after = list(pretrained.COLAB_INSTALL) if chapter == "08_in_practice" else []
        rows = []
        for copy in ("solution", "blank"):
            if copy == "solution":
                notebook = release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
            else:
                notebook = nbformat.read(paths.NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
            content = self.fresh_content(chapter)
            executed, seconds = self.execute(
                colab_notebook(notebook, self.repository, content, after), f"{chapter}.{copy}", content
            )
            said, found = printed(executed), errors(executed)
            set_up = cell_seconds(executed, "colab") + cell_seconds(executed, "colab-standin")
            checks = sum(len(e.checks) for e in CHAPTERS[chapter])
            problems = []
            if copy == "solution":
                problems += [f"cell {i} raised {name}: {message[:160]}" for i, _, name, message in found]
                if "FAIL" in said or said.count("ok  ") < checks:
                    problems.append(f"{said.count('ok  ')} checks ok of {checks}, {said.count('FAIL')} FAIL")
            else:
                wrong = [e for e in found if "raises-exception" not in e[1] or e[2] != "AssertionError"]
                problems += [f"cell {i} raised {name}: {message[:160]}" for i, _, name, message in wrong]
                if not found or "not answered yet" not in said:
                    problems.append("the blank exercises did not fail their checks")
            problems += [quiz_fallback(executed)] if quiz_fallback(executed) else []
            marks = custom_manager_marks(executed)
            detail = (
                "; ".join(problems)
                if problems
                else (
                    f"{said.count('ok  ')} checks ok"
                    if copy == "solution"
                    else f"{len(found)} check cells failed, as blank"
                )
            )
            detail += f"; set-up cells {set_up:.0f} s" + (
                f"; {marks} outputs ask for the custom widget manager" if marks else ""
            )
            complaints = pip_complaints(executed)
            detail += f"; pip said: {complaints[0][:160]}" if complaints else ""
            if copy == "solution":
                _, changed, removed = changes(before, self.runtime.packages())
                detail += f"; the set-up changed {', '.join(changed + removed)}" if changed or removed else ""
            rows.append(_row(f"{chapter} {copy}", not problems, seconds, detail, set_up_seconds=round(set_up, 1)))
        return rows

    def widgets(self) -> tuple[dict, dict]:
        """Every control moved, every quiz answered, every widget model listed, under Colab's packages."""
        import nbformat

        from course import paths

        self.runtime.reset()
        slugs = [paths.slug(source) for source in paths.chapter_sources()]
        driver = (ROOT / "tests" / "_widget_driver.py").read_text()
        probe = WIDGET_PROBE.format(slugs=slugs)
        first = nbformat.read(ROOT / "notebooks" / "01_prefill_decode.ipynb", as_version=4).cells[0]
        cells = [first, nbformat.v4.new_code_cell(driver), nbformat.v4.new_code_cell(probe)]
        content = self.fresh_content("widgets")
        notebook = colab_notebook(nbformat.v4.new_notebook(cells=cells), self.repository, content)
        executed, seconds = self.execute(notebook, "widgets", content)
        found = errors(executed)
        if found:
            detail = f"cell {found[0][0]} raised {found[0][2]}: {found[0][3][:300]}"
            return _row("widgets and quizzes", False, seconds, detail), {}
        said = json.loads(printed(executed).strip().splitlines()[-1])
        moved = [r for r in said["records"] if "control" in r]
        stuck = [f"{r['widget']}: {r['control']}" for r in moved if r["error"] or not r["changed"]]
        models = said["models"]
        custom = sorted(m for m in models if not m.startswith(("@jupyter-widgets/controls", "@jupyter-widgets/base")))
        figures = {"versions": said["versions"], "models": models, "need_custom_manager": custom, "quiz": said["quiz"]}
        ok = not stuck and not said["quiz"]["wrong"] and moved
        detail = (
            f"{said['versions']}; {len(moved)} controls moved"
            + (f", {len(stuck)} did not redraw ({', '.join(stuck[:4])})" if stuck else ", each redrew")
            + f"; {said['quiz']['answered']} quiz questions answered"
            + (f", {len(said['quiz']['wrong'])} wrong feedback" if said["quiz"]["wrong"] else ", each answered at once")
            + f"; widget models: {', '.join(sorted({m.split(':')[1] for m in models}))}"
            + f"; needing Colab's custom widget manager: {', '.join(custom) or 'none'}"
        )
        return _row("widgets and quizzes", bool(ok), seconds, detail), figures


WIDGET_PROBE = """\
import json, sys, IPython, ipywidgets
from course import quiz

records = move_every_control({slugs!r})
answered, wrong = 0, []
for slug in {slugs!r}:
    box, chosen = quiz.build(slug)
    for number, (row, question) in enumerate(zip(box.children[:-1], quiz.questions(slug)), start=1):
        buttons = row.children[1].children
        for button in sorted(buttons, key=lambda b: b.description == question.answer):
            button.click()
            right = button.description == question.answer
            said = row.children[2].value
            if ("Right." in said) != right:
                wrong.append(f"{{slug}} {{number}} {{button.description}}")
        answered += 1
models = sorted(
    {{f"{{w._model_module}}@{{w._model_module_version}}:{{w._model_name}}" for w in _instances().values()}}
)
versions = f"Python {{sys.version.split()[0]}}, IPython {{IPython.__version__}}, ipywidgets {{ipywidgets.__version__}}"
print(json.dumps({{"records": records, "models": models, "versions": versions,
                  "quiz": {{"answered": answered, "wrong": wrong}}}}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", default="", help="comma-separated chapters (default: all)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from course import paths

    chapters = [c for c in args.chapters.split(",") if c] or [s.stem for s in paths.chapter_sources()]
    started = time.perf_counter()
    python, version, how = find_python()
    print(f"Colab's Python is {PYTHON_VERSION}: using {python} (Python {version}, found as {how})")
    text = FREEZE.read_text()
    source = header(text)
    install, replaced, left_out = plan(text)
    print(
        f"Colab's packages: {FREEZE.relative_to(ROOT)} ({source.get('date')}, commit {source.get('commit', '')[:12]})"
    )
    print(f"  {len(install)} installed, of which replaced: " + "; ".join(replaced.values()))
    print(f"  left out ({len(left_out)}): " + "; ".join(f"{k}: {v}" for k, v in left_out.items()))
    runtime = Runtime(Path(os.environ.get("COLAB_RUNTIME") or ROOT / ".colab-runtime").resolve())
    runtime.folder.parent.mkdir(parents=True, exist_ok=True)
    lock = open(runtime.folder.with_name(runtime.folder.name + ".lock"), "w")  # noqa: SIM115 (held to the end)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another make colab-check is using {runtime.folder}: wait for it to end") from None
    build_started = time.perf_counter()
    runtime.build(python, text)
    built = time.perf_counter() - build_started
    rows, figures = [], {}
    runtime_figures = {
        "python": f"{version} ({how.replace(str(Path.home()), '~')})",  # no machine's paths in data/
        "packages": source,
        "installed": len(install),
        "replaced": replaced,
        "left_out": left_out,
        "build_seconds": round(built, 1),
    }

    def record(finished: bool) -> dict:
        """The report as it stands, written after every step: a run that is stopped keeps what it
        measured (``finished`` false, ``chapters`` naming those asked for)."""
        report = {
            "runtime": runtime_figures,
            **figures,
            "chapters": chapters,
            "finished": finished,
            "seconds": round(time.perf_counter() - started, 1),
            "passed": finished and all(r["result"] == "passed" for r in rows),
            "rows": rows,
        }
        REPORT.write_text(json.dumps(report, indent=1) + "\n")
        return report

    def add(row: dict) -> None:
        rows.append(row)
        print(table([row]).splitlines()[2], flush=True)
        record(finished=False)

    with tempfile.TemporaryDirectory(prefix="colab-check-") as work:
        check = Check(runtime, Path(work))
        row, figures["colab_cell"] = check.colab_cell()
        add(row)
        row, figures["widgets"] = check.widgets()
        add(row)
        for chapter in chapters:
            for row in check.chapter(chapter):
                add(row)
        runtime.reset()
    report = record(finished=True)
    print(f"\n{table(rows)}\nin {report['seconds']:.0f} s")
    print(f"written to {REPORT.relative_to(ROOT)}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
