"""What every chapter's figures share: colours, a Figure outside pyplot, a chart updated in place,
PNG rendering, and the plumbing that turns a chart into a widget.

Every ``plot_*`` in ``course.plots`` returns a :class:`matplotlib.figure.Figure` built without
pyplot, so nothing is drawn twice and tests can call it headless. A figure that a widget drives is
a :class:`Chart`: its axes and artists are built once, and ``update(**values)`` moves them in place
(``set_data``, ``set_height``, ``set_text``), so a slider costs one draw and no rebuilding; its
``plot_*`` function is ``SomeChart().update(...).figure``. :func:`interactive` wires controls to a
chart and shows its picture in an ``ipywidgets.Image``, with a static PNG of the default view for
front ends without widgets (papermill, nbconvert, GitHub's viewer). No Output widget is used: a
headless client imitating one sends messages to the kernel mid-cell, which is what made papermill
hang (see ``autograder/headless.py``). Pictures are opaque RGB on white, readable on dark themes.
ipywidgets and IPython are imported inside the functions that need them, never at module level.
Works with ipywidgets 7.7 (Colab) and 8.
"""

from __future__ import annotations

import abc
import html
import io
import math
import sys

from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

BLUE, ORANGE, GREY, RED, PURPLE = "#1f77b4", "#ff7f0e", "#7f7f7f", "#d62728", "#9467bd"
DPI = 90


def _show_figures_inline() -> None:
    """Under IPython, display a Figure as a PNG (pyplot's inline backend only registers this
    once pyplot is imported, and these figures never go through pyplot)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)


def new_figure(width: float, height: float, **adjust) -> Figure:
    """A Figure outside pyplot on an opaque white background, with fixed margins (constrained
    layout doubles a redraw's cost)."""
    _show_figures_inline()
    fig = Figure(figsize=(width, height), dpi=DPI, facecolor="white", edgecolor="white")
    FigureCanvasAgg(fig)
    fig.subplots_adjust(**{"left": 0.08, "right": 0.98, "bottom": 0.17, "top": 0.88, "wspace": 0.3, **adjust})
    return fig


def _encode(canvas: FigureCanvasAgg) -> bytes:
    """What the canvas holds, as an opaque RGB PNG (no alpha: dark themes cannot show through)."""
    from PIL import Image

    width, height = canvas.get_width_height(physical=True)
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="png", compress_level=1)  # level 1: a quarter of the time, 5% larger
    return buffer.getvalue()


