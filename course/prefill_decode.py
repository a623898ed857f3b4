"""The arithmetic of serving a language model: weight memory, prefill and decode cost, the roofline.

A decode step reads every weight once and does 2 FLOPs per weight per sequence in the batch, so
its arithmetic intensity is 2 * batch / bytes_per_weight FLOPs per byte; below the hardware's
ratio peak / bandwidth it waits on memory. A worked example: a 70B model at 4 bits is 35 GB,
and on an H100 (989 TFLOP/s, 3.35 TB/s) decode at batch 1 takes at least 35e9 / 3.35e12 = 10.4 ms
per token.

The chapter's exercises (``weight_memory_gb``, ``prefill_flops``, ``roofline_step_time``,
``critical_batch_size``, ``static_batch_throughput``) are the learner's: the figures and the
simulator compute with :class:`Formulas` made from them, a notebook's once written (:meth:`Formulas.of`)
and the course's answers before that (``REFERENCE``: the chapter's solution cells, through
``course.withheld``).

Not handled: attention's own FLOPs and KV-cache traffic (chapter 4), tensor parallelism,
overlap of compute with memory traffic beyond the max() of the roofline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from course import withheld


@dataclass(frozen=True)
class Hardware:
    name: str
    peak_flops: float  # dense bf16/fp16 FLOP/s
    bandwidth: float  # bytes/s of the memory the weights live in
    memory_bytes: float

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the roofline turns from memory-bound to compute-bound."""
        return self.peak_flops / self.bandwidth


# Published dense (not sparse) peaks and memory bandwidths.
PRESETS = {
    "T4": Hardware("T4", 65e12, 320e9, 16e9),
    "RTX 4090": Hardware("RTX 4090", 165e12, 1.008e12, 24e9),
    "A100-80G": Hardware("A100-80G", 312e12, 2.039e12, 80e9),
    "H100 SXM": Hardware("H100 SXM", 989e12, 3.35e12, 80e9),
    "H200": Hardware("H200", 989e12, 4.8e12, 141e9),
}


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value!r}")


CHAPTER = "01_prefill_decode"
TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "weight_memory_gb": (8e9, 16),
    "prefill_flops": (8e9, 512),
    "roofline_step_time": (1e12, 1e9, 1e14, 1e12),
    "critical_batch_size": (1e14, 1e12, 2),
}
NAMES = {  # each formula, and the notebook's exercise it is made from
    "weight_bytes": "weight_memory_gb",
    "prefill_flops": "prefill_flops",
    "roofline_seconds": "roofline_step_time",
    "critical_batch_of": "critical_batch_size",
}
DECODE = ("weight_bytes", "roofline_seconds")  # what decode_step_time computes with
PREFILL = ("weight_bytes", "prefill_flops", "roofline_seconds")  # prefill_time, and so the simulator


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


