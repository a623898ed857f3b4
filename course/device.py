"""Pick the device a chapter runs on (cuda, mps or cpu) and tell whether Triton kernels can run.

Chapters never write a device name: they ask ``course.device.best_device()``. Set the environment
variable ``COURSE_DEVICE`` (``cpu``, ``cuda``, ``mps``) to override the choice.
"""

from __future__ import annotations

import importlib.util
import os

import torch

_KNOWN = ("cpu", "cuda", "mps")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def best_device() -> torch.device:
    """The fastest device present: cuda, then mps, then cpu (``COURSE_DEVICE`` overrides it)."""
    wanted = os.environ.get("COURSE_DEVICE", "").strip().lower()
    if wanted:
        if wanted not in _KNOWN:
            raise ValueError(f"COURSE_DEVICE={wanted!r} is not one of {', '.join(_KNOWN)}")
        if wanted == "cuda" and not torch.cuda.is_available():
            raise ValueError("COURSE_DEVICE=cuda but torch sees no CUDA device; unset it to use the CPU")
        if wanted == "mps" and not _mps_available():
            raise ValueError("COURSE_DEVICE=mps but this torch build has no MPS device; unset it")
        return torch.device(wanted)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def triton_available(device: torch.device | None = None) -> bool:
    """True when Triton kernels can run: Triton installed and either a CUDA device or the
    interpreter (``TRITON_INTERPRET=1``, which runs kernels on the CPU for testing)."""
    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    device = device or best_device()
    return device.type == "cuda"


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` to finish (a no-op on the CPU); call it before reading a clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def describe(device: torch.device | None = None) -> str:
    """One line naming the device, for the top of a chapter."""
    device = device or best_device()
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    elif device.type == "mps":
        name = "Apple GPU (MPS)"
    else:
        name = f"CPU, {torch.get_num_threads()} threads"
    triton = "Triton usable" if triton_available(device) else "no Triton"
    return f"{device.type}: {name} ({triton}; torch {torch.__version__})"
