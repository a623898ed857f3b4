"""A class graded in shards: which files each shard grades, each submission's seed, the partial gradebooks.

A shard is an ordinary grader process started by an existing scheduler (a Slurm job array task, a
pod of a Kubernetes Indexed Job) with ``--shard I/N``: it grades the submissions whose relative path
hashes to ``I`` modulo ``N`` and writes its part, ``parts/shard-I-of-N.json``, into the output folder
the shards share. ``merge`` (``grade.merge``) reads the parts back and writes the class's files,
the same bytes as one run over the whole folder, because everything a grade depends on is
fixed by the submission's path and the class seed, not by which machine graded it or in what order
(not handled: the seconds a submission took, and which limit, memory or time, an answer stopped
by both met first; the points are the same either way):

>>> owns("alice/03_quantization.ipynb", 1, 4), submission_seed(7, "alice/03_quantization.ipynb")
(True, 1594602101)

Before merging, the parts are checked against each other (same split, same class seed, same list
of submissions, same grader and release): a missing, stale or foreign part is an error that says
which shard to run again. Not handled: submissions added or removed while the shards run (the
listing check reports it; grade the class again).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from course import paths

PARTS = "parts"
FORMAT = 1  # the layout of a part file; parts of another layout are not merged
SHARD_USAGE = "--shard takes I/N, the shard's index from 0 and the number of shards, e.g. 0/4"


class ShardError(ValueError):
    """A shard asked for in a way that cannot work; the message says the right form."""


class MergeError(Exception):
    """The parts cannot be merged; the message says which shard to (re)run or what to delete."""


@dataclass
class Graded:
    """One graded submission of the class: where it was, whose it is, and its report (a ``grade.Report``)."""

    relative: str  # its path under the submissions folder, with forward slashes
    learner: str
    report: object

    @property
    def stem(self) -> str:
        """The name of its feedback files, its path with ``__`` for ``/``: ``alice__03_quantization``
        for ``alice/03_quantization.ipynb``, ``alice`` for ``alice.ipynb``."""
        return PurePosixPath(self.relative).with_suffix("").as_posix().replace("/", "__")


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; ShardError saying the form otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not match:
        raise ShardError(f"{SHARD_USAGE}, not {text!r}")
    return check_shard((int(match[1]), int(match[2])))


def check_shard(shard: tuple[int, int]) -> tuple[int, int]:
    index, count = shard
    if count < 1 or not 0 <= index < count:
        raise ShardError(f"{SHARD_USAGE}; shard {index} of {count} does not exist (indices run from 0 to N-1)")
    return index, count


def _number(text: str, bits: int) -> int:
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()  # any file name, even not UTF-8
    return int.from_bytes(digest[:8], "big") % 2**bits


def owns(relative: str, index: int, count: int) -> bool:
    """Whether shard ``index`` of ``count`` grades the submission at ``relative`` (a stable hash of
    the path alone: the same on every machine, whatever order the files are listed in)."""
    return _number(relative, 64) % count == index


def submission_seed(class_seed: int, relative: str) -> int:
    """The seed of one submission's hidden inputs: fixed by the class seed and the submission's
    path, so that every shard, and a run without shards, gives it the same inputs."""
    return _number(f"{class_seed}:{relative}", 31)


def release_fingerprint() -> str:
    """A digest of what decides a grade (the grader, the course's reference code, the released
    notebooks): shards of one class must all run the same release."""
    digest = hashlib.sha256()
    files = [*paths.ROOT.glob("autograder/**/*.py"), *paths.ROOT.glob("course/**/*.py")]
    files += paths.NOTEBOOKS.glob("*.ipynb")
    for path in sorted(files):
        digest.update(path.relative_to(paths.ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def listing_digest(relatives: list[str]) -> str:
    """A digest of the whole class's list of submissions, as one shard saw it."""
    return hashlib.sha256("\n".join(sorted(relatives)).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def part_path(out: Path, index: int, count: int) -> Path:
    return Path(out) / PARTS / f"shard-{index}-of-{count}.json"


def write_part(
    out: Path,
    graded: list[Graded],
    shard: tuple[int, int],
    class_seed: int,
    chapter: str | None,
    relatives: list[str],
) -> Path:
    """Write this shard's part of the gradebook; atomically, so that a shard killed half-way
    leaves no part that looks whole."""
    index, count = shard
    part = {
        "format": FORMAT,
        "shard": [index, count],
        "class_seed": class_seed,
        "chapter": chapter,
        "release": release_fingerprint(),
        "submissions": len(relatives),
        "listing": listing_digest(relatives),
        "graded": [
            {"relative": g.relative, "learner": g.learner, "report": g.report.as_json(), "answers": g.report.answers}
            for g in graded
        ],
    }
    target = part_path(out, index, count)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(part) + "\n")
    os.replace(temporary, target)
    return target


