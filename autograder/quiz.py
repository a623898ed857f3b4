"""Quizzes for points: a chapter's ``quiz_answers()`` judged question by question against the
key in ``solutions/quizzes/<slug>.toml`` (read through :mod:`course.quiz`).

Every chapter that has a quiz gets the exercise ``quiz_<slug>`` (added to the chapter's exercises
by the registry, ``autograder/chapters/__init__.py``): a visible check of no points that every
question has one of its letters, which the check cell runs in either copy of the course, and one
hidden check of a point per question, which grading runs with the key. A wrong or missing answer's
hint, seen in the feedback on a graded notebook, names the question, the mistake behind the choice
(the key's note on it), the right letter and why. The learners' copy holds no key: there the
exercise has the visible check alone and counts the questions' checks as hidden ones.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

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


NOT_A_DICT = "quiz_answers() should return a dict of question number -> letter, got {got!r}"


def _unanswered(question: quiz.Question, value) -> str:
    """Why ``value`` is no answer to ``question`` (no answer, or not one of its letters), or ""."""
    about = f"question {question.number}"
    if value is None:
        return f'{about} has no answer: add {question.number}: "a" (or another letter) to the dict'
    letter = quiz.normalise(value)
    if letter is None or letter not in question.letters:
        return f"{about}: {value!r} is not one of the letters {', '.join(question.letters)}"
    return ""


def _judge_answered(questions: tuple[quiz.Question, ...]):
    @judges_value
    def judge_answered(probe, got) -> Verdict:
        if not isinstance(got, dict):
            return Verdict(False, NOT_A_DICT.format(got=got))
        problems = [p for p in (_unanswered(q, _answer(got, q.number)) for q in questions) if p]
        return Verdict(not problems, "; ".join(problems))

    return judge_answered


def _judge(question: quiz.Question):
    @judges_value
    def judge_answer(probe, got) -> Verdict:
        if not isinstance(got, dict):
            return Verdict(False, NOT_A_DICT.format(got=got))
        value = _answer(got, question.number)
        letter = quiz.normalise(value)
        if letter == question.answer:
            return Verdict(True)
        answer = f"The answer is {question.answer}: {question.why}"
        problem = _unanswered(question, value)
        if problem:
            return Verdict(False, f"{problem}. {answer}")
        note = quiz.note(question, letter)  # the mistake behind this choice, where the key names it
        said = (f"question {question.number}: {letter} is not right:", note, answer)
        return Verdict(False, " ".join(part for part in said if part))

    return judge_answer


def exercise(slug: str) -> Exercise | None:
    """The quiz of chapter ``slug`` as an exercise (None when the chapter has no quiz)."""
    if not quiz.has_quiz(slug):
        return None
    grade_id = f"quiz_{slug}"
    questions = quiz.questions(slug)
    answered = Check(
        "answered",
        0,
        f"quiz_answers() gives each of the {len(questions)} questions one of its letters",
        _probe,
        _judge_answered(questions),
        visible=True,
    )
    if not quiz.has_key(slug):  # the learners' copy: the questions are judged where the key is, at grading
        return Exercise(grade_id, DEFINES, [answered], hidden_checks=len(questions))
    checks = [answered, *(Check(f"q{q.number}", 1, f"question {q.number}", _probe, _judge(q)) for q in questions)]
    requirements = [  # one per question, from the key, so that no chapter's list is kept by hand
        Requirement("quiz_answers() returns a dict of question number -> letter", tuple(c.name for c in checks)),
        *(Requirement(f"question {q.number}: the right one of its letters", (f"q{q.number}",)) for q in questions),
    ]
    return Exercise(grade_id, DEFINES, checks, requirements)


def key(slug: str) -> dict[int, str]:
    """The right answers of chapter ``slug``'s quiz, as a ``quiz_answers()`` would return them."""
    if not quiz.has_key(slug):
        raise FileNotFoundError(f"solutions/quizzes/{slug}.toml is the instructor's: this copy of the course lacks it")
    return {q.number: q.answer for q in quiz.questions(slug)}


TEXT_FILES = (".py", ".toml", ".json", ".ipynb", ".md", ".txt", ".yml", ".yaml", ".html", ".csv")


def _secrets(slug: str) -> dict[str, str]:
    """What of chapter ``slug``'s key would give its answers away, by what it is: each explanation and
    each note on a choice, and the answers as a ``quiz_answers()`` returns them in the solution."""
    found = {}
    for q in quiz.questions(slug):
        found[f"question {q.number}'s explanation"] = q.why
        found |= {f"question {q.number}'s note on {letter}": text for letter, text in q.notes.items()}
    as_code = "{" + ", ".join(f'{n}: "{letter}"' for n, letter in key(slug).items()) + "}"
    return found | {"the answers as code": as_code, "the answers as code, in JSON": json.dumps(as_code)[1:-1]}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _strings(value) -> str:
    """The text of a JSON document (a notebook's cells and outputs): its strings, a list of strings
    (a notebook's lines) joined as they are, the rest with spaces."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        joiner = "" if all(isinstance(v, str) for v in value) else " "
        return joiner.join(_strings(v) for v in value)
    if isinstance(value, dict):
        return " ".join(_strings(v) for v in value.values())
    return ""


def _text(path: Path) -> str | None:
    """A file's text as a reader would find a key in it: JSON's strings, a gzip file's content; None
    for other than text."""
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    if path.suffix not in TEXT_FILES:
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".json", ".ipynb"):
        try:
            return text + " " + _strings(json.loads(text))
        except ValueError:
            return text
    return text


def keys_in(folder: Path) -> list[str]:
    """Where ``folder`` (a learners' copy) holds a quiz key: a ``solutions/`` file, a key's field in
    its ``data/quizzes``, or, in any of its text files (recordings unzipped), an explanation, a note
    on a choice or the answers as code of a quiz whose key this copy of the course holds."""
    folder = Path(folder)
    found = [
        f"{p.relative_to(folder).as_posix()}: the instructor's" for p in folder.glob("solutions/**/*") if p.is_file()
    ]
    for path in sorted(folder.glob("data/quizzes/*.toml")):
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("question", [])
        for number, entry in enumerate(entries, start=1):
            found += [
                f"data/quizzes/{path.name}, question {number}: {name}" for name in quiz.KEY_FIELDS if name in entry
            ]
    secrets = {
        (slug, what): _flat(text)
        for slug in (p.stem for p in sorted(quiz.KEYS.glob("*.toml")))
        for what, text in _secrets(slug).items()
    }
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "solutions" not in p.relative_to(folder).parts):
        text = _text(path)
        if text is None:
            continue
        flat, where = _flat(text), path.relative_to(folder).as_posix()
        found += [f"{where}: {what} of the {slug} quiz" for (slug, what), secret in secrets.items() if secret in flat]
    return found
