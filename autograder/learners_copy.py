"""The learners' copy: ``python -m autograder.learners_copy`` (``make student-release``) writes
``dist/student/`` and ``dist/student.zip``, what an instructor gives learners for credit.

It holds the student notebooks, the ``course`` package, the grader's modules that the check cells
import, the data the chapters read and the install files. It holds no ``solutions/``, no hidden
check and no reference implementation: every function marked ``@withheld`` (``course/withheld.py``)
keeps only its docstring and a ``raise``, and answers from recordings made here, while every
visible check runs on the solution, the blank copy and each planted mistake
(``autograder/planted``). The chapters' checks modules lose their hidden checks and the code only
those reach. The quizzes' keys are in ``solutions/quizzes``, which is left out with the rest of
``solutions/``: the copy's quiz records each choice, and the grader gives the answers and why in
its feedback. :func:`answers_in` and ``autograder.quiz.keys_in`` are the audits that the build and
the tests run on the result.

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
from dataclasses import dataclass
from pathlib import Path

from autograder import colab, notebook
from course import paths, withheld

OUT = paths.ROOT / "dist" / "student"
STUB = 'raise NotImplementedError("withheld from the learners\' copy: the recorded results answer its calls")'
COPIED_DATA = ("models", "quizzes", "reference", "performance.json")
LEFT_OUT = (
    "course/kernels/flash_attention.py",  # chapter 5's answer in Triton; course.kernels falls back to torch
    "course/benchmarks/",  # `make bench`'s, which times the references
)
INSTALL_FILES = ("pyproject.toml", "environment.yml", "tools/setup_course.py", "tools/install_torch.py")


# --- the sources, with what learners must not read taken out -----------------------------------------


def _is_withheld(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(
        (isinstance(d, ast.Name) and d.id == "withheld") or (isinstance(d, ast.Attribute) and d.attr == "withheld")
        for d in decorators
    )


def _docstring_node(node) -> ast.AST | None:
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first
    return None


def _withhold(tree: ast.Module) -> list[tuple[int, int, str]]:
    """Line edits (first, last, replacement) that leave each withheld function its docstring and a raise."""
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_withheld(node):
            edits.append(_stub(node))
        elif isinstance(node, ast.ClassDef) and _is_withheld(node):
            docstring = _docstring_node(node)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    edits.append(_stub(item))
                elif item is not docstring:
                    edits.append((item.lineno, item.end_lineno, None))
    return edits


def _stub(node) -> tuple[int, int, str]:
    """The edit that leaves the function ``node`` its signature, its docstring and a raise."""
    docstring = _docstring_node(node)
    first = docstring.end_lineno + 1 if docstring else node.body[0].lineno
    return first, node.end_lineno, f"{' ' * node.body[0].col_offset}{STUB}\n"


def _hidden_checks(tree: ast.Module) -> list:
    """Line edits removing every ``Check(...)`` without ``visible=True`` from an ``Exercise(...)``'s
    list, and telling the exercise how many were removed (``hidden_checks=N``); and its
    ``requirements``, which name the hidden checks (and state what the prompt asks, formulas too)."""
    edits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Exercise"):
            continue
        # what the prompt requires, each with its checks, is the instructor's coverage table's
        for keyword in node.keywords:
            if keyword.arg == "requirements":
                if keyword.col_offset != node.args[0].col_offset:  # ruff puts each argument on a line of its own
                    raise ValueError(f"line {keyword.lineno}: requirements= must start a line of its own")
                edits.append((keyword.lineno, keyword.end_lineno, None))
        listed = next((a for a in node.args if isinstance(a, ast.List)), None)
        if listed is None:
            continue
        hidden = [item for item in listed.elts if isinstance(item, ast.Call) and not _visible(item)]
        for item in hidden:
            edits.append((item.lineno, item.end_lineno, None))
        if hidden:  # the keyword goes right after the list's comma (positional arguments never follow it)
            edits.append(Insert(listed.end_lineno, listed.end_col_offset, f" hidden_checks={len(hidden)},"))
    return edits


def _visible(check: ast.Call) -> bool:
    return any(
        k.arg == "visible" and isinstance(k.value, ast.Constant) and k.value.value is True for k in check.keywords
    )


@dataclass(frozen=True)
class Insert:
    """``text`` to insert after the ``,`` that ends at ``column`` of line ``line`` (where an edit
    given as a tuple (first, last, replacement or None) replaces whole lines)."""

    line: int
    column: int
    text: str


def _apply(source: str, edits: list) -> str:
    lines = source.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e.line if isinstance(e, Insert) else e[0], reverse=True):
        if isinstance(edit, Insert):
            line, column = lines[edit.line - 1], edit.column + 1
            if line[column - 1 : column] != ",":
                raise ValueError(f"cannot insert {edit.text!r} after line {edit.line}: {line!r}")
            lines[edit.line - 1] = line[:column] + edit.text + line[column:]
            continue
        first, last, replacement = edit
        lines[first - 1 : last] = [replacement] if replacement else []
    return "".join(lines)


def _unused_private(source: str) -> str:
    """``source`` without its module-level private functions, classes and constants that nothing
    else in it names, repeated until none is left (what only the hidden checks used)."""
    while True:
        tree = ast.parse(source)
        named = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        named += [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
        unused = []
        for node in tree.body:
            names = _binds(node)
            if names and all(n.startswith("_") and named.count(n) == 0 for n in names):
                unused.append(node)
        if not unused:
            return source
        source = _apply(source, [(_first_line(n), n.end_lineno, None) for n in unused])


def _first_line(node: ast.AST) -> int:
    """Where a definition starts: its first decorator's line, or its own."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])