def read_parts(out: Path, count: int | None = None) -> tuple[dict, list[dict]]:
    """The parts in ``out/parts`` checked against each other: (what they share, every graded
    entry, sorted by path as one run sorts them). ``count`` picks the split when parts of
    several lie there. Raises :class:`MergeError`."""
    folder = Path(out) / PARTS
    found: dict[int, dict[int, Path]] = {}
    for path in folder.glob("shard-*-of-*.json"):
        match = re.fullmatch(r"shard-(\d+)-of-(\d+)\.json", path.name)
        if match:
            found.setdefault(int(match[2]), {})[int(match[1])] = path
    if not found:
        raise MergeError(
            f"no parts in {folder}: grade the shards first (python -m autograder grade-folder SUBMISSIONS "
            f"--out {out} --shard I/N --seed S, for I from 0 to N-1)"
        )
    if count is None:
        if len(found) > 1:
            splits = ", ".join(f"{n} shards" for n in sorted(found))
            raise MergeError(
                f"{folder} holds parts of different splits ({splits}): say which with --shards N, "
                "or delete the stale parts"
            )
        count = next(iter(found))
    if count not in found:
        raise MergeError(f"{folder} has no parts of a split into {count} shards")
    missing = [i for i in range(count) if i not in found[count]]
    if missing:
        raise MergeError(
            f"missing the part of shard {', '.join(f'{i}/{count}' for i in missing)}: run "
            f"`python -m autograder grade-folder ... --shard {missing[0]}/{count}` (the same --seed and --out), "
            "then merge again"
        )
    parts = []
    for index in range(count):
        path = found[count][index]
        try:
            part = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise MergeError(f"{path.name} cannot be read ({error}): run shard {index}/{count} again") from None
        if not isinstance(part, dict) or part.get("format") != FORMAT or part.get("shard") != [index, count]:
            raise MergeError(f"{path.name} is not a part this grader wrote: run shard {index}/{count} again")
        parts.append(part)
    shared = {key: parts[0][key] for key in ("class_seed", "chapter", "release", "submissions", "listing")}
    for index, part in enumerate(parts[1:], start=1):
        for key, value in shared.items():
            if part[key] != value:
                raise MergeError(_disagreement(key, index, count, part[key], value))
    entries = [entry for part in parts for entry in part["graded"]]
    relatives = [e["relative"] for e in entries]
    twice = sorted({r for r in relatives if relatives.count(r) > 1}) if len(set(relatives)) < len(relatives) else []
    if twice:
        raise MergeError(f"graded by two shards: {', '.join(twice[:5])}: the parts come from different splits")
    if len(entries) != shared["submissions"]:
        raise MergeError(
            f"the parts grade {len(entries)} submissions, the class has {shared['submissions']}: "
            "run every shard again with the same release"
        )
    entries.sort(key=lambda e: PurePosixPath(e["relative"]))
    return {"shards": count, **shared}, entries


def _disagreement(key: str, index: int, count: int, got, expected) -> str:
    what = {
        "class_seed": f"with seed {got}, shard 0/{count} with seed {expected}: give every shard the same --seed",
        "chapter": f"for chapter {got}, shard 0/{count} for {expected}: give every shard the same --chapter",
        "release": f"with another release of the grader ({got}, not {expected}): check out the same commit everywhere",
        "submissions": f"over {got} submissions, shard 0/{count} over {expected}: the folder changed between shards",
        "listing": f"over another list of submissions than shard 0/{count}: the folder changed between shards",
    }[key]
    return f"shard {index}/{count} was graded {what}, then grade the shards again"
