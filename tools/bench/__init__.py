"""The parts of ``make bench`` (``tools/benchmarks.py``, which runs them, holds the budget and records
the figures in ``data/performance.json``): the sliders' update latency (:mod:`bench.sliders`) and a
generated class graded (:mod:`bench.grading`). Each chapter's own measurements are in
``course/benchmarks/<slug>.py``. Imported with ``tools/`` on the path, as the tool runs."""
