"""Notebooks' check cells run as a kernel would run them, without the chapter's own cells: the
setup cell, then the answer cells and check cells in notebook order, in one namespace per notebook.
Prints, as JSON, each check cell's ``ok`` and ``FAIL`` lines and what it raised.

    python tests/_check_cells.py PLAN.json

The plan maps a label to ``{"notebook": path, "answers": path or null, "only": [exercise, ...] or
null}``: ``answers`` takes the answer cells from another copy of the notebook (a solution, a planted
mistake), matched by their nbgrader ``grade_id``; ``only`` runs just the check cells that call
``check`` on those exercises (and the imports of the others). Run under ``tests/_platforms.py``, it
shows what a learner on Windows or macOS sees.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys


def cells(notebook: dict) -> list[tuple[str, str, str]]:
    """(kind, grade_id, source) of the setup, answer and check cells, in order."""
    found = []
    for cell in notebook["cells"]:
        meta = cell.get("metadata", {})
        nbgrader = meta.get("nbgrader", {})
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "code":
            continue
        if "grader-setup" in meta.get("tags", []):
            found.append(("setup", nbgrader.get("grade_id", "setup"), source))
        elif nbgrader.get("solution"):
            found.append(("answer", nbgrader["grade_id"], source))
        elif nbgrader.get("grade"):
            found.append(("check", nbgrader["grade_id"], source))
    return found


def run(notebook: dict, answers: dict | None = None, only: list[str] | None = None) -> dict:
    """Each check cell's grade_id -> {"ok": n, "fail": n, "raised": the error or None, "lines": [...]}."""
    replacement = {g: s for kind, g, s in cells(answers) if kind == "answer"} if answers else {}
    namespace: dict = {"__name__": "__main__"}
    report = {}
    for kind, grade_id, source in cells(notebook):
        if kind == "check" and only is not None and not any(f'check("{name}"' in source for name in only):
            imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
            exec("\n".join(imports), namespace)  # what later check cells use (``check`` itself)
            continue
        source = replacement.get(grade_id, source) if kind == "answer" else source
        printed = io.StringIO()
        raised = None
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(source, f"<{grade_id}>", "exec"), namespace)
            except BaseException as error:  # as a kernel would: the cell fails, the next one runs
                raised = f"{type(error).__name__}: {error}"
        if kind == "check":
            lines = printed.getvalue().splitlines()
            report[grade_id] = {
                "ok": sum(line.startswith("ok ") for line in lines),
                "fail": sum(line.startswith("FAIL") for line in lines),
                "raised": raised,
                "lines": lines,
            }
        elif kind == "setup" and raised:
            report[grade_id] = {"ok": 0, "fail": 0, "raised": raised, "lines": printed.getvalue().splitlines()}
    return report


def _read(path: str | None) -> dict | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    plan = _read(parser.parse_args().plan)
    found = {
        label: run(_read(job["notebook"]), _read(job.get("answers")), job.get("only")) for label, job in plan.items()
    }
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