def _draw_all(fig: Figure, moving: list[Artist]) -> None:
    """Draw the figure, then the artists a draw leaves out (``animated``: those a chart moves)."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for artist in sorted(moving, key=lambda a: a.get_zorder()):
        if artist.get_visible():
            artist.draw(renderer)


def figure_png(fig: Figure) -> bytes:
    """The figure rendered to PNG bytes (an opaque RGB image at the course's resolution)."""
    if fig.dpi != DPI:
        fig.set_dpi(DPI)
    chart = getattr(fig, "_course_chart", None)
    if chart is not None:
        return chart.png()
    _draw_all(fig, [a for a in fig.findobj(lambda a: a.get_animated()) if a is not fig])
    return _encode(fig.canvas)


class Chart(abc.ABC):
    """A figure built once whose artists ``update(**values)`` moves in place; ``png()`` renders it.

    Subclasses build axes and artists in ``__init__``, passing every artist that an update changes
    through :meth:`moving`, and set data, text and limits in ``update``, which returns ``self``.
    ``png()`` keeps a picture of everything that does not move and draws the moving artists over
    it. When an update changes an axes' limits, only that axes (its ticks, labels and fixed
    artists) is drawn again, over its own patch of the picture; when it sets :attr:`layout` to a new
    value (for something else that does not move, such as tick labels), the whole figure is.
    The pictures of the last :data:`SEEN_VIEWS` views (layout and limits) are kept, so a slider
    moved back costs no drawing but the moving artists'. Titles stay at the top of their axes
    (:func:`pin_titles`), where matplotlib places them when nothing is drawn above an axes.
    Not handled: axes that autoscale (set limits in ``update``), artists added to the figure itself
    rather than to an axes, ticks, labels or an offset text above an axes (a title would cover them).
    """

    def __init__(self, width: float, height: float, **adjust):
        self.figure = new_figure(width, height, **adjust)
        self.figure._course_chart = self  # figure_png renders a chart's figure through the chart
        self.layout: object = None
        self._moving: list[Artist] = []
        self._drawn: tuple | None = None  # (layout, limits per axes) of the picture kept
        self._extents: list = []  # each axes' pixels in that picture
        self._background = None
        self._seen: dict = {}  # (layout, limits) -> (picture, extents): views met before, newest last

    def moving(self, *artists):
        """Mark ``artists`` as changing with the controls; returns them (one, or a tuple)."""
        for artist in artists:
            artist.set_animated(True)
            self._moving.append(artist)
        self._moving.sort(key=lambda a: a.get_zorder())
        return artists[0] if len(artists) == 1 else artists

    @abc.abstractmethod
    def update(self, **values) -> Chart:
        """Set the moving artists, texts and limits for ``values``; return ``self``."""

    def _limits(self) -> tuple:
        return tuple((ax.get_xlim(), ax.get_ylim()) for ax in self.figure.axes)

    def png(self) -> bytes:
        """The chart as PNG bytes, drawing again only what changed since the last picture."""
        canvas = self.figure.canvas
        renderer = canvas.get_renderer()
        limits = self._limits()
        seen = self._seen.pop((self.layout, limits), None)
        if seen is not None and self._drawn != (self.layout, limits):  # a view met before: its picture
            self._background, self._extents = seen
            self._drawn = (self.layout, limits)
            canvas.restore_region(self._background)
        elif self._background is None or self._drawn is None or self._drawn[0] != self.layout:
            pin_titles(self.figure)
            canvas.draw()  # everything but the moving artists
            self._keep(renderer, limits)
        elif self._drawn[1] != limits:
            canvas.restore_region(self._background)
            redrawn = self._redraw_axes(
                [i for i, (a, b) in enumerate(zip(self._drawn[1], limits, strict=True)) if a != b]
            )
            self._keep(renderer, limits, redrawn)
        else:
            canvas.restore_region(self._background)
        self._seen[(self.layout, limits)] = (self._background, list(self._extents))
        while len(self._seen) > SEEN_VIEWS:
            self._seen.pop(next(iter(self._seen)))
        for artist in self._moving:
            if artist.get_visible():
                artist.draw(renderer)
        return _encode(canvas)

    def _keep(self, renderer, limits: tuple, redrawn: set[int] | None = None) -> None:
        """Keep the picture, and the pixels each axes covers in it (measured again where redrawn)."""
        self._background = self.figure.canvas.copy_from_bbox(self.figure.bbox)
        self._drawn = (self.layout, limits)
        if redrawn is None:
            self._extents = [_extent(ax, renderer) for ax in self.figure.axes]
        for i in redrawn or ():
            self._extents[i] = _extent(self.figure.axes[i], renderer)

    def _redraw_axes(self, changed: list[int]) -> set[int]:
        """Blank the pixels of the ``changed`` axes (and of any axes they overlap) and draw those again."""
        import numpy as np

        axes = self.figure.axes
        redraw, grown = set(changed), True
        while grown:  # an axes whose pixels touch a blanked one must be drawn again too
            extra = {
                j
                for j in range(len(axes))
                if j not in redraw and any(self._extents[j].overlaps(self._extents[i]) for i in redraw)
            }
            grown = bool(extra)
            redraw |= extra
        pixels = np.asarray(self.figure.canvas.buffer_rgba())
        height, width = pixels.shape[:2]
        white = (np.array(self.figure.get_facecolor()) * 255).round().astype(np.uint8)
        for i in redraw:
            box = self._extents[i]
            x0, x1 = max(0, math.floor(box.x0) - 1), min(width, math.ceil(box.x1) + 1)
            y0, y1 = max(0, height - math.ceil(box.y1) - 1), min(height, height - math.floor(box.y0) + 1)
            pixels[y0:y1, x0:x1] = white
        renderer = self.figure.canvas.get_renderer()
        for i in sorted(redraw):
            axes[i].draw(renderer)
        return redraw


def pin_titles(figure: Figure) -> None:
    """Fix each axes' titles at its top (y = 1, as ``set_title(..., y=1)`` does), their text and font
    kept: matplotlib then stops placing them again on every draw, which costs a tenth of a redraw.
    Where nothing is drawn above an axes, its automatic place is that same y = 1."""
    for ax in figure.axes:
        title = ax.title
        ax.set_title(
            title.get_text(),
            y=1.0,
            fontsize=title.get_fontsize(),
            fontweight=title.get_fontweight(),
            color=title.get_color(),
        )


SEEN_VIEWS = 8  # pictures of earlier views a chart keeps (about 1 MB each), for sliders moved back

NICE_STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)


