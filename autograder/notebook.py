"""Read a submitted notebook defensively and take out what grading needs: the learner's cells.

Grading never runs the submitted notebook as it is. It rebuilds a program from the released
notebook's ``grader-setup`` cells (the instructor's copy, not the learner's), then the learner's
own cells in notebook order: the answer cells, found by their nbgrader ``grade_id`` or, where an
editor dropped the metadata (Colab, VS Code), by the names the answer must define, and the code
cells the learner added (helpers, imports). A cell is the learner's own when it is none of the
release's: no nbgrader ``grade_id`` or tag of the release, no check cell, and a source that matches
no code cell of the release (comments and blank lines aside). So a chapter cell kept as released
never runs (its figures and measurements need the course package and take long), while one the
learner rewrote counts as theirs. Edited or deleted locked and test cells are reported; they
cannot change a score because they are not run.

Not handled: a chapter cell edited by the learner runs as theirs, and fails there if it needs the
course package (the report says so; other cells still run).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.chapters import CHAPTERS
from autograder.checks import Exercise
from course import paths

SETUP_TAG = "grader-setup"
MAX_NOTEBOOK_BYTES = 50 * 2**20
CHECK_LINE = re.compile(r"^(from\s+autograder\b|import\s+autograder\b|check\().*$", re.M)  # a check cell's


class NotebookError(Exception):
    """The file cannot be graded at all; the message says why and what to do."""


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def load(path: Path) -> dict:
    """The notebook as a dict with a list of cells, or NotebookError."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            raise NotebookError(f"the file is over {MAX_NOTEBOOK_BYTES // 2**20} MiB: clear the outputs and save again")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NotebookError("the file is not text: submit the .ipynb notebook file") from None
    except OSError as error:
        raise NotebookError(f"cannot read the file: {error.strerror}") from None
    try:
        notebook = json.loads(text)
    except ValueError as error:
        raise NotebookError(f"not a notebook: invalid JSON ({error}); download it again with File > Download") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells; submit the .ipynb file of the chapter")
    notebook["cells"] = [c for c in notebook["cells"] if isinstance(c, dict)]
    return notebook


def released(chapter: str) -> dict:
    """The released student copy of ``chapter`` (the grader's own copy of the locked cells)."""
    return load(paths.require(paths.NOTEBOOKS / f"{chapter}.ipynb"))


def release_digest(release: dict) -> str:
    """A short digest of a release's cells (types, sources, nbgrader metadata), the Colab cell
    aside: the learners' copy's clone address differs from the repository's, nothing else does.
    The learners' copy writes it into each notebook's metadata (``course.release``)."""
    import hashlib

    cells = [
        [c.get("cell_type"), _source(c), _nbgrader(c)]
        for c in release["cells"]
        if "colab" not in (c.get("metadata", {}).get("tags") or [])
    ]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def other_release(submitted: dict, release: dict) -> str:
    """A note when ``submitted`` says it comes from a learners' copy of another release ("" otherwise)."""
    meta = submitted.get("metadata") if isinstance(submitted.get("metadata"), dict) else {}
    claimed = (meta.get("course") or {}).get("release") if isinstance(meta.get("course"), dict) else None
    if claimed is None or claimed == (ours := release_digest(release)):
        return ""
    return (
        f"this notebook comes from another release of the learners' copy (release {str(claimed)[:40]}; this "
        f"grader's is {ours}): it was graded against this grader's release, whose locked cells and checks may differ"
    )


def setup_sources(release: dict) -> list[str]:
    """The release's code cells tagged ``grader-setup``, run before the answers."""
    return [
        _source(c)
        for c in release["cells"]
        if c.get("cell_type") == "code" and SETUP_TAG in (c.get("metadata", {}).get("tags") or [])
    ]


def _defines(source: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments), even with magics in it."""
    try:
        tree = ast.parse(without_magics(source))
    except (SyntaxError, ValueError):
        return set(re.findall(r"^(?:def|class)\s+(\w+)", source, flags=re.M))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


@functools.lru_cache(maxsize=4096)
def defined_names(source: str) -> frozenset[str]:
    """Every name a cell binds in the notebook's namespace: definitions, assignments (unpacked
    too), imports, loop and ``with`` targets, at the top level or inside its ``if``/``for``/``try``
    blocks. Not handled: names bound through ``globals()`` or ``exec``."""
    try:
        tree = ast.parse(without_magics(source))
    except (SyntaxError, ValueError):
        return frozenset(_defines(source))
    names: set[str] = set()

    def targets(node) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)

    def visit(statements) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    targets(target)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                targets(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        targets(item.optional_vars)
            elif isinstance(node, ast.Expr):  # walrus assignments
                names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            for block in ("body", "orelse", "finalbody"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                visit(handler.body)

    visit(tree.body)
    return frozenset(names)


def names_read(source: str) -> set[str]:
    """Every name a cell's code reads (loads), at any depth: what it may call."""
    try:
        tree = ast.parse(without_magics(source))
    except (SyntaxError, ValueError):
        return set(re.findall(r"\w+", source))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def normalised(source: str) -> str:
    """A cell's code for comparing with the release: without comment lines, blank lines and
    trailing spaces (the release's first line, say, is a comment the instructor's copy lacks)."""
    lines = (line.rstrip() for line in without_magics(source).split("\n"))
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#"))


