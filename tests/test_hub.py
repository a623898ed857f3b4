"""A class on JupyterHub on two environments: ``python -m autograder hub-setup``'s settings and modes,
the shared model cache, and a class through nbgrader's real exchange with the learners' environment.

The class runs where the tests run as root, with Unix learners, as the README's recipe sets it up: the
learners' environment is the learners' copy (``conftest.learners_copy_folder``, built once a test
run) put in place as ``tools/setup_course.py hub-learners`` puts it, in a virtual environment that
borrows this one's other packages (``conftest.borrowing_environment``: only the copy is installed);
the instructor's copy is a stand-in in the instructor's home (made mode 0755, as ``useradd -m``
makes homes on Debian) holding what only it may hold: ``solutions/``, the checks with the hidden ones,
the planted mistakes, ``tests/`` and, where this checkout has one, ``.git``. The instructor's
commands run this environment (the instructor's).

Two learners fetch chapter 5 from nbgrader's exchange, validate it and submit it (one the solution,
one a blank copy), then fetch their feedback; the instructor releases, collects, grades in the
sandbox and releases the feedback. As a learner, a kernel of the learners' environment shows every
graded name of every chapter, and the learner's own ``find`` lists what they can read. The learners
run the learners' environment's interpreter, which may lie in root's home: they get one capability
for that (reading and searching any folder, ``CAP_DAC_READ_SEARCH``), and none for the checks of
what they can read, which run plain ``find`` and ``cat`` under their ids. nbgrader names a learner
by the system's user database, so the two are system users of this run alone (``hub-alice-PID``,
``hub-bob-PID``: a home in the run's folder, no login shell), removed after.
"""

from __future__ import annotations

import ast
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from autograder import hub, learners_copy, nbgrader_course, notebook
from autograder.chapters import CHAPTERS
from course import paths, pretrained

from conftest import borrowing_environment, load_tool

pytest.importorskip("nbgrader")

CHAPTER = "05_flash_attention"
COURSE_ID = "llm-efficiency"
LEARNERS = ("alice", "bob")
BIN = Path(sys.executable).parent
PROBE = Path(__file__).with_name("_hub_probe.py")
# what only the instructor's copy holds, by the name the closing counts use: its files (any name, the
# same bytes), beside any module with hidden checks and anything of .git (_answers_among)
INSTRUCTORS_ONLY = {
    "solutions": ("solutions",),  # the chapters' sources and the quizzes' keys
    "hidden checks": ("autograder/hidden",),
    "known mistakes": ("autograder/mistakes",),
    "course's answers": ("course/answers", "course/kernels/flash_attention.py"),
    "tests": ("tests",),
}


def _stand_in(prefix: Path, course: Path | None = None) -> Path:
    """A stand-in environment at ``prefix``: a single-user command, and a ``python`` every user can
    run that says its course lies in ``course`` (what ``hub-setup`` asks a learners' environment)."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text(f"#!/bin/sh\necho {course or prefix}\n")
    (prefix / "bin" / "jupyterhub-singleuser").write_text("#!/bin/sh\n")
    for name in ("python", "jupyterhub-singleuser"):
        (prefix / "bin" / name).chmod(0o755)
    return prefix


def _two_environments(root: Path) -> tuple[Path, Path, Path]:
    """Stand-ins of the learners' environment (its course a learners' copy), the instructor's, and the
    instructor's copy."""
    copy = root / "learners-copy"
    (copy / "notebooks").mkdir(parents=True)
    instructors_copy = root / "instructors-copy"
    instructors_copy.mkdir()
    return _stand_in(root / "learners-env", copy), _stand_in(root / "instructor-env"), instructors_copy


