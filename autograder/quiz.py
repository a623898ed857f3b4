"""Quizzes for points: a chapter's ``quiz_answers()`` judged question by question against the
answer key in ``data/quizzes/<slug>.toml`` (read through :mod:`course.quiz`).

Every chapter that has a quiz gets the exercise ``quiz_<slug>`` (added to the chapter's exercises
by the registry, ``autograder/chapters/__init__.py``), one point per question. A wrong answer's
hint names the question, the quiz's note on that choice where it has one, and the part of the
chapter to reread, never the right letter.
"""

from __future__ import annotations

from autograder.checks import Check, Exercise, Requirement, Verdict, judges_value
from course import quiz

DEFINES = ("quiz_answers",)


def choices_of(quiz_answers):
    """The scenario (run in the sandbox, see checks.scenario_source): call the learner's
    ``quiz_answers()`` and bring its dict back as plain data, keys and values as strings."""
    chosen = quiz_answers()
    if not isinstance(chosen, dict):
        raise TypeError(
            f"quiz_answers() returned {type(chosen).__name__}; return a dict of question number -> letter, "
            'like {1: "b", 2: "d"}'
        )
    return {str(key): value if isinstance(value, str) else repr(value)[:40] for key, value in chosen.items()}


def _probe(rng) -> dict:
    return {"call": "quiz_answers", "scenario": choices_of}


def _answer(got: dict, number: int):
    """The learner's answer to question ``number``, keyed ``1``, ``"1"`` or ``"q1"``."""
    for key, value in got.items():
        if key.strip().lower().lstrip("q").strip() == str(number):
            return value
    return None


def _judge(question: quiz.Question):
    @judges_value
    def judge_answer(probe, got) -> Verdict:
        about = f"question {question.number}"
        if not isinstance(got, dict):
            return Verdict(False, f"quiz_answers() should return a dict of question number -> letter, got {got!r}")
        value = _answer(got, question.number)
        if value is None:
            return Verdict(False, f'{about} has no answer: add {question.number}: "a" (or another letter) to the dict')
        letter = quiz.normalise(value)
        if letter is None or letter not in question.letters:
            return Verdict(False, f"{about}: {value!r} is not one of the letters {', '.join(question.letters)}")
        if letter == question.answer:
            return Verdict(True)
        note = quiz.note(question, letter)  # why this tempting choice fails, where the quiz says: no letter given
        if note:
            then = (
                f'Reread "{question.see}", or try it in the quiz above' if question.see else "Try it in the quiz above"
            )
            return Verdict(False, f"{about}: {letter} is not the best answer: {note} {then}")
        where = f'; reread "{question.see}"' if question.see else ""
        return Verdict(False, f"{about}: {letter} is not the best answer{where}, or try it in the quiz above")

    return judge_answer


def exercise(slug: str) -> Exercise | None:
    """The quiz of chapter ``slug`` as an exercise (None when the chapter has no quiz)."""
    if not quiz.has_quiz(slug):
        return None
    grade_id = f"quiz_{slug}"
    questions = quiz.questions(slug)
    checks = [Check(f"q{q.number}", 1, f"question {q.number}", _probe, _judge(q), visible=True) for q in questions]
    requirements = [  # one per question, from the answer key, so that no chapter's list is kept by hand
        Requirement("quiz_answers() returns a dict of question number -> letter", tuple(c.name for c in checks)),
        *(
            Requirement(f"question {q.number}: one of its letters, the best answer", (f"q{q.number}",))
            for q in questions
        ),
    ]
    return Exercise(grade_id, DEFINES, checks, requirements)


def key(slug: str) -> dict[int, str]:
    """The right answers of chapter ``slug``'s quiz, as a ``quiz_answers()`` would return them."""
    return {q.number: q.answer for q in quiz.questions(slug)}
