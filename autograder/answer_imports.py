"""What a learner's answer reaches that grading will not give it: the course package, and names that
only the chapter's own cells define (grading runs the setup cells, the answers and the learner's
added cells, never the chapter's demonstrations). The visible check asks here first, so that it
fails, with grading's own message, what grading would fail.

The cell that defines the answer is read first: one that imports the course (even a name the
answer never uses) stops at grading before it defines anything. Then the answer is followed
through its code (``dis``): the global names its functions read, the modules they import, and the
functions and classes of the notebook it calls, recursively. Which cell defined a name is read off
the kernel's input history (``In``): a name is the chapter's when every executed cell that binds
it is a chapter cell as released.

Decorated functions (``@torch.no_grad()``, any ``functools.wraps`` decorator) are read behind their
wrapper. Not handled: names reached through ``getattr`` or ``globals()`` with computed strings, and code
run outside IPython (no history: only the course package is looked for).
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import types

from autograder import notebook
from autograder.checks import Exercise
from autograder.sandbox.inside import BLOCKED_PACKAGES, unavailable

_MISSING = object()


def _from_blocked_package(module_name) -> bool:
    return isinstance(module_name, str) and module_name.partition(".")[0] in BLOCKED_PACKAGES


def _codes(code: types.CodeType):
    """``code`` and every code object nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


def _functions(obj, namespace: dict) -> list:
    """The plain functions behind ``obj`` that the notebook defined: itself, or a class's methods
    and properties (code of other modules, torch's say, is not followed)."""
    if isinstance(obj, functools.partial):
        return _functions(obj.func, namespace)
    found = []
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        found = [getattr(obj, "__func__", obj)]
    elif inspect.isclass(obj):
        for klass in obj.__mro__:
            for member in vars(klass).values():
                member = getattr(member, "__func__", member)  # staticmethod, classmethod
                if isinstance(member, property):
                    found += [f for f in (member.fget, member.fset) if f is not None]
                elif inspect.isfunction(member):
                    found.append(member)
    found = [_unwrapped(f) for f in found]  # @torch.no_grad() and other functools.wraps decorators
    return [f for f in found if getattr(f, "__globals__", None) is namespace]


def _unwrapped(function):
    """The function a ``functools.wraps`` decorator wraps (``__wrapped__``, followed to the end), or
    ``function`` itself; a wrapper whose chain loops is left as it is."""
    try:
        return inspect.unwrap(function)
    except ValueError:
        return function


def _reads(function) -> tuple[set[str], set[str]]:
    """The global names ``function`` reads and the modules it imports, through all its nested code."""
    names, modules = set(), set()
    for code in _codes(function.__code__):
        for instruction in dis.get_instructions(code):
            if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                names.add(str(instruction.argval).removeprefix("NULL + ").removesuffix(" + NULL"))
            elif instruction.opname == "IMPORT_NAME":
                modules.add(str(instruction.argval))
    return names, modules


def _course_name(value) -> str:
    """The course module or object that ``value`` is, or ""."""
    if isinstance(value, types.ModuleType):
        return value.__name__ if _from_blocked_package(value.__name__) else ""
    module = getattr(value, "__module__", None)
    if _from_blocked_package(module):
        return f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', '?'))}"
    return ""


@functools.cache
def _chapter_cells(chapter: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Of the released chapter: the normalised sources of the cells grading never runs, the names
    they bind, and the names the setup cells bind."""
    release = notebook.released(chapter)
    cells = notebook.release_cells(release)
    bound = frozenset().union(*(notebook.defined_names(s) for s in cells.chapter_sources))
    setup = frozenset().union(*(notebook.defined_names(s) for s in notebook.setup_sources(release)))
    return frozenset(notebook.normalised(s) for s in cells.chapter_sources), bound, setup


def _binders(name: str, history: list) -> list[str]:
    """The cells of the kernel's input history that bind ``name``, in the order they ran."""
    return [s for s in history if isinstance(s, str) and name in notebook.defined_names(s)]


def _chapter_only(name: str, history: list[str], chapter: str, answer_names: set[str]) -> bool:
    """Whether ``name`` was bound only by chapter cells as released (never by a cell of the learner's)."""
    try:
        sources, bound, setup = _chapter_cells(chapter)
    except (OSError, ValueError, notebook.NotebookError):  # no released notebook here: nothing to compare
        return False
    if name not in bound or name in setup or name in answer_names:
        return False
    binders = _binders(name, history)
    return bool(binders) and all(notebook.normalised(s) in sources for s in binders)


def _cell_imports(source: str) -> list[str]:
    """The course's modules that a cell imports anywhere in it (its top level included), in order."""
    try:
        tree = ast.parse(notebook.without_magics(source))
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
    return [m for m in found if _from_blocked_package(m)]


def _defining_cell_problem(exercise: Exercise, history: list) -> str:
    """Why grading would stop in the cell that last defined one of ``exercise``'s names: it imports
    the course package (even a name the answer never uses); "" when it does not."""
    for name in exercise.defines:
        binders = _binders(name, history)
        blocked = _cell_imports(binders[-1]) if binders else []
        if blocked:
            return (
                f"the cell that defines {name} imports {blocked[0]}; grading runs that cell without the course "
                f"package, so it would stop there and {name} would not be defined: "
                f"{unavailable(blocked[0].partition('.')[0])}. Remove the import from that cell"
            )
    return ""


def problem(exercise: Exercise, chapter: str, namespace: dict) -> str:
    """Why grading would fail ``exercise``'s answer in ``namespace`` for a reason the learner can see
    now, in grading's words; "" when there is none."""
    history = namespace.get("In") if isinstance(namespace.get("In"), list) else None
    if history is not None and (stopped := _defining_cell_problem(exercise, history)):
        return stopped
    from autograder.chapters import exercises

    answer_names = {name for e in exercises(chapter) for name in e.defines}
    stack = [(name, namespace.get(name, _MISSING)) for name in exercise.defines]
    seen: set[int] = set()
    while stack:
        label, obj = stack.pop()
        if obj is _MISSING or id(obj) in seen:
            continue
        seen.add(id(obj))
        used = _course_name(obj)
        if used:
            return f"{label} is {used}, from the course package; grading would fail it: {unavailable('course')}"
        for function in _functions(obj, namespace):
            names, modules = _reads(function)
            blocked = sorted(m for m in modules if _from_blocked_package(m))
            if blocked:
                top = blocked[0].partition(".")[0]
                return f"{label} imports {blocked[0]}; grading would fail it: {unavailable(top)}"
            for name in sorted(names):
                value = namespace.get(name, _MISSING)
                if value is _MISSING:
                    continue  # a builtin, or not defined yet: the call itself will say so
                used = _course_name(value)
                if used:
                    return (
                        f"{label} uses {name} ({used}) from the course package; grading would fail it: "
                        f"{unavailable('course')}"
                    )
                if history is not None and _chapter_only(name, history, chapter, answer_names):
                    return (
                        f"{label} reads {name}, which only the chapter's own cells define; grading runs the setup "
                        f"cell, your answer cells and the cells you added, not the chapter's, so it would fail "
                        f"with NameError: name '{name}' is not defined. Define {name} in your answer or in a "
                        "cell of your own"
                    )
                if _functions(value, namespace):
                    stack.append((name, value))
    return ""
