"""The chapters' figures, one module per chapter (``course.plots.quantization``): pure ``plot_*``
functions (data in, Figure out) and thin ``widget_*`` wrappers; ``_widgets`` holds what they share."""
