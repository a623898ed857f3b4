"""Timing that means something: warm-up, device synchronisation, the median of repeats, and a
thread count chosen from what this process may use.

Report ratios against a baseline timed in the same run, and the physical bound (bytes over
bandwidth, FLOPs over peak), never a bare time. Not handled: CUDA events, multi-device work.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from course.device import synchronize


def median_seconds(
    fn: Callable[[], object], device: torch.device | None = None, warmup: int = 2, repeats: int = 7
) -> float:
    """Median wall-clock seconds of ``fn()`` after ``warmup`` untimed calls."""
    return statistics.median(repeat_seconds(fn, device, warmup, repeats))


def spread(times: list[float]) -> float:
    """How far the repeats of one measurement lie apart: (slowest - fastest) / median."""
    return (max(times) - min(times)) / statistics.median(times)


def repeat_seconds(
    fn: Callable[[], object], device: torch.device | None = None, warmup: int = 2, repeats: int = 7
) -> list[float]:
    """Wall-clock seconds of each of ``repeats`` calls of ``fn()``, after ``warmup`` untimed calls."""
    device = device or torch.device("cpu")
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def _cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup"), membership: str | None = None) -> float | None:
    """CPUs allowed by this process's cgroup quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``),
    the tightest along its path, or None when there is no quota (or no cgroup file system)."""
    try:
        membership = Path("/proc/self/cgroup").read_text() if membership is None else membership
    except OSError:
        return None
    quotas = []
    for line in membership.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            folders, files = [root], ("cpu.max",)
        elif "cpu" in controllers.split(","):
            folders, files = [root / controllers, root / "cpu", root / "cpu,cpuacct"], ("cpu.cfs_quota_us",)
        else:
            continue
        for folder in folders:
            here = folder / path.lstrip("/")
            while True:
                for name in files:
                    quotas.append(_read_quota(here, name))
                if here == folder:
                    break
                here = here.parent
    quotas = [q for q in quotas if q]
    return min(quotas) if quotas else None


def _read_quota(folder: Path, name: str) -> float | None:
    try:
        if name == "cpu.max":
            quota, period = (folder / name).read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = int((folder / name).read_text())
        return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """How many CPUs this process may really use: its CPU affinity, capped by a container's CPU
    quota and by ``OMP_NUM_THREADS`` where that is set (the share that whoever started the process
    gave it: a batch job, a test worker beside others). Not the host's core count, which a
    container or a shared server can far exceed."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        count = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    count = max(1, min(count, math.floor(quota))) if quota else count
    return min(count, _omp_threads() or count)


def _omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive whole number, else None (unset, or not a number)."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return threads if threads > 0 else None


_THREAD_COUNT = threading.RLock()  # torch's thread count is the process's: one block sets it at a time


@contextlib.contextmanager
def threads(n: int):
    """Run the block with torch on ``n`` CPU threads, then restore the previous count. The count is
    the whole process's, so blocks in other Python threads (the grader judges several notebooks at
    once) wait for this one: a block pinned to one thread is never run partly on more, and its
    figures come out the same however the process is busy."""
    with _THREAD_COUNT:
        previous = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


CLEARLY_FASTER = 1.15  # more threads are kept only when they are this much faster than fewer


def choose_threads(fn: Callable[[], object], device: torch.device | None = None) -> tuple[int, dict[int, float]]:
    """The thread count to measure ``fn`` with here, and the median seconds at each count tried.

    One thread and every usable CPU are timed, in turn (one call each, three rounds), so that a
    burst of other work slows both alike. On a machine that other work shares (a busy laptop, a
    JupyterHub node), torch's default of one thread per core can be several times slower than a
    single thread: threads wait for each other while the cores run something else, and the other
    work can start after the choice. So all the CPUs are chosen only when they are clearly faster
    (:data:`CLEARLY_FASTER`); a tie keeps one thread. On a GPU the CPU threads do not matter and the
    current count is kept.
    """
    if device is not None and device.type != "cpu":
        return torch.get_num_threads(), {}
    counts = sorted({1, usable_cpus()})
    for n in counts:  # warm-up: the first call of each count pays for its thread pool
        with threads(n):
            fn()
    rounds: dict[int, list[float]] = {n: [] for n in counts}
    for _ in range(3):
        for n in counts:
            with threads(n):
                rounds[n] += repeat_seconds(fn, warmup=0, repeats=1)
    times = {n: statistics.median(seconds) for n, seconds in rounds.items()}
    most = counts[-1]
    chosen = most if times[most] * CLEARLY_FASTER < times[1] else 1
    return chosen, times


