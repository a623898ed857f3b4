"""The chapters the grader knows, read off the chapter list that the release builds from
(:func:`course.paths.chapter_sources`): the checks of ``solutions/NN_<slug>.py`` are the
``EXERCISES`` of ``autograder/chapters/<slug>.py``, in notebook order, then the chapter's quiz
(``autograder/quiz.py``) when ``data/quizzes/<slug>.toml`` exists."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from autograder import quiz
from autograder.checks import Exercise
from course import paths


def _exercises(slug: str) -> list[Exercise]:
    exercises = list(importlib.import_module(f"{__name__}.{slug}").EXERCISES)
    return exercises + [e for e in [quiz.exercise(slug)] if e is not None]


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
