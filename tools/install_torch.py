"""Install the torch build that suits this machine into the running environment, before anything else.

``python tools/install_torch.py [SPEC]`` (``tools/setup_course.py`` runs it with the venv's Python):

- an NVIDIA GPU is present (``nvidia-smi -L`` lists one): PyPI's default build, which on Linux is
  the CUDA build (about 4.5 GB installed);
- no NVIDIA GPU, Linux x86_64: the CPU build (0.2 GB to download, 0.9 GB installed), from a
  local wheel cache that pip is configured with (find-links) when it has one, else from PyTorch's
  CPU index; when that index cannot be reached within a few seconds, PyPI's default build, with a
  warning saying what it costs;
- macOS on Apple silicon: PyPI's default, CPU with MPS for the GPU;
- Windows: PyPI's default, which is CPU-only even with an NVIDIA GPU (pass PyTorch's CUDA index as
  ``TORCH_INDEX`` for a CUDA build);
- Linux on Arm: PyPI's default, CPU-only.

``TORCH_INDEX=URL`` installs from that index instead (for example a CUDA index), and ``SPEC``
(default ``torch==2.13.0``) names the version; ``TORCH_BUILD=cpu|cuda`` overrides the detection.
Not handled: AMD (ROCm) and Intel GPUs, pass their index as ``TORCH_INDEX``; Intel Macs, for which
PyPI has no torch after 2.2.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DEFAULT_SPEC = "torch==2.13.0"
REACH_SECONDS = 5


def pip(*args: str, quiet: bool = False) -> bool:
    """Run pip in this environment; True when it succeeded."""
    command = [sys.executable, "-m", "pip", "install", "-q", *args]
    done = subprocess.run(command, capture_output=quiet)
    return done.returncode == 0


def has_nvidia_gpu() -> bool:
    """Whether the NVIDIA driver lists a GPU (no driver, no CUDA build)."""
    if not shutil.which("nvidia-smi"):
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def reachable(url: str, seconds: float = REACH_SECONDS) -> bool:
    """Whether ``url`` answers within ``seconds``: never wait on an index that cannot be reached."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=seconds):
            return True
    except OSError:
        return False


def installed_version() -> str | None:
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def wanted_build() -> str:
    """'cpu' or 'cuda' for Linux x86_64 (where PyPI's default is the CUDA build), else 'default'."""
    forced = os.environ.get("TORCH_BUILD", "").strip().lower()
    if forced in ("cpu", "cuda"):
        return forced
    if forced:
        raise SystemExit(f"TORCH_BUILD={forced!r}: use cpu or cuda (or leave it unset to detect)")
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "default"
    return "cuda" if has_nvidia_gpu() else "cpu"


def cpu_spec(spec: str) -> str:
    """``torch==2.13.0`` -> ``torch==2.13.0+cpu``: asking for the local version picks the CPU wheel."""
    return spec if "+" in spec or "==" not in spec else f"{spec}+cpu"


def install(spec: str) -> str:
    """Install torch for this machine; returns a line saying which build and from where."""
    index = os.environ.get("TORCH_INDEX", "").strip()
    if index:
        if not pip(spec, "--index-url", index):
            raise SystemExit(f"could not install {spec} from TORCH_INDEX={index}")
        return f"{spec} from {index}"
    build = wanted_build()
    if build != "cpu":
        if not pip(spec):
            raise SystemExit(f"could not install {spec} from PyPI")
        what = "the CUDA build (an NVIDIA GPU is present)" if build == "cuda" else "PyPI's build for this system"
        return f"{spec}: {what}"
    wheel = cpu_spec(spec)
    # 1. a wheel cache pip already knows (find-links): no network at all
    if pip("--no-index", "--no-deps", wheel, quiet=True):
        source = "the local wheel cache"
    # 2. PyTorch's CPU index, only if it answers
    elif reachable(f"{CPU_INDEX}/torch/") and pip("--no-deps", "--index-url", CPU_INDEX, wheel):
        source = CPU_INDEX
    else:
        print(
            f"warning: {CPU_INDEX} cannot be reached, so torch comes from PyPI, whose Linux build bundles CUDA "
            "(about 4.5 GB installed; it runs on the CPU all the same). To avoid it, download the CPU wheel on a "
            "machine that can reach that index and install it first, or set TORCH_INDEX.",
            file=sys.stderr,
        )
        if not pip(spec):
            raise SystemExit(f"could not install {spec} from PyPI")
        return f"{spec} from PyPI (the CUDA build: the CPU index was unreachable)"
    # torch's own requirements (sympy, networkx, ...) from the usual index; torch itself is in place
    if not pip(wheel):
        raise SystemExit(f"could not install the requirements of {wheel}")
    return f"{wheel}: the CPU build, from {source}"


def main(argv: list[str]) -> int:
    spec = argv[0] if argv else DEFAULT_SPEC
    version = installed_version()
    chosen = os.environ.get("TORCH_INDEX", "").strip() or os.environ.get("TORCH_BUILD", "").strip()
    if version is not None and not chosen:
        print(f"torch {version} is already installed (remove .venv to choose again)")
        return 0
    print(f"installed {install(spec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