def _resolved(home: Path, environment: dict) -> dict:
    """What a server started by the user with ``home`` and ``environment`` resolves from the
    settings: nbgrader's server extensions, the terminals' shell, the JupyterLab plugins turned off,
    nbgrader's course and how its validate button runs notebooks."""
    code = (
        "import json\nfrom jupyter_server.serverapp import ServerApp\n"
        "from jupyterlab_server.config import get_page_config\nfrom nbgrader.apps import NbGraderApp\n"
        "app = ServerApp.instance()\n"
        "app.initialize(argv=['--no-browser', '--port=0'], find_extensions=True, new_httpserver=False)\n"
        "ServerApp.clear_instance()\ngrader = NbGraderApp.instance()\ngrader.initialize([])\n"
        "print(json.dumps({'extensions': {k.split('.')[-1]: v for k, v in app.jpserver_extensions.items()"
        " if k.startswith('nbgrader')}, 'shell': app.terminado_settings.get('shell_command'),"
        " 'lab_off': get_page_config([])['disabledExtensions'],"
        " 'course_id': grader.config.CourseDirectory.course_id, 'exchange': grader.config.Exchange.root,"
        " 'root': grader.config.CourseDirectory.get('root'), 'kernel': grader.config.Execute.get('kernel_name'),"
        " 'timeout': grader.config.Execute.get('timeout')}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env |= {"HOME": str(home), **environment}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=home, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _hub_config(hub_dir: Path):
    """The hub's configuration hub-setup wrote, read as JupyterHub reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("jupyterhub_config.py", path=str(hub_dir)).load_config()


def _spawns(hub_config, name: str, chmod=None):
    """What the hub does before it starts ``name``'s server (its pre-spawn hook), on a spawner
    configured as the hub configures one; returns the spawner. ``chmod`` stands in for ``os.chmod``
    (the hook makes the user's real home private)."""

    class User:
        pass

    class Spawner:
        user = User()
        cmd = list(hub_config.Spawner.cmd)
        environment = dict(hub_config.Spawner.environment)

    Spawner.user.name = name
    spawner = Spawner()
    if chmod is None:
        hub_config.Spawner.pre_spawn_hook(spawner)
    else:
        real, os.chmod = os.chmod, chmod
        try:
            hub_config.Spawner.pre_spawn_hook(spawner)
        finally:
            os.chmod = real
    return spawner


def test_hub_setup_starts_learners_in_the_learners_environment_and_the_instructor_in_theirs(open_tmp):
    learners, prefix, instructors_copy = _two_environments(open_tmp)
    course, exchange, home, hub_dir = (open_tmp / name for name in ("course", "exchange", "teach", "hub"))
    learner = open_tmp / "al"
    learner.mkdir()
    group = grp.getgrgid(os.getgid()).gr_name  # a group that exists: nothing to make
    where = {"prefix": prefix, "home": home, "hub_dir": hub_dir, "instructors_copy": instructors_copy}
    where["learners_group"] = group
    steps = hub.plan(course, COURSE_ID, exchange, learners, **where)
    assert steps.left == [] and steps.groups == []
    hub.apply(steps)
    for folder, mode in ((course, 0o700), (exchange, 0o1777), (hub_dir, 0o700), (instructors_copy, 0o700)):
        assert stat.S_IMODE(folder.stat().st_mode) == mode, folder

    hub_config = _hub_config(hub_dir)
    assert hub_config.Spawner.cmd == [str(learners / "bin" / "jupyterhub-singleuser")]
    assert hub_config.Spawner.environment["PATH"].startswith(f"{learners / 'bin'}:")
    assert hub_config.JupyterHub.db_url == f"sqlite:///{hub_dir / 'jupyterhub.sqlite'}"
    assert Path(hub_config.JupyterHub.cookie_secret_file).parent == hub_dir
    user = pwd.getpwuid(os.getuid()).pw_name  # the instructor: whoever runs hub-setup
    # the hub admits the instructor by name and the learners by their Unix group
    assert hub_config.Authenticator.allowed_users == {user} == hub_config.Authenticator.admin_users
    assert hub_config.LocalAuthenticator.allowed_groups == {group}
    made_private = []
    theirs = _spawns(hub_config, "nobody", chmod=lambda *args: made_private.append(args))
    mine = _spawns(hub_config, user, chmod=lambda *args: made_private.append(args))
    assert theirs.cmd == hub_config.Spawner.cmd and theirs.environment == hub_config.Spawner.environment
    assert mine.cmd == [str(prefix / "bin" / "jupyterhub-singleuser")]
    assert mine.environment["PATH"].startswith(f"{prefix / 'bin'}:")
    assert [mode for _, mode in made_private] == [0o700, 0o700]

    # a learner's server reads the learners' environment's settings; the instructor's server runs in
    # this environment (the instructor's, where `make` turned nbgrader's extensions off)
    seen_by = {
        "learner": _resolved(learner, {"JUPYTER_CONFIG_PATH": str(learners / "etc" / "jupyter")}),
        "instructor": _resolved(home, {k: v for k, v in mine.environment.items() if k != "PATH"}),
    }
    on = {"assignment_list": True, "validate_assignment": True}
    assert seen_by["learner"]["extensions"] == {**on, "formgrader": False, "course_list": False}
    assert seen_by["instructor"]["extensions"] == {**on, "formgrader": True, "course_list": True}
    for seen in seen_by.values():
        assert seen["course_id"] == COURSE_ID and seen["exchange"] == str(exchange)
        assert seen["shell"] and "-l" not in seen["shell"]  # a login shell would reset PATH
    assert seen_by["instructor"]["root"] == str(course)
    learners_lab = seen_by["learner"]["lab_off"]
    assert "@jupyter/nbgrader" not in learners_lab  # the Assignments tab and validate button
    assert {f"@jupyter/nbgrader:{p}" for p in hub.LAB_LEARNERS_OFF} <= set(learners_lab)
    assert seen_by["learner"]["kernel"] == "course" and seen_by["learner"]["timeout"] >= 600

    hub.apply(hub.plan(course, COURSE_ID, exchange, learners, **where))  # again: the same settings once
    assert (course / "nbgrader_config.py").read_text().count(hub.MARK) == 1


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="makes a Unix group: needs root")
def test_hub_setup_makes_the_learners_group_that_admits_them(open_tmp):
    """A missing group is made (as root, with groupadd) once, and the hub's configuration admits its
    members; a name no group can have is refused."""
    learners, prefix, instructors_copy = _two_environments(open_tmp)
    group = f"hub-class-{os.getpid()}"
    where = {"prefix": prefix, "home": open_tmp / "teach", "hub_dir": open_tmp / "hub"}

    def setup(name=group):
        where.update(instructors_copy=instructors_copy, learners_group=name)
        return hub.plan(open_tmp / "course", COURSE_ID, open_tmp / "exchange", learners, **where)

    steps = setup()
    assert steps.groups == [group] and steps.left == []
    try:
        hub.apply(steps)
        assert grp.getgrnam(group).gr_name == group
        assert _hub_config(open_tmp / "hub").LocalAuthenticator.allowed_groups == {group}
        assert setup().groups == []  # made once
    finally:
        subprocess.run(["groupdel", group], capture_output=True)
    with pytest.raises(hub.HubSetupError, match="--learners-group"):
        setup("class of 2027")


@pytest.fixture
def open_tmp():
    """A temporary folder every user may pass through (pytest's own lies in a private one)."""
    root = Path(tempfile.mkdtemp(prefix="hub-", dir=tempfile.gettempdir()))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_hub_setup_refuses_what_no_run_can_fix(open_tmp):
    learners, prefix, instructors_copy = _two_environments(open_tmp)
    where = {"prefix": prefix, "home": open_tmp / "h", "hub_dir": open_tmp / "hub"}
    where["instructors_copy"] = instructors_copy

    def setup(course_id=COURSE_ID, learners=learners, **changed):
        return hub.plan(open_tmp / "course", course_id, open_tmp / "exchange", learners, **{**where, **changed})

    with pytest.raises(hub.HubSetupError, match="course-id"):
        setup("my course!")
    with pytest.raises(hub.HubSetupError, match="is the instructor's environment"):
        setup(learners=prefix)
    # a learners' environment whose course is the instructor's copy
    with pytest.raises(hub.HubSetupError, match=r"imports the instructor's copy .*solutions.*make hub-learners-env"):
        setup(learners=_stand_in(open_tmp / "cloned", paths.ROOT))
    (prefix / "bin" / "jupyterhub-singleuser").unlink()
    with pytest.raises(hub.HubSetupError, match="make hub-env"):
        setup()
    (learners / "bin" / "jupyterhub-singleuser").unlink()
    with pytest.raises(hub.HubSetupError, match="make hub-learners-env"):
        setup()
    # an interpreter other users cannot run
    private = open_tmp / "private"
    (private / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("sh"), private / "bin" / "python3.11")
    private.chmod(0o700)
    (learners / "bin" / "python").unlink()
    (learners / "bin" / "python").symlink_to(private / "bin" / "python3.11")
    with pytest.raises(hub.HubSetupError, match=r"lies in .*private \(mode 700\).*PYTHON="):
        setup()


def test_the_converted_model_is_read_from_the_environment_before_the_users_cache(tmp_path, monkeypatch):
    """The set-up converts into the environment (every user of a shared one reads it); a user's
    own conversion is used only where the environment has none."""
    monkeypatch.delenv("COURSE_CACHE", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shared, own = pretrained.cache_roots()
    assert shared == tmp_path / "env" / "share" / "llm-efficiency-course"
    key = pretrained.cache_folder().name
    assert pretrained.cache_folder() == shared / key  # nothing converted yet: where the set-up writes
    (own / key).mkdir(parents=True)
    (own / key / "SOURCE").write_text("x")
    assert pretrained.cache_folder() == own / key
    (shared / key).mkdir(parents=True)
    (shared / key / "SOURCE").write_text("x")
    assert pretrained.cache_folder() == shared / key


# --- a class through nbgrader's exchange, as separate Unix users, on the two environments ----------


def _make_learners(root: Path, request) -> dict[str, int]:
    """Two Unix users of this run, with homes in ``root`` made as ``useradd -m`` makes them on
    Debian (mode 0755), removed when the tests that use them are done; their user ids by name."""
    ids = {}
    for learner in LEARNERS:
        name, home = f"hub-{learner}-{os.getpid()}", root / learner
        command = ["useradd", "--system", "--home-dir", str(home), "--no-create-home", "--shell", "/usr/sbin/nologin"]
        made = subprocess.run([*command, name], capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        request.addfinalizer(lambda name=name: subprocess.run(["userdel", name], capture_output=True))
        ids[name] = pwd.getpwnam(name).pw_uid
        home.mkdir()
        home.chmod(0o755)
        os.chown(home, ids[name], ids[name])
    return ids


def _as(uid: int | None, command: list[str], cwd: Path, env: dict, reach: bool = True):
    """``command`` as the user ``uid`` (None: as this process), with the capability to reach the
    interpreter when ``reach``."""
    if uid is not None:
        caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] if reach else []
        command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *caps, *command]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _instructors_copy(folder: Path) -> Path:
    """A stand-in of the instructor's copy at ``folder``: what only it holds (``solutions/``, the
    course and the grader with the hidden checks, the known mistakes and the course's answers,
    ``tests/``, and this checkout's git history where it has one), as a clone leaves the modes
    (folders 0755, files 0644)."""
    folder.mkdir(parents=True)
    for name in ("solutions", "course", "autograder", "tests"):
        shutil.copytree(paths.ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    clone = ["git", "clone", "--quiet", "--bare", "--local", str(paths.ROOT), str(folder / ".git")]
    subprocess.run(clone, capture_output=True)  # a checkout without history has none to leak
    return folder


def _readable(uid: int, root: Path) -> list[Path]:
    """Every file under ``root`` that the user ``uid`` can read, as their own ``find`` lists them."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    found = _as(uid, ["find", str(root), "-type", "f", "-readable", "-print0"], root, env, reach=False)
    return [Path(p) for p in found.stdout.split("\0") if p]


def _hidden_checks(source: str) -> int:
    """How many ``Check("name", ...)`` calls in ``source`` lack ``visible=True``: the hidden checks a
    module writes out (a check made from data, such as a quiz's question, whose key is elsewhere, is
    not one)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 0
    return sum(
        isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Check"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and not any(k.arg == "visible" and getattr(k.value, "value", None) is True for k in node.keywords)
        for node in ast.walk(tree)
    )


def _answers_among(files: list[Path]) -> dict[str, list[str]]:
    """Which of ``files`` hold what only the instructor's copy may: a file of :data:`INSTRUCTORS_ONLY`
    (the same bytes under any name), a module with hidden checks, or anything of a ``.git`` folder."""
    digests = {}
    for kind, names in INSTRUCTORS_ONLY.items():
        for name in names:
            top = paths.ROOT / name
            for path in [top] if top.is_file() else top.rglob("*"):
                if path.is_file() and path.stat().st_size and "__pycache__" not in path.parts:
                    digests.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), kind)
    found: dict[str, list[str]] = {kind: [] for kind in [*INSTRUCTORS_ONLY, ".git"]}
    for path in files:
        if ".git" in path.parts:
            found[".git"].append(str(path))
            continue
        if path.stat().st_size > 2**22:  # data: models, recordings
            continue
        data = path.read_bytes()
        kind = digests.get(hashlib.sha256(data).hexdigest())
        if kind:
            found[kind].append(str(path))
        elif path.suffix == ".py" and _hidden_checks(data.decode("utf-8", "replace")):
            found["hidden checks"].append(str(path))
    return found


