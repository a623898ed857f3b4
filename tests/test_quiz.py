"""The quizzes: every chapter has one, the seed's seven questions sit in their chapters, every
question is well formed and its right choice cannot be told from its form (its length, its place),
the questions' file holds no key and the key's file is the instructor's, the widget answers each
choice at once where the key is at hand and only records it where it is not, the static renderings
carry the questions and none of the answers, and the grader judges each answer with the key and
gives the answer and why in its feedback."""

import html
import json
import re
import tomllib
from collections import Counter

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
        assert q.why and q.see
        assert set(q.notes) == set(q.letters) - {q.answer}, f"question {q.number}: a note on each wrong choice"
        for note in q.notes.values():  # it names the mistake behind the choice, not only that the choice is wrong
            assert len(note.split()) >= 6 and "best answer" not in note and "not quite" not in note.lower()


def _expected_by_rank(questions, longest_first: bool) -> Counter:
    """What picking the k-th shortest choice of every question (the k-th longest with
    ``longest_first``), ties broken at random, scores on average: k -> expected points."""
    scores = Counter()
    for q in questions:
        lengths = [len(c) for c in q.choices]
        if longest_first:
            lengths = [-n for n in lengths]
        mine = lengths[q.letters.index(q.answer)]
        below, tied = sum(n < mine for n in lengths), lengths.count(mine)
        for rank in range(below, below + tied):
            scores[rank] += 1 / tied
    return scores


@pytest.mark.parametrize("slug", SLUGS)
def test_the_right_choice_cannot_be_told_by_its_length(slug):
    """The longest choice is right in at most a third of a chapter's questions (a tie for the
    longest counts as longest), and no rule "pick the k-th shortest" or "the k-th longest", ties
    broken at random, scores more than a third of the chapter's points on average."""
    questions = quiz.questions(slug)
    third = len(questions) / 3
    longest = [q.number for q in questions if len(q.choice(q.answer)) == max(map(len, q.choices))]
    assert len(longest) <= third, f"the longest choice is right in questions {longest}"
    for longest_first in (False, True):
        for rank, points in _expected_by_rank(questions, longest_first).items():
            assert points <= third + 1e-9, (rank, longest_first, points)


@pytest.mark.parametrize("slug", SLUGS)
def test_the_right_choice_cannot_be_told_by_its_place(slug):
    """No letter is right in more than half of a chapter's questions, and at least three letters
    are right somewhere, so that always answering one letter fails."""
    letters = Counter(q.answer for q in quiz.questions(slug))
    assert len(letters) >= 3 and max(letters.values()) <= len(quiz.questions(slug)) / 2, letters


@pytest.mark.parametrize("slug", SLUGS)
def test_the_questions_file_holds_no_key(slug):
    """``data/quizzes`` ships in the learners' copy: the answers, explanations and notes are in
    ``solutions/quizzes``, which does not, one key per question."""
    raw = tomllib.loads((quiz.QUIZZES / f"{slug}.toml").read_text())["question"]
    assert not [name for entry in raw for name in entry if name in quiz.KEY_FIELDS]
    key = tomllib.loads((quiz.KEYS / f"{slug}.toml").read_text())["question"]
    assert len(key) == len(raw) and quiz.has_key(slug)


@pytest.mark.parametrize("slug, words", SEED)
def test_the_seeds_questions_are_in_their_chapters(slug, words):
    assert len(SEED) == 7 and any(words in q.prompt for q in quiz.questions(slug))


def test_a_bad_quiz_file_is_refused_with_the_reason(tmp_path, monkeypatch):
    questions, keys = tmp_path / "questions", tmp_path / "keys"
    questions.mkdir(), keys.mkdir()
    monkeypatch.setattr(quiz, "QUIZZES", questions)
    monkeypatch.setattr(quiz, "KEYS", keys)
    one = '[[question]]\nprompt = "?"\nchoices = ["x", "y"]\n'
    cases = {  # name -> (the questions' file, the key's file or None, what the error says)
        "leaky": (one + 'answer = "a"\nwhy = "."\n', None, "leaky.toml, question 1 holds answer, why: the key goes in"),
        "bare": ('[[question]]\nprompt = "?"\n', None, "bare.toml, question 1 lacks choices"),
        "letter": (one, '[[question]]\nanswer = "c"\nwhy = "."\n', "letter.toml, question 1: the answer"),
        "short": (one, '[[question]]\nanswer = "a"\n', "short.toml, question 1 lacks why"),
        "count": (one, '[[question]]\nanswer = "a"\nwhy = "."\n' * 2, "has 2 questions and count.toml 1"),
    }
    for name, (text, key, message) in cases.items():
        (questions / f"{name}.toml").write_text(text)
        if key is not None:
            (keys / f"{name}.toml").write_text(key)
        with pytest.raises(ValueError, match=re.escape(message)):
            quiz.questions(name)
    (questions / "open.toml").write_text(one)  # no key: the learners' copy's case, questions without answers
    assert [(q.answer, q.why, q.notes) for q in quiz.questions("open")] == [(None, "", {})]


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