@dataclass(frozen=True)
class ReleaseCells:
    """What grading needs to know of the release's code cells to tell the learner's own from them."""

    sources: frozenset[str]  # normalised sources of every code cell
    grade_ids: frozenset[str]  # nbgrader grade_ids of every cell
    tags: frozenset[str]  # tags that any code cell carries
    chapter_sources: tuple[str, ...]  # the code cells grading never runs: neither setup nor answer cells


def release_cells(release: dict) -> ReleaseCells:
    code = [c for c in release["cells"] if c.get("cell_type") == "code"]
    tags = {t for c in code for t in (c.get("metadata", {}).get("tags") or []) if isinstance(t, str)}
    return ReleaseCells(
        frozenset(normalised(_source(c)) for c in code),
        frozenset(g for c in release["cells"] if isinstance(g := _nbgrader(c).get("grade_id"), str)),
        frozenset(tags),
        tuple(
            _source(c)
            for c in code
            if SETUP_TAG not in (c.get("metadata", {}).get("tags") or []) and not _nbgrader(c).get("solution")
        ),
    )


def without_checks(source: str) -> str:
    """A cell without its calls of the grader's ``check`` and its imports of the grader (which
    grading has no use for, and could not import), and without a hidden-tests region."""
    return CHECK_LINE.sub("", without_hidden_tests(source))


def is_learners_own(cell: dict, release: ReleaseCells) -> bool:
    """Whether a code cell is one the learner added (or rewrote), rather than one of the release's
    (a check cell, copied or stripped of its metadata, is the release's too)."""
    source = _source(cell)
    tags = cell.get("metadata", {}).get("tags") if isinstance(cell.get("metadata"), dict) else None
    return bool(
        normalised(without_checks(source))
        and _nbgrader(cell).get("grade_id") not in release.grade_ids
        and not (set(t for t in (tags or []) if isinstance(t, str)) & release.tags)
        and normalised(source) not in release.sources
    )


def without_magics(source: str) -> str:
    """IPython-only lines (``%time``, ``!pip``, ``%%capture``) turned into ``pass``: they mean
    nothing outside a notebook, and would be syntax errors."""
    return "\n".join(
        re.sub(r"^(\s*)[%!].*$", r"\1pass  # IPython-only line removed for grading", line)
        for line in source.split("\n")
    )


def _telling() -> dict[str, list]:
    """Each chapter's exercises whose names no other chapter's answers define: those tell the
    chapter apart (every chapter's quiz defines ``quiz_answers``, which tells nothing)."""
    owners: dict[tuple[str, ...], set[str]] = {}
    for name, exercises in CHAPTERS.items():
        for exercise in exercises:
            owners.setdefault(exercise.defines, set()).add(name)
    return {name: [e for e in exercises if len(owners[e.defines]) == 1] for name, exercises in CHAPTERS.items()}


def identify(notebook: dict, path: Path) -> tuple[str, list[str]]:
    """Which chapter a submission is: from its metadata, its file name, or its answer cells."""
    notes = []
    meta = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    claimed = (meta.get("course") or {}).get("chapter") if isinstance(meta.get("course"), dict) else None
    by_answers = {
        name
        for name, exercises in CHAPTERS.items()
        if any(_nbgrader(c).get("grade_id") in {e.grade_id for e in exercises} for c in notebook["cells"])
    }
    if not by_answers:
        defined = set().union(*(_defines(_source(c)) for c in notebook["cells"] if c.get("cell_type") == "code"))
        by_answers = {
            name for name, exercises in _telling().items() if any(set(e.defines) <= defined for e in exercises)
        }
    if isinstance(claimed, str) and claimed not in CHAPTERS:
        raise NotebookError(
            f"this notebook is {claimed}, which is not a chapter the grader knows ({', '.join(CHAPTERS)})"
        )
    if claimed in CHAPTERS:
        if by_answers and claimed not in by_answers:
            raise NotebookError(
                f"the notebook says it is {claimed} but its answers belong to {', '.join(sorted(by_answers))}"
            )
        return claimed, notes
    by_name = [name for name in CHAPTERS if name in Path(path).name]
    if len(by_name) == 1 and (not by_answers or by_name[0] in by_answers):
        return by_name[0], notes
    if len(by_answers) == 1:
        notes.append("chapter recognised from the answer cells (the notebook's metadata was missing)")
        return by_answers.pop(), notes
    raise NotebookError(
        "cannot tell which chapter this is: submit the chapter's own notebook "
        f"(one of {', '.join(CHAPTERS)}) without renaming its answer functions"
    )


