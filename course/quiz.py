"""Each chapter's multiple-choice quiz: questions as data, a widget that answers each choice the
moment it is made (or records it, where the key is not at hand), and renderings of the questions
alone where no widget can run.

The questions live in ``data/quizzes/<slug>.toml``, one ``[[question]]`` table each: ``prompt``,
``choices`` (lettered a, b, c, ... in order) and ``see`` (where the chapter shows it). The key is
the instructor's, in ``solutions/quizzes/<slug>.toml``, one ``[[question]]`` table per question in
the same order: ``answer`` (a letter), ``why`` (the explanation) and ``notes`` (letter -> the
mistake behind that wrong choice). The learners' copy has no ``solutions/``, so it ships no key:
there the widget records each choice and says where the chapter explains it, and the grader, which
has the key, grades ``quiz_answers()`` and gives the answer and the why in the feedback. In the
course's own repository (the self-study copy) the widget answers each choice at once. A worked
example: for chapter 6's "p = (0.5, 0.5), q = (0.9, 0.1): alpha?", choosing ``a`` there shows
"Not quite.", the note on ``a`` (0.05 multiplies the overlaps, alpha adds them) and the
explanation, 0.5 + 0.1 = 0.6; choosing ``d`` shows "Right." and the same explanation.

Graded answers go through ``quiz_answers()`` in the chapter (checked by ``autograder.quiz``).
Not handled: questions with several right answers, free-text answers, images in questions.
"""

from __future__ import annotations

import functools
import html
import re
import textwrap
import tomllib
from dataclasses import dataclass, field, replace

from course import paths

QUIZZES = paths.DATA / "quizzes"
KEYS = paths.SOLUTIONS / "quizzes"  # the instructor's: the learners' copy has no solutions/
LETTERS = "abcdefgh"
KEY_FIELDS = ("answer", "why", "notes")


@dataclass(frozen=True)
class Question:
    number: int  # 1-based, as the learner's quiz_answers() keys it
    prompt: str
    choices: tuple[str, ...]
    see: str = ""
    answer: str | None = None  # the right choice's letter; None where the key is not at hand
    why: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def letters(self) -> str:
        return LETTERS[: len(self.choices)]

    def choice(self, letter: str) -> str:
        return self.choices[self.letters.index(letter)]


def _question(number: int, entry: dict, key: dict | None, source: str, key_source: str) -> Question:
    where = f"{source}, question {number}"
    missing = {"prompt", "choices"} - set(entry)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(sorted(missing))}")
    leaked = [name for name in KEY_FIELDS if name in entry]
    if leaked:
        raise ValueError(
            f"{where} holds {', '.join(leaked)}: the key goes in {key_source}, which the learners' copy leaves out"
        )
    choices = tuple(entry["choices"])
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"{where} has {len(choices)} choices; give 2 to {len(LETTERS)}")
    question = Question(number, entry["prompt"], choices, entry.get("see", ""))
    if key is None:
        return question
    where = f"{key_source}, question {number}"
    missing = {"answer", "why"} - set(key)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(sorted(missing))}")
    question = replace(question, answer=key["answer"], why=key["why"], notes=dict(key.get("notes", {})))
    if question.answer not in question.letters or set(question.notes) - set(question.letters):
        raise ValueError(f"{where}: the answer and the notes' keys must be among {', '.join(question.letters)}")
    return question


def has_quiz(slug: str) -> bool:
    return (QUIZZES / f"{slug}.toml").is_file()


def has_key(slug: str) -> bool:
    """Whether this copy of the course holds the key of chapter ``slug``'s quiz (the learners' copy does not)."""
    return (KEYS / f"{slug}.toml").is_file()


@functools.cache
def questions(slug: str) -> tuple[Question, ...]:
    """The quiz of chapter ``slug`` (``lora``), in order, with its key where this copy holds it
    (:func:`has_key`; else each ``answer`` is None); ValueError naming the flaw in a bad file."""
    path = paths.require(QUIZZES / f"{slug}.toml")
    entries = tomllib.loads(path.read_text(encoding="utf-8"))["question"]
    key_path = KEYS / f"{slug}.toml"
    key_source = f"solutions/quizzes/{slug}.toml"
    keys = [None] * len(entries)
    if key_path.is_file():
        keys = tomllib.loads(key_path.read_text(encoding="utf-8"))["question"]
        if len(keys) != len(entries):
            raise ValueError(f"{key_source} has {len(keys)} questions and {path.name} {len(entries)}: one key each")
    return tuple(
        _question(number, entry, key, path.name, key_source)
        for number, (entry, key) in enumerate(zip(entries, keys, strict=True), start=1)
    )


def normalise(choice) -> str | None:
    """A learner's choice as a lower-case letter: ``"B"``, ``" b) "``, ``"(b)"`` -> ``"b"``; None if it is not one."""
    if not isinstance(choice, str):
        return None
    found = re.fullmatch(r"\s*\(?\s*([A-Ha-h])\s*[).:]?\s*", choice)
    return found.group(1).lower() if found else None


def note(question: Question, letter: str) -> str:
    """Why ``letter``, a wrong choice, tempts and fails, where the key says so (else ""): what the
    widget shows beside the explanation, and the graded check beside its hint."""
    return "" if letter == question.answer else question.notes.get(letter, "")