def pin_threads(fn: Callable[[], object], device: torch.device | None = None) -> str:
    """Choose the thread count for ``fn`` (:func:`choose_threads`), keep it for the rest of this
    process, and return :func:`describe_threads`' line: what a chapter prints before it measures."""
    chosen, times = choose_threads(fn, device)
    torch.set_num_threads(chosen)
    return describe_threads(chosen, times)


def describe_threads(chosen: int, times: dict[int, float]) -> str:
    """One line saying which thread count a measurement uses and why, from :func:`choose_threads`."""
    if not times:
        return f"CPU threads: {chosen} (the work runs on the GPU)"
    tried = ", ".join(f"{n} thread{'s' if n > 1 else ''} {1e3 * t:.1f} ms" for n, t in sorted(times.items()))
    usable = max(times)
    if usable == 1:
        why = "the only CPU this process may use: its affinity, a container's quota or OMP_NUM_THREADS"
    elif chosen == usable:
        why = f"all usable CPUs help: {times[1] / times[usable]:.1f}x one thread's speed"
    elif times[usable] >= times[chosen]:
        why = "faster here: the cores are busy with other work, so threads wait for each other"
    else:
        why = (
            f"all {usable} were only {times[chosen] / times[usable]:.2f}x as fast, less than the "
            f"{CLEARLY_FASTER:.2f}x that is worth the other cores on a shared machine"
        )
    return f"measuring with {chosen} of {usable} usable CPU threads ({why}; a call, median of 3: {tried})"


def gb_per_s(n_bytes: float, seconds: float) -> float:
    """Bytes moved per second, in GB/s (10^9)."""
    return n_bytes / seconds / 1e9


def matvec_bandwidth(rows: int, cols: int, dtype: torch.dtype, device: torch.device, repeats: int = 7) -> dict:
    """Time ``W @ x`` for a (rows, cols) matrix: a decode step in miniature, bound by reading W.

    Returns seconds, the bytes of W, and the GB/s that reading W once per product implies.
    """
    generator = torch.Generator(device="cpu").manual_seed(0)
    weight = torch.randn(rows, cols, generator=generator).to(device=device, dtype=dtype)
    x = torch.randn(cols, 1, generator=generator).to(device=device, dtype=dtype)
    seconds = median_seconds(lambda: weight @ x, device, repeats=repeats)
    n_bytes = weight.numel() * weight.element_size()
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "seconds": seconds,
        "bytes": n_bytes,
        "gb_per_s": gb_per_s(n_bytes, seconds),
    }


def memory_bandwidth(device: torch.device, n_bytes: int = 256 * 2**20) -> float:
    """GB/s of reading memory the way decode does: a matrix-vector product with an ``n_bytes``
    float32 matrix, far larger than any cache. This is the roof decode is measured against."""
    n = int((n_bytes / 4) ** 0.5)
    return matvec_bandwidth(n, n, torch.float32, device)["gb_per_s"]


def matmul_flops(n: int, dtype: torch.dtype, device: torch.device, repeats: int = 5) -> float:
    """FLOP/s of an (n, n) @ (n, n) product: 2 n^3 FLOPs, the compute bound prefill lives under."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    seconds = median_seconds(lambda: a @ b, device, repeats=repeats)
    return 2 * n**3 / seconds
