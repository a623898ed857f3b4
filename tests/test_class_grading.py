"""A class graded at scale: four shards merged into exactly what one run gives, the Canvas and
per-chapter exports with and without a roster, the HTML feedback (safe against what a submission
contains), and the report of answers that look copied."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autograder import feedback, grade, gradebook, shards, similarity
from autograder.chapters import CHAPTERS
from course import paths

from conftest import GENEROUS, copy_into, load_tool

SEED = 5
FULL = int(sum(e.points for e in CHAPTERS["03_quantization"]))  # chapter 3's exercises and quiz
IVY = os.fsdecode(b"ivy<script>\xff")  # a folder name that is not even UTF-8
# quantize_dequantize written its own way (a loop over groups): correct, and unlike the course's code
CLEO = '''def quantize_dequantize(weight, bits, group_size=None):
    """Round-trip `weight` (rows, cols) through symmetric `bits`-bit codes, per row or per group."""
    n_rows, n_cols = weight.shape
    size = n_cols if group_size is None else group_size
    if n_cols % size:
        raise ValueError(f"group_size {size} does not divide {n_cols} columns")
    top = 2 ** (bits - 1) - 1
    out = torch.empty_like(weight)
    for start in range(0, n_cols, size):
        block = weight[:, start:start + size]
        peak = block.abs().max(dim=1, keepdim=True).values
        step = torch.where(peak == 0, torch.ones_like(peak), peak / top)
        out[:, start:start + size] = torch.clamp(torch.round(block / step), -top, top) * step
    return out
'''
# the same answer copied: names changed, comments and a docstring of its own, another layout
DAN = '''def quantize_dequantize(weight, bits, group_size=None):
    """My own quantizer."""
    r, c = weight.shape   # rows and columns
    g = c if group_size is None else group_size
    if c % g:
        raise ValueError(f"group_size {g} does not divide {c} columns")
    q_max = 2**(bits-1) - 1
    result = torch.empty_like(weight)
    # one group of columns at a time
    for first in range(0, c, g):
        chunk = weight[:, first:first+g]
        biggest = chunk.abs().max(dim=1, keepdim=True).values
        s = torch.where(biggest == 0, torch.ones_like(biggest), biggest / q_max)
        result[:, first:first+g] = torch.clamp(torch.round(chunk / s), -q_max, q_max) * s
    return result
'''
HOSTILE_ERROR = """def relative_error(weight, approx):
    "</code></pre><script>alert('answer')</script>"
    print("<script>alert('printed')</script>")
    return 2 * float((weight - approx).norm() / weight.norm())  # </pre><img src=x onerror=alert(1)>
"""
HOSTILE_RAISE = """def quantize_dequantize(weight, bits, group_size=None):
    raise ValueError("<img src=x onerror=alert('raised')> <script>alert('raised')</script>")
