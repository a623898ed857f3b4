"""The sandbox's own machinery: the mode chosen, the memory limit, and stopping when it cannot start.

The hostile submissions (``test_hostile.py``) show what each mode stops; these tests show that the
limits measure the right thing: resident memory, not the address space that a CUDA build of torch
reserves at import, and that a sandbox which cannot start stops grading with the grader's reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest.mock import ANY

import pytest

from autograder import sandbox
from autograder.sandbox import modes, system
from autograder.sandbox.limits import settings
from course import paths

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


@pytest.mark.parametrize("what", ["bytes", "files"])
def test_a_submission_that_fills_its_own_folder_is_stopped(what):
    """Its work folder is the one place a submission may write: where no file system gives it a
    quota, the grader stops it past 64 MiB or 1,000 files (here while it writes 200 MiB or 3,000)."""
    write = "open(f'big{i}', 'wb').write(b'x' * 2**20)" if what == "bytes" else "open(f'small{i}', 'w').close()"
    count = 200 if what == "bytes" else 3000
    answer = f"import time\nfor i in range({count}):\n    {write}\n    time.sleep(0.02 if {count} < 1000 else 0.002)\n"
    outcome = sandbox.run(_job(answer=answer), SMALL)
    assert outcome.results is None and outcome.problem == "wrote more than 64 MiB or 1000 files", outcome


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


ALLOWLISTS = [m for m in ("bubblewrap+landlock", "bubblewrap", "landlock") if m in sandbox.MODES]


@pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap and Landlock are Linux's")
@pytest.mark.parametrize("mode", ALLOWLISTS)
def test_an_allowlist_mode_lets_in_only_the_interpreter_and_its_own_folder(mode, tmp_path):
    """Each mode this machine can run, forced, whatever the strongest is: a folder outside the
    allowlist is not there to read or write, the network is refused, no capability is left, and
    the sandbox writes its own folder only (the independent check: the files on disk after)."""
    if mode in modes.BUBBLEWRAP and not shutil.which("bwrap"):
        pytest.skip("bwrap is not installed (tools/setup_course.py installs it as root on Debian)")
    if mode in modes.LANDLOCK and not modes.landlock_abi():
        pytest.skip("this kernel has no Landlock")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "answer.txt").write_text("42")
    secret.chmod(0o755)
    tmp_path.chmod(0o755)
    answer = (
        "import os, socket\n"
        "def attempt(action):\n    try:\n        return ['reached', repr(action())[:60]]\n"
        "    except OSError as error:\n        return ['stopped', type(error).__name__]\n"
        f"def listing():\n    return attempt(lambda: os.listdir({str(secret)!r}))\n"
        f"def writing():\n    return attempt(lambda: open({str(secret / 'planted')!r}, 'w'))\n"
        "def network():\n    return attempt(lambda: socket.create_connection(('127.0.0.1', 9), timeout=2))\n"
        "def capabilities():\n    return open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
        "def own_folder():\n    open('mine.txt', 'w').write('ok')\n    return sorted(os.listdir('.'))\n"
    )
    calls = ("listing", "writing", "network", "capabilities", "own_folder")
    outcome = sandbox.run(_job(answer=answer, calls=calls), SMALL, mode=mode)
    assert outcome.results is not None, outcome.problem + outcome.output
    returned = [outcome.results["probes"][f"probe{i}"].get("returned") for i in range(len(calls))]
    listing, writing, network, capabilities, own = returned
    assert listing["list"][0] == "stopped" and writing["list"][0] == "stopped", (listing, writing)
    assert network["list"][0] == "stopped", network
    assert capabilities == "0000000000000000", "no capabilities left"
    assert "mine.txt" in own["list"], own
    assert sorted(p.name for p in secret.iterdir()) == ["answer.txt"]


def test_the_allowlist_holds_the_interpreter_and_its_libraries_never_the_course():
    """The independent check: where Python and torch live, and where the course lives."""
    import torch

    allowed = [Path(p).resolve() for p in modes.readable()]

    def covered(path) -> bool:
        return any(Path(path).resolve().is_relative_to(folder) for folder in allowed)

    assert covered(sys.executable) and covered(torch.__file__) and covered(os.__file__)
    assert not covered(paths.SOLUTIONS / "03_quantization.py") and not covered(paths.ROOT / "course")
    assert not any(paths.ROOT.resolve().is_relative_to(folder) for folder in allowed), "no folder above the course"
    assert not covered(Path.home())


def test_a_class_folder_inside_the_environment_stops_grading_with_the_reason(tmp_path):
    """Every submission may read the Python environment: a class kept inside it would be readable
    too, so the grader refuses to start rather than grade it."""
    inside_it = Path(sys.prefix) / "class"
    assert modes.exposed([inside_it, tmp_path]) == [str(inside_it)]
    with pytest.raises(sandbox.SandboxUnavailable, match="lies inside the Python environment"):
        sandbox.run(_job(), SMALL, hide=[inside_it], mode="landlock")


def test_what_each_mode_contains_is_said_with_the_kernels_landlock(monkeypatch):
    """A report names the layers, and what an older kernel's Landlock leaves out (Ubuntu 24.04's 6.8
    has ABI 4: no signal scoping), from AUTOGRADER_LANDLOCK_ABI, as the sandbox uses it."""
    if not system.LANDLOCK_ABI:
        pytest.skip("this kernel has no Landlock")
    monkeypatch.setenv("AUTOGRADER_LANDLOCK_ABI", "4")
    assert modes.landlock_abi() == min(4, system.LANDLOCK_ABI)
    older = modes.describe("landlock")
    assert "Landlock ABI 4" in older and "no TCP" in older and "no signal" not in older
    assert ("not contained: signals" in older) == (not modes.own_user("landlock")), older
    assert modes.policy("landlock", Path("/w"), 64, None)["landlock"] == 4
    monkeypatch.setenv("AUTOGRADER_LANDLOCK_ABI", "7")
    if system.LANDLOCK_ABI >= 6:
        assert "not contained" not in modes.describe("landlock") and "no signal" in modes.describe("landlock")
    assert modes.describe("bubblewrap+landlock").startswith("bubblewrap (")
    assert modes.describe("limits").startswith("limits only")


def test_macos_gets_a_seatbelt_profile_per_submission(monkeypatch, tmp_path):
    """What can be checked without a Mac (none runs here): sandbox-exec is chosen where it exists,
    each submission gets a new interpreter under a profile naming its own folder, and the profile's
    later rules, which win, allow writing there only and reading the interpreter back."""
    monkeypatch.delenv("AUTOGRADER_ISOLATION", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: f"/usr/bin/{name}")
    assert modes.candidates() == ["sandbox-exec", "limits"] and "sandbox-exec" not in modes.WARM
    command = modes.command("sandbox-exec", tmp_path, ["-I", "inside.py"])
    assert command[:2] == ["sandbox-exec", "-p"] and command[3:] == [sys.executable, "-I", "inside.py"]
    rules = command[2].splitlines()
    assert rules[:2] == ["(version 1)", "(allow default)"] and command[2].count("(") == command[2].count(")")
    work = f'(subpath "{tmp_path.resolve()}")'
    writes = next(i for i, rule in enumerate(rules) if rule.startswith("(allow file-write*"))
    assert rules.index("(deny file-write*)") < writes and work in rules[writes]
    reads = next(i for i, rule in enumerate(rules) if rule.startswith("(allow file-read*"))
    hidden = next(i for i, rule in enumerate(rules) if rule.startswith("(deny file-read*"))
    assert hidden < reads and work in rules[reads] and '(subpath "/Users")' in rules[hidden]
    assert "(deny network*)" in rules and rules[-2:] == ["(deny signal)", "(allow signal (target same-sandbox))"]


def test_modes_can_be_forced_off_for_macos_like_runs(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_ISOLATION", "limits")
    assert modes.candidates() == ["limits"]
    outcome = sandbox.run(_job(answer="def two():\n    return 2\n", calls=("two",)), SMALL, mode="limits")
    assert outcome.results["probes"]["probe0"] == {"returned": 2}
    assert json.dumps(outcome.results)  # plain data only


# --- the warm sandbox: each submission a fresh child of one interpreter that imported torch once ---

LEFT_BEHIND = "613.25"  # the seconds of the `sleep` a submission leaves running: no other process sleeps that long
PLANT = f"""
import builtins, json, os, random, signal, subprocess, sys, tempfile, threading, types
import numpy, torch
torch.planted = 1
torch.set_default_dtype(torch.float64)
torch.manual_seed(5)
torch.set_num_threads(2)
json.planted = builtins.planted = 1
sys.modules["planted_module"] = types.ModuleType("planted_module")
sys.path.insert(0, "/planted")
os.environ["PLANTED"] = "1"
random.seed(5)
numpy.random.seed(5)
signal.signal(signal.SIGTERM, lambda *a: None)
kept = open(os.path.join(tempfile.gettempdir(), "planted-{{token}}"), "w")  # left open, and inheritable
os.set_inheritable(kept.fileno(), True)
for folder in ("/dev/shm", os.getcwd(), os.environ["HOME"]):
    try:
        open(os.path.join(folder, "planted-{{token}}"), "w").write("A was here")
    except OSError:
        pass
