"""The set-up script every system runs (``tools/setup_course.py``; the Makefile calls it), with the
system faked: where the environment's programs are, what is run and in which order, what is done
once, and the README's commands for each system."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from course import paths

from conftest import load_tool


@pytest.fixture
def setup():
    return load_tool("setup_course")


def test_the_environments_programs_are_where_each_system_puts_them(setup):
    windows = setup.Layout(Path(".venv"), windows=True)
    assert windows.python == Path(".venv/Scripts/python.exe")
    assert windows.tool("jupyter") == Path(".venv/Scripts/jupyter.exe")
    assert windows.stamp("base") == Path(".venv/Scripts/.installed-base")
    posix = setup.Layout(Path(".venv"), windows=False)
    assert posix.python == Path(".venv/bin/python") and posix.tool("ruff") == Path(".venv/bin/ruff")
    assert posix.stamp("dev") == Path(".venv/bin/.installed-dev")  # what the Makefile's targets name
    assert setup.layout(setup.settings({}), windows=True).venv == paths.ROOT / ".venv"


def test_environment_variables_choose_and_empty_ones_keep_the_defaults(setup):
    chosen = setup.settings({"TORCH_SPEC": "torch==2.14.1", "MODEL_SPEC": "", "VENV": "/opt/course-env"})
    assert chosen["TORCH_SPEC"] == "torch==2.14.1"
    assert chosen["MODEL_SPEC"] == setup.DEFAULTS["MODEL_SPEC"]  # make exports unset variables as empty
    assert setup.layout(chosen, windows=False).python == Path("/opt/course-env/bin/python")


@pytest.mark.parametrize("windows", [True, False])
def test_torch_comes_first_and_every_step_uses_the_environments_python(setup, windows):
    chosen = setup.settings({})
    where = setup.layout(chosen, windows=windows)
    steps = setup.base_steps(where, chosen)
    assert all(step[0] == str(where.python) for step in steps)
    order = [" ".join(step[1:]) for step in steps]
    torch = order.index(f"tools/install_torch.py {chosen['TORCH_SPEC']}")
    course = order.index("-m pip install -q -e .[lab,llm]")
    assert torch < course < order.index("-m course.pretrained")
    assert setup.widgets_step(where)[0] == str(where.python)
    assert str(where.venv / "ipywidgets7") in setup.widgets_step(where)


def test_jupyterlab_runs_as_root_only_where_there_is_a_root(setup, monkeypatch):
    where = setup.Layout(Path(".venv"), windows=True)
    assert setup.lab_command(where, 8890, root=False) == [
        str(Path(".venv/Scripts/jupyter.exe")),
        "lab",
        "--notebook-dir=notebooks",
        "--port=8890",
    ]
    assert setup.lab_command(where, 8888, root=True)[-1] == "--allow-root"
    monkeypatch.delattr(os, "geteuid")  # Windows has no user ids
    assert setup.is_root() is False


def _faked(setup, monkeypatch, tmp_path) -> list[list[str]]:
    """The script's commands recorded instead of run, in a folder of its own with a pyproject.toml."""
    ran = []

    def run(command, check=True, cwd=None, env=None):
        ran.append([str(c) for c in command])
        if command[1:3] == ["-m", "venv"]:
            Path(command[3], "bin").mkdir(parents=True)
            Path(command[3], "bin", "python").touch()
        return 0

    monkeypatch.setattr(setup, "ROOT", tmp_path)
    monkeypatch.setattr(setup, "run", run)
    monkeypatch.setattr(setup, "system_packages", lambda: None)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    return ran


def test_each_step_is_done_once_and_again_when_pyproject_changes(setup, monkeypatch, tmp_path):
    ran = _faked(setup, monkeypatch, tmp_path)
    chosen = setup.settings({})
    where = setup.layout(chosen, windows=False)
    setup.install(where, chosen, dev=True)
    assert ran[0] == [sys.executable, "-m", "venv", str(tmp_path / ".venv")]
    expected = setup.base_steps(where, chosen) + setup.dev_steps(where) + setup.quiet_steps(where)
    assert ran[1:] == [[str(c) for c in step] for step in expected]
    ran.clear()
    setup.install(where, chosen, dev=True)
    assert ran == []
    stamp_time = where.stamp("base").stat().st_mtime
    os.utime(tmp_path / "pyproject.toml", (stamp_time + 10, stamp_time + 10))
    setup.install(where, chosen, dev=False)
    assert ran == [[str(c) for c in step] for step in setup.base_steps(where, chosen)]


def test_an_old_python_is_refused_with_the_reason(setup, monkeypatch, tmp_path):
    ran = _faked(setup, monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "version_info", (3, 10, 12))
    with pytest.raises(SystemExit, match="needs Python 3.11 or newer"):
        setup.install(setup.layout(setup.settings({}), windows=False), setup.settings({}), dev=False)
    assert ran == []