def feedback(question: Question, letter: str) -> tuple[bool | None, str]:
    """Whether ``letter`` is right, and what to show: the verdict, a note on that choice, the
    explanation. Without the key (the learners' copy): None, and that the choice is recorded."""
    if question.answer is None:
        where = f' "{question.see}" in the chapter explains it.' if question.see else ""
        graded = "Graded when you hand in the notebook; the feedback gives the answer and why."
        return None, f"Recorded: {letter}. {graded}{where}"
    right = letter == question.answer
    verdict = "Right." if right else "Not quite."
    return right, " ".join(part for part in (verdict, note(question, letter), question.why) if part)


def _choices_text(question: Question, indent: str = "   ") -> list[str]:
    return [
        textwrap.fill(f"{letter}) {text}", 96, initial_indent=indent, subsequent_indent=indent + "   ")
        for letter, text in zip(question.letters, question.choices, strict=True)
    ]


WITHOUT_WIDGETS = {  # whether the key is at hand -> what the renderings without widgets say under "Quiz: N questions."
    True: "In JupyterLab or Colab each choice is answered as you make it. Here, put your choices in "
    'quiz_answers() below; its check says whether each question has an answer, and check("quiz_{slug}", '
    "hidden=True) in a cell of your own says which are right and why.",
    False: "In JupyterLab or Colab the quiz records each choice as you make it. Here, put your choices "
    "in quiz_answers() below; its check says whether each question has an answer, and the feedback on "
    "your graded notebook gives each answer and why.",
}


def without_widgets(slug: str) -> str:
    """What the renderings without widgets say of the quiz, in this copy of the course."""
    return WITHOUT_WIDGETS[has_key(slug)].format(slug=slug)


def as_text(slug: str) -> str:
    """The quiz as plain text: the questions with their choices, and no answers (they would sit
    above the graded answer cell)."""
    quiz = questions(slug)
    lines = [f"Quiz: {len(quiz)} questions.", textwrap.fill(without_widgets(slug), 96), ""]
    for q in quiz:
        lines.append(textwrap.fill(f"{q.number}. {q.prompt}", 96, subsequent_indent="   "))
        lines += _choices_text(q) + [""]
    return "\n".join(lines).rstrip("\n")


def _question_html(question: Question) -> str:
    items = "".join(
        f"<li><b>{letter})</b> {html.escape(text)}</li>"
        for letter, text in zip(question.letters, question.choices, strict=True)
    )
    return (
        f"<p style='margin:0.8em 0 0.2em'><b>{question.number}.</b> {html.escape(question.prompt)}</p>"
        f"<ul style='list-style:none; margin:0; padding-left:1.2em'>{items}</ul>"
    )


def as_html(slug: str) -> str:
    """The quiz as static HTML: the questions with their choices, and no answers (as :func:`as_text`)."""
    quiz = questions(slug)
    return (
        f"<div><p><b>Quiz: {len(quiz)} questions.</b> {html.escape(without_widgets(slug))}</p>"
        + "".join(_question_html(q) for q in quiz)
        + "</div>"
    )


def progress(slug: str, chosen: dict[int, str]) -> str:
    """The line under the widget: how many answered (and right, where the key is at hand), and the
    choices as code to paste."""
    quiz = questions(slug)
    as_code = "{" + ", ".join(f'{n}: "{chosen[n]}"' for n in sorted(chosen)) + "}"
    answered = f"{len(chosen)} of {len(quiz)} answered"
    if has_key(slug):
        answered += f", {sum(chosen.get(q.number) == q.answer for q in quiz)} right"
    return f"{answered}. Your choices as code: {as_code}"


def build(slug: str):
    """The quiz widget (an ipywidgets VBox) and the dict of choices it fills: question number -> letter.

    Each question is its text, one small button per letter and a line of feedback: right or not
    and why where the key is at hand, else that the choice is recorded. Only core controls and
    ``on_click`` are used, which ipywidgets 7 (Colab) and 8 both have.
    """
    import ipywidgets as widgets

    chosen: dict[int, str] = {}
    status = widgets.HTML(value=f"<i>{html.escape(progress(slug, chosen))}</i>")
    rows = []
    for question in questions(slug):
        buttons = [
            widgets.Button(description=letter, tooltip=text, layout=widgets.Layout(width="3.2em"))
            for letter, text in zip(question.letters, question.choices, strict=True)
        ]
        reply = widgets.HTML(value="")

        def choose(button, question=question, buttons=buttons, reply=reply):
            letter = button.description
            right, message = feedback(question, letter)
            chosen[question.number] = letter
            for other in buttons:
                other.button_style = ""
            button.button_style = {True: "success", False: "danger", None: "info"}[right]
            colour = {True: "#2e7d32", False: "#c62828", None: "#1565c0"}[right]
            reply.value = f"<span style='color:{colour}'>{html.escape(message)}</span>"
            status.value = f"<i>{html.escape(progress(slug, chosen))}</i>"

        for button in buttons:
            button.on_click(choose)
        rows.append(widgets.VBox([widgets.HTML(value=_question_html(question)), widgets.HBox(buttons), reply]))
    return widgets.VBox(rows + [status]), chosen


def show(slug: str) -> None:
    """Display chapter ``slug``'s quiz: the widget, and the static HTML and text for front ends
    without widgets (GitHub's viewer, nbconvert, papermill, a terminal), which hold the questions
    only: an answer key printed under them would sit above the graded answer cell."""
    from course.plots._widgets import display_widget

    box, _ = build(slug)
    display_widget(box, {"text/html": as_html(slug), "text/plain": as_text(slug)})
