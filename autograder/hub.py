"""A class on JupyterHub with nbgrader, on two environments: the settings and file modes, in one command.

A hub for the course has two environments. The **learners' environment** (``make
hub-learners-env``: the learners' copy installed with its ``.venv``, readable by every user) is where
every learner's server, terminal and ``course`` kernel run: it holds no answer. The **instructor's
environment** is this repository's (``make hub-env``), kept where learners cannot read: the
instructor's server runs in it, with formgrader, nbgrader's commands and the grader with its sandbox.

``python -m autograder hub-setup COURSE --course-id ID --exchange DIR --learners-env PREFIX``, run as
root with the instructor's environment's Python, writes:

* for learners, in the learners' environment (``PREFIX/etc/jupyter``): nbgrader's ``course_id`` and
  exchange, and the kernel and per-cell time its validate button runs notebooks with; the
  Assignments tab and its validate button on (server and JupyterLab), formgrader, the course list
  and the assignment creator off; terminals that keep the environment's ``PATH`` (a login shell
  resets it, and learners would not find ``nbgrader``);
* for the instructor, in their ``~/.jupyter``: nbgrader's server extensions on, formgrader among them
  (opened at ``/user/NAME/formgrader``), nbgrader's ``CourseDirectory.root`` (without it formgrader
  shows empty tables and creates an empty ``gradebook.db``, silently), the same terminals;
* this repository (the instructor's copy, with its environment inside), mode 0700;
* the course directory, mode 0700 (``source/``, ``gradebook.db``, ``submitted/``, ``autograded/``
  and ``feedback/`` are the instructor's alone), with the course's ``nbgrader_config.py``;
* the exchange, mode 1777 (nbgrader's own modes inside it keep learners from reading each other's
  submissions);
* the hub's folder (``--hub-dir``, ``/srv/jupyterhub``), mode 0700: its ``jupyterhub_config.py``, where
  the hub keeps its database and cookie secret (JupyterHub writes them world-readable into the folder
  it starts in otherwise); learners' servers start in the learners' environment, the instructor's in
  the instructor's, and every home is made private before its server starts.
* the learners' Unix group (``--learners-group``, the course id by default), made when missing: the
  hub admits the instructor and the group's members, so that enrolling a learner is making their
  account in that group (``useradd -m -G GROUP NAME``), with no edit to the hub's configuration.

Run by the instructor rather than root, it writes the instructor's part and names the command root
must run for the rest. Not handled: a course directory shared by several instructors (nbgrader's
``groupshared``; the instructors' copy can be given a group and mode 0750 by hand), hubs whose
servers run in containers (there the learners' image needs the learners' environment's files),
and exchanges on a network file system without sticky bits.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autograder import nbgrader_course
from autograder.headless import CELL_TIMEOUT
from course import paths

LEARNERS_ON = ("assignment_list", "validate_assignment")  # nbgrader's server extensions learners use
INSTRUCTOR_ONLY = ("formgrader", "course_list")
LAB_PACKAGE = "@jupyter/nbgrader"
# the package's plugins for instructors, off for learners; formgrader's panel stays blank under a hub
# anyway (the hub forbids frames), so the instructor opens /user/NAME/formgrader
LAB_LEARNERS_OFF = ("formgrader", "create-assignment", "course-list")
HUB_DIR = Path("/srv/jupyterhub")
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
    groups: list[str] = field(default_factory=list)  # Unix groups to create (groupadd), as root
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
                "can run, e.g. make hub-learners-env PYTHON=/usr/bin/python3.11"
            )
    if not real.stat().st_mode & stat.S_IXOTH:
        return f"other users cannot run this environment's Python: {real} is not executable by them"
    return ""


def course_folder(prefix: Path) -> Path:
    """The folder of the course that the environment at ``prefix`` imports (its editable install),
    from no folder's copy: isolated, as a learner's kernel started in their home."""
    code = "from course import paths; print(paths.ROOT)"
    python = [prefix / "bin" / "python", "-I", "-c", code]
    found = subprocess.run(python, cwd=prefix, capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        raise HubSetupError(
            f"{prefix} has no course installed ({found.stderr.strip().splitlines()[-1:] or 'no output'}): "
            "make the learners' environment with make hub-learners-env"
        )
    return Path(found.stdout.strip().splitlines()[-1])


def instructors_only() -> tuple[str, ...]:
    """What only the instructor's copy holds, relative to its folder: ``solutions/``, ``tests/``,
    ``.git`` and what the learners' copy leaves out of the folders it copies (its ``LEFT_OUT``)."""
    from autograder.learners_copy import LEFT_OUT  # the instructor's copy's module, imported only here

    return ("solutions", "tests", ".git", *(entry.rstrip("/") for entry in LEFT_OUT))


