"""``make colab-check`` (``python tools/colab_check.py``): the course in a stand-in for Colab's CPU runtime.

Colab runs the course on its own packages, which are not the course's: Python 3.13, IPython 7.34,
ipywidgets 7.7.1, torch 2.11, numpy 2.1, transformers 5.15 (``data/colab/pip-freeze.txt``, Colab's
own list, with its date and commit). This command builds an environment from that list and runs the
course in it as a learner does in Colab:

1. **The runtime**: a virtual environment (``.colab-runtime/``, ``COLAB_RUNTIME`` moves it) of Python
   3.13, found by a rule it prints: ``COLAB_PYTHON`` when set, else the first ``python3.13`` on
   ``PATH`` that runs, else the newest 3.13 under pyenv's ``versions/`` (``PYENV_ROOT``, else
   ``~/.pyenv``). Colab's pip first, then torch and its requirements, then every other package of
   the list at its version with ``--no-deps``, less :data:`LEFT_OUT` (what PyPI cannot give, each
   with why). torch, torchvision, torchaudio and torchcodec come from PyTorch's CPU index in Colab;
   here they come from PyPI at the same versions, which on Linux is the CUDA build (it runs on the
   CPU), with the CUDA libraries it pins (the list's nvidia-nccl-cu13 gives way to torch's). About
   13 GB installed, built once (26 minutes on 2 busy cores); each step below starts from it again
   (:meth:`Runtime.reset`: what a step installed is uninstalled, what it changed is put back), as
   each Colab notebook starts on a fresh machine.
   ``google.colab`` is a stand-in module (Colab's own package is not on PyPI), imported when the
   kernel starts, as Colab's kernel has it; its ``output.enable_custom_widget_manager`` marks the
   widget outputs as Colab's does, so that the report says whether any output asked for that manager.
2. **The Colab cell**, exactly as the notebooks carry it, with two strings replaced: the
   repository's address by a git repository holding this working tree as git sees it (tracked and
   untracked files, not the ignored ones), and ``/content`` by a temporary folder. Measured: its
   time, which packages it added, changed or removed (torch among them or not), and whether the
   kernel needs a restart (it does when the cell changed a package Colab ships: a running kernel
   may hold the old one).
3. **Every chapter**, in a fresh runtime each: the instructor's notebook (every check ``ok``, no
   error) and the student copy (only its check cells fail, each with an ``AssertionError``), both
   headless in Colab's kernel with the Colab cell first, and the quiz's fallback (the questions as
   HTML and text, for front ends without widgets) in both. Chapter 8 runs the lines that
   ``course.pretrained.COLAB_INSTALL`` gives (the README quotes them) after the Colab cell.
4. **The widgets**: every control of every chapter's widgets moved under Colab's ipywidgets and
   IPython (``tests/_widget_driver.py``), every quiz answered, and the widget models listed: those
   outside ipywidgets' own need Colab's custom widget manager.

It prints a table (step, result, seconds, detail), writes it to ``data/colab_check.json`` (after
every step, so that a stopped run keeps its rows, with ``finished`` false), keeps the
executed notebooks in ``test-artifacts/colab-check/`` and exits 1 when anything failed.
``--chapters 01_prefill_decode,08_in_practice`` (``make colab-check CHAPTERS=...``) runs some
chapters only.

Not handled: Colab's GPU runtime (``make gpu-check`` covers the CUDA path), its front end (the
widgets' callbacks run in the kernel as a front end's messages would call them; the browser test
draws them in JupyterLab), the learners' copy's notebooks (the same cell, another address),
Python 3.13.15 itself where the machine has another 3.13 (the report names the one used), and the
upload-a-zip path of the Colab cell, and Windows (the runtime is built the Linux and macOS way).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab import ROOT  # noqa: E402 (tools/colab/: the stand-in's pieces)
from colab.notebooks import (  # noqa: E402
    CONTENT,
    cell_seconds,
    colab_notebook,
    custom_manager_marks,
    errors,
    pip_complaints,
    printed,
    quiz_fallback,
    snapshot,
)
from colab.packages import FREEZE, PYTHON_VERSION, find_python, header, plan  # noqa: E402
from colab.runtime import KERNEL, Runtime, changes  # noqa: E402
from gpu_check import _row, table  # noqa: E402 (make gpu-check's rows and table: check, result, seconds, detail)

REPORT = ROOT / "data" / "colab_check.json"
ARTIFACTS = ROOT / "test-artifacts" / "colab-check"  # the executed notebooks (ignored by git)


# --- the steps --------------------------------------------------------------------------------------


class Check:
    """One run of the stand-in: the runtime, the snapshot of the course, a folder for the notebooks."""

    def __init__(self, runtime: Runtime, work: Path):
        self.runtime = runtime
        self.work = work
        self.repository = snapshot(work)
        jupyter = work / "jupyter"
        runtime.kernelspec(jupyter)

    def fresh_content(self, name: str) -> Path:
        content = self.work / f"content-{name}"
        shutil.rmtree(content, ignore_errors=True)
        content.mkdir()
        return content

    def execute(self, notebook, name: str, content: Path) -> tuple[dict, float]:
        import nbformat

        from autograder import headless

        path = self.work / f"{name}.ipynb"
        nbformat.write(notebook, path)
        started = time.perf_counter()
        env = self.runtime.kernel_env(self.work / "model-cache")
        out = ARTIFACTS / f"{name}.ipynb"  # kept for reading after the run
        out.parent.mkdir(parents=True, exist_ok=True)
        executed = headless.execute(path, out, KERNEL, cwd=content, env=env)
        return executed, time.perf_counter() - started

    def colab_cell(self) -> tuple[dict, dict]:
        """The Colab cell alone in a fresh runtime, then what it left: a row and the figures."""
        import nbformat

        self.runtime.reset()
        before = self.runtime.packages()
        first = nbformat.read(ROOT / "notebooks" / "01_prefill_decode.ipynb", as_version=4)
        probe = (
            "import importlib.metadata as m, sys, torch, ipywidgets, IPython, numpy, course\n"
            "print('after the cell:', 'torch', torch.__version__, 'ipywidgets', ipywidgets.__version__, "
            "'IPython', IPython.__version__, 'numpy', numpy.__version__, 'course from', course.__file__)"
        )
        notebook = nbformat.v4.new_notebook(cells=[first.cells[0], nbformat.v4.new_code_cell(probe)])
        content = self.fresh_content("cell")
        executed, seconds = self.execute(colab_notebook(notebook, self.repository, content), "colab-cell", content)
        added, changed, removed = changes(before, self.runtime.packages())
        cell = cell_seconds(executed, "colab")
        found = errors(executed)
        torch_replaced = any(line.startswith("torch ") for line in changed) or "torch" in removed
        restart = bool(changed or removed)
        figures = {
            "cell_seconds": round(cell, 1),
            "added": added,
            "changed": changed,
            "removed": removed,
            "torch_replaced": torch_replaced,
            "restart_needed": restart,
            "custom_widget_manager": "enable_custom_widget_manager" in first.cells[0].source,
            "pip_said": pip_complaints(executed),
            "probe": [line.replace(str(content), CONTENT) for line in printed(executed).strip().splitlines()[-1:]]
            if not found
            else [],
        }
        detail = (
            f"installed the course in {cell:.0f} s; added {len(added)} ({', '.join(added)}), changed "
            f"{len(changed)}{' (' + ', '.join(changed) + ')' if changed else ''}, removed {len(removed)}; "
            f"torch {'REPLACED' if torch_replaced else 'kept'}; restart {'needed' if restart else 'not needed'}"
        )
        if found:
            detail += f"; cell {found[0][0]} raised {found[0][2]}: {found[0][3][:200]}"
        ok = not found and not torch_replaced and not restart
        return _row("the Colab cell (fresh runtime)", ok, seconds, detail), figures

    def chapter(self, chapter: str) -> list[dict]:
        """The chapter's instructor notebook, then its student copy, in one fresh runtime."""
        import nbformat

        from autograder import release
        from autograder.chapters import CHAPTERS
        from course import paths, pretrained

        self.runtime.reset()
        before = self.runtime.packages()
        after = list(pretrained.COLAB_INSTALL) if chapter == "08_in_practice" else []
        rows = []
        for copy in ("solution", "blank"):
            if copy == "solution":
                notebook = release.instructor_notebook(paths.SOLUTIONS / f"{chapter}.py")
            else:
                notebook = nbformat.read(paths.NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
            content = self.fresh_content(chapter)
            executed, seconds = self.execute(
                colab_notebook(notebook, self.repository, content, after), f"{chapter}.{copy}", content
            )
            said, found = printed(executed), errors(executed)
            set_up = cell_seconds(executed, "colab") + cell_seconds(executed, "colab-standin")
            checks = sum(len(e.checks) for e in CHAPTERS[chapter])
            problems = []
            if copy == "solution":
                problems += [f"cell {i} raised {name}: {message[:160]}" for i, _, name, message in found]
                if "FAIL" in said or said.count("ok  ") < checks:
                    problems.append(f"{said.count('ok  ')} checks ok of {checks}, {said.count('FAIL')} FAIL")
            else:
                wrong = [e for e in found if "raises-exception" not in e[1] or e[2] != "AssertionError"]
                problems += [f"cell {i} raised {name}: {message[:160]}" for i, _, name, message in wrong]
                if not found or "not answered yet" not in said:
                    problems.append("the blank exercises did not fail their checks")
            problems += [quiz_fallback(executed)] if quiz_fallback(executed) else []
            marks = custom_manager_marks(executed)
            detail = (
                "; ".join(problems)
                if problems
                else (
                    f"{said.count('ok  ')} checks ok"
                    if copy == "solution"
                    else f"{len(found)} check cells failed, as blank"
                )
            )
            detail += f"; set-up cells {set_up:.0f} s" + (
                f"; {marks} outputs ask for the custom widget manager" if marks else ""
            )
            complaints = pip_complaints(executed)
            detail += f"; pip said: {complaints[0][:160]}" if complaints else ""
            if copy == "solution":
                _, changed, removed = changes(before, self.runtime.packages())
                detail += f"; the set-up changed {', '.join(changed + removed)}" if changed or removed else ""
            rows.append(_row(f"{chapter} {copy}", not problems, seconds, detail, set_up_seconds=round(set_up, 1)))
        return rows

    def widgets(self) -> tuple[dict, dict]:
        """Every control moved, every quiz answered, every widget model listed, under Colab's packages."""
        import nbformat

        from course import paths

        self.runtime.reset()
        slugs = [paths.slug(source) for source in paths.chapter_sources()]
        driver = (ROOT / "tests" / "_widget_driver.py").read_text()
        probe = WIDGET_PROBE.format(slugs=slugs)
        first = nbformat.read(ROOT / "notebooks" / "01_prefill_decode.ipynb", as_version=4).cells[0]
        cells = [first, nbformat.v4.new_code_cell(driver), nbformat.v4.new_code_cell(probe)]
        content = self.fresh_content("widgets")
        notebook = colab_notebook(nbformat.v4.new_notebook(cells=cells), self.repository, content)
        executed, seconds = self.execute(notebook, "widgets", content)
        found = errors(executed)
        if found:
            detail = f"cell {found[0][0]} raised {found[0][2]}: {found[0][3][:300]}"
            return _row("widgets and quizzes", False, seconds, detail), {}
        said = json.loads(printed(executed).strip().splitlines()[-1])
        moved = [r for r in said["records"] if "control" in r]
        stuck = [f"{r['widget']}: {r['control']}" for r in moved if r["error"] or not r["changed"]]
        models = said["models"]
        custom = sorted(m for m in models if not m.startswith(("@jupyter-widgets/controls", "@jupyter-widgets/base")))
        figures = {"versions": said["versions"], "models": models, "need_custom_manager": custom, "quiz": said["quiz"]}
        ok = not stuck and not said["quiz"]["wrong"] and moved
        detail = (
            f"{said['versions']}; {len(moved)} controls moved"
            + (f", {len(stuck)} did not redraw ({', '.join(stuck[:4])})" if stuck else ", each redrew")
            + f"; {said['quiz']['answered']} quiz questions answered"
            + (f", {len(said['quiz']['wrong'])} wrong feedback" if said["quiz"]["wrong"] else ", each answered at once")
            + f"; widget models: {', '.join(sorted({m.split(':')[1] for m in models}))}"
            + f"; needing Colab's custom widget manager: {', '.join(custom) or 'none'}"
        )
        return _row("widgets and quizzes", bool(ok), seconds, detail), figures


WIDGET_PROBE = """\
import json, sys, IPython, ipywidgets
from course import quiz

records = move_every_control({slugs!r})
answered, wrong = 0, []
for slug in {slugs!r}:
    box, chosen = quiz.build(slug)
    for number, (row, question) in enumerate(zip(box.children[:-1], quiz.questions(slug)), start=1):
        buttons = row.children[1].children
        for button in sorted(buttons, key=lambda b: b.description == question.answer):
            button.click()
            right = button.description == question.answer
            said = row.children[2].value
            if ("Right." in said) != right:
                wrong.append(f"{{slug}} {{number}} {{button.description}}")
        answered += 1
models = sorted(
    {{f"{{w._model_module}}@{{w._model_module_version}}:{{w._model_name}}" for w in _instances().values()}}
)
versions = f"Python {{sys.version.split()[0]}}, IPython {{IPython.__version__}}, ipywidgets {{ipywidgets.__version__}}"
print(json.dumps({{"records": records, "models": models, "versions": versions,
                  "quiz": {{"answered": answered, "wrong": wrong}}}}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", default="", help="comma-separated chapters (default: all)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from course import paths

    chapters = [c for c in args.chapters.split(",") if c] or [s.stem for s in paths.chapter_sources()]
    started = time.perf_counter()
    python, version, how = find_python()
    print(f"Colab's Python is {PYTHON_VERSION}: using {python} (Python {version}, found as {how})")
    text = FREEZE.read_text()
    source = header(text)
    install, replaced, left_out = plan(text)
    print(
        f"Colab's packages: {FREEZE.relative_to(ROOT)} ({source.get('date')}, commit {source.get('commit', '')[:12]})"
    )
    print(f"  {len(install)} installed, of which replaced: " + "; ".join(replaced.values()))
    print(f"  left out ({len(left_out)}): " + "; ".join(f"{k}: {v}" for k, v in left_out.items()))
    runtime = Runtime(Path(os.environ.get("COLAB_RUNTIME") or ROOT / ".colab-runtime").resolve())
    runtime.folder.parent.mkdir(parents=True, exist_ok=True)
    lock = open(runtime.folder.with_name(runtime.folder.name + ".lock"), "w")  # noqa: SIM115 (held to the end)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"another make colab-check is using {runtime.folder}: wait for it to end") from None
    build_started = time.perf_counter()
    runtime.build(python, text)
    built = time.perf_counter() - build_started
    rows, figures = [], {}
    runtime_figures = {
        "python": f"{version} ({how.replace(str(Path.home()), '~')})",  # no machine's paths in data/
        "packages": source,
        "installed": len(install),
        "replaced": replaced,
        "left_out": left_out,
        "build_seconds": round(built, 1),
    }

    def record(finished: bool) -> dict:
        """The report as it stands, written after every step: a run that is stopped keeps what it
        measured (``finished`` false, ``chapters`` naming those asked for)."""
        report = {
            "runtime": runtime_figures,
            **figures,
            "chapters": chapters,
            "finished": finished,
            "seconds": round(time.perf_counter() - started, 1),
            "passed": finished and all(r["result"] == "passed" for r in rows),
            "rows": rows,
        }
        REPORT.write_text(json.dumps(report, indent=1) + "\n")
        return report

    def add(row: dict) -> None:
        rows.append(row)
        print(table([row]).splitlines()[2], flush=True)
        record(finished=False)

    with tempfile.TemporaryDirectory(prefix="colab-check-") as work:
        check = Check(runtime, Path(work))
        row, figures["colab_cell"] = check.colab_cell()
        add(row)
        row, figures["widgets"] = check.widgets()
        add(row)
        for chapter in chapters:
            for row in check.chapter(chapter):
                add(row)
        runtime.reset()
    report = record(finished=True)
    print(f"\n{table(rows)}\nin {report['seconds']:.0f} s")
    print(f"written to {REPORT.relative_to(ROOT)}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