def _probe_in_kernel(uid: int, python: Path, home: Path, env: dict, names: list[str]) -> dict:
    """:func:`_hub_probe.probe` run in a kernel of the learners' environment (``course``), as the user ``uid``."""
    import nbformat

    source = PROBE.read_text().split('\nif __name__ == "__main__":')[0]
    cell = f"{source}\nprint(json.dumps(probe({names!r})))\n"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), home / "probe.ipynb")
    os.chown(home / "probe.ipynb", uid, uid)
    execute = ["--to", "notebook", "--execute", "--ExecutePreprocessor.kernel_name=course", "--output", "probed"]
    done = _as(uid, [str(python), "-m", "nbconvert", *execute, "probe.ipynb"], home, env)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = nbformat.read(home / "probed.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in ran.cells[0].outputs if o.get("name") == "stdout")
    return json.loads(printed.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hub_class(request, learners_copy_folder):
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("needs root, setpriv and useradd: the learners are other Unix users")
    root = Path(tempfile.mkdtemp(prefix="hub-class-", dir="/tmp"))
    root.chmod(0o755)  # as on a hub: learners can reach the exchange and the learners' environment
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    learners = _make_learners(root, request)
    alice, bob = learners

    # the learners' environment, as `make hub-learners-env` installs it
    setup = load_tool("setup_course")
    installed = root / "opt" / "llm-efficiency-course"
    setup.place(learners_copy_folder, installed)
    python = borrowing_environment(installed / ".venv", installed)
    kernel = [python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "course"]
    subprocess.run(kernel, check=True, capture_output=True)
    singleuser = python.parent / "jupyterhub-singleuser"  # the hub's command: no hub runs here
    singleuser.write_text("#!/bin/sh\n")
    singleuser.chmod(0o755)
    setup.readable_by_all(installed)

    # the instructor's copy, cloned into a home as Debian makes it; what a learner reads of it before
    home = root / "instructor"
    home.mkdir(mode=0o755)
    instructors_copy = _instructors_copy(home / "llm-efficiency-course")
    before = _answers_among(_readable(learners[alice], root))

    course, exchange, hub_dir = root / "course", root / "exchange", root / "hub"
    with pytest.MonkeyPatch.context() as patch:
        # the learners' interpreter may lie in root's home: they get a capability to run it (_as)
        patch.setattr(hub, "interpreter_problem", lambda python: "")
        steps = hub.plan(
            course,
            COURSE_ID,
            exchange,
            installed / ".venv",
            prefix=_stand_in(root / "instructor-env"),  # the instructor's commands run this environment
            home=home,
            hub_dir=hub_dir,
            instructors_copy=instructors_copy,
        )
    assert steps.left == []
    hub.apply(steps)
    (hub_dir / "jupyterhub.sqlite").write_bytes(b"SQLite format 3\0")  # as the hub makes it: mode 0644
    hub_config = _hub_config(hub_dir)
    nbgrader_course.write_source(course, "ps1", [CHAPTER])
    teacher = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
    }
    log: list[str] = []

    def instructor_runs(*argv: str) -> None:
        done = _as(None, list(argv), course, teacher)
        log.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stderr[-3000:]

    threads = {k: v for k, v in os.environ.items() if k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}

    def learners_env(name: str) -> dict:
        home = Path(pwd.getpwnam(name).pw_dir)
        spawner = _spawns(hub_config, name)  # the learner's home made private; their server's PATH
        return {**spawner.environment, **threads, "HOME": str(home), "USER": name, "LOGNAME": name}

    def learner_runs(name: str, *argv: str) -> subprocess.CompletedProcess:
        env = learners_env(name)
        done = _as(learners[name], [str(python), "-m", "nbgrader", *argv], Path(env["HOME"]), env)
        log.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    nbgrader = str(BIN / "nbgrader")
    instructor_runs(nbgrader, "generate_assignment", "ps1", "--force")
    instructor_runs(nbgrader, "release_assignment", "ps1")
    source = json.loads((course / "source" / "ps1" / f"{CHAPTER}.ipynb").read_text())
    solution = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in source["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution")
    }
    homes, fetched_digests, validated = {}, {}, {}
    for name in learners:
        learner_runs(name, "fetch_assignment", "ps1")
        homes[name] = Path(pwd.getpwnam(name).pw_dir)
        fetched = homes[name] / "ps1" / f"{CHAPTER}.ipynb"
        copy = json.loads(fetched.read_text())
        fetched_digests[name] = notebook.release_digest(copy)
        if name == alice:
            for cell in copy["cells"]:
                grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
                if grade_id in solution and cell["metadata"]["nbgrader"].get("solution"):
                    cell["source"] = solution[grade_id]
        fetched.write_text(json.dumps(copy))
        validated[name] = learner_runs(name, "validate", f"ps1/{CHAPTER}.ipynb").stdout
        learner_runs(name, "submit", "ps1")
    instructor_runs(nbgrader, "collect", "ps1")
    instructor_runs(sys.executable, "-m", "autograder", "nbgrader", str(course), "ps1", "--seed", "2026")
    instructor_runs(nbgrader, "generate_feedback", "ps1")
    instructor_runs(nbgrader, "release_feedback", "ps1")
    feedback = {}
    for name in learners:
        learner_runs(name, "fetch_feedback", "ps1")
        (page,) = (homes[name] / "ps1" / "feedback").glob(f"*/{CHAPTER}.html")
        feedback[name] = page.read_text()
    names = sorted(learners_copy.graded_names())
    yield {
        "alice": alice,
        "bob": bob,
        "learners": learners,
        "root": root,
        "course": course,
        "exchange": exchange,
        "hub_dir": hub_dir,
        "installed": installed,
        "instructors_copy": instructors_copy,
        "homes": homes,
        "feedback": feedback,
        "validated": validated,
        "fetched_digests": fetched_digests,
        "before": before,
        "after": _answers_among(_readable(learners[alice], root)),
        "probed": _probe_in_kernel(learners[alice], python, homes[alice], learners_env(alice), names),
        "names": names,
        "log": log,
    }


