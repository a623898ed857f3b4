"""Checks: how each exercise is probed and judged, shared by the grader and the notebooks.

A :class:`Check` makes a probe (a call of the learner's function on inputs it chooses) and judges
the plain-data result against the course's reference implementation. When the answer is wrong,
the judge recomputes the common mistakes on the same inputs and names the one that matches.

The grader runs probes in a sandbox and judges here, out of the learner's reach. In a notebook,
``autograder.check`` (``selfcheck.py``) runs the same checks in the learner's own kernel.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from autograder.sandbox.memory import HINT as MEMORY_HINT
from course import plain_data, withheld


@dataclass
class Verdict:
    passed: bool
    hint: str = ""
    data: dict | None = None  # figures worth keeping beside the score (plain data), e.g. for a leaderboard


@dataclass(frozen=True)
class Check:
    """One graded test of one exercise, declared once, inside its :class:`Exercise`:

    ``Check("int4_groups", 2, "int4, groups of 16, outlier columns", probe, judge, visible=True)``

    ``name`` is short and unique within the exercise; ``points`` are what the test is worth (the
    release writes their sum into the notebook's grade cell, the README's chapter table counts them);
    ``what`` is shown to the learner; ``visible`` checks run in the learner's check cell too, the
    others only when the notebook is graded. ``probe(rng)`` returns ``{"call": name, "args": [...],
    "kwargs": {...}}`` with torch values, plus ``"scenario": function`` when the learner's function
    (or class) is driven by a function of the chapter's checks (see :func:`scenario_source`);
    ``judge(probe, result)`` gets that probe back and the decoded result (see :func:`outcome`) and
    words the hint of a failure. The exercise fills in ``exercise``, its grade_id; ``id`` is
    ``<exercise>.<name>``, as reports and gradebooks spell it.
    """

    name: str
    points: int
    what: str
    probe: Callable[[np.random.Generator], dict]
    judge: Callable[[dict, dict], Verdict]
    visible: bool = False
    exercise: str = ""

    @property
    def id(self) -> str:
        return f"{self.exercise}.{self.name}"


@dataclass(frozen=True)
class Requirement:
    """One thing an exercise's prompt asks for, and the names of the checks that test it."""

    text: str
    checks: tuple[str, ...]


@dataclass
class Exercise:
    """An answer cell: its grade_id, the names it must define, its checks, what its prompt requires
    (each requirement naming the checks that cover it) and the earlier answers it may call. Every
    fact of the exercise is here once: its points are its checks' points, its checks' ids are
    derived from its grade_id."""

    grade_id: str
    defines: tuple[str, ...]
    checks: list[Check] = field(default_factory=list)
    requirements: list[Requirement] = field(default_factory=list)
    builds_on: tuple[str, ...] = ()  # grade_ids of earlier exercises whose answers this one may call
    hidden_checks: int = 0  # in the learners' copy, which holds the visible checks only: how many were left out

    def __post_init__(self):
        self.checks = [replace(c, exercise=self.grade_id) for c in self.checks]

    @property
    def points(self) -> int:
        return sum(c.points for c in self.checks)


def builds_on_note(exercise: Exercise, helper: Exercise, failed: list[str]) -> str:
    """What to add to a failing hint of ``exercise`` when its answer calls the learner's own answer
    to ``helper`` and that answer fails the checks ``failed``."""
    return (
        f"; note: {exercise.defines[0]} calls your {helper.defines[0]}, which fails its own checks "
        f"({', '.join(failed)}): fix {helper.defines[0]} first"
    )


def scenario_source(scenario: Callable) -> dict:
    """A scenario as the sandbox gets it: its name and source. A scenario drives the learner's code
    where a plain call will not do (a class, objects that cannot travel as plain data) and reports
    plain data; it runs where the course cannot be imported, so it imports what it needs (the
    standard library, torch) inside itself and uses nothing else of its module."""
    return {"name": scenario.__name__, "source": textwrap.dedent(inspect.getsource(scenario))}


def encode_probe(probe: dict, shared: dict | None = None) -> dict:
    """``probe`` as plain data for the sandbox; with ``shared``, its large arrays go into that table
    once for every probe of a job (``plain_data.encode``), and the job carries the table."""
    return {
        "call": probe["call"],
        "scenario": scenario_source(probe["scenario"]) if probe.get("scenario") else None,
        "args": [plain_data.encode(a, shared=shared) for a in probe.get("args", [])],
        "kwargs": {k: plain_data.encode(v, shared=shared) for k, v in probe.get("kwargs", {}).items()},
    }


# --- judging helpers ---------------------------------------------------------------------------