threading.Thread(target=threading.Event().wait, daemon=False).start()
subprocess.Popen(["sleep", "{LEFT_BEHIND}"], start_new_session=True)  # its own session, outside A's
if os.fork() == 0:  # an orphan, in a session of its own
    os.setsid()
    os.execvp("sleep", ["sleep", "{LEFT_BEHIND}"])
"""
SEEN = """
import builtins, json, os, random, resource, signal, sys, threading
import numpy, torch
fds = os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []
def planted_in_shm():  # where the sandbox may read /dev/shm at all
    try:
        return sorted(f for f in os.listdir("/dev/shm") if "planted" in f)
    except OSError:
        return []
SEEN = {
    "torch": [hasattr(torch, "planted"), str(torch.get_default_dtype()), torch.initial_seed(), torch.get_num_threads()],
    "first_draw": torch.rand(1).item(),
    "modules": [hasattr(json, "planted"), hasattr(builtins, "planted"), "planted_module" in sys.modules],
    "path": [p for p in sys.path if "planted" in p],
    "env": sorted(os.environ),
    "seeded_like_a": [
        random.random() == random.Random(5).random(),
        numpy.random.rand() == numpy.random.RandomState(5).rand(),
    ],
    "sigterm": str(signal.getsignal(signal.SIGTERM)),
    "threads": threading.active_count(),
    "descriptors": len(fds),
    "own_folder": sorted(os.listdir(os.getcwd())),
    "shm": planted_in_shm(),
    "limits": [
        list(resource.getrlimit(getattr(resource, f"RLIMIT_{n}"))) for n in ("CPU", "FSIZE", "NOFILE", "CORE")
    ],
    "uid": os.getuid(),
}
def seen():
    return SEEN
