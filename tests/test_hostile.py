"""Hostile and broken submissions, graded in one batch beside two honest ones.

Each kind states the score it must get and the message a learner or instructor sees. The honest
submissions in the same batch must keep full marks, which shows that nothing one submission does
reaches another. Kinds that need the course's files or the network out of reach need a sandbox
with an allowlist (bubblewrap, Landlock); where the machine has neither they are skipped, saying so.
``test_neighbours.py`` grades a class whose added cells attack the grader's own files, in each mode.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from autograder import grade, sandbox
from autograder.chapters import CHAPTERS
from course import paths

FULL = sum(e.points for e in CHAPTERS["03_quantization"])  # the exercises and the quiz
CORRECT_RELATIVE_ERROR = (
    "def relative_error(weight, approx):\n    return ((weight - approx).norm() / weight.norm()).item()\n"
)


@dataclass
class Kind:
    build: Callable[[dict, dict], dict | str]  # (solution notebook, context) -> notebook, or raw file text
    score: float
    message: str  # must appear in the report's messages or hints
    namespace_only: bool = False


def answer(grade_id: str, source: str):
    def build(notebook, context):
        for cell in notebook["cells"]:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
                cell["source"] = source.format(**context)
        return notebook

    return build


def prepend(grade_id: str, code: str):
    def build(notebook, context):
        for cell in notebook["cells"]:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
                cell["source"] = code.format(**context) + "\n" + "".join(cell["source"])
        return notebook

    return build


def edit(function: Callable[[dict], None]):
    def build(notebook, context):
        function(notebook)
        return notebook

    return build


def _delete_test_cell(notebook):
    notebook["cells"] = [
        c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") != "test_int8"
    ]


def _edit_locked_cell(notebook):
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "imports":
            cell["source"] = "import torch\ntorch.round = torch.trunc  # sabotage the setup\n"


def _pad_with_noise(notebook):
    junk = [{"cell_type": "markdown", "id": f"junk{i}", "metadata": {}, "source": "noise " * 50} for i in range(400)]
    big_output = {"output_type": "stream", "name": "stdout", "text": "x" * 5_000_000}
    noisy_code = {
        "cell_type": "code",
        "id": "noisy",
        "metadata": {},
        "execution_count": 1,
        "outputs": [big_output],
        "source": "print('x' * 5_000_000)  # a learner's own cell: it runs, and what it prints goes nowhere",
    }
    notebook["cells"] = notebook["cells"][:3] + junk + [noisy_code] + notebook["cells"][3:]


def _learners_cell(source: str) -> dict:
    return {"cell_type": "code", "id": "mine", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


def _duplicate_answer(notebook):
    index = next(
        i
        for i, c in enumerate(notebook["cells"])
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "relative_error"
    )
    wrong = json.loads(json.dumps(notebook["cells"][index]))
    wrong["source"] = "def relative_error(weight, approx):\n    return 0.0\n"
    notebook["cells"].insert(index, wrong)  # same id, same grade_id; the later (correct) copy counts


def _no_kernelspec(notebook):
    notebook["metadata"].pop("kernelspec", None)


def _other_chapter(notebook, context):
    return {
        "cells": [
            {
                "cell_type": "code",
                "id": "a",
                "metadata": {},
                "outputs": [],
                "execution_count": None,
                "source": "def prefill_flops(params, tokens):\n    return 2 * params * tokens\n",
            }
        ],
        "metadata": {"course": {"chapter": "01_prefill_decode"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


KINDS: dict[str, Kind] = {
    "endless_loop_at_definition": Kind(
        prepend("relative_error", "while True:\n    pass"), FULL - 2, "cell answer relative_error did not finish"
    ),
    "endless_loop_in_function": Kind(
        answer(
            "quantize_dequantize",
            "def quantize_dequantize(weight, bits, group_size=None):\n    while True:\n        pass\n",
        ),
        FULL - 8,
        "did not finish",
    ),
    "endless_loop_ignoring_alarms": Kind(
        answer(
            "effective_bits",
            "def effective_bits(bits, group_size, scale_bits=16):\n"
            "    while True:\n        try:\n            while True:\n"
            "                pass\n        except BaseException:\n"
            "            pass\n",
        ),
        FULL - 2,
        "did not finish",
    ),
    "sleeps_at_definition": Kind(
        prepend("effective_bits", "import time\ntime.sleep(10**6)"),
        FULL - 2,
        "cell answer effective_bits did not finish",
    ),
    "sys_exit_at_definition": Kind(prepend("effective_bits", "import sys\nsys.exit(0)"), FULL - 2, "raised SystemExit"),
    "os_exit_in_function": Kind(
        answer(
            "effective_bits", "def effective_bits(bits, group_size, scale_bits=16):\n    import os\n    os._exit(0)\n"
        ),
        FULL - 2,
        "the process died",
    ),
    "os_exit_at_definition": Kind(
        prepend("relative_error", "import os\nos._exit(3)"), 0, "ended (exit code 3) before reporting"
    ),
    "segfault": Kind(
        answer(
            "quantize_dequantize",
            "def quantize_dequantize(weight, bits, group_size=None):\n"
            "    import ctypes\n    return ctypes.string_at(0)\n",
        ),
        FULL - 8,
        "SIGSEGV",
    ),
    "memory_bomb": Kind(
        answer(
            "relative_error", "def relative_error(weight, approx):\n    hog = bytearray(16 * 2**30)\n    return 0.0\n"
        ),
        FULL - 2,
        "memory",
    ),
    "fork_bomb": Kind(
        answer(
            "effective_bits",
            "def effective_bits(bits, group_size, scale_bits=16):\n    import os\n    while True:\n        os.fork()\n",
        ),
        FULL - 2,
        "effective_bits",
    ),
    "huge_output": Kind(prepend("effective_bits", "import os\nos.write(1, b'x' * 5_000_000)"), 0, "printed more than"),
    "prints_in_every_call": Kind(
        answer(
            "effective_bits",
            "def effective_bits(bits, group_size, scale_bits=16):\n    print('debug', bits, 'x' * 100_000)\n"
            "    return bits + scale_bits / group_size\n",
        ),
        FULL,
        "",
    ),
    "added_cell_that_never_ends": Kind(
        edit(lambda notebook: notebook["cells"].insert(4, _learners_cell("while True:\n    pass"))),
        FULL,
        "(yours: `while True:`) did not finish",
    ),
    "monkeypatched_torch_numpy_asserts": Kind(
        answer(
            "relative_error",
            (
                "import math, numpy, torch\n"
                "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                "numpy.testing.assert_allclose = lambda *a, **k: None\nmath.isclose = lambda *a, **k: True\n"
                "numpy.allclose = lambda *a, **k: True\n"
                "def relative_error(weight, approx):\n    return 0.0\n"
            ),
        ),
        FULL - 2,
        "expected",
    ),
    "overwritten_checks": Kind(
        answer(
            "effective_bits",
            (
                "try:\n    import autograder, autograder.checks as c\n"
                "    autograder.check = c.check = lambda *a, **k: None\n"
                "    c.judge_number = lambda *a, **k: c.Verdict(True)\nexcept Exception:\n    pass\n"
                "def effective_bits(bits, group_size, scale_bits=16):\n    return bits\n"
            ),
        ),
        FULL - 2,
        "the scales' share came out 0",
    ),
    "always_equal_object": Kind(
        answer(
            "relative_error",
            (
                "class Anything(float):  # a float that claims to equal everything\n"
                "    def __eq__(self, other):\n        return True\n"
                "    def __ne__(self, other):\n        return False\n    __hash__ = float.__hash__\n"
                "def relative_error(weight, approx):\n    return Anything(0.0)\n"
            ),
        ),
        FULL - 2,
        "should be a number",
    ),
    "input_transformer_trick": Kind(
        prepend("relative_error", "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])"),
        FULL - 2,
        "get_ipython",
    ),
    "reads_solution_and_reference": Kind(
        answer(
            "relative_error",
            (
                "import re\ntry:\n    source = open({solutions!r}).read()\n    open({reference!r}).read()\n"
                "    exec(re.search(r'def relative_error\\(.*?### END SOLUTION', source, re.S).group(0))\n"
                "except OSError:\n    def relative_error(weight, approx):\n        return 0.0\n"
            ),
        ),
        FULL - 2,
        "expected",
        namespace_only=True,
    ),
    "imports_the_reference": Kind(  # refused in every isolation mode alike
        answer("relative_error", ("from course.quantization import relative_error\n")),
        FULL - 2,
        "No module named 'course",
    ),
    "fetches_an_answer_over_the_network": Kind(
        answer(
            "relative_error",
            (
                "import urllib.request\ntry:\n    exec(urllib.request.urlopen({server!r}, timeout=5).read().decode())\n"
                "except OSError:\n    def relative_error(weight, approx):\n        return 0.0\n"
            ),
        ),
        FULL - 2,
        "expected",
        namespace_only=True,
    ),
    "reads_other_submissions": Kind(
        answer(
            "relative_error",
            (
                "import glob, json\nfound = glob.glob({submissions!r} + '/**/*.ipynb', recursive=True)\n"
                "if found:\n"
                + "    "
                + CORRECT_RELATIVE_ERROR.replace("\n", "\n    ").rstrip()
                + "\nelse:\n    def relative_error(weight, approx):\n        return 0.0\n"
            ),
        ),
        FULL - 2,
        "expected",
        namespace_only=True,
    ),
    "writes_grader_output_and_deletes_files": Kind(
        prepend(
            "int8",
            (
                "import os, shutil\nfor target in ({feedback!r} + '/gradebook.csv', {feedback!r} + '/planted.txt'):\n"
                "    try:\n        open(target, 'w').write('learner,score\\nhostile,9999\\n')\n"
                "    except OSError:\n        pass\n"
                "shutil.rmtree({root!r}, ignore_errors=True)\nshutil.rmtree({submissions!r}, ignore_errors=True)"
            ),
        ),
        FULL,
        "",
        namespace_only=True,
    ),
    "forged_results_on_the_pipe": Kind(
        prepend(
            "relative_error",
            (
                "import os, sys, json\n"
                "fake = {{'cells': [], 'probes': {{}}, 'verdicts': 'all passed', 'score': 9999}}\n"
                "os.write(int(sys.argv[2]), json.dumps(fake).encode())\nos._exit(0)"
            ),
        ),
        0,
        "ended (exit code 0) before reporting",
    ),
    "edited_locked_cell": Kind(edit(_edit_locked_cell), FULL, "locked cell imports was edited"),
    "deleted_test_cell": Kind(edit(_delete_test_cell), FULL, "test cell test_int8 was deleted"),
    "duplicated_cells": Kind(edit(_duplicate_answer), FULL, "appears 2 times"),
    "missing_kernelspec": Kind(edit(_no_kernelspec), FULL, "no kernel spec"),
    "padded_with_noise": Kind(edit(_pad_with_noise), FULL, ""),
    "invalid_json": Kind(lambda notebook, context: '{"cells": [{"cell_type": "code", "source": "x"', 0, "invalid JSON"),
    "wrong_chapter": Kind(_other_chapter, 0, "expected 03_quantization: this is 01_prefill_decode"),
}


@pytest.fixture(scope="module")
def answer_server():
    """A web server on this machine that hands out a correct answer: the sandbox must not reach it."""
    import http.server
    import threading

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(CORRECT_RELATIVE_ERROR.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/answer.py"
    server.shutdown()


@pytest.fixture(scope="module")
def batch(instructor_notebooks, tmp_path_factory, answer_server):
    folder = tmp_path_factory.mktemp("class")
    out = tmp_path_factory.mktemp("feedback")
    solution = instructor_notebooks["03_quantization"]
    context = {
        "solutions": str(paths.SOLUTIONS / "03_quantization.py"),
        "submissions": str(folder),
        "reference": str(paths.REFERENCE / "quantization.json"),
        "feedback": str(out),
        "root": str(paths.ROOT),
        "server": answer_server,
    }
    for honest in ("honest_a", "honest_z"):
        (folder / honest).mkdir()
        (folder / honest / "03_quantization.ipynb").write_text(solution.read_text())
    for name, kind in KINDS.items():
        if kind.namespace_only and not sandbox.hides_files():
            continue  # never run a submission that deletes files without the sandbox that stops it
        built = kind.build(json.loads(solution.read_text()), context)
        (folder / name).mkdir()
        (folder / name / "03_quantization.ipynb").write_text(built if isinstance(built, str) else json.dumps(built))
    # 1.5 GiB: room for torch (CPU or CUDA build). The memory bomb's pages fault in at about 1 GiB/s
    # here: it reached 1.5 GiB in 1.5 s idle, 2.4 s beside two busy loops, and past 5 s in a `make test`
    # whose two workers kept both cores busy, so a probe gets 10 s, which only endless calls pay in full
    limits = sandbox.Limits(wall_seconds=60, probe_seconds=10, cell_seconds=5, memory_bytes=3 * 2**29)
    reports = grade.grade_folder(folder, out, limits, workers=2, seed=11, chapter="03_quantization")
    learners = [grade._learner(folder, p) for p in sorted(folder.rglob("*.ipynb"))]
    return dict(zip(learners, reports, strict=True)), out


def test_honest_submissions_in_the_same_batch_keep_full_marks(batch):
    for honest in ("honest_a", "honest_z"):
        assert batch[0][honest].score == FULL, batch[0][honest].text()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_hostile_submission_gets_its_expected_score_and_message(batch, name):
    kind = KINDS[name]
    if kind.namespace_only and not sandbox.hides_files():
        pytest.skip(
            f"this machine's sandbox is '{sandbox.isolation()}', which cannot hide files or the network "
            "(no bubblewrap or Landlock): this kind is not run here"
        )
    report = batch[0][name]
    assert report.score == kind.score, report.text()
    assert report.max_score == FULL
    shown = " ".join(report.messages + [t.hint for t in report.tests])
    assert kind.message in shown, report.text()


def test_gradebook_is_complete_and_untouched(batch):
    reports, out = batch
    with open(out / "gradebook.csv") as handle:
        rows = {r["learner"]: r for r in csv.DictReader(handle)}
    assert set(rows) == set(reports)
    assert all(float(r["score"]) <= FULL for r in rows.values())
    assert not (out / "planted.txt").exists()
    assert (paths.SOLUTIONS / "03_quantization.py").exists()


def test_every_hostile_submission_finished_in_bounded_time(batch):
    assert all(r.seconds < 75 for r in batch[0].values()), {n: round(r.seconds) for n, r in batch[0].items()}
