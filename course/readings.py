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


def fewer_bytes(
    base_seconds: float, seconds: float, byte_ratio: float, name: str, base_name: str, paid: float = 0.75
) -> str:
    """What reading ``byte_ratio`` times the bytes of ``base_name`` did for ``name``'s time, with the
    speed-up beside it. Fewer bytes explain a speed-up of at most 1 / ``byte_ratio``: a larger one
    is read as a cache effect (the smaller data fits a cache the larger does not) or noise. The
    bytes "paid off" when the time fell below ``paid`` of ``base_name``'s, "in part" when it fell by
    more than 5% but not that far."""
    if not 0 < byte_ratio < 1:
        raise ValueError(f"byte_ratio must be between 0 and 1 (the smaller format's share of bytes), got {byte_ratio}")
    said = faster(base_seconds, seconds, name, base_name)
    bound = 1 / byte_ratio
    if base_seconds / seconds > bound * 1.05:
        return (
            f"{said}: more than the {bound:.1f}x that {byte_ratio:.0%} of the bytes can explain, so a cache "
            "effect (the smaller data fits a cache the larger does not) or noise, not the bytes alone"
        )
    if seconds < paid * base_seconds:
        return f"{said}: {byte_ratio:.0%} of the bytes paid off here (at most {bound:.1f}x from the bytes)"
    if base_seconds / seconds > 1.05:
        return (
            f"{said}: {byte_ratio:.0%} of the bytes paid off only in part ({base_seconds / seconds:.2f}x of the "
            f"{bound:.1f}x they allow); the kernel, not only the memory, sets the time"
        )
    return f"{said}: {byte_ratio:.0%} of the bytes did not pay off here; the kernel, not the memory, sets the time"


def spread(ratios: Sequence[float]) -> str:
    """ "1.34x (1.20 to 1.41x over 3 repeats)": the median of repeated ratios and their range."""
    if not ratios:
        raise ValueError("no repeats to read")
    ordered = sorted(ratios)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    if len(ordered) == 1:
        return f"{median:.2f}x (one repeat: no spread measured)"
    return f"{median:.2f}x ({ordered[0]:.2f} to {ordered[-1]:.2f}x over {len(ordered)} repeats)"


def against_one(ratios: Sequence[float], name: str, base_name: str) -> str:
    """Speed-ups of ``name`` over ``base_name``, one per repeat (each pair timed moments apart):
    faster or slower only when every repeat says so; repeats on both sides of 1x are within the noise."""
    said = spread(ratios)
    if min(ratios) > 1:
        return f"{name} was faster than {base_name} in every repeat: {said}"
    if max(ratios) < 1:
        return f"{name} was slower than {base_name} in every repeat: {said}"
    return f"{name} and {base_name} are within the noise of each other: {said}, on both sides of 1x"


def paired(ratios: Sequence[float], base_ratios: Sequence[float], name: str, base_name: str) -> str:
    """Two speed-ups over the same baseline, measured in the same repeats: ``name`` against
    ``base_name`` repeat by repeat (read with :func:`against_one`)."""
    if len(ratios) != len(base_ratios):
        raise ValueError(f"need the same repeats for both, got {len(ratios)} and {len(base_ratios)}")
    return against_one([a / b for a, b in zip(ratios, base_ratios, strict=True)], name, base_name)


def versus(measured: float, expected: float, what: str = "the formula", within: float = 0.05) -> str:
    """``measured`` against ``expected``: "within 5% of the formula (+1.2%)", or "13% below the formula"."""
    if expected == 0:
        raise ValueError("cannot compare with an expected value of 0")
    difference = measured / expected - 1
    if abs(difference) <= within:
        return f"within {within:.0%} of {what} ({difference:+.1%})"
    return f"{abs(difference):.0%} {'above' if difference > 0 else 'below'} {what}"


ROOF_WORDS = (
    (
        1.1,
        "above it: the roof as measured here is lower than what this run reached (a cache, or load on the "
        "machine while the roof was measured)",
    ),
    (0.9, "at the roof"),
    (0.6, "close under it"),
    (0.25, "well under it"),
    (0.0, "far under it"),
)


def share_of_roof(share: float, roof: str = "the memory roofline") -> str:
    """ "73% of the memory roofline: close under it": a measured rate as a share of its bound (over
    110% of it, the words say the bound was measured low)."""
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
