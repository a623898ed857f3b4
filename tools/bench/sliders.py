"""The sliders' latency, for ``make bench``: every control of every chapter's widget moved across its
range as a front end moves it, timed against a fresh chart per value, and the sliders' part of the
report (what is over their goal, their figures in milliseconds).

Not handled: the front end's part of an update (the message's trip to the kernel and back, and the
browser drawing the picture): the time ends at the new picture in the widget's Image."""

from __future__ import annotations

import importlib
import os
import statistics
import time

from course import paths, timing

SLIDER_BUDGET, SLIDER_SLOWEST = 0.1, 0.15  # seconds per slider update: the median, and the slowest


def _widgets_built() -> list[tuple[str, object, dict]]:
    """Every chapter's widgets, built as a notebook builds them: (name, chart, controls) each, the
    chart and its ipywidgets controls wired by ``course.plots._widgets.interactive`` (display muted)."""
    import inspect

    import IPython.display

    from course.plots import _widgets

    built, display = [], IPython.display.display

    def capturing(label: str):
        def capture(chart, controls, title=""):
            built.append((label, chart, controls))
            _widgets.interactive(chart, controls, title)

        return capture

    IPython.display.display = lambda *objects, **options: None
    try:
        for source in paths.chapter_sources():
            module = importlib.import_module(f"course.plots.{paths.slug(source)}")
            for name, widget in inspect.getmembers(module, inspect.isfunction):
                if not name.startswith("widget_") or getattr(module, "interactive", None) is not _widgets.interactive:
                    continue
                module.interactive = capturing(f"ch{source.stem[:2].lstrip('0')} {name[7:]}")
                try:
                    widget()
                finally:
                    module.interactive = _widgets.interactive
    finally:
        IPython.display.display = display
    return built


def _sweep(control) -> list[dict]:
    """The states a front end sends to move ``control`` across its range: every option, both ways of
    a checkbox, or 8 values."""
    if hasattr(control, "options"):
        return [{"index": i} for i in range(len(control.options))]
    if isinstance(control.value, bool):
        return [{"value": not control.value}, {"value": control.value}]
    steps = round((control.max - control.min) / control.step)
    return [{"value": control.min + control.step * round(steps * i / 7)} for i in range(8)]


def slider_latency() -> dict[str, dict[str, float]]:
    """Each control of each widget moved across its range the way a front end moves it (``set_state``):
    the widget's own update path, timed from the new value to the new picture in its Image widget
    (chart updated in place, drawn, encoded). Baseline in the same run: a fresh chart per value, as
    the widgets did before. Wall clock and CPU time, torch on one thread."""
    print(
        f"\n== slider updates: the widget's update path (goal: median <= {1e3 * SLIDER_BUDGET:.0f} ms, slowest "
        f"<= {1e3 * SLIDER_SLOWEST:.0f} ms; torch on 1 thread; load {os.getloadavg()[0]:.1f} on "
        f"{timing.usable_cpus()} CPUs) =="
    )
    results = {}
    with timing.threads(1):
        for label, chart, controls in _widgets_built():
            for control in controls.values():
                wall, cpu = [], []
                for state in _sweep(control):
                    started, started_cpu = time.perf_counter(), time.process_time()
                    control.set_state(state)
                    wall.append(time.perf_counter() - started)
                    cpu.append(time.process_time() - started_cpu)
                values = {key: c.value for key, c in controls.items()}
                fresh = timing.median_seconds(lambda: type(chart)().update(**values).png(), warmup=0, repeats=3)
                key = f"{label}: {control.description}"
                results[key] = {
                    "median": statistics.median(wall),
                    "slowest": max(wall),
                    "cpu_median": statistics.median(cpu),
                    "cpu_slowest": max(cpu),
                    "fresh_chart": fresh,
                }
                verdict = (
                    "ok"
                    if results[key]["median"] <= SLIDER_BUDGET and results[key]["slowest"] <= SLIDER_SLOWEST
                    else "OVER"
                )
                print(
                    f"{key:42s} median {1e3 * statistics.median(wall):6.1f} ms, slowest {1e3 * max(wall):6.1f} ms "
                    f"(CPU {1e3 * statistics.median(cpu):5.1f} / {1e3 * max(cpu):5.1f} ms) over {len(wall):2d} values; "
                    f"a fresh chart {1e3 * fresh:6.1f} ms = {fresh / statistics.median(wall):4.1f}x ({verdict})"
                )
    over = [k for k, r in results.items() if r["median"] > SLIDER_BUDGET or r["slowest"] > SLIDER_SLOWEST]
    print(f"{len(over)} of {len(results)} controls over the goal" + (f": {', '.join(over)}" if over else ""))
    return results


def slider_report(sliders: dict[str, dict]) -> tuple[list[str], dict]:
    """What is over the sliders' goal (lines), and the sliders' fields of the report (milliseconds)."""
    over = [
        f"slider {name}: median {1e3 * r['median']:.0f} ms, slowest {1e3 * r['slowest']:.0f} ms "
        f"(goal {1e3 * SLIDER_BUDGET:.0f} / {1e3 * SLIDER_SLOWEST:.0f} ms)"
        for name, r in sliders.items()
        if r["median"] > SLIDER_BUDGET or r["slowest"] > SLIDER_SLOWEST
    ]
    fields = {
        f"slider_{field}ms": {k: round(1e3 * r[key], 1) for k, r in sliders.items()}
        for field, key in (
            ("", "median"),
            ("slowest_", "slowest"),
            ("cpu_", "cpu_median"),
            ("cpu_slowest_", "cpu_slowest"),
            ("fresh_chart_", "fresh_chart"),
        )
    }
    return over, fields | {"slider_load_average": round(os.getloadavg()[0], 1)}
