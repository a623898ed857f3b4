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

import numpy as np

_SAFE_DTYPES = {"float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"}


MAX_ITEMS = 100_000  # a learner's list longer than this is cut; the grader's inputs are far shorter


def encode(obj, depth: int = 0):
    """``obj`` as JSON-ready data (see the module docstring)."""
    import torch

    if depth > 4:
        return {"object": "nested too deeply"}
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) in (tuple, list):
        items = [encode(item, depth + 1) for item in list(obj)[:MAX_ITEMS]]
        return {"tuple": items} if type(obj) is tuple else {"list": items}
    if type(obj) is dict and all(type(key) is str for key in obj):
        return {"dict": {key: encode(value, depth + 1) for key, value in list(obj.items())[:MAX_ITEMS]}}
    if isinstance(obj, torch.Tensor):
        tensor = torch.Tensor.detach(obj).cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return _encode_array(tensor.numpy(), "tensor", str(tensor.dtype).replace("torch.", ""))
    if isinstance(obj, np.ndarray):
        return _encode_array(obj, "ndarray", str(obj.dtype))
    if isinstance(obj, (np.floating, np.integer, np.bool_)):
        return obj.item()
    try:
        text = repr(obj)[:200]
    except BaseException:  # a hostile __repr__
        text = "<repr failed>"
    return {"object": type(obj).__name__, "repr": text}


def _encode_array(array: np.ndarray, kind: str, dtype: str) -> dict:
    if str(array.dtype) not in _SAFE_DTYPES:
        return {"object": f"{kind} of dtype {dtype}", "repr": ""}
    array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray makes 0-d arrays 1-d
    return {
        kind: base64.b64encode(array.tobytes()).decode("ascii"),
        "dtype": str(array.dtype),
        "torch_dtype": dtype,
        "shape": list(array.shape),
    }


def decode(data):
    """The inverse of :func:`encode`: tensors come back as torch tensors."""
    import torch

    if isinstance(data, dict):
        for kind in ("tensor", "ndarray"):
            if kind in data:
                array = np.frombuffer(base64.b64decode(data[kind]), dtype=data["dtype"]).reshape(data["shape"])
                return torch.from_numpy(array.copy())
        if "tuple" in data:
            return tuple(decode(item) for item in data["tuple"])
        if "list" in data:
            return [decode(item) for item in data["list"]]
        if "dict" in data and isinstance(data["dict"], dict):
            return {str(key): decode(value) for key, value in data["dict"].items()}
        return Opaque(data.get("object", "?"), data.get("repr", ""))
    return data


class Opaque:
    """Something a learner returned that is not plain data; it equals nothing."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"
