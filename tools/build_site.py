"""The course's site: ``make site`` (``python tools/build_site.py``) writes ``dist/site/``, static
HTML that any web server (or a browser from the disk) shows, built offline.

It is built from the learners' copy (``make learners-copy``; :func:`learners_copy` is the one
place that names it), so that no page can hold an answer the copy does not: each chapter is the
copy's notebook executed blank, as a learner first runs it (its figures drawn from the recorded
numbers, a widget as its static picture, the quiz as questions), shown by MyST-NB with an "Open in
Colab" button to the learners' copy's address (``pyproject.toml``'s ``[project.urls] Learners``)
and a "Download notebook" link to the copy's notebook; the guides are the Markdown pages of
``tools/site/``, whose ``conf.py`` holds Sphinx's settings. ``--executed FOLDER`` takes notebooks
already executed (the tests pass the blank runs they make anyway) instead of executing them here.

What the page leaves out of an executed notebook: the Colab set-up cell (the buttons replace it),
papermill's own cells, stderr, the check cells' expected ``AssertionError`` (their ``FAIL`` lines
stay) and a widget's output that has no picture (a progress bar); a markdown line that is only an
HTML anchor (``<a id="chapter-1"></a>``) becomes a MyST target, so that links to it resolve.
Not handled: a chapter that fails to execute stops the build (papermill names the cell).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import time
from html.parser import HTMLParser
from pathlib import Path

from autograder import colab, headless
from course import paths

SOURCES = paths.ROOT / "tools" / "site"
OUT = paths.ROOT / "dist" / "site"
DROPPED_CELLS = {"colab", "papermill-error-cell-tag", "injected-parameters"}  # tags of cells the pages leave out
DOWNLOADS = "downloads"  # the learners' copy's notebooks, under the site's root
WIDGET = "application/vnd.jupyter.widget-view+json"
PICTURES = {"image/png", "image/svg+xml", "image/jpeg", "text/html"}
ANCHOR = re.compile(r'^<a id="([\w-]+)"></a>$', re.MULTILINE)


def learners_copy() -> Path:
    """The learners' copy's folder, as ``make learners-copy`` writes it."""
    from autograder import learners_copy

    return learners_copy.OUT


def chapters_of(copy: Path) -> list[str]:
    return sorted(p.stem for p in (copy / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def execute_blank(copy: Path, into: Path, kernel: str = "course") -> Path:
    """Each chapter of ``copy`` executed headless as it is (blank), its own folder first on the path."""
    into.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    chapters = chapters_of(copy)
    for number, chapter in enumerate(chapters, 1):
        started = time.perf_counter()
        print(f"[{number}/{len(chapters)}] executing {chapter} blank ...", flush=True)
        notebook = copy / "notebooks" / f"{chapter}.ipynb"
        headless.execute(notebook, into / notebook.name, kernel, cwd=copy / "notebooks", env=env)
        print(f"      {time.perf_counter() - started:.0f} s", flush=True)
    return into


def _kept(output: dict, tags: list[str]) -> bool:
    if output["output_type"] == "stream":
        return output.get("name") == "stdout"
    if output["output_type"] == "error":
        return not ("raises-exception" in tags and output.get("ename") == "AssertionError")
    data = output.get("data", {})
    return WIDGET not in data or bool(PICTURES & data.keys())


def buttons(chapter: str) -> str:
    """The chapter page's two buttons: Colab opens the learners' copy's notebook, the link downloads it."""
    url = colab.notebook_url(chapter, colab.repository("Learners"))
    links = [f'<a class="course-button" href="{url}">Open in Colab</a>'] if url else []
    links.append(f'<a class="course-button" href="../{DOWNLOADS}/{chapter}.ipynb" download>Download notebook</a>')
    return f'<p class="course-buttons">{" ".join(links)}</p>'


