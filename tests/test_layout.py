"""The layout: every chapter has all of its parts under its slug, and the project's own modules
import each other without cycles, with arrows pointing one way (tools -> autograder -> course)."""

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import colab
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

    def found(part: str) -> bool:  # a module, or a package of that name
        return (paths.ROOT / part).is_file() or (paths.ROOT / part.removesuffix(".py") / "__init__.py").is_file()

    assert [part for part in wanted if not found(part)] == []


@pytest.mark.parametrize(
    "folder, prefix",
    [
        ("course/plots", ""),
        ("course/benchmarks", ""),
        ("autograder/chapters", ""),
        ("autograder/hidden", ""),
        ("autograder/mistakes", ""),
        ("course/answers", ""),
        ("tests", "test_"),
    ],
)
def test_every_per_chapter_file_belongs_to_a_chapter(folder, prefix):
    """A file in a per-chapter folder is named by a slug (shared ones start with _), so nothing of
    one chapter hides under another name."""
    shared = {
        "tests": {
            "conftest",
            "test_browser",
            "test_checkpoints",
            "test_class_grading",
            "test_colab_check",
            "test_gpu",
            "test_grader",
            "test_headless",
            "test_hub",
            "test_hostile",
            "test_install_torch",
            "test_layout",
            "test_learners_copy",
            "test_learners_copy_runs",
            "test_model",
            "test_nbgrader",
            "test_neighbours",
            "test_notebooks",
            "test_packaging",
            "test_platforms",
            "test_points",
            "test_quiz",
            "test_reference",
            "test_release",
            "test_sandbox",
            "test_setup_course",
            "test_site",
            "test_suite_time",
            "test_timing",
            "test_widgets",
            "test_withheld",
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


def test_a_learners_copy_of_a_notebook_is_not_a_chapter(tmp_path, monkeypatch):
    """In the learners' copy the chapters are read off notebooks/: a notebook a learner duplicated
    beside them (JupyterLab's "-Copy1", or any name) made `check` fail in every chapter, its name
    sought as a chapter's checks module."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("01_prefill_decode", "09_choosing_a_technique", "09_choosing_a_technique-Copy1", "09_mine"):
        (notebooks / f"{name}.ipynb").write_text("{}")
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")  # none: as in the learners' copy
    monkeypatch.setattr(paths, "NOTEBOOKS", notebooks)
    assert [s.stem for s in paths.chapter_sources()] == ["01_prefill_decode", "09_choosing_a_technique"]


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_module_level_and_function_level_imports():
    graph = import_graph()
    assert "course.quantization" in graph["autograder.chapters.quantization.absmax"]  # module level
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


SCAFFOLD = """
import json, sys
from pathlib import Path
import nbformat
from autograder import coverage, grade, release
from autograder.chapters import CHAPTERS
from autograder import colab
from course import paths

assert paths.ROOT == Path.cwd().resolve(), paths.ROOT  # the copy's packages, not the installed tree's
new = [source for source in release.chapters() if source.stem == "10_throwaway"]
release.write_points(new)
release.build(new, paths.NOTEBOOKS)
release.write_readme(release.chapters())
solution = Path(sys.argv[1]) / "solution.ipynb"
nbformat.write(release.instructor_notebook(new[0]), solution)
reports = {
    kind: grade.grade(path, seed=1).as_json()
    for kind, path in (("solution", solution), ("blank", paths.NOTEBOOKS / "10_throwaway.ipynb"))
}
quiz = CHAPTERS["10_throwaway"][-1]
print(json.dumps({"reports": reports, "problems": coverage.problems(), "quiz_points": quiz.points}))
"""


def _digests(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in tree.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts
    }


def _copy_checkout(tree: Path) -> None:
    """The checkout's own files into ``tree``: in a git checkout what git tracks or would track (so no
    virtual environment, build, runtime or artifacts of any size), else everything but those."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=paths.ROOT,
        capture_output=True,
    )
    if (paths.ROOT / ".git").exists() and listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = paths.ROOT / name
            if source.is_file():  # a deleted file still listed until its removal is staged
                (tree / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, tree / name)
        return
    skip = shutil.ignore_patterns(
        ".venv", ".git", ".colab-runtime", "*_cache", "__pycache__", "*.egg-info", "feedback", "submissions",
        "build", "dist", "test-artifacts",
    )  # fmt: skip
    shutil.copytree(paths.ROOT, tree, ignore=skip)


