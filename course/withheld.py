"""Code withheld from the learners' copy, and the results that stand in for it there.

A function marked ``@withheld`` computes an exercise's answer, or a known mistake's output, from a
check's inputs: the course's reference implementations and the checks' mistake variants. In the
instructor's copy (this repository) it runs as written; while :func:`recording` is on, each
outermost call of a withheld function is kept with its arguments and result. The instructor's
copy records them while it writes the learners' copy, running every visible check on the
solution, the blank answers and known mistakes, and puts the recordings in the learners' copy,
whose withheld functions keep only their docstring and a ``raise``: there the decorator answers a
call from the recordings instead.

A call is answered when a recording has the same function and arguments of the same structure:
numbers, strings and tensor shapes and dtypes equal, tensor values within ``RTOL`` (the same inputs
computed on another machine's BLAS can differ in the last bits). A call no recording answers
raises :class:`NotRecorded`, which says that the instructor's grader judges it.

Not handled: arguments that are not plain data (modules, generators, learners' functions); a
withheld function called with them is answered by none of its recordings.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
from collections.abc import Callable
from pathlib import Path

import torch

from course import paths, wire

RECORDINGS = paths.REFERENCE / "withheld"  # one <name>.json.gz per recorded run, in the learners' copy only
LEARNERS_COPY = RECORDINGS.is_dir()  # only the learners' copy has recordings; there the bodies are withheld
RTOL = 1e-6

_recording: dict | None = None  # key -> list of [args, kwargs, result], encoded; None when not recording
_depth = 0  # withheld calls now running: only the outermost is recorded
_recordings: dict | None = None  # the learners' copy's recordings, loaded on first use


class NotRecorded(RuntimeError):
    """A withheld function was called with arguments that no recording holds."""


def key(function: Callable) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def withheld(function: Callable) -> Callable:
    """Mark ``function`` as withheld from the learners' copy (see the module docstring). A class
    marked so keeps, in the learners' copy, its docstring and its methods' signatures, each with
    its docstring and a ``raise``: its calls are not recorded, so what a check needs of it must come
    from a withheld function."""
    if isinstance(function, type):
        return function
    name = key(function)

    @functools.wraps(function)
    def call(*args, **kwargs):
        global _depth
        if LEARNERS_COPY:
            return replay(name, args, kwargs)
        _depth += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _depth -= 1
        if _recording is not None and _depth == 0:
            inputs = [wire.encode(args), wire.encode(kwargs)]
            if not _opaque(inputs):  # a call with an object no replay can match (a generator) is dead weight
                _recording.setdefault(name, []).append([*inputs, wire.encode(result)])
        return result

    return call


def _opaque(encoded) -> bool:
    """Whether ``encoded`` (plain data from ``wire.encode``) holds an object that is not plain data."""
    if isinstance(encoded, list):
        return any(_opaque(item) for item in encoded)
    if not isinstance(encoded, dict):
        return False
    if isinstance(encoded.get("dict"), dict):
        return any(_opaque(value) for value in encoded["dict"].values())
    if isinstance(encoded.get("tuple", encoded.get("list")), list):
        return _opaque(encoded.get("tuple", encoded.get("list")))
    return "object" in encoded


@contextlib.contextmanager
def recording():
    """Keep every outermost withheld call made inside the block: yields the recordings (key ->
    list of [args, kwargs, result], plain data), filled as the block runs."""
    before = _recording
    try:
        yield record_into({} if before is None else before)
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
    global _recordings
    if _recordings is None:
        _recordings = {}
        for path in sorted(RECORDINGS.glob("*.json.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                for name, calls in json.load(handle).items():
                    _recordings.setdefault(name, []).extend(
                        (wire.decode(args), wire.decode(kwargs), result) for args, kwargs, result in calls
                    )
    return _recordings


def replay(name: str, args: tuple, kwargs: dict):
    """The recorded result of the withheld ``name`` called with ``args`` and ``kwargs``."""
    for recorded_args, recorded_kwargs, result in _load().get(name, ()):
        if _same(recorded_args, list(args)) and _same(recorded_kwargs, kwargs):
            return wire.decode(result)
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