@pytest.fixture
def without_key(tmp_path, monkeypatch):
    """This copy of the course without ``solutions/quizzes``, as the learners' copy is."""
    monkeypatch.setattr(quiz, "KEYS", tmp_path)
    quiz.questions.cache_clear()
    yield
    quiz.questions.cache_clear()


def _renderings_hold_no_answer(slug, keyed):
    questions, text, page = keyed, quiz.as_text(slug), quiz.as_html(slug)
    flat = " ".join(text.split())
    for q in questions:
        assert " ".join(f"{q.number}. {q.prompt}".split()) in flat and html.escape(q.prompt) in page
        for letter, choice in zip(q.letters, q.choices, strict=True):
            assert " ".join(f"{letter}) {choice}".split()) in flat and html.escape(choice) in page
        for secret in (q.why, *q.notes.values()):
            assert secret not in flat and html.escape(secret) not in page
        assert f"{q.number}. {q.answer}) " not in text  # no key line: a choice's letter follows its indent
    assert "Answers" not in text and "<details>" not in page
    said = quiz.without_widgets(slug)
    assert " ".join(said.split()) in flat and html.escape(said) in page
    assert text.startswith(f"Quiz: {len(questions)} questions.") and flat.endswith(" ".join(q.choices[-1].split()))


@pytest.mark.parametrize("slug", SLUGS)
def test_plain_text_and_html_carry_every_question_and_no_answer(slug):
    """Where no widget runs (papermill, a static view) the renderings sit above the graded answer
    cell: the questions and their choices, never the answers, their explanations or the notes."""
    _renderings_hold_no_answer(slug, quiz.questions(slug))
    assert f'check("quiz_{slug}", hidden=True)' in quiz.without_widgets(slug)


def test_without_the_key_the_quiz_still_reads_as_plain_questions(without_key):
    keyed = [q for slug in SLUGS for q in quiz.questions(slug)]  # the cache was cleared: read without the key
    assert {q.answer for q in keyed} == {None}
    quiz.questions.cache_clear()
    for slug in SLUGS:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(quiz, "KEYS", paths.SOLUTIONS / "quizzes")
            quiz.questions.cache_clear()
            with_key = quiz.questions(slug)
        quiz.questions.cache_clear()
        assert [q.prompt for q in quiz.questions(slug)] == [q.prompt for q in with_key]
        _renderings_hold_no_answer(slug, with_key)
        assert "feedback on your graded notebook" in quiz.without_widgets(slug)


def test_feedback_says_right_or_not_and_explains():
    q = quiz.questions("speculative_decoding")[3]  # alpha 0.8, k 4: 3.36
    right, text = quiz.feedback(q, q.answer)
    assert right and text.startswith("Right.") and q.why in text
    wrong, text = quiz.feedback(q, "b")
    assert wrong is False and text.startswith("Not quite.") and q.notes["b"] in text and q.why in text


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


def test_without_the_key_the_widget_records_each_choice_alike(without_key):
    """In the learners' copy a click says the same of every choice but its letter: recorded, graded
    later, where the chapter explains it; the line under the quiz counts answers, not right ones."""
    box, chosen = quiz.build("lora")
    row, status = box.children[0], box.children[-1]
    said = {}
    for button in row.children[1].children:
        button.click()
        assert button.button_style == "info"
        said[button.description] = row.children[2].value.replace(f"Recorded: {button.description}.", "Recorded: ?.")
        assert "1 of 6 answered." in status.value and "right" not in status.value
    assert len(set(said.values())) == 1 and "Recorded: ?." in said["a"] and "answer and why" in said["a"]
    assert chosen == {1: "d"} and quiz.feedback(quiz.questions("lora")[0], "a")[0] is None


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
    """A point a question, each judged by a hidden check with the key; the visible check, of no
    points, passes any full set of letters alike (the check cell tells nothing of the key)."""
    chapter = next(name for name in CHAPTERS if paths.slug(name) == slug)
    exercise = CHAPTERS[chapter][-1]
    assert exercise.grade_id == f"quiz_{slug}" and exercise.points == len(quiz.questions(slug))
    assert [(c.name, c.points) for c in exercise.checks if c.visible] == [("answered", 0)]
    key = graded.key(slug)
    assert all(v.passed for v in _verdicts(slug, key))
    guessed = _verdicts(slug, {n: "a" for n in key})
    assert guessed[0].passed and sum(v.passed for v in guessed[1:]) == sum(a == "a" for a in key.values())


