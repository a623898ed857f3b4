"""Chapter 9's exercise pack_int4 (two signed 4-bit codes to a byte) with its visible checks. The
judge compares with the chapter's answer (``ANSWERS``, its solution cell) and names the known
mistake it matches (``MISTAKES``, ``autograder/mistakes/choosing_a_technique.py``); the hidden
checks are ``autograder/hidden/choosing_a_technique.py``'s."""

from __future__ import annotations

import torch

from autograder.checks import Check, Exercise, Verdict, diagnose, judge_raises, judges_value
from course import withheld

ANSWERS = withheld.answers("09_choosing_a_technique")
MISTAKES = withheld.module("autograder.mistakes.choosing_a_technique")

EXAMPLE_CODES = torch.tensor([[-7, 7, 0, -8], [1, -1, 5, 2]], dtype=torch.int32)


def codes_probe(rows=None, cols=None, fixed=None):
    def make(rng):
        if fixed is not None:
            return {"call": "pack_int4", "args": [fixed]}
        return {"call": "pack_int4", "args": [torch.from_numpy(rng.integers(-8, 8, size=(rows, cols)).astype("int64"))]}

    return make


@judges_value
def judge_pack(probe, got):
    codes = probe["args"][0]
    if not isinstance(got, torch.Tensor):
        return Verdict(False, f"returned {type(got).__name__}; pack_int4 should return a torch.Tensor of dtype uint8")
    expected = ANSWERS.pack_int4(codes)
    if tuple(got.shape) != tuple(expected.shape):
        return Verdict(
            False,
            f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}: pack neighbouring columns of each row, "
            "two codes to a byte",
        )
    if got.dtype != torch.uint8:
        return Verdict(False, f"dtype {got.dtype}: a packed byte is torch.uint8 (values 0 to 255), one byte per pair")
    return diagnose(got, expected, lambda: MISTAKES.of_pack_int4(codes), rtol=0, atol=0)


def _odd_probe(rng):
    """Codes of an odd number of columns, a shape of its own each time (a fixed one could be looked up)."""
    rows, cols = int(rng.integers(1, 5)), 2 * int(rng.integers(1, 9)) + 1
    return {"call": "pack_int4", "args": [torch.from_numpy(rng.integers(-8, 8, size=(rows, cols)).astype("int64"))]}


def _judge_odd(probe, result):
    cols = probe["args"][0].shape[1]
    return judge_raises(
        result,
        "ValueError",
        f"{cols} columns cannot be packed two to a byte; the prompt asks pack_int4 to raise ValueError when the "
        "number of columns is odd (check codes.shape[1] % 2 first)",
    )


PACK = Exercise(
    "pack_int4",
    ("pack_int4",),
    [
        Check("example", 1, "the chapter's 2 x 4 codes", codes_probe(fixed=EXAMPLE_CODES), judge_pack, visible=True),
        Check("odd", 1, "an odd number of columns raises ValueError", _odd_probe, _judge_odd, visible=True),
    ],
)
