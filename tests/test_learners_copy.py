"""The learners' copy (``make learners-copy``): no answer in it, no hidden check, and its check
cells print what the instructor's copy prints, line for line, on every chapter's solution, blank
copy and planted mistakes. Each copy runs in its own interpreter (``tests/_check_cells.py``), with
its own folder first on the path.

``LEARNERS_COPY_CHAPTERS=05_flash_attention,...`` builds and compares those chapters only (for
working on one chapter); the full run builds them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import learners_copy, release
from course import paths

from conftest import borrowing_environment, learners_copy_chapters, with_the_solutions_answers

HARNESS = Path(__file__).with_name("_check_cells.py")
CHAPTERS = [s.stem for s in release.chapters()]
CHOSEN = learners_copy_chapters()


def _plans(chapter: str, folder: Path) -> dict:
    """The solution, the blank copy and each known wrong answer (``autograder/mistakes``) as
    check-cell plans for ``tests/_check_cells.py``: a wrong answer's plan runs the check cells of
    its exercise and of those that call it (the others are the solution's)."""
    import nbformat

    from autograder.mistakes import wrong_answers

    solution = release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
    solution_path = folder / "solution.ipynb"
    nbformat.write(solution, solution_path)
    notebook = f"notebooks/{chapter}.ipynb"
    plans = {"solution": {"notebook": notebook, "answers": str(solution_path)}, "blank": {"notebook": notebook}}
    for name, mistake in wrong_answers(paths.slug(chapter)).items():
        copy = nbformat.from_dict(json.loads(json.dumps(solution)))
        for cell in copy.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == mistake.grade_id:
                cell.source = mistake.source
        path = folder / f"{name}.ipynb"
        nbformat.write(copy, path)
        plans[name] = {
            "notebook": notebook,
            "answers": str(path),
            "only": sorted({mistake.grade_id, *mistake.calls_it}),
        }
    return plans


def _check_cells(root: Path, plan_path: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(plan_path)], cwd=root, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("chapter", CHOSEN)
def test_the_learners_copy_says_what_the_instructors_copy_says(chapter, learners_copy_folder, tmp_path):
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(_plans(chapter, tmp_path)))
    instructor = _check_cells(paths.ROOT, plan_path)
    learners = _check_cells(learners_copy_folder, plan_path)
    assert instructor.keys() == learners.keys()
    for label in instructor:
        assert learners[label] == instructor[label], f"{chapter}, {label}: the copies' check cells differ"
    solved = instructor["solution"]
    assert all(cell["fail"] == 0 and cell["raised"] is None for cell in solved.values()), solved


def test_the_learners_copy_holds_no_answer(learners_copy_folder):
    assert learners_copy.answers_in(learners_copy_folder) == []
    similar, too_short = learners_copy.similar_code_in(learners_copy_folder)
    assert similar == []
    assert "gptq_quantize" not in too_short and "weight_memory_gb" in too_short  # the scan can see an answer


def test_a_build_that_stops_leaves_the_last_copy_whole(tmp_path, monkeypatch):
    """The copy is written beside its folder and put in place when whole: a build that stops
    part-way (here, at the notebooks) leaves the last copy and its zip as they were."""
    monkeypatch.setattr(learners_copy, "record", lambda *args, **kwargs: {})  # no chapter executed
    out = tmp_path / "learners-copy"
    learners_copy.build(out, ["05_flash_attention"])
    last = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    zipped = out.with_suffix(".zip").read_bytes()

    def stop(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(learners_copy, "_notebooks", stop)
    with pytest.raises(KeyboardInterrupt):
        learners_copy.build(out, ["05_flash_attention"])
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == last
    assert out.with_suffix(".zip").read_bytes() == zipped
    assert (out / "notebooks" / "05_flash_attention.ipynb").is_file()


def test_every_source_file_of_the_copy_is_the_instructors_file(learners_copy_folder):
    """The learners' copy is a subset of the repository's files: every Python file in it is the
    instructor's file at the same path, byte for byte, but the files it writes (its README, Makefile
    and ``python -m autograder``). What only instructors may read is left out whole, never edited."""
    edited = []
    for path in sorted(learners_copy_folder.rglob("*.py")):
        name = path.relative_to(learners_copy_folder).as_posix()
        if name in learners_copy.GENERATED:
            continue
        original = paths.ROOT / name
        assert original.is_file(), f"{name} is in the copy but not in the repository"
        if path.read_bytes() != original.read_bytes():
            edited.append(name)
    assert edited == [], "the copy edits no source: leave what only instructors may read out whole"


def test_the_scan_finds_an_answer_under_another_name(tmp_path):
    """The solution's blockwise_attention, renamed and with its variables renamed, is found."""
    from autograder import similarity

    source = similarity.chapter_material("05_flash_attention")["references"]["blockwise_attention"]
    solution = source["solutions/05_flash_attention.py"].replace("blockwise_attention", "tiles")
    renamed = solution.replace("scores", "s_").replace("block", "width")
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "helpers.py").write_text(renamed)
    found, _ = learners_copy.similar_code_in(tmp_path)
    assert [f for f in found if f.startswith("course/helpers.py:") and "blockwise_attention" in f], found


