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
    declared = {d.replace(" ", "") for d in declared}
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
        assert f"!git clone -q --depth 1 {url} /content/course" in source, (
            f"{notebook.name}: the Colab cell should clone {url}"
        )
        assert "enable_custom_widget_manager" in source


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
    written += [paths.ROOT / name for name in ("README.md", "Makefile", "environment.yml")]
    assert [str(p.relative_to(paths.ROOT)) for p in written if url in p.read_text()] == []


def test_the_colab_cell_does_nothing_outside_colab():
    from IPython.core.inputtransformer2 import TransformerManager

    for notebook in paths.NOTEBOOKS.glob("*.ipynb"):
        source = "".join(json.loads(notebook.read_text())["cells"][0]["source"])
        code = TransformerManager().transform_cell(source)  # `!git` and `%pip` become get_ipython() calls
        namespace = {}
        exec(compile(code, notebook.name, "exec"), namespace)  # NameError if a Colab-only line ran
        assert "output" not in namespace
