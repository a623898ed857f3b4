"""Points that measure work (issue 55): answers that do no work earn nothing, and answers that
hard-code the visible checks' inputs earn at most a third of an exercise's points.

For every graded function or class of every chapter (the quiz aside), read from the exercise
registry (``autograder.chapters``), with the chapter's other answers the solution's:

- **trivial answers**, each of which must earn 0 points: a constant 0.0, the first argument
  returned unchanged, zeros like the first tensor argument, zeros of what the solution returns on
  the same inputs; for a class, the base layer alone (a module whose forward is the wrapped base,
  its other methods returning a copy of the base), once as it comes and once frozen;
- **a hard-coded answer**, which must earn at most a third of the exercise's points: the
  solution's output (``course.withheld.answers``) on exactly the inputs the visible checks give
  it in the learner's notebook (recorded by running those checks there, scenarios and all), and
  otherwise a constant 0.0, or in turn each trivial answer that earned points by itself (the best
  of them counts).

Points are what a submission earns: the probes are drawn as the grader draws them for a
submission (one generator of the submission's seed over the chapter's checks in order,
:func:`autograder.grade.draw_probes`), each probe calls the answer as the sandbox does (its
arguments plain data decoded afresh, a scenario run around the call: ``inside.call``), the result
goes back as plain data and the check's own judge decides. Only the sandbox is left out (the
answers here are closures, which no notebook cell could hold): ``test_in_process_points_are_the_graders``
grades the trivial answers that can be written as cells through the whole grader, and finds the
same points. Two controls keep the test able to fail: the solution earns every point this way,
and the hard-coded answer passes every visible check as the learner's check cell runs them.

Not handled: an exercise whose checks all call the answer without arguments (chapter 9's
capstone configuration, a choice made once) has nothing to hard-code, and is only tried trivially.

``python tests/test_points.py`` prints today's scores per chapter and exercise.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from autograder import grade, quiz
from autograder.chapters import CHAPTERS
from autograder.checks import Check, Exercise, Verdict, encode_probe
from autograder.sandbox import inside
from autograder.selfcheck import VISIBLE_SEED
from course import paths, plain_data, withheld

# The chapters whose points still pay for no work, each a strict expected failure: a chapter that
# becomes fixed fails this test until its line goes. None today; the scores: `python tests/test_points.py`.
NOT_FIXED: dict[str, str] = {}

SEED = 7  # the submission's seed (any other gives other random inputs; the fixed ones do not move)


class PointsForNoWork(AssertionError):
    """An answer that does no work earned points (what the chapters in NOT_FIXED are expected to raise)."""


# --- the exercises and their answers --------------------------------------------------------------


def graded(chapter: str) -> list[Exercise]:
    """The chapter's exercises, its quiz left out."""
    quizzed = quiz.exercise(paths.slug(paths.SOLUTIONS / f"{chapter}.py"))
    return [e for e in CHAPTERS[chapter] if quizzed is None or e.grade_id != quizzed.grade_id]


@functools.cache
def solution_namespace(chapter: str) -> dict:
    """The grader-setup cells and the solution cells of ``chapter``, run as grading runs answers."""
    return withheld.solution_namespace(paths.SOLUTIONS / f"{chapter}.py")


def solution(chapter: str, name: str):
    """The chapter's answer ``name``, as the course calls it (``withheld.answers``)."""
    return getattr(withheld.answers(chapter), name)


def copied(value):
    """A copy of an argument that the answer may change (a generator with the same state)."""
    if isinstance(value, torch.Generator):
        twin = torch.Generator()
        twin.set_state(value.get_state())
        return twin
    try:
        return copy.deepcopy(value)
    except Exception:  # something that cannot be copied is passed as it is
        return value


def zeros_of(value):
    """``value`` with every number, tensor and string in it zero or empty."""
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return type(value)(0)
    if isinstance(value, str):
        return ""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*map(zeros_of, value))
    if isinstance(value, (list, tuple)):
        return type(value)(map(zeros_of, value))
    if isinstance(value, dict):
        return {key: zeros_of(item) for key, item in value.items()}
    if isinstance(value, nn.Module):
        zeroed = copy.deepcopy(value)
        with torch.no_grad():
            for parameter in zeroed.parameters():
                parameter.zero_()
        return zeroed
    return None


