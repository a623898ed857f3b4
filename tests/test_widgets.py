"""The widget plumbing every chapter's figures share: each widget shows its controls and leaves a
static view behind; every control of every widget moves in a real kernel under ipywidgets 8 and
under 7.7 (what Colab ships); a chart updated in place draws what a fresh chart draws; pictures
are opaque whatever the matplotlib style (dark themes); nothing in the package imports Jupyter at
module level."""

import importlib
import inspect
import io
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pytest
from PIL import Image

import course
from autograder import headless
from course import paths
from course.plots._widgets import Chart, figure_png

from conftest import chapter_cases

SLUGS = [paths.slug(source) for source in paths.chapter_sources()]
WIDGETS = [
    (slug, name)
    for slug in SLUGS
    for name, _ in inspect.getmembers(importlib.import_module(f"course.plots.{slug}"), inspect.isfunction)
    if name.startswith("widget_")
]
IPYWIDGETS7 = Path(sys.prefix) / "ipywidgets7"  # `make test` installs ipywidgets 7.7.1 there (tools/setup_course.py)
CORE_MODELS = ("@jupyter-widgets/controls:", "@jupyter-widgets/base:")  # what Colab draws without its custom manager


@pytest.mark.parametrize("slug, name", WIDGETS)
def test_widget_shows_its_controls_and_a_static_view(monkeypatch, slug, name):
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


def _move_in_kernel(tmp_path, kernel, env=None) -> tuple[str, list[dict]]:
    """Run tests/_widget_driver.py in a kernel; return the ipywidgets it saw and its records."""
    driver = (Path(__file__).parent / "_widget_driver.py").read_text()
    cells = [
        "import ipywidgets\nprint(ipywidgets.__version__, ipywidgets.__file__)",
        driver + f"\nimport json\nprint(json.dumps(move_every_control({SLUGS!r})))",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3 (course)", "language": "python"}
    nbformat.write(notebook, tmp_path / "widgets.ipynb")
    executed = headless.execute(tmp_path / "widgets.ipynb", tmp_path / "out.ipynb", kernel, cwd=tmp_path, env=env)
    printed = [
        "".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []) if o.get("name") == "stdout"
    ]
    failures = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not failures, "\n".join(failures[0]["traceback"])
    return printed[0], json.loads(printed[1])


def _assert_every_control_moves(records: list[dict]) -> None:
    built = [r for r in records if "control" not in r]
    assert {r["widget"] for r in built} == {f"{slug}.{name}" for slug, name in WIDGETS}
    for r in built:
        assert r["bundles"] == 1 and r["static_png"] and r["controls"] >= 1, r
        assert r["unselected"] == [], f"{r['widget']}: nothing selected in {r['unselected']}"
        # ipywidgets' own models, which Colab's widget manager draws: no custom widget manager needed
        assert all(m.startswith(CORE_MODELS) for m in r["models"]), r["models"]
        if r["images"]:  # a chart: its picture is an Image widget, never an Output widget (which made papermill hang)
            assert r["images"] == 1 and r["output_widgets"] == 0, r
    moved = [r for r in records if "control" in r]
    assert len(moved) == sum(r["controls"] for r in built)
    assert [r for r in moved if r["error"] or not r["changed"]] == []


def test_every_control_moves_in_a_kernel(tmp_path, kernel):
    version, records = _move_in_kernel(tmp_path, kernel)
    assert version.startswith("8.")
    _assert_every_control_moves(records)


def test_every_control_moves_under_ipywidgets_7_as_in_colab(tmp_path, kernel):
    """Colab ships ipywidgets 7.7: put it first on the kernel's path, then build and move everything."""
    assert (IPYWIDGETS7 / "ipywidgets").is_dir(), (
        f"ipywidgets 7.7 is not installed in {IPYWIDGETS7}: run `make test`, or "
        f"{sys.executable} -m pip install --no-deps --target {IPYWIDGETS7} ipywidgets==7.7.1 ipython_genutils==0.2.0"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(IPYWIDGETS7), os.environ.get("PYTHONPATH", "")])}
    version, records = _move_in_kernel(tmp_path, kernel, env)
    assert version.startswith("7.7.") and str(IPYWIDGETS7) in version
    _assert_every_control_moves(records)


def _charts() -> dict[type, tuple[dict, dict]]:
    """Every chart class of every chapter, with two views (its chapter's ``CHARTS``): one to draw
    first, one to move to."""
    return {chart: views for cases in chapter_cases("CHARTS").values() for chart, views in cases.items()}


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)


def test_every_chart_has_a_case_here():
    for slug in SLUGS:
        importlib.import_module(f"course.plots.{slug}")
    assert set(Chart.__subclasses__()) <= set(_charts())


@pytest.mark.parametrize("chart", list(_charts()), ids=lambda c: c.__name__)
def test_a_chart_updated_in_place_draws_what_a_fresh_chart_draws(chart):
    first, then = _charts()[chart]
    moved = chart()
    before = moved.update(**first).png()
    after = moved.update(**then).png()
    fresh = chart().update(**then).png()
    assert before != after
    differing = np.abs(_pixels(after) - _pixels(fresh)).max(axis=2) > 16
    assert differing.mean() < 0.001, f"{differing.mean():.2%} of the pixels differ from a fresh drawing"
    back = moved.update(**first).png()  # a view met before comes from the chart's kept pictures
    differing = np.abs(_pixels(back) - _pixels(before)).max(axis=2) > 16
    assert differing.mean() < 0.001, f"{differing.mean():.2%} of the pixels differ on moving back"


