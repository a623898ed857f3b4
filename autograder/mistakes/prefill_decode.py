"""Chapter 1's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/prefill_decode.py`` name a mistake by it), and wrong answers written out."""

from __future__ import annotations

import math

from autograder.mistakes import Planted
from course import withheld

ANSWERS = withheld.answers("01_prefill_decode")
JOINED = "one of these mistakes, which give the same number here: "
ROUNDED = "rounded down (// or int()) where the formula needs true division: use /"


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)  # judge_number's tolerances


def told_apart(seen: list[tuple[str, float]], causes: list[tuple[str, float]]) -> list[tuple[str, float]]:
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


# --- weight_memory_gb --------------------------------------------------------------------------


def of_weight_memory_gb(params, bits) -> list[tuple[str, float]]:
    """The common mistakes' numbers in GB with their hints."""
    expected = ANSWERS.weight_memory_gb(params, bits)
    mistakes = [
        ("bits were not divided by 8: a byte holds 8 bits", params * bits / 1e9),
        ("returned bytes: divide by 1e9 for GB", params * bits / 8),
        ("divided by 2**30: that is GiB; the chapter's GB are 1e9 bytes", params * bits / 8 / 2**30),
        ("multiplied by bits / 8 the wrong way round: bytes = params * bits / 8", params * 8 / bits / 1e9),
        ("counted 2 bytes per weight whatever the bits: use bits / 8 bytes", params * 2 / 1e9),
        (ROUNDED, math.floor(expected)),
        (f"bits // 8 is {bits // 8} for {bits:g} bits (integer division): use bits / 8", params * (bits // 8) / 1e9),
    ]
    return told_apart([], mistakes)


# --- prefill_flops ------------------------------------------------------------------------------


def of_prefill_flops(params, tokens) -> list[tuple[str, float]]:
    """The common mistakes' numbers of FLOPs with their hints."""
    mistakes = [
        ("the factor 2 is missing: each weight is one multiply and one add", params * tokens),
        ("tokens were squared: the 2 * params * tokens term is linear in the prompt", 2 * params * tokens**2),
        ("counted one token only: prefill runs the whole prompt", 2 * params),
        (
            "used 6 * params * tokens, the cost of training (forward and backward): prefill is a forward pass",
            6 * params * tokens,
        ),
    ]
    return told_apart([], mistakes)


# --- roofline_step_time -------------------------------------------------------------------------


def of_roofline_step_time(flops, n_bytes, peak, bandwidth) -> list[tuple[str, float]]:
    """The common mistakes' step times in seconds with their hints."""
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
    expected = ANSWERS.roofline_step_time(flops, n_bytes, peak, bandwidth)
    mistakes = [
        ("added the two times: the roofline takes the larger (compute and memory traffic overlap)", compute + memory),
        ("FLOPs and bytes were divided by the wrong rates", max(flops / bandwidth, n_bytes / peak)),
        ("returned the arithmetic intensity (FLOPs per byte): the roofline's answer is a time", flops / n_bytes),
        (
            "multiplied by the rates: time = FLOPs / (FLOP/s) and bytes / (bytes/s)",
            max(flops * peak, n_bytes * bandwidth),
        ),
        ("returned milliseconds: the roofline's time is in seconds", 1e3 * expected),
        (ROUNDED, math.floor(expected)),
    ]
    return told_apart(seen, mistakes)


# --- critical_batch_size ------------------------------------------------------------------------


def of_critical_batch_size(peak, bandwidth, bytes_per_param) -> list[tuple[str, float]]:
    """The common mistakes' batch sizes with their hints (at 1 or 2 bytes per weight some give the
    same number: the hint then names each; those that give the answer are left out)."""
    ridge = peak / bandwidth
    expected = ANSWERS.critical_batch_size(peak, bandwidth, bytes_per_param)
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
    return told_apart([], [(h, v) for h, v in mistakes if not _same(v, expected)])


# --- static_batch_throughput --------------------------------------------------------------------


def _static_seconds(outputs, batch, step):
    """Seconds that static batches of ``batch`` take to serve ``outputs``, ``step`` seconds a decode step."""
    chunks = [outputs[i : i + batch] for i in range(0, len(outputs), batch)]
    return sum(max(c) for c in chunks) * step


def of_static_batch_throughput(outputs, batch, step) -> list[tuple[str, float]]:
    """The common mistakes' throughputs in tokens per second with their hints."""
    chunks = [outputs[i : i + batch] for i in range(0, len(outputs), batch)]
    tokens = sum(outputs)
    expected = ANSWERS.static_batch_throughput(outputs, batch, step)
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
    return told_apart([], mistakes)


# --- wrong answers written out ------------------------------------------------------------------


def function_cell(name: str, arguments: str, body: str) -> str:
    """The source of a cell defining `name(arguments)` with `body`: a wrong answer written whole (a
    solution cell with one part replaced is :func:`autograder.mistakes.answer_cell`)."""
    return f"def {name}({arguments}):\n" + "".join(f"    {line}\n" for line in body.strip().split("\n"))


MEMORY = ("weight_memory_gb", "params, bits")
ROOFLINE = ("roofline_step_time", "flops, n_bytes, peak_flops, bandwidth")
ALL_ROOFLINE = {f"roofline_step_time.{name}" for name in ("memory_bound", "prefill_8b", "compute_bound")}
CRITICAL = ("critical_batch_size", "peak_flops, bandwidth, bytes_per_param")
STATIC = ("static_batch_throughput", "output_lengths, batch_size, step_seconds")
ALL_STATIC = {"static_batch_throughput.example", "static_batch_throughput.random"}

JUDGED = {  # judged in the tests' process: each check in the set must fail and its hint must name the mistake
    "memory_two_bytes_always": Planted(
        "weight_memory_gb",
        function_cell("weight_memory_gb", "params, bits", "return params * 2 / 1e9"),
        {"weight_memory_gb.other"},
        "2 bytes per weight",
    ),
    "prefill_training_cost": Planted(
        "prefill_flops",
        function_cell("prefill_flops", "params, tokens", "return 6 * params * tokens"),
        {"prefill_flops.8b", "prefill_flops.random"},
        "cost of training",
    ),
    "roofline_intensity": Planted(
        "roofline_step_time",
        function_cell("roofline_step_time", "flops, n_bytes, peak_flops, bandwidth", "return flops / n_bytes"),
        {"roofline_step_time.memory_bound", "roofline_step_time.compute_bound"},
        "arithmetic intensity",
    ),
    "roofline_multiplied": Planted(
        "roofline_step_time",
        function_cell(
            "roofline_step_time",
            "flops, n_bytes, peak_flops, bandwidth",
            "return max(flops * peak_flops, n_bytes * bandwidth)",
        ),
        {"roofline_step_time.memory_bound", "roofline_step_time.compute_bound"},
        "multiplied by the rates",
    ),
    "static_seconds": Planted(
        STATIC[0],
        function_cell(
            *STATIC,
            "steps = sum(max(output_lengths[i:i + batch_size]) for i in range(0, len(output_lengths), batch_size))\n"
            "return steps * step_seconds",
        ),
        ALL_STATIC,
        "returned the seconds",
    ),
    "static_padding_counted": Planted(
        STATIC[0],
        function_cell(
            *STATIC,
            "chunks = [output_lengths[i:i + batch_size] for i in range(0, len(output_lengths), batch_size)]\n"
            "return sum(len(c) * max(c) for c in chunks) / (sum(max(c) for c in chunks) * step_seconds)",
        ),
        ALL_STATIC,
        "idle slots",
    ),
    "static_last_batch_dropped": Planted(
        STATIC[0],
        function_cell(
            *STATIC,
            "full = len(output_lengths) // batch_size * batch_size\n"
            "chunks = [output_lengths[i:i + batch_size] for i in range(0, full, batch_size)]\n"
            "return sum(sum(c) for c in chunks) / (sum(max(c) for c in chunks) * step_seconds)",
        ),
        ALL_STATIC,
        "last, smaller batch",
    ),
    # what a new learner found passing every visible check, or hinted as a mistake it did not make
    "memory_integer_division": Planted(
        MEMORY[0],
        function_cell(*MEMORY, "return params * bits / 8 // 1e9"),
        {"weight_memory_gb.7b_3bit"},
        "rounded down",
    ),
    "memory_bits_floored": Planted(
        MEMORY[0],
        function_cell(*MEMORY, "return params * (bits // 8) / 1e9"),
        {"weight_memory_gb.7b_3bit", "weight_memory_gb.other"},
        "bits // 8 is 0 for 3 bits",
    ),
    "roofline_memory_only": Planted(
        ROOFLINE[0],
        function_cell(*ROOFLINE, "return n_bytes / bandwidth"),
        {"roofline_step_time.prefill_8b", "roofline_step_time.compute_bound"},
        "got the memory time n_bytes / bandwidth alone",
    ),
    "roofline_smaller": Planted(
        ROOFLINE[0],
        function_cell(*ROOFLINE, "return min(flops / peak_flops, n_bytes / bandwidth)"),
        ALL_ROOFLINE,
        "is the larger, and the slower limit decides",
    ),
    "roofline_milliseconds": Planted(
        ROOFLINE[0],
        function_cell(*ROOFLINE, "return 1000 * max(flops / peak_flops, n_bytes / bandwidth)"),
        ALL_ROOFLINE,
        "returned milliseconds",
    ),
    "critical_two_bytes_always": Planted(
        CRITICAL[0],
        function_cell(*CRITICAL, "return peak_flops / bandwidth * 2 / 2"),
        {"critical_batch_size.a100_int8", "critical_batch_size.int8"},
        "the critical batch of 2-byte weights: bytes_per_param was taken as 2",
    ),
    # issue 55: without the division by 2 an int8 answer was told "the critical batch of 2-byte
    # weights", and dividing by the bytes "bytes per parameter were left out"
    "critical_no_half": Planted(
        CRITICAL[0],
        function_cell(*CRITICAL, "return peak_flops / bandwidth * bytes_per_param"),
        {f"critical_batch_size.{name}" for name in ("a100_bf16", "a100_int8", "a100_fp32", "int8")},
        "the division by 2 is missing",
    ),
    "critical_divided_without_half": Planted(
        CRITICAL[0],
        function_cell(*CRITICAL, "return peak_flops / bandwidth / bytes_per_param"),
        {f"critical_batch_size.{name}" for name in ("a100_bf16", "a100_int8", "a100_fp32", "int8")},
        "divided by bytes_per_param (multiply",
    ),
    "critical_divided": Planted(
        CRITICAL[0],
        function_cell(*CRITICAL, "return peak_flops / bandwidth / bytes_per_param / 2"),
        {"critical_batch_size.a100_bf16", "critical_batch_size.a100_fp32"},
        "divided by bytes_per_param: multiply",
    ),
    "critical_integer_division": Planted(
        CRITICAL[0],
        function_cell(*CRITICAL, "return peak_flops / bandwidth * (bytes_per_param // 2)"),
        {"critical_batch_size.a100_int8", "critical_batch_size.int8"},
        "rounded down (// or int())",
    ),
    "static_integer_division": Planted(
        STATIC[0],
        function_cell(
            *STATIC,
            "steps = sum(max(output_lengths[i:i + batch_size]) for i in range(0, len(output_lengths), batch_size))\n"
            "return sum(output_lengths) // (steps * step_seconds)",
        ),
        ALL_STATIC,
        "rounded down",
    ),
    "static_every_slot_a_token": Planted(
        STATIC[0], function_cell(*STATIC, "return batch_size / step_seconds"), ALL_STATIC, "idle in their slot"
    ),
}


PLANTED = {  # graded end to end
    "roofline_sum": Planted(
        "roofline_step_time",
        "def roofline_step_time(flops, n_bytes, peak_flops, bandwidth):\n"
        "    return flops / peak_flops + n_bytes / bandwidth\n",
        {"roofline_step_time.memory_bound", "roofline_step_time.compute_bound"},
        "added the two times",
    ),
    "critical_no_half": Planted(
        "critical_batch_size",
        "def critical_batch_size(peak_flops, bandwidth, bytes_per_param):\n"
        "    return peak_flops / bandwidth * bytes_per_param\n",
        {"critical_batch_size.a100_bf16"},
        "division by 2 is missing",
    ),
    "static_mean": Planted(
        "static_batch_throughput",
        "def static_batch_throughput(output_lengths, batch_size, step_seconds):\n"
        "    chunks = [output_lengths[i:i + batch_size] for i in range(0, len(output_lengths), batch_size)]\n"
        "    return sum(output_lengths) / (sum(sum(c) / len(c) for c in chunks) * step_seconds)\n",
        {"static_batch_throughput.example", "static_batch_throughput.random"},
        "mean length",
    ),
    "memory_in_bits": Planted(
        "weight_memory_gb",
        "def weight_memory_gb(params, bits):\n    return params * bits / 1e9\n",
        {"weight_memory_gb.70b", "weight_memory_gb.other"},
        "divided by 8",
    ),
}
