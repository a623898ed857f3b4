"""Answers that look copied, for an instructor to review: never a penalty, nothing here changes a grade.

For each exercise it lists pairs of submissions whose answer cells are nearly the same once names
and layout are normalised, and answers nearly the same as the course's own code (the reference
implementation in ``course/<slug>.py`` and the solution in ``solutions/NN_<slug>.py``).

How an answer is compared: it is parsed, and its syntax tree written out in source order as tokens
(docstrings, comments and layout are not in it), with every name the answer chooses renamed to a
placeholder in order of first use: renaming variables or reformatting changes nothing, while
builtins, imported modules, attribute and keyword names (the torch API) and constants stay. The
answer becomes its set of passages (``WIDTH`` consecutive tokens), less the passages of the
release's stub (the given signature and docstring). An answer that does not parse is read as text.

>>> tokens("def f(w):\\n    s = w.abs()  # scale\\n    return s") == tokens("def f(x):\\n  y=x.abs()\\n  return y")
True

Two submissions are compared by the Jaccard index of their passages, leaving out passages that more
than 2% of the answers (and more than ten) share: those are the natural way to write the answer
and prove nothing. Candidate pairs come from an inverted index of the remaining passages, so the work grows
with the passages two answers share, not with the square of the class. An answer is compared with
the course's code by the share of its passages found there.

Not handled: answers too short to judge (fewer than ``MIN_PASSAGES`` passages beyond the stub:
one-line formulas are alike by necessity), statements reordered or interleaved with filler, and
copies from anywhere but the course itself.
"""

from __future__ import annotations

import ast
import builtins
import csv
import functools
import io
import keyword
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autograder import notebook
from autograder.chapters import CHAPTERS
from autograder.feedback import TEXT, code, escape, page
from course import paths

WIDTH = 5  # tokens per passage
MIN_PASSAGES = 30  # about two lines of code: an answer with fewer passages is too short to judge
THRESHOLD = 0.8  # similarity listed for review
COMMON_SHARE, COMMON_FLOOR = 0.02, 10  # a passage more answers share than this proves nothing
MAX_SOURCE = 100_000  # characters of one answer that are compared
KEEP = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))
NOTE = "Similar answers are listed for review, never as a verdict: a short or standard answer can be alike by chance."


@dataclass(frozen=True)
class Match:
    """Two answers to one exercise that look alike: two submissions, or a submission and the course's code."""

    exercise: str
    a: str  # the submission's path under the submissions folder
    b: str  # another submission's path, or the reference's file
    similarity: float
    passages: int  # passages they share
    kind: str  # "pair" or "reference"
    group: int = 0  # pairs linked through shared members form a group (numbered per exercise, from 1)


RENAMED_FIELDS = {"id", "arg"}  # Name.id, arg.arg: names the answer chooses (so are defined names, below)
SKIPPED_FIELDS = {"ctx", "type_comment", "kind", "type_ignores"}
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
NAMED = (*DEFINITIONS, ast.ExceptHandler)  # their field `name` is a name the answer chooses


def _docstring(items: list) -> bool:
    first = items[0] if items else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _flatten(node: ast.AST, name, found: list[str]) -> None:
    """The syntax tree in source order as tokens: node types, then their names and constants;
    docstrings left out."""
    found.append(type(node).__name__)
    for field, value in ast.iter_fields(node):
        if field in SKIPPED_FIELDS:
            continue
        items = value if isinstance(value, list) else [value]
        if field == "body" and isinstance(node, (ast.Module, *DEFINITIONS)) and _docstring(items):
            items = items[1:]
        for item in items:
            if isinstance(item, ast.AST):
                _flatten(item, name, found)
            elif item is not None:
                chosen = field in RENAMED_FIELDS or (field == "name" and isinstance(node, NAMED))
                found.append(name(item) if chosen else repr(item))


def _lexical(source: str, name) -> list[str]:
    """Tokens of a source that does not parse, as far as it can be read; names renamed all the same."""
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME:
                found.append(name(token.string))
            elif token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER):
                found.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return found