def _scores(course: Path) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {s.student.id: s.score for s in gradebook.assignment_submissions("ps1")}


def test_the_class_goes_through_the_exchange_and_grades_as_earned(hub_class):
    exercises = CHAPTERS[CHAPTER]
    full = sum(c.points for e in exercises for c in e.checks)
    assert _scores(hub_class["course"]) == {hub_class["alice"]: full, hub_class["bob"]: 0}
    printed = "\n".join(hub_class["log"])
    assert "Attribute 'checksum'" not in printed  # nbgrader's false alarm for cells with hidden tests
    assert "SAWarning" not in printed and "not in session" not in printed
    assert "not recognized" not in printed  # a config option the feedback's step would not take
    # what learners fetched is the release of the learners' copy installed for them
    installed = json.loads((hub_class["installed"] / "notebooks" / f"{CHAPTER}.ipynb").read_text())
    assert set(hub_class["fetched_digests"].values()) == {installed["metadata"]["course"]["release"]}


def test_released_feedback_holds_no_hidden_test_and_needs_no_internet(hub_class):
    hidden = [c.what for e in CHAPTERS[CHAPTER] for c in e.checks if not c.visible]
    visible = [c.what for e in CHAPTERS[CHAPTER] for c in e.checks if c.visible]
    assert hidden and visible
    for name, page in hub_class["feedback"].items():
        assert "HIDDEN TESTS" not in page and "hidden=True" not in page, name
        assert not [what for what in hidden if what in page], name
        assert "hidden checks: " in page, name
        assert not re.search(r"<(script|link)[^>]+(src|href)=\"https?://", page), name  # nothing fetched
        assert "MathJax.Hub" not in page, name
    assert all(what in hub_class["feedback"][hub_class["alice"]] for what in visible)
    blank = hub_class["feedback"][hub_class["bob"]]
    assert blank.count("<li>") >= 2  # the comment's hints, one list item each, not a run-on paragraph


