"""A generated class graded, for ``make bench``: a class of any size with a stated mix (solutions,
blanks, planted mistakes, one hostile answer in twenty), graded in one run with the grader's peak
memory, against a fresh interpreter per submission, and in shards merged; whether every submission
kept the grade its answers earn; and the similarity report's pair search at scale.

Not handled: shards on several machines (they run one after another here, each with every core, and
the figure for several machines is computed from their times)."""

from __future__ import annotations

import json
import statistics
import time

from course import paths, timing

KINDS = ["solution", "blank", "planted", "solution", "planted", "blank", "solution", "planted", "blank", "solution"] * 2
KINDS[3] = "hostile"  # one submission in twenty misbehaves
HOSTILE = {  # appended to the last answer cell of a solution (no other exercise calls it)
    "endless loop": "def {name}(*args, **kwargs):\n    while True:\n        pass\n",
    "memory hog": "def {name}(*args, **kwargs):\n    return len([bytearray(2**26) for _ in range(400)])\n",
    "os._exit": "import os\nos._exit(0)\n",
}


def _planted() -> dict[str, list]:
    """Each chapter's planted mistakes (``autograder/mistakes/<slug>.py``), by chapter."""
    from autograder.mistakes import planted

    return {source.stem: list(planted(paths.slug(source)).values()) for source in paths.chapter_sources()}


def generated_class(folder, n: int) -> dict[str, tuple[str, object]]:
    """``n`` submissions under ``folder``: the chapters in turn and, independently, the kinds of
    :data:`KINDS` in turn (solutions, blanks, planted mistakes, one hostile in twenty), so that
    every size of class has that mix; each chapter's planted mistakes in turn, and the hostile
    answers in turn across the class: relative path -> (kind, the planted mistake or hostile name)."""
    from collections import Counter

    import nbformat

    from autograder import release
    from autograder.chapters import CHAPTERS

    chapters = [source.stem for source in paths.chapter_sources()]
    solutions = {s.stem: nbformat.writes(release.instructor_notebook(s)) for s in paths.chapter_sources()}
    planted = _planted()
    made, turns = {}, Counter()
    for i in range(n):
        chapter = chapters[i % len(chapters)]
        kind = KINDS[i % len(KINDS)]  # 20 kinds, 9 chapters: every chapter meets every kind in 180 submissions
        if kind == "planted" and not planted[chapter]:
            kind = "solution"
        relative = f"learner{i:05d}/{chapter}.ipynb"
        target = folder / relative
        target.parent.mkdir(parents=True)
        if kind == "blank":
            target.write_bytes((paths.NOTEBOOKS / f"{chapter}.ipynb").read_bytes())
            made[relative] = (kind, None)
            continue
        notebook = json.loads(solutions[chapter])
        detail = None
        if kind == "planted":
            detail = planted[chapter][turns[chapter] % len(planted[chapter])]
            turns[chapter] += 1
            grade_id, source = detail.grade_id, detail.source
        elif kind == "hostile":
            detail = list(HOSTILE)[turns["hostile"] % len(HOSTILE)]
            turns["hostile"] += 1
            exercise = CHAPTERS[chapter][-1]
            grade_id = exercise.grade_id
        for cell in notebook["cells"]:
            if kind != "solution" and cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
                if kind == "planted":
                    cell["source"] = source
                else:
                    cell["source"] = "".join(cell["source"]) + "\n" + HOSTILE[detail].format(name=exercise.defines[0])
        target.write_text(json.dumps(notebook))
        made[relative] = (kind, detail)
    return made


def kept_their_grades(made: dict, reports: dict) -> list[str]:
    """What went wrong: a solution short of full marks, a blank copy with points, a planted mistake
    misjudged (``autograder.mistakes.misjudged``), a hostile answer that cost its
    submission's other exercises (one that ends the whole sandbox at definition costs them all)."""
    from autograder.chapters import CHAPTERS
    from autograder.mistakes import misjudged

    wrong = []
    for relative, (kind, detail) in made.items():
        report = reports[relative]
        if kind == "hostile" and detail != "os._exit":
            last = CHAPTERS[report.chapter][-1].grade_id
            lost = [t.id for t in report.tests if not t.passed and not t.id.startswith(f"{last}.")]
            if lost:
                wrong.append(f"{relative}: hostile {detail} in {last} cost {', '.join(lost)}")
        if kind == "solution" and report.score != report.max_score:
            wrong.append(f"{relative}: solution got {report.score:g}/{report.max_score:g}")
        elif kind == "blank" and report.score != 0:
            wrong.append(f"{relative}: blank copy got {report.score:g}")
        elif kind == "planted" and (misses := misjudged(report, detail)):
            wrong.append(f"{relative}: planted {detail.grade_id}: {'; '.join(misses)}")
    return wrong


