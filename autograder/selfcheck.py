"""Run an exercise's checks in the learner's own kernel: ``check("quantize_dequantize")`` in a notebook.

The visible checks of one exercise run on the functions the notebook defined (and all of them in the
instructor's source), so learners in Colab get the grader's feedback without nbgrader. The probes
go through :func:`autograder.sandbox.inside.call`, as in the grader's sandbox, so both probe alike. Before
any probe, :func:`autograder.reach.problem` looks for what grading will not give the answer (the
course package, names only the chapter's own cells define): the checks then fail with grading's
message instead of printing ``ok`` for an answer that grading fails.
"""

from __future__ import annotations

import inspect

import numpy as np

from autograder import reach, wire
from autograder.chapters import chapter_of, exercise_by_id
from autograder.checks import Check, Exercise, Verdict, builds_on_note, encode_probe
from autograder.sandbox import inside

VISIBLE_SEED = 2024


def run_in_process(check: Check, namespace: dict, seed: int) -> Verdict:
    """Probe and judge one check against functions in ``namespace`` (the caller's own kernel)."""
    probe = check.probe(np.random.default_rng(seed))
    try:
        result = {"returned": wire.encode(inside.call(namespace, encode_probe(probe)))}
    except Exception as error:  # the learner's own error, reported as a hint
        result = inside.describe(error)
    return check.judge(probe, result)


def helper_notes(exercise: Exercise, namespace: dict) -> str:
    """For an exercise whose answer calls the learner's answer to an earlier one: which of those
    fail their own visible checks (run quietly here), so that the right function gets fixed."""
    notes = ""
    answer = namespace.get(exercise.defines[0])
    code = getattr(answer, "__code__", None)
    for helper in map(exercise_by_id, exercise.builds_on):
        if code is None or not set(helper.defines) & set(code.co_names):
            continue
        visible = [c for c in helper.checks if c.visible]
        failed = [c.id for i, c in enumerate(visible) if not run_in_process(c, namespace, VISIBLE_SEED + i).passed]
        if failed:
            notes += builds_on_note(exercise, helper, failed)
    return notes


def check(exercise: str, hidden: bool = False, namespace: dict | None = None) -> None:
    """Run the checks of ``exercise`` on the caller's functions and print one line per check.

    Raises AssertionError when any check fails, so the cell shows that something is left to do.
    ``hidden=True`` runs every check (the instructor's source does); learners see the visible ones.
    """
    namespace = namespace if namespace is not None else inspect.currentframe().f_back.f_globals
    found = exercise_by_id(exercise)
    chosen = [c for c in found.checks if hidden or c.visible]
    unreachable = reach.problem(found, chapter_of(exercise), namespace)
    failures, notes, last_hint = 0, None, ""
    for index, item in enumerate(chosen):
        verdict = Verdict(False, unreachable) if unreachable else run_in_process(item, namespace, VISIBLE_SEED + index)
        if not verdict.passed and not unreachable:
            notes = helper_notes(found, namespace) if notes is None else notes
            verdict.hint += notes
        mark = "ok  " if verdict.passed else "FAIL"
        hint = "(as above)" if verdict.hint == last_hint else verdict.hint
        print(f"{mark} {item.what} [{item.points} pt]" + ("" if verdict.passed else f"\n     hint: {hint}"))
        last_hint = verdict.hint if not verdict.passed else last_hint
        failures += not verdict.passed
    hidden_count = len(found.checks) - len(chosen)
    if hidden_count:
        print(f"     ({hidden_count} more checks run when your notebook is graded)")
    if failures:
        raise AssertionError(f"{failures} of {len(chosen)} checks of {exercise} failed: read the hints above")
