"""Plain-data encoding of what crosses the sandbox boundary: inputs in, learners' outputs out.

Tensors travel as base64 bytes with dtype and shape; tuples, lists, dicts with string keys,
numbers, strings and None as JSON; anything else as its type name and a short repr. Nothing is
pickled, so a hostile object cannot run code in the grader, and an object whose ``__eq__`` always
answers True arrives as a string that equals nothing.

This file is copied into the sandbox and must import only the standard library, numpy and torch.
It is the course's, not the grader's: the learners' copy's recordings (``course/withheld.py``) are
written in it too.
"""

from __future__ import annotations

import base64
import hashlib

import numpy as np

_SAFE_DTYPES = {"float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"}


MAX_ITEMS = 100_000  # a learner's list longer than this is cut; the grader's inputs are far shorter
SHARED_BYTES = 2**16  # with a ``shared`` table, an array this large is written there once, however often it recurs


def encode(obj, depth: int = 0, shared: dict | None = None):
    """``obj`` as JSON-ready data (see the module docstring). With ``shared``, each array of
    :data:`SHARED_BYTES` or more goes into that table once, keyed by its content, and ``obj``'s
    data names it (``{"shared": key}``): a grading job whose probes hand the same model's weights
    to several calls carries them once; :func:`decode` with the same table undoes it."""
    import torch

    if depth > 4:
        return {"object": "nested too deeply"}
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) in (tuple, list):
        items = [encode(item, depth + 1, shared) for item in list(obj)[:MAX_ITEMS]]
        return {"tuple": items} if type(obj) is tuple else {"list": items}
    if type(obj) is dict and all(type(key) is str for key in obj):
        return {"dict": {key: encode(value, depth + 1, shared) for key, value in list(obj.items())[:MAX_ITEMS]}}
    if isinstance(obj, torch.Tensor):
        tensor = torch.Tensor.detach(obj).cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return _encode_array(tensor.numpy(), "tensor", str(tensor.dtype).replace("torch.", ""), shared)
    if isinstance(obj, np.ndarray):
        return _encode_array(obj, "ndarray", str(obj.dtype), shared)
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return obj.item()
    try:
        text = repr(obj)[:200]
    except BaseException:  # a hostile __repr__
        text = "<repr failed>"
    return {"object": type(obj).__name__, "repr": text}


def _encode_array(array: np.ndarray, kind: str, dtype: str, shared: dict | None = None) -> dict:
    if str(array.dtype) not in _SAFE_DTYPES:
        return {"object": f"{kind} of dtype {dtype}", "repr": ""}
    array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray makes 0-d arrays 1-d
    raw = array.tobytes()
    described = {"dtype": str(array.dtype), "torch_dtype": dtype, "shape": list(array.shape)}
    if shared is None or len(raw) < SHARED_BYTES:
        return {kind: base64.b64encode(raw).decode("ascii"), **described}
    key = hashlib.blake2b(raw + repr((kind, described)).encode(), digest_size=16).hexdigest()
    if key not in shared:
        shared[key] = {kind: base64.b64encode(raw).decode("ascii"), **described}
    return {"shared": key}


def decode(data, shared: dict | None = None):
    """The inverse of :func:`encode` (given the same ``shared`` table, or that table
    :func:`unpacked`): tensors come back as torch tensors, a fresh copy at each decoding."""
    import torch

    if isinstance(data, dict):
        if "shared" in data and shared is not None and data["shared"] in shared:
            entry = shared[data["shared"]]
            return torch.from_numpy(entry.copy()) if isinstance(entry, np.ndarray) else decode(entry)
        for kind in ("tensor", "ndarray"):
            if kind in data:
                return torch.from_numpy(_array(data, kind).copy())
        if "tuple" in data:
            return tuple(decode(item, shared) for item in data["tuple"])
        if "list" in data:
            return [decode(item, shared) for item in data["list"]]
        if "dict" in data and isinstance(data["dict"], dict):
            return {str(key): decode(value, shared) for key, value in data["dict"].items()}
        return Opaque(data.get("object", "?"), data.get("repr", ""))
    return data


def unpacked(shared: dict) -> dict:
    """A ``shared`` table with each array's bytes decoded once, for :func:`decode` to copy from
    (where the calls of a job decode the same model's weights again and again); the arrays it
    holds are read-only and never handed out."""
    return {key: _array(entry, "tensor" if "tensor" in entry else "ndarray") for key, entry in shared.items()}


def _array(data: dict, kind: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(data[kind]), dtype=data["dtype"]).reshape(data["shape"])


class Opaque:
    """Something a learner returned that is not plain data; it equals nothing."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"
