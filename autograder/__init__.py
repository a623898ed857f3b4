"""The course's grader: ``python -m autograder grade NOTEBOOK.ipynb``.

Learners' code runs in a sandbox (``runner.py``, ``sandbox.py``); only plain data comes back and
the checks (``checks.py``, ``chapters/``) decide here. In a notebook, ``check("exercise")`` runs
the same checks in the learner's own kernel.
"""

from autograder.checks import check

__all__ = ["check"]
