"""The chapters the grader knows, read off the chapter list that the release builds from
(:func:`course.paths.chapter_sources`): the checks of ``solutions/NN_<slug>.py`` are the
``EXERCISES`` of ``autograder/chapters/<slug>.py``, in notebook order, each with its hidden checks
and its coverage table from ``autograder/hidden/<slug>.py`` appended (the instructor's; the
learners' copy leaves that module out and knows only how many hidden checks each exercise has),
then the chapter's quiz (``autograder/quiz.py``) when ``data/quizzes/<slug>.toml`` exists."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from autograder import quiz
from autograder.checks import Exercise
from course import paths, withheld


def _exercises(slug: str) -> list[Exercise]:
    declared = importlib.import_module(f"{__name__}.{slug}").EXERCISES
    hidden, counts = hidden_module(slug), withheld.hidden_checks()
    exercises = []
    for exercise in declared:
        if hidden:
            checks, requirements = (
                hidden.HIDDEN.get(exercise.grade_id, []),
                hidden.REQUIREMENTS.get(exercise.grade_id, []),
            )
            exercise = with_hidden(exercise, checks, requirements)
        elif exercise.grade_id in counts:  # the learners' copy: how many were left out
            exercise = dataclasses.replace(exercise, hidden_checks=counts[exercise.grade_id])
        exercises.append(exercise)
    return exercises + [e for e in [quiz.exercise(slug)] if e is not None]


def hidden_module(slug: str):
    """The chapter's hidden checks module, ``autograder/hidden/<slug>.py``: None in the learners' copy,
    which leaves it out, and for a chapter whose hidden checks still sit among its visible ones."""
    return None if withheld.in_learners_copy() else withheld.optional_module(f"autograder.hidden.{slug}")


def with_hidden(exercise: Exercise, checks: list, requirements: list) -> Exercise:
    """``exercise`` with the hidden ``checks`` after its own and the coverage table ``requirements``."""
    return Exercise(
        exercise.grade_id,
        exercise.defines,
        [*exercise.checks, *checks],
        [*exercise.requirements, *requirements],
        exercise.builds_on,
    )


def _registry() -> dict[str, list[Exercise]]:
    """Chapter name (``03_quantization``) -> its exercises, for every chapter the release builds."""
    return {source.stem: _exercises(paths.slug(source)) for source in paths.chapter_sources()}


CHAPTERS: dict[str, list[Exercise]] = _registry()


def class_file_writers() -> dict[str, Callable]:
    """Chapter -> what it writes beside a class's gradebook, for the chapters whose checks module
    has a ``write_class_files(out, graded)`` (chapter 9's leaderboard): ``graded`` are the pairs
    (learner, report) of the chapter's submissions."""
    modules = {chapter: importlib.import_module(f"{__name__}.{paths.slug(chapter)}") for chapter in CHAPTERS}
    return {
        chapter: module.write_class_files for chapter, module in modules.items() if hasattr(module, "write_class_files")
    }


def reported_figures(chapter: str, submitted: dict) -> dict:
    """What the submitted notebook's own outputs report, for the chapters whose checks module has a
    ``reported(submitted)`` (chapter 9's measured speed-up): plain data shown beside the grade and
    never graded, since the file can say anything. {} where there is none or it cannot be read."""
    module = importlib.import_module(f"{__name__}.{paths.slug(chapter)}")
    read = getattr(module, "reported", None)
    try:
        return read(submitted) if read else {}
    except Exception:  # a hostile or broken file: nothing reported, and grading goes on
        return {}


def exercises(chapter: str) -> list[Exercise]:
    """The exercises of ``chapter`` (``05_flash_attention``), hidden checks included where this copy
    has them; none for a name that is not a chapter. The one list that the release, the grader, the
    check cells and the learners' copy read."""
    return CHAPTERS.get(chapter, [])


def exercise_by_id(grade_id: str) -> Exercise:
    """The exercise whose answer cell has ``grade_id``, in any chapter."""
    return next(e for e in CHAPTERS[chapter_of(grade_id)] if e.grade_id == grade_id)


def chapter_of(grade_id: str) -> str:
    """The chapter (``05_flash_attention``) whose notebook has the answer cell ``grade_id``."""
    for chapter, exercises in CHAPTERS.items():
        if any(exercise.grade_id == grade_id for exercise in exercises):
            return chapter
    known = ", ".join(e.grade_id for exercises in CHAPTERS.values() for e in exercises)
    raise KeyError(f"no exercise {grade_id!r}; known: {known}")