def test_learners_validate_from_the_learners_copy_alone(hub_class):
    """The validate button's command, in the learners' environment: its check cells pass the
    solution's answers and fail the blank copy's, from the copy's recordings."""
    assert "Success! Your notebook passes all the tests." in hub_class["validated"][hub_class["alice"]]
    assert "VALIDATION FAILED" in hub_class["validated"][hub_class["bob"]]


def test_a_learners_kernel_shows_no_reference_and_answers_only_from_the_recordings(hub_class, tmp_path):
    """In a kernel of the learners' environment, as a learner: every function or class named as an
    exercise's answer is its docstring and a raise, and calling it returns a recorded result for a
    recorded call and raises otherwise. The same probe in the instructor's environment prints the
    references, each of which the learners' kernel also has."""
    (tmp_path / "names.json").write_text(json.dumps(hub_class["names"]))
    ran = subprocess.run([sys.executable, str(PROBE), str(tmp_path / "names.json")], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    instructors = json.loads(ran.stdout.strip().splitlines()[-1])
    references = {name for name, seen in instructors["found"].items() if not _stub(seen["source"])}
    assert references and instructors["learners_copy"] is False

    learners = hub_class["probed"]
    assert learners["learners_copy"] is True and Path(learners["root"]) == hub_class["installed"]
    assert learners["failed"] == {}, learners["failed"]
    for name in references - learners["found"].keys():  # only where the copy has no such module
        module = name.rpartition(".")[0].split(".")
        assert not hub_class["installed"].joinpath(*module).with_suffix(".py").exists(), name
    printable = sorted(name for name, seen in learners["found"].items() if not _stub(seen["source"]))
    assert printable == []
    for name, seen in learners["found"].items():
        calls = seen["calls"]
        if "recorded" in calls:
            assert calls == {"recorded": "answered", "altered": "raised NotRecorded"}, name
        else:
            assert calls["unrecorded"] in ("raised NotRecorded", "raised NotImplementedError"), name
    # every name the recordings answer across the line: the recorded call answered, an altered one refused
    assert len(learners["replayed"]) > 50, sorted(learners["replayed"])
    for name, calls in learners["replayed"].items():
        assert calls["recorded"] == "answered", name
        assert calls["altered"] in ("raised NotRecorded", "no inputs to alter"), name
    refused = [name for name, calls in learners["replayed"].items() if calls["altered"] == "raised NotRecorded"]
    assert len(refused) > 0.8 * len(learners["replayed"]), sorted(set(learners["replayed"]) - set(refused))


def _stub(source: str | None) -> bool:
    """Whether ``source`` (a function or class as ``inspect.getsource`` prints it) is only its
    docstring and a raise (a class: each of its methods)."""
    if source is None:
        return True
    (node,) = ast.parse(textwrap.dedent(source)).body
    body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if isinstance(node, ast.ClassDef):
        return all(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _stub(ast.unparse(n)) for n in body)
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def test_nothing_only_the_instructors_copy_holds_is_readable_where_a_learner_reaches(hub_class):
    """As a learner, with their own ``find``, over the whole class (the learners' environment, the
    instructor's home and copy, the course, the exchange, the other learner's home, the hub's
    folder): before ``hub-setup``, the instructor's copy was readable (as a clone in a Debian home
    is); after, no file of :data:`INSTRUCTORS_ONLY` (the solutions and quiz keys, the hidden checks,
    the known mistakes, the course's answers, the tests), no module with hidden checks and nothing
    of ``.git``."""
    before, after = hub_class["before"], hub_class["after"]
    assert all(before[kind] for kind in INSTRUCTORS_ONLY), before
    assert after == {kind: [] for kind in before}, after


def test_learners_cannot_read_the_course_the_hub_or_each_others_work(hub_class):
    course, exchange = hub_class["course"], hub_class["exchange"]
    bob = hub_class["homes"][hub_class["bob"]]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(hub_class["homes"][hub_class["alice"]])}
    alice = hub_class["learners"][hub_class["alice"]]
    for target in (
        course / "source" / "ps1" / f"{CHAPTER}.ipynb",
        course / "gradebook.db",
        course / "submitted" / hub_class["bob"] / "ps1" / f"{CHAPTER}.ipynb",
        course / "autograded" / hub_class["bob"] / "ps1" / f"{CHAPTER}.ipynb",
        bob / "ps1" / f"{CHAPTER}.ipynb",  # the notebook bob fetched and submitted, in his home
        next((bob / "ps1" / "feedback").glob(f"*/{CHAPTER}.html")),  # and his feedback
        hub_class["hub_dir"] / "jupyterhub.sqlite",  # the hub's database
        hub_class["instructors_copy"] / "solutions" / f"{CHAPTER}.py",
    ):
        done = _as(alice, ["cat", str(target)], hub_class["root"], env, reach=False)
        assert done.returncode != 0 and "Permission denied" in done.stderr, target
    inbound = exchange / COURSE_ID / "inbound"
    listing = _as(alice, ["ls", str(inbound)], hub_class["root"], env, reach=False)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    released = _as(alice, ["ls", str(exchange / COURSE_ID / "outbound" / "ps1")], hub_class["root"], env, reach=False)
    assert released.returncode == 0 and CHAPTER in released.stdout  # what learners should reach, they reach
    notebooks = _as(alice, ["ls", str(hub_class["installed"] / "notebooks")], hub_class["root"], env, reach=False)
    assert notebooks.returncode == 0 and CHAPTER in notebooks.stdout  # and the learners' copy
