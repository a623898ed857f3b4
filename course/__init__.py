"""The course package: what the chapters build on, one module per chapter and per shared topic.

Each chapter's reference implementations live in a module named by the chapter's slug
(``course.quantization`` for ``solutions/03_quantization.py``), its figures in
``course.plots.<slug>``; shared parts keep topic names (``model``, ``corpus``, ``checkpoints``,
``evaluation``, ``device``, ``timing``, ``train``). Modules are imported on demand
(``from course import quantization``) so that importing the package stays cheap and never pulls
in Jupyter or ipywidgets. The package never imports the grader.
"""

__version__ = "0.1.0"