class PeakMemory:
    """The largest memory this process and every process under it (the sandboxes) held together,
    sampled as proportional set sizes (shared pages counted once), from a thread."""

    def __init__(self, every: float = 0.25):
        import os
        import threading

        self.peak, self.every, self._stop = 0, every, threading.Event()
        self._leader = os.getpid()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from autograder import sandbox

        while not self._stop.wait(self.every):
            self.peak = max(self.peak, sandbox.tree_bytes(self._leader))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def grading_throughput(n: int, shard_count: int, baseline: bool = True) -> dict[str, float]:
    """Grade ``n`` generated submissions in one run, then as ``shard_count`` shards merged; check
    that every honest submission kept its grade and that the merge equals the single run. With
    ``baseline``, the same class first with a fresh interpreter per submission (``AUTOGRADER_WARM=0``,
    the path where the system cannot fork), the rate to compare with, and its grades with the
    warm sandbox's."""
    import os
    import resource
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from autograder import grade, similarity

    cores = timing.usable_cpus()
    print(f"\n== grading a class: {n} generated submissions, {cores} worker(s), one per usable CPU ==")
    print(f"load average before: {os.getloadavg()[0]:.1f} (other work on this machine slows every figure below)")
    results = {"load_average_before": round(os.getloadavg()[0], 1)}
    with tempfile.TemporaryDirectory(prefix="class-") as work:
        folder, out = Path(work) / "submissions", Path(work) / "feedback"
        made = generated_class(folder, n)
        mix = {kind: sum(k == kind for k, _ in made.values()) for kind in ("solution", "blank", "planted", "hostile")}
        print("mix: " + ", ".join(f"{count} {kind}" for kind, count in mix.items()))
        if baseline:
            results.update(_fresh_baseline(folder, Path(work) / "fresh", n, cores))
        started = time.perf_counter()
        with PeakMemory() as memory:
            reports = grade.grade_folder(folder, out, workers=cores, seed=1)
        wall = time.perf_counter() - started
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        files = sorted(folder.rglob("*.ipynb"))
        by_path = {p.relative_to(folder).as_posix(): r for p, r in zip(files, reports, strict=True)}
        slowest = max(by_path, key=lambda r: by_path[r].seconds)
        per_core = n / (wall / 60) / cores
        biggest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB -> GiB
        print(
            f"{wall:.0f} s for {n}: {n / (wall / 60):.1f} submissions per minute, {per_core:.1f} per minute per core; "
            f"median {statistics.median(r.seconds for r in reports):.1f} s a submission (a warm sandbox's children)"
        )
        if baseline:
            grades, notes = compare_gradebooks(Path(work) / "fresh", out)
            speedup = per_core / results["fresh_per_minute_per_core"]
            print(
                f"against a fresh interpreter per submission: {speedup:.1f}x; grades, Canvas file and similarity "
                + ("report identical" if grades else "report DIFFER")
                + (f"; {notes} notes differ (a resource limit reached another way)" if notes else "")
            )
            results.update(warm_speedup=round(speedup, 2), warm_equals_fresh=grades, warm_notes_differing=notes)
        kind, detail = made[slowest]
        what = f"{kind} ({detail})" if kind == "hostile" else kind
        print(f"slowest: {slowest}, {what}, {by_path[slowest].seconds:.1f} s")
        print(
            f"peak memory: {memory.peak / 2**30:.2f} GiB for the grader and its sandboxes together; "
            f"the largest sandbox process {biggest:.2f} GiB"
        )
        wrong = kept_their_grades(made, by_path)
        print(
            f"{n - len(wrong)} of {n} submissions got exactly the grade their answers earn (hostile ones: their other "
            f"exercises' points; the rest in the same batch: all of theirs)"
        )
        for line in wrong[:10]:
            print(f"  WRONG {line}")
        start = time.perf_counter()
        graded, _ = grade.merge(out)
        merging = time.perf_counter() - start
        start = time.perf_counter()
        matches, _ = similarity.find(graded)
        print(
            f"merging the class's files again: {merging:.1f} s, of which the similarity report "
            f"{time.perf_counter() - start:.1f} s ({len(matches)} matches)"
        )
        results.update(
            submissions=n,
            cores=cores,
            wall_seconds=round(wall, 1),
            per_minute_per_core=round(per_core, 2),
            slowest_seconds=round(by_path[slowest].seconds, 1),
            slowest=what,
            peak_memory_gib=round(memory.peak / 2**30, 2),
            kept_grades=f"{n - len(wrong)}/{n}",
        )
        if shard_count > 1:
            split = Path(work) / "sharded"
            times = []
            for index in range(shard_count):  # one after another, each with every core, as each machine would
                start = time.perf_counter()
                command = [sys.executable, "-m", "autograder", "grade-folder", str(folder), "--out", str(split)]
                command += ["--shard", f"{index}/{shard_count}", "--seed", "1", "--workers", str(cores)]
                subprocess.run(command, check=True, capture_output=True)
                times.append(time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "autograder", "merge", str(split)], check=True, capture_output=True)
            merging = time.perf_counter() - start
            grades, notes = compare_gradebooks(out, split)
            print(
                f"{shard_count} shards: {', '.join(f'{t:.0f} s' for t in times)} (each with {cores} cores), merge "
                f"{merging:.1f} s; on {shard_count} machines like this one: {max(times) + merging:.0f} s against "
                f"{wall:.0f} s on one ({wall / (max(times) + merging):.1f}x); merged grades, Canvas file and "
                + ("similarity report identical to the single run" if grades else "similarity report DIFFER")
                + (f"; {notes} notes differ (a resource limit reached another way under load)" if notes else "")
            )
            results.update(
                shard_seconds=[round(t, 1) for t in times],
                merge_seconds=round(merging, 1),
                sharded_wall_seconds=round(max(times) + merging, 1),
                merged_equals_single=grades,
                notes_differing=notes,
            )
    results.update(similarity_scale(5000))
    return results