"""


def _sleepers() -> list[int]:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        if (process.info["cmdline"] or [])[-1:] == [LEFT_BEHIND]:
            found.append(process.pid)
    return found


def _warm_server(mode: str, hide=()):
    from autograder.sandbox import warm
    from course import paths

    return warm._servers.get(warm._key(mode, [paths.ROOT, *hide]))


def test_a_submission_leaves_nothing_for_the_next_one_in_the_same_warm_sandbox():
    """Submission A changes torch, modules, seeds, the environment and signals, writes files, leaves
    a thread, a file open and processes running; B, forked next from the same warm sandbox, sees
    what B sees in a fresh interpreter (the independent reference), nothing of A's."""
    import secrets

    token = secrets.token_hex(4)
    mode = sandbox.isolation(SMALL.memory_bytes)
    planted = sandbox.run(_job(answer=PLANT.replace("{token}", token), calls=()), SMALL)
    server = _warm_server(mode)
    assert planted.warm and planted.results == {"cells": [], "probes": {}}, planted.problem + planted.output
    assert _sleepers() == [], "the processes A left must end with A"
    after = sandbox.run(_job(answer=SEEN, calls=("seen",)), SMALL)
    again = sandbox.run(_job(answer=SEEN, calls=("seen",)), SMALL)
    assert after.warm and again.warm and _warm_server(mode) is server, "B must be a child of the same warm sandbox"
    fresh = sandbox.run(_job(answer=SEEN, calls=("seen",)), SMALL, warm=False)
    assert not fresh.warm
    seen, twice, reference = (
        outcome.results["probes"]["probe0"]["returned"]["dict"] for outcome in (after, again, fresh)
    )
    assert seen["torch"]["list"][:2] == [False, "torch.float32"] and seen["torch"]["list"][3] == 1
    assert seen["seeded_like_a"] == {"list": [False, False]}
    if mode in sandbox.HIDES_FILES:
        assert seen["shm"] == {"list": []}
    # fresh seeds, as two fresh interpreters draw: torch's, whose first draw then differs too
    assert seen["torch"]["list"][2] != twice["torch"]["list"][2] and seen["first_draw"] != twice["first_draw"]
    if modes.own_user(mode):
        assert len({seen["uid"], twice["uid"], reference["uid"]}) == 3, "each sandbox has a user of its own"
    for state in (seen, reference):
        for drawn in ("uid", "first_draw"):
            state.pop(drawn)
        state["torch"]["list"].pop(2)
        # what the namespace modes' shell leaves a fresh sandbox: its PWD and the venv's mount point
        state["env"]["list"] = [name for name in state["env"]["list"] if name != "PWD"]
        state["own_folder"]["list"] = [name for name in state["own_folder"]["list"] if name != "venv"]
    assert seen == reference


