"""Chapter 1's exercises: weight memory, prefill FLOPs, the roofline's step time, the critical
batch size, and the throughput of static batching. Each hint names the mistake it recognises, or
says what the number it got is; where two mistakes give the same number it names each. Every
number in a hint carries its unit. The visible checks run the prompts' own examples, which a
notebook could copy: their points are at most a third of an exercise's, the rest is earned on
inputs drawn afresh for each graded notebook."""

from __future__ import annotations

import math

import numpy as np

from autograder.checks import Check, Exercise, Requirement, judge_number, judges_value
from course.withheld import withheld


def _numbers(call: str, pick):
    def make(rng: np.random.Generator) -> dict:
        return {"call": call, "args": pick(rng)}

    return make


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)  # judge_number's tolerances


def _told_apart(seen: list[tuple[str, float]], causes: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The hints a judge may give, in order: ``seen``, each saying what a number is (true of every
    answer that returns it), then one hint per number of ``causes``. Where two mistakes give the
    same number the check cannot tell which one an answer made, so their hint names each
    (``[("a", 2.0), ("b", 2.0)]`` gives ``[("one of these mistakes, which give the same number here:
    a; or b", 2.0)]``)."""
    found: list[tuple[list[str], float]] = []
    for hint, value in causes:
        same = next((entry for entry in found if _same(value, entry[1])), None)
        if same is None:
            found.append(([hint], value))
        elif hint not in same[0]:
            same[0].append(hint)
    joined = [(hints[0] if len(hints) == 1 else f"{JOINED}{'; or '.join(hints)}", value) for hints, value in found]
    return seen + joined


JOINED = "one of these mistakes, which give the same number here: "
ROUNDED = "rounded down (// or int()) where the formula needs true division: use /"


# --- weight_memory_gb --------------------------------------------------------------------------


@withheld
def _memory_numbers(params, bits) -> tuple[float, list[tuple[str, float]]]:
    """The weight memory in GB for ``params`` at ``bits``, and the common mistakes' numbers with their hints."""
    expected = params * bits / 8 / 1e9
    mistakes = [
        ("bits were not divided by 8: a byte holds 8 bits", params * bits / 1e9),
        ("returned bytes: divide by 1e9 for GB", params * bits / 8),
        ("divided by 2**30: that is GiB; the chapter's GB are 1e9 bytes", params * bits / 8 / 2**30),
        ("multiplied by bits / 8 the wrong way round: bytes = params * bits / 8", params * 8 / bits / 1e9),
        ("counted 2 bytes per weight whatever the bits: use bits / 8 bytes", params * 2 / 1e9),
        (ROUNDED, math.floor(expected)),
        (f"bits // 8 is {bits // 8} for {bits:g} bits (integer division): use bits / 8", params * (bits // 8) / 1e9),
    ]
    return expected, _told_apart([], mistakes)


@judges_value
def _judge_memory(probe, got):
    return judge_number(got, *_memory_numbers(*probe["args"]), "the weight memory in GB", unit="GB")


WEIGHT_MEMORY = Exercise(
    "weight_memory_gb",
    ("weight_memory_gb",),
    [
        Check(
            "70b",
            1,
            "70B parameters at 16, 8 and 4 bits: 140 / 70 / 35 GB",
            _numbers("weight_memory_gb", lambda rng: [70e9, int(rng.choice([16, 8, 4]))]),
            _judge_memory,
            visible=True,
        ),
        Check(
            "7b_3bit",
            0,
            "7B parameters at 3 bits: 2.625 GB",
            _numbers("weight_memory_gb", lambda rng: [7e9, 3]),
            _judge_memory,
            visible=True,
        ),
        Check(
            "other",
            2,
            "another size at 3 bits",
            _numbers("weight_memory_gb", lambda rng: [float(rng.integers(1, 400)) * 1e9, 3]),
            _judge_memory,
        ),
    ],
    requirements=[
        Requirement("params * bits / 8 bytes", ("70b", "7b_3bit", "other")),
        Requirement("in GB of 10^9 bytes, fractions kept", ("70b", "7b_3bit", "other")),
        Requirement("any number of bits (3 too)", ("7b_3bit", "other")),
    ],
)


# --- prefill_flops ------------------------------------------------------------------------------


@withheld
def _prefill_numbers(params, tokens) -> tuple[float, list[tuple[str, float]]]:
    """The prefill FLOPs of ``params`` over ``tokens``, and the common mistakes' numbers with their hints."""
    mistakes = [
        ("the factor 2 is missing: each weight is one multiply and one add", params * tokens),
        ("tokens were squared: the 2 * params * tokens term is linear in the prompt", 2 * params * tokens**2),
        ("counted one token only: prefill runs the whole prompt", 2 * params),
        (
            "used 6 * params * tokens, the cost of training (forward and backward): prefill is a forward pass",
            6 * params * tokens,
        ),
    ]
    return 2 * params * tokens, _told_apart([], mistakes)


@judges_value
def _judge_prefill(probe, got):
    return judge_number(got, *_prefill_numbers(*probe["args"]), "the FLOPs", unit="FLOPs")


PREFILL = Exercise(
    "prefill_flops",
    ("prefill_flops",),
    [
        Check(
            "8b",
            0,
            "8B parameters, a 1000-token prompt",
            _numbers("prefill_flops", lambda rng: [8e9, 1000]),
            _judge_prefill,
            visible=True,
        ),
        Check(
            "random",
            2,
            "other sizes",
            _numbers("prefill_flops", lambda rng: [float(rng.integers(1, 100)) * 1e9, int(rng.integers(2, 5000))]),
            _judge_prefill,
        ),
    ],
    requirements=[
        Requirement("about 2 * params * tokens FLOPs", ("8b", "random")),
    ],
)


# --- roofline_step_time -------------------------------------------------------------------------


@withheld
def _roofline_numbers(flops, n_bytes, peak, bandwidth) -> tuple[float, list[tuple[str, float]]]:
    """The roofline's step time in seconds, and the common mistakes' numbers with their hints."""
    compute, memory = flops / peak, n_bytes / bandwidth
    seen = [  # the one that is the answer is left out by judge_number
        (
            "got the compute time flops / peak_flops alone; on this memory-bound step n_bytes / bandwidth is "
            "the larger, and the slower limit decides",
            compute,
        ),
        (
            "got the memory time n_bytes / bandwidth alone; on this compute-bound step flops / peak_flops is "
            "the larger, and the slower limit decides",
            memory,
        ),
    ]
    mistakes = [
        ("added the two times: the roofline takes the larger (compute and memory traffic overlap)", compute + memory),
        ("FLOPs and bytes were divided by the wrong rates", max(flops / bandwidth, n_bytes / peak)),
        ("returned the arithmetic intensity (FLOPs per byte): the roofline's answer is a time", flops / n_bytes),
        (
            "multiplied by the rates: time = FLOPs / (FLOP/s) and bytes / (bytes/s)",
            max(flops * peak, n_bytes * bandwidth),
        ),
        ("returned milliseconds: the roofline's time is in seconds", 1e3 * max(compute, memory)),
        (ROUNDED, math.floor(max(compute, memory))),
    ]
    return max(compute, memory), _told_apart(seen, mistakes)


@judges_value
def _judge_roofline(probe, got):
    return judge_number(got, *_roofline_numbers(*probe["args"]), "the step time in seconds", unit="s")


def _roofline_args(memory_bound: bool):
    def pick(rng):
        peak, bandwidth = 312e12, 2.039e12
        n_bytes = float(rng.integers(2, 100)) * 1e9
        flops = n_bytes * (rng.uniform(0.5, 20) if memory_bound else rng.uniform(400, 3000))
        return [flops, n_bytes, peak, bandwidth]

    return pick


ROOFLINE = Exercise(
    "roofline_step_time",
    ("roofline_step_time",),
    [
        Check(
            "memory_bound",
            1,
            "a memory-bound step (decode)",
            _numbers("roofline_step_time", _roofline_args(True)),
            _judge_roofline,
            visible=True,
        ),
        Check(
            "prefill_8b",
            1,
            "a compute-bound step: prefill of 8B parameters, 1000 tokens, on an A100-80G (about 0.051 s)",
            _numbers("roofline_step_time", lambda rng: [2 * 8e9 * 1000, 16e9, 312e12, 2.039e12]),
            _judge_roofline,
            visible=True,
        ),
        Check(
            "compute_bound",
            1,
            "a compute-bound step (prefill)",
            _numbers("roofline_step_time", _roofline_args(False)),
            _judge_roofline,
        ),
    ],
    requirements=[
        Requirement(
            "max(FLOPs / peak, bytes / bandwidth), in seconds", ("memory_bound", "prefill_8b", "compute_bound")
        ),
        Requirement("memory-bound work: the bytes decide", ("memory_bound",)),
        Requirement("compute-bound work: the FLOPs decide", ("prefill_8b", "compute_bound")),
    ],
)


# --- critical_batch_size ------------------------------------------------------------------------


@withheld
def _critical_numbers(peak, bandwidth, bytes_per_param) -> tuple[float, list[tuple[str, float]]]:
    """The critical batch size, and the common mistakes' numbers with their hints (at 1 or 2 bytes
    per weight some give the same number: the hint then names each)."""
    ridge = peak / bandwidth
    expected = ridge * bytes_per_param / 2
    mistakes = [
        ("the division by 2 is missing: each weight read gives 2 FLOPs per sequence", ridge * bytes_per_param),
        ("bytes_per_param was left out: a weight of b bytes gives 2 / b FLOPs per byte per sequence", ridge / 2),
        (
            "returned peak_flops / bandwidth, the critical batch of 2-byte weights: bytes_per_param was taken as 2, "
            "or left out together with the division by 2 (at 2 bytes per weight they cancel)",
            ridge,
        ),
        ("the ratio is upside down: peak FLOP/s divided by bandwidth", bandwidth / peak * bytes_per_param / 2),
        (
            "divided by bytes_per_param: multiply, since fewer bytes per weight means less work per byte",
            ridge / bytes_per_param / 2,
        ),
        (
            "divided by bytes_per_param (multiply: fewer bytes per weight, less work per byte) and the division "
            "by 2 is missing",
            ridge / bytes_per_param,
        ),
        (ROUNDED, math.floor(expected)),
        (ROUNDED, (peak // bandwidth) * bytes_per_param / 2),
        (ROUNDED, ridge * (bytes_per_param // 2)),
    ]
    return expected, _told_apart([], [(h, v) for h, v in mistakes if not _same(v, expected)])


@judges_value
def _judge_critical(probe, got):
    return judge_number(got, *_critical_numbers(*probe["args"]), "the batch size", unit="sequences")


def _on_an_a100(bytes_per_param: float):
    """The probe of a visible check of the critical batch on an A100-80G (312 TFLOP/s, 2.039 TB/s).
    The checks stay written out below: the learners' copy's build tells visible checks by their
    ``visible=True`` where they are declared."""
    return _numbers("critical_batch_size", lambda rng: [312e12, 2.039e12, bytes_per_param])


CRITICAL = Exercise(
    "critical_batch_size",
    ("critical_batch_size",),
    [
        Check("a100_bf16", 1, "A100-80G in bf16 (about 153)", _on_an_a100(2), _judge_critical, visible=True),
        Check("a100_int8", 0, "A100-80G with int8 weights (about 77)", _on_an_a100(1), _judge_critical, visible=True),
        Check(
            "a100_fp32",
            0,
            "A100-80G with fp32 weights (about 306): at 4 bytes no two mistakes give the same number",
            _on_an_a100(4),
            _judge_critical,
            visible=True,
        ),
        Check(
            "int8",
            2,
            "another device with int8 weights",
            _numbers(
                "critical_batch_size",
                lambda rng: [float(rng.integers(50, 1000)) * 1e12, float(rng.integers(3, 50)) * 1e11, 1],
            ),
            _judge_critical,
        ),
    ],
    requirements=[
        Requirement("peak / bandwidth * bytes_per_param / 2", ("a100_bf16", "a100_int8", "a100_fp32", "int8")),
        Requirement("fewer bytes per weight, a smaller batch (int8)", ("a100_int8", "int8")),
    ],
)


# --- static_batch_throughput --------------------------------------------------------------------


@withheld
def _static_seconds(outputs, batch, step):
    """Seconds that static batches of ``batch`` take to serve ``outputs``, ``step`` seconds a decode step."""
    chunks = [outputs[i : i + batch] for i in range(0, len(outputs), batch)]
    return sum(max(c) for c in chunks) * step


@withheld
def _static_numbers(outputs, batch, step) -> tuple[float, list[tuple[str, float]]]:
    """The static batches' throughput in tokens per second, and the common mistakes' numbers with their hints."""
    chunks = [outputs[i : i + batch] for i in range(0, len(outputs), batch)]
    tokens = sum(outputs)
    expected = tokens / _static_seconds(outputs, batch, step)
    mistakes = [
        (
            "each batch took its mean length: a static batch runs until its longest request is done",
            tokens / (sum(sum(c) / len(c) for c in chunks) * step),
        ),
        (
            "all requests ran as one batch: split them into batches of batch_size, in order",
            tokens / (max(outputs) * step),
        ),
        (
            "batches took the sum of their lengths: the requests of a batch decode together, one step for all",
            tokens / (sum(outputs) * step),
        ),
        ("counted batch_size tokens per step for every step: finished requests idle in their slot", batch / step),
        ("returned the seconds: the throughput is tokens / seconds", _static_seconds(outputs, batch, step)),
        (
            "counted the idle slots as tokens (batch size x longest answer per batch): count the tokens generated",
            sum(len(c) * max(c) for c in chunks) / _static_seconds(outputs, batch, step),
        ),
        (
            "the last, smaller batch was left out: it runs too, as many steps as its longest request",
            sum(outputs[: len(outputs) // batch * batch])
            / max(_static_seconds(outputs[: len(outputs) // batch * batch], batch, step), 1e-300),
        ),
        (
            "every batch ran as long as the longest request of all: a batch runs until its own longest is done",
            tokens / (len(chunks) * max(outputs) * step),
        ),
        ("1000 times too small: step_seconds is in seconds already, and the throughput is per second", expected / 1e3),
        (ROUNDED, math.floor(expected)),
    ]
    return expected, _told_apart([], mistakes)


@judges_value
def _judge_static(probe, got):
    return judge_number(got, *_static_numbers(*probe["args"]), "the throughput in tokens per second", unit="tokens/s")


STATIC = Exercise(
    "static_batch_throughput",
    ("static_batch_throughput",),
    [
        Check(
            "example",
            1,
            "the chapter's example: 7 requests in batches of 3, the last batch of 1",
            _numbers("static_batch_throughput", lambda rng: [[10, 40, 20, 30, 5, 15, 25], 3, 0.02]),
            _judge_static,
            visible=True,
        ),
        Check(
            "random",
            2,
            "a longer trace, an uneven last batch",
            _numbers(
                "static_batch_throughput",
                lambda rng: [
                    [int(x) for x in rng.integers(1, 300, 23)],
                    int(rng.integers(3, 8)),
                    float(rng.uniform(0.005, 0.05)),
                ],
            ),
            _judge_static,
        ),
    ],
    requirements=[
        Requirement(
            "consecutive requests in batches of batch_size, each running as many steps as its longest request",
            ("example", "random"),
        ),
        Requirement("the last batch may be smaller", ("example", "random")),
        Requirement("generated tokens per second", ("example", "random")),
    ],
)

EXERCISES = [WEIGHT_MEMORY, PREFILL, ROOFLINE, CRITICAL, STATIC]
