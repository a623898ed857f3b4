"""The learners' copy: ``python -m autograder.learners_copy`` (``make learners-copy``) writes
``dist/learners-copy/`` and ``dist/learners-copy.zip``, what an instructor gives learners for credit.

It is a subset of the repository's files, each copied byte for byte, plus generated data: the
learners' notebooks, the ``course`` package, the grader's modules that the check cells import, the
data the chapters read and the install files. What only instructors may read is in files of its
own that the copy leaves out whole (:data:`LEFT_OUT`): the chapters' sources, whose solution cells
are the answers, and the quizzes' keys (``solutions/``), the hidden checks, the known mistakes, the
course's answers beyond an exercise's signature. What stands in for them is data: the calls the
shipped code makes across that line (``course/withheld.py``), recorded here while every visible
check runs on the solution, the blank copy and each known wrong answer (``autograder/mistakes``) and
while the instructor's notebooks run, and how many hidden checks each exercise has. The copy's quiz
records each choice, and the grader gives the answers and why in its feedback. :func:`answers_in`
and ``autograder.quiz.keys_in`` are the audits that the build and the tests run on the result.

The repository stays the instructor's copy, and the self-study copy for whoever chooses to read the
answers (its quiz answers each click at once).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from autograder import colab, notebook
from course import paths, withheld

OUT = paths.ROOT / "dist" / "learners-copy"
COPIED_DATA = ("models", "quizzes", "reference", "performance.json")
LEFT_OUT = (  # what the copy leaves out whole, of the folders it copies (course/, autograder/)
    "course/answers/",  # the course's answers beyond an exercise's signature (chapter 5's attention, batched)
    "course/kernels/flash_attention.py",  # chapter 5's answer in Triton; course.kernels falls back to torch
    "course/benchmarks/",  # `make bench`'s, which times the answers
    "autograder/hidden/",  # the hidden checks
    "autograder/mistakes/",  # the known mistakes: what they return, and wrong answers written out
)
GENERATED = ("README.md", "Makefile", "autograder/__main__.py")  # written here, not copied
INSTALL_FILES = ("pyproject.toml", "environment.yml", "tools/setup_course.py", "tools/install_torch.py")


# --- the recordings -------------------------------------------------------------------------------


def _namespaces(chapter: str) -> dict[str, tuple[dict, set | None]]:
    """Label -> (the answer cells' sources by grade_id, the exercises whose checks to run, None for
    all): the solution and the blank copy, all of them; each planted mistake, its own exercise and
    those that call it (the others are the solution's, already recorded)."""
    from autograder import release
    from autograder.chapters import exercises as chapter_exercises
    from autograder.mistakes import wrong_answers

    released = notebook.released(chapter)
    exercises = chapter_exercises(chapter)
    solution = notebook.answers(release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py"), exercises, released)
    blank = notebook.answers(released, exercises, released)
    found = {"solution": (dict(solution.sources), None), "blank": (dict(blank.sources), None)}
    for name, mistake in wrong_answers(paths.slug(chapter)).items():
        answers = {**solution.sources, mistake.grade_id: mistake.source}
        found[f"planted/{name}"] = (answers, {mistake.grade_id, *mistake.calls_it})
    return found


def run_visible_checks(chapter: str, answers: dict[str, str], only: set | None = None) -> None:
    """Run the visible checks of ``answers`` as check cells run them, their output discarded: the
    setup cells, then each answer cell and its exercise's checks (of the exercises ``only``, when
    given). What a check cell raises (its failures) is the check cell's."""
    from autograder import selfcheck
    from autograder.chapters import exercises

    namespace: dict = {"__name__": "__main__"}
    for setup in notebook.setup_sources(notebook.released(chapter)):
        exec(setup, namespace)
    with contextlib.redirect_stdout(io.StringIO()):
        for exercise in exercises(chapter):
            if exercise.grade_id in answers:
                with contextlib.suppress(Exception):  # a broken answer cell, as a kernel runs on after one
                    exec(compile(answers[exercise.grade_id], f"<{exercise.grade_id}>", "exec"), namespace)
            if only is None or exercise.grade_id in only:
                with contextlib.suppress(AssertionError):  # the checks that failed
                    selfcheck.check(exercise.grade_id, namespace=namespace)


# cells put into the instructor's notebook while it runs for the release: its cells' withheld calls
# are recorded, its check cells' are not (the visible checks are recorded apart, the hidden ones never)
RECORDING = "release-recording"  # their tag
_RECORD_FROM_HERE = "from course import withheld as _withheld\n_recorded = _withheld.record_into({})"
_RECORD = "_recorded = _withheld.record_into(_recorded)"  # assigned: a cell's last value is displayed
_PAUSE = "_withheld.record_into(None)"
_WRITE_RECORDED = "import json as _json\nwith open({path!r}, 'w') as _file:\n    _json.dump(_recorded, _file)"


def _recording_cells(instructor, chapter: str, calls: Path) -> None:
    """Put the recording cells into ``instructor``: a start, a pause around each check cell, and the
    write of the recordings to ``calls`` after the last cell. What a chapter's widgets can show
    beyond their first view, their charts ask when built (their constructors tabulate every view)."""
    import nbformat

    def cell(source: str):
        return nbformat.v4.new_code_cell(source, metadata={"tags": [RECORDING]})

    cells = [cell(_RECORD_FROM_HERE)]
    for original in instructor.cells:
        checks = original.cell_type == "code" and original.metadata.get("nbgrader", {}).get("grade")
        cells += [cell(_PAUSE), original, cell(_RECORD)] if checks else [original]
    instructor.cells = [*cells, cell(_WRITE_RECORDED.format(path=str(calls)))]


def run_chapter(chapter: str, executed: Path, kernel: str = "course", parameters: dict | None = None) -> dict:
    """Execute the instructor's notebook of ``chapter`` headless (a kernel of ``kernel``, every
    cell within the per-cell limit, its parameters cell given ``parameters``: sizes of its
    measurements) into ``executed/<chapter>.solution.ipynb``, recording its
    calls across the line between the copies (:func:`_recording_cells`); return the kernel's
    recordings. A cell that raises stops the release, naming the cell."""
    import tempfile

    import nbformat

    from autograder import headless, release

    instructor = release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
    executed.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        calls = Path(folder) / "calls.json"
        _recording_cells(instructor, chapter, calls)
        source = Path(folder) / f"{chapter}.ipynb"
        nbformat.write(instructor, source)
        ran = headless.execute(source, source, kernel, cwd=paths.NOTEBOOKS, parameters=parameters)
        failed = [
            ("".join(cell["source"]).partition("\n")[0], f"{out['ename']}: {out['evalue']}")
            for cell in ran["cells"]
            for out in cell.get("outputs", [])
            if out.get("output_type") == "error"
        ]
        if failed:
            raise RuntimeError(f"{chapter}: the instructor's notebook raised in cells (first line, error) {failed}")
        ran["cells"] = [c for c in ran["cells"] if RECORDING not in c.get("metadata", {}).get("tags", [])]
        (executed / f"{chapter}.solution.ipynb").write_text(json.dumps(ran, indent=1) + "\n", encoding="utf-8")
        return json.loads(calls.read_text(encoding="utf-8"))


def record(chapters: list[str], executed: Path, kernel: str = "course", parameters: dict | None = None) -> dict:
    """The withheld calls made by every visible check on every chapter's solution, blank copy and
    planted mistakes, and by every chapter's cells (executed into ``executed``, see
    :func:`run_chapter`, with ``parameters[chapter]`` where given)."""
    from tqdm.auto import tqdm

    with withheld.recording() as recordings:
        for chapter in tqdm(chapters, desc="recording the checks and chapters"):
            for answers, only in _namespaces(chapter).values():
                run_visible_checks(chapter, answers, only)
            sizes = (parameters or {}).get(chapter)
            for name, calls in run_chapter(chapter, executed, kernel, sizes).items():
                recordings.setdefault(name, []).extend(calls)
    return recordings


# --- the copy -------------------------------------------------------------------------------------


def _modules_the_checks_import() -> list[str]:
    """The grader's modules that ``check(...)`` and every chapter's checks import, read off a fresh interpreter."""
    code = (
        "import importlib, sys\n"
        "import autograder.selfcheck\n"
        "from autograder.chapters import CHAPTERS\n"
        "from course import paths\n"
        "for chapter in CHAPTERS:\n"
        "    importlib.import_module(f'autograder.chapters.{paths.slug(chapter)}')\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'autograder')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=paths.ROOT)
    return [m for m in found.stdout.split() if not left_out(_module_file(m))]


def left_out(path: Path) -> bool:
    """Whether the copy leaves ``path`` out (:data:`LEFT_OUT`: a file named there, or in a folder named there)."""
    name = _posix(path)
    return any(name == entry or name.startswith(entry) and entry.endswith("/") for entry in LEFT_OUT)


def _posix(path: Path) -> str:
    return path.relative_to(paths.ROOT).as_posix()


def _module_file(module: str) -> Path:
    path = paths.ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def build(
    out: Path = OUT,
    chapters: list[str] | None = None,
    executed: Path | None = None,
    kernel: str = "course",
    parameters: dict | None = None,
) -> Path:
    """Write the learners' copy of ``chapters`` (all by default) into ``out``, replacing what it held,
    and its zip beside it; return the zip's path. Both are written beside ``out`` first and put in
    place when whole: ``out`` never holds half a copy (the recording runs take minutes). The
    instructor's notebooks of the chapters that run without the answers are executed into
    ``executed`` (by default a temporary folder: they hold the answers, so nothing of them stays
    beside the copy), each with its own measurements' sizes or those of ``parameters[chapter]``
    (chapter -> parameter -> value; the copy then records the calls of those sizes: what a learner
    runs with them is answered, the default sizes' calls only where they are the same)."""
    import tempfile

    chapters = chapters or [source.stem for source in paths.chapter_sources()]
    with tempfile.TemporaryDirectory() as folder:
        recordings = record(chapters, executed or Path(folder), kernel, parameters)
    final, out = out, out.with_name(f"{out.name}.partial")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in sorted((paths.ROOT / "course").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not left_out(path):
            _write(out / path.relative_to(paths.ROOT), path)
    for module in _modules_the_checks_import():
        path = _module_file(module)
        _write(out / path.relative_to(paths.ROOT), path)
    for name in COPIED_DATA:
        source = paths.DATA / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, out / "data" / name)
    for path in (out / "data" / "reference").glob("*.json"):
        numbers = reference_for_learners(path.stem, json.loads(path.read_text(encoding="utf-8")))
        path.write_text(json.dumps(numbers, indent=1) + "\n")
    withheld.write(recordings, out / withheld.RECORDINGS.relative_to(paths.ROOT) / "checks.json.gz")
    (out / withheld.HIDDEN_CHECKS.relative_to(paths.ROOT)).write_text(
        json.dumps(_hidden_check_counts(), indent=1) + "\n"
    )
    _notebooks(out / "notebooks", chapters)
    for name in INSTALL_FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.ROOT / name, out / name)
    address = colab.repository("Learners")
    (out / "README.md").write_text(
        README + "\n" + colab.readme_block(chapters, address, markers=False) + "\n", encoding="utf-8"
    )
    (out / "Makefile").write_text(MAKEFILE, encoding="utf-8")
    (out / "autograder" / "__main__.py").write_text(MAIN, encoding="utf-8")
    archive = _zip(out, final.name)
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    return archive.replace(final.with_suffix(".zip"))


def reference_for_learners(topic: str, numbers: dict[str, dict]) -> dict[str, dict]:
    """The reference numbers of ``topic`` as the copy holds them: without the entries its module
    names in ``ANSWER_NUMBERS`` (the capstone's configuration's figures), each "how" emptied (it
    can name an answer)."""
    answers = getattr(withheld.optional_module(f"course.{topic}"), "ANSWER_NUMBERS", ())
    return {name: {**entry, "how": ""} for name, entry in numbers.items() if name not in answers}


def _notebooks(out: Path, chapters: list[str]) -> None:
    """The student notebooks, their Colab cell cloning the learners' copy's address instead of the repository's."""
    out.mkdir(parents=True)
    for chapter in chapters:
        copy = json.loads((paths.NOTEBOOKS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
        first = copy["cells"][0]
        if colab.TAG not in first.get("metadata", {}).get("tags", []):
            raise ValueError(f"notebooks/{chapter}.ipynb does not start with the Colab cell: run `make release`")
        copy.setdefault("metadata", {}).setdefault("course", {})["release"] = notebook.release_digest(copy)
        first["source"] = f"{HEADER}\n{colab.source(colab.repository('Learners'))}"
        (out / f"{chapter}.ipynb").write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write(target: Path, source: Path) -> None:
    """Copy ``source`` to ``target`` byte for byte: the copy edits no source."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _hidden_check_counts() -> dict[str, int]:
    """How many hidden checks each exercise has (``autograder/hidden/<slug>.py``): grade_id -> count."""
    from autograder.chapters import CHAPTERS, hidden_module

    modules = [hidden_module(paths.slug(chapter)) for chapter in CHAPTERS]
    return {grade_id: len(checks) for module in modules if module for grade_id, checks in module.HIDDEN.items()}


def _zip(out: Path, name: str) -> Path:
    """``out`` zipped beside it, its files under the folder ``name``."""
    archive = out.with_name(f"{out.name}.zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(out.rglob("*")):
            if path.is_file():
                handle.write(path, Path(name) / path.relative_to(out))
    return archive


# --- the audit ------------------------------------------------------------------------------------


def graded_names() -> set[str]:
    from autograder.chapters import CHAPTERS

    return {name for exercises in CHAPTERS.values() for e in exercises for name in e.defines}


def _only_docstring_and_raise(node) -> bool:
    body = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
    if isinstance(node, ast.ClassDef):
        return all(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _only_docstring_and_raise(n) for n in body
        )
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def answers_in(folder: Path) -> list[str]:
    """Where ``folder``'s Python files hold an exercise's reference: a function or class of a
    graded name with more than a docstring and a raise."""
    names = graded_names()
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name in names and not _only_docstring_and_raise(node):
                found.append(f"{path.relative_to(folder).as_posix()}:{node.lineno} {node.name}")
    return found


SIMILAR = 0.5  # share of an answer's passages found in one function of the copy that counts as the same code


def similar_code_in(folder: Path) -> tuple[list[str], list[str]]:
    """The same code under another name: each exercise's solution (its passages less the stub's, as
    :mod:`autograder.similarity` reads answers) against every function and class in ``folder``'s
    Python files. Returns the findings (where ``SIMILAR`` of an answer's passages are in one of
    them) and the exercises too short to compare (fewer than ``MIN_PASSAGES``: one-line
    formulas, which the chapters' text states anyway)."""
    from autograder import similarity
    from autograder.chapters import CHAPTERS

    definitions = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                where = f"{path.relative_to(folder).as_posix()}:{node.lineno} {node.name}"
                definitions.append((where, ast.get_source_segment(text, node) or ""))
    findings, short = [], []
    for chapter, exercises in CHAPTERS.items():
        material = similarity.chapter_material(chapter)
        for exercise in exercises:
            solution = material["references"].get(exercise.grade_id, {}).get(f"solutions/{chapter}.py", "")
            stub = similarity.passages(material["stubs"].get(exercise.grade_id, ""), material["keep"])
            answer = similarity.passages(solution, material["keep"]) - stub
            if len(answer) < similarity.MIN_PASSAGES:
                short.append(exercise.grade_id)
                continue
            for where, source in definitions:
                share = len(answer & similarity.passages(source, material["keep"])) / len(answer)
                if share >= SIMILAR:
                    findings.append(f"{where}: {share:.0%} of the solution of {exercise.grade_id}")
    return findings, short


HEADER = "# The learners' copy of this chapter: write your answers where it says *Your turn*, then run the check cells."
MAIN = '''"""``python -m autograder`` in the learners' copy: grading is the instructor's."""

import sys

sys.exit(
    "The learners' copy has no grader: your instructor grades the notebooks you hand in, with more checks on "
    "fresh inputs. Here, run each exercise's check cell: it runs the visible checks with the grader's hints."
)
'''

README = """\
# Making large language models cheaper and faster: the learners' copy

Your instructor gave you this folder. It holds the chapters (`notebooks/`), the `course` package
they import and the check cells' checks. The exercises' answers are not in it: the check cells
compare what your functions return with reference numbers recorded from the course's own code.
When your notebook is graded, more checks run on fresh inputs.

- **Set up and open the course:** `make lab` (Linux, macOS) or `py -3.11 tools\\setup_course.py lab`
  (Windows). Python 3.11 is all it needs; the first run installs the course into `.venv`.
- **On a JupyterHub** your instructor installed the course for you: open `notebooks/` there.
- **In Colab:** upload this folder as a zip to the Files pane and run a notebook's first cell.

Each chapter tells you which cells are exercises. Run a check cell after an answer: `ok` lines are
checks passed, `FAIL` lines say what looks wrong. Grading is your instructor's: hand in the saved
notebooks as they ask (`python -m autograder` here only says so).

Until you write an exercise, the demonstrations, figures and widgets that need it show results
recorded from the course's own code, or leave it out and say it is "not written yet"; once it is
written, the cells that time or draw it use yours and say so. Run such a cell again after you
change your answer.
"""

MAKEFILE = """\
# The learners' copy: `make lab` sets up the course in .venv, then opens it in JupyterLab.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
PORT ?= 8888

.PHONY: lab install

lab:
\t$(PYTHON) tools/setup_course.py lab --port $(PORT)

install:
\t$(PYTHON) tools/setup_course.py install
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    build(args.out)
    from autograder import quiz

    found = answers_in(args.out) + quiz.keys_in(args.out)
    similar, short = similar_code_in(args.out)
    found += similar
    print(f"{len(short)} exercises too short to compare with the copy's code: {', '.join(short)}")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {args.out} ({size / 1e6:.1f} MB) and {args.out.with_suffix('.zip').name}")
    if found:
        print("answers found in the learners' copy:\n  " + "\n  ".join(found))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