def test_a_new_chapter_is_its_files(tmp_path):
    """`make chapter` scaffolds a throwaway chapter in a copy of the tree; the release and the grader
    find it by its slug (full marks for its solution, none for its blank copy), its own tests pass,
    and nothing outside its files changes but its row in the README's chapter table."""
    tree = tmp_path / "tree"
    _copy_checkout(tree)
    before, readme = _digests(tree), (tree / "README.md").read_text()
    made = subprocess.run(
        [sys.executable, "tools/new_chapter.py", "--slug", "throwaway", "--number", "10"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    again = subprocess.run(
        [sys.executable, "tools/new_chapter.py", "--slug", "throwaway", "--number", "11"], cwd=tree, capture_output=True
    )
    assert again.returncode == 2 and b"would overwrite" in again.stderr
    taken = subprocess.run(
        [sys.executable, "tools/new_chapter.py", "--slug", "other", "--number", "10"], cwd=tree, capture_output=True
    )
    assert taken.returncode == 2 and b"number 10 is taken by solutions/10_throwaway.py" in taken.stderr
    done = subprocess.run(
        [sys.executable, "-c", SCAFFOLD, str(tmp_path)],
        cwd=tree,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    solution, blank = found["reports"]["solution"], found["reports"]["blank"]
    assert found["problems"] == [] and solution["chapter"] == blank["chapter"] == "10_throwaway"
    assert solution["score"] == solution["max_score"] == 3 + 4
    assert len(solution["tests"]) == 3 + 1 + 4  # the exercise's checks; the quiz's answered check and 4 questions
    assert blank["score"] == 0 and found["quiz_points"] == 4

    after = _digests(tree)
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    mine = {
        "solutions/10_throwaway.py",
        "notebooks/10_throwaway.ipynb",
        "course/throwaway.py",
        "course/plots/throwaway.py",
        "course/benchmarks/throwaway.py",
        "autograder/chapters/throwaway.py",
        "autograder/hidden/throwaway.py",
        "autograder/mistakes/throwaway.py",
        "tests/test_throwaway.py",
        "data/quizzes/throwaway.toml",
        "solutions/quizzes/throwaway.toml",
    }
    assert changed == mine | {"README.md"}
    added = set((tree / "README.md").read_text().splitlines()) - set(readme.splitlines())
    removed = set(readme.splitlines()) - set((tree / "README.md").read_text().splitlines())
    assert removed == set() and len(added) == 1
    (row,) = added
    assert row.startswith("| [10_throwaway](notebooks/10_throwaway.ipynb) | ")
    assert (
        f"| 1 + 4 questions (3 + 4 points) | [![Open in Colab]({colab.BADGE})]({colab.notebook_url('10_throwaway')}) |"
        in row
    )
    assert '"points": 3' in (tree / "solutions/10_throwaway.py").read_text()

    shared = ["tests/test_quiz.py", "tests/test_widgets.py", "tests/test_release.py", "tests/test_notebooks.py"]
    tests = subprocess.run(  # its own tests, and the shared tests' cases for it: quiz, figures, copy, headless run
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "throwaway", "tests/test_throwaway.py"]
        + shared,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},  # the notebooks' kernels import the copy's course too
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert tests.returncode == 0 and "skipped" not in tests.stdout, tests.stdout[-3000:]
    print(tests.stdout.splitlines()[-1])

    bench = subprocess.run(  # make bench finds its measurements by its slug, and records them
        [sys.executable, "tools/benchmarks.py", "--only", "throwaway"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert bench.returncode == 0 and "== chapter 10: Throwaway ==" in bench.stdout, bench.stderr[-3000:]
    ratios = json.loads((tree / "data/performance.json").read_text())["ratios"]
    assert ratios["throwaway_error_share_of_bandwidth"] > 0
