"""The widget plumbing every chapter's figures share: each widget shows its sliders and leaves a
static view behind, and nothing in the package imports Jupyter at module level."""

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import course
from course import paths

WIDGETS = [
    (slug, name)
    for slug in (paths.slug(source) for source in paths.chapter_sources())
    for name, _ in inspect.getmembers(importlib.import_module(f"course.plots.{slug}"), inspect.isfunction)
    if name.startswith("widget_")
]


@pytest.mark.parametrize("slug, name", WIDGETS)
def test_widget_shows_sliders_and_a_static_view(monkeypatch, slug, name):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append((objs, kw)))
    getattr(importlib.import_module(f"course.plots.{slug}"), name)()
    bundles = [objs[0] for objs, kw in shown if kw.get("raw")]
    assert len(bundles) == 1
    bundle = bundles[0]
    assert bundle["image/png"] and "model_id" in bundle["application/vnd.jupyter.widget-view+json"]


def test_widgets_are_found():
    assert ("quantization", "widget_quantization") in WIDGETS and len({slug for slug, _ in WIDGETS}) > 1


def test_package_does_not_import_jupyter_at_module_level():
    modules = [m.name for m in pkgutil.walk_packages(course.__path__, "course.") if ".kernels" not in m.name]
    code = (
        f"import importlib, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
        "print('IPython' in sys.modules, 'ipywidgets' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
    assert {"course.plots._widgets", "course.quantization", "course.timing"} <= set(modules)
