"""``make bench`` (``python tools/benchmarks.py``): the course's measurements on this machine, as ratios.

Each line gives a ratio against a baseline timed in the same run, and against the physical bound
where there is one (this machine's memory bandwidth, measured first). Nothing here asserts a time;
the numbers are for reading, and for the closing notes of the work that changes them.
Each chapter's measurements are its own: ``benchmark(device, bound)`` in ``course/benchmarks/<slug>.py``,
found by the chapter's slug (a chapter without one has none). ``python tools/benchmarks.py --only sliders``
measures the sliders alone and replaces only their figures; ``--only <slug>`` likewise for one
chapter's (``--only quantization``), ``--only grading`` for the generated class.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

from course import paths, timing
from course.device import best_device, describe, synchronize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.grading import grading_throughput  # noqa: E402 (tools/bench/: make bench's parts)
from bench.sliders import slider_latency, slider_report  # noqa: E402

CHAPTER_BUDGET, COURSE_BUDGET = 90.0, 600.0  # seconds headless, per chapter and for all of them
# chapter 8 loads a pretrained 135M-parameter model several ways, trains adapters on it and generates
CHAPTER_BUDGETS = {"08_in_practice": 240.0}
REPORT = paths.DATA / "performance.json"


def chapter_times() -> dict[str, float]:
    """Each instructor notebook executed headless with papermill, timed."""
    import tempfile

    import nbformat

    from autograder import headless, release

    print(
        f"\n== chapters headless (papermill, the course's engine, {headless.CELL_TIMEOUT} s per cell at most; "
        "goal 90 s each, chapter 8 240 s, 10 min all) =="
    )
    times = {}
    with tempfile.TemporaryDirectory() as folder:
        for source in release.chapters():
            notebook = f"{folder}/{source.stem}.ipynb"
            nbformat.write(release.instructor_notebook(source), notebook)
            started = time.perf_counter()
            headless.execute(notebook, notebook, cwd=paths.NOTEBOOKS)  # a hang raises, naming its cell
            times[source.stem] = time.perf_counter() - started
            allowed = CHAPTER_BUDGETS.get(source.stem, CHAPTER_BUDGET)
            verdict = "ok" if times[source.stem] <= allowed else f"over by {times[source.stem] - allowed:.0f} s"
            print(f"{source.stem:26s} {times[source.stem]:5.1f} s ({verdict})")
    total = sum(times.values())
    print(
        f"all chapters: {total:.0f} s ({'ok' if total <= COURSE_BUDGET else f'over by {total - COURSE_BUDGET:.0f} s'})"
    )
    return times


def record_sliders(sliders: dict[str, dict]) -> None:
    """Replace the sliders' figures in the report, keeping the rest of the last full run."""
    report = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    over, fields = slider_report(sliders)
    report = {k: v for k, v in report.items() if not k.startswith("slider_")} | fields
    report["over_budget"] = [line for line in report.get("over_budget", []) if not line.startswith("slider ")] + over
    REPORT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"sliders recorded in {REPORT.relative_to(paths.ROOT)}")


def budget(
    chapters: dict[str, float],
    sliders: dict[str, dict],
    ratios: dict[str, float],
    machine: str,
    threads: str = "",
    tables: dict[str, dict] | None = None,
) -> None:
    """Print what is over the performance budget, and by how much; record everything in data/ (the
    chapters' ratios, and each table a chapter's measurements returned, under its own name)."""
    limits = {name: CHAPTER_BUDGETS.get(name, CHAPTER_BUDGET) for name in chapters}
    over = [
        f"{name}: {t:.0f} s, {t - limits[name]:.0f} s over {limits[name]:.0f} s"
        for name, t in chapters.items()
        if t > limits[name]
    ]
    if sum(chapters.values()) > COURSE_BUDGET:
        over.append(
            f"all chapters: {sum(chapters.values()):.0f} s, {sum(chapters.values()) - COURSE_BUDGET:.0f} s over"
        )
    slider_over, slider_fields = slider_report(sliders)
    over += slider_over
    print("\n== performance budget ==")
    print("\n".join(f"OVER  {line}" for line in over) if over else "everything within budget")
    report = {
        "machine": machine,
        "chapter_seconds": {k: round(v, 1) for k, v in chapters.items()},
        **slider_fields,
        "threads": threads,
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        **(tables or {}),
        "over_budget": over,
    }
    kept = {"grading", "tests"}  # recorded on their own: --only grading, and tools/suite_time.py --record
    earlier = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    report |= {key: value for key, value in earlier.items() if key in kept}
    REPORT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"recorded in {REPORT.relative_to(paths.ROOT)}")


