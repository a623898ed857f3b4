"""The chapters' hidden checks: ``autograder/hidden/<slug>.py`` holds ``HIDDEN`` (grade_id -> the
exercise's hidden checks, run only when a notebook is graded) and ``REQUIREMENTS`` (grade_id ->
what the exercise's prompt asks, each naming the checks that test it: the instructor's coverage
table, ``autograder/coverage.py``). The registry (``autograder/chapters/__init__.py``) appends them
to the exercises the chapter's checks module declares. Instructor data, like ``solutions/``: the
learners' copy leaves this folder out and knows only how many hidden checks each exercise has."""
