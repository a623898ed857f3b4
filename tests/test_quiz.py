"""The quizzes: every chapter has one, the seed's seven questions sit in their chapters, every
question is well formed, the widget answers each choice at once, the static renderings carry
the questions and none of the answers, and the grader's hints name wrong questions without giving the answer."""

import html

import numpy as np
import pytest

from autograder import quiz as graded
from autograder.chapters import CHAPTERS
from autograder.selfcheck import run_in_process
from course import paths, quiz

from conftest import chapter_cases

SLUGS = [paths.slug(source) for source in paths.chapter_sources()]
SEED = [  # the tutorial's seven questions, by the words that identify them: each chapter's SEED_QUESTIONS
    (slug, words) for slug, found in chapter_cases("SEED_QUESTIONS").items() for words in found
]


@pytest.mark.parametrize("slug", SLUGS)
def test_every_chapter_has_a_quiz_of_four_to_eight_questions(slug):
    questions = quiz.questions(slug)
    assert 4 <= len(questions) <= 8
    for q in questions:
        assert q.answer in q.letters and len(set(q.choices)) == len(q.choices) >= 3
        assert q.why and q.see and set(q.notes) <= set(q.letters) - {q.answer}
    assert len({q.answer for q in questions}) >= 3, "answers spread over the letters, so that guessing one fails"


@pytest.mark.parametrize("slug, words", SEED)
def test_the_seeds_questions_are_in_their_chapters(slug, words):
    assert len(SEED) == 7 and any(words in q.prompt for q in quiz.questions(slug))


def test_a_bad_quiz_file_is_refused_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(quiz, "QUIZZES", tmp_path)
    (tmp_path / "broken.toml").write_text('[[question]]\nprompt = "?"\nchoices = ["x", "y"]\nanswer = "c"\nwhy = "."\n')
    with pytest.raises(ValueError, match="broken.toml, question 1"):
        quiz.questions("broken")
    (tmp_path / "short.toml").write_text('[[question]]\nprompt = "?"\nchoices = ["x", "y"]\n')
    with pytest.raises(ValueError, match="lacks answer, why"):
        quiz.questions("short")


def test_choices_are_read_leniently():
    assert [quiz.normalise(v) for v in ("b", " B ", "(c)", "d)", "a.", "bb", "", 2, None)] == [
        "b",
        "b",
        "c",
        "d",
        "a",
        None,
        None,
        None,
        None,
    ]


def test_feedback_says_right_or_not_and_explains():
    q = quiz.questions("speculative_decoding")[3]  # alpha 0.8, k 4: 3.36
    right, text = quiz.feedback(q, q.answer)
    assert right and text.startswith("Right.") and q.why in text
    wrong, text = quiz.feedback(q, "b")
    assert not wrong and text.startswith("Not quite.") and q.notes["b"] in text and q.why in text


@pytest.mark.parametrize("slug", SLUGS)
def test_plain_text_and_html_carry_every_question_and_no_answer(slug):
    """Where no widget runs (papermill, a static view) the renderings sit above the graded answer
    cell: the questions and their choices, never the answers, their explanations or the notes."""
    questions = quiz.questions(slug)
    text, page = quiz.as_text(slug), quiz.as_html(slug)
    flat = " ".join(text.split())
    for q in questions:
        assert " ".join(f"{q.number}. {q.prompt}".split()) in flat and html.escape(q.prompt) in page
        for letter, choice in zip(q.letters, q.choices, strict=True):
            assert " ".join(f"{letter}) {choice}".split()) in flat and html.escape(choice) in page
        for secret in (q.why, *q.notes.values()):
            assert secret not in flat and html.escape(secret) not in page
        assert f"{q.number}. {q.answer}) " not in text  # no key line: a choice's letter follows its indent
    assert "Answers" not in text and "<details>" not in page
    assert " ".join(quiz.WITHOUT_WIDGETS.split()) in flat and html.escape(quiz.WITHOUT_WIDGETS) in page
    assert text.startswith(f"Quiz: {len(questions)} questions.") and flat.endswith(" ".join(q.choices[-1].split()))