def record_grading(results: dict) -> None:
    """Put a class's grading figures under ``grading``, by the class's size, in data/performance.json,
    keeping the other sizes' figures and everything else it holds (a record of one size only, as
    older runs wrote it, is kept under its size)."""
    report = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    by_size = report.get("grading", {})
    if "submissions" in by_size:
        by_size = {str(by_size["submissions"]): by_size}
    by_size[str(results["submissions"])] = results
    report["grading"] = dict(sorted(by_size.items(), key=lambda item: int(item[0])))
    REPORT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"recorded under 'grading', {results['submissions']} submissions, in {REPORT.relative_to(paths.ROOT)}")


def chapter_benchmarks() -> dict[str, object]:
    """Each chapter's measurements, found by its slug: ``benchmark(device, bound)`` in
    ``course/benchmarks/<slug>.py``, for the chapters that have one, in course order."""
    found = {}
    for source in paths.chapter_sources():
        name = f"course.benchmarks.{paths.slug(source)}"
        if importlib.util.find_spec(name) is not None:
            found[paths.slug(source)] = importlib.import_module(name).benchmark
    return found


def main() -> None:
    import argparse

    benchmarks = chapter_benchmarks()
    parser = argparse.ArgumentParser(description="The course's measurements on this machine, as ratios.")
    parser.add_argument("--submissions", type=int, default=60, help="size of the generated class to grade")
    parser.add_argument("--shards", type=int, default=4, help="shards to grade the same class in (1: none)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip grading the class first with a fresh interpreter per submission (long for a large class)",
    )
    parser.add_argument(
        "--only",
        choices=["grading", "sliders", *benchmarks],
        default=None,
        help="run one section only: the class's grading, the sliders, or one chapter's measurements "
        "(by its slug); each replaces only its own figures in data/performance.json",
    )
    args = parser.parse_args()
    if args.only == "sliders":
        record_sliders(slider_latency())
        return
    if args.only != "grading":
        measurements(benchmarks, args.only)
    if args.submissions > 0 and args.only in (None, "grading"):
        record_grading(grading_throughput(args.submissions, args.shards, not args.no_baseline))


def measurements(benchmarks: dict[str, object], only: str | None = None) -> None:
    """Every chapter's measurements (or the chapter ``only``'s), after this machine's memory bandwidth;
    then, for a full run, the sliders and the chapters' headless times, against the budget."""
    from course import checkpoints, corpus
    from course.model import generate

    device = best_device()
    torch.manual_seed(0)
    print(describe(device))
    target = checkpoints.load("target", device)
    threads = timing.pin_threads(lambda: generate(target, corpus.encode("\n")[None].to(device), 32), device)
    print(threads)
    bound = timing.memory_bandwidth(device)
    print(f"memory bandwidth, reading a 256 MB matrix (the bound below): {bound:.1f} GB/s")
    synchronize(device)
    ratios, tables = {}, {}
    for slug, benchmark in benchmarks.items():
        if only in (None, slug):
            for name, figure in benchmark(device, bound).items():
                (tables if isinstance(figure, dict) else ratios)[name] = figure
    if only is not None:
        report = json.loads(REPORT.read_text()) if REPORT.exists() else {}
        report.setdefault("ratios", {}).update({k: round(v, 3) for k, v in ratios.items()})
        REPORT.write_text(json.dumps(report | tables, indent=1) + "\n")
        print(f"updated its figures in {REPORT.relative_to(paths.ROOT)}")
        return
    sliders = slider_latency()
    chapters = chapter_times()
    budget(chapters, sliders, ratios, describe(device), threads, tables)


if __name__ == "__main__":
    main()
