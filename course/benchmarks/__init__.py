"""What ``make bench`` measures of each chapter, one module per chapter (``course.benchmarks.quantization``),
found by the chapter's slug: ``benchmark(device, bound)`` prints its lines and returns its figures for
``data/performance.json`` (a number is a ratio; a dict is recorded as a table under its name). ``bound``
is this machine's memory bandwidth in GB/s, measured first. A chapter without a module has no
measurements of its own; ``tools/benchmarks.py`` runs them all.
"""