def page(executed: dict, chapter: str) -> dict:
    """The executed notebook as its page shows it (see the module's docstring)."""
    notebook = json.loads(json.dumps(executed))
    notebook["metadata"].pop("widgets", None)
    notebook["metadata"].pop("papermill", None)
    cells = []
    for cell in notebook["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if DROPPED_CELLS & set(tags):
            continue
        if cell["cell_type"] == "code":
            cell["outputs"] = [o for o in cell.get("outputs", []) if _kept(o, tags)]
        else:  # an HTML anchor as a MyST target, which links from other pages can reach
            cell["source"] = ANCHOR.sub(r"(\1)=", "".join(cell["source"]))
        cells.append(cell)
    title = next(c for c in cells if c["cell_type"] == "markdown")
    source = "".join(title["source"])
    head, _, rest = source.partition("\n")
    if not head.startswith("# "):
        raise ValueError(f"{chapter}: its first markdown cell should start with the chapter's title")
    title["source"] = f"{head}\n\n{buttons(chapter)}\n\n{rest}"
    notebook["cells"] = cells
    return notebook


def _mathjax(static: Path) -> None:
    """MathJax 2.7's files from the jupyter-server-mathjax package (English only)."""
    import jupyter_server_mathjax

    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    shutil.copytree(
        source,
        static / "mathjax",
        ignore=lambda folder, names: [n for n in names if Path(folder).name == "localization" and n != "en"],
    )


def stage(copy: Path, executed: Path, staging: Path) -> Path:
    """Sphinx's source folder: the pages of ``tools/site/``, a page per chapter, the downloads, MathJax."""
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(SOURCES, staging, ignore=shutil.ignore_patterns("__pycache__", "publish.yml"))
    for chapter in chapters_of(copy):
        done = executed / f"{chapter}.ipynb"
        if not done.exists():
            raise SystemExit(f"{done} is missing: execute the learners' copy's {chapter} there first")
        (staging / "notebooks").mkdir(exist_ok=True)
        (staging / "_extra" / DOWNLOADS).mkdir(parents=True, exist_ok=True)
        shown = page(json.loads(done.read_text(encoding="utf-8")), chapter)
        (staging / "notebooks" / done.name).write_text(json.dumps(shown, indent=1), encoding="utf-8")
        shutil.copy(copy / "notebooks" / done.name, staging / "_extra" / DOWNLOADS / done.name)
    _mathjax(staging / "_static")
    return staging


def build(copy: Path, executed: Path, out: Path = OUT) -> Path:
    """Write the site into ``out`` (emptied first) from ``copy`` and its chapters executed into
    ``executed``; return ``out``. Sphinx's warnings (a broken reference, a missing image) fail it."""
    from sphinx.cmd.build import build_main

    staging = stage(copy, executed, out.with_name(out.name + "-source"))
    if out.exists():
        shutil.rmtree(out)
    done = build_main(
        ["-b", "html", "-q", "-W", "--keep-going", "-d", str(staging / ".doctrees"), str(staging), str(out)]
    )
    if done != 0:
        raise SystemExit(f"sphinx-build failed ({done}): its warnings are above")
    return out


# --- the audit: what no page may hold ---------------------------------------------------------------

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "hidden=True")
SHORTEST_SECRET = 20  # characters: a shorter line of an answer ("return x") says nothing by itself


class _Text(HTMLParser):
    """A page's text (scripts and styles aside) and, apart, the text of each of its code blocks."""

    def __init__(self):
        super().__init__()
        self.text, self.code, self._skip, self._pre = [], [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "pre":
            self._pre = []

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag == "pre" and self._pre is not None:
            self.code.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)
            if self._pre is not None:
                self._pre.append(data)


def _regions(source: str) -> list[str]:
    """The lines between the markers of each solution and hidden-test region of a chapter's source."""
    inside, found = False, []
    for line in source.splitlines():
        if re.search(r"### BEGIN (SOLUTION|HIDDEN TESTS)", line):
            inside = True
        elif re.search(r"### END (SOLUTION|HIDDEN TESTS)", line):
            inside = False
        elif inside:
            found.append(line.strip())
    return found


def secrets() -> dict[str, str]:
    """What only the instructor's copy holds, each with where it comes from: the lines of every
    solution and hidden-test region in ``solutions/``, and every hidden check's id and description,
    where it is long enough to tell and neither the student notebooks (``make release``'s) nor a
    visible check (whose description the check cells print) say it."""
    from autograder.chapters import CHAPTERS

    public = " ".join(
        "".join(cell["source"])
        for path in paths.NOTEBOOKS.glob("*.ipynb")
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]
    )
    found = {}
    for source in paths.chapter_sources():
        for line in _regions(source.read_text(encoding="utf-8")):
            found.setdefault(line, f"solutions/{source.name}")
    checks = [(chapter, c) for chapter, exercises in CHAPTERS.items() for e in exercises for c in e.checks]
    shown = {c.what for _, c in checks if c.visible}  # a check cell prints these
    for chapter, check in checks:
        if not check.visible:
            found[check.id] = f"{chapter}'s hidden check {check.id}"
            if check.what not in shown:
                found[check.what] = found[check.id]
    return {text: where for text, where in found.items() if len(text) >= SHORTEST_SECRET and text not in public}


