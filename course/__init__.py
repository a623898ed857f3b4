"""The course package: reference implementations, plots and measurements used by the chapters.

Modules are imported on demand (``from course import quant``) so that importing the package
stays cheap and never pulls in Jupyter or ipywidgets.
"""

__version__ = "0.1.0"
