"""The course's site (``make site``, ``tools/build_site.py``), built as ``make site`` builds it from the
learners' copy the tests build and its chapters' blank runs (``conftest.blank_run``, which
tests/test_learners_copy_runs.py checks: nothing is executed twice), then read: every page opened in
headless Chromium from a local web server, with nothing fetched from elsewhere; each chapter's figures
loaded, its formulas typeset, its Colab button and its download; no internal link broken; no page
holding an answer; the search finding "KV cache"; a chapter printing without the navigation.

Needs Chromium (Debian: `apt-get install chromium`) and Playwright for Python (the dev extra);
without Chromium the browser's tests are skipped with that message.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import shutil
import threading
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autograder import colab
from course import paths

from conftest import chapter_names, learners_copy_chapters, load_tool

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: install it with `apt-get install chromium` (as root), then rerun"
)
CHAPTERS = chapter_names()
GUIDES = sorted(p.stem for p in (paths.ROOT / "tools" / "site" / "guides").glob("*.md"))
CEILING_MS = 5 * 60_000  # the longest a page may take to show what it waits for: a hang, not a slow machine
LOCAL = ("data:", "about:", "blob:")  # URLs a page may use that fetch nothing (MathJax tests fonts on about:blank)


@pytest.fixture(scope="module")
def build_site():
    return load_tool("build_site")


@pytest.fixture(scope="module")
def site(build_site, learners_copy_folder, blank_run, tmp_path_factory) -> Path:
    if learners_copy_chapters() != CHAPTERS:
        pytest.skip("the site needs every chapter: LEARNERS_COPY_CHAPTERS chose some")
    executed = tmp_path_factory.mktemp("executed")
    for chapter in CHAPTERS:
        shutil.copy(blank_run(chapter), executed / f"{chapter}.ipynb")
    return build_site.build(learners_copy_folder, executed, tmp_path_factory.mktemp("site") / "site")


class _Links(HTMLParser):
    """Each page's links and sources, and the ids its elements carry."""

    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        for name in ("href", "src"):
            if attributes.get(name):
                self.links.append((tag, attributes[name]))


def _parsed(page: Path) -> _Links:
    parsed = _Links()
    parsed.feed(page.read_text(encoding="utf-8"))
    return parsed


def test_the_site_has_a_page_per_chapter_and_guide(site, build_site, learners_copy_folder):
    pages = {p.relative_to(site).as_posix() for p in build_site.pages(site)}
    wanted = {f"notebooks/{c}.html" for c in CHAPTERS} | {f"guides/{g}.html" for g in GUIDES}
    assert wanted | {"index.html", "chapters.html", "search.html"} <= pages
    for chapter in CHAPTERS:  # the download is the learners' copy's notebook, as it is
        copy = learners_copy_folder / "notebooks" / f"{chapter}.ipynb"
        assert (site / "downloads" / f"{chapter}.ipynb").read_bytes() == copy.read_bytes()


def test_no_internal_link_is_broken(site, build_site):
    broken = []
    parsed = {page.resolve(): _parsed(page) for page in build_site.pages(site)}
    for page, found in parsed.items():
        for tag, link in found.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or link.startswith(("//", "mailto:")):
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site.resolve())}: <{tag}> {link}"
            if not target.is_file() or not target.is_relative_to(site.resolve()):
                broken.append(where)
            elif url.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parsed(target).ids
                if url.fragment not in ids:
                    broken.append(f"{where} (no such anchor)")
    assert broken == []


def test_no_page_holds_an_answer(site, build_site):
    assert build_site.answers_in_pages(site) == []


def test_the_audit_finds_an_answer_in_a_page(site, build_site, tmp_path):
    """The same audit sees a solution's code in a page's code block and a hidden check's line in its
    text: a page with either would fail the test above."""
    import html

    source = (paths.SOLUTIONS / "05_flash_attention.py").read_text()
    start = source.index("def online_softmax_update(")
    lines = source[start : source.index("### END SOLUTION", start)].splitlines()
    answer = "\n".join(line for line in lines if "### BEGIN SOLUTION" not in line)
    page = tmp_path / "site" / "notebooks" / "leak.html"
    page.parent.mkdir(parents=True)
    page.write_text(f"<html><body><pre>{html.escape(answer)}</pre></body></html>")
    found = build_site.answers_in_pages(tmp_path / "site")
    assert "notebooks/leak.html, code block 0, line 1: online_softmax_update" in found, found
    page.write_text('<html><body><p>check("online_softmax_update", hidden=True)</p></body></html>')
    assert build_site.answers_in_pages(tmp_path / "site") != []