def pages(site: Path) -> list[Path]:
    """The built site's pages (``_static/`` holds the theme's templates, not pages)."""
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def answers_in_pages(site: Path) -> list[str]:
    """Where the built pages hold what learners must not read: a line of a solution region or a hidden
    check (:func:`secrets`), or, in a page's code, a region's marker, an exercise's answer or a withheld
    function's body (the learners' copy's audit, :func:`autograder.learners_copy.answers_in`, run on
    each code block; an exercise's stub as the student notebooks give it, which may call
    ``super().__init__()`` before its raise, is no answer), or a quiz's key (its audit,
    :func:`autograder.quiz.keys_in`, on each page's text and the site's files). The guides may name
    the markers in their prose, as nbgrader's documentation does."""
    import tempfile

    from autograder import learners_copy, quiz

    hidden = secrets()
    found = []
    with tempfile.TemporaryDirectory(prefix="site-code-") as folder:
        for page in pages(site):
            name = page.relative_to(site).as_posix()
            parsed = _Text()
            parsed.feed(page.read_text(encoding="utf-8"))
            text = " ".join("".join(parsed.text).split())
            (Path(folder) / name).mkdir(parents=True, exist_ok=True)
            (Path(folder) / name / "text.txt").write_text(text, encoding="utf-8")  # for the quiz keys' audit
            found += [
                f"{name}: {where}: {secret!r}" for secret, where in hidden.items() if " ".join(secret.split()) in text
            ]
            for index, code in enumerate(parsed.code):
                found += [f"{name}: a region's marker {marker!r}" for marker in MARKERS if marker in code]
                python = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
                try:
                    ast.parse(python)
                except SyntaxError:
                    continue  # printed output, not code
                block = Path(folder) / name / f"block{index}.py"
                block.parent.mkdir(parents=True, exist_ok=True)
                block.write_text(python, encoding="utf-8")
        found += [where.replace("/text.txt", "") for where in quiz.keys_in(Path(folder)) + quiz.keys_in(site)]
        stubs = _stubs()
        for finding in learners_copy.answers_in(Path(folder)):
            where, name = finding.rsplit(" ", 1)
            block, line = where.rsplit(":", 1)
            tree = ast.parse((Path(folder) / block).read_text(encoding="utf-8"))
            node = next(n for n in ast.walk(tree) if getattr(n, "lineno", None) == int(line) and _defines(n, name))
            if ast.dump(node) not in stubs.get(name, ()):  # the exercise's stub, as the release writes it, is no answer
                page, index = block.rsplit("/block", 1)
                found.append(f"{page}, code block {index.removesuffix('.py')}, line {line}: {name}")
    return found


def _defines(node: ast.AST, name: str) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name


def _stubs() -> dict[str, set[str]]:
    """Each graded name's definitions in the answer cells of the student notebooks (``make
    release``'s: nbgrader's stubs, a docstring and ``raise NotImplementedError()``), as ASTs."""
    found: dict[str, set[str]] = {}
    for path in paths.NOTEBOOKS.glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                for node in ast.parse("".join(cell["source"])).body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        found.setdefault(node.name, set()).add(ast.dump(node))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the course's site from the learners' copy.")
    parser.add_argument("--copy", type=Path, default=None, help="the learners' copy (default: make learners-copy's)")
    parser.add_argument("--executed", type=Path, default=None, help="its chapters already executed blank")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    copy = args.copy or learners_copy()
    if not (copy / "notebooks").is_dir():
        raise SystemExit(f"no learners' copy in {copy}: run `make learners-copy` first")
    started = time.perf_counter()
    executed = args.executed or execute_blank(copy, args.out.with_name(args.out.name + "-executed"))
    out = build(copy, executed, args.out)
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    found = answers_in_pages(out)
    if found:
        print("the site holds what learners must not read:\n  " + "\n  ".join(found))
        return 1
    took = time.perf_counter() - started
    print(f"wrote {out}: {len(pages(out))} pages, {len(files)} files, {size / 1e6:.1f} MB in {took:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
