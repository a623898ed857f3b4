"""The sandbox's own machinery: the mode chosen, the memory limit, and stopping when it cannot start.

The hostile submissions (``test_hostile.py``) show what each mode stops; these tests show that the
limits measure the right thing: resident memory, not the address space that a CUDA build of torch
reserves at import, and that a sandbox which cannot start stops grading with the grader's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autograder import sandbox
from autograder.sandbox import modes

from conftest import copy_into

SMALL = sandbox.Limits(wall_seconds=60, probe_seconds=10, cell_seconds=10)
# the memory watch, not the timer, must stop a hog: touching 3 GiB can take tens of seconds on a
# busy machine, so the calls that fill memory get a timer far beyond that
ROOMY = sandbox.Limits(wall_seconds=240, probe_seconds=90, cell_seconds=10)


def _job(setup: str = "", answer: str = "", calls: tuple[str, ...] = ()) -> dict:
    return {
        "setup": [setup] if setup else [],
        "answers": [{"grade_id": "answer", "source": answer}] if answer else [],
        "probes": [{"id": f"probe{i}", "call": name, "args": [], "kwargs": {}} for i, name in enumerate(calls)],
    }


def test_a_mode_is_chosen_and_reported():
    mode = sandbox.isolation(SMALL.memory_bytes)
    assert mode in sandbox.MODES
    assert sandbox.describe(mode)
    if sys.platform == "linux" and modes.candidates()[0] in sandbox.HIDES_FILES:
        # where namespaces are possible at all, they must be what grading uses (a silent downgrade
        # to limits would let submissions read the solutions)
        assert sandbox.hides_files(), f"namespaces are available but the sandbox fell back to {mode}"


def test_address_space_is_not_limited_resident_memory_is():
    """8 GiB of untouched address space (as a CUDA build of torch reserves at import) is fine;
    touching 4 GiB is stopped, and only the call that did it fails."""
    answer = (
        "import mmap\nreserved = mmap.mmap(-1, 8 * 2**30, prot=mmap.PROT_READ)  # reserved, never touched\n"
        "def small():\n    return len(reserved)\n"
        "def hog():\n    return bytearray(4 * 2**30)[0]\n"
    )
    outcome = sandbox.run(_job(answer=answer, calls=("small", "hog", "small")), ROOMY)
    assert outcome.results is not None, outcome.problem
    assert outcome.results["cells"] == []
    probes = outcome.results["probes"]
    assert probes["probe0"] == {"returned": 8 * 2**30} == probes["probe2"]
    assert "crashed" in probes["probe1"] and "memory" in probes["probe1"]["crashed"], probes["probe1"]
    assert any("memory" in note for note in outcome.notes), outcome.notes


def test_memory_hog_while_defining_stops_the_whole_run_with_the_reason():
    outcome = sandbox.run(_job(answer="hog = bytearray(4 * 2**30)\n"), ROOMY)
    assert outcome.results is None
    assert "memory" in outcome.problem and "GiB" in outcome.problem, outcome.problem


def test_memory_watch_counts_shared_pages_once():
    """Forked probes share the parent's pages: resident sizes add them up several times over,
    proportional sizes once, so forked calls of a 1.5 GiB process stay within 3 GiB."""
    answer = "ballast = bytearray(3 * 2**29)\ndef touch():\n    return ballast[12345]\n"
    outcome = sandbox.run(_job(answer=answer, calls=("touch",) * 10), SMALL)
    assert outcome.results is not None, outcome.problem
    assert all(p == {"returned": 0} for p in outcome.results["probes"].values()), outcome.results["probes"]


def test_tree_bytes_counts_what_a_child_holds():
    """What make bench reads: a child that touches 256 MiB adds about that to its parent's tree."""
    before = sandbox.tree_bytes(os.getpid())
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys\nheld = bytearray(2**28)\nprint('ready', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"
        during = sandbox.tree_bytes(os.getpid())
    finally:
        child.communicate("")
    assert 2**28 <= during - before < 2**28 + 2**27, (before, during)


def test_sandbox_that_cannot_start_is_the_graders_failure(instructor_notebooks, tmp_path):
    """Too little memory to import torch: no zeros for the learner, a message for the instructor."""
    notebook = copy_into(instructor_notebooks["03_quantization"], tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", str(notebook), "--memory", "0.05"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot start" in done.stderr and "no submission is at fault" in done.stderr
    assert "--memory" in done.stderr and done.stdout == ""


@pytest.mark.skipif(sys.platform != "linux", reason="user namespaces are a Linux feature")
def test_user_namespace_mode_hides_files_and_network(tmp_path):
    """The mode a normal user gets, forced here so that root's runs test it too."""
    if "user-namespace" not in modes.candidates():
        pytest.skip("unshare or setpriv is missing")
    probe = sandbox.run(_job(), SMALL, mode="user-namespace")
    if probe.results is None:
        pytest.skip(f"this kernel allows no unprivileged user namespaces: {probe.problem} {probe.output[-200:]}")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "answer.txt").write_text("42")
    answer = (
        f"import os, socket\n"
        f"def listing():\n    return sorted(os.listdir({str(secret)!r}))\n"
        "def network():\n    try:\n        socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "        return 'connected'\n    except OSError as error:\n        return type(error).__name__\n"
        "def identity():\n    return [os.getuid(), open('/proc/self/status').read().split('CapEff:')[1].split()[0]]\n"
        "def unmount():\n    import ctypes\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        f"    return [libc.umount2({str(secret)!r}.encode(), 2), ctypes.get_errno() != 0]\n"
    )
    outcome = sandbox.run(
        _job(answer=answer, calls=("listing", "network", "identity", "unmount")),
        SMALL,
        hide=[secret],
        mode="user-namespace",
    )
    assert outcome.results is not None, outcome.problem + outcome.output
    probes = outcome.results["probes"]
    assert probes["probe0"] == {"returned": {"list": []}}, "the hidden folder must look empty"
    assert probes["probe1"]["returned"] != "connected"
    assert probes["probe2"]["returned"]["list"][1] == "0000000000000000", "no capabilities left"
    assert probes["probe3"]["returned"]["list"] == [-1, True], "the covering mount must stay"


def test_modes_can_be_forced_off_for_macos_like_runs(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_ISOLATION", "limits")
    assert modes.candidates() == ["limits"]
    outcome = sandbox.run(_job(answer="def two():\n    return 2\n", calls=("two",)), SMALL, mode="limits")
    assert outcome.results["probes"]["probe0"] == {"returned": 2}
    assert json.dumps(outcome.results)  # plain data only