def _verdicts(slug, answers):
    exercise = graded.exercise(slug)
    return [run_in_process(c, {"quiz_answers": lambda: answers}, 0) for c in exercise.checks]


def test_a_graded_wrong_answer_names_its_mistake_the_answer_and_why():
    """The feedback on a graded notebook, where the hidden checks' hints are read, is where the
    key comes: the note on the choice made, the right letter and the explanation."""
    questions = quiz.questions("speculative_decoding")
    answers = graded.key("speculative_decoding")
    wrong = next(letter for letter in questions[2].letters if letter != questions[2].answer)
    answers[3] = wrong
    verdicts = _verdicts("speculative_decoding", answers)
    assert [v.passed for v in verdicts] == [True, True, True, False, True, True, True]
    hint = verdicts[3].hint
    assert hint.startswith(f"question 3: {wrong} is not right: {questions[2].notes[wrong]}")
    assert hint.endswith(f"The answer is {questions[2].answer}: {questions[2].why}")


def test_without_the_key_the_quiz_has_its_visible_check_alone(without_key):
    """The learners' copy's exercise: the visible check, and the questions counted as hidden checks,
    so that its check cell prints what the instructor's copy prints; no key to read."""
    exercise = graded.exercise("lora")
    assert [c.name for c in exercise.checks] == ["answered"] and exercise.hidden_checks == 6
    with pytest.raises(FileNotFoundError, match="solutions/quizzes/lora.toml is the instructor's"):
        graded.key("lora")


def test_answers_in_other_spellings_count_and_bad_ones_are_explained():
    key = graded.key("flash_attention")
    spelt = {f"q{n}" if n % 2 else str(n): f"({letter.upper()})" for n, letter in key.items()}
    assert all(v.passed for v in _verdicts("flash_attention", spelt))
    missing = _verdicts("flash_attention", {1: key[1]})
    assert "question 2 has no answer" in missing[0].hint and "question 5 has no answer" in missing[0].hint
    assert missing[2].hint.startswith("question 2 has no answer") and f"The answer is {key[2]}:" in missing[2].hint
    strange = _verdicts("flash_attention", {**key, 1: "z", 2: 3})
    assert "'z' is not one of the letters a, b, c, d" in strange[0].hint and "'3'" in strange[0].hint
    assert "'z'" in strange[1].hint and "'3'" in strange[2].hint
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


def test_the_audit_finds_a_quiz_key_wherever_it_is(tmp_path):
    """``keys_in`` (run by ``make learners-copy`` and the learners' copy's tests): a copy of the
    questions alone is clean; a key file, a key's field in the questions, an explanation in a
    notebook, a note in the recordings and the answers as code are each found."""
    import gzip
    import shutil

    shutil.copytree(quiz.QUIZZES, tmp_path / "data" / "quizzes")
    assert graded.keys_in(tmp_path) == []
    q = quiz.questions("lora")[2]
    wrong = next(letter for letter in q.letters if letter != q.answer)
    (tmp_path / "solutions" / "quizzes").mkdir(parents=True)
    shutil.copy(quiz.KEYS / "lora.toml", tmp_path / "solutions" / "quizzes")
    leaky = tmp_path / "data" / "quizzes" / "kv_cache.toml"
    leaky.write_text(leaky.read_text().replace("[[question]]", '[[question]]\nanswer = "a"', 1))
    (tmp_path / "notes.ipynb").write_text(json.dumps({"cells": [{"source": q.why.replace(" ", "\n", 3)}]}))
    (tmp_path / "calls.json.gz").write_bytes(gzip.compress(q.notes[wrong].encode()))
    (tmp_path / "answers.py").write_text(
        f"def quiz_answers():\n    return {graded.key('flash_attention')!r}\n".replace("'", '"')
    )
    found = graded.keys_in(tmp_path)
    assert found == [
        "solutions/quizzes/lora.toml: the instructor's",
        "data/quizzes/kv_cache.toml, question 1: answer",
        "answers.py: the answers as code of the flash_attention quiz",
        f"calls.json.gz: question 3's note on {wrong} of the lora quiz",
        "notes.ipynb: question 3's explanation of the lora quiz",
    ], found
