"""The layout: every chapter has all of its parts under its slug, and the project's own modules
import each other without cycles, with arrows pointing one way (tools -> autograder -> course)."""

import ast
from pathlib import Path

import pytest

from course import paths

PARTS = (
    "solutions/{chapter}.py",
    "notebooks/{chapter}.ipynb",
    "course/{slug}.py",
    "course/plots/{slug}.py",
    "autograder/chapters/{slug}.py",
    "tests/test_{slug}.py",
)
PACKAGES = ("course", "autograder", "tools")  # the project's own modules, by their top folder
CHAPTERS = [source.stem for source in paths.chapter_sources()]
SLUGS = {paths.slug(chapter) for chapter in CHAPTERS}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_has_all_of_its_parts(chapter):
    wanted = [part.format(chapter=chapter, slug=paths.slug(chapter)) for part in PARTS]
    assert [part for part in wanted if not (paths.ROOT / part).is_file()] == []


@pytest.mark.parametrize("folder, prefix", [("course/plots", ""), ("autograder/chapters", ""), ("tests", "test_")])
def test_every_per_chapter_file_belongs_to_a_chapter(folder, prefix):
    """A file in a per-chapter folder is named by a slug (shared ones start with _), so nothing of
    one chapter hides under another name."""
    shared = {
        "tests": {
            "conftest",
            "test_browser",
            "test_checkpoints",
            "test_class_grading",
            "test_gpu",
            "test_grader",
            "test_headless",
            "test_hostile",
            "test_install_torch",
            "test_layout",
            "test_model",
            "test_nbgrader",
            "test_notebooks",
            "test_packaging",
            "test_quiz",
            "test_reference",
            "test_release",
            "test_sandbox",
            "test_timing",
            "test_widgets",
        }
    }
    names = {p.stem for p in (paths.ROOT / folder).glob("*.py") if not p.stem.startswith("_")}
    strays = {name for name in names if name.removeprefix(prefix) not in SLUGS} - shared.get(folder, set())
    assert strays == set()


def module_name(path: Path) -> str:
    parts = path.relative_to(paths.ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the project's own packages: dotted name -> file."""
    return {module_name(p): p for package in PACKAGES for p in sorted((paths.ROOT / package).rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """The project module that ``import name`` loads (``pkg.module.function`` -> ``pkg.module``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that ``name`` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_resolve(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else _resolve(base, known))
    return found - {None, name}


def import_graph() -> dict[str, set[str]]:
    files = modules()
    return {name: imports(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path that returns to its start, or [] when there is none."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_module_level_and_function_level_imports():
    graph = import_graph()
    assert "course.quantization" in graph["autograder.chapters.quantization"]  # module level
    assert "course.kernels.flash_attention" in graph["course.kernels"]  # inside a function
    assert "course.model" in graph["course.flash_attention"]  # from course.model import ...


def test_no_import_cycles():
    assert find_cycle(import_graph()) == []


@pytest.mark.parametrize("lower, upper", [("course", "autograder"), ("course", "tools"), ("autograder", "tools")])
def test_arrows_point_one_way(lower, upper):
    graph = import_graph()
    upward = {
        (a, b) for a, targets in graph.items() if a.split(".")[0] == lower for b in targets if b.split(".")[0] == upper
    }
    assert upward == set()
