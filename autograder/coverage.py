"""What each exercise's prompt requires and which checks cover it, as a table per chapter, read
from the ``requirements`` that every exercise lists beside its checks (``chapters/<slug>.py``), so
that the table and the checks cannot drift apart: ``python -m autograder.coverage [chapter ...]``.
"""

from __future__ import annotations

import sys

from autograder.chapters import CHAPTERS


def table(chapter: str) -> str:
    """A markdown table for ``chapter``: exercise, requirement, the checks that cover it (with
    ``*`` on the visible ones, which the learner's own check cell runs too)."""
    lines = [f"### {chapter}", "", "| exercise | requirement | checks (* visible) |", "| --- | --- | --- |"]
    for exercise in CHAPTERS[chapter]:
        visible = {c.name for c in exercise.checks if c.visible}
        for requirement in exercise.requirements:
            checks = ", ".join(f"`{name}`{'*' if name in visible else ''}" for name in requirement.checks)
            text = requirement.text.replace("|", "\\|")  # a norm's bars would end the cell
            lines.append(f"| `{exercise.defines[0]}` | {text} | {checks} |")
    return "\n".join(lines)


def problems() -> list[str]:
    """Requirements that name no check or a check their exercise does not have, and checks that
    cover no requirement: each should be fixed in the chapter's checks module."""
    found = []
    for chapter, exercises in CHAPTERS.items():
        for exercise in exercises:
            names = {c.name for c in exercise.checks}
            if not exercise.requirements:
                found.append(f"{chapter}: {exercise.grade_id} lists no requirements")
            for requirement in exercise.requirements:
                if not requirement.checks:
                    found.append(f"{chapter}: {exercise.grade_id}: '{requirement.text}' names no check")
                found += [
                    f"{chapter}: {exercise.grade_id}: '{requirement.text}' names {name}, which is not one of its checks"
                    for name in requirement.checks
                    if name not in names
                ]
            covered = {name for r in exercise.requirements for name in r.checks}
            found += [
                f"{chapter}: {exercise.grade_id}.{name} covers no requirement" for name in sorted(names - covered)
            ]
    return found


def main(argv: list[str]) -> int:
    for chapter in argv or list(CHAPTERS):
        if chapter not in CHAPTERS:
            print(f"no chapter {chapter}; known: {', '.join(CHAPTERS)}", file=sys.stderr)
            return 2
        print(table(chapter) + "\n")
    for problem in problems():
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
