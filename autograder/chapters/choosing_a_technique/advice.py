"""Chapter 9's exercise fine_tuning_advice (the rule for when to fine-tune) with its visible check.
The judge compares with the chapter's answer (``ANSWERS``, its solution cell) and names the known
mistake it matches (``MISTAKES``, ``autograder/mistakes/choosing_a_technique.py``: the rule with
one part changed); the hidden checks are ``autograder/hidden/choosing_a_technique.py``'s."""

from __future__ import annotations

import itertools

from autograder.checks import Check, Exercise, Verdict, judge_raises, judges_value
from course import technique_guide, withheld

ANSWERS = withheld.answers("09_choosing_a_technique")
MISTAKES = withheld.module("autograder.mistakes.choosing_a_technique")

ALL_CASES = [list(case) for case in itertools.product(technique_guide.NEEDS, (False, True), (False, True))]
# the notes' three cases without fine-tuning, and the rule's case for it
NOTES_CASES = [["knowledge", False, True], ["format", True, True], ["tone", False, False], ["format", False, True]]


def advice_for_each(fine_tuning_advice, cases):
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's advice for
    each (need, changes_often, tried_prompting), strings kept, anything else as its repr."""
    answers = []
    for need, changes_often, tried_prompting in cases:
        advice = fine_tuning_advice(need, changes_often, tried_prompting)
        answers.append(advice if isinstance(advice, str) else repr(advice)[:40])
    return answers


def cases_probe(fixed=None):
    def make(rng):
        cases = fixed or [ALL_CASES[i] for i in rng.permutation(len(ALL_CASES))]
        return {"call": "fine_tuning_advice", "scenario": advice_for_each, "args": [cases]}

    return make


@judges_value
def judge_advice(probe, got):
    cases = probe["args"][0]
    if not isinstance(got, list) or len(got) != len(cases):
        return Verdict(False, f"expected one answer per case, got {got!r}"[:200])
    labels = [technique_guide.advice_label(value) for value in got]
    for case, value, label in zip(cases, got, labels, strict=True):
        if label is None:
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}; return one of "
                + ", ".join(repr(a) for a in technique_guide.ADVICE),
            )
        if value != label:  # the right idea, spelled otherwise: the prompt asks for the exact strings
            return Verdict(
                False,
                f"fine_tuning_advice{tuple(case)} returned {value!r}, which means {label!r}: return exactly "
                + ", ".join(repr(a) for a in technique_guide.ADVICE),
            )
    expected = [ANSWERS.fine_tuning_advice(*case) for case in cases]
    wrong = [i for i, (a, b) in enumerate(zip(labels, expected, strict=True)) if a != b]
    if not wrong:
        return Verdict(True)
    for hint, answers in MISTAKES.of_fine_tuning_advice(cases):
        if labels == answers:
            return Verdict(False, hint)
    first = wrong[0]
    return Verdict(
        False,
        f"{len(wrong)} of {len(cases)} cases differ; for example fine_tuning_advice{tuple(cases[first])} gave "
        f"{labels[first]!r}, expected {expected[first]!r}",
    )


def judge_unknown_need(probe, result):
    return judge_raises(result, "ValueError", "say which needs are known, as the chapter's other functions do")


ADVICE = Exercise(
    "fine_tuning_advice",
    ("fine_tuning_advice",),
    [
        Check(
            "notes",
            1,
            "the notes' three cases and the rule's case for fine-tuning",
            cases_probe(NOTES_CASES),
            judge_advice,
            visible=True,
        ),
    ],
)
