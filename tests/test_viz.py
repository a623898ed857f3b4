"""Plots are pure and run headless; widgets wrap them and leave a static view behind."""

import pytest
from matplotlib.figure import Figure

from course import quant, viz

PLOTS = {
    "quantization": lambda: viz.plot_quantization(4, 32, 20.0),
    "granularity": lambda: viz.plot_granularity_bars(quant.granularity_errors(quant.outlier_matrix()),
                                                     quant.granularity_errors(quant.gaussian_matrix(256, 512))),
    "outlier_row": lambda: viz.plot_outlier_row(4.2),
    "bits_sweep": lambda: viz.plot_bits_sweep(quant.gaussian_matrix(64, 128)),
    "nf4_levels": lambda: viz.plot_nf4_levels(),
    "roofline": lambda: viz.plot_roofline(70e9, 4, 64, 1024, "H100 SXM", measured=[("here", 1.0, 1e12)]),
    "decode_batch": lambda: viz.plot_decode_batch(8e9, 16, "A100-80G", {1: 100.0, 8: 700.0}),
    "batching": lambda: viz.plot_batching(8.0, 16, n=60),
    "model_bits": lambda: viz.plot_model_bits({"per row": {8: 1.40, 4: 1.9}, "group 32": {8: 1.39, 4: 1.5}}, 1.38),
}


@pytest.mark.parametrize("name", PLOTS)
def test_plot_returns_a_figure_that_renders(name):
    fig = PLOTS[name]()
    assert isinstance(fig, Figure)
    assert viz.figure_png(fig).startswith(b"\x89PNG")


def test_the_quantization_plot_follows_its_arguments():
    pictures = {viz.figure_png(viz.plot_quantization(bits, 32, 20.0)) for bits in (3, 4, 8)}
    pictures.add(viz.figure_png(viz.plot_quantization(4, None, 20.0)))
    pictures.add(viz.figure_png(viz.plot_quantization(4, 32, 1.0)))
    assert len(pictures) == 5


def test_every_group_choice_draws():
    for _, group in viz.GROUP_CHOICES:
        viz.plot_quantization(3, group, 10.0)


@pytest.mark.parametrize("widget", [viz.widget_quantization, viz.widget_roofline, viz.widget_batching])
def test_widget_shows_sliders_and_a_static_view(monkeypatch, widget):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.append((objs, kw)))
    widget()
    bundles = [objs[0] for objs, kw in shown if kw.get("raw")]
    assert len(bundles) == 1
    bundle = bundles[0]
    assert bundle["image/png"] and "model_id" in bundle["application/vnd.jupyter.widget-view+json"]


def test_package_does_not_import_jupyter_at_module_level():
    import subprocess
    import sys

    code = "import sys; import course.viz, course.quant, course.bench; print('IPython' in sys.modules, 'ipywidgets' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
