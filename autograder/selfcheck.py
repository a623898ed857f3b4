"""Run an exercise's checks in the learner's own kernel: ``check("quantize_dequantize")`` in a notebook.

The visible checks of one exercise run on the functions the notebook defined (and all of them in the
instructor's source), so learners in Colab get the grader's feedback without nbgrader. The probes
go through :func:`autograder.sandbox.call`, as in the grader's sandbox, so both probe alike.
"""

from __future__ import annotations

import inspect

import numpy as np

from autograder import sandbox, wire
from autograder.chapters import exercise_by_id
from autograder.checks import Check, Verdict, encode_probe

VISIBLE_SEED = 2024


def run_in_process(check: Check, namespace: dict, seed: int) -> Verdict:
    """Probe and judge one check against functions in ``namespace`` (the caller's own kernel)."""
    probe = check.probe(np.random.default_rng(seed))
    try:
        result = {"returned": wire.encode(sandbox.call(namespace, encode_probe(probe)))}
    except Exception as error:  # the learner's own error, reported as a hint
        result = sandbox.describe(error)
    return check.judge(probe, result)


def check(exercise: str, hidden: bool = False, namespace: dict | None = None) -> None:
    """Run the checks of ``exercise`` on the caller's functions and print one line per check.

    Raises AssertionError when any check fails, so the cell shows that something is left to do.
    ``hidden=True`` runs every check (the instructor's source does); learners see the visible ones.
    """
    namespace = namespace if namespace is not None else inspect.currentframe().f_back.f_globals
    found = exercise_by_id(exercise)
    chosen = [c for c in found.checks if hidden or c.visible]
    failures = 0
    for index, item in enumerate(chosen):
        verdict = run_in_process(item, namespace, VISIBLE_SEED + index)
        mark = "ok  " if verdict.passed else "FAIL"
        print(f"{mark} {item.what} [{item.points} pt]" + ("" if verdict.passed else f"\n     hint: {verdict.hint}"))
        failures += not verdict.passed
    hidden_count = len(found.checks) - len(chosen)
    if hidden_count:
        print(f"     ({hidden_count} more checks run when your notebook is graded)")
    if failures:
        raise AssertionError(f"{failures} of {len(chosen)} checks of {exercise} failed: read the hints above")