def test_the_readme_names_each_systems_commands():
    """The README's first screen names the set-up commands of each system; the learners' guide, how
    to grade a notebook on each."""
    readme = (paths.ROOT / "README.md").read_text()
    first_screen = readme[: readme.index("## The chapters")]
    for command in (
        "make lab",
        "make test",
        r"py -3.11 tools\setup_course.py lab",
        r"py -3.11 tools\setup_course.py test",
    ):
        assert command in first_screen, command
    learners = (paths.ROOT / "tools" / "site" / "guides" / "learners.md").read_text()
    assert r".venv\Scripts\python.exe -m autograder grade" in learners
    assert ".venv/bin/python -m autograder grade" in learners
    assert "(tools/site/guides/learners.md)" in readme


def test_a_hubs_learners_environment_is_the_learners_copy_installed_by_its_own_script(setup, monkeypatch, tmp_path):
    """``hub-learners`` builds the learners' copy with the instructor's environment, puts its files in
    the folder (an earlier install's replaced, its environment kept), then runs the copy's own
    set-up script there with ``--hub`` and its own ``.venv``, and checks every user can run it."""
    (tmp_path / "instructor").mkdir()
    ran = _faked(setup, monkeypatch, tmp_path / "instructor")
    where_run = []
    recorded = setup.run

    def run(command, check=True, cwd=None, env=None):
        recorded(command, check)
        where_run.append((cwd, (env or {}).get("VENV")))
        if command[1:3] == setup.LEARNERS_COPY_BUILD[:2]:  # the build: a copy with its notebooks
            out = Path(command[-1])
            (out / "notebooks").mkdir(parents=True)
            (out / "notebooks" / "05_flash_attention.ipynb").write_text("{}")
            (out / "tools").mkdir()
            (out / "tools" / "setup_course.py").write_text("")
        return 0

    monkeypatch.setattr(setup, "run", run)
    chosen = setup.settings({})
    where = setup.layout(chosen, windows=False)
    folder = tmp_path / "opt" / "llm-efficiency-course"
    with pytest.raises(SystemExit, match="make hub-env first"):
        setup.hub_learners(where, chosen, folder)
    where.bin.mkdir(parents=True)
    where.stamp("dev").touch()
    folder.mkdir(parents=True)
    (folder / "notes.txt").touch()
    with pytest.raises(SystemExit, match="holds other files"):
        setup.hub_learners(where, chosen, folder)  # a folder no install made: nothing removed
    (folder / "notes.txt").unlink()
    ran.clear()
    where_run.clear()
    setup.hub_learners(where, chosen, folder)
    build, install, check = ran
    assert build[:-1] == [str(where.python), *setup.LEARNERS_COPY_BUILD]
    assert install == [sys.executable, str(folder / "tools" / "setup_course.py"), "install", "--hub"]
    assert where_run[1] == (folder, ".venv")  # the copy's script, in the copy, with its own environment
    assert check == [str(where.python), "-m", "autograder.hub", str(folder / ".venv" / "bin" / "python")]
    assert (folder / "notebooks" / "05_flash_attention.ipynb").exists()

    (folder / ".venv").mkdir()
    (folder / ".venv" / "kept").touch()
    (folder / "notebooks" / "99_gone.ipynb").touch()
    setup.hub_learners(where, chosen, folder)  # again: the copy's files replaced, its environment kept
    assert (folder / ".venv" / "kept").exists() and not (folder / "notebooks" / "99_gone.ipynb").exists()

    copy = tmp_path / "cloned"
    (copy / "notebooks").mkdir(parents=True)
    (copy / "solutions").mkdir()
    with pytest.raises(SystemExit, match=r"not a learners' copy \(solutions in it\)"):
        setup.hub_learners(where, chosen, folder, copy)
    with pytest.raises(SystemExit, match="lies in the instructor's copy"):
        setup.hub_learners(where, chosen, setup.ROOT / "learners")


def test_the_set_up_script_refuses_what_hub_setup_refuses(setup):
    """The script's written-out list of what only the instructor's copy holds is autograder.hub's."""
    from autograder import hub

    assert set(setup.INSTRUCTORS_ONLY) == set(hub.instructors_only())


def test_the_learners_environment_is_made_readable_by_every_user_and_writable_by_none(setup, tmp_path):
    (tmp_path / "private").mkdir(mode=0o700)
    (tmp_path / "private" / "notes.py").write_text("")
    (tmp_path / "private" / "notes.py").chmod(0o600)
    (tmp_path / "open.py").write_text("")
    (tmp_path / "open.py").chmod(0o666)
    setup.readable_by_all(tmp_path)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"private": 0o755, "notes.py": 0o644, "open.py": 0o644}
