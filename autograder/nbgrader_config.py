"""nbgrader's settings for a course built from these chapters: keep this file in the course directory.

``python -m autograder nbgrader-source COURSE ASSIGNMENT CHAPTER...`` copies it there. It serves
``nbgrader generate_assignment``, ``collect``, ``generate_feedback``, ``export`` and formgrader, and
stock ``nbgrader autograde``, which runs the checks in the learner's own kernel (see the guide On
JupyterHub with nbgrader: ``python -m autograder nbgrader COURSE ASSIGNMENT`` grades in the sandbox instead).
"""

import os
import warnings

c = get_config()  # noqa: F821 (nbgrader defines get_config when it reads this file)

# The course directory is the folder of this file, wherever nbgrader is started from.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))

# The kernel of the course's environment (`make` registers it; elsewhere:
# `.venv/bin/python -m ipykernel install --user --name course`). The notebooks name `python3`,
# which is nbgrader's own interpreter: right only when nbgrader lives in the course's environment.
c.Execute.kernel_name = "course"

# Seconds a cell may run under autograde: the chapters' measurement cells (model sweeps, timings)
# take longer than nbgrader's default of 30 s on a loaded machine; this is a ceiling for a hang.
c.Execute.timeout = 600

# nbgrader zeroes a grade cell with any stderr output: the checks print warnings on stdout under
# autograde, and a warning printed by other code in a grade cell is dropped here.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"\w+Warning: "

# With nbgrader and the course in one environment (a hub's, or `make`'s): the released feedback
# shows no hidden test's source or inputs (the visible checks and their hints, the hidden checks as a
# count and points), on a page that opens without the internet; submissions' grade cells with hidden
# tests are restored without nbgrader's false "checksum has changed" warning; and SQLAlchemy's notice
# about nbgrader's order of building records is not printed for each submission.
try:
    from autograder import nbgrader_course as _course
except ImportError:  # nbgrader in an environment without the course: nbgrader's own feedback
    _course = None
if _course is not None:
    _course.feedback_settings(c)
    c.Autograde.sanitize_preprocessors = _course.sanitize_preprocessors()
    _course.quiet_database_notices()
else:
    warnings.warn("the course's package is not importable here: nbgrader's feedback shows hidden tests", stacklevel=1)

# To grade in the sandbox whenever nbgrader autogrades (formgrader's button and `nbgrader autograde`
# included), with nbgrader and the course in one environment, uncomment these two lines:
# c.Autograde.autograde_preprocessors = _course.preprocessors()
# c.SandboxGrade.hide = [c.CourseDirectory.root]  # the sandbox hides the course: source/, the gradebook
