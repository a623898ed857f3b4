"""The pieces of ``make colab-check`` (``tools/colab_check.py``, which runs the steps and prints the
table): Colab's list of packages and the Python that runs them (:mod:`colab.packages`), the
environment built from them (:mod:`colab.runtime`), and the notebooks run in it, with what an executed
one shows (:mod:`colab.notebooks`). They are imported with ``tools/`` on the path, as the tool runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
