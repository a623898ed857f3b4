"""Known mistakes: what each chapter's plausible wrong answers return, and the wrong answers
themselves. Instructor data, like ``solutions/``: the learners' copy leaves this folder out, and
answers the calls its checks make here from the recordings (``course/withheld.py``).

One module per chapter, ``autograder/mistakes/<slug>.py``, holds:

- a function per exercise, ``of_<exercise>``, taking a check's inputs and returning what each
  known mistake gives on them, with the hint that names it: the chapter's judges call it through
  ``withheld.module("autograder.mistakes.<slug>")``;
- ``PLANTED``: wrong answers written out, each with how the grader must answer it
  (:class:`Planted`). The tests grade each through the whole grader, ``make bench`` mixes them
  into the class it grades;
- ``JUDGED``: more wrong answers, judged in the tests' own process (the probes and judges
  without the sandbox: quick);

and the learners' copy's build runs the visible checks on every one of them, so that the copy
names each as the instructor's grader does::

    >>> planted("kv_cache")["kv_no_factor_2"].words
    'factor 2'

Not handled: right answers written another way, which are the tests' (``VARIANTS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Planted:
    """A plausible wrong answer, and how the grader must answer it.

    ``source`` replaces the answer cell ``grade_id`` of the solution; every check in ``must_fail``
    fails with ``words`` in its hint; checks of other exercises keep their points, except those of
    ``calls_it`` (exercises that call the learner's own answer to this one).
    """

    grade_id: str
    source: str
    must_fail: set[str]
    words: str
    calls_it: set[str] = field(default_factory=set)


def _chapter_module(slug: str):
    """``autograder/mistakes/<slug>.py``; None for a chapter without one."""
    from course.withheld import optional_module

    return optional_module(f"{__name__}.{slug}")


def answer_cell(chapter: str, grade_id: str, *replaced: tuple[str, str]) -> str:
    """The solution's answer cell ``grade_id`` of ``chapter`` (``"03_quantization"``), its solution
    markers dropped, with each (old, new) of ``replaced`` substituted: a wrong answer written from the
    answer itself, so that it cannot drift from it. An old text the cell no longer holds raises."""
    from course import paths
    from course.withheld import solution_cells

    cells = solution_cells(paths.SOLUTIONS / f"{chapter}.py")
    found = [code for _, meta, code in cells if meta.get("nbgrader", {}).get("grade_id") == grade_id]
    if not found:
        raise KeyError(f"{chapter} has no answer cell {grade_id!r}")
    markers = ("### BEGIN SOLUTION", "### END SOLUTION")
    source = "\n".join(line for line in found[0].splitlines() if line.strip() not in markers) + "\n"
    for old, new in replaced:
        if old not in source:
            raise ValueError(f"the solution's {grade_id} no longer holds {old!r}: write the wrong answer again")
        source = source.replace(old, new)
    return source


def planted(slug: str) -> dict[str, Planted]:
    """The wrong answers of the chapter ``slug`` that are graded end to end, by name."""
    return getattr(_chapter_module(slug), "PLANTED", {})


def judged(slug: str) -> dict[str, Planted]:
    """The wrong answers of the chapter ``slug`` that the tests judge in their own process, by name."""
    return getattr(_chapter_module(slug), "JUDGED", {})


def wrong_answers(slug: str) -> dict[str, Planted]:
    """Every wrong answer of the chapter ``slug`` (:func:`planted` and :func:`judged`), by name."""
    return {**planted(slug), **judged(slug)}


def misjudged(report, mistake: Planted) -> list[str]:
    """What the grader's ``report`` of a submission holding ``mistake`` got wrong, one line each: a
    check of ``must_fail`` it passed, a hint without ``words``, full marks kept, or a check of
    another exercise failed (beside those of ``calls_it``); empty when it answered as it must."""
    failed = {t.id: t.hint for t in report.tests if not t.passed}
    wrong = []
    if passed := sorted(mistake.must_fail - set(failed)):
        wrong.append(f"passed {', '.join(passed)}, which it must fail")
    if unnamed := sorted(i for i in mistake.must_fail & set(failed) if mistake.words not in failed[i]):
        wrong.append(f"the hint of {', '.join(unnamed)} does not say {mistake.words!r}")
    if report.score >= report.max_score:
        wrong.append("kept full marks")
    touched = {i.split(".")[0] for i in mistake.must_fail} | {mistake.grade_id} | mistake.calls_it
    if cost := [t.id for t in report.tests if not t.passed and t.id.split(".")[0] not in touched]:
        wrong.append(f"a mistake in one exercise must not cost another: {', '.join(cost)} failed")
    return wrong
