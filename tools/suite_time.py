"""The test suite's time, read from a pytest run's own JUnit report: the whole run, each file's total
and the slowest tests. ``make test`` writes the report to ``test-artifacts/junit.xml``; ``make bench``
records what it says under ``tests`` in ``data/performance.json``.

    python tools/suite_time.py [REPORT] [--record] [--slowest 30]

A test's time is pytest's own: its set-up, call and teardown, so a fixture that a module's tests
share counts in the first test that asks for it, and with several workers (pytest-xdist) the files'
totals add up to more than the run's wall time. Not handled: other tools' reports, and the load on
the machine during the run (the report does not hold it: say it beside the figure).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "test-artifacts" / "junit.xml"
PERFORMANCE = ROOT / "data" / "performance.json"


def _file(classname: str) -> str:
    """The test file of a JUnit classname: ``tests.test_grader.TestX`` -> ``tests/test_grader.py``."""
    parts = classname.split(".")
    module = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    return "/".join(parts[: module + 1]) + ".py"


def read(report: Path, slowest: int = 30) -> dict:
    """What the JUnit file ``report`` says: wall seconds, counts, seconds per file (largest first) and
    the ``slowest`` tests, each ``[file::name, seconds]``."""
    root = ElementTree.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    cases = [case for suite in suites for case in suite.iter("testcase")]
    files: dict[str, float] = {}
    timed = []
    for case in cases:
        seconds = float(case.get("time", 0))
        where = _file(case.get("classname", ""))
        files[where] = files.get(where, 0.0) + seconds
        timed.append([f"{where}::{case.get('name')}", round(seconds, 1)])
    timed.sort(key=lambda entry: -entry[1])

    def count(what: str) -> int:
        return sum(int(suite.get(what, 0)) for suite in suites)

    return {
        "seconds": round(sum(float(suite.get("time", 0)) for suite in suites), 1),
        "tests": count("tests"),
        "failures": count("failures") + count("errors"),
        "skipped": count("skipped"),
        "when": suites[0].get("timestamp", ""),
        "files": {name: round(s, 1) for name, s in sorted(files.items(), key=lambda item: -item[1])},
        "slowest": timed[:slowest],
    }


def text(found: dict) -> str:
    minutes, seconds = divmod(round(found["seconds"]), 60)
    lines = [
        f"pytest: {found['seconds']:,.0f} s ({minutes} min {seconds} s), {found['tests']} tests, "
        f"{found['failures']} failed, {found['skipped']} skipped ({found['when']})",
        "per file:",
        *(f"  {s:8.1f} s  {name}" for name, s in found["files"].items()),
        f"the {len(found['slowest'])} slowest tests:",
        *(f"  {s:8.1f} s  {name}" for name, s in found["slowest"]),
    ]
    return "\n".join(lines)


def record(found: dict, path: Path = PERFORMANCE) -> None:
    """Put ``found`` under ``tests`` in ``path``, keeping what the rest of it holds."""
    performance = json.loads(path.read_text()) if path.exists() else {}
    performance["tests"] = found
    path.write_text(json.dumps(performance, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=REPORT)
    parser.add_argument("--record", action="store_true", help=f"also record it in {PERFORMANCE.relative_to(ROOT)}")
    parser.add_argument("--slowest", type=int, default=30, help="how many of the slowest tests to list")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"no test report at {args.report}: run `make test` first (it writes one)", file=sys.stderr)
        return 1
    found = read(args.report, args.slowest)
    print(text(found))
    if args.record:
        record(found)
        print(f"recorded under 'tests' in {PERFORMANCE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
