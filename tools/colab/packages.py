"""Colab's list of packages (``data/colab/pip-freeze.txt``, Colab's own, with its date and commit)
read as what the stand-in installs, replaces and leaves out (each with why), and the Python 3.13
that runs them, found by the rule :func:`find_python` states.

Not handled: a line of the list that no rule covers (it stops the run, naming the line), and Python
3.13.15 itself where the machine has another 3.13 (the report names the one used)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from . import ROOT

FREEZE = ROOT / "data" / "colab" / "pip-freeze.txt"
PYTHON_VERSION = "3.13"
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