@pytest.mark.parametrize("chart", list(_charts()), ids=lambda c: c.__name__)
def test_pictures_are_opaque_even_when_the_style_asks_for_transparency(monkeypatch, chart):
    """Dark themes (JupyterLab's, VS Code's) show a transparent picture's black text on black."""
    for key, value in {
        "figure.facecolor": (1, 1, 1, 0),
        "axes.facecolor": "none",
        "savefig.transparent": True,
        "savefig.facecolor": "none",
    }.items():
        monkeypatch.setitem(matplotlib.rcParams, key, value)
    picture = Image.open(io.BytesIO(figure_png(chart().update(**_charts()[chart][1]).figure)))
    assert picture.mode == "RGB"
    assert picture.getpixel((0, 0)) == (255, 255, 255)  # the margin is white, not see-through black


def test_package_does_not_import_jupyter_at_module_level():
    modules = [m.name for m in pkgutil.walk_packages(course.__path__, "course.") if ".kernels" not in m.name]
    code = (
        f"import importlib, sys\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
        "print('IPython' in sys.modules, 'ipywidgets' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
    assert {"course.plots._widgets", "course.quantization", "course.timing"} <= set(modules)


def _figures() -> dict[str, object]:
    """Every figure the chapters draw: each ``plot_*`` that needs no data with its defaults, and
    those that plot measurements with the numbers of their chapter's ``FIGURES``, shaped like the
    chapter's (2-bit losses far above the rest, twin series, an acceptance rate near 1: the cases
    that once hid lines or clipped labels)."""
    drawn = {}
    for slug in SLUGS:
        module = importlib.import_module(f"course.plots.{slug}")
        for name, plot in inspect.getmembers(module, inspect.isfunction):
            needs = [p for p in inspect.signature(plot).parameters.values() if p.default is p.empty]
            if name.startswith("plot_") and plot.__module__ == module.__name__ and not needs:
                drawn[f"{slug}.{name}"] = plot
    return drawn | {
        f"{slug}.{name}": case for slug, cases in chapter_cases("FIGURES").items() for name, case in cases.items()
    }


def test_every_figure_that_needs_data_has_a_case_here():
    """A plot of measurements is only checked with numbers shaped like the chapter's: each chapter lists
    its own in ``FIGURES``."""
    cases = _figures()
    for slug in SLUGS:
        module = importlib.import_module(f"course.plots.{slug}")
        for name, plot in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("plot_") and plot.__module__ == module.__name__:
                assert f"{slug}.{name}" in cases, f"{slug}.{name} needs a case in FIGURES of tests/test_{slug}.py"


NUMBER = re.compile(r"[-\N{MINUS SIGN}+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?( ?[kMGTPmµn]?[A-Za-z%]{0,3})?")


def _needs_a_label(axis, shared_with_labelled: bool) -> bool:
    """An axis whose tick labels are numbers needs a name; words as tick labels (bar charts) name themselves."""
    ticks = [t.get_text() for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
    return not shared_with_labelled and any(NUMBER.fullmatch(text) for text in ticks)


@pytest.mark.parametrize("name", list(_figures()))
def test_every_figure_names_its_axes_and_keeps_its_words_inside(name):
    """Each numeric axis has a label (or shares it with a labelled neighbour); value labels and
    notes sit inside their axes, clear of the frame; titles and axis labels inside the picture."""
    fig = _figures()[name]()
    figure_png(fig)
    renderer = fig.canvas.get_renderer()
    problems = []
    for i, ax in enumerate(fig.axes):
        inside = ax.bbox if ax.axison else fig.bbox
        for text in (t for t in ax.texts if t.get_visible() and t.get_text()):
            box, clear = text.get_window_extent(renderer), inside.padded(-1)
            if not (clear.contains(box.x0, box.y0) and clear.contains(box.x1, box.y1)):
                problems.append(f"axes {i}: {text.get_text()!r} touches or crosses the frame")
        if not ax.axison:
            continue
        for text in (ax.title, ax.xaxis.label, ax.yaxis.label):
            box = text.get_window_extent(renderer)
            if text.get_text() and not (fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)):
                problems.append(f"axes {i}: {text.get_text()!r} is cut off by the picture's edge")
        for axis, shared in ((ax.xaxis, ax.get_shared_x_axes()), (ax.yaxis, ax.get_shared_y_axes())):
            labelled = any(other.axison and other is not ax for other in shared.get_siblings(ax)) and any(
                (other.xaxis if axis is ax.xaxis else other.yaxis).get_label_text() for other in shared.get_siblings(ax)
            )
            if not axis.get_label_text() and _needs_a_label(axis, labelled):
                problems.append(f"axes {i} ({ax.get_title()!r}): its {axis.axis_name} axis has no label")
    assert problems == []