def _fresh_baseline(folder, out, n: int, cores: int) -> dict[str, float]:
    """The class graded with a fresh interpreter per submission, as before the warm sandbox."""
    import os

    from autograder import grade

    os.environ["AUTOGRADER_WARM"] = "0"
    try:
        started = time.perf_counter()
        reports = grade.grade_folder(folder, out, workers=cores, seed=1)
        wall = time.perf_counter() - started
    finally:
        del os.environ["AUTOGRADER_WARM"]
    per_core = n / (wall / 60) / cores
    median = statistics.median(r.seconds for r in reports)
    print(
        f"a fresh interpreter per submission (AUTOGRADER_WARM=0): {wall:.0f} s for {n}, {per_core:.1f} per minute "
        f"per core; median {median:.1f} s a submission"
    )
    return {"fresh_wall_seconds": round(wall, 1), "fresh_per_minute_per_core": round(per_core, 2)}


def compare_gradebooks(one, other) -> tuple[bool, int]:
    """Whether two output folders hold the same grades (gradebook.csv but its ``messages`` column,
    canvas.csv, similarity.csv, byte for byte), and how many rows' ``messages`` differ: a hostile
    answer stopped at the memory limit in one run may reach the time limit first in another (the
    same points, another note)."""
    import csv

    def rows(folder):
        with open(folder / "gradebook.csv", newline="") as handle:
            return [(row[:-1], row[-1]) for row in csv.reader(handle)]

    a, b = rows(one), rows(other)
    grades = [r for r, _ in a] == [r for r, _ in b] and all(
        (one / name).read_bytes() == (other / name).read_bytes() for name in ("canvas.csv", "similarity.csv")
    )
    return grades, sum(x != y for (_, x), (_, y) in zip(a, b, strict=False))


def similarity_scale(n: int) -> dict[str, float]:
    """The similarity report's pair search on ``n`` distinct answers to one exercise (the chapter's
    solution with lines of its own added at random places), ten of them renamed copies of one."""
    import random

    from autograder import similarity

    material = similarity.chapter_material("03_quantization")
    solution = material["references"]["quantize_dequantize"]["solutions/03_quantization.py"]
    rng = random.Random(0)
    extras = [f"    check_{k} = weight.shape[{k % 2}] * {{}}\n" for k in range(50)]
    answers = {}
    for i in range(n):
        lines = solution.splitlines(keepends=True)
        for _ in range(rng.randint(3, 8)):
            extra = rng.choice(extras).format(rng.randint(0, 10**6)).replace("check_", f"c{i}_")
            lines.insert(rng.randint(2, len(lines) - 1), extra)
        answers[f"learner{i}"] = "".join(lines)
    for i in range(1, 10):
        answers[f"learner{i}"] = answers["learner0"].replace("c0_", f"mine{i}_")
    start = time.perf_counter()
    matches, _ = similarity.compare(
        answers, {a: a for a in answers}, material["stubs"]["quantize_dequantize"], exercise="quantize_dequantize"
    )
    seconds = time.perf_counter() - start
    found = {(m.a, m.b) for m in matches}
    planted = [tuple(sorted((f"learner{i}", f"learner{j}"))) for i in range(10) for j in range(i + 1, 10)]
    copies = sum(pair in found for pair in planted)
    print(
        f"similarity, {n} answers to one exercise: {seconds:.1f} s; {copies} of the 45 pairs among 10 planted copies "
        f"found, {len(matches) - copies} other pairs listed"
    )
    return {"similarity_answers": n, "similarity_seconds": round(seconds, 1)}