def _extent(ax, renderer):
    """The pixels an axes drew: its patch, the tick labels in view, its labels, titles and fixed legend
    (what ``get_tightbbox`` finds, at a third of its cost: no ticks or label positions recomputed)."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    boxes = [ax.bbox]
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        margin = 1e-9 * max(abs(low), abs(high), 1.0)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if low - margin <= tick.get_loc() <= high + margin:
                boxes += [
                    label.get_window_extent(renderer) for label in (tick.label1, tick.label2) if label.get_visible()
                ]
        boxes.append(axis.label.get_window_extent(renderer))
    texts = [child for child in ax.get_children() if isinstance(child, Text)]  # its titles and texts
    texts += [ax.get_legend()] if ax.get_legend() else []
    boxes += [t.get_window_extent(renderer) for t in texts if t.get_visible() and not t.get_animated()]
    return Bbox.union([b for b in boxes if b.width > 0 or b.height > 0])


def nice_ceiling(value: float) -> float:
    """The next of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, ... at or above ``value``: an axis
    limit that wastes at most a fifth of the axis and changes only now and then as ``value`` moves."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in NICE_STEPS if step * power >= value * (1 - 1e-9))


def decades(*values: float) -> tuple[float, float]:
    """Log-axis limits at whole powers of ten around ``values``: they change a decade at a time."""
    return 10 ** math.floor(math.log10(min(values))), 10 ** math.ceil(math.log10(max(values)) + 0.05)


def interactive(chart: Chart, controls: dict, title: str = "") -> None:
    """Display ``chart`` under ``controls`` (ipywidgets keyed by the names ``chart.update`` takes).

    Each change calls ``chart.update(**values)`` and shows ``chart.png()`` in an Image widget; an
    error is shown under the picture instead of being lost in the kernel's log. The display also
    carries a PNG of the default view, which front ends without a widget manager show instead.
    """
    import base64

    import ipywidgets as widgets

    def values() -> dict:
        return {name: control.value for name, control in controls.items()}

    first = chart.update(**values()).png()
    image = widgets.Image(value=first, format="png", layout=widgets.Layout(max_width="100%"))
    problem = widgets.HTML("")

    def redraw(change=None) -> None:
        try:
            image.value = chart.update(**values()).png()
            problem.value = ""
        except Exception as error:  # shown where the learner looks, not in the kernel's log
            problem.value = f"<span style='color:{RED}'>could not draw this: {html.escape(str(error))}</span>"

    for control in controls.values():
        control.observe(redraw, names="value")
    children = ([widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []) + [
        widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap")),
        image,
        problem,
    ]
    display_widget(
        widgets.VBox(children),
        {
            "image/png": base64.b64encode(first).decode("ascii"),
            "text/plain": f"{title or type(chart).__name__}: static view with the default values "
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


def plain_log_ticks(ax, y_unit: str | None = None) -> None:
    """Log axes labelled 100 / 10 G rather than 10^2 / 10^10: easier to read, and it spares
    matplotlib's math-text parser, which otherwise takes most of a redraw. With ``y_unit`` (""
    for a unit named in the axis label) the y axis counts in k, M, G; without, it prints plain
    numbers (for values below 1 as well, where SI prefixes would read 500 m)."""
    from matplotlib.ticker import EngFormatter, FuncFormatter

    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_major_formatter(
        EngFormatter(unit=y_unit, sep=" ") if y_unit is not None else FuncFormatter(lambda v, _: f"{v:g}")
    )


def count_label(params: float) -> str:
    """90M, 8B, 1.5T: a parameter count as people say it."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if params >= size:
            return f"{params / size:.3g}{suffix}"
    return f"{params:.0f}"