def test_a_submission_that_kills_its_group_or_fills_memory_costs_the_next_nothing():
    """What a fresh sandbox reports of each, and the next submission in the same warm sandbox is
    graded in full. In the namespace modes the sandbox's first process, pid 1 of its namespace,
    survives a signal from inside it, and the killers' signals reach no process outside: their
    answers are graded (``two`` is not defined), every time, warm and fresh alike."""
    mode = sandbox.isolation(ROOMY.memory_bytes)
    killers = (
        "import os, signal\nos.killpg(0, signal.SIGKILL)\n",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(os.getpid(), signal.SIGKILL)\n",
    )
    unkillable = {"cells": [], "probes": {"probe0": {"raised": "NameError", "message": ANY, "where": ANY}}}
    for answer in (*killers, "hog = bytearray(4 * 2**30)\n"):
        outcome = sandbox.run(_job(answer=answer, calls=("two",)), ROOMY)
        fresh = sandbox.run(_job(answer=answer, calls=("two",)), ROOMY, warm=False)
        assert outcome.warm and outcome.results == fresh.results, (answer, outcome, fresh)
        assert bool(outcome.problem) == bool(fresh.problem), (answer, outcome, fresh)
        if answer in killers and mode in sandbox.HIDES_FILES:
            assert outcome.results == unkillable and not outcome.problem, (answer, outcome)
        if answer not in killers:
            assert outcome.problem.startswith("the submission used"), outcome.problem  # its main group
    server = _warm_server(mode)
    outcome = sandbox.run(_job(answer="def two():\n    return 2\n", calls=("two",)), ROOMY)
    assert outcome.warm and _warm_server(mode) is server and server.alive
    assert outcome.results == {"cells": [], "probes": {"probe0": {"returned": 2}}}


@pytest.mark.parametrize("forks", [True, False], ids=["forked-calls", "calls-in-one-process"])
def test_an_array_that_several_probes_take_travels_once_and_each_call_gets_its_own(forks, monkeypatch):
    """A job's probes that hand over one large array (chapter 9's model weights) carry it once, in
    the job's ``shared`` table; each call still gets a copy of its own, so that an answer which
    spoils its input in place spoils nothing for the next call: forked, and where calls run one
    after another in one process (Windows)."""
    import torch

    from autograder.checks import encode_probe
    from autograder.sandbox import system
    from course import plain_data

    weight = torch.arange(2**15, dtype=torch.float32)  # 128 KiB, over plain_data.SHARED_BYTES
    shared: dict = {}
    probes = [{"id": f"probe{i}", **encode_probe({"call": "spoil", "args": [weight]}, shared)} for i in range(3)]
    assert len(shared) == 1 and len(json.dumps(probes)) < 1000
    assert len(json.dumps(shared)) > 4 * weight.numel()  # the bytes themselves, once
    assert torch.equal(plain_data.decode(probes[0]["args"][0], shared), weight)
    unpacked = plain_data.unpacked(shared)  # as the sandbox decodes the table: once, then a copy per decoding
    first, second = (plain_data.decode(probes[i]["args"][0], unpacked) for i in range(2))
    first.zero_()
    assert torch.equal(second, weight) and torch.equal(plain_data.decode(probes[2]["args"][0], unpacked), weight)
    monkeypatch.setattr(system, "FORKS", forks)
    answer = "def spoil(w):\n    total = float(w.sum())\n    w.zero_()\n    return total\n"
    job = {"setup": [], "answers": [{"grade_id": "answer", "source": answer}], "probes": probes, "shared": shared}
    outcome = sandbox.run(job, SMALL)
    assert outcome.results is not None, outcome.problem + outcome.output
    returned = [outcome.results["probes"][f"probe{i}"] for i in range(3)]
    assert returned == [{"returned": float(weight.sum())}] * 3