def _binds(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        return [t.id for t in node.targets]
    return []


def learners_source(source: str, checks_module: bool) -> str:
    """A module of the package as the learners' copy has it: withheld bodies taken out, and for a
    chapter's checks module, its hidden checks and the code only they use."""
    tree = ast.parse(source)
    edits = _withhold(tree) + (_hidden_checks(tree) if checks_module else [])
    result = _apply(source, edits)
    return _unused_private(result) if checks_module else result


# --- the recordings -------------------------------------------------------------------------------


def _namespaces(chapter: str) -> dict[str, tuple[dict, set | None]]:
    """Label -> (the answer cells' sources by grade_id, the exercises whose checks to run, None for
    all): the solution and the blank copy, all of them; each planted mistake, its own exercise and
    those that call it (the others are the solution's, already recorded)."""
    from autograder import release
    from autograder.planted import planted

    released = notebook.released(chapter)
    exercises = _exercises(chapter)
    solution = notebook.answers(release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py"), exercises, released)
    blank = notebook.answers(released, exercises, released)
    found = {"solution": (dict(solution.sources), None), "blank": (dict(blank.sources), None)}
    for name, mistake in planted(paths.slug(chapter)).items():
        answers = {**solution.sources, mistake.grade_id: mistake.source}
        found[f"planted/{name}"] = (answers, {mistake.grade_id, *mistake.calls_it})
    return found


def _exercises(chapter: str):
    from autograder.chapters import CHAPTERS

    return CHAPTERS[chapter]


def run_visible_checks(chapter: str, answers: dict[str, str], only: set | None = None) -> None:
    """Run the visible checks of ``answers`` as check cells run them, their output discarded: the
    setup cells, then each answer cell and its exercise's checks (of the exercises ``only``, when
    given). What a check cell raises (its failures) is the check cell's."""
    from autograder import selfcheck

    namespace: dict = {"__name__": "__main__"}
    for setup in notebook.setup_sources(notebook.released(chapter)):
        exec(setup, namespace)
    with contextlib.redirect_stdout(io.StringIO()):
        for exercise in _exercises(chapter):
            if exercise.grade_id in answers:
                with contextlib.suppress(Exception):  # a broken answer cell, as a kernel runs on after one
                    exec(compile(answers[exercise.grade_id], f"<{exercise.grade_id}>", "exec"), namespace)
            if only is None or exercise.grade_id in only:
                with contextlib.suppress(AssertionError):  # the checks that failed
                    selfcheck.check(exercise.grade_id, namespace=namespace)


RUNS_WITHOUT_ANSWERS = (  # chapters whose cells get their numbers as the copy can give them
    "01_prefill_decode",
    "02_lora",
    "03_quantization",
    "04_kv_cache",
    "05_flash_attention",
    "06_speculative_decoding",
    "07_distillation",
    "08_in_practice",
    "09_choosing_a_technique",
)
# cells put into the instructor's notebook while it runs for the release: its cells' withheld calls
# are recorded, its check cells' are not (the visible checks are recorded apart, the hidden ones never)
RECORDING = "release-recording"  # their tag
_RECORD_FROM_HERE = "from course import withheld as _withheld\n_recorded = _withheld.record_into({})"
_RECORD = "_withheld.record_into(_recorded)"
_PAUSE = "_withheld.record_into(None)"
# what the chapter's widgets can ask beyond its cells, asked in the same kernel: its caches are warm
_WIDGETS = (
    "import importlib as _importlib\n"
    "_plots = _importlib.import_module({module!r})\n"
    "if hasattr(_plots, 'withheld_calls'):\n"
    "    _plots.withheld_calls()"
)
_WRITE_RECORDED = "import json as _json\nwith open({path!r}, 'w') as _file:\n    _json.dump(_recorded, _file)"


def _recording_cells(instructor, chapter: str, calls: Path) -> None:
    """Put the recording cells into ``instructor``: a start, a pause around each check cell, the
    chapter's plots module's ``withheld_calls()`` (what its widgets can ask for beyond their first
    view) after the last cell, and the write of the recordings to ``calls``."""
    import nbformat

    def cell(source: str):
        return nbformat.v4.new_code_cell(source, metadata={"tags": [RECORDING]})

    cells = [cell(_RECORD_FROM_HERE)]
    for original in instructor.cells:
        checks = original.cell_type == "code" and original.metadata.get("nbgrader", {}).get("grade")
        cells += [cell(_PAUSE), original, cell(_RECORD)] if checks else [original]
    widgets = cell(_WIDGETS.format(module=f"course.plots.{paths.slug(chapter)}"))
    instructor.cells = [*cells, widgets, cell(_WRITE_RECORDED.format(path=str(calls)))]


def run_chapter(chapter: str, executed: Path, kernel: str = "course", parameters: dict | None = None) -> dict:
    """Execute the instructor's notebook of ``chapter`` headless (a kernel of ``kernel``, every
    cell within the per-cell limit, its parameters cell given ``parameters``: sizes of its
    measurements) into ``executed/<chapter>.solution.ipynb``, recording its
    withheld calls and those of its widgets (:func:`_recording_cells`); return the kernel's
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
    planted mistakes, and by the cells of the chapters that run without the answers (executed
    into ``executed``, see :func:`run_chapter`, with ``parameters[chapter]`` where given)."""
    from tqdm.auto import tqdm

    with withheld.recording() as recordings:
        for chapter in tqdm(chapters, desc="recording the checks and chapters"):
            for answers, only in _namespaces(chapter).values():
                run_visible_checks(chapter, answers, only)
            if chapter in RUNS_WITHOUT_ANSWERS:
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
    return [m for m in found.stdout.split() if m != "autograder.planted" and not m.startswith("autograder.planted.")]


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
    """Write the learners' copy of ``chapters`` (all by default) into ``out``, emptied first, and
    its zip beside it; return the zip's path. The instructor's notebooks of the chapters that run
    without the answers are executed into ``executed`` (by default a temporary folder: they hold
    the answers, so nothing of them stays beside the copy), each with its own measurements' sizes
    or those of ``parameters[chapter]`` (chapter -> parameter -> value; the copy then records the
    calls of those sizes: what a learner runs with them is answered, the default sizes' calls only
    where they are the same)."""
    import tempfile

    chapters = chapters or [source.stem for source in paths.chapter_sources()]
    with tempfile.TemporaryDirectory() as folder:
        recordings = record(chapters, executed or Path(folder), kernel, parameters)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in sorted((paths.ROOT / "course").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and not _posix(path).startswith(LEFT_OUT):
            _write(out / path.relative_to(paths.ROOT), path, checks_module=False)
    for module in _modules_the_checks_import():
        path = _module_file(module)
        _write(out / path.relative_to(paths.ROOT), path, checks_module=module.startswith("autograder.chapters."))
    for name in COPIED_DATA:
        source = paths.DATA / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, out / "data" / name)
    for path in (out / "data" / "reference").glob("*.json"):  # their "how" can name an answer (the capstone's)
        numbers = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({name: {**entry, "how": ""} for name, entry in numbers.items()}, indent=1) + "\n")
    withheld.write(recordings, out / withheld.RECORDINGS.relative_to(paths.ROOT) / "checks.json.gz")
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
    return _zip(out)


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


def _write(target: Path, source: Path, checks_module: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.suffix == ".py":
        target.write_text(learners_source(source.read_text(encoding="utf-8"), checks_module), encoding="utf-8")
    else:
        shutil.copy(source, target)


def _zip(out: Path) -> Path:
    archive = out.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(out.rglob("*")):
            if path.is_file():
                handle.write(path, Path(out.name) / path.relative_to(out))
    return archive


# --- the audit ------------------------------------------------------------------------------------


def graded_names() -> set[str]:
    from autograder.chapters import CHAPTERS

    return {name for exercises in CHAPTERS.values() for e in exercises for name in e.defines}


def _only_docstring_and_raise(node) -> bool:
    body = [n for n in node.body if n is not _docstring_node(node)]
    if isinstance(node, ast.ClassDef):
        return all(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _only_docstring_and_raise(n) for n in body
        )
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def answers_in(folder: Path) -> list[str]:
    """Where ``folder``'s Python files hold an exercise's reference: a function or class of a
    graded name with more than a docstring and a raise, or a withheld function that kept its body."""
    names = graded_names()
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if (node.name in names or _is_withheld(node)) and not _only_docstring_and_raise(node):
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
