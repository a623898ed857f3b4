"""A class on JupyterHub with nbgrader: the settings and file modes one course needs, in one command.

``python -m autograder hub-setup COURSE --course-id ID --exchange DIR [--instructor USER]`` writes:

* for every user of the course's environment (its owner runs it; on a hub, usually root), under
  ``sys.prefix/etc/jupyter``: nbgrader's ``course_id`` and exchange; nbgrader's Assignments tab and
  its validate button on (server and JupyterLab), formgrader, the course list and the assignment
  creator off; terminals that keep the environment's ``PATH`` (a login shell resets it, and
  learners would not find ``nbgrader``);
* for the instructor, in their ``~/.jupyter``: formgrader's server extension on (opened at
  ``/user/NAME/formgrader``), and nbgrader's ``CourseDirectory.root`` (without it formgrader shows
  empty tables and creates an empty ``gradebook.db``, silently);
* the course directory, mode 0700 (``source/``, ``gradebook.db``, ``submitted/``, ``autograded/``
  and ``feedback/`` are the instructor's alone), with the course's ``nbgrader_config.py``;
* the exchange, mode 1777 (nbgrader's own modes inside it keep learners from reading each other's
  submissions);
* ``COURSE/jupyterhub_config.py``: a hub's configuration (the single-user command of this
  environment and its ``PATH``, learners' home folders made private before their servers start).

Run by the instructor rather than the environment's owner, it writes the instructor's part and
names the command the owner must run for the rest. Not handled: a course directory shared by
several instructors (nbgrader's ``groupshared``), hubs whose learners' servers run in containers
(there each image needs the environment-wide files), and exchanges on a network file system
without sticky bits.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autograder import nbgrader_course

LEARNERS_ON = ("assignment_list", "validate_assignment")  # nbgrader's server extensions learners use
INSTRUCTOR_ONLY = ("formgrader", "course_list")
LAB_PACKAGE = "@jupyter/nbgrader"
# the package's plugins for instructors, off for everyone: in a virtual environment its settings
# outrank a user's own (jupyter_core prefers the environment's), and formgrader's panel stays blank
# under a hub anyway (the hub forbids frames), so the instructor opens /user/NAME/formgrader
LAB_LEARNERS_OFF = ("formgrader", "create-assignment", "course-list")
MARK = "# --- written by python -m autograder hub-setup ---"


class HubSetupError(ValueError):
    """Something the command cannot fix itself; the message says what to do."""


@dataclass
class Plan:
    """What one run writes: files (path -> text), folders with their modes, owners to set, and what
    could not be done by the user running it."""

    files: dict[Path, str] = field(default_factory=dict)
    folders: dict[Path, int] = field(default_factory=dict)
    owner: tuple[int, int] | None = None  # the instructor's uid and gid, for what goes in their home
    owned: list[Path] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def interpreter_problem(python: Path) -> str:
    """Why users other than its owner cannot run ``python`` ("" when they can): every folder on the
    way to the real file must let others through, and the file must let them execute it."""
    real = Path(os.path.realpath(python))
    for folder in reversed(real.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return (
                f"other users cannot run this environment's Python: {real} lies in {folder} "
                f"(mode {stat.S_IMODE(mode):o}); make the environment with an interpreter every user "
                "can run, e.g. make hub-env PYTHON=/usr/bin/python3.11"
            )
    if not real.stat().st_mode & stat.S_IXOTH:
        return f"other users cannot run this environment's Python: {real} is not executable by them"
    return ""


def nbgrader_settings(course_id: str, exchange: Path, course: Path | None = None) -> str:
    """The lines of an ``nbgrader_config.py`` that name the course (and, for the instructor, its folder)."""
    lines = [MARK, f"c.CourseDirectory.course_id = {course_id!r}", f"c.Exchange.root = {str(exchange)!r}"]
    if course is not None:
        lines.append(f"c.CourseDirectory.root = {str(course)!r}")
    return "\n".join(lines) + "\n"


def with_settings(existing: str, settings: str) -> str:
    """``existing`` config text with the hub's settings at its end, replacing what an earlier run wrote."""
    kept = existing.split(MARK)[0].rstrip()
    return (kept + "\n\n" if kept else "") + settings


