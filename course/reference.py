"""Reference numbers: regenerated from the package with fixed seeds, stored with their tolerances.

A chapter whose module (``course/<slug>.py``) has a ``reference_numbers()`` returning
``{name: (value, tolerance, how)}`` is a topic: ``python -m course.reference`` (``make reference``)
writes ``data/reference/<slug>.json``; the tests regenerate and compare, and the chapters' checks
compare learners' results with the stored values. Not handled: numbers that depend on the machine
(timings); those are measured, never stored.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections.abc import Callable

from course import paths


def topics() -> list[str]:
    """The chapters (by slug, in course order) whose module makes reference numbers."""
    slugs = [paths.slug(source) for source in paths.chapter_sources()]
    return [slug for slug in slugs if hasattr(importlib.import_module(f"course.{slug}"), "reference_numbers")]


def generate(topic: str) -> dict[str, dict]:
    """Recompute the numbers of ``topic`` as JSON-ready entries."""
    if topic not in topics():
        raise KeyError(f"unknown topic {topic!r}; known: {', '.join(topics())}")
    make: Callable[[], dict] = importlib.import_module(f"course.{topic}").reference_numbers
    return {
        name: {"value": float(value), "tolerance": float(tolerance), "how": how}
        for name, (value, tolerance, how) in sorted(make().items())
    }


def load(topic: str) -> dict[str, dict]:
    """The stored entries of ``topic``: ``{name: {"value", "tolerance", "how"}}``."""
    path = paths.require(paths.REFERENCE / f"{topic}.json")
    return json.loads(path.read_text())


def value(topic: str, name: str) -> float:
    """One stored number."""
    return load(topic)[name]["value"]


def close(entry: dict, observed: float) -> bool:
    """Whether ``observed`` lies within the entry's tolerance of its value."""
    return math.isfinite(observed) and abs(observed - entry["value"]) <= entry["tolerance"] + 1e-12


def compare(topic: str, fresh: dict[str, dict] | None = None) -> list[str]:
    """Differences between the stored numbers and a fresh regeneration (``fresh``, :func:`generate`'s
    entries, when already made); empty when they agree."""
    stored, fresh = load(topic), generate(topic) if fresh is None else fresh
    problems = [f"{name}: stored but no longer generated" for name in stored.keys() - fresh.keys()]
    problems += [f"{name}: generated but not stored (run `make reference`)" for name in fresh.keys() - stored.keys()]
    for name in sorted(stored.keys() & fresh.keys()):
        if not close(stored[name], fresh[name]["value"]):
            problems.append(f"{name}: stored {stored[name]['value']!r}, regenerated {fresh[name]['value']!r}")
    return problems


def write(topic: str) -> None:
    """Regenerate and store ``topic``."""
    paths.REFERENCE.mkdir(parents=True, exist_ok=True)
    target = paths.REFERENCE / f"{topic}.json"
    target.write_text(json.dumps(generate(topic), indent=2) + "\n")
    print(f"wrote {target.relative_to(paths.ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Regenerate data/reference/*.json.")
    parser.add_argument("topics", nargs="*", default=topics(), help="topics to write (default: all)")
    for topic in parser.parse_args().topics:
        write(topic)


if __name__ == "__main__":
    main()
