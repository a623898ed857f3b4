"""The line between the instructor's copy and the learners' copy, and what stands in for the
instructor's side in the learners' copy.

What only instructors may read lives in files of its own, which the learners' copy leaves out
whole (``autograder/learners_copy.py``'s ``LEFT_OUT``): the chapters' sources, whose solution
cells are the exercises' answers, and instructor-only modules (hidden checks, known mistakes, the
course's answers beyond an exercise's signature). Shipped code reaches them only through this
module:

- :func:`answers` ``("04_kv_cache")``: the chapter's answers, the solution cells of
  ``solutions/04_kv_cache.py`` run as grading runs a learner's (the grader-setup cells, then the
  answer cells in notebook order, in one namespace);
- :func:`module` ``("autograder.mistakes.kv_cache")``: an instructor-only module;
- :func:`yours_or_course`: a notebook's own function once written, else the chapter's answer
  (:func:`own_if_written`: else None).

Each returns a :class:`Withheld` namespace. In the instructor's copy its functions are the real
ones; while :func:`recording` is on, each outermost call is kept with its arguments and result.
The instructor's copy records them while it writes the learners' copy, running every visible check
on the solution, the blank answers and the known wrong answers, and the instructor's notebooks
(``learners_copy.record``). In the learners' copy, which has neither the sources nor the modules,
the namespace answers from those recordings: nothing there is rewritten source, only data.

A call is answered when a recording has the same function and arguments of the same structure:
numbers, strings and tensor shapes and dtypes equal, tensor values within ``RTOL`` (the same inputs
computed on another machine's BLAS can differ in the last bits). A call no recording answers
raises :class:`NotRecorded`, which says that the instructor's grader judges it.

Not handled: arguments that are not plain data (modules, generators, learners' functions), which
no recording answers; classes, which cannot be answered from recordings (a chapter records the
course's function that uses its class instead).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import torch

from course import paths, plain_data

RECORDINGS = paths.REFERENCE / "withheld"  # one <name>.json.gz per recorded run, in the learners' copy only
HIDDEN_CHECKS = RECORDINGS / "hidden_checks.json"  # grade_id -> hidden checks left out, in the learners' copy only
RTOL = 1e-6

_recording: dict | None = None  # key -> list of [args, kwargs, result], encoded; None when not recording
_depth = 0  # calls across the line now running: only the outermost is recorded
_recordings: dict | None = None  # the learners' copy's recordings, loaded on first use


class NotRecorded(RuntimeError):
    """A withheld function was called with arguments that no recording holds."""


def _recorded_call(name: str, function: Callable, args: tuple, kwargs: dict):
    """``function(*args, **kwargs)``, kept under ``name`` while recording when no other recorded call
    is running (only the outermost is kept: what the learners' copy replays)."""
    global _depth
    _depth += 1
    try:
        result = function(*args, **kwargs)
    finally:
        _depth -= 1
    if _recording is not None and _depth == 0:
        inputs = [plain_data.encode(args), plain_data.encode(kwargs)]
        if not _opaque(inputs):  # a call with an object no replay can match (a generator) is dead weight
            _recording.setdefault(name, []).append([*inputs, plain_data.encode(result)])
    return result


def _opaque(encoded) -> bool:
    """Whether ``encoded`` (plain data from ``plain_data.encode``) holds an object that is not plain data."""
    if isinstance(encoded, list):
        return any(_opaque(item) for item in encoded)
    if not isinstance(encoded, dict):
        return False
    if isinstance(encoded.get("dict"), dict):
        return any(_opaque(value) for value in encoded["dict"].values())
    if isinstance(encoded.get("tuple", encoded.get("list")), list):
        return _opaque(encoded.get("tuple", encoded.get("list")))
    return "object" in encoded


# --- the line between the copies -------------------------------------------------------------------


class Withheld:
    """A namespace of functions from the instructor's side of the line: ``label`` names it (the
    recordings' keys are ``<label>.<name>``), ``load()`` returns its functions by name, or None
    where they are not here (the learners' copy), and then each name answers from the recordings."""

    def __init__(self, label: str, load: Callable[[], dict | None]):
        self._label, self._load, self._found = label, load, ...

    def __repr__(self) -> str:
        return f"<withheld {self._label}>"

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if self._found is ...:
            self._found = self._load()
        key = f"{self._label}.{name}"
        if self._found is None:
            value = _replayed(key)
        elif name not in self._found:
            raise AttributeError(f"{self._label} has no {name}")
        elif isinstance(self._found[name], type) or not callable(self._found[name]):
            value = self._found[name]  # a class or a constant: not recorded (see the module docstring)
        else:
            value = _recorded(key, self._found[name])
        setattr(self, name, value)  # looked up once
        return value


def _replayed(key: str) -> Callable:
    """A function named as ``key``'s that answers from the recordings (:func:`replay`)."""

    def call(*args, **kwargs):
        return replay(key, args, kwargs)

    call.__name__ = call.__qualname__ = key.rpartition(".")[2]
    return call


def _recorded(key: str, function: Callable) -> Callable:
    """``function``, each outermost call kept under ``key`` while recording (:func:`_recorded_call`)."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        return _recorded_call(key, function, args, kwargs)

    return call


@functools.cache
def answers(chapter: str) -> Withheld:
    """The answers of ``chapter`` (``"04_kv_cache"``): the names its solution cells define, run as
    grading runs a learner's answers (see the module docstring); in the learners' copy, which has no
    ``solutions/``, their recorded calls."""

    def load() -> dict | None:
        if in_learners_copy():
            return None
        return solution_namespace(paths.require(paths.SOLUTIONS / f"{chapter}.py"))

    return Withheld(f"solutions.{chapter}", load)


@functools.cache
def module(name: str) -> Withheld:
    """The instructor-only module ``name`` (``"autograder.mistakes.kv_cache"``), imported at its first
    use; in the learners' copy, which leaves it out, its recorded calls (never the module, even where
    another install of the course could import it)."""
    return Withheld(name, lambda: None if in_learners_copy() else vars(importlib.import_module(name)))


def optional_module(name: str):
    """The module ``name``, or None where there is no such module (a chapter without one, or the
    learners' copy, which leaves instructor modules out); a module that fails to import for another
    reason raises."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        return None


def in_learners_copy() -> bool:
    """Whether this is the learners' copy: it has recordings (``RECORDINGS``), the instructor's copy has none."""
    return RECORDINGS.is_dir()


def solution_namespace(source: Path) -> dict:
    """What the grader-setup cells and then the solution cells of the chapter source ``source``
    define, run in one namespace in notebook order (a cell's line numbers kept, for tracebacks)."""
    namespace: dict = {"__name__": f"solutions.{source.stem}"}
    for line, metadata, code in solution_cells(source):
        chosen = "grader-setup" in metadata.get("tags", []) or metadata.get("nbgrader", {}).get("solution")
        if chosen:
            exec(compile("\n" * line + code, str(source), "exec"), namespace)
    return namespace


_CELL = re.compile(r"^# %%(.*)$", re.MULTILINE)


def solution_cells(source: Path) -> list[tuple[int, dict, str]]:
    """The code cells of a chapter source in jupytext's percent format, each as (the line before its
    code, 0-based; its metadata, ``tags`` and ``nbgrader``; its code), in order. Markdown cells are
    left out. The course reads its sources without jupytext (an instructor's extra, and seconds to
    import); ``tests/test_withheld.py`` holds this reader to jupytext's on every chapter."""
    text = source.read_text(encoding="utf-8")
    headers = list(_CELL.finditer(text))
    cells = []
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        options = header.group(1)
        if options.lstrip().startswith("[markdown]"):
            continue
        metadata = {}
        for name in ("tags", "nbgrader"):
            at = options.find(f"{name}=")
            if at >= 0:
                metadata[name] = json.JSONDecoder().raw_decode(options, at + len(name) + 1)[0]
        body = text[header.end() + 1 : following.start() if following else len(text)]
        cells.append((text.count("\n", 0, header.end()) + 1, metadata, body.rstrip("\n") + "\n"))
    return cells


def hidden_checks() -> dict[str, int]:
    """In the learners' copy, how many hidden checks each exercise had (grade_id -> count), written
    by its build; {} in the instructor's copy, whose registry has the checks themselves."""
    return json.loads(HIDDEN_CHECKS.read_text(encoding="utf-8")) if HIDDEN_CHECKS.exists() else {}


def yours_or_course(namespace: dict, chapter: str, name: str, tried_on: tuple, what: str) -> Callable:
    """The notebook's own ``name`` once written (tried on ``tried_on``, :func:`written`), else the
    chapter's answer (:func:`answers`), after printing whose numbers ``what`` shows.

    While the learners' copy is recorded, the answer is also called beside the notebook's own on the
    same inputs (:func:`own_if_written`)."""
    own = own_if_written(namespace, chapter, name, tried_on)
    _say_whose({name: own} if own else {}, [] if own else [name], what)
    return own if own is not None else getattr(answers(chapter), name)


def own_if_written(namespace: dict, chapter: str, name: str, tried_on: tuple) -> Callable | None:
    """The notebook's own ``name`` once written (tried on ``tried_on``, :func:`written`), else None.

    While the learners' copy is recorded, the chapter's answer is also called beside the notebook's
    own on the same inputs: the instructor's notebook, whose own is the solution, then records every
    call that a learner's blank notebook makes to the course's answer in its place."""
    if not written(namespace, name, *tried_on):
        return None
    own = namespace[name]
    if not is_recording():
        return own
    course = getattr(answers(chapter), name)

    @functools.wraps(own)
    def own_and_recorded(*args, **kwargs):
        course(*args, **kwargs)
        return own(*args, **kwargs)

    return own_and_recorded


@contextlib.contextmanager
def recording():
    """Keep every outermost withheld call made inside the block: yields the recordings (key ->
    list of [args, kwargs, result], plain data), filled as the block runs."""
    before = _recording
    try:
        yield record_into({} if before is None else before)
    finally:
        record_into(before)


@contextlib.contextmanager
def not_recorded():
    """Keep no call made inside the block, while recording or not: for a call whose recording would
    name an answer in the learners' copy (the capstone's configuration and its figures)."""
    before = _recording
    record_into(None)
    try:
        yield
    finally:
        record_into(before)


def record_into(recordings: dict | None) -> dict | None:
    """Keep every outermost withheld call from now on in ``recordings`` (None: keep none); return
    it. For code that cannot hold a ``with`` block open, as a notebook's cells (the release records
    a chapter's cells, and stops while its check cells run)."""
    global _recording
    _recording = recordings
    return recordings


@contextlib.contextmanager
def streams_kept():
    """The global random streams (torch's, numpy's, Python's) left as they were after the block:
    what a check cell or a probe of the learner's code runs draws nothing the learner's next cell
    would see (so the two copies' cells after a check cell draw the same numbers, whether it ran
    the hidden checks or the visible ones only)."""
    import random

    import numpy as np

    python, legacy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(python)
            np.random.set_state(legacy)


def is_recording() -> bool:
    return _recording is not None


def written(namespace: dict, name: str, *args) -> bool:
    """Whether the notebook's ``name`` is written: it exists and returns on ``args`` rather than
    raising NotImplementedError (any other error is the learner's to see, and raises)."""
    own = namespace.get(name)
    if not callable(own):
        return False
    try:
        own(*args)
    except NotImplementedError:
        return False
    return True


def _say_whose(mine: dict, missing: list[str], what: str) -> None:
    """Print whose numbers ``what`` shows: the notebook's functions ``mine``, the course's recorded
    numbers for those ``missing`` (not written yet)."""
    from course.readings import listing

    said = []
    if mine:
        said.append(f"your {listing([f'`{n}`' for n in mine])} {'draws' if len(mine) == 1 else 'draw'} {what}")
    if missing:
        it, verb = ("it", "is") if len(missing) == 1 else ("them", "are")
        instead = f"stand in for {it}" if mine else f"draw {what}"
        said.append(
            f"your {listing([f'`{n}`' for n in missing])} {verb} not written yet: the course's numbers, recorded on "
            f"the same inputs, {instead} (write {it}, then run this cell again)"
        )
    text = "; ".join(said) + "."
    print(text[0].upper() + text[1:])


def write(recordings: dict, path: Path) -> None:
    """Write ``recordings`` (from :func:`recording`) as gzipped JSON, one entry per distinct call."""
    unique = {}
    for name, calls in recordings.items():
        seen = {}
        for call in calls:
            seen.setdefault(json.dumps(call[:2], sort_keys=True), call)
        unique[name] = list(seen.values())
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(unique, handle)  # a dict result replays in the order it was made


def _load() -> dict:
    """The recordings by name, each a list of (args, kwargs, encoded result) and a dict from the
    encoded arguments to the encoded result (an exact match is found at once)."""
    global _recordings
    if _recordings is None:
        _recordings = {}
        for path in sorted(RECORDINGS.glob("*.json.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                for name, calls in json.load(handle).items():
                    found = _recordings.setdefault(name, ([], {}))
                    for args, kwargs, result in calls:
                        found[0].append((plain_data.decode(args), plain_data.decode(kwargs), result))
                        found[1].setdefault(_exact([args, kwargs]), result)
    return _recordings


def _exact(encoded) -> str:
    return json.dumps(encoded, sort_keys=True)


def replay(name: str, args: tuple, kwargs: dict):
    """The recorded result of the withheld ``name`` called with ``args`` and ``kwargs``."""
    calls, exact = _load().get(name, ([], {}))
    result = exact.get(_exact([plain_data.encode(args), plain_data.encode(kwargs)])) if exact else None
    if result is not None:
        return plain_data.decode(result)
    for recorded_args, recorded_kwargs, result in calls:
        if _same(recorded_args, list(args)) and _same(recorded_kwargs, kwargs):
            return plain_data.decode(result)
    raise NotRecorded(
        f"{name.rpartition('.')[2]} is withheld from the learners' copy (it computes an exercise's answer), and "
        "the results recorded for the copy do not cover these inputs: the instructor's grader judges this case"
    )


def _same(recorded, value) -> bool:
    if isinstance(recorded, torch.Tensor):
        if not isinstance(value, torch.Tensor) or recorded.shape != value.shape:
            return False
        value = value.detach().cpu()
        if recorded.dtype != (torch.float32 if value.dtype == torch.bfloat16 else value.dtype):
            return False
        if recorded.dtype.is_floating_point:
            return bool(torch.allclose(recorded, value.to(recorded.dtype), rtol=RTOL, atol=0.0, equal_nan=True))
        return torch.equal(recorded, value)
    if isinstance(recorded, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(recorded) == len(value)
            and all(_same(r, v) for r, v in zip(recorded, value, strict=True))
        )
    if isinstance(recorded, dict):
        return (
            isinstance(value, dict)
            and recorded.keys() == value.keys()
            and all(_same(recorded[k], value[k]) for k in recorded)
        )
    if isinstance(recorded, float) and isinstance(value, float):
        return recorded == value or abs(recorded - value) <= RTOL * max(abs(recorded), abs(value))
    return type(recorded) is type(value) and recorded == value