def environment_files(prefix: Path, course_id: str, exchange: Path) -> dict[Path, str]:
    """What every user of the environment at ``prefix`` reads (the owner writes these)."""
    etc = prefix / "etc" / "jupyter"
    shell = shutil.which("bash") or "/bin/sh"
    files = {
        etc / "nbgrader_config.py": "c = get_config()  # noqa: F821\n\n" + nbgrader_settings(course_id, exchange),
        etc / "jupyter_server_config.json": _json(
            # an interactive shell, not a login one: /etc/profile would put the system's PATH first
            {"ServerApp": {"terminado_settings": {"shell_command": [shell, "-i"]}}},
            existing=etc / "jupyter_server_config.json",
        ),
        etc / "labconfig" / "page_config.json": _json(
            {
                "disabledExtensions": {
                    LAB_PACKAGE: False,
                    **{f"{LAB_PACKAGE}:{plugin}": True for plugin in LAB_LEARNERS_OFF},
                }
            }
        ),
    }
    for name in (*LEARNERS_ON, *INSTRUCTOR_ONLY):
        module = f"nbgrader.server_extensions.{name}"  # the file `jupyter server extension` writes
        files[etc / "jupyter_server_config.d" / f"{module}.json"] = _json(
            {"ServerApp": {"jpserver_extensions": {module: name in LEARNERS_ON}}}
        )
    return files


def instructor_files(home: Path, course: Path, course_id: str, exchange: Path) -> dict[Path, str]:
    """What only the instructor's servers read: formgrader on, and where the course lives."""
    jupyter = home / ".jupyter"
    config = jupyter / "nbgrader_config.py"
    existing = config.read_text() if config.is_file() else "c = get_config()  # noqa: F821\n"
    return {
        config: with_settings(existing, nbgrader_settings(course_id, exchange, course)),
        jupyter / "jupyter_server_config.json": _json(
            {
                "ServerApp": {
                    "jpserver_extensions": {f"nbgrader.server_extensions.{name}": True for name in INSTRUCTOR_ONLY}
                }
            },
            existing=jupyter / "jupyter_server_config.json",
        ),
    }


HUB_CONFIG = """\
# JupyterHub for the course, as `python -m autograder hub-setup` wrote it. Start the hub with
#   {bin_dir}/jupyterhub -f /etc/jupyterhub/jupyterhub_config.py
# from the folder where it keeps its database and cookie secret (/srv/jupyterhub, say), with
# configurable-http-proxy on PATH (npm install -g configurable-http-proxy); or copy the course's
# part below into a hub's existing configuration.
c = get_config()  # noqa: F821 (JupyterHub defines get_config when it reads this file)

# --- the hub's own choices: change them for yours ---
c.JupyterHub.bind_url = "http://127.0.0.1:8000"  # put TLS and a public address in front of it
c.Authenticator.admin_users = {{{instructor!r}}}
c.Authenticator.allowed_users = {{{instructor!r}}}  # add every learner's user name

# --- the course's part ---
c.Spawner.cmd = [{singleuser!r}]  # learners' servers run in the course's environment
c.Spawner.environment = {{"PATH": {path!r}}}  # its nbgrader first, in terminals too
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120  # a first server took 24-32 s on 2 busy cores; the default is 30 s


def private_home(spawner):
    \"\"\"Each user's home folder, mode 0700, before their server starts: Debian and Ubuntu make
    homes 0755, where learners read each other's fetched notebooks and feedback.\"\"\"
    import os
    import pwd

    os.chmod(pwd.getpwnam(spawner.user.name).pw_dir, 0o700)


c.Spawner.pre_spawn_hook = private_home
"""


def hub_config(prefix: Path, instructor: str) -> str:
    """A ``jupyterhub_config.py`` that starts learners' servers in the environment at ``prefix``."""
    bin_dir = prefix / "bin"
    return HUB_CONFIG.format(
        bin_dir=bin_dir,
        instructor=instructor,
        singleuser=str(bin_dir / "jupyterhub-singleuser"),
        path=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
    )


