"""Run an exercise's checks in the learner's own kernel: ``check("quantize_dequantize")`` in a notebook.

The visible checks of one exercise run on the functions the notebook defined (and all of them in the
instructor's source), so learners in Colab get the grader's feedback without nbgrader. The probes
go through :func:`autograder.sandbox.inside.call`, as in the grader's sandbox, so both probe alike. Before
any probe, :func:`autograder.answer_imports.problem` looks for what grading will not give the answer (the
course package, names only the chapter's own cells define): the checks then fail with grading's
message instead of printing ``ok`` for an answer that grading fails.

Under ``nbgrader autograde`` (which sets ``NBGRADER_EXECUTION=autograde`` in the kernel) a check
returns the points its passing checks earned instead of raising, so that nbgrader, which reads a
grade cell's points from its last expression, gives partial credit; warnings and whatever the
learner's code writes to stderr are shown on stdout, since nbgrader zeroes a grade cell with any
stderr. This runs in the learner's kernel: learner code can change any of it (see the guide
On JupyterHub with nbgrader); ``python -m autograder nbgrader`` grades out of the kernel's reach.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import warnings
from collections import Counter

import numpy as np

from autograder import answer_imports
from autograder.chapters import chapter_of, exercise_by_id
from autograder.checks import Check, Exercise, Verdict, builds_on_note, encode_probe
from autograder.sandbox import inside
from course import plain_data, withheld

VISIBLE_SEED = 2024


def run_in_process(check: Check, namespace: dict, seed: int) -> Verdict:
    """Probe and judge one check against functions in ``namespace`` (the caller's own kernel)."""
    probe = check.probe(np.random.default_rng(seed))
    try:
        result = {"returned": plain_data.encode(inside.call(namespace, encode_probe(probe)))}
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


def autograding() -> bool:
    """Whether this kernel runs under ``nbgrader autograde``."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


def check(exercise: str, hidden: bool = False, namespace: dict | None = None) -> float | None:
    """Run the checks of ``exercise`` on the caller's functions and print one line per check.

    Raises AssertionError when any check fails, so the cell shows that something is left to do.
    ``hidden=True`` runs every check (the instructor's source does); learners see the visible ones.
    Under ``nbgrader autograde`` (:func:`autograding`) it returns the points earned instead of
    raising, and the warnings and stderr output of the learner's code are printed on stdout.
    """
    namespace = namespace if namespace is not None else inspect.currentframe().f_back.f_globals
    with withheld.streams_kept():  # a check cell draws nothing from the learner's random streams
        return _check(exercise, hidden, namespace)


def _check(exercise: str, hidden: bool, namespace: dict) -> float | None:
    if not autograding():
        earned, failures, count = _run(exercise, hidden, namespace)
        if failures:
            raise _short(AssertionError(f"{failures} of {count} checks of {exercise} failed: read the hints above"))
        return None
    stderr = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(stderr):
        warnings.simplefilter("always")
        earned, _, _ = _run(exercise, hidden, namespace)
    for text, times in Counter(f"{w.category.__name__}: {w.message}" for w in caught).items():
        print(f"     note: your code warned{f' ({times} times)' if times > 1 else ''}: {text}")
    if stderr.getvalue():
        print(f"     note: your code wrote to stderr: {stderr.getvalue()[:500]}")
    return earned


def _short(error: Exception) -> Exception:
    """``error``, shown by IPython as its one line, without the traceback through this module: the
    hints above it say what to fix (``_render_traceback_`` is IPython's hook for that)."""
    error._render_traceback_ = lambda: [f"\x1b[0;31m{type(error).__name__}\x1b[0m: {error}"]
    return error


def _run(exercise: str, hidden: bool, namespace: dict) -> tuple[float, int, int]:
    """Print a line per check of ``exercise``; return the points earned, the failures and the checks run."""
    found = exercise_by_id(exercise)
    chosen = [c for c in found.checks if hidden or c.visible]
    unreachable = answer_imports.problem(found, chapter_of(exercise), namespace)
    earned, failures, notes, last_hint = 0.0, 0, None, ""
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
        earned += item.points if verdict.passed else 0
    hidden_count = len(found.checks) - len(chosen) + found.hidden_checks
    if hidden_count:
        print(f"     ({hidden_count} more checks run when your notebook is graded)")
    return earned, failures, len(chosen)
