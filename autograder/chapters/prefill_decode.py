"""Chapter 1's exercises: weight memory, prefill FLOPs, the roofline's step time, the critical
batch size, and the throughput of static batching, with their visible checks. Each judge compares
with the chapter's answer (``ANSWERS``, its solution cells) and names the known mistake it matches
(``MISTAKES``, ``autograder/mistakes/prefill_decode.py``: where two mistakes give the same number
its hint names each); the hidden checks are ``autograder/hidden/prefill_decode.py``'s. Every number
in a hint carries its unit. The visible checks run the prompts' own examples, which a notebook
could copy: their points are at most a third of an exercise's, the rest is earned on inputs drawn
afresh for each graded notebook."""

from __future__ import annotations

from autograder.checks import Check, Exercise, judge_number, judges_value
from course import withheld

ANSWERS = withheld.answers("01_prefill_decode")
MISTAKES = withheld.module("autograder.mistakes.prefill_decode")


def numbers(call: str, pick):
    """A probe calling ``call`` with the arguments ``pick(rng)`` draws."""

    def make(rng) -> dict:
        return {"call": call, "args": pick(rng)}

    return make


# --- weight_memory_gb --------------------------------------------------------------------------


@judges_value
def judge_memory(probe, got):
    args = probe["args"]
    expected, mistakes = ANSWERS.weight_memory_gb(*args), MISTAKES.of_weight_memory_gb(*args)
    return judge_number(got, expected, mistakes, "the weight memory in GB", unit="GB")


WEIGHT_MEMORY = Exercise(
    "weight_memory_gb",
    ("weight_memory_gb",),
    [
        Check(
            "70b",
            1,
            "70B parameters at 16, 8 and 4 bits: 140 / 70 / 35 GB",
            numbers("weight_memory_gb", lambda rng: [70e9, int(rng.choice([16, 8, 4]))]),
            judge_memory,
            visible=True,
        ),
        Check(
            "7b_3bit",
            0,
            "7B parameters at 3 bits: 2.625 GB",
            numbers("weight_memory_gb", lambda rng: [7e9, 3]),
            judge_memory,
            visible=True,
        ),
    ],
)


# --- prefill_flops ------------------------------------------------------------------------------


@judges_value
def judge_prefill(probe, got):
    args = probe["args"]
    return judge_number(got, ANSWERS.prefill_flops(*args), MISTAKES.of_prefill_flops(*args), "the FLOPs", unit="FLOPs")


PREFILL = Exercise(
    "prefill_flops",
    ("prefill_flops",),
    [
        Check(
            "8b",
            0,
            "8B parameters, a 1000-token prompt",
            numbers("prefill_flops", lambda rng: [8e9, 1000]),
            judge_prefill,
            visible=True,
        ),
    ],
)


# --- roofline_step_time -------------------------------------------------------------------------


@judges_value
def judge_roofline(probe, got):
    args = probe["args"]
    expected, mistakes = ANSWERS.roofline_step_time(*args), MISTAKES.of_roofline_step_time(*args)
    return judge_number(got, expected, mistakes, "the step time in seconds", unit="s")


def roofline_args(intensity: tuple[float, float]):
    """Arguments of a step on an A100-80G that moves a few GB and does FLOPs per byte drawn from ``intensity``."""

    def pick(rng):
        peak, bandwidth = 312e12, 2.039e12
        n_bytes = float(rng.integers(2, 100)) * 1e9
        flops = n_bytes * rng.uniform(*intensity)
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
            numbers("roofline_step_time", roofline_args((0.5, 20))),
            judge_roofline,
            visible=True,
        ),
        Check(
            "prefill_8b",
            1,
            "a compute-bound step: prefill of 8B parameters, 1000 tokens, on an A100-80G (about 0.051 s)",
            numbers("roofline_step_time", lambda rng: [2 * 8e9 * 1000, 16e9, 312e12, 2.039e12]),
            judge_roofline,
            visible=True,
        ),
    ],
)


# --- critical_batch_size ------------------------------------------------------------------------


@judges_value
def judge_critical(probe, got):
    args = probe["args"]
    expected, mistakes = ANSWERS.critical_batch_size(*args), MISTAKES.of_critical_batch_size(*args)
    return judge_number(got, expected, mistakes, "the batch size", unit="sequences")


def _on_an_a100(bytes_per_param: float):
    """The probe of a visible check of the critical batch on an A100-80G (312 TFLOP/s, 2.039 TB/s)."""
    return numbers("critical_batch_size", lambda rng: [312e12, 2.039e12, bytes_per_param])


CRITICAL = Exercise(
    "critical_batch_size",
    ("critical_batch_size",),
    [
        Check("a100_bf16", 1, "A100-80G in bf16 (about 153)", _on_an_a100(2), judge_critical, visible=True),
        Check("a100_int8", 0, "A100-80G with int8 weights (about 77)", _on_an_a100(1), judge_critical, visible=True),
        Check(
            "a100_fp32",
            0,
            "A100-80G with fp32 weights (about 306): at 4 bytes no two mistakes give the same number",
            _on_an_a100(4),
            judge_critical,
            visible=True,
        ),
    ],
)


# --- static_batch_throughput --------------------------------------------------------------------


@judges_value
def judge_static(probe, got):
    args = probe["args"]
    expected, mistakes = ANSWERS.static_batch_throughput(*args), MISTAKES.of_static_batch_throughput(*args)
    return judge_number(got, expected, mistakes, "the throughput in tokens per second", unit="tokens/s")


STATIC = Exercise(
    "static_batch_throughput",
    ("static_batch_throughput",),
    [
        Check(
            "example",
            1,
            "the chapter's example: 7 requests in batches of 3, the last batch of 1",
            numbers("static_batch_throughput", lambda rng: [[10, 40, 20, 30, 5, 15, 25], 3, 0.02]),
            judge_static,
            visible=True,
        ),
    ],
)

EXERCISES = [WEIGHT_MEMORY, PREFILL, ROOFLINE, CRITICAL, STATIC]
