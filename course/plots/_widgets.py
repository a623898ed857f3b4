"""What every chapter's figures share: colours, a Figure outside pyplot, axis labels, and the
plumbing that turns a pure ``plot_*`` function into a widget.

Every ``plot_*`` in ``course.plots`` returns a :class:`matplotlib.figure.Figure` built without
pyplot, so nothing is drawn twice and tests can call it headless. Every ``widget_*`` only wires
sliders to one plot function through :func:`interactive`, which also leaves a static picture of
the default view for front ends without widgets (papermill, nbconvert, GitHub's viewer).
ipywidgets and IPython are imported inside the functions that need them, never at module level.
"""

from __future__ import annotations

import base64
import io
import sys
from collections.abc import Callable

from matplotlib.figure import Figure

BLUE, ORANGE, GREY, RED = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728"


def _show_figures_inline() -> None:
    """Under IPython, display a Figure as a PNG (pyplot's inline backend only registers this
    once pyplot is imported, and these figures never go through pyplot)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def new_figure(width: float, height: float, **adjust) -> Figure:
    """A Figure outside pyplot with fixed margins (constrained layout doubles a redraw's cost)."""
    _show_figures_inline()
    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(**{"left": 0.08, "right": 0.98, "bottom": 0.17, "top": 0.88, "wspace": 0.3, **adjust})
    return fig


def figure_png(fig: Figure) -> bytes:
    """The figure rendered to PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def interactive(plot: Callable[..., Figure], controls: dict, title: str = "") -> None:
    """Display ``plot`` under ``controls`` (ipywidgets keyed by ``plot``'s argument names).

    Each change redraws by calling ``plot(**values)``. The display also carries a PNG of the
    default view, which front ends without a widget manager show instead of the sliders.
    """
    import ipywidgets as widgets
    from IPython.display import Image, display

    defaults = {name: control.value for name, control in controls.items()}
    first = [figure_png(plot(**defaults))]  # drawn once: the widget's first view and the static one

    def redraw(**values):
        if first and values == defaults:
            display(Image(data=first.pop(), format="png"))
        else:
            display(plot(**values))

    static = base64.b64encode(first[0]).decode("ascii")
    output = widgets.interactive_output(redraw, controls)
    children = ([widgets.HTML(f"<b>{title}</b>")] if title else []) + [widgets.HBox(list(controls.values())), output]
    display_widget(
        widgets.VBox(children),
        {
            "image/png": static,
            "text/plain": f"{title or plot.__name__}: static view with the default values "
            "(open in JupyterLab or Colab to move the sliders)",
        },
    )


def display_widget(box, fallback: dict[str, str]) -> None:
    """Display the widget ``box`` with ``fallback`` data (``image/png``, ``text/html``, ``text/plain``)
    that front ends without a widget manager show in its place."""
    from IPython.display import display

    view = {"version_major": 2, "version_minor": 0, "model_id": box.model_id}
    display({"application/vnd.jupyter.widget-view+json": view, **fallback}, raw=True)


def slider(kind: str, **options):
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    layout = widgets.Layout(width="300px")
    if kind.endswith("Slider"):
        options["continuous_update"] = False  # redraw on release, not on every pixel of a drag
    return getattr(widgets, kind)(style=style, layout=layout, **options)


# --- axes shared by several chapters ------------------------------------------------------------


def plain_log_ticks(ax, y_unit: str = "") -> None:
    """Log axes labelled 100 / 10 G rather than 10^2 / 10^10: easier to read, and it spares
    matplotlib's math-text parser, which otherwise takes most of a redraw."""
    from matplotlib.ticker import EngFormatter, FuncFormatter

    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_major_formatter(EngFormatter(unit=y_unit, sep=" ") if y_unit else FuncFormatter(lambda v, _: f"{v:g}"))


def count_label(params: float) -> str:
    """90M, 8B, 1.5T: a parameter count as people say it."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= size:
            return f"{params / size:.3g}{suffix}"
    return f"{params:.0f}"
