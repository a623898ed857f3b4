"""Shared fixtures: instructor notebooks built from solutions/, papermill, and each chapter's planted
mistakes graded as one batch (a chapter's test module lists them in ``PLANTED``, from
``autograder/mistakes/<slug>.py``), and the assertions and helpers the chapters' tests share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import grade, headless, release, sandbox
from autograder.mistakes import Planted, misjudged
from course import paths

ARTIFACTS = paths.ROOT / "test-artifacts"
KERNEL = "course"
# Time limits in tests are ceilings for a hang, never budgets: a machine busy with other work must
# not fail a test. Grading limits are tests/test_hostile.py's subject; elsewhere they are generous.
GENEROUS = sandbox.Limits(wall_seconds=900, probe_seconds=300, cell_seconds=300)


# pytest-xdist (`make test`: two workers). A test file runs on one worker, so that its module's
# fixtures (a graded batch, regenerated numbers) are made once; files that share a session fixture run
# on one worker too (TOGETHER: file -> the fixture). The files of SPREAD share nothing costly: their
# tests go one by one to whichever worker is free, last, so that both workers finish together; the
# files that take longest go first (LONGEST, the slowest first).
TOGETHER = {"test_grader": "copies_graded", "test_platforms": "copies_graded"}
SPREAD = {"test_notebooks", "test_learners_copy_runs", "test_neighbours"}
LONGEST = (
    "test_platforms",
    "test_grader",
    "test_learners_copy",
    "test_site",
    "test_choosing_a_technique",
    "test_quantization",
    "test_in_practice",
    "test_class_grading",
    "test_hostile",
    "test_reference",
    "test_browser",
    "test_nbgrader",
    "test_speculative_decoding",
    "test_layout",
)


def pytest_configure(config):
    """Each pytest-xdist worker's torch on its share of the CPUs (one thread each for `make test`'s
    two workers on two cores), and the kernels and processes it starts too (``OMP_NUM_THREADS``,
    which ``timing.usable_cpus`` keeps to: a chapter chooses its thread count among that share, so
    its figures do not depend on whether the other worker is busy at that moment).
    With torch's default of a thread per core in each worker, the workers' thread pools wait for
    each other's descheduled threads: the course model's forward passes ran 12 times slower here."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        import torch

        from course import timing

        share = max(1, timing.usable_cpus() // int(workers))
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


def _module(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = _module(item.nodeid)
        return len(LONGEST) + 1 if name in SPREAD else LONGEST.index(name) if name in LONGEST else len(LONGEST)

    items.sort(key=rank)  # stable: a file's own order stays


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduler of whole scopes, in collection order, with the scopes said above."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFixture(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            name = _module(nodeid)
            return nodeid if name in SPREAD else TOGETHER.get(name, name)

    config.option.loadscopereorder = False  # xdist would sort the scopes by their number of tests
    return ByFixture(config, log)


def load_tool(name: str):
    """A script of ``tools/`` as a module (they are not a package: they run before the course is installed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, paths.ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def chapter_names() -> list[str]:
    return [p.stem for p in release.chapters()]


def chapter_cases(name: str) -> dict[str, object]:
    """What a shared test needs of each chapter, kept in the chapter's own ``tests/test_<slug>.py``
    under ``name`` (``CHARTS``, ``FIGURES``, ``PROSE_WARNINGS``, ``SCENARIO_ANSWERS``,
    ``SEED_QUESTIONS``), by slug; chapters without it have nothing listed."""
    import importlib

    slugs = [paths.slug(source) for source in paths.chapter_sources()]
    return {slug: getattr(importlib.import_module(f"test_{slug}"), name, {}) for slug in slugs}


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def instructor_notebooks(tmp_path_factory) -> dict[str, Path]:
    """Each chapter's source as an .ipynb with solutions and hidden tests (what the instructor runs)."""
    import nbformat

    folder = tmp_path_factory.mktemp("instructor")
    built = {}
    for source in release.chapters():
        path = folder / f"{source.stem}.ipynb"
        nbformat.write(release.instructor_notebook(source), path)
        built[source.stem] = path
    return built


@pytest.fixture(scope="session")
def kernel() -> str:
    """The course kernel of this environment, registered if missing (`make` registers it too)."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if KERNEL not in specs or not Path(specs[KERNEL]).resolve().is_relative_to(Path(sys.prefix).resolve()):
        subprocess.run(
            [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL],
            check=True,
            capture_output=True,
        )
    return KERNEL


def execute(notebook: Path, output: Path, kernel: str, timeout: int = headless.CELL_TIMEOUT) -> dict:
    """Run ``notebook`` headless (papermill, the course's engine); return the executed notebook.

    A cell that raises stops the run, even one tagged ``raises-exception`` that papermill ran
    through; the caller decides from the returned notebook which errors were allowed. A cell past
    ``timeout`` seconds fails the test with the cell named (:class:`autograder.headless.CellTimeout`).
    """
    return headless.execute(notebook, output, kernel, cwd=paths.NOTEBOOKS, timeout=timeout)


@pytest.fixture(scope="session")
def executed_solution(request, instructor_notebooks, kernel, artifacts, tmp_path_factory, worker_id):
    """``executed_solution(chapter)``: the instructor's notebook of ``chapter`` executed headless, once
    in a test run whichever test asks first (the workers share it through a lock), and kept in
    ``test-artifacts/<chapter>.solution.ipynb``. The learners' copy's build executes the chapters
    (recording their calls across the line between the copies): those are its runs."""

    def run(chapter: str) -> dict:
        name = f"{chapter}.solution.ipynb"
        if chapter in learners_copy_chapters():
            done = request.getfixturevalue("learners_copy_folder").with_name("instructor-executed") / name
        else:
            done = once_a_run(
                name, lambda path: execute(instructor_notebooks[chapter], path, kernel), tmp_path_factory, worker_id
            )
        shutil.copy(done, artifacts / name)
        return json.loads(done.read_text())

    return run


def once_a_run(name: str, make, tmp_path_factory, worker_id: str) -> Path:
    """The path ``name`` in a folder the workers of this test run share, made by ``make(path)`` in
    whichever worker asks first (the others wait for it behind a lock), and kept for the run; a
    ``make`` that raises leaves nothing, so the next one to ask tries again."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    done = (base if worker_id == "master" else base.parent) / name
    with FileLock(str(done) + ".lock"):
        if not done.exists():
            partial = done.with_name(f"{name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            make(partial)
            partial.rename(done)
    return done


# The sizes of the measurements (each chapter's papermill parameters cell) where the learners' copy's
# tests run the chapters, each chapter three times (the instructor's copy in the build, then the
# learners' copy blank and solved): timings repeated once, chapter 4's without-cache runs not to 256
# tokens, chapter 2's adapters trained 8 steps at ranks 1 and 4 (its later sections use the rank-4
# one), chapter 8's decode timed at two batch sizes, 24 tokens per generation, GPTQ on one block
# calibrated on 4 windows of 64 tokens, losses on 128 tokens; chapter 9's servers timed on 16
# tokens, SmolLM2 on 4.
# The cells that time the machine are not compared between runs (tests/test_learners_copy_runs.py);
# every cell still runs, and the readings each cell prints are computed from its numbers. The
# copy's build and its runs take the same sizes, so its recordings answer them (`make
# learners-copy` uses the defaults).
MEASUREMENT_SIZES = {
    "02_lora": {"ADAPT_STEPS": 8, "RANKS": [1, 4]},
    "04_kv_cache": {"GEN_LENGTHS": [32, 64, 128], "REPEATS": 1},
    "06_speculative_decoding": {"REPEATS": 1},
    "07_distillation": {"REPEATS": 1},
    "08_in_practice": {
        "BATCHES": [1, 4],
        "GEN_TOKENS": 24,
        "GPTQ_BLOCKS": 1,
        "CALIBRATION": [4, 64],
        "EVAL_TOKENS": 128,
    },
    "09_choosing_a_technique": {"TIMED_TOKENS": 16, "SMOLLM2_TOKENS": 4},
}


def learners_copy_chapters() -> list[str]:
    """The chapters the learners' copy tests build: ``LEARNERS_COPY_CHAPTERS=05_flash_attention,...``
    (for working on one chapter), else all."""
    import os

    chosen = [c for c in os.environ.get("LEARNERS_COPY_CHAPTERS", "").split(",") if c]
    return chosen or chapter_names()


@pytest.fixture(scope="session")
def learners_copy_folder(kernel, tmp_path_factory, worker_id) -> Path:
    """The learners' copy of :func:`learners_copy_chapters` (``make learners-copy``), built once a
    test run for every worker; beside it, ``instructor-executed/``, the instructor's notebooks that
    the build executed."""
    from autograder import learners_copy

    def made(done: Path) -> None:
        chosen = learners_copy_chapters()
        learners_copy.build(done / "learners-copy", chosen, done / "instructor-executed", kernel, MEASUREMENT_SIZES)

    return once_a_run("learners-copy", made, tmp_path_factory, worker_id) / "learners-copy"


@pytest.fixture(scope="session")
def blank_run(learners_copy_folder, kernel, tmp_path_factory, worker_id):
    """``blank_run(chapter)``: the path of the learners' copy's notebook of ``chapter`` executed
    headless as learners get it (blank, the build's ``MEASUREMENT_SIZES``), its own folder first on
    the path; once a test run, by whichever test asks first (the workers share it through a lock):
    tests/test_learners_copy_runs.py checks it, tests/test_site.py makes the chapter's page of it."""

    def run(chapter: str) -> Path:
        notebook = learners_copy_folder / "notebooks" / f"{chapter}.ipynb"
        environment = {**os.environ, "PYTHONPATH": str(learners_copy_folder)}

        def make(folder: Path) -> None:
            folder.mkdir()
            sizes = MEASUREMENT_SIZES.get(chapter)  # the build's: its recordings answer these
            headless.execute(
                notebook, folder / notebook.name, kernel, cwd=notebook.parent, parameters=sizes, env=environment
            )

        return once_a_run(f"blank-{chapter}", make, tmp_path_factory, worker_id) / notebook.name

    return run


def borrowing_environment(venv: Path, course: Path) -> Path:
    """A virtual environment at ``venv`` with the course in the folder ``course`` installed as a hub's
    learners' environment installs it (``pip install -e``), which borrows this environment's other
    packages (a path file to them, read after its own): only the course is installed, offline, in
    seconds. This environment's own install of the course is not read there (its path files are not).
    Returns its Python."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    )
    (Path(own.stdout.strip()) / "zz_borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = ["-m", "pip", "--python", python, "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", course]
    installed = subprocess.run([sys.executable, *map(str, pip)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    return python


def with_the_solutions_answers(chapter: str, folder: Path):
    """The learners' copy's notebook of ``chapter`` in ``folder``, its answer cells the solution's."""
    import nbformat

    solution = release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
    answers = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    copy = nbformat.read(folder / "notebooks" / f"{chapter}.ipynb", as_version=4)
    for cell in copy.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return copy


def printed(executed: dict) -> str:
    """What the cells of ``executed`` printed, one string."""
    return "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))


def assert_every_figure_drawn(executed: dict) -> None:
    """Every cell that calls ``plots.plot_*`` or ``plots.widget_*`` shows a picture (a widget its
    static view too, for front ends without widgets), and there is at least one."""
    import re

    drawing = [
        c
        for c in executed["cells"]
        if c["cell_type"] == "code" and re.search(r"\bplots\.(plot|widget)_", "".join(c["source"]))
    ]
    assert drawing, "every chapter has figures"
    for cell in drawing:
        images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        assert images, f"no figure rendered headless for: {''.join(cell['source'])[:80]}"
        if re.search(r"\bplots\.widget_", "".join(cell["source"])):
            assert any("application/vnd.jupyter.widget-view+json" in o["data"] for o in images)


def see_through_pictures(executed: dict) -> list[int]:
    """Cells with a PNG that has transparent pixels: on a dark theme its black text is unreadable."""
    import base64
    import io

    from PIL import Image

    found = []
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png:
                picture = Image.open(io.BytesIO(base64.b64decode(png)))
                if picture.mode in ("RGBA", "LA", "P") and picture.convert("RGBA").getextrema()[3][0] < 255:
                    found.append(index)
    return found


def errors(executed: dict) -> list[tuple[int, list[str], str]]:
    """(cell index, tags, error name) for every cell that raised."""
    found = []
    for index, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append((index, cell.get("metadata", {}).get("tags", []), out["ename"]))
    return found


def long_tracebacks(executed: dict) -> list[tuple[int, list[str]]]:
    """(cell index, traceback) for every error a check cell showed with more than its one line
    (the hints above it say what to fix; a traceback through the checker says nothing more)."""
    return [
        (index, out["traceback"])
        for index, cell in enumerate(executed["cells"])
        if "check(" in "".join(cell.get("source", ""))
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error" and len(out.get("traceback", [])) != 1
    ]


def copy_into(path: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(path, folder / (name or path.name)))


COPIES_SEED = 7


@pytest.fixture(scope="session")
def copies_graded(instructor_notebooks, tmp_path_factory) -> tuple[dict, Path]:
    """Every chapter's solution and blank copy, chapter 3's solution as an editor that drops metadata
    saves it, and a file that is not JSON, graded on this system in one batch (seed ``COPIES_SEED``):
    ``solution/<chapter>``, ``blank/<chapter>``, ``stripped``, ``broken`` -> report, and the feedback
    folder. tests/test_grader.py checks them; tests/test_platforms.py compares the simulated systems'
    blanks with these (TOGETHER keeps the two files on one worker)."""
    folder = tmp_path_factory.mktemp("submissions")
    for chapter, path in instructor_notebooks.items():
        copy_into(path, folder / "solution", f"{chapter}.ipynb")
        copy_into(paths.NOTEBOOKS / f"{chapter}.ipynb", folder / "blank")
    stripped = json.loads(instructor_notebooks["03_quantization"].read_text())
    stripped["metadata"] = {}
    for cell in stripped["cells"]:
        cell["metadata"] = {}
    (folder / "stripped").mkdir()
    (folder / "stripped" / "chapter3.ipynb").write_text(json.dumps(stripped))
    (folder / "broken").mkdir()
    (folder / "broken" / "03_quantization.ipynb").write_text('{"cells": [')
    out = tmp_path_factory.mktemp("feedback")
    reports = grade.grade_folder(folder, out, GENEROUS, seed=COPIES_SEED)
    files = sorted(p for p in folder.rglob("*.ipynb"))
    by_learner = {}
    for path, report in zip(files, reports, strict=True):
        learner = grade._learner(folder, path)
        by_learner[learner if learner not in ("solution", "blank") else f"{learner}/{path.stem}"] = report
    return by_learner, out


def _replace_answer(notebook: dict, grade_id: str, source: str) -> dict:
    for cell in notebook["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell["source"] = source
            return notebook
    raise KeyError(grade_id)


@pytest.fixture(scope="module")
def planted_reports(request, instructor_notebooks, tmp_path_factory) -> dict:
    """The test module's ``PLANTED`` mistakes graded in one batch: name -> report. The module's name
    (``test_<slug>``) says which chapter's solution they are planted in."""
    slug = request.module.__name__.removeprefix("test_")
    chapter = next(source.stem for source in release.chapters() if paths.slug(source) == slug)
    folder = tmp_path_factory.mktemp(f"planted-{slug}")
    for name, planted in request.module.PLANTED.items():
        solution = json.loads(instructor_notebooks[chapter].read_text())
        notebook = _replace_answer(solution, planted.grade_id, planted.source)
        (folder / name).mkdir()
        (folder / name / f"{chapter}.ipynb").write_text(json.dumps(notebook))
    reports = grade.grade_folder(folder, tmp_path_factory.mktemp(f"feedback-{slug}"), GENEROUS, seed=7)
    files = sorted(folder.rglob("*.ipynb"))
    return {grade._learner(folder, path): report for path, report in zip(files, reports, strict=True)}


def assert_named(report, planted: Planted) -> None:
    """The report fails what ``planted`` must fail, names the mistake, and costs nothing else."""
    wrong = misjudged(report, planted)
    assert not wrong, "\n".join(wrong) + "\n" + report.text()


def verdicts(grade_id: str, source: str, seed: int = 7) -> dict:
    """Every check of the exercise ``grade_id`` (hidden ones too) on the answer ``source``, run in
    this process after the chapter's setup cells: check id -> Verdict. The probes and judges are the
    grader's; only the sandbox is left out, which makes a long list of planted mistakes quick to
    test. The inputs are not a graded notebook's: the i-th check of the exercise draws its probe
    from its own generator seeded ``seed + i`` (the same on every run), where the grader draws every
    check of the chapter from one generator of the submission's seed."""
    from autograder import notebook
    from autograder.chapters import chapter_of, exercise_by_id
    from autograder.selfcheck import run_in_process

    namespace: dict = {"__name__": "__main__"}
    for setup in notebook.setup_sources(notebook.released(chapter_of(grade_id))):
        exec(setup, namespace)
    exec(source, namespace)
    return {c.id: run_in_process(c, namespace, seed + i) for i, c in enumerate(exercise_by_id(grade_id).checks)}


def assert_caught(planted: Planted) -> None:
    """In this process: ``planted`` fails every check of ``must_fail`` naming its mistake, and
    passes the other checks of its exercise unless they are in ``must_fail`` too."""
    found = verdicts(planted.grade_id, planted.source)
    shown = "\n".join(f"{i}: {'ok' if v.passed else 'FAIL ' + v.hint}" for i, v in found.items())
    assert all(not found[i].passed for i in planted.must_fail), shown
    assert all(planted.words in found[i].hint for i in planted.must_fail), shown


def assert_accepted(grade_id: str, source: str) -> None:
    """In this process: ``source``, a correct answer written its own way, passes every check."""
    found = verdicts(grade_id, source)
    assert all(v.passed for v in found.values()), "\n".join(f"{i}: {v.hint}" for i, v in found.items() if not v.passed)


def check_cell(grade_id: str, source: str, capsys) -> str:
    """What the learner's check cell prints for the answer ``source``: ``check(grade_id)`` in a
    kernel that ran the chapter's setup cells and ``source`` (the visible checks, seeded as there)."""
    from autograder import notebook
    from autograder.chapters import chapter_of
    from autograder.selfcheck import check

    namespace: dict = {"__name__": "__main__", "In": ["", source]}
    for cell in [*notebook.setup_sources(notebook.released(chapter_of(grade_id))), source]:
        exec(cell, namespace)
    with pytest.raises(AssertionError, match=f"checks of {grade_id} failed"):
        check(grade_id, namespace=namespace)
    return capsys.readouterr().out


def judged_in_process(mistakes: dict[str, Planted], variants: dict[str, tuple[str, str]]):
    """A chapter's two tests of its ``MISTAKES`` and ``VARIANTS`` (bind them to these names at module
    level): every planted mistake fails with its hint, every correct variant keeps every point.
    Warnings the planted code itself raises (torch's, say) are the learner's, not the test's."""

    @pytest.mark.parametrize("name", sorted(mistakes))
    @pytest.mark.filterwarnings("ignore::UserWarning")
    def test_mistake_is_named(name):
        assert_caught(mistakes[name])

    @pytest.mark.parametrize("name", sorted(variants))
    def test_correct_answer_written_its_own_way_keeps_every_point(name):
        assert_accepted(*variants[name])

    return test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point
