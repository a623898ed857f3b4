"""Each chapter's multiple-choice quiz: questions as data, a widget that answers every choice the
moment it is made, and renderings of the questions alone where no widget can run (the answers
stay with the widget and the graded check).

The questions live in ``data/quizzes/<slug>.toml``, one ``[[question]]`` table each: ``prompt``,
``choices`` (lettered a, b, c, ... in order), ``answer`` (a letter), ``why`` (the explanation shown
after any choice), ``see`` (where the chapter shows it) and optional ``notes`` (letter -> why that
tempting choice is wrong, shown by the widget and by the graded check of ``quiz_answers()``). A
worked example: for chapter 6's "p = (0.5, 0.5), q = (0.9, 0.1): alpha?", choosing ``a`` shows
"Not quite.", the note on ``a`` (0.1 is the second token's overlap alone) and the explanation,
0.5 + 0.1 = 0.6; choosing ``c`` shows "Right." and the same explanation.

Graded answers go through ``quiz_answers()`` in the chapter (checked by ``autograder.quiz``).
Not handled: questions with several right answers, free-text answers, images in questions.
"""

from __future__ import annotations

import functools
import html
import re
import textwrap
import tomllib
from dataclasses import dataclass, field

from course import paths

QUIZZES = paths.DATA / "quizzes"
LETTERS = "abcdefgh"


@dataclass(frozen=True)
class Question:
    number: int  # 1-based, as the learner's quiz_answers() keys it
    prompt: str
    choices: tuple[str, ...]
    answer: str  # the right choice's letter
    why: str
    see: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def letters(self) -> str:
        return LETTERS[: len(self.choices)]

    def choice(self, letter: str) -> str:
        return self.choices[self.letters.index(letter)]


def _question(number: int, entry: dict, source: str) -> Question:
    where = f"{source}, question {number}"
    missing = {"prompt", "choices", "answer", "why"} - set(entry)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(sorted(missing))}")
    choices = tuple(entry["choices"])
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"{where} has {len(choices)} choices; give 2 to {len(LETTERS)}")
    question = Question(
        number,
        entry["prompt"],
        choices,
        entry["answer"],
        entry["why"],
        entry.get("see", ""),
        dict(entry.get("notes", {})),
    )
    if question.answer not in question.letters or set(question.notes) - set(question.letters):
        raise ValueError(f"{where}: the answer and the notes' keys must be among {', '.join(question.letters)}")
    return question


def has_quiz(slug: str) -> bool:
    return (QUIZZES / f"{slug}.toml").is_file()


@functools.cache
def questions(slug: str) -> tuple[Question, ...]:
    """The quiz of chapter ``slug`` (``lora``), in order; ValueError naming the flaw in a bad file."""
    path = paths.require(QUIZZES / f"{slug}.toml")
    entries = tomllib.loads(path.read_text())["question"]
    return tuple(_question(number, entry, path.name) for number, entry in enumerate(entries, start=1))


def normalise(choice) -> str | None:
    """A learner's choice as a lower-case letter: ``"B"``, ``" b) "``, ``"(b)"`` -> ``"b"``; None if it is not one."""
    if not isinstance(choice, str):
        return None
    found = re.fullmatch(r"\s*\(?\s*([A-Ha-h])\s*[).:]?\s*", choice)
    return found.group(1).lower() if found else None


def note(question: Question, letter: str) -> str:
    """Why ``letter``, a wrong choice, tempts and fails, where the quiz file says so (else ""): what
    the widget shows beside the explanation, and the graded check beside its hint."""
    return "" if letter == question.answer else question.notes.get(letter, "")


def feedback(question: Question, letter: str) -> tuple[bool, str]:
    """Whether ``letter`` is right, and what to show: the verdict, a note on that choice, the explanation."""
    right = letter == question.answer
    verdict = "Right." if right else "Not quite."
    return right, " ".join(part for part in (verdict, note(question, letter), question.why) if part)


def _choices_text(question: Question, indent: str = "   ") -> list[str]:
    return [
        textwrap.fill(f"{letter}) {text}", 96, initial_indent=indent, subsequent_indent=indent + "   ")
        for letter, text in zip(question.letters, question.choices, strict=True)
    ]


WITHOUT_WIDGETS = (
    "In JupyterLab or Colab each choice is answered as you make it. Here, put your choices in "
    "quiz_answers() below: its check names each wrong answer and the section that explains it."
)


def as_text(slug: str) -> str:
    """The quiz as plain text: the questions with their choices, and no answers (the graded check
    under ``quiz_answers()`` names the wrong ones without giving them away)."""
    quiz = questions(slug)
    lines = [f"Quiz: {len(quiz)} questions.", textwrap.fill(WITHOUT_WIDGETS, 96), ""]
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
        f"<div><p><b>Quiz: {len(quiz)} questions.</b> {html.escape(WITHOUT_WIDGETS)}</p>"
        + "".join(_question_html(q) for q in quiz)
        + "</div>"
    )


def progress(slug: str, chosen: dict[int, str]) -> str:
    """The line under the widget: how many answered and right, and the choices as code to paste."""
    quiz = questions(slug)
    right = sum(chosen.get(q.number) == q.answer for q in quiz)
    as_code = "{" + ", ".join(f'{n}: "{chosen[n]}"' for n in sorted(chosen)) + "}"
    return f"{len(chosen)} of {len(quiz)} answered, {right} right. Your choices as code: {as_code}"


def build(slug: str):
    """The quiz widget (an ipywidgets VBox) and the dict of choices it fills: question number -> letter.

    Each question is its text, one small button per letter and a line of feedback; only core
    controls and ``on_click`` are used, which ipywidgets 7 (Colab) and 8 both have.
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
            button.button_style = "success" if right else "danger"
            colour = "#2e7d32" if right else "#c62828"
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
