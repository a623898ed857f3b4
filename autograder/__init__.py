"""The course's grader: ``python -m autograder grade NOTEBOOK.ipynb``.

Learners' code runs in a sandbox (the ``sandbox`` package); only plain data comes back and
the checks (``checks.py``, ``chapters/<slug>.py``) decide here. In a notebook, ``check("exercise")``
(``selfcheck.py``) runs the same checks in the learner's own kernel. It is imported on first use,
so that importing one module of the grader (the sandbox imports ``plain_data``) does not load every
chapter's checks.
"""

__all__ = ["check"]


def __getattr__(name: str):
    if name == "check":
        from autograder.selfcheck import check

        return check
    raise AttributeError(f"module 'autograder' has no attribute {name!r}")