"""


def _with_answers(source: Path, answers: dict[str, str]) -> str:
    notebook = json.loads(source.read_text())
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    return json.dumps(notebook)


@pytest.fixture(scope="module")
def klass(instructor_notebooks, tmp_path_factory) -> Path:
    """A class of eleven submissions over two chapters, spread over all four shards."""
    folder = tmp_path_factory.mktemp("class")
    solution3, solution4 = instructor_notebooks["03_quantization"], instructor_notebooks["04_kv_cache"]
    blank3, blank4 = paths.NOTEBOOKS / "03_quantization.ipynb", paths.NOTEBOOKS / "04_kv_cache.ipynb"
    for learner, source in [("ada", solution3), ("ada/old", blank3), ("bob", solution3), ("eve", blank3)]:
        copy_into(source, folder / learner, "03_quantization.ipynb")
    copy_into(blank3, folder / IVY, "03_quantization.ipynb")
    copy_into(solution4, folder / "fay", "04_kv_cache.ipynb")
    copy_into(blank4, folder / "gus", "04_kv_cache.ipynb")
    made = {
        "cleo": _with_answers(solution3, {"quantize_dequantize": CLEO}),
        "dan": _with_answers(solution3, {"quantize_dequantize": DAN}),
        "hal": _with_answers(solution3, {"relative_error": HOSTILE_ERROR, "quantize_dequantize": HOSTILE_RAISE}),
        "joe": '{"cells": [',
    }
    for learner, text in made.items():
        (folder / learner).mkdir()
        (folder / learner / "03_quantization.ipynb").write_text(text)
    return folder


@pytest.fixture(scope="module")
def single(klass, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("single")
    reports = grade.grade_folder(klass, out, GENEROUS, seed=SEED)
    files = sorted(klass.rglob("*.ipynb"))
    return out, {p.relative_to(klass).as_posix(): r for p, r in zip(files, reports, strict=True)}


@pytest.fixture(scope="module")
def sharded(klass, tmp_path_factory) -> tuple[Path, list[int]]:
    """The class in four shards (as four machines would grade it), merged by the command line."""
    out = tmp_path_factory.mktemp("sharded")
    sizes = [len(grade.grade_folder(klass, out, GENEROUS, workers=2, seed=SEED, shard=(i, 4))) for i in range(4)]
    assert not (out / "gradebook.csv").exists(), "a shard must leave the class's files to the merge"
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "merge", str(out)], capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, done.stderr
    assert "merged 11 notebooks" in done.stdout
    return out, sizes


def _files(out: Path) -> dict[str, bytes]:
    files = [p for p in out.rglob("*") if p.is_file() and "parts" not in p.parts]
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in files}


def test_four_shards_merge_into_what_one_run_gives(single, sharded, klass):
    (one, _), (merged, sizes) = single, sharded
    assert sum(sizes) == 11 and min(sizes) >= 1, f"every shard must grade a share: {sizes}"
    alone, joined = _files(one), _files(merged)
    assert sorted(alone) == sorted(joined)
    assert {"gradebook.csv", "canvas.csv", "similarity.csv", "similarity.html", "class-notes.md"} <= set(alone)
    assert len([name for name in alone if name.endswith(".html") and name != "similarity.html"]) == 11
    for name, content in alone.items():
        if name.endswith(".json"):  # the time a submission took differs from run to run, nothing else
            a, b = json.loads(content), json.loads(joined[name])
            assert {**a, "seconds": 0} == {**b, "seconds": 0}, name
        else:
            assert content == joined[name], name


def test_every_submission_is_graded_by_exactly_one_shard():
    names = [f"learner{i}/{chapter}.ipynb" for i in range(300) for chapter in ("03_quantization", "04_kv_cache")]
    owners = [[i for i in range(4) if shards.owns(name, i, 4)] for name in names]
    assert all(len(found) == 1 for found in owners)
    counts = [sum(found == [i] for found in owners) for i in range(4)]
    assert min(counts) > 100, counts  # 600 files: about 150 each
    assert shards.submission_seed(SEED, names[0]) == shards.submission_seed(SEED, names[0])
    assert len({shards.submission_seed(SEED, name) for name in names}) == len(names)


def test_single_run_results_are_the_expected_grades(single):
    _, reports = single
    assert reports["ada/03_quantization.ipynb"].score == FULL
    assert reports["cleo/03_quantization.ipynb"].score == FULL, reports["cleo/03_quantization.ipynb"].text()
    assert reports["dan/03_quantization.ipynb"].score == FULL
    assert reports["eve/03_quantization.ipynb"].score == 0
    assert reports["fay/04_kv_cache.ipynb"].score == reports["fay/04_kv_cache.ipynb"].max_score > 0
    hal = reports["hal/03_quantization.ipynb"]
    failed = {t.id.split(".")[0] for t in hal.tests if not t.passed}
    assert failed == {"quantize_dequantize", "relative_error"}, hal.text()


def test_merge_refuses_parts_that_are_missing_or_of_another_class(sharded, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(sharded[0] / "parts", out / "parts")
    shards.read_parts(out)  # whole: no error
    part = out / "parts" / "shard-2-of-4.json"
    data = json.loads(part.read_text())
    part.unlink()
    with pytest.raises(shards.MergeError, match=r"missing the part of shard 2/4.*--shard 2/4"):
        grade.merge(out)
    part.write_text(json.dumps({**data, "class_seed": SEED + 1}))
    with pytest.raises(shards.MergeError, match="shard 2/4 was graded with seed 6.*same --seed"):
        grade.merge(out)
    part.write_text(json.dumps({**data, "graded": data["graded"][:1]}))
    with pytest.raises(shards.MergeError, match=f"grade {11 - len(data['graded']) + 1} submissions, the class has 11"):
        grade.merge(out)
    part.write_text(json.dumps(data))
    shutil.copy(part, out / "parts" / "shard-0-of-2.json")
    with pytest.raises(shards.MergeError, match="different splits"):
        grade.merge(out)
    with pytest.raises(shards.MergeError, match="missing the part of shard 1/2"):
        grade.merge(out, count=2)


def test_shards_need_a_valid_split_and_one_seed(klass, tmp_path):
    with pytest.raises(shards.ShardError, match="same --seed"):
        grade.grade_folder(klass, tmp_path, GENEROUS, shard=(1, 4))
    with pytest.raises(shards.ShardError, match="give the roster to the merge"):
        grade.grade_folder(klass, tmp_path, GENEROUS, seed=1, shard=(1, 4), roster=tmp_path / "roster.csv")
    for text in ("4/4", "-1/4", "two", "1/0"):
        with pytest.raises(shards.ShardError, match="I/N"):
            shards.parse_shard(text)
    assert shards.parse_shard(" 3/8") == (3, 8)
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade-folder", str(klass), "--shard", "4/4"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "indices run from 0 to N-1" in done.stderr


def test_command_line_grades_a_class_and_says_what_to_know(tmp_path):
    folder = tmp_path / "class"
    (folder / "joe").mkdir(parents=True)
    (folder / "joe" / "03_quantization.ipynb").write_text('{"cells": [')
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade-folder", str(folder), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "sandbox: " in done.stderr  # the mode it got, first
    assert "note: joe/03_quantization.ipynb: its chapter is unknown" in done.stdout
    assert "note: similar answers to review: 0 pairs" in done.stdout
    assert "graded 1 notebooks" in done.stdout


# --- the LMS ---------------------------------------------------------------------------------------


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_canvas_export_without_a_roster_names_learners_by_folder(single):
    out, reports = single
    rows = _rows(out / "canvas.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "03_quantization", "04_kv_cache"]
    kv_points = str(int(reports["fay/04_kv_cache.ipynb"].max_score))
    assert rows[1] == ["Points Possible", "", "", "", "", str(FULL), kv_points]
    by_login = {row[3]: row for row in rows[2:]}
    assert set(by_login) == {"ada", "bob", "cleo", "dan", "eve", "fay", "gus", "hal", "ivy<script>?"}
    assert by_login["ada"][5:] == [str(FULL), ""]  # handed in twice: the higher score counts
    assert by_login["hal"][5] == f"{reports['hal/03_quantization.ipynb'].score:g}"
    assert by_login["gus"][5:] == ["", "0"]
    notes = (out / "class-notes.md").read_text()
    assert "ada handed in 03_quantization 2 times" in notes
    assert "joe/03_quantization.ipynb: its chapter is unknown" in notes
    chapter = _rows(out / "grades" / "03_quantization.csv")
    assert chapter[0] == ["learner", "name", "sis_login_id", "score", "max_score", "percent", "notebook"]
    assert ["cleo", "cleo", "cleo", str(FULL), str(FULL), "100.0", "03_quantization.ipynb"] in chapter


def test_canvas_export_with_a_canvas_roster(sharded, tmp_path):
    roster = tmp_path / "export.csv"
    roster.write_text(
        "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,03_quantization (4321),Current Score\n"
        f"    Points Possible,,,,,{FULL},(read only)\n"
        '"Lovelace, Ada",101,S101,ada,Monday,,\n'
        '"Clarke, Cleo",103,S103,cleo,Tuesday,,\n'
        '"Dane, Dan",104,S104,S-dan,Tuesday,,\n'
    )
    out = tmp_path / "out"
    shutil.copytree(sharded[0] / "parts", out / "parts")
    _, notes = grade.merge(out, roster)
    rows = _rows(out / "canvas.csv")
    assert rows[0][5:] == ["03_quantization (4321)", "04_kv_cache"]  # the roster's own assignment column
    assert rows[2:] == [
        ["Lovelace, Ada", "101", "S101", "ada", "Monday", str(FULL), ""],
        ["Clarke, Cleo", "103", "S103", "cleo", "Tuesday", str(FULL), ""],
    ]
    assert any("7 learners are not in the roster" in note and "dan" in note for note in notes)
    with_learner = tmp_path / "with-learner.csv"
    with_learner.write_text("learner,Student,SIS Login ID\ndan,Dan Dane,S-dan\n")
    grade.merge(out, with_learner)
    assert ["Dan Dane", "", "", "S-dan", "", str(FULL), ""] in _rows(out / "canvas.csv")


def test_a_roster_that_cannot_name_learners_says_what_to_do(tmp_path):
    bad = tmp_path / "names.csv"
    bad.write_text("name,email\nAda,ada@example.org\n")
    with pytest.raises(gradebook.RosterError, match="add a column `learner`"):
        gradebook.read_roster(bad)
    twice = tmp_path / "twice.csv"
    twice.write_text("Student,SIS Login ID\nAda,ada\nAnother Ada,ada\n")
    with pytest.raises(gradebook.RosterError, match="more than one learner"):
        gradebook.read_roster(twice)


# --- feedback pages --------------------------------------------------------------------------------

ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "meter", "ul", "li"}
ALLOWED_TAGS |= {"table", "tr", "th", "td", "code", "span", "pre", "br", "div"}


class Elements(HTMLParser):
    """Every element and attribute of a page, and the text of its style sheet."""

    def __init__(self):
        super().__init__()
        self.tags, self.attributes, self.style, self.inside = set(), set(), "", ""

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        self.inside = tag
        if tag == "meta" and ("http-equiv", "Content-Security-Policy") in attrs:
            self.policy = dict(attrs)["content"]

    def handle_endtag(self, tag):
        self.inside = ""

    def handle_data(self, data):
        if self.inside == "style":
            self.style += data


def _parse(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


@pytest.mark.parametrize("stem", ["hal__03_quantization", f"{IVY}__03_quantization", "joe__03_quantization"])
def test_feedback_pages_run_no_script_from_a_submission(single, stem):
    page = (single[0] / f"{stem}.html").read_text()
    elements = _parse(page)
    assert elements.tags <= ALLOWED_TAGS, elements.tags - ALLOWED_TAGS
    assert not any(name.startswith("on") for name in elements.attributes)
    assert "script-src" not in elements.policy and "default-src 'none'" in elements.policy
    assert "unsafe-inline" not in elements.policy
    digest = base64.b64encode(hashlib.sha256(elements.style.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in elements.policy  # the page's own style sheet, and nothing else, applies


def test_feedback_page_shows_score_checks_hints_and_values(single):
    out, reports = single
    hal = reports["hal/03_quantization.ipynb"]
    page = (out / "hal__03_quantization.html").read_text()
    assert f"{hal.score:g} / {FULL} points" in page
    assert "&lt;script&gt;alert(&#x27;answer&#x27;)&lt;/script&gt;" in page  # the learner's code, shown as text
    assert "raised ValueError: &lt;img src=x onerror=alert(&#x27;raised&#x27;)&gt;" in page
    failing = next(t for t in hal.tests if t.id.startswith("relative_error") and not t.passed)
    expected, got = feedback.expected_and_got(failing.hint)
    assert expected and got and float(got) == pytest.approx(2 * float(expected), rel=1e-4)
    assert f"<td>{expected}</td><td>{got}</td>" in page
    for test in hal.tests:
        assert f"<code>{test.id}</code>" in page
    blank = (out / "eve__03_quantization.html").read_text()
    assert f"0 / {FULL} points" in blank and "not answered yet" in blank


def test_expected_and_got_are_read_from_hints():
    assert feedback.expected_and_got("forgot the sign (expected 4.25, got 4)") == ("4.25", "4")
    assert feedback.expected_and_got("3 of 64 values differ; at (0, 3) expected 0.125, got 0.5") == ("0.125", "0.5")
    assert feedback.expected_and_got("not answered yet: replace ...") == ("", "")


# --- similar answers -------------------------------------------------------------------------------


def test_similarity_report_lists_the_copy_and_the_course_code(single):
    out, _ = single
    with open(out / "similarity.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    ada, bob, cleo, dan = (f"{name}/03_quantization.ipynb" for name in ("ada", "bob", "cleo", "dan"))
    mine = [r for r in rows if r["exercise"] == "quantize_dequantize"]
    pairs = {(r["a"], r["b"]): float(r["similarity"]) for r in mine if r["kind"] == "pair"}
    assert set(pairs) == {(ada, bob), (cleo, dan)}, mine  # the solution handed in twice, and the renamed copy
    assert pairs[(cleo, dan)] >= 0.9
    assert {r["a"] for r in mine if r["kind"] == "reference"} == {ada, bob}  # cleo's own way is not the course's
    assert "solutions/03_quantization.py" in {r["b"] for r in mine}
    assert not [r for r in rows if r["exercise"] in ("relative_error", "effective_bits")]  # one line: too short
    page = (out / "similarity.html").read_text()
    assert "never as a verdict" in page and _parse(page).tags <= ALLOWED_TAGS


def test_normalising_ignores_names_layout_comments_and_docstrings():
    assert similarity.tokens(CLEO) == similarity.tokens(DAN)
    assert similarity.tokens("x = torch.round(w)") != similarity.tokens("x = torch.trunc(w)")  # the API stays
    assert similarity.tokens("def f(:\n  pass")  # a syntax error still gives what could be read


def test_only_distinctive_passages_pair_answers():
    base = "def f(w, b):\n    s = w.abs().amax(dim=1) / (2 ** (b - 1) - 1)\n    q = torch.round(w / s).clamp(-7, 7)\n"
    common = {f"learner{i}": base + "    return q * s\n" for i in range(30)}  # the natural answer, 30 times
    rare = base + (
        "    out = q.float() * s.float()\n    out[torch.isnan(out)] = 0\n"
        "    assert out.shape == w.shape, (out.shape, w.shape)\n    return out.contiguous()\n"
    )
    answers = {**common, "x": rare, "y": rare.replace("out", "res")}
    owners = {name: name for name in answers}
    found, short = similarity.compare(answers, owners, threshold=0.8)
    assert [(m.a, m.b) for m in found] == [("x", "y")] and short == 0
    assert found[0].similarity == 1.0


@pytest.mark.parametrize("n", [60, 1000])
def test_a_benchmark_class_has_the_stated_mix_at_every_size(n, tmp_path):
    """``make bench`` grades a class of ``n``: one submission in twenty hostile (each kind of hostile
    answer in turn), the others solutions, blanks and planted mistakes in near-equal parts, and every
    chapter present in near-equal numbers."""
    from collections import Counter

    load_tool("benchmarks")  # which puts tools/ on the path, where make bench's parts are
    from bench import grading

    made = grading.generated_class(tmp_path, n)
    kinds = Counter(kind for kind, _ in made.values())
    assert len(made) == n and kinds["hostile"] == n // 20
    hostile = Counter(detail for kind, detail in made.values() if kind == "hostile")
    assert set(hostile) == set(grading.HOSTILE) and max(hostile.values()) - min(hostile.values()) <= 1
    assert min(kinds["solution"], kinds["blank"], kinds["planted"]) >= 0.25 * n
    chapters = Counter(path.split("/")[1] for path in made)
    assert len(chapters) == len(CHAPTERS) and max(chapters.values()) - min(chapters.values()) <= 1