def test_a_warm_sandbox_that_ends_is_started_again():
    """In the ``limits`` mode a submission can reach the server (its own user's process): grading goes on."""
    answer = (
        "import os, signal\n"
        "server = int(open(f'/proc/{os.getppid()}/stat').read().split(')')[1].split()[1])\n"
        "os.kill(server, signal.SIGKILL)\n"
        "def two():\n    return 2\n"
    )
    first = sandbox.run(_job(answer=answer, calls=("two",)), SMALL, mode="limits")
    assert first.warm and first.results is not None, first.problem
    killed = _warm_server("limits")
    killed.process.wait(timeout=30)
    again = sandbox.run(_job(answer="def two():\n    return 2\n", calls=("two",)), SMALL, mode="limits")
    assert again.results == {"cells": [], "probes": {"probe0": {"returned": 2}}}
    assert again.warm and _warm_server("limits") is not killed


def test_warm_and_fresh_sandboxes_give_the_same_grades(instructor_notebooks, tmp_path, monkeypatch):
    """Two chapters' solutions and first planted mistakes, graded by both paths with one seed (the
    other tests of graded notebooks run on the warm path, against grades written down by hand)."""
    import importlib

    from autograder import grade
    from autograder.sandbox import warm
    from course import paths

    from conftest import _replace_answer

    cases = []
    for chapter in ("02_lora", "03_quantization"):
        source = instructor_notebooks[chapter]
        cases.append(copy_into(source, tmp_path / "solution", f"{chapter}.ipynb"))
        planted = list(getattr(importlib.import_module(f"test_{paths.slug(source)}"), "PLANTED", {}).values())
        if planted:
            notebook = _replace_answer(json.loads(source.read_text()), planted[0].grade_id, planted[0].source)
            (tmp_path / "planted").mkdir(exist_ok=True)
            cases.append(tmp_path / "planted" / f"{chapter}.ipynb")
            cases[-1].write_text(json.dumps(notebook))
    limits = sandbox.Limits(wall_seconds=900, probe_seconds=300, cell_seconds=300)

    def grades(path):  # the hints' numbers left out: a learner's unseeded draws differ in any two sandboxes
        report = grade.grade(path, limits, seed=3)
        return [(t.id, t.points, re.sub(r"[-+.\de]*\d", "#", t.hint)) for t in report.tests], report.messages

    warmed = [grades(path) for path in cases]
    monkeypatch.setattr(warm, "server", lambda *args: None)
    fresh = [grades(path) for path in cases]
    assert warmed == fresh
    assert any(points == 0 for tests, _ in warmed for _, points, _ in tests), "the planted mistakes must cost points"


GROWS = """
import os, threading, time
def threads():
    open({started!r}, "w").close()  # in its own folder, the one place it may write; the test finds it there
    for _ in range(600):  # until the test's other process of our user holds its threads
        if os.path.exists({go!r}):
            break
        time.sleep(0.05)
    stop, started = threading.Event(), 0
    try:
        for _ in range(48):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    stop.set()
    return started
"""


