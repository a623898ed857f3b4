"""``make gpu-check`` (``python tools/gpu_check.py``): the course's CUDA path, proven in one command.

On a machine with a CUDA GPU it runs, within about 8 minutes on one H100/H200-class GPU:

1. the GPU-marked tests (``pytest -m gpu``: ``tests/test_gpu.py``),
2. every chapter's instructor notebook headless on the GPU (``COURSE_DEVICE=cuda``), a few at a
   time, each with all of its checks ``ok``,
3. the Triton attention kernel against torch's SDPA at 1024, 4096 and 16384 tokens in bf16: its
   largest difference from SDPA in float32 (within ``course.kernels.TOLERANCE``) and the time ratio,

then prints one table (passed or failed, times, ratios) and writes it to ``data/gpu_check.json``.
It exits 1 when anything failed. On a machine without CUDA it says so, runs nothing and exits 0.

Not handled: several GPUs (it uses the first), AMD's ROCm builds of torch (not tried).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from course import paths

REPORT = paths.DATA / "gpu_check.json"
BUDGET = {"tests": 180, "chapters": 270, "attention": 120}  # seconds per step: 9.5 min at most, 8 meant
CHAPTERS_AT_ONCE = 4


def no_cuda_reason() -> str | None:
    """Why this machine cannot run the check, or None when it can."""
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda} build, but no GPU is visible" if torch.version.cuda else "CPU-only build"
    return (
        f"no CUDA device: torch {torch.__version__} ({build}). make gpu-check needs an NVIDIA GPU and "
        "torch's CUDA build (delete .venv, then make lab TORCH_BUILD=cuda); nothing was run"
    )


def gpu_tests(targets=("tests",), timeout: float = BUDGET["tests"]) -> dict:
    """``pytest -m gpu`` over ``targets``: a row with the counts and the names of the failures."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "gpu.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        try:
            run = subprocess.run([*command, *targets], cwd=paths.ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return _row("GPU tests (pytest -m gpu)", False, time.perf_counter() - started, f"over {timeout:.0f} s")
        if not junit.exists():
            return _row("GPU tests (pytest -m gpu)", False, time.perf_counter() - started, run.stdout[-300:])
        suites = ElementTree.parse(junit).getroot()
        suites = suites.findall("testsuite") if suites.tag == "testsuites" else [suites]
        counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
        failed = [
            case.get("name")
            for suite in suites
            for case in suite.iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None
        ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    detail = f"{passed} passed, {len(failed)} failed, {counts['skipped']} skipped"
    if failed:
        detail += ": " + ", ".join(failed[:6]) + (" ..." if len(failed) > 6 else "")
    ok = run.returncode == 0 and not failed and passed > 0
    return _row("GPU tests (pytest -m gpu)", ok, time.perf_counter() - started, detail, passed=passed)


def _chapter(notebook: Path, folder: Path, env: dict, cell_timeout: float) -> dict:
    from autograder.headless import CellTimeout, execute

    started = time.perf_counter()
    try:
        executed = execute(
            notebook, folder / f"{notebook.stem}.out.ipynb", cwd=paths.NOTEBOOKS, timeout=cell_timeout, env=env
        )
    except CellTimeout as error:
        return _row(f"{notebook.stem} on the GPU", False, time.perf_counter() - started, str(error))
    errors = [
        f"cell {i}: {out['ename']}"
        for i, cell in enumerate(executed["cells"])
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    checks, failed = printed.count("ok  "), printed.count("FAIL")
    said = re.search(r"^(cuda|cpu|mps): ", printed, flags=re.M)  # the line course.device.describe() prints
    wrong_device = said is not None and said.group(1) != env["COURSE_DEVICE"]
    ok = not errors and not failed and not wrong_device
    detail = f"{checks} checks ok, {failed} failed" + (f"; {', '.join(errors[:3])}" if errors else "")
    detail += f"; ran on {said.group(1)}" if said else "; does not print its device"
    return _row(f"{notebook.stem} on the GPU", ok, time.perf_counter() - started, detail, checks=checks)


def chapters_on_the_gpu(notebooks: list[Path] | None = None, device: str = "cuda", timeout=BUDGET["chapters"]):
    """Each chapter's instructor notebook headless with ``COURSE_DEVICE=device``, a few at a time."""
    import nbformat

    from autograder import release

    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        if notebooks is None:
            notebooks = []
            for source in release.chapters():
                nbformat.write(release.instructor_notebook(source), folder / f"{source.stem}.ipynb")
                notebooks.append(folder / f"{source.stem}.ipynb")
        env = {**os.environ, "COURSE_DEVICE": device}
        with ThreadPoolExecutor(CHAPTERS_AT_ONCE) as pool:
            return list(pool.map(lambda n: _chapter(n, folder, env, timeout), notebooks))


def attention_against_sdpa(device: torch.device | None = None, lengths=(1024, 4096, 16384), **options) -> list[dict]:
    """The Triton kernel against SDPA (``course.benchmarks.flash_attention``, which ``make bench``
    uses too), one row per length, judged by the tolerance of this device and dtype."""
    from course import kernels
    from course.benchmarks.flash_attention import triton_against_sdpa

    device = device or torch.device("cuda")
    dtype = options.setdefault("dtype", torch.bfloat16)
    tolerance = kernels.TOLERANCE[(device.type, dtype)]
    rows = []
    for measured in triton_against_sdpa(device, lengths, **options):
        ok = measured["difference"] <= tolerance
        detail = (
            f"max |kernel - SDPA fp32| {measured['difference']:.1e} (tolerance {tolerance:.0e}; SDPA's own "
            f"{measured['sdpa_difference']:.1e}); {measured['kernel_ms']:.2f} ms vs SDPA {measured['sdpa_ms']:.2f} ms "
            f"= {measured['ratio']:.2f}x, {measured['kernel_tflops']:.0f} TFLOP/s"
        )
        name = f"Triton vs SDPA, N={measured['n']}, {str(dtype).removeprefix('torch.')}"
        rows.append(_row(name, ok, 1e-3 * (measured["kernel_ms"] + measured["sdpa_ms"]), detail, **measured))
    return rows


def _row(check: str, ok: bool, seconds: float, detail: str, **numbers) -> dict:
    row = {"check": check, "result": "passed" if ok else "FAILED", "seconds": round(seconds, 3), "detail": detail}
    return row | {key: round(value, 6) if isinstance(value, float) else value for key, value in numbers.items()}


def table(rows: list[dict]) -> str:
    """The rows as one plain-text table."""
    width = max(len(r["check"]) for r in rows)
    lines = [f"{'check':{width}s}  result  seconds  detail", "-" * (width + 40)]
    lines += [f"{r['check']:{width}s}  {r['result']:6s}  {r['seconds']:7.1f}  {r['detail']}" for r in rows]
    failed = sum(r["result"] != "passed" for r in rows)
    lines.append(f"{len(rows) - failed} of {len(rows)} passed")
    return "\n".join(lines)


def write(rows: list[dict], machine: str, seconds: float, path: Path = REPORT) -> None:
    report = {
        "machine": machine,
        "torch": torch.__version__,
        "seconds": round(seconds, 1),
        "passed": all(r["result"] == "passed" for r in rows),
        "rows": rows,
    }
    path.write_text(json.dumps(report, indent=1) + "\n")


def main() -> int:
    reason = no_cuda_reason()
    if reason:
        print(reason)
        return 0
    from course.device import describe, triton_available

    started = time.perf_counter()
    machine = describe(torch.device("cuda"))
    print(f"GPU check on {machine}")
    rows = [gpu_tests()]
    print(table(rows[-1:]).splitlines()[2])
    for row in chapters_on_the_gpu():
        rows.append(row)
        print(table([row]).splitlines()[2])
    if triton_available(torch.device("cuda")):
        rows += attention_against_sdpa()
    else:
        rows.append(_row("Triton vs SDPA", False, 0.0, "Triton is not importable: pip install triton"))
    elapsed = time.perf_counter() - started
    print(f"\n{table(rows)}\nin {elapsed:.0f} s")
    write(rows, machine, elapsed)
    print(f"written to {REPORT.relative_to(paths.ROOT)}")
    return 0 if all(r["result"] == "passed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
