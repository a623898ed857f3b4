"""Planted mistakes: plausible wrong answers to each chapter's exercises, and how the grader must
answer them. The tests grade them (``tests/test_<slug>.py``), ``make bench`` mixes them into the class
it grades, and a release can replay the checks on each. Instructor data, like ``solutions/``: never
shipped to learners.

One module per chapter, ``autograder/planted/<slug>.py``, holds its ``PLANTED`` dict (name ->
:class:`Planted`) and the answer templates its entries are written from::

    >>> planted("kv_cache")["kv_no_factor_2"].words
    'factor 2'

Not handled: mistakes judged only in the test process (each test file's ``MISTAKES``) stay in the tests.
"""

from __future__ import annotations

import importlib
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


def planted(slug: str) -> dict[str, Planted]:
    """The planted mistakes of the chapter ``slug`` (``autograder/planted/<slug>.py``), by name; none
    for a chapter without that module."""
    name = f"{__name__}.{slug}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        return {}
    return module.PLANTED


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
