"""Command line: ``python -m autograder grade NOTEBOOK [--json]`` and ``grade-folder DIR --out DIR``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from autograder import grade, runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade course notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("grade", help="grade one notebook and print points and hints")
    one.add_argument("notebook", type=Path)
    one.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    many = sub.add_parser("grade-folder", help="grade every notebook under a folder into a gradebook")
    many.add_argument("folder", type=Path)
    many.add_argument("--out", type=Path, default=Path("feedback"), help="where gradebook.csv and feedback go")
    many.add_argument("--workers", type=int, default=None, help="parallel submissions (default: all cores)")
    many.add_argument("--chapter", default=None, help="expected chapter, e.g. 03_quantization: others score 0")
    for command in (one, many):
        command.add_argument("--seed", type=int, default=None, help="fix the hidden inputs (default: fresh)")
        command.add_argument("--timeout", type=float, default=runner.Limits.wall_seconds, help="seconds per submission")
        command.add_argument(
            "--memory",
            type=float,
            default=runner.Limits.memory_bytes / 2**30,
            help="GiB of resident memory per submission",
        )
    args = parser.parse_args(argv)
    limits = runner.Limits(wall_seconds=args.timeout, memory_bytes=int(args.memory * 2**30))
    try:
        if args.command == "grade":
            report = grade.grade(args.notebook, limits, args.seed)
            print(json.dumps(report.as_json()) if args.json else report.text())
            return 0
        started = time.monotonic()
        reports = grade.grade_folder(args.folder, args.out, limits, args.workers, args.seed, args.chapter)
    except runner.SandboxUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for report in reports:
        print(f"{report.notebook:<40} {report.score:g}/{report.max_score:g}")
    print(
        f"graded {len(reports)} notebooks in {time.monotonic() - started:.1f} s; "
        f"gradebook: {args.out / 'gradebook.csv'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
