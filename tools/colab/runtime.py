"""The stand-in's environment: a virtual environment built from Colab's list, the stand-in
``google.colab`` in it, a Jupyter kernel that runs it, and the list of what it held when built, which
:meth:`Runtime.reset` returns it to before each step.

Not handled: Windows (the environment is built the Linux and macOS way: ``venv/bin``), and Colab's own
``google.colab`` (not on PyPI: a stand-in gives what the Colab cell uses)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from .packages import LEFT_OUT, canonical, plan

KERNEL = "colab-standin"


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


def changes(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """What was added ("name version"), changed ("name old -> new") and removed between two package lists."""
    added = sorted(f"{n} {after[n]}" for n in set(after) - set(before))
    changed = sorted(f"{n} {before[n]} -> {after[n]}" for n in before if n in after and before[n] != after[n])
    return added, changed, sorted(set(before) - set(after))