def learners_copy_problem(folder: Path) -> str:
    """Why the course in ``folder`` must not be the learners' ("" when it may): it holds what only
    the instructor's copy holds (:func:`instructors_only`)."""
    found = [name for name in instructors_only() if (folder / name).exists()]
    if not found:
        return ""
    return (
        f"the learners' environment imports the instructor's copy ({folder} holds {', '.join(found)}): "
        "make it from the learners' copy with make hub-learners-env"
    )


def nbgrader_settings(course_id: str, exchange: Path, course: Path | None = None) -> str:
    """The lines of an ``nbgrader_config.py`` that name the course (and, for the instructor, its folder)."""
    lines = [MARK, f"c.CourseDirectory.course_id = {course_id!r}", f"c.Exchange.root = {str(exchange)!r}"]
    if course is not None:
        lines.append(f"c.CourseDirectory.root = {str(course)!r}")
    return "\n".join(lines) + "\n"


def validation_settings() -> str:
    """How learners' validate button runs a notebook: in the course's kernel (a system-wide
    ``python3`` kernel would lack the course), each cell within the headless runs' limit (nbgrader's
    30 s interrupts chapter 3's model sweep)."""
    return f'c.Execute.kernel_name = "course"\nc.Execute.timeout = {CELL_TIMEOUT}\n'


def with_settings(existing: str, settings: str) -> str:
    """``existing`` config text with the hub's settings at its end, replacing what an earlier run wrote."""
    kept = existing.split(MARK)[0].rstrip()
    return (kept + "\n\n" if kept else "") + settings


def _terminals(existing: Path) -> str:
    """A server config that starts terminals as interactive shells, not login ones: /etc/profile
    would put the system's PATH first, and ``nbgrader`` would not be found."""
    shell = shutil.which("bash") or "/bin/sh"
    return _json({"ServerApp": {"terminado_settings": {"shell_command": [shell, "-i"]}}}, existing=existing)


