"""The sources of the chapters not converted yet to the line between files, as the learners' copy
still edits them (``autograder/learners_copy.py`` copies every other file byte for byte): every
function marked ``@withheld`` keeps only its docstring and a ``raise``, and a chapter's checks
module loses its hidden checks and the code only they reach. Each converted chapter takes its files
off :data:`STILL_EDITED`; the last one deletes this module (the recipe says what else goes with it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

STUB = 'raise NotImplementedError("withheld from the learners\' copy: the recorded results answer its calls")'

# The files the learners' copy still edits: the chapters' not converted yet. Every other Python file of
# the copy is the instructor's, byte for byte (tests/test_learners_copy.py).
STILL_EDITED: tuple[str, ...] = ()


def is_withheld(node: ast.AST) -> bool:
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
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_withheld(node):
            edits.append(_stub(node))
        elif isinstance(node, ast.ClassDef) and is_withheld(node):
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
