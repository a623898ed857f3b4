"""The course as a learner meets it: JupyterLab in headless Chromium runs a chapter's opening up to
one of its widgets, a slider moves, the chart changes, and no cell shows an error. Screenshots go to
test-artifacts/, after each step and on any failure. The whole chapters run headless in the
learners' copy's build and runs (tests/test_learners_copy*.py): what only a browser shows is the widgets.

Every wait follows an event (the server answers, the kernel connects, a cell finishes, the readout
or the image changes) under a generous ceiling, so a machine busy with other work makes the test
slower, not red.

Needs Chromium (Debian: `apt-get install chromium`, which `make test` runs when it is root) and
Playwright for Python (the dev extra); without them the test is skipped with that message.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium: install it with `apt-get install chromium` (as root), then rerun"
)
CEILING_MS = 15 * 60_000  # the longest any one event may take to come: a hang, not a slow machine
# The code cells that have run ([n] in their prompt), and all of them.
PROMPTS = "[...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.innerText)"
RAN = f"() => {PROMPTS}.filter(t => /\\[\\d+\\]/.test(t)).length"
CELLS = f"() => {PROMPTS}.length"
# The notebook's kernel connected and idle: the status indicator says idle a moment before that,
# and a run started then is lost (window.jupyterapp: the server runs with expose_app_in_browser).
KERNEL_READY = """() => {
    const kernel = window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel;
    return !!kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# chapter -> (the widget the test moves, its slider's label)
WIDGETS = {"02_lora": ("widget_rank_error", "adapter rank r"), "03_quantization": ("widget_quantization", "bits")}


def up_to(notebook: dict, widget: str) -> dict:
    """``notebook`` with its cells up to the first that calls ``plots.<widget>``, that one included."""
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in notebook["cells"]]
    first = next((i for i, source in enumerate(sources) if f"plots.{widget}(" in source), None)
    assert first is not None, f"no cell calls plots.{widget}: name the widget this chapter shows in WIDGETS"
    return {**notebook, "cells": notebook["cells"][: first + 1]}


@pytest.fixture(scope="module")
def lab(instructor_notebooks, kernel, tmp_path_factory):
    """JupyterLab on a free localhost port, serving the instructor notebooks of ``WIDGETS`` up to
    their widget (:func:`up_to`)."""
    folder = tmp_path_factory.mktemp("lab")
    for chapter, (widget, _) in WIDGETS.items():
        notebook = up_to(json.loads(instructor_notebooks[chapter].read_text()), widget)
        notebook["metadata"]["kernelspec"] = {"name": kernel, "display_name": "Python 3 (course)", "language": "python"}
        (folder / f"{chapter}.ipynb").write_text(json.dumps(notebook))
    # every cell in the page (no virtual scrolling), so run-all's progress and every widget can be read
    settings = tmp_path_factory.mktemp("lab-settings")
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--allow-root",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--LabApp.expose_app_in_browser=True",
            f"--notebook-dir={folder}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings)},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + CEILING_MS / 1000
    while not _answers(f"{url}/api/status"):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"JupyterLab {'exited' if server.poll() is not None else 'did not answer'} (port {port})")
        time.sleep(0.5)
    yield url
    server.terminate()
    server.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5)
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra has it)")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _slider_images(page, label: str):
    """The slider whose description is ``label``, and the image shown under its widget."""
    box = page.locator(".widget-vbox").filter(has=page.locator(".widget-label", has_text=label)).last
    return (
        box.locator(".noUi-handle").first,
        box.locator("img.widget-image").first,
        box.locator(".widget-readout").first,
    )


@contextlib.contextmanager
def screenshot_on_failure(page, path):
    """Keep a picture of the page when the block fails, then let the failure through."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):  # a page that crashed cannot be pictured; the failure still counts
            page.screenshot(path=str(path), full_page=False)
        raise


def run_all_and_wait(page) -> None:
    """Run every cell, then wait while cells keep finishing: each one may take up to the ceiling."""
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator("li[data-command='runmenu:run-all']").click()
    ran = -1
    while ran < page.evaluate(CELLS):
        page.wait_for_function(f"n => ({RAN})() > n", arg=ran, timeout=CEILING_MS)
        ran = page.evaluate(RAN)


@pytest.mark.parametrize("chapter", sorted(WIDGETS, reverse=True))
def test_run_all_move_a_slider_and_the_chart_changes(lab, browser, artifacts, chapter):
    label = WIDGETS[chapter][1]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    with screenshot_on_failure(page, artifacts / f"browser-{chapter}-failure.png"):
        page.goto(f"{lab}/lab/workspaces/{chapter}/tree/{chapter}.ipynb?reset")  # a fresh workspace per chapter
        page.wait_for_function(KERNEL_READY, timeout=CEILING_MS)
        run_all_and_wait(page)
        page.screenshot(path=str(artifacts / f"browser-{chapter}-run.png"), full_page=False)
        handle, image, readout = _slider_images(page, label)
        handle.scroll_into_view_if_needed()
        before_src, before_value = image.get_attribute("src"), readout.inner_text()
        handle.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "([el, old]) => el.innerText !== old", arg=[readout.element_handle(), before_value], timeout=CEILING_MS
        )
        # the Image widget keeps its element and gives it a new picture
        page.wait_for_function(
            "([img, old]) => img.src !== old", arg=[image.element_handle(), before_src], timeout=CEILING_MS
        )
        page.screenshot(path=str(artifacts / f"browser-{chapter}-slider.png"), full_page=False)
        assert image.get_attribute("src") != before_src
        errors = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] .jp-RenderedText, "
            ".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']"
        )
        assert errors.count() == 0, errors.first.inner_text()[:2000]
    page.close()
