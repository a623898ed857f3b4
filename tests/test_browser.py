"""The course as a learner meets it: JupyterLab in headless Chromium runs a chapter, a slider moves,
the chart changes, and no cell shows an error. Screenshots go to test-artifacts/.

Needs Chromium (Debian: `apt-get install chromium`, which `make test` runs when it is root) and
Playwright for Python (the dev extra); without them the test is skipped with that message.
"""

from __future__ import annotations

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
    CHROMIUM is None, reason="no Chromium: install it with `apt-get install chromium` (as root), then rerun")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(instructor_notebooks, kernel, tmp_path_factory):
    """JupyterLab on a free localhost port, serving copies of two instructor notebooks."""
    folder = tmp_path_factory.mktemp("lab")
    for chapter in ("02_lora", "03_quantization"):
        notebook = json.loads(instructor_notebooks[chapter].read_text())
        notebook["metadata"]["kernelspec"] = {"name": kernel, "display_name": "Python 3 (course)", "language": "python"}
        (folder / f"{chapter}.ipynb").write_text(json.dumps(notebook))
    # every cell in the page (no virtual scrolling), so run-all's progress and every widget can be read
    settings = tmp_path_factory.mktemp("lab-settings")
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--allow-root",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--notebook-dir={folder}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings)})
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("JupyterLab did not start within a minute")
    yield url
    server.terminate()
    server.wait(timeout=30)


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
    return box.locator(".noUi-handle").first, box.locator(".widget-output img").first, box.locator(".widget-readout").first


@pytest.mark.parametrize("chapter, label", [("03_quantization", "bits"), ("02_lora", "adapter rank r")])
def test_run_all_move_a_slider_and_the_chart_changes(lab, browser, artifacts, chapter, label):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{lab}/lab/workspaces/{chapter}/tree/{chapter}.ipynb?reset")  # a fresh workspace per chapter
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator("li[data-command='runmenu:run-all']").click()
    # every code cell numbered, none still queued ([*]): the whole notebook has run
    page.wait_for_function("""() => {
        const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.innerText);
        return prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
    }""", timeout=300_000)
    page.screenshot(path=str(artifacts / f"browser-{chapter}-run.png"), full_page=False)
    handle, image, readout = _slider_images(page, label)
    handle.scroll_into_view_if_needed()
    before_src, before_value = image.get_attribute("src"), readout.inner_text()
    handle.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("([el, old]) => el.innerText !== old", arg=[readout.element_handle(), before_value],
                           timeout=10_000)
    deadline = time.monotonic() + 60  # the output widget replaces its image: re-read it through the locator
    while time.monotonic() < deadline and (image.count() == 0 or image.get_attribute("src") == before_src):
        page.wait_for_timeout(250)
    page.screenshot(path=str(artifacts / f"browser-{chapter}-slider.png"), full_page=False)
    assert image.get_attribute("src") != before_src
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] .jp-RenderedText, "
                          ".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()[:2000]
    page.close()
