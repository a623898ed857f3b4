"""What an environment's kernel shows a learner of the graded names: tests/test_hub.py runs this file's
source in a learner's kernel (a notebook cell, then ``print(json.dumps(probe(NAMES)))``), and as a script
in the instructor's environment (``python tests/_hub_probe.py NAMES.json``).

:func:`probe` imports every module of the ``course`` and ``autograder`` packages the environment has,
and for every function or class whose name is a graded name (what an exercise defines), gives its
source as ``inspect.getsource`` prints it and, in a learners' copy, what calling it does: with the
arguments of a recorded call, and with those arguments changed (or with none, where nothing is
recorded); and, for every name the copy's recordings answer across the line between the copies
(``withheld.answers`` and ``withheld.module``), its first recorded call and that call altered. Only
the standard library, the course and what it imports."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import sys

SHIFT = 1000  # what changes a recorded call's first number: far from any input the checks use


def _altered(value):
    """``value`` with its first number (or tensor) doubled and shifted by :data:`SHIFT`, well beyond
    the tolerance a recording matches within; None when it holds none."""
    import torch

    if isinstance(value, torch.Tensor):
        return None if value.dtype == torch.bool else value * 2 + SHIFT
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 2 + SHIFT
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            changed = _altered(item)
            if changed is not None:
                return type(value)([*value[:index], changed, *value[index + 1 :]])
    if isinstance(value, dict):
        for key, item in value.items():
            changed = _altered(item)
            if changed is not None:
                return {**value, key: changed}
    return None


def _call(function, args, kwargs, expected=None) -> str:
    """What calling ``function`` did: ``answered`` (returned ``expected``, the recorded result, as
    ``course.plain_data`` writes it), ``returned`` (something else), or ``raised <exception's name>``."""
    from course import plain_data

    try:
        result = function(*args, **kwargs)
    except Exception as error:  # what a learner would see
        return f"raised {type(error).__name__}"
    same = json.dumps(plain_data.encode(result), sort_keys=True) == json.dumps(expected, sort_keys=True)
    return "answered" if expected is not None and same else "returned"


def _recordings() -> dict:
    """The learners' copy's recordings as its files hold them: name -> [[args, kwargs, result], ...],
    each as ``course.plain_data`` encodes it."""
    import gzip

    from course import withheld

    found: dict = {}
    for path in sorted(withheld.RECORDINGS.glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for name, calls in json.load(handle).items():
                found.setdefault(name, []).extend(calls)
    return found


def _required(obj) -> int:
    """How many positional arguments calling ``obj`` needs (a class: its constructor's)."""
    try:
        parameters = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _examine(obj) -> dict:
    from course import withheld

    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        source = None
    calls = {}
    if withheld.in_learners_copy():  # in the instructor's copy a call would run the reference itself
        calls = {"unrecorded": _call(obj, [None] * _required(obj), {})}
    return {"source": source, "calls": calls}


def _across_the_line(key: str):
    """The function the learners' copy answers ``key`` with: ``solutions.<chapter>.<name>`` is a
    chapter's answer (``withheld.answers``), any other ``<module>.<name>`` an instructor-only module's."""
    from course import withheld

    label, _, name = key.rpartition(".")
    namespace = withheld.answers(label.partition(".")[2]) if label.startswith("solutions.") else withheld.module(label)
    return getattr(namespace, name)


def _replayed(key: str, recorded: list) -> dict:
    """What the copy's stand-in for ``key`` does with the arguments of its first recorded call, and
    with those changed: a number in them altered, else the inputs dropped ("no inputs to alter" for
    a call that has none)."""
    from course import plain_data

    function = _across_the_line(key)
    args, kwargs, result = recorded[0]
    args, kwargs = plain_data.decode(args), plain_data.decode(kwargs)
    altered_args = _altered(list(args))
    altered_kwargs = _altered(dict(kwargs)) if altered_args is None else None
    if altered_args is not None:
        altered = _call(function, altered_args, kwargs)
    elif altered_kwargs is not None:
        altered = _call(function, args, altered_kwargs)
    elif args or kwargs:  # inputs with no number in them: dropped
        altered = _call(function, [], {})
    else:
        altered = "no inputs to alter"
    return {"recorded": _call(function, args, kwargs, expected=result), "altered": altered}


def probe(names) -> dict:
    """The environment's course folder, whether it is a learners' copy, the modules that did not
    import, and for each graded name found (``module.name``) its source and calls (:func:`_examine`)."""
    import autograder
    import course
    from course import paths, withheld

    failed = {}
    for package in (course, autograder):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.rpartition(".")[2] == "__main__":  # a command, not a module
                continue
            try:
                importlib.import_module(info.name)
            except BaseException as error:  # a module that exits on import is reported too
                failed[info.name] = f"{type(error).__name__}: {error}"
    found = {}
    for module_name, module in sorted(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in ("course", "autograder"):
            continue
        for name, obj in sorted(vars(module).items()):
            if getattr(obj, "__module__", None) != module_name:
                continue
            if name in names and (inspect.isfunction(obj) or inspect.isclass(obj)):
                found[f"{module_name}.{name}"] = _examine(obj)
    replayed = {}
    if withheld.in_learners_copy():
        replayed = {key: _replayed(key, calls) for key, calls in sorted(_recordings().items()) if calls}
    return {
        "root": str(paths.ROOT),
        "learners_copy": withheld.in_learners_copy(),
        "failed": failed,
        "found": found,
        "replayed": replayed,
    }


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        print(json.dumps(probe(set(json.load(handle)))))
