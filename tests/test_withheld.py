"""The line between the copies (``course/withheld.py``): the chapters' answers read off their solution
cells, instructor-only modules, the calls across the line recorded in the instructor's copy and
answered from the recordings where the instructor's files are missing (the learners' copy)."""

import pytest
import torch

from course import paths, withheld


@pytest.mark.parametrize("source", paths.chapter_sources(), ids=lambda source: source.stem)
def test_the_sources_are_read_as_jupytext_reads_them(source):
    """The course reads the chapters' sources without jupytext (an instructor's extra): the same code
    cells, with the same tags and nbgrader metadata, in the same order."""
    import jupytext

    theirs = [cell for cell in jupytext.read(source).cells if cell.cell_type == "code"]
    mine = withheld.solution_cells(source)
    assert [(metadata, code.rstrip("\n")) for _, metadata, code in mine] == [
        ({k: cell.metadata[k] for k in ("tags", "nbgrader") if k in cell.metadata}, cell.source.rstrip("\n"))
        for cell in theirs
    ]


def test_a_chapters_answers_are_its_solution_cells_run_as_grading_runs_them():
    answers = withheld.answers("05_flash_attention")
    q, k, v = (torch.randn(7, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    expected = torch.softmax(q @ k.T / 8**0.5, dim=-1) @ v
    assert torch.allclose(answers.blockwise_attention(q, k, v, 3), expected, atol=1e-6)  # calls the update cell's
    assert answers.blockwise_attention.__name__ == "blockwise_attention"
    with pytest.raises(AttributeError, match="no not_an_answer"):
        answers.not_an_answer  # noqa: B018


def test_an_answers_traceback_points_at_its_line_in_the_source():
    import traceback

    try:
        withheld.answers("04_kv_cache").attention_step(torch.zeros(3), torch.zeros(4), torch.zeros(3), None, None)
    except Exception as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith("04_kv_cache.py")]
    source = (paths.SOLUTIONS / "04_kv_cache.py").read_text().split("\n")
    assert frames and "torch.cat([cache_k, k[None]]" in source[frames[-1].lineno - 1]


def test_calls_across_the_line_are_recorded_and_answered_where_the_files_are_missing(tmp_path, monkeypatch):
    """Recorded in the instructor's copy (the outermost call only), then answered from the recordings
    in the learners' copy (the one with recordings), even where the instructor's files could be read:
    the same results, tensors within RTOL; a call with other inputs says that the instructor's
    grader judges it."""
    answers = withheld.answers("04_kv_cache")
    mistakes = withheld.module("autograder.mistakes.kv_cache")
    q, k, v, cache = torch.randn(8), torch.randn(8), torch.randn(8), torch.randn(3, 8)
    with withheld.recording() as recorded:
        step = answers.attention_step(q, k, v, cache, cache)
        size = answers.kv_cache_bytes(32, 8, 128, 100, batch=2)
        hints = mistakes.of_kv_cache_bytes(32, 8, 128, 100, batch=2)
    assert sorted(recorded) == [
        "autograder.mistakes.kv_cache.of_kv_cache_bytes",
        "solutions.04_kv_cache.attention_step",
        "solutions.04_kv_cache.kv_cache_bytes",
    ]
    withheld.write(recorded, tmp_path / "checks.json.gz")
    monkeypatch.setattr(withheld, "RECORDINGS", tmp_path)
    monkeypatch.setattr(withheld, "_recordings", None)
    withheld.answers.cache_clear()
    withheld.module.cache_clear()
    try:
        copy, copy_mistakes = withheld.answers("04_kv_cache"), withheld.module("autograder.mistakes.kv_cache")
        replayed = copy.attention_step(q * (1 + 1e-8), k, v, cache, cache)
        assert all(torch.allclose(a, b) for a, b in zip(replayed, step, strict=True))
        assert copy.kv_cache_bytes(32, 8, 128, 100, batch=2) == size
        assert copy_mistakes.of_kv_cache_bytes(32, 8, 128, 100, batch=2) == hints
        with pytest.raises(withheld.NotRecorded, match="the instructor's grader judges this case"):
            copy.kv_cache_bytes(32, 8, 128, 101, batch=2)
    finally:
        withheld.answers.cache_clear()
        withheld.module.cache_clear()


def test_the_instructors_copy_raises_for_a_module_that_fails_to_import(tmp_path, monkeypatch):
    """A module that is there but fails to import (a dependency missing), or is not there, raises in
    the instructor's copy: a bug to see, never a replay."""
    (tmp_path / "instructor_only_for_this_test.py").write_text("import a_dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="a_dependency_that_is_not_installed"):
        withheld.module("instructor_only_for_this_test").anything  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match="no_such_module_for_this_test"):
        withheld.module("no_such_module_for_this_test").anything  # noqa: B018


def test_the_course_is_called_beside_the_learners_function_while_recording(capsys):
    """The instructor's notebook, whose function is written, records the course's answer on the same
    inputs, for the learners' blank notebook; outside the recording only the learner's runs."""
    calls = []

    def mine(*args, **kwargs):
        calls.append(args)
        return 7

    namespace = {"pages_needed": mine}
    found = withheld.yours_or_course(namespace, "04_kv_cache", "pages_needed", ([5], 16), "the chart")
    assert found is mine and "Your `pages_needed` draws the chart." in capsys.readouterr().out
    with withheld.recording() as recorded:
        both = withheld.yours_or_course(namespace, "04_kv_cache", "pages_needed", ([5], 16), "the chart")
        assert both([5, 16, 17], 16) == 7
    assert recorded["solutions.04_kv_cache.pages_needed"][-1][2] == 4  # the course's, on the same inputs
    blank = withheld.yours_or_course({}, "04_kv_cache", "pages_needed", ([5], 16), "the chart")
    assert blank([5, 16, 17], 16) == 4
    assert "Your `pages_needed` is not written yet: the course's numbers" in capsys.readouterr().out
