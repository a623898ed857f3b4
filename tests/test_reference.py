"""The stored reference numbers are what the package regenerates, and say what they are."""

import functools
import json
import subprocess
import sys

import pytest

from course import paths, reference


@functools.cache  # once per topic: the model-level figures take minutes
def regenerated(topic: str) -> dict[str, dict]:
    """``topic``'s numbers as ``make reference`` makes them: in a fresh interpreter, so that nothing
    another test left in this one (a cached model, torch's settings) reaches them."""
    code = "import json, sys\nfrom course import reference\njson.dump(reference.generate(sys.argv[1]), sys.stdout)"
    done = subprocess.run([sys.executable, "-c", code, topic], capture_output=True, text=True, cwd=paths.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("topic", reference.topics())
def test_regeneration_reproduces_the_stored_numbers(topic):
    assert reference.compare(topic, regenerated(topic)) == []


@pytest.mark.parametrize("topic", reference.topics())
def test_every_number_has_a_tolerance_and_a_description(topic):
    for name, entry in reference.load(topic).items():
        assert set(entry) == {"value", "tolerance", "how"}, name
        assert entry["tolerance"] >= 0 and entry["how"], name


def test_no_stray_reference_files():
    stored = {p.stem for p in paths.REFERENCE.glob("*.json")}
    assert stored == set(reference.topics())


@pytest.mark.parametrize("topic", reference.topics())
def test_compare_reports_a_drifted_number(topic, tmp_path, monkeypatch):
    stored = reference.load(topic)
    name = sorted(stored)[0]
    stored[name]["value"] += 10 * stored[name]["tolerance"] + 1.0
    (tmp_path / f"{topic}.json").write_text(json.dumps(stored))
    monkeypatch.setattr(paths, "REFERENCE", tmp_path)
    assert any(p.startswith(f"{name}:") for p in reference.compare(topic, regenerated(topic)))


def test_close_uses_the_tolerance():
    entry = {"value": 1.0, "tolerance": 0.1}
    assert reference.close(entry, 1.05) and not reference.close(entry, 1.2)
    assert not reference.close(entry, float("nan"))