class _Weight(nn.Module):
    """A bias-free linear layer of a weight tensor: what a layer built from a weight wraps."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone().float())

    def forward(self, x):
        return x @ self.weight.T.to(x.dtype)


def base_alone(answer: type, with_tensors: bool) -> type:
    """A class with ``answer``'s methods that does nothing but the wrapped base layer: forward is
    the base's (a layer built from a weight wraps that weight, unquantized), every other method of
    ``answer`` returns a copy of the base. ``with_tensors``: the base frozen, beside the tensors
    that ``answer`` would make on the same arguments (its parameters and buffers other than the
    base's), all zeros, each training or not as there (what an answer whose __init__ only allocates
    looks like)."""
    methods = {
        name
        for name, member in vars(answer).items()
        if callable(member) and not name.startswith("_") and name != "forward"
    }

    class BaseAlone(nn.Module):
        def __init__(self, base, *args, **kwargs):
            super().__init__()
            self.base = base if isinstance(base, nn.Module) else _Weight(base)
            if with_tensors:
                for parameter in self.base.parameters():
                    parameter.requires_grad_(False)
                wrapped = copied(base)
                made = answer(wrapped, *map(copied, args), **{k: copied(v) for k, v in kwargs.items()})
                own = (
                    {id(t) for t in [*wrapped.parameters(), *wrapped.buffers()]}
                    if isinstance(base, nn.Module)
                    else set()
                )
                for name, tensor in made.named_parameters():
                    if id(tensor) not in own and "." not in name:
                        self.register_parameter(name, nn.Parameter(torch.zeros_like(tensor), tensor.requires_grad))
                for name, tensor in made.named_buffers():
                    if id(tensor) not in own and "." not in name:
                        self.register_buffer(name, torch.zeros_like(tensor))

        def forward(self, x):
            return self.base(x)

    for name in methods:
        setattr(BaseAlone, name, lambda self, *args, **kwargs: copy.deepcopy(self.base))
    BaseAlone.__name__ = BaseAlone.__qualname__ = answer.__name__
    return BaseAlone


def _first_tensor(args: tuple, kwargs: dict):
    return next((a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)), None)


def trivial_answers(chapter: str, name: str) -> dict[str, Callable]:
    """What stands for ``name`` in each trivial answer, by a short description."""
    answer = solution(chapter, name)
    if isinstance(answer, type):
        return {
            "the base layer alone": base_alone(answer, False),
            "the base alone, frozen, beside zero tensors": base_alone(answer, True),
        }

    def constant(*args, **kwargs):
        return 0.0

    def first_argument(*args, **kwargs):
        return args[0] if args else None

    def zeros_like_first_tensor(*args, **kwargs):
        first = _first_tensor(args, kwargs)
        return 0.0 if first is None else torch.zeros_like(first)

    def zeros_of_the_result(*args, **kwargs):
        try:
            result = answer(*map(copied, args), **{k: copied(v) for k, v in kwargs.items()})
        except Exception:  # the solution's own error (a check that bad input raises) is work: none is done here
            return 0.0
        return zeros_of(result)

    return {
        "a constant 0.0": constant,
        "its first argument": first_argument,
        "zeros like its first tensor": zeros_like_first_tensor,
        "zeros of the solution's result": zeros_of_the_result,
    }


# --- hard-coding the visible checks ---------------------------------------------------------------


def fingerprint(value, depth: int = 0):
    """A hashable stand-in for an argument, equal for the same input: values equal, tensors equal
    in dtype, shape and every element, generators in their state, modules in their state, other
    objects in their attributes (an object with none stands for itself)."""
    if depth > 6:
        return ("deep", id(value))
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        return ("tensor", str(tensor.dtype), tuple(tensor.shape), tensor.view(torch.uint8).numpy().tobytes())
    if isinstance(value, torch.Generator):
        return ("generator", value.get_state().numpy().tobytes())
    if isinstance(value, nn.Module):
        return ("module", type(value).__qualname__, fingerprint(dict(value.state_dict()), depth + 1))
    if isinstance(value, (list, tuple)):
        return (type(value).__qualname__, *(fingerprint(item, depth + 1) for item in value))
    if isinstance(value, dict):
        return ("dict", *sorted((repr(k), fingerprint(v, depth + 1)) for k, v in value.items()))
    if isinstance(value, (int, float, str, bytes, type(None))):
        return (type(value).__qualname__, value)
    if hasattr(value, "__dict__"):
        return ("object", type(value).__qualname__, fingerprint(vars(value), depth + 1))
    return ("itself", id(value))


def visible_inputs(chapter: str, exercise: Exercise) -> dict[str, list[tuple[tuple, dict]]]:
    """The inputs each name of ``exercise`` gets while the learner's check cell runs its visible
    checks (seeded as there), answered by the solution: name -> [(args, kwargs)], copies."""
    seen: dict[str, list] = {name: [] for name in exercise.defines}
    namespace = dict(solution_namespace(chapter))
    for name in exercise.defines:
        answer = solution(chapter, name)

        def record(*args, _name=name, _answer=answer, **kwargs):
            seen[_name].append((tuple(map(copied, args)), {k: copied(v) for k, v in kwargs.items()}))
            return _answer(*args, **kwargs)

        namespace[name] = record
    for index, check in enumerate(c for c in exercise.checks if c.visible):
        probe = check.probe(np.random.default_rng(VISIBLE_SEED + index))
        with withheld.streams_kept(), contextlib.suppress(Exception):  # a check that the answer raises
            inside.call(namespace, encode_probe(probe))
    return seen


def hard_coded(chapter: str, name: str, inputs: list[tuple[tuple, dict]], otherwise: Callable) -> Callable:
    """``name`` answered by the solution on exactly ``inputs`` and by ``otherwise`` on any other."""
    answer = solution(chapter, name)
    known = {fingerprint((a, k)) for a, k in inputs}

    def looked_up(*args, **kwargs):
        return (answer if fingerprint((args, kwargs)) in known else otherwise)(*args, **kwargs)

    looked_up.__name__ = name
    return looked_up


# --- points, as a submission earns them -------------------------------------------------------------


def verdict(check: Check, probe: dict, namespace: dict) -> Verdict:
    """The check's judge on what its probe brings back from the answers in ``namespace``, the probe
    called as the sandbox calls it (``inside.call`` on the encoded probe) and its result sent back
    as plain data."""
    with withheld.streams_kept():
        try:
            result = {"returned": plain_data.encode(inside.call(namespace, encode_probe(probe)))}
        except Exception as error:  # the answer's own error, as the sandbox reports it
            result = inside.describe(error)
    try:
        return check.judge(probe, result)
    except Exception as error:  # as grade.judge words a result that cannot be judged
        return Verdict(False, f"the result could not be judged ({type(error).__name__}: {error})")


def earned(chapter: str, exercise: Exercise, answers: dict[str, Callable], probes: dict[str, dict]) -> tuple[int, list]:
    """The points ``exercise`` earns with ``answers`` in place of the solution's names, and the
    names of the checks passed."""
    namespace = {**solution_namespace(chapter), **answers}
    passed = [c for c in exercise.checks if verdict(c, probes[c.id], namespace).passed]
    return sum(c.points for c in passed), [c.name for c in passed]


@functools.cache
def grader_probes(chapter: str) -> dict[str, dict]:
    return grade.draw_probes(chapter, SEED)[1]


def scores(chapter: str, until_problem: bool = False) -> list[dict]:
    """Per exercise of ``chapter``: its points, the solution's (the control), each trivial answer's
    and the best hard-coded answer's, with the checks each passed. ``until_problem``: stop after
    the first exercise with a problem (:func:`problems`), which is all that a chapter on NOT_FIXED
    needs to show (chapter 9's model-driven checks take minutes in all)."""
    probes = grader_probes(chapter)
    rows = []
    for exercise in graded(chapter):
        names = exercise.defines
        row = {"exercise": exercise.grade_id, "points": exercise.points}
        row["solution"] = earned(chapter, exercise, {}, probes)[0]
        trivial = {name: trivial_answers(chapter, name) for name in names}
        kinds = list(trivial[names[0]])
        row["trivial"] = {
            kind: earned(chapter, exercise, {name: trivial[name][kind] for name in names}, probes) for kind in kinds
        }
        row["hard_coded"] = None
        inputs = visible_inputs(chapter, exercise)
        if any(args or kwargs for name in names for args, kwargs in inputs[name]):
            best = (-1, [], "")
            # otherwise a constant, or a trivial answer that earned points itself (the others fall back
            # to a wrong value as the constant does: each more is a run of every check, minutes in all)
            for kind in [kinds[0], *(k for k in kinds[1:] if row["trivial"][k][0])]:
                answers = {name: hard_coded(chapter, name, inputs[name], trivial[name][kind]) for name in names}
                points, passed = earned(chapter, exercise, answers, probes)
                best = max(best, (points, passed, kind), key=lambda found: found[0])
            row["hard_coded"] = best
            row["hard_coded_visible"] = visible_passed(chapter, exercise, answers)
        rows.append(row)
        if until_problem and problems([row]):
            break
    return rows


def visible_passed(chapter: str, exercise: Exercise, answers: dict[str, Callable]) -> bool:
    """Whether ``answers`` pass every visible check of ``exercise`` as the learner's check cell runs them."""
    namespace = {**solution_namespace(chapter), **answers}
    visible = [c for c in exercise.checks if c.visible]
    rng = np.random.default_rng
    return all(verdict(c, c.probe(rng(VISIBLE_SEED + i)), namespace).passed for i, c in enumerate(visible))


def problems(rows: list[dict]) -> list[str]:
    """Each trivial answer that earned points, and each hard-coded answer that earned over a third."""
    found = []
    for row in rows:
        for kind, (points, passed) in row["trivial"].items():
            if points:
                found.append(f"{row['exercise']} as {kind}: {points}/{row['points']} ({', '.join(passed)})")
        if row["hard_coded"] and 3 * row["hard_coded"][0] > row["points"]:
            points, passed, kind = row["hard_coded"]
            found.append(
                f"{row['exercise']} hard-coded (else {kind}): {points}/{row['points']}, "
                f"over a third ({', '.join(passed)})"
            )
    return found


def chapters() -> list:
    return [
        pytest.param(
            chapter,
            marks=[pytest.mark.xfail(strict=True, raises=PointsForNoWork, reason=NOT_FIXED[chapter])]
            if chapter in NOT_FIXED
            else [],
        )
        for chapter in CHAPTERS
        if graded(chapter)
    ]


def test_the_list_of_chapters_not_fixed_names_chapters():
    assert set(NOT_FIXED) <= set(CHAPTERS), set(NOT_FIXED) - set(CHAPTERS)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("chapter", chapters())
def test_answers_that_do_no_work_earn_nothing(chapter):
    rows = scores(chapter, until_problem=chapter in NOT_FIXED)
    for row in rows:  # the controls: a failure here is this test's, not the chapter's
        assert row["solution"] == row["points"], f"the solution earns {row['solution']}/{row['points']}: {row}"
        assert row.get("hard_coded_visible", True), f"the hard-coded answer fails a visible check: {row}"
    found = problems(rows)
    if found:
        raise PointsForNoWork(f"{chapter}:\n" + "\n".join(found))


# --- the control that the points above are the grader's -----------------------------------------

CELLS = {  # trivial answers that a notebook's answer cell can hold, written as such a cell
    "a constant 0.0": "def {name}(*args, **kwargs):\n    return 0.0\n",
    "its first argument": "def {name}(*args, **kwargs):\n    return args[0] if args else None\n",
}
PLAIN = (int, float, str, list, tuple, dict, bool, type(None))


def plain(value) -> bool:
    """Whether ``value`` is plain data that ``repr`` writes as a literal (what a table in a cell holds)."""
    if isinstance(value, (list, tuple)):
        return type(value) in (list, tuple) and all(map(plain, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return type(value) in PLAIN


def hard_coded_cell(chapter: str, name: str, inputs: list[tuple[tuple, dict]]) -> str | None:
    """``name`` as a cell that returns the solution's outputs on exactly ``inputs`` and 0.0 on any
    other: a table keyed by the arguments' repr. None where an input or an output is not plain data."""
    answer, table = solution(chapter, name), {}
    for args, kwargs in inputs:
        result = answer(*map(copied, args), **{k: copied(v) for k, v in kwargs.items()})
        if not (plain(args) and plain(kwargs) and plain(result)):
            return None
        table[repr((list(args), sorted(kwargs.items())))] = result
    return (
        f"_KNOWN_{name} = {table!r}\n\n\ndef {name}(*args, **kwargs):\n"
        f"    return _KNOWN_{name}.get(repr((list(args), sorted(kwargs.items()))), 0.0)\n"
    )


def function_exercises(chapter: str) -> list[Exercise]:
    """The chapter's graded exercises whose names are all functions (a class's trivial answer is no cell)."""
    return [e for e in graded(chapter) if not any(isinstance(solution(chapter, n), type) for n in e.defines)]


def as_cells(chapter: str, kind: str) -> tuple[dict[str, str], dict[str, Callable]]:
    """For each function exercise of ``chapter``: its answer cell written as ``kind`` (a trivial
    answer of CELLS, or "hard-coded": a table of the visible inputs, else 0.0), and the same
    answers as this test's functions; an exercise that cannot be written so keeps the solution."""
    cells, answers = {}, {}
    for exercise in function_exercises(chapter):
        if kind in CELLS:
            cells[exercise.grade_id] = "".join(CELLS[kind].format(name=n) for n in exercise.defines)
            answers.update({name: trivial_answers(chapter, name)[kind] for name in exercise.defines})
            continue
        inputs = visible_inputs(chapter, exercise)
        written = [hard_coded_cell(chapter, name, inputs[name]) for name in exercise.defines]
        if all(written):
            cells[exercise.grade_id] = "\n\n".join(written)
            answers.update(
                {
                    name: hard_coded(chapter, name, inputs[name], trivial_answers(chapter, name)["a constant 0.0"])
                    for name in exercise.defines
                }
            )
    return cells, answers


@pytest.mark.parametrize("kind", [*sorted(CELLS), "hard-coded"])
def test_in_process_points_are_the_graders(kind, instructor_notebooks, tmp_path):
    """The chapter's function answers written as ``kind`` in its notebook's answer cells, every one at
    once, graded through the whole grader (the sandbox included) with the seed used above: each check
    passes or fails there as it does in this process. Chapter 4, converted, with answers of plain
    data (a hard-coded table in a cell), stands for the way every chapter is probed: one notebook,
    since the sandbox's start is most of the time."""
    from conftest import GENEROUS, _replace_answer

    chapter = "04_kv_cache"
    cells, answers = as_cells(chapter, kind)
    assert cells, f"no answer of {chapter} can be written as {kind}"
    notebook = json.loads(instructor_notebooks[chapter].read_text())
    for grade_id, source in cells.items():
        _replace_answer(notebook, grade_id, source)
    path = tmp_path / f"{chapter}.ipynb"
    path.write_text(json.dumps(notebook))
    report = grade.grade(path, GENEROUS, SEED)
    there = {t.id: t.passed for t in report.tests}
    namespace, probes = {**solution_namespace(chapter), **answers}, grader_probes(chapter)
    checks = [c for e in graded(chapter) for c in e.checks]
    here = {c.id: verdict(c, probes[c.id], namespace).passed for c in checks}
    assert here == {i: there[i] for i in here}, report.text()
    if kind == "hard-coded":  # the control has both outcomes to agree on
        assert any(here.values()) and not all(here.values()), here


def main() -> None:
    """Print today's scores per chapter and exercise."""
    for chapter in CHAPTERS:
        rows = scores(chapter)
        if not rows:
            continue
        total = sum(r["points"] for r in rows)
        nothing = sum(max(p for p, _ in r["trivial"].values()) for r in rows)
        coded = sum((r["hard_coded"] or (max(p for p, _ in r["trivial"].values()),))[0] for r in rows)
        print(f"{chapter}: do-nothing {nothing}/{total}, hard-coded {coded}/{total} ({100 * coded / total:.0f}%)")
        for r in rows:
            best = max(r["trivial"].items(), key=lambda item: item[1][0])
            hard = r["hard_coded"]
            print(
                f"  {r['exercise']:<28} {r['points']:>2} pts  solution {r['solution']}  trivial {best[1][0]} "
                f"({best[0]}: {', '.join(best[1][1]) or '-'})  hard-coded "
                + (f"{hard[0]} ({', '.join(hard[1]) or '-'})" if hard else "n/a")
            )


if __name__ == "__main__":
    main()