@dataclass
class Answers:
    sources: dict[str, str] = field(default_factory=dict)  # grade_id -> learner's code
    # what runs after the setup cells, in notebook order: {"grade_id", "source"} for an answer cell,
    # {"added", "source"} for a cell the learner added, "added" naming it for the report
    cells: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # integrity findings, shown to learner and instructor


def _label(position: int, source: str) -> str:
    first = next((line.strip() for line in source.split("\n") if line.strip()), "")
    return f"{position} (yours: `{first[:40]}{'...' if len(first) > 40 else ''}`)"


def answers(notebook: dict, exercises: list[Exercise], release: dict) -> Answers:
    """The learner's answer for each exercise and the cells they added, in notebook order, and
    what was found wrong with the notebook."""
    found = Answers()
    cells = [c for c in notebook["cells"] if c.get("cell_type") == "code"]
    chosen: dict[int, str] = {}  # id() of the cell taken as an exercise's answer -> its grade_id
    by_id: dict[str, list[dict]] = {}
    for cell in cells:
        grade_id = _nbgrader(cell).get("grade_id")
        if isinstance(grade_id, str):
            by_id.setdefault(grade_id, []).append(cell)
    for grade_id, same in by_id.items():
        if len(same) > 1:
            found.notes.append(f"cell {grade_id} appears {len(same)} times (copied cell?): the last one is used")
    for exercise in exercises:
        tagged = [c for c in by_id.get(exercise.grade_id, []) if _nbgrader(c).get("solution")]
        if tagged:
            chosen[id(tagged[-1])] = exercise.grade_id
            continue
        defining = [c for c in cells if set(exercise.defines) <= _defines(_source(c)) and id(c) not in chosen]
        if defining:
            chosen[id(defining[-1])] = exercise.grade_id
            found.notes.append(f"answer {exercise.grade_id} found by its content (its cell metadata was missing)")
        else:
            found.notes.append(f"no answer cell for {exercise.grade_id}: it defines {', '.join(exercise.defines)}")
    known = release_cells(release)
    for position, cell in enumerate(notebook["cells"], start=1):
        if cell.get("cell_type") != "code":
            continue
        source = without_magics(_source(cell))
        if id(cell) in chosen:
            found.sources[chosen[id(cell)]] = source
            found.cells.append({"grade_id": chosen[id(cell)], "source": source})
        elif is_learners_own(cell, known):
            found.cells.append({"added": _label(position, _source(cell)), "source": without_checks(source)})
    found.notes += _locked_cell_findings(notebook, release) + _format_findings(notebook)
    return found


def _format_findings(notebook: dict) -> list[str]:
    """What an editor or a hand edit broke in the file itself (grading does not depend on it)."""
    notes = []
    ids = [c.get("id") for c in notebook["cells"] if isinstance(c.get("id"), str)]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        notes.append(f"duplicated cell ids {', '.join(duplicated[:5])} (cells copied by hand?)")
    meta = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    if not isinstance(meta.get("kernelspec"), dict):
        notes.append("the notebook has no kernel spec (saved by another editor?); it was graded all the same")
    return notes


HIDDEN_TESTS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")  # nbgrader's delimiters of a check cell's region


def without_hidden_tests(source: str) -> str:
    """A check cell as the learners' notebooks have it: every line from one holding ``### BEGIN
    HIDDEN TESTS`` to one holding ``### END HIDDEN TESTS`` dropped, line for line as nbgrader's
    release (``ClearHiddenTests``) drops it: the one removal of hidden tests, which the grader and
    the nbgrader glue (``nbgrader_course``) both use. An unclosed region is dropped to the end."""
    begin, end = HIDDEN_TESTS
    kept, hidden = [], False
    for line in source.split("\n"):
        if begin in line:
            hidden = True
        elif end in line:
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept)


def _locked_cell_findings(notebook: dict, release: dict) -> list[str]:
    """Locked and test cells of the release that the submission edited or deleted."""
    submitted = {}
    for cell in notebook["cells"]:
        grade_id = _nbgrader(cell).get("grade_id")
        if isinstance(grade_id, str):
            submitted[grade_id] = _source(cell)
    notes = []
    for cell in release["cells"]:
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id")
        if not grade_id or meta.get("solution"):
            continue
        kind = "test cell" if meta.get("grade") else "locked cell"
        if grade_id not in submitted:
            if submitted:  # metadata present elsewhere, so this cell really went missing
                notes.append(f"{kind} {grade_id} was deleted (grading uses the original)")
        elif without_hidden_tests(submitted[grade_id]).strip() != without_hidden_tests(_source(cell)).strip():
            notes.append(f"{kind} {grade_id} was edited (grading uses the original)")
    return notes