NOT_ANSWERED = "not answered yet: replace `raise NotImplementedError()` with your code and run the cell"


def outcome(result: dict) -> tuple[object, Verdict | None]:
    """The returned value, or a failing verdict saying what happened instead."""
    if "returned" in result:
        return plain_data.decode(result["returned"]), None
    if "raised" in result:
        if result["raised"] == "NotImplementedError":
            return None, Verdict(False, NOT_ANSWERED)
        if result["raised"] == "MemoryError":
            return None, Verdict(False, f"ran out of memory (MemoryError): {MEMORY_HINT}")
        where = f" ({result['where'][-1]})" if result.get("where") else ""
        return None, Verdict(False, f"raised {result['raised']}: {result['message']}{where}")
    if "timeout" in result:
        return None, Verdict(False, f"did not finish within {result['timeout']:.0f} s: look for an endless loop")
    if "skipped" in result:
        return None, Verdict(False, f"not run: {result['skipped']}")
    if "crashed" in result:
        return None, Verdict(
            False, f"the process died while running it: {result['crashed']} (sys.exit, os._exit or a crash?)"
        )
    return None, Verdict(False, "no result came back")


def judges_value(judge: Callable[[dict, object], Verdict]) -> Callable[[dict, dict], Verdict]:
    """Turn ``judge(probe, value)`` into a check's judge of the raw result: a call that raised,
    hung or crashed fails with what happened, and ``judge`` only sees returned values."""

    @functools.wraps(judge)
    def judge_result(probe: dict, result: dict) -> Verdict:
        value, failed = outcome(result)
        return failed or judge(probe, value)

    return judge_result


def judges_tensor(what: str):
    """Like :func:`judges_value` for a returned tensor, given to ``judge`` in float64; anything
    else fails with a hint naming what came back instead of ``what``."""

    def decorate(judge: Callable[[dict, torch.Tensor], Verdict]) -> Callable[[dict, dict], Verdict]:
        @judges_value
        @functools.wraps(judge)
        def judge_value(probe: dict, value) -> Verdict:
            tensor, problem = as_tensor(value, what)
            return Verdict(False, problem) if problem else judge(probe, tensor)

        return judge_value

    return decorate


def fmt(x: float) -> str:
    return f"{x:.6g}"


def as_tensor(value, what: str) -> tuple[torch.Tensor | None, str]:
    """``value`` as a float64 tensor, or a message saying why it is not one."""
    if isinstance(value, torch.Tensor):
        return value.double(), ""
    if isinstance(value, plain_data.Opaque):
        return None, f"returned a {value.type_name}; {what} should be a torch.Tensor"
    return None, f"returned {type(value).__name__} {str(value)[:60]}; {what} should be a torch.Tensor"


def compare_tensors(
    got: torch.Tensor,
    expected: torch.Tensor,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    step: torch.Tensor | None = None,
    tie_share: float = 0.01,
) -> tuple[bool, str]:
    """Whether ``got`` matches ``expected``; a few values off by exactly one ``step`` are
    forgiven (a value on a rounding tie can go either way when computed differently)."""
    if tuple(got.shape) != tuple(expected.shape):
        return False, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    expected = expected.double()
    got = got.double()
    nan_got, nan_expected = torch.isnan(got), torch.isnan(expected)
    if not torch.equal(nan_got, nan_expected):
        where = tuple(torch.nonzero(nan_got != nan_expected)[0].tolist())
        return False, f"at {where} expected {fmt(expected[where].item())}, got {fmt(got[where].item())}"
    got, expected = got.nan_to_num(0.0), expected.nan_to_num(0.0)
    tolerance = atol + rtol * expected.abs().max().clamp(min=1e-12)
    off = (got - expected).abs() > tolerance
    if not off.any():
        return True, ""
    if step is not None:
        one_step = ((got - expected).abs() - step.double()).abs() <= tolerance + 1e-6 * step.double()
        if (off & ~one_step).sum() == 0 and off.float().mean() <= tie_share:
            return True, ""
    index = tuple(torch.nonzero(off)[0].tolist())
    return False, (
        f"{int(off.sum())} of {off.numel()} values differ; at {index} expected "
        f"{fmt(expected[index].item())}, got {fmt(got[index].item())}"
    )


