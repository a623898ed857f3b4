"""A class on JupyterHub: ``python -m autograder hub-setup``'s settings and modes, the shared model
cache, and a class through nbgrader's real exchange.

The exchange test runs where the tests run as root: two learners with Unix user ids of their own
fetch chapter 5, submit (one the solution, one a blank copy), and fetch their feedback; the
instructor releases, collects, grades in the sandbox and releases the feedback, with the settings
``hub-setup`` wrote. The learners run this environment's interpreter, which may lie in root's
home: they get one capability for that (reading and searching any folder, ``CAP_DAC_READ_SEARCH``),
and none for the checks of what they can read, which run plain ``ls`` and ``cat`` under their ids.
nbgrader names a learner by the system's user database, so the two are system users of this run
alone (``hub-alice-PID``, ``hub-bob-PID``: a home in the run's folder, no login shell), removed after.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder import hub, nbgrader_course
from autograder.chapters import CHAPTERS
from course import pretrained

pytest.importorskip("nbgrader")

CHAPTER = "05_flash_attention"
COURSE_ID = "llm-efficiency"
LEARNERS = ("alice", "bob")
BIN = Path(sys.executable).parent


def _environment(root: Path) -> Path:
    """A stand-in environment prefix: an interpreter every user can run and a single-user command."""
    prefix = root / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(shutil.which("sh"))
    (prefix / "bin" / "jupyterhub-singleuser").write_text("#!/bin/sh\n")
    return prefix


def _resolved(home: Path, prefix: Path) -> dict:
    """What a server started by the user with ``home`` resolves from the settings: nbgrader's server
    extensions, the terminals' shell, the JupyterLab plugins turned off and nbgrader's course."""
    code = (
        "import json\nfrom jupyter_server.serverapp import ServerApp\n"
        "from jupyterlab_server.config import get_page_config\nfrom nbgrader.apps import NbGraderApp\n"
        "app = ServerApp.instance()\n"
        "app.initialize(argv=['--no-browser', '--port=0'], find_extensions=True, new_httpserver=False)\n"
        "ServerApp.clear_instance()\ngrader = NbGraderApp.instance()\ngrader.initialize([])\n"
        "print(json.dumps({'extensions': {k.split('.')[-1]: v for k, v in app.jpserver_extensions.items()"
        " if k.startswith('nbgrader')}, 'shell': app.terminado_settings.get('shell_command'),"
        " 'lab_off': get_page_config([])['disabledExtensions'],"
        " 'course_id': grader.config.CourseDirectory.course_id, 'exchange': grader.config.Exchange.root}))\n"
    )
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "jupyter"),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=home, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hub_setup_turns_the_assignments_tab_on_for_learners_and_formgrader_for_the_instructor(tmp_path):
    prefix = _environment(tmp_path)
    course, exchange, home, learner = tmp_path / "course", tmp_path / "exchange", tmp_path / "teach", tmp_path / "al"
    learner.mkdir()
    steps = hub.plan(course, COURSE_ID, exchange, prefix=prefix, home=home)
    assert steps.left == []
    hub.apply(steps)
    assert stat.S_IMODE(course.stat().st_mode) == 0o700
    assert stat.S_IMODE(exchange.stat().st_mode) == 0o1777

    theirs, mine = _resolved(learner, prefix), _resolved(home, prefix)
    on = {"assignment_list": True, "validate_assignment": True}
    assert theirs["extensions"] == {**on, "formgrader": False, "course_list": False}
    assert mine["extensions"] == {**on, "formgrader": True, "course_list": True}
    for seen in (theirs, mine):
        assert seen["course_id"] == COURSE_ID and seen["exchange"] == str(exchange)
        assert seen["shell"] and "-l" not in seen["shell"]  # a login shell would reset PATH
        assert "@jupyter/nbgrader" not in seen["lab_off"]  # the Assignments tab and validate button
        assert {f"@jupyter/nbgrader:{p}" for p in hub.LAB_LEARNERS_OFF} <= set(seen["lab_off"])
    assert f"c.CourseDirectory.root = {str(course)!r}" in (home / ".jupyter" / "nbgrader_config.py").read_text()
    hub_config = _hub_config(course)
    assert hub_config.Spawner.cmd == [str(prefix / "bin" / "jupyterhub-singleuser")]
    assert hub_config.Spawner.environment["PATH"].startswith(f"{prefix / 'bin'}:")
    assert callable(hub_config.Spawner.pre_spawn_hook)

    hub.apply(hub.plan(course, COURSE_ID, exchange, prefix=prefix, home=home))  # again: the same settings once
    assert (course / "nbgrader_config.py").read_text().count(hub.MARK) == 1


@pytest.fixture
def open_tmp():
    """A temporary folder every user may pass through (pytest's own lies in a private one)."""
    root = Path(tempfile.mkdtemp(prefix="hub-", dir=tempfile.gettempdir()))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _hub_config(course: Path):
    """The hub's configuration hub-setup wrote, read as JupyterHub reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("jupyterhub_config.py", path=str(course)).load_config()


def _spawns(hub_config, name: str) -> None:
    """What the hub does before it starts ``name``'s server: its pre-spawn hook."""

    class User:
        pass

    class Spawner:
        user = User()

    Spawner.user.name = name
    hub_config.Spawner.pre_spawn_hook(Spawner())


def test_hub_setup_refuses_an_interpreter_other_users_cannot_run(open_tmp):
    tmp_path = open_tmp
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("sh"), private / "bin" / "python3.11")
    private.chmod(0o700)
    prefix = _environment(tmp_path)
    (prefix / "bin" / "python").unlink()
    (prefix / "bin" / "python").symlink_to(private / "bin" / "python3.11")
    with pytest.raises(hub.HubSetupError, match=r"lies in .*private \(mode 700\).*PYTHON="):
        hub.plan(tmp_path / "course", COURSE_ID, tmp_path / "exchange", prefix=prefix, home=tmp_path / "h")
    (prefix / "bin" / "jupyterhub-singleuser").unlink()
    private.chmod(0o755)
    with pytest.raises(hub.HubSetupError, match="make hub-env"):
        hub.plan(tmp_path / "course", COURSE_ID, tmp_path / "exchange", prefix=prefix, home=tmp_path / "h")
    with pytest.raises(hub.HubSetupError, match="course-id"):
        hub.plan(tmp_path / "course", "my course!", tmp_path / "exchange", prefix=prefix, home=tmp_path / "h")


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