def plan(
    course: Path,
    course_id: str,
    exchange: Path,
    instructor: str | None = None,
    prefix: Path | None = None,
    home: Path | None = None,
) -> Plan:
    """Everything :func:`apply` would write, checked first: raises :class:`HubSetupError` for what
    no run can fix (a course id nbgrader refuses, an interpreter other users cannot run, no
    ``jupyterhub-singleuser`` in the environment). ``prefix`` is the environment (this one by
    default), ``home`` the instructor's home (theirs by default)."""
    prefix = Path(prefix or sys.prefix)
    if not course_id or not course_id.replace("-", "").replace("_", "").isalnum():
        raise HubSetupError(f"--course-id {course_id!r}: use letters, digits, '-' and '_' (nbgrader's rule)")
    problem = interpreter_problem(prefix / "bin" / "python")
    if problem:
        raise HubSetupError(problem)
    if not (prefix / "bin" / "jupyterhub-singleuser").exists():
        raise HubSetupError(
            f"{prefix / 'bin'} has no jupyterhub-singleuser, which a hub starts learners' servers with: "
            "make the environment with make hub-env (JUPYTERHUB_SPEC= names the hub's version)"
        )
    user = pwd.getpwnam(instructor) if instructor else pwd.getpwuid(os.getuid())
    course, exchange = Path(course).absolute(), Path(exchange).absolute()
    home = Path(home or user.pw_dir)
    result = Plan()
    if user.pw_uid != os.getuid():
        result.owner = (user.pw_uid, user.pw_gid)
    result.folders[course] = 0o700
    result.folders[exchange] = 0o1777
    config = course / "nbgrader_config.py"
    existing = config.read_text() if config.is_file() else nbgrader_course.CONFIG.read_text()
    result.files[config] = with_settings(existing, nbgrader_settings(course_id, exchange))
    result.files[course / "jupyterhub_config.py"] = hub_config(prefix, user.pw_name)
    result.files.update(instructor_files(home, course, course_id, exchange))
    result.owned = [course, *result.files, home / ".jupyter"]
    shared = environment_files(prefix, course_id, exchange)
    if _can_write(prefix / "etc"):
        result.files.update(shared)
    else:
        again = f"{prefix / 'bin' / 'python'} -m autograder hub-setup {course} --course-id {course_id}"
        result.left.append(
            f"the environment's settings for every user ({prefix / 'etc' / 'jupyter'}) need its owner: "
            f"sudo {again} --exchange {exchange} --instructor {user.pw_name}"
        )
    return result


def apply(steps: Plan) -> list[Path]:
    """Write what :func:`plan` decided; returns the files written. Raises :class:`HubSetupError`
    when the exchange cannot be made (it needs a folder this user may create, or the hub's admin)."""
    for folder, mode in steps.folders.items():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(mode)
        except PermissionError:
            current = stat.S_IMODE(folder.stat().st_mode) if folder.exists() else None
            if current == mode:
                continue
            raise HubSetupError(
                f"cannot make {folder} with mode {mode:o}: ask the hub's admin to run "
                f"sudo install -d -m {mode:o} {folder}"
            ) from None
    written = []
    for path, text in steps.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    if steps.owner is not None:
        for path in steps.owned:
            if path.exists():
                os.chown(path, *steps.owner)
    return written


def _can_write(folder: Path) -> bool:
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    return os.access(existing, os.W_OK | os.X_OK)


def _json(settings: dict, existing: Path | None = None) -> str:
    """``settings`` as a JSON config file, merged over what ``existing`` already holds."""
    merged = json.loads(existing.read_text()) if existing is not None and existing.is_file() else {}
    _merge(merged, settings)
    return json.dumps(merged, indent=2) + "\n"


def _merge(into: dict, settings: dict) -> None:
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


if __name__ == "__main__":  # `python -m autograder.hub`: the set-up's check of a shared environment
    problem = interpreter_problem(Path(sys.prefix) / "bin" / "python")
    print(problem or f"every user can run {Path(sys.prefix) / 'bin' / 'python'}")
    sys.exit(1 if problem else 0)