def test_the_widget_answers_each_choice_at_once():
    box, chosen = quiz.build("lora")
    rows = box.children[:-1]
    assert len(rows) == len(quiz.questions("lora"))
    first = quiz.questions("lora")[0]
    buttons = rows[0].children[1].children
    assert [b.description for b in buttons] == list(first.letters)
    wrong = next(b for b in buttons if b.description != first.answer)
    wrong.click()
    assert wrong.button_style == "danger" and "Not quite." in rows[0].children[2].value
    right = next(b for b in buttons if b.description == first.answer)
    right.click()
    assert right.button_style == "success" and wrong.button_style == "" and "Right." in rows[0].children[2].value
    assert chosen == {1: first.answer}
    assert "1 of 6 answered, 1 right" in box.children[-1].value and f"{{1: &quot;{first.answer}&quot;}}" in (
        box.children[-1].value
    )


def test_show_leaves_html_and_text_for_front_ends_without_widgets(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append((objs, kw)))
    quiz.show("distillation")
    (bundle,), kw = shown[0]
    assert kw.get("raw") and "model_id" in bundle["application/vnd.jupyter.widget-view+json"]
    assert bundle["text/html"] == quiz.as_html("distillation") and bundle["text/plain"] == quiz.as_text("distillation")


# --- graded ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", SLUGS)
def test_every_chapter_grades_its_quiz(slug):
    chapter = next(name for name in CHAPTERS if paths.slug(name) == slug)
    exercise = CHAPTERS[chapter][-1]
    assert exercise.grade_id == f"quiz_{slug}" and exercise.points == len(quiz.questions(slug))
    key = graded.key(slug)
    verdicts = [run_in_process(c, {"quiz_answers": lambda: key}, 0) for c in exercise.checks]
    assert all(v.passed for v in verdicts)


def _verdicts(slug, answers):
    exercise = graded.exercise(slug)
    return [run_in_process(c, {"quiz_answers": lambda: answers}, 0) for c in exercise.checks]


def test_a_wrong_answer_is_named_without_giving_the_answer_away():
    questions = quiz.questions("speculative_decoding")
    answers = graded.key("speculative_decoding")
    wrong = next(letter for letter in questions[2].letters if letter != questions[2].answer)
    answers[3] = wrong
    verdicts = _verdicts("speculative_decoding", answers)
    assert [v.passed for v in verdicts] == [True, True, False, True, True, True]
    hint = verdicts[2].hint
    assert hint.startswith(f"question 3: {wrong} is not the best answer") and questions[2].see in hint
    right = questions[2].choice(questions[2].answer)
    assert right not in hint and f" {questions[2].answer} " not in hint and f"{questions[2].answer})" not in hint


def test_answers_in_other_spellings_count_and_bad_ones_are_explained():
    key = graded.key("flash_attention")
    spelt = {f"q{n}" if n % 2 else str(n): f"({letter.upper()})" for n, letter in key.items()}
    assert all(v.passed for v in _verdicts("flash_attention", spelt))
    missing = _verdicts("flash_attention", {1: key[1]})
    assert "question 2 has no answer" in missing[1].hint
    strange = _verdicts("flash_attention", {**key, 1: "z", 2: 3})
    assert "'z' is not one of the letters a, b, c, d" in strange[0].hint and "'3'" in strange[1].hint
    not_a_dict = run_in_process(graded.exercise("flash_attention").checks[0], {"quiz_answers": lambda: ["a"]}, 0)
    assert "return a dict of question number -> letter" in not_a_dict.hint


def test_blank_quiz_is_not_answered_yet():
    def quiz_answers():
        raise NotImplementedError()

    verdict = run_in_process(graded.exercise("lora").checks[0], {"quiz_answers": quiz_answers}, 0)
    assert "not answered yet" in verdict.hint


def test_the_grader_tells_chapters_apart_although_every_quiz_defines_quiz_answers():
    from autograder import notebook

    cells = [
        {"cell_type": "code", "source": "def quiz_answers():\n    return {}\n"},
        {"cell_type": "code", "source": "def kv_cache_bytes(*a):\n    return 0\n"},
    ]
    assert notebook.identify({"cells": cells}, paths.ROOT / "mine.ipynb")[0] == "04_kv_cache"
    with pytest.raises(notebook.NotebookError, match="cannot tell which chapter"):
        notebook.identify({"cells": cells[:1]}, paths.ROOT / "mine.ipynb")


def test_probes_need_no_inputs():
    probe = graded.exercise("lora").checks[0].probe(np.random.default_rng(0))
    assert probe["call"] == "quiz_answers" and probe["scenario"] is graded.choices_of