def _course(name: str) -> Callable:
    """A function that calls the course's answer ``name`` when called (the chapter's solution cells
    are read at the first call, not when this module is imported)."""

    def call(*args):
        return course_answer(name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


@dataclass(frozen=True)
class Formulas:
    """The four formulas the figures and the simulator compute with, made from the chapter's four
    exercises (:meth:`of`: a notebook's, None in place of each one not written yet; ``REFERENCE``:
    the course's answers). ``yours`` names the exercises whose functions these are; :meth:`or_course`
    puts the course's formulas where the notebook's are not written."""

    weight_bytes: Callable[[float, float], float] | None = None  # (params, bits) -> bytes
    prefill_flops: Callable[[float, float], float] | None = None  # (params, tokens) -> FLOPs
    roofline_seconds: Callable[[float, float, float, float], float] | None = None
    critical_batch_of: Callable[[float, float, float], float] | None = None  # (peak, bandwidth, bits)
    yours: tuple[str, ...] = ()

    @classmethod
    def made_from(cls, found: dict, yours: tuple[str, ...] = ()) -> Formulas:
        """The formulas of the exercises ``found`` (name -> function or None), in the chapter's units:
        GB and bytes per weight converted to bytes and bits."""
        gb, critical = found["weight_memory_gb"], found["critical_batch_size"]
        return cls(
            weight_bytes=None if gb is None else lambda params, bits: 1e9 * gb(params, bits),
            prefill_flops=found["prefill_flops"],
            roofline_seconds=found["roofline_step_time"],
            critical_batch_of=None
            if critical is None
            else lambda peak_flops, bandwidth, bits: critical(peak_flops, bandwidth, bits / 8),
            yours=yours,
        )

    @classmethod
    def of(cls, namespace: dict) -> Formulas:
        """The notebook's ``weight_memory_gb``, ``prefill_flops``, ``roofline_step_time`` and
        ``critical_batch_size`` as formulas, None in place of each one not written yet
        (:func:`course.withheld.own_if_written`: while the learners' copy is recorded, the course's
        answer is called beside each, on the same inputs)."""
        found = {name: withheld.own_if_written(namespace, CHAPTER, name, args) for name, args in TRIED_ON.items()}
        return cls.made_from(found, tuple(name for name, function in found.items() if function is not None))

    def can(self, *fields: str) -> bool:
        """Whether each formula of ``fields`` is there (not None)."""
        return not self.missing(*fields)

    def missing(self, *fields: str) -> list[str]:
        """The exercises of ``fields`` (all four when none is given) whose formulas are not there (None)."""
        return [NAMES[field] for field in fields or NAMES if getattr(self, field) is None]

    def not_yours(self, *fields: str) -> list[str]:
        """The exercises of ``fields`` (all four when none is given) whose functions these are not."""
        return [NAMES[field] for field in fields or NAMES if NAMES[field] not in self.yours]

    @property
    def complete(self) -> bool:
        """Whether all four are the notebook's."""
        return not self.not_yours()

    def or_course(self) -> Formulas:
        """These formulas, the course's in place of each one missing."""
        return replace(self, **{field: getattr(REFERENCE, field) for field in NAMES if getattr(self, field) is None})


REFERENCE = Formulas.made_from({name: _course(name) for name in TRIED_ON})  # the course's answers


def weight_bytes(params: float, bits: float) -> float:
    """Bytes of ``params`` weights stored at ``bits`` each, by the course's ``weight_memory_gb``."""
    return REFERENCE.weight_bytes(params, bits)


def whose(formulas: Formulas, what: str, fields: tuple[str, ...] = tuple(NAMES), instead: str = "") -> str:
    """Which of the exercises behind ``fields`` ``what`` uses the notebook's functions of, and which are
    not written yet (``instead``: what stands in for them): "This figure uses your prefill_flops;
    weight_memory_gb is not written yet: the course's formula stands in for it"."""
    from course.readings import listing

    mine = [NAMES[field] for field in fields if NAMES[field] in formulas.yours]
    missing = formulas.not_yours(*fields)
    if not missing:
        return f"{what} uses your {listing(mine)}."
    said = f"{listing(missing)} {'is' if len(missing) == 1 else 'are'} not written yet"
    said = f"{what} uses your {listing(mine)}; {said}" if mine else f"Your {said}"
    return f"{said}{': ' + instead if instead else ''}."


def roofline_time(flops: float, n_bytes: float, hardware: Hardware, formulas: Formulas = REFERENCE) -> float:
    """Seconds for work that needs ``flops`` and moves ``n_bytes`` on ``hardware``, by the roofline."""
    return formulas.roofline_seconds(flops, n_bytes, hardware.peak_flops, hardware.bandwidth)


def decode_step_time(
    params: float, bits: float, batch: int, hardware: Hardware, formulas: Formulas = REFERENCE
) -> float:
    """One decode step for ``batch`` sequences: read all weights once, 2 * params FLOPs each."""
    _positive(batch=batch)
    return roofline_time(2 * params * batch, formulas.weight_bytes(params, bits), hardware, formulas)


def prefill_time(params: float, bits: float, tokens: int, hardware: Hardware, formulas: Formulas = REFERENCE) -> float:
    """Time to first token: one pass over the prompt (compute-bound for all but tiny prompts)."""
    flops = formulas.prefill_flops(params, tokens)
    return roofline_time(flops, formulas.weight_bytes(params, bits), hardware, formulas)


def decode_intensity(batch: int, bits: float) -> float:
    """FLOPs per byte of weights read in a decode step: 2 * batch / (bits / 8)."""
    _positive(batch=batch, bits=bits)
    return 2 * batch / (bits / 8)


def critical_batch(hardware: Hardware, bits: float = 16, formulas: Formulas = REFERENCE) -> float:
    """The batch where decode of ``bits``-bit weights turns compute-bound on ``hardware``."""
    return formulas.critical_batch_of(hardware.peak_flops, hardware.bandwidth, bits)


def decode_against_the_memory_roof(n_bytes: float, bandwidth: float, seconds: float) -> str:
    """Where a measured decode step at batch 1 (``seconds``, reading ``n_bytes`` of weights) sits
    against the sloped roof of a memory of ``bandwidth`` bytes/s, in words that follow the numbers:
    under the roof (the weights' read is the least a step must do; the gap is the rest of the step),
    or above it, which reading every weight from that memory cannot do: the roof was measured low.
    Example: 90 MB at 10 GB/s is a roof of 9 ms; a step of 12 ms reads "75% of the memory roof"."""
    share = n_bytes / bandwidth / seconds
    if share <= 1:
        return (
            f"decode at batch 1 ran at {share:.0%} of the memory roof ({1e3 * n_bytes / bandwidth:.2f} ms to read the "
            f"weights, {1e3 * seconds:.2f} ms measured): under it, as it must be, since reading every weight is the "
            "least a step does; the gap is the rest of the step (the smaller matrices of each layer and the work "
            "between them)"
        )
    return (
        f"decode at batch 1 ran at {share:.0%} of the memory roof ({1e3 * n_bytes / bandwidth:.2f} ms to read the "
        f"weights, {1e3 * seconds:.2f} ms measured): above it, which reading every weight from that memory cannot "
        "do, so the roof was measured low here: part of the weights came from a faster cache, or the machine was "
        "busier while the bandwidth was measured (run both measurements again to see)"
    )


# --- serving a trace of requests: static against continuous batching ---------------------------


@dataclass(frozen=True, order=True)
class Request:
    arrival: float  # seconds
    prompt: int  # tokens
    output: int  # tokens to generate


@dataclass(frozen=True)
class Served:
    request: Request
    first_token: float  # time the first output token is ready
    finished: float

    @property
    def ttft(self) -> float:
        return self.first_token - self.request.arrival

    @property
    def latency(self) -> float:
        return self.finished - self.request.arrival


def make_trace(
    n: int, rate: float, prompt: tuple[int, int] = (32, 512), output: tuple[int, int] = (16, 256), seed: int = 0
) -> list[Request]:
    """``n`` requests arriving as a Poisson process of ``rate`` per second, lengths uniform in ranges."""
    import random

    _positive(n=n, rate=rate)
    rng = random.Random(seed)
    time, requests = 0.0, []
    for _ in range(n):
        time += rng.expovariate(rate)
        requests.append(Request(time, rng.randint(*prompt), rng.randint(*output)))
    return requests


def simulate(
    trace: list[Request],
    params: float,
    bits: float,
    hardware: Hardware,
    max_batch: int,
    continuous: bool,
    formulas: Formulas = REFERENCE,
) -> list[Served]:
    """Serve ``trace`` one step at a time on the roofline's cost model.

    Static batching takes up to ``max_batch`` waiting requests, prefills them together, and
    decodes until the longest is done; only then does the next batch start. Continuous batching
    (Orca's iteration-level scheduling) admits waiting requests at every step, prefilling them
    in that step, and lets each request leave as soon as it has its tokens. ``formulas`` cost the steps.
    """
    _positive(max_batch=max_batch)
    pending = sorted(trace, key=lambda r: r.arrival)
    now, served = 0.0, []
    running: list[dict] = []  # {"request", "left", "first"}
    while pending or running:
        if not running and pending and pending[0].arrival > now:
            now = pending[0].arrival  # idle until the next arrival
        joining = []
        if continuous or not running:
            while pending and pending[0].arrival <= now and len(running) + len(joining) < max_batch:
                joining.append(pending.pop(0))
        step = 0.0
        if joining:
            step += prefill_time(params, bits, sum(r.prompt for r in joining), hardware, formulas)
        if running or joining:
            step += decode_step_time(params, bits, len(running) + len(joining), hardware, formulas)
        now += step
        for item in running:
            item["left"] -= 1
        for request in joining:  # the prefill step also produces each newcomer's first token
            running.append({"request": request, "left": request.output - 1, "first": now})
        for item in running:
            if item["left"] <= 0:
                item.setdefault("finished", now)  # its last token is out; a static slot stays taken
        if continuous:
            served += [Served(i["request"], i["first"], i["finished"]) for i in running if "finished" in i]
            running = [item for item in running if "finished" not in item]
        elif all("finished" in item for item in running):  # static: the batch ends with its longest request
            served += [Served(i["request"], i["first"], i["finished"]) for i in running]
            running = []
    return sorted(served, key=lambda s: s.request.arrival)


def summarise(served: list[Served]) -> dict[str, float]:
    """Throughput (generated tokens per second over the whole run), median TTFT and latency."""
    import statistics

    if not served:
        raise ValueError("nothing was served")
    start = min(s.request.arrival for s in served)
    end = max(s.finished for s in served)
    tokens = sum(s.request.output for s in served)
    return {
        "throughput": tokens / (end - start),
        "median_ttft": statistics.median(s.ttft for s in served),
        "median_latency": statistics.median(s.latency for s in served),
        "p90_latency": sorted(s.latency for s in served)[int(0.9 * (len(served) - 1))],
    }