@contextlib.contextmanager
def threads_held(count: int):
    """Another process of ours holding ``count`` threads while the block runs (what the kernel
    counts against a shared user's process limit, as a second `make test` or a browser would)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, threading\nstop = threading.Event()\n"
            f"for _ in range({count}):\n    threading.Thread(target=stop.wait, daemon=True).start()\n"
            "print('held', flush=True)\nsys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.communicate("")


def _process_limit() -> int:
    return dict(settings(SMALL))["RLIMIT_NPROC"]


def test_a_sandbox_sharing_our_user_starts_above_every_thread_we_run():
    """Sharing our uid (the ``limits`` mode: macOS, and Linux without user namespaces), a sandbox's
    process limit counts every process of ours, and on Linux every thread: the limit it starts with
    is above what we run, by the room it leaves, whatever our other programs hold."""
    before = _process_limit()
    with threads_held(400):
        during = _process_limit()
    per_thread = sys.platform.startswith("linux")
    assert during - before >= (300 if per_thread else 1), (before, during)


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel counts no process of root's against a process limit")
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "fresh"])
def test_a_sandbox_sharing_our_user_forks_its_calls_beside_a_busy_program_of_ours(warm):
    """In the ``limits`` mode a normal user's sandbox forks a child per call even while another
    program of ours holds 400 threads: before, it counted our processes but not their threads, and
    every call of a submission graded beside a second `make test` failed with the sandbox."""
    with threads_held(400):
        outcome = sandbox.run(
            _job(answer="def one():\n    return 1\n", calls=("one", "one")), SMALL, mode="limits", warm=warm
        )
    assert outcome.results is not None, outcome.problem + outcome.output
    assert outcome.results["probes"] == {"probe0": {"returned": 1}, "probe1": {"returned": 1}}


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel counts no process of root's against a process limit")
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "fresh"])
def test_a_sandboxs_process_limit_counts_its_own_processes_alone(warm, tmp_path):
    """A sandbox of a normal user starts its 48 threads even when, after it started, another process
    of ours (another test's sandbox, a second `make test`) starts 150: the limit is the sandbox's own
    64, set in its own user namespace, not 64 more than our user ran when it began."""
    import secrets
    import threading

    mode = sandbox.isolation(ROOMY.memory_bytes)
    if mode not in modes.BUBBLEWRAP and not modes.own_user(mode):
        pytest.skip(f"in the {mode} mode a sandbox shares our user and its process count")
    token = secrets.token_hex(4)
    started, go = f"started-{token}", f"go-{token}"
    answer = GROWS.format(started=started, go=go)
    outcome = {}
    run = threading.Thread(
        target=lambda: outcome.update(done=sandbox.run(_job(answer=answer, calls=("threads",)), ROOMY, warm=warm))
    )
    run.start()
    found = []
    for _ in range(1200):
        found = list(Path(tempfile.gettempdir()).glob(f"autograder-*/**/{started}"))
        if found or not run.is_alive():
            break
        threading.Event().wait(0.05)
    with threads_held(150):
        for marker in found:  # the sandbox's own folder, which its user (ours) may write
            (marker.parent / go).touch()
        run.join()
    done = outcome["done"]
    assert done.results is not None, done.problem + done.output
    assert done.warm == warm
    assert done.results["probes"]["probe0"] == {"returned": 48}, done.results


@pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap and Landlock are Linux's")
def test_doctor_says_what_this_machine_allows_and_the_step_that_would_make_it_stronger():
    """The command's own run here, and the steps it gives where a piece is missing (each as the
    machine that lacks it would show it: no bwrap, AppArmor refusing it, an older Landlock)."""
    from autograder.sandbox import doctor

    env = {**os.environ, "AUTOGRADER_ISOLATION": "landlock", "AUTOGRADER_LANDLOCK_ABI": "4"}
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "doctor"], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if system.LANDLOCK_ABI:
        assert "grading runs in: landlock: Landlock ABI 4" in done.stdout, done.stdout
        assert "to make it stronger: Linux 6.12 or later" in done.stdout, done.stdout
    assert "apt install bubblewrap" in doctor.stronger_linux("bwrap is not installed", 7)[0]
    assert doctor.stronger_linux("", 7) == []
    assert any("Linux 6.12" in step for step in doctor.stronger_linux("", 5))