# --- a class through nbgrader's exchange, as separate Unix users ----------------------------------


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
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def hub_class(request):
    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("needs root, setpriv and useradd: the learners are other Unix users")
    root = Path(tempfile.mkdtemp(prefix="hub-class-", dir="/tmp"))
    root.chmod(0o755)  # as on a hub: learners can reach the exchange, not the course
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    learners = _make_learners(root, request)
    prefix = _environment(root)
    course, exchange, instructor = root / "course", root / "exchange", root / "instructor"
    hub.apply(hub.plan(course, COURSE_ID, exchange, prefix=prefix, home=instructor))
    hub_config = _hub_config(course)
    nbgrader_course.write_source(course, "ps1", [CHAPTER])
    path = f"{BIN}{os.pathsep}{os.environ['PATH']}"
    teacher = {**os.environ, "PATH": path, "HOME": str(instructor), "JUPYTER_CONFIG_DIR": str(instructor / ".jupyter")}
    log: list[str] = []

    def instructor_runs(*argv: str) -> None:
        done = _as(None, list(argv), course, teacher)
        log.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stderr[-3000:]

    def learner_runs(name: str, *argv: str, home: Path) -> subprocess.CompletedProcess:
        env = {
            "PATH": path,
            "HOME": str(home),
            "USER": name,
            "LOGNAME": name,
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "jupyter"),
        }
        done = _as(learners[name], list(argv), home, env)
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
    homes = {}
    for name in learners:
        home = homes[name] = Path(pwd.getpwnam(name).pw_dir)
        _spawns(hub_config, name)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        learner_runs(name, nbgrader, "fetch_assignment", "ps1", home=home)
        fetched = home / "ps1" / f"{CHAPTER}.ipynb"
        notebook = json.loads(fetched.read_text())
        if name.startswith("hub-alice-"):
            for cell in notebook["cells"]:
                grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
                if grade_id in solution and cell["metadata"]["nbgrader"].get("solution"):
                    cell["source"] = solution[grade_id]
        fetched.write_text(json.dumps(notebook))
        learner_runs(name, nbgrader, "submit", "ps1", home=home)
    instructor_runs(nbgrader, "collect", "ps1")
    instructor_runs(sys.executable, "-m", "autograder", "nbgrader", str(course), "ps1", "--seed", "2026")
    instructor_runs(nbgrader, "generate_feedback", "ps1")
    instructor_runs(nbgrader, "release_feedback", "ps1")
    feedback = {}
    for name in learners:
        learner_runs(name, nbgrader, "fetch_feedback", "ps1", home=homes[name])
        (page,) = (homes[name] / "ps1" / "feedback").glob(f"*/{CHAPTER}.html")
        feedback[name] = page.read_text()
    alice, bob = learners
    yield {
        "alice": alice,
        "bob": bob,
        "learners": learners,
        "root": root,
        "course": course,
        "exchange": exchange,
        "homes": homes,
        "feedback": feedback,
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


def test_learners_cannot_read_the_course_or_each_others_work(hub_class):
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
    ):
        done = _as(alice, ["cat", str(target)], hub_class["root"], env, reach=False)
        assert done.returncode != 0 and "Permission denied" in done.stderr, target
    inbound = exchange / COURSE_ID / "inbound"
    listing = _as(alice, ["ls", str(inbound)], hub_class["root"], env, reach=False)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    released = _as(alice, ["ls", str(exchange / COURSE_ID / "outbound" / "ps1")], hub_class["root"], env, reach=False)
    assert released.returncode == 0 and CHAPTER in released.stdout  # what learners should reach, they reach