def diagnose(
    got: torch.Tensor,
    expected: torch.Tensor,
    mistakes: list[tuple[str, Callable[[], torch.Tensor]]] | Callable[[], list[tuple[str, torch.Tensor]]],
    what: str = "",
    **tolerances,
) -> Verdict:
    """Pass when ``got`` matches; otherwise the first known mistake it matches, or the difference
    (prefixed by ``what``, the name of the compared value, when given). ``mistakes`` are pairs
    (hint, a function making that mistake's output), or one function returning pairs (hint,
    output): a chapter's ``MISTAKES.of_<exercise>``, one call across the line between the copies,
    asked only for an answer that does not match. While the learners' copy's release records
    (:mod:`course.withheld`), every mistake is computed, whatever ``got`` is. An answer of all zeros is
    told so first: with the mistake it matches when one gives zeros on this input too, else as
    the work never done or never returned."""
    if withheld.is_recording():  # every mistake, so that the learners' copy can name any of them
        for _, make in [] if callable(mistakes) else mistakes:
            with contextlib.suppress(ValueError, RuntimeError, ZeroDivisionError):
                make()
        if callable(mistakes):
            mistakes()
    same, difference = compare_tensors(got, expected, **tolerances)
    if same:
        return Verdict(True)
    if callable(mistakes):
        mistakes = [(hint, lambda wrong=wrong: wrong) for hint, wrong in mistakes()]
    if what:
        difference = f"{what}: {difference}"
    matched = _matching_mistake(got, expected, mistakes, tolerances)
    if got.numel() and tuple(got.shape) == tuple(expected.shape) and not got.any():
        cause = matched or "is the work done but not returned, or never done?"
        return Verdict(False, f"{what or 'the result'} is all zeros: {cause} ({difference})")
    return Verdict(False, f"{matched} ({difference})" if matched else difference)


def _matching_mistake(got, expected, mistakes, tolerances) -> str:
    """The hint of the first mistake whose output ``got`` matches ("" when none does)."""
    for hint, make in mistakes:
        try:
            wrong = make()
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue
        if tuple(wrong.shape) == tuple(got.shape) and not torch.equal(wrong.double(), expected.double()):
            if compare_tensors(got, wrong, **tolerances)[0]:
                return hint
    return ""


def number(value, what: str) -> tuple[float | None, str]:
    """``value`` as a Python float (0-d tensors accepted), or why it is not a number."""
    if isinstance(value, bool):
        return None, f"returned a bool; {what} should be a number"
    if isinstance(value, (int, float)):
        return float(value), ""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.reshape(())), ""
    if isinstance(value, plain_data.Opaque):
        return None, f"returned a {value.type_name}; {what} should be a number"
    return None, f"returned {type(value).__name__}; {what} should be a number"


def judge_number(
    got,
    expected: float,
    mistakes: list[tuple[str, float]],
    what: str,
    rel: float = 1e-6,
    abs_tol: float = 1e-9,
    python_float: bool = False,
    unit: str = "",
) -> Verdict:
    """Compare a number, naming the matching mistake when it is wrong. With ``python_float``, a
    one-element tensor fails (where the prompt asks for a Python float); otherwise it is accepted.
    With ``unit`` ("s", "GB"), a hint writes the expected and the returned number with it."""
    value, problem = number(got, what)
    if problem:
        return Verdict(False, problem)
    if python_float and isinstance(got, torch.Tensor):
        return Verdict(
            False,
            f"returned a tensor of shape {tuple(got.shape)}; {what} should be a Python float: .item() turns a "
            "one-element tensor into one",
        )
    if math.isfinite(value) and math.isclose(value, expected, rel_tol=rel, abs_tol=abs_tol):
        return Verdict(True)
    in_unit = f" {unit}" if unit else ""
    digits = next((d for d in range(6, 17) if f"{expected:.{d}g}" != f"{value:.{d}g}"), 17)  # they read apart
    seen = f"expected {expected:.{digits}g}{in_unit}, got {value:.{digits}g}{in_unit}"
    for hint, wrong in mistakes:
        if (
            math.isfinite(value)
            and not math.isclose(wrong, expected, rel_tol=rel, abs_tol=abs_tol)
            and math.isclose(value, wrong, rel_tol=rel, abs_tol=abs_tol)
        ):
            return Verdict(False, f"{hint} ({seen})")
    return Verdict(False, seen)


def judge_raises(result: dict, error: str, why: str) -> Verdict:
    """The probe must have raised ``error`` (a subclass name counts only if it is the same name)."""
    if result.get("raised") == error:
        return Verdict(True)
    if result.get("raised") == "NotImplementedError":
        return Verdict(False, NOT_ANSWERED)
    if "raised" in result:
        return Verdict(False, f"raised {result['raised']} ({result['message'][:120]}); expected {error}: {why}")
    if "returned" in result:
        return Verdict(False, f"returned a result; expected {error}: {why}")
    return outcome(result)[1] or Verdict(False, f"expected {error}")
