"""``make bench``'s test time (tools/suite_time.py) is read from a pytest run's own JUnit report: the
run's wall time, each file's total and the slowest tests, recorded beside the other measurements."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import load_tool

suite_time = load_tool("suite_time")

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="5"
 time="100.5" timestamp="2026-12-01T08:00:00+00:00">
<testcase classname="tests.test_grader" name="test_a" time="40.0" />
<testcase classname="tests.test_grader" name="test_b[x]" time="2.5" />
<testcase classname="tests.test_hostile.TestKinds" name="test_c" time="30.0" />
<testcase classname="tests.test_quiz" name="test_d" time="0.25" />
<testcase classname="tests.test_quiz" name="test_e" time="7.0"><skipped message="no" /></testcase>
</testsuite></testsuites>
"""


def test_the_report_gives_the_runs_time_each_files_total_and_the_slowest_tests(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(REPORT)
    found = suite_time.read(path, slowest=2)
    assert found["seconds"] == 100.5 and found["tests"] == 5
    assert found["failures"] == 3 and found["skipped"] == 3  # failures and errors together
    assert found["when"] == "2026-12-01T08:00:00+00:00"
    assert found["files"] == {"tests/test_grader.py": 42.5, "tests/test_hostile.py": 30.0, "tests/test_quiz.py": 7.2}
    assert list(found["files"]) == ["tests/test_grader.py", "tests/test_hostile.py", "tests/test_quiz.py"]
    assert found["slowest"] == [["tests/test_grader.py::test_a", 40.0], ["tests/test_hostile.py::test_c", 30.0]]
    assert "100 s (1 min 40 s), 5 tests, 3 failed" in suite_time.text(found)


def test_recording_keeps_the_other_measurements(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(REPORT)
    performance = tmp_path / "performance.json"
    performance.write_text(json.dumps({"grading": {"submissions": 60}}))
    suite_time.record(suite_time.read(path), performance)
    kept = json.loads(performance.read_text())
    assert kept["grading"] == {"submissions": 60} and kept["tests"]["seconds"] == 100.5


def test_a_real_runs_report_names_its_tests(tmp_path):
    """pytest's own report of a run of four tests: two pass, one fails, one is skipped."""
    (tmp_path / "test_tiny.py").write_text(
        "import pytest\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n\n"
        "def test_three():\n    assert False\n\n@pytest.mark.skip\ndef test_four():\n    pass\n"
    )
    report = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", "test_tiny.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    found = suite_time.read(report)
    assert (found["tests"], found["failures"], found["skipped"]) == (4, 1, 1)
    assert list(found["files"]) == ["test_tiny.py"]
    names = sorted(name for name, _ in found["slowest"])
    assert names == [f"test_tiny.py::test_{n}" for n in ("four", "one", "three", "two")]


def test_without_a_report_it_says_to_run_the_tests_first(tmp_path, capsys):
    assert suite_time.main([str(tmp_path / "missing.xml")]) == 1
    assert "run `make test` first" in capsys.readouterr().err


def test_make_bench_keeps_the_test_time_and_each_class_sizes_grading(tmp_path, monkeypatch):
    """A full ``make bench`` rewrites data/performance.json: the test time and the grading figures,
    recorded on their own, stay; each class size's grading figures stay beside the others'."""
    benchmarks = load_tool("benchmarks")
    performance = tmp_path / "performance.json"
    monkeypatch.setattr(benchmarks, "REPORT", performance)
    monkeypatch.setattr(benchmarks.paths, "ROOT", tmp_path)  # where the messages name the file from
    performance.write_text(json.dumps({"grading": {"submissions": 60, "per_minute_per_core": 8.5}, "ratios": {}}))
    benchmarks.record_grading({"submissions": 1000, "per_minute_per_core": 30.0})
    benchmarks.record_grading({"submissions": 60, "per_minute_per_core": 33.0})
    path = tmp_path / "junit.xml"
    path.write_text(REPORT)
    suite_time.record(suite_time.read(path), performance)
    benchmarks.budget({"01_prefill_decode": 10.0}, {}, {"a": 1.0}, "a machine")
    kept = json.loads(performance.read_text())
    assert list(kept["grading"]) == ["60", "1000"]
    assert (
        kept["grading"]["60"]["per_minute_per_core"] == 33.0 and kept["grading"]["1000"]["per_minute_per_core"] == 30.0
    )
    assert kept["tests"]["seconds"] == 100.5 and kept["ratios"] == {"a": 1.0}