def learners_files(prefix: Path, course_id: str, exchange: Path) -> dict[Path, str]:
    """What every learner's server reads, in the learners' environment at ``prefix`` (root writes these)."""
    etc = prefix / "etc" / "jupyter"
    files = {
        etc / "nbgrader_config.py": "c = get_config()  # noqa: F821\n\n"
        + nbgrader_settings(course_id, exchange)
        + validation_settings(),
        etc / "jupyter_server_config.json": _terminals(etc / "jupyter_server_config.json"),
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
    """What only the instructor's servers read: nbgrader's server extensions on, formgrader among
    them (this file's list outranks the environment's, where ``make`` turned them off for the
    course's JupyterLab), the terminals, and where the course lives."""
    jupyter = home / ".jupyter"
    config = jupyter / "nbgrader_config.py"
    existing = config.read_text() if config.is_file() else "c = get_config()  # noqa: F821\n"
    server = jupyter / "jupyter_server_config.json"
    extensions = {f"nbgrader.server_extensions.{name}": True for name in (*LEARNERS_ON, *INSTRUCTOR_ONLY)}
    return {
        config: with_settings(existing, nbgrader_settings(course_id, exchange, course)),
        server: _json({"ServerApp": {"jpserver_extensions": extensions}}, existing=server, text=_terminals(server)),
    }


HUB_CONFIG = """\
# JupyterHub for the course, as `python -m autograder hub-setup` wrote it. Start the hub, as root, with
#   cd {hub_dir} && {learners_bin}/jupyterhub -f {hub_dir}/jupyterhub_config.py
# with configurable-http-proxy on PATH (npm install -g configurable-http-proxy); or copy the
# course's part below into a hub's existing configuration.
c = get_config()  # noqa: F821 (JupyterHub defines get_config when it reads this file)

# --- the hub's own choices: change them for yours ---
c.JupyterHub.bind_url = "http://127.0.0.1:8000"  # put TLS and a public address in front of it
c.Authenticator.admin_users = {{{instructor!r}}}
c.Authenticator.allowed_users = {{{instructor!r}}}
# learners: every member of this Unix group may log in (JupyterHub 5+ admits a user named above OR a
# member); enrol a learner with `useradd -m -G {group} NAME` (an existing account: usermod -aG {group} NAME)
c.LocalAuthenticator.allowed_groups = {{{group!r}}}
# the hub's database and cookie secret in a folder only root reads: JupyterHub writes both
# world-readable into the folder it starts in otherwise
c.JupyterHub.db_url = {db_url!r}
c.JupyterHub.cookie_secret_file = {cookie_secret!r}

# --- the course's part ---
# Every server starts in the learners' environment (the learners' copy: no answer in it) ...
c.Spawner.cmd = [{learners_singleuser!r}]
c.Spawner.environment = {{"PATH": {learners_path!r}}}  # its nbgrader first, in terminals too
c.Spawner.default_url = "/lab"
c.Spawner.http_timeout = 120  # a first server took 24-32 s on 2 busy cores; the default is 30 s
# ... but an instructor's, which starts in the instructor's environment (the instructor's copy:
# formgrader, nbgrader's commands, the grader)
INSTRUCTORS = {{{instructor!r}: {instructor_bin!r}}}


def course_spawn(spawner):
    \"\"\"Before a user's server starts: their home folder mode 0700 (Debian and Ubuntu make homes
    0755, where learners read each other's fetched notebooks and feedback), and an instructor's
    server in the instructor's environment.\"\"\"
    import os
    import pwd

    os.chmod(pwd.getpwnam(spawner.user.name).pw_dir, 0o700)
    bin_dir = INSTRUCTORS.get(spawner.user.name)
    if bin_dir is not None:
        spawner.cmd = [os.path.join(bin_dir, "jupyterhub-singleuser")]
        path = bin_dir + ":/usr/local/bin:/usr/bin:/bin"
        spawner.environment = {{**spawner.environment, "PATH": path}}


c.Spawner.pre_spawn_hook = course_spawn
"""


def hub_config(learners: Path, instructor_prefix: Path, instructor: str, hub_dir: Path, group: str) -> str:
    """A ``jupyterhub_config.py`` that starts learners' servers in the environment at ``learners``
    and ``instructor``'s in the one at ``instructor_prefix``, keeping its files in ``hub_dir``, and
    admits ``instructor`` and the members of the Unix group ``group``."""
    learners_bin = learners / "bin"
    return HUB_CONFIG.format(
        hub_dir=hub_dir,
        learners_bin=learners_bin,
        instructor=instructor,
        group=group,
        db_url=f"sqlite:///{hub_dir / 'jupyterhub.sqlite'}",
        cookie_secret=str(hub_dir / "jupyterhub_cookie_secret"),
        learners_singleuser=str(learners_bin / "jupyterhub-singleuser"),
        learners_path=f"{learners_bin}:/usr/local/bin:/usr/bin:/bin",
        instructor_bin=str(instructor_prefix / "bin"),
    )


def plan(
    course: Path,
    course_id: str,
    exchange: Path,
    learners: Path,
    instructor: str | None = None,
    prefix: Path | None = None,
    home: Path | None = None,
    hub_dir: Path = HUB_DIR,
    instructors_copy: Path | None = None,
    learners_group: str | None = None,
) -> Plan:
    """Everything :func:`apply` would write, checked first: raises :class:`HubSetupError` for what
    no run can fix (a course id nbgrader refuses, a learners' environment that is not the learners'
    copy or whose interpreter other users cannot run, an environment without
    ``jupyterhub-singleuser``). ``learners`` is the learners' environment, ``prefix`` the
    instructor's (this one by default), ``home`` the instructor's home (theirs by default),
    ``instructors_copy`` the instructor's copy (this repository by default), ``learners_group`` the
    Unix group whose members the hub admits as learners (the course id by default; made when missing)."""
    prefix, learners = Path(prefix or sys.prefix).absolute(), Path(learners).absolute()
    if not course_id or not course_id.replace("-", "").replace("_", "").isalnum():
        raise HubSetupError(f"--course-id {course_id!r}: use letters, digits, '-' and '_' (nbgrader's rule)")
    group = learners_group or course_id
    if not group.replace("-", "").replace("_", "").isalnum() or len(group) > 32:
        raise HubSetupError(f"--learners-group {group!r}: a Unix group name of letters, digits, '-' and '_'")
    if learners == prefix:
        raise HubSetupError(
            f"--learners-env {learners} is the instructor's environment: give the one make hub-learners-env made"
        )
    problem = interpreter_problem(learners / "bin" / "python") or learners_copy_problem(course_folder(learners))
    if problem:
        raise HubSetupError(problem)
    for where, make in ((learners, "make hub-learners-env"), (prefix, "make hub-env")):
        if not (where / "bin" / "jupyterhub-singleuser").exists():
            raise HubSetupError(
                f"{where / 'bin'} has no jupyterhub-singleuser, which a hub starts servers with: "
                f"make the environment with {make} (JUPYTERHUB_SPEC= names the hub's version)"
            )
    user = pwd.getpwnam(instructor) if instructor else pwd.getpwuid(os.getuid())
    course, exchange, hub_dir = Path(course).absolute(), Path(exchange).absolute(), Path(hub_dir).absolute()
    home = Path(home or user.pw_dir)
    instructors_copy = Path(instructors_copy or paths.ROOT).absolute()
    if instructors_copy.stat().st_uid != user.pw_uid:
        raise HubSetupError(
            f"the instructor's copy {instructors_copy} is not {user.pw_name}'s, and only its owner will read it: "
            f"clone the repository as {user.pw_name}, in their home, and run make hub-env and this command from there"
        )
    result = Plan()
    if user.pw_uid != os.getuid():
        result.owner = (user.pw_uid, user.pw_gid)
    result.folders[instructors_copy] = 0o700
    result.folders[course] = 0o700
    result.folders[exchange] = 0o1777
    config = course / "nbgrader_config.py"
    existing = config.read_text() if config.is_file() else nbgrader_course.CONFIG.read_text()
    result.files[config] = with_settings(existing, nbgrader_settings(course_id, exchange))
    result.files.update(instructor_files(home, course, course_id, exchange))
    result.owned = [course, *result.files, home / ".jupyter"]
    roots = {
        learners / "etc": learners_files(learners, course_id, exchange),
        hub_dir: {hub_dir / "jupyterhub_config.py": hub_config(learners, prefix, user.pw_name, hub_dir, group)},
    }
    if all(_can_write(folder) for folder in roots):
        result.folders[hub_dir] = 0o700
        for files in roots.values():
            result.files.update(files)
        if not _group_exists(group):
            if os.geteuid() == 0:
                result.groups.append(group)
            else:
                result.left.append(f"the learners' group {group} does not exist: sudo groupadd {group}")
    else:
        again = (
            f"{prefix / 'bin' / 'python'} -m autograder hub-setup {course} --course-id {course_id} "
            f"--exchange {exchange} --learners-env {learners} --instructor {user.pw_name} --hub-dir {hub_dir}"
            f" --learners-group {group}"
        )
        result.left.append(f"the learners' environment's settings and the hub's folder need root: sudo {again}")
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
    for group in steps.groups:
        done = subprocess.run(["groupadd", group], capture_output=True, text=True)
        if done.returncode:
            raise HubSetupError(f"cannot make the learners' group {group}: groupadd said {done.stderr.strip()}")
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


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _can_write(folder: Path) -> bool:
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    return os.access(existing, os.W_OK | os.X_OK)


def _json(settings: dict, existing: Path | None = None, text: str | None = None) -> str:
    """``settings`` as a JSON config file, merged over ``text`` or what ``existing`` already holds."""
    if text is None and existing is not None and existing.is_file():
        text = existing.read_text()
    merged = json.loads(text) if text else {}
    _merge(merged, settings)
    return json.dumps(merged, indent=2) + "\n"


def _merge(into: dict, settings: dict) -> None:
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


if __name__ == "__main__":  # `python -m autograder.hub [PYTHON]`: the check of a learners' environment's Python
    python = Path(sys.argv[1] if len(sys.argv) > 1 else Path(sys.prefix) / "bin" / "python")
    problem = interpreter_problem(python)
    print(problem or f"every user can run {python}")
    sys.exit(1 if problem else 0)
