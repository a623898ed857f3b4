"""Command line: ``python -m autograder grade NOTEBOOK [--json]``, ``grade-folder DIR --out DIR
[--shard I/N]``, ``merge DIR`` (the shards' parts into the class's files), and for a course run
with nbgrader ``nbgrader-source COURSE ASSIGNMENT CHAPTER...``, ``nbgrader COURSE ASSIGNMENT``
(its submissions graded in the sandbox into nbgrader's gradebook), on JupyterHub
``hub-setup COURSE --course-id ID --exchange DIR --learners-env PREFIX`` (see :mod:`autograder.hub`), and ``doctor``
(what this machine lets the sandbox do, and how to make it stronger)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from autograder import grade, gradebook, sandbox, shards, similarity


def _shard(text: str) -> tuple[int, int]:
    try:
        return shards.parse_shard(text)
    except shards.ShardError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade course notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("grade", help="grade one notebook and print points and hints")
    one.add_argument("notebook", type=Path)
    one.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    many = sub.add_parser("grade-folder", help="grade every notebook under a folder into a gradebook")
    many.add_argument("folder", type=Path)
    many.add_argument("--out", type=Path, default=Path("feedback"), help="where gradebook.csv and feedback go")
    many.add_argument(
        "--workers", type=int, default=None, help="parallel submissions (default: the CPUs this process may use)"
    )
    many.add_argument("--chapter", default=None, help="expected chapter, e.g. 03_quantization: others score 0")
    many.add_argument(
        "--shard",
        type=_shard,
        default=(0, 1),
        metavar="I/N",
        help="grade only shard I (from 0) of N, e.g. $SLURM_ARRAY_TASK_ID/4; needs --seed; then `merge OUT`",
    )
    join = sub.add_parser("merge", help="merge the shards' parts in OUT/parts into the class's gradebook")
    join.add_argument("out", type=Path, help="the --out folder the shards wrote to")
    join.add_argument("--shards", type=int, default=None, help="which split, when parts of several lie there")
    source = sub.add_parser("nbgrader-source", help="put chapters into an nbgrader course's source/ASSIGNMENT")
    source.add_argument("course", type=Path, help="the nbgrader course directory")
    source.add_argument("assignment", help="the assignment's name in nbgrader, e.g. ps1")
    source.add_argument("chapters", nargs="+", help="chapters by name or slug, e.g. 05_flash_attention")
    bridge = sub.add_parser("nbgrader", help="grade an nbgrader course's submissions in the sandbox into its gradebook")
    bridge.add_argument("course", type=Path, help="the nbgrader course directory")
    bridge.add_argument("assignment", help="the assignment's name in nbgrader, e.g. ps1")
    bridge.add_argument("--student", default="*", help="one student's id (default: every submission)")
    sub.add_parser("doctor", help="what this machine lets the sandbox do, and the step that would make it stronger")
    hub = sub.add_parser("hub-setup", help="nbgrader's settings and file modes for a class on JupyterHub")
    hub.add_argument("course", type=Path, help="the nbgrader course directory (made mode 0700)")
    hub.add_argument("--course-id", required=True, help="nbgrader's course id, e.g. llm-efficiency")
    hub.add_argument("--exchange", type=Path, required=True, help="nbgrader's exchange (made mode 1777)")
    hub.add_argument(
        "--learners-env",
        type=Path,
        required=True,
        help="the learners' environment make hub-learners-env made, e.g. /opt/llm-efficiency-course/.venv",
    )
    hub.add_argument("--instructor", default=None, help="the instructor's user name (default: whoever runs this)")
    hub.add_argument(
        "--hub-dir", type=Path, default=None, help="the hub's own files, root's alone (default: /srv/jupyterhub)"
    )
    hub.add_argument(
        "--learners-group",
        default=None,
        help="the Unix group whose members the hub admits as learners, made when missing (default: the course id)",
    )
    for command in (many, join):
        command.add_argument("--roster", type=Path, default=None, help="CSV of learners (Canvas's gradebook export)")
        command.add_argument(
            "--threshold", type=float, default=similarity.THRESHOLD, help="similarity listed for review (0 to 1)"
        )
    for command in (one, many, bridge):
        command.add_argument("--seed", type=int, default=None, help="fix the hidden inputs (default: fresh)")
        command.add_argument(
            "--timeout", type=_seconds, default=sandbox.Limits.wall_seconds, help="seconds per submission"
        )
        command.add_argument(
            "--call-timeout",
            type=_seconds,
            default=sandbox.Limits.probe_seconds,
            help="seconds per call of a learner's function (raise it on a slow or busy machine)",
        )
        command.add_argument(
            "--memory",
            type=float,
            default=sandbox.Limits.memory_bytes / 2**30,
            help="GiB of resident memory per submission",
        )
    return parser


def _seconds(text: str) -> float:
    """A time limit from the command line: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time limit: give a positive number of seconds")
    return value