def test_the_learners_copy_holds_no_solution_hidden_check_or_planted_mistake(learners_copy_folder):
    files = {p.relative_to(learners_copy_folder).as_posix() for p in learners_copy_folder.rglob("*") if p.is_file()}
    assert not [f for f in files if f.startswith(("solutions/", "tests/")) or learners_copy.left_out(paths.ROOT / f)]
    code = (
        "from autograder.chapters import CHAPTERS\n"
        "print(sum(not c.visible for exercises in CHAPTERS.values() for e in exercises for c in e.checks))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=learners_copy_folder,
        env={**os.environ, "PYTHONPATH": str(learners_copy_folder)},
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "0", done.stderr[-2000:]
    assert learners_copy_folder.with_suffix(".zip").stat().st_size > 0


QUIZ_CELLS = """
import contextlib, io, json, sys
from autograder import check
from course import quiz

said = {}
for slug, key in json.loads(sys.argv[1]).items():
    assert not quiz.has_key(slug) and {q.answer for q in quiz.questions(slug)} == {None}
    assert {quiz.feedback(q, letter)[0] for q in quiz.questions(slug) for letter in q.letters} == {None}
    for label, answers in (("key", key), ("guess", {n: "a" for n in key})):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            check(f"quiz_{slug}", namespace={"quiz_answers": lambda answers=answers: answers})
        said.setdefault(slug, {})[label] = printed.getvalue()
print(json.dumps(said))
"""


def test_the_learners_copy_holds_no_quiz_key(learners_copy_folder):
    """No quiz's key in any file of the copy (``autograder.quiz.keys_in``: no ``solutions/``, no key's
    field in ``data/quizzes``, no explanation, note or answers as code anywhere); its quizzes know no
    answer, and a quiz's check cell prints the same for the key's answers as for a guess."""
    from autograder import quiz

    assert quiz.keys_in(learners_copy_folder) == []
    keys = {paths.slug(chapter): quiz.key(paths.slug(chapter)) for chapter in CHOSEN}
    done = subprocess.run(
        [sys.executable, "-c", QUIZ_CELLS, json.dumps(keys)],
        cwd=learners_copy_folder,
        env={**os.environ, "PYTHONPATH": str(learners_copy_folder)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for slug, said in json.loads(done.stdout).items():
        assert said["key"] == said["guess"] and said["key"].startswith("ok "), (slug, said)
        assert f"({len(keys[slug])} more checks run when your notebook is graded)" in said["key"]


def test_the_instructors_grader_grades_the_learners_copy_and_knows_its_release(learners_copy_folder, tmp_path):
    """A learners' copy notebook with the solution's answers in it gets full marks from the
    instructor's grader, with no note; one that says it comes from another release is graded the
    same, and the report says so."""
    import nbformat

    from autograder import grade

    from conftest import GENEROUS

    chapter = CHOSEN[0]
    copy = with_the_solutions_answers(chapter, learners_copy_folder)
    for name, digest in (("ours", copy.metadata["course"]["release"]), ("other", "0123456789ab")):
        copy.metadata["course"]["release"] = digest
        (tmp_path / name).mkdir()
        nbformat.write(copy, tmp_path / name / f"{chapter}.ipynb")
    ours, other = (grade.grade(tmp_path / name / f"{chapter}.ipynb", GENEROUS, seed=7) for name in ("ours", "other"))
    assert ours.score == ours.max_score > 0, ours.text()
    assert not [m for m in ours.messages if "another release" in m], ours.messages
    assert other.score == ours.score
    assert [m for m in other.messages if "another release of the learners' copy (release 0123456789ab" in m]


def test_the_learners_copy_installs_with_pip_for_a_hubs_shared_environment(learners_copy_folder, tmp_path):
    """``pip install -e`` of the copy's folder, as a hub's learners' environment installs it: from any
    working folder, the course, its recordings and the check cells' grader modules are the copy's
    (the environment borrows this one's other packages: ``conftest.borrowing_environment``)."""
    import shutil

    copy = Path(shutil.copytree(learners_copy_folder, tmp_path / "course"))  # pip writes its metadata there
    python = borrowing_environment(tmp_path / "hub-env", copy)
    code = (
        "import autograder.selfcheck\nfrom course import paths, withheld\n"
        "print(paths.ROOT, withheld.in_learners_copy(), autograder.selfcheck.__file__.startswith(str(paths.ROOT)))"
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    seen = subprocess.run([python, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert seen.stdout.split() == [str(copy.resolve()), "True", "True"], seen.stderr[-2000:]


def test_the_learners_copy_names_only_commands_it_has(learners_copy_folder):
    """What learners read (the README, the notebooks' text) names no command the copy lacks: the
    instructor's make targets (release, reference, bench, ...) and grader commands are not in it."""
    import re

    targets = set(re.findall(r"^([a-z][a-z-]*):", (learners_copy_folder / "Makefile").read_text(), re.M))
    texts = {"README.md": (learners_copy_folder / "README.md").read_text()}
    for path in sorted((learners_copy_folder / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[path.name] = "\n".join("".join(c["source"]) for c in cells)
    missing = [
        f"{name}: {found[0]}"
        for name, text in texts.items()
        for found in re.finditer(r"make ([a-z][a-z-]*)`|python -m autograder [a-z-]+", text)
        if found[1] not in targets
    ]
    assert missing == [], missing