@functools.lru_cache(maxsize=65536)
def tokens(source: str, keep: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The answer's normalised tokens (see the module docstring); ``keep`` names more names not to
    rename (the modules the release's setup cells import)."""
    source = source[:MAX_SOURCE]
    renamed: dict[str, str] = {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    keep = KEEP | keep | (_imported(tree) if tree and "import" in source else set())

    def name(text: str) -> str:
        return text if text in keep else renamed.setdefault(text, f"v{len(renamed)}")

    found: list[str] = []
    if tree is not None:
        try:
            _flatten(tree, name, found)
            return tuple(found)
        except RecursionError:  # nested too deeply to walk: read it as text
            renamed.clear()
    return tuple(_lexical(source, name))


def passages(source: str, keep: frozenset[str] = frozenset()) -> frozenset[tuple[str, ...]]:
    """The set of ``WIDTH``-token passages of the normalised answer."""
    found = tokens(source, keep)
    return frozenset(zip(*(found[i:] for i in range(WIDTH)), strict=False))


def _similar_pairs(sets: list[frozenset], cap: int, threshold: float) -> list[tuple[int, int, int, float]]:
    """(i, j, passages shared, Jaccard index) for the answers ``i < j`` at least ``threshold`` alike
    over their distinctive passages (those at most ``cap`` answers have), when both have at least
    ``MIN_PASSAGES`` of them. Pairs are counted per shared passage, with numpy, so the work follows
    the passages answers share rather than the number of pairs of answers."""
    if not sets:
        return []
    vocabulary: dict[tuple, int] = {}
    ids = [
        np.fromiter((vocabulary.setdefault(p, len(vocabulary)) for p in found), np.int64, len(found)) for found in sets
    ]
    frequency = np.bincount(np.concatenate(ids), minlength=len(vocabulary))
    distinctive = [found[frequency[found] <= cap] for found in ids]
    sizes = np.array([len(found) for found in distinctive], dtype=np.int64)
    answer = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    passage = np.concatenate(distinctive)
    counted = (frequency[passage] >= 2) & (sizes[answer] >= MIN_PASSAGES)
    answer, passage = answer[counted], passage[counted]
    order = np.lexsort((answer, passage))  # by passage, then answer
    answer, passage = answer[order], passage[order]
    starts = np.flatnonzero(np.r_[True, passage[1:] != passage[:-1]]) if len(passage) else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, len(passage)])
    n, codes = len(sets), []
    for m in np.unique(lengths[lengths >= 2]):  # passages held by m answers, all at once
        members = answer[starts[lengths == m][:, None] + np.arange(m)]  # (passages, m), ascending
        i, j = np.triu_indices(m, k=1)
        codes.append((members[:, i] * n + members[:, j]).ravel())
    if not codes:
        return []
    pairs, shared = np.unique(np.concatenate(codes), return_counts=True)
    first, second = pairs // n, pairs % n
    jaccard = shared / (sizes[first] + sizes[second] - shared)
    hit = jaccard >= threshold
    return list(
        zip(first[hit].tolist(), second[hit].tolist(), shared[hit].tolist(), jaccard[hit].tolist(), strict=True)
    )


def _groups(pairs: list[tuple[str, str]]) -> dict[str, int]:
    """Submission -> the number of its group (pairs linked through a shared member), from 1 in order of members."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
    roots = {}
    for member in sorted(parent):
        roots.setdefault(root(member), len(roots) + 1)
    return {member: roots[root(member)] for member in parent}


def compare(
    answers: dict[str, str],
    owners: dict[str, str],
    stub: str = "",
    references: dict[str, str] | None = None,
    exercise: str = "",
    threshold: float = THRESHOLD,
    keep: frozenset[str] = frozenset(),
) -> tuple[list[Match], int]:
    """Matches among ``answers`` (submission -> source) of one exercise, pairs of different owners
    only, and with each of ``references`` (file -> source); and how many answers were too short
    to judge."""
    given = passages(stub, keep)
    judged = {}
    for submission, source in answers.items():
        found = passages(source, keep) - given
        if len(found) >= MIN_PASSAGES:
            judged[submission] = found
    names = sorted(judged)
    sets = [judged[name] for name in names]
    cap = max(COMMON_FLOOR, int(COMMON_SHARE * len(sets)))
    matches = [
        Match(exercise, names[i], names[j], similarity, shared, "pair")
        for i, j, shared, similarity in _similar_pairs(sets, cap, threshold)
        if owners.get(names[i]) != owners.get(names[j])
    ]
    group = _groups([(m.a, m.b) for m in matches])
    matches = [Match(m.exercise, m.a, m.b, m.similarity, m.passages, m.kind, group[m.a]) for m in matches]
    for label, source in (references or {}).items():
        reference = passages(source, keep)
        for name, found in zip(names, sets, strict=True):
            shared = len(found & reference)
            if shared / len(found) >= threshold:
                matches.append(Match(exercise, name, label, shared / len(found), shared, "reference"))
    matches.sort(key=lambda m: (m.kind != "pair", m.group, -m.similarity, m.a, m.b))
    return matches, len(answers) - len(judged)


# --- what the answers are compared with ------------------------------------------------------------


def _closure(module_path: Path, names: tuple[str, ...]) -> str:
    """The source of the module-level functions and classes ``names`` and of those they use, in the module's order."""
    text = module_path.read_text()
    tree = ast.parse(text)
    defined = {
        node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    wanted, stack = set(), [n for n in names if n in defined]
    while stack:
        name = stack.pop()
        if name in wanted:
            continue
        wanted.add(name)
        used = {n.id for n in ast.walk(defined[name]) if isinstance(n, ast.Name)}
        stack += [n for n in used if n in defined]
    return "\n\n".join(ast.get_source_segment(text, node) for name, node in defined.items() if name in wanted)


@functools.cache
def chapter_material(chapter: str) -> dict:
    """What a chapter's answers are compared with: per exercise, the release's stub and the course's
    code (``course/<slug>.py``'s functions of the exercise's names, and the solution's answer
    cell), and the modules the release's setup cells import."""
    release = notebook.released(chapter)
    exercises = CHAPTERS[chapter]
    stubs = notebook.answers(release, exercises, release).sources
    keep = frozenset().union(*(_imported(ast.parse(source)) for source in notebook.setup_sources(release)))
    module = paths.ROOT / "course" / f"{paths.slug(chapter)}.py"
    solutions = {}
    try:
        from autograder import release as releasing

        instructor = releasing.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
        solutions = notebook.answers(instructor, exercises, release).sources
    except ImportError:  # jupytext is an instructor's extra: compare with the course module only
        pass
    references = {}
    for exercise in exercises:
        found = {}
        if module.exists():
            code = _closure(module, exercise.defines)
            if code:
                found[module.relative_to(paths.ROOT).as_posix()] = code
        if exercise.grade_id in solutions:
            found[f"solutions/{chapter}.py"] = solutions[exercise.grade_id]
        references[exercise.grade_id] = found
    return {"stubs": stubs, "references": references, "keep": keep}


def find(graded: list, threshold: float = THRESHOLD) -> tuple[list[Match], list[str]]:
    """Matches across the class (``shards.Graded`` entries), exercise by exercise in course order,
    and a line per exercise saying how many answers were judged."""
    by_exercise: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    owners = {g.relative: g.learner for g in graded}
    for g in graded:
        for grade_id, source in (g.report.answers or {}).items():
            by_exercise[(g.report.chapter, grade_id)][g.relative] = source
    matches, summary = [], []
    for chapter, exercises in CHAPTERS.items():
        for exercise in exercises:
            answers = by_exercise.get((chapter, exercise.grade_id))
            if not answers:
                continue
            material = chapter_material(chapter)
            found, short = compare(
                answers,
                owners,
                material["stubs"].get(exercise.grade_id, ""),
                material["references"].get(exercise.grade_id),
                exercise.grade_id,
                threshold,
                material["keep"],
            )
            matches += found
            pairs = sum(m.kind == "pair" for m in found)
            summary.append(
                f"{chapter} {exercise.grade_id}: {len(answers)} answers, {short} too short or unanswered; "
                f"{pairs} similar pairs, {len(found) - pairs} like the course's code"
            )
    return matches, summary


# --- the report ------------------------------------------------------------------------------------


def write_report(out: Path, graded: list, threshold: float = THRESHOLD) -> tuple[list[str], str]:
    """``similarity.csv`` and ``similarity.html`` in ``out``; returns a line per exercise and one for the class."""
    matches, summary = find(graded, threshold)
    owners = {g.relative: g.learner for g in graded}
    with open(Path(out) / "similarity.csv", "w", newline="", **TEXT) as handle:
        writer = csv.writer(handle)
        writer.writerow(["exercise", "kind", "group", "similarity", "passages", "learner_a", "a", "learner_b", "b"])
        for m in matches:
            learners = [owners[m.a], m.a, owners.get(m.b, ""), m.b]
            writer.writerow([m.exercise, m.kind, m.group or "", f"{m.similarity:.3f}", m.passages, *learners])

    answers = {(g.relative, grade_id): source for g in graded for grade_id, source in (g.report.answers or {}).items()}
    chapter_of = {g.relative: g.report.chapter for g in graded}
    members: dict[tuple[str, int], set[str]] = defaultdict(set)
    for m in matches:
        if m.kind == "pair":
            members[(m.exercise, m.group)].update((m.a, m.b))
    body = [
        "<h1>Answers that look alike</h1>",
        f"<p>{escape(NOTE)} Threshold {threshold:.2f}; names and layout normalised; passages shared by more "
        f"than {COMMON_SHARE:.0%} of the answers to an exercise left out of pairs.</p>",
        "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in summary) + "</ul>",
    ]
    shown, heading = set(), ""
    for m in matches:
        if m.exercise != heading:
            heading = m.exercise
            body.append(f"<h2><code>{escape(m.exercise)}</code></h2>")
        if m.kind == "pair":
            if (m.exercise, m.group) in shown:  # a group is shown once, by its most alike pair
                continue
            shown.add((m.exercise, m.group))
            group = sorted(members[(m.exercise, m.group)])
            title = f"group {m.group}: {len(group)} submissions, most alike {m.similarity:.2f}: {', '.join(group)}"
            right = answers.get((m.b, m.exercise), "")
        else:
            title = f"{m.a} and {m.b}: {m.similarity:.0%} of the answer's passages are the course's"
            right = chapter_material(chapter_of[m.a])["references"].get(m.exercise, {}).get(m.b, "")
        left = answers.get((m.a, m.exercise), "")
        sides = code(m.a + "\n\n" + left) + code(m.b + "\n\n" + right)
        body.append(f'<h3>{escape(title)}</h3>\n<div class="pair">{sides}</div>')
    (Path(out) / "similarity.html").write_text(page("Answers that look alike", "\n".join(body)), **TEXT)
    pairs = sum(m.kind == "pair" for m in matches)
    total = f"similar answers to review: {pairs} pairs of submissions, {len(matches) - pairs} like the course's code"
    return summary, total