def test_no_visible_check_says_a_hidden_checks_words(build_site):
    """A chapter's page prints its visible checks' words: none may hold a hidden check's (the page
    audit above would fail the whole site for it, after building every chapter)."""
    from autograder.chapters import CHAPTERS

    hidden = build_site.secrets()
    said = [
        " ".join(c.what.split()) for exercises in CHAPTERS.values() for e in exercises for c in e.checks if c.visible
    ]
    assert [s for s in hidden if any(" ".join(s.split()) in text for text in said)] == []


@contextlib.contextmanager
def _served(folder: Path):
    """``folder`` on a web server at a free localhost port, as a static host serves it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    if CHROMIUM is None:
        pytest.skip("no Chromium: install it with `apt-get install chromium` (as root), then rerun")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@contextlib.contextmanager
def _page(browser, base: str):
    """A browser tab that records every request outside ``base`` and every request that failed."""
    page = browser.new_page()
    page.set_default_timeout(CEILING_MS)
    page.elsewhere, page.failed = [], []
    page.on("request", lambda r: None if r.url.startswith((base, *LOCAL)) else page.elsewhere.append(r.url))
    page.on("response", lambda r: page.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("requestfailed", lambda r: None if r.url.startswith(LOCAL) else page.failed.append(r.url))
    try:
        yield page
    finally:
        page.close()


# every image of the page loaded, and drawn (a broken image has no natural width)
IMAGES = "() => [...document.images].map(i => ({src: i.getAttribute('src'), drawn: i.complete && i.naturalWidth > 0}))"
# the formulas of the page (MyST marks each so), and those still showing their TeX delimiters
FORMULAS = "() => document.querySelectorAll('.math.notranslate').length"
UNTYPESET = r"""() => [...document.querySelectorAll('.math.notranslate')]
    .filter(e => e.textContent.includes('\\(') || e.textContent.includes('\\[')).length"""
TYPESET_DONE = (
    "() => !window.MathJax || !MathJax.Hub || MathJax.Hub.queue.pending === 0 && MathJax.Hub.queue.running === 0"
)


@needs_chromium
def test_every_page_opens_with_nothing_fetched_from_elsewhere(site, build_site, browser):
    pages = [p.relative_to(site).as_posix() for p in build_site.pages(site)]
    with _served(site) as base, _page(browser, base) as page:
        for name in pages:
            response = page.goto(base + name, wait_until="load")
            assert response.ok, name
            page.wait_for_function(TYPESET_DONE)
            assert [i["src"] for i in page.evaluate(IMAGES) if not i["drawn"]] == [], name
        assert page.elsewhere == [] and page.failed == []


@needs_chromium
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_each_chapter_page_shows_its_figures_formulas_and_buttons(chapter, site, browser, blank_run):
    executed = json.loads(blank_run(chapter).read_text())
    figures = sum(
        "image/png" in o.get("data", {})
        for c in executed["cells"]
        if c["cell_type"] == "code" and "colab" not in c["metadata"].get("tags", [])
        for o in c.get("outputs", [])
    )
    with _served(site) as base, _page(browser, base) as page:
        page.goto(f"{base}notebooks/{chapter}.html", wait_until="load")
        page.wait_for_function(TYPESET_DONE)
        images = page.evaluate(IMAGES)
        assert figures > 0 and len([i for i in images if i["drawn"]]) >= figures, (figures, images)
        formulas, typeset = page.evaluate(FORMULAS), page.evaluate("() => document.querySelectorAll('.MathJax').length")
        assert typeset >= formulas and page.evaluate(UNTYPESET) == 0, (formulas, typeset)
        assert page.evaluate("() => document.querySelectorAll('.MathJax_Error, .merror').length") == 0
        colab_button = page.get_by_role("link", name="Open in Colab")
        assert colab_button.get_attribute("href") == colab.notebook_url(chapter, colab.repository("Learners"))
        assert colab_button.is_visible()
        download = page.get_by_role("link", name="Download notebook")
        downloaded = page.request.get(urllib.parse.urljoin(page.url, download.get_attribute("href")))
        assert downloaded.ok and downloaded.json() == json.loads(
            (site / "downloads" / f"{chapter}.ipynb").read_text(encoding="utf-8")
        )
        page.emulate_media(media="print")  # on paper: the chapter, without the navigation and buttons
        assert page.locator(".bd-sidebar-primary").is_hidden() and colab_button.is_hidden()
        assert page.locator("h1").first.is_visible()
        assert page.elsewhere == [] and page.failed == []


@needs_chromium
def test_the_search_finds_the_kv_cache(site, browser):
    with _served(site) as base, _page(browser, base) as page:
        page.goto(f"{base}search.html?q=KV+cache", wait_until="load")
        results = page.locator("#search-results ul.search li a")
        results.first.wait_for()
        found = [results.nth(i).get_attribute("href") for i in range(results.count())]
        assert any("notebooks/04_kv_cache.html" in href for href in found), found
