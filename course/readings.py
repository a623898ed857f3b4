"""Sentences about measurements, computed from the numbers: what a chapter prints where its prose
would otherwise claim a result that depends on the machine.

Each function turns measured numbers into words that follow from them, with the numbers beside
the words: ``faster(2.0, 0.5, "the cache", "no cache")`` reads "the cache is 4.00x faster than no
cache". Not handled: measurement noise. A reading near a threshold (5% by default) can flip
between runs; printing the number next to the word is what keeps the sentence honest.
"""

from __future__ import annotations

from collections.abc import Sequence


def listing(items: Sequence) -> str:
    """ "2", "2 and 4", "2, 4 and 8": items joined as a sentence lists them."""
    words = [str(item) for item in items]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def faster(base_seconds: float, seconds: float, name: str, base_name: str, within: float = 0.05) -> str:
    """How ``name`` (``seconds``) compares with ``base_name`` (``base_seconds``): "2.40x faster than",
    "1.30x slower than", or "as fast as ... (within 5%)"."""
    if not (base_seconds > 0 and seconds > 0):
        raise ValueError(f"times must be positive, got {base_seconds!r} and {seconds!r}")
    ratio = base_seconds / seconds
    if abs(ratio - 1) <= within:
        return f"{name} is as fast as {base_name} (within {within:.0%}: {ratio:.2f}x)"
    if ratio > 1:
        return f"{name} is {ratio:.2f}x faster than {base_name}"
    return f"{name} is {1 / ratio:.2f}x slower than {base_name}"


def versus(measured: float, expected: float, what: str = "the formula", within: float = 0.05) -> str:
    """``measured`` against ``expected``: "within 5% of the formula (+1.2%)", or "13% below the formula"."""
    if expected == 0:
        raise ValueError("cannot compare with an expected value of 0")
    difference = measured / expected - 1
    if abs(difference) <= within:
        return f"within {within:.0%} of {what} ({difference:+.1%})"
    return f"{abs(difference):.0%} {'above' if difference > 0 else 'below'} {what}"


ROOF_WORDS = ((0.9, "at the roof"), (0.6, "close under it"), (0.25, "well under it"), (0.0, "far under it"))


def share_of_roof(share: float, roof: str = "the memory roofline") -> str:
    """ "73% of the memory roofline: close under it": a measured rate as a share of its bound."""
    words = next(words for floor, words in ROOF_WORDS if share >= floor)
    return f"{share:.0%} of {roof}: {words}"


def holds_from(xs: Sequence, holds: Sequence[bool]) -> object | None:
    """The smallest x from which a claim holds at every larger x measured, or None when it fails at the
    largest: ``holds_from([64, 128, 256], [False, True, True])`` is 128."""
    found = None
    for x, ok in sorted(zip(xs, holds, strict=True), key=lambda pair: pair[0], reverse=True):
        if not ok:
            break
        found = x
    return found
