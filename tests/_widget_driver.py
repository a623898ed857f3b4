"""Build every chapter's widgets and move each control once, the way a front end moves it.

A front end moves a control by sending the kernel a state update (``index`` for a selection,
``value`` for a number), which ipywidgets applies with ``set_state``; this does the same, so it
runs under any ipywidgets (8 here, 7.7 as Colab ships it) with or without a front end attached.
``tests/test_widgets.py`` runs it in a kernel under each version. Stdlib and ipywidgets only, plus
the course: the kernel runs this file's source as it is.
"""

from __future__ import annotations

import importlib
import inspect


def _instances() -> dict:
    """Live widgets by model id (ipywidgets 8 keeps them in a module dict, 7 on the class)."""
    from ipywidgets.widgets import widget

    found = getattr(widget, "_instances", None)
    return found if found is not None else widget.Widget.widgets


def _walk(box):
    yield box
    for child in getattr(box, "children", ()):
        yield from _walk(child)


def _moved_state(control) -> dict:
    """The state a front end sends when this control moves one step."""
    if hasattr(control, "options"):
        return {"index": (control.index + 1) % len(control.options)}
    step = control.step
    value = control.value + step if control.value + step <= control.max else control.value - step
    return {"value": value}


def widgets_of(slug: str) -> list[str]:
    module = importlib.import_module(f"course.plots.{slug}")
    return [name for name, _ in inspect.getmembers(module, inspect.isfunction) if name.startswith("widget_")]


def move_every_control(slugs: list[str]) -> list[dict]:
    """One record per widget of ``slugs`` (what it displayed, its controls, any selection control
    with nothing selected, its widget models) and one per control (whether moving it changed the
    picture, or the words of a widget without one, and any error it showed)."""
    import IPython.display
    import ipywidgets

    records = []
    shown = []
    real_display = IPython.display.display
    IPython.display.display = lambda *objs, **kw: shown.append((objs, kw))
    try:
        for slug in slugs:
            module = importlib.import_module(f"course.plots.{slug}")
            for name in widgets_of(slug):
                shown.clear()
                getattr(module, name)()
                bundles = [objs[0] for objs, kw in shown if kw.get("raw")]
                box = _instances()[bundles[0]["application/vnd.jupyter.widget-view+json"]["model_id"]]
                tree = list(_walk(box))
                images = [w for w in tree if isinstance(w, ipywidgets.Image)]
                controls = [w for w in tree if hasattr(w, "options") or hasattr(w, "step")]
                records.append(
                    {
                        "widget": f"{slug}.{name}",
                        "bundles": len(bundles),
                        "static_png": bool(bundles and bundles[0].get("image/png")),
                        "images": len(images),
                        "output_widgets": sum(isinstance(w, ipywidgets.Output) for w in tree),
                        "controls": len(controls),
                        "unselected": [c.description for c in controls if hasattr(c, "options") and c.index is None],
                        "models": sorted({f"{w._model_module}:{w._model_name}" for w in tree}),
                    }
                )
                shows = images or [w for w in tree if isinstance(w, ipywidgets.HTML)]  # a chart, or words
                for control in controls:
                    before = [w.value for w in shows]
                    control.set_state(_moved_state(control))
                    error = " ".join(p.value for p in tree if isinstance(p, ipywidgets.HTML) and "could not" in p.value)
                    records.append(
                        {
                            "widget": f"{slug}.{name}",
                            "control": control.description,
                            "changed": [w.value for w in shows] != before
                            and all(w.value[:4] == b"\x89PNG" for w in images),
                            "error": error,
                        }
                    )
    finally:
        IPython.display.display = real_display
    return records