def _limits(args) -> sandbox.Limits:
    return sandbox.Limits(
        wall_seconds=args.timeout, probe_seconds=args.call_timeout, memory_bytes=int(args.memory * 2**30)
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.monotonic()
    try:
        if args.command == "merge":
            graded, notes = grade.merge(args.out, args.roster, args.shards, args.threshold)
            _summary([g.report for g in graded], notes, args.out, started, "merged")
            return 0
        if args.command.startswith("nbgrader"):
            return _nbgrader(args)
        if args.command == "hub-setup":
            return _hub_setup(args)
        if args.command == "doctor":
            from autograder.sandbox import doctor

            return doctor.main()
        limits = _limits(args)
        if args.command == "grade":
            report = grade.grade(args.notebook, limits, args.seed)
            print(json.dumps(report.as_json()) if args.json else report.text())
            return 0
        print(f"sandbox: {sandbox.describe(sandbox.isolation(limits.memory_bytes))}", file=sys.stderr)
        reports = grade.grade_folder(
            args.folder,
            args.out,
            limits,
            args.workers,
            args.seed,
            args.chapter,
            shard=args.shard,
            roster=args.roster,
            threshold=args.threshold,
        )
    except (sandbox.SandboxUnavailable, shards.MergeError, gradebook.RosterError, shards.ShardError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    index, count = args.shard
    if count > 1:
        print(
            f"shard {index}/{count}: graded {len(reports)} notebooks in {time.monotonic() - started:.1f} s; "
            f"part: {shards.part_path(args.out, index, count)}; once every shard is done: "
            f"python -m autograder merge {args.out}"
        )
        return 0
    notes = (args.out / grade.NOTES).read_text().split("\n## ")[0]  # the first section: the notes themselves
    notes = [line[2:] for line in notes.splitlines() if line.startswith("- ")]
    _summary(reports, notes, args.out, started, "graded")
    return 0


def _nbgrader(args: argparse.Namespace) -> int:
    """The nbgrader commands (nbgrader is imported only for them: its import takes seconds)."""
    from autograder import nbgrader_course

    if args.command == "nbgrader-source":
        try:
            written = nbgrader_course.write_source(args.course, args.assignment, args.chapters)
        except nbgrader_course.UnknownChapter as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        for path in written:
            print(f"wrote {path}")
        return 0
    limits = _limits(args)
    print(f"sandbox: {sandbox.describe(sandbox.isolation(limits.memory_bytes))}", file=sys.stderr)
    return nbgrader_course.autograde(args.course, args.assignment, args.student, limits, args.seed)


def _hub_setup(args: argparse.Namespace) -> int:
    from autograder import hub

    hub_dir = (args.hub_dir or hub.HUB_DIR).absolute()
    try:
        steps = hub.plan(
            args.course,
            args.course_id,
            args.exchange,
            args.learners_env,
            args.instructor,
            hub_dir=hub_dir,
            learners_group=args.learners_group,
        )
        written = hub.apply(steps)
    except (hub.HubSetupError, KeyError) as error:  # KeyError: pwd knows no such instructor
        print(f"error: {error}", file=sys.stderr)
        return 2
    for group in steps.groups:
        print(f"made the learners' group {group}")
    for path in written:
        print(f"wrote {path}")
    for folder, mode in steps.folders.items():
        print(f"mode {mode:o}: {folder}")
    config = hub_dir / "jupyterhub_config.py"
    if config in written:
        start = args.learners_env.absolute() / "bin" / "jupyterhub"
        group = args.learners_group or args.course_id
        print(f"enrol each learner as root: useradd -m -G {group} NAME && passwd NAME (or: usermod -aG {group} NAME)")
        print(f"start the hub as root: cd {hub_dir} && {start} -f {config}")
    for line in steps.left:
        print(f"still to do: {line}", file=sys.stderr)
    return 1 if steps.left else 0


def _summary(reports: list, notes: list[str], out: Path, started: float, verb: str) -> None:
    for report in reports:
        print(f"{report.notebook:<40} {report.score:g}/{report.max_score:g}")
    for line in notes:
        print(f"note: {line}")
    print(
        f"{verb} {len(reports)} notebooks in {time.monotonic() - started:.1f} s; gradebook: {out / 'gradebook.csv'}, "
        f"Canvas: {out / 'canvas.csv'}, similar answers: {out / 'similarity.html'}"
    )


if __name__ == "__main__":
    sys.exit(main())
