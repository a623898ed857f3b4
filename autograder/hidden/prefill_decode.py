"""Chapter 1's hidden checks, and what each exercise's prompt asks (the coverage table)."""

from __future__ import annotations

from autograder.chapters.prefill_decode import (
    judge_critical,
    judge_memory,
    judge_prefill,
    judge_roofline,
    judge_static,
    numbers,
    roofline_args,
)
from autograder.checks import Check, Requirement

HIDDEN = {
    "weight_memory_gb": [
        Check(
            "other",
            2,
            "another size at 3 bits",
            numbers("weight_memory_gb", lambda rng: [float(rng.integers(1, 400)) * 1e9, 3]),
            judge_memory,
        ),
    ],
    "prefill_flops": [
        Check(
            "random",
            2,
            "other sizes",
            numbers("prefill_flops", lambda rng: [float(rng.integers(1, 100)) * 1e9, int(rng.integers(2, 5000))]),
            judge_prefill,
        ),
    ],
    "roofline_step_time": [
        Check(
            "compute_bound",
            1,
            "a compute-bound step (prefill)",
            numbers("roofline_step_time", roofline_args((400, 3000))),
            judge_roofline,
        ),
    ],
    "critical_batch_size": [
        Check(
            "int8",
            2,
            "another device with int8 weights",
            numbers(
                "critical_batch_size",
                lambda rng: [float(rng.integers(50, 1000)) * 1e12, float(rng.integers(3, 50)) * 1e11, 1],
            ),
            judge_critical,
        ),
    ],
    "static_batch_throughput": [
        Check(
            "random",
            2,
            "a longer trace, an uneven last batch",
            numbers(
                "static_batch_throughput",
                lambda rng: [
                    [int(x) for x in rng.integers(1, 300, 23)],
                    int(rng.integers(3, 8)),
                    float(rng.uniform(0.005, 0.05)),
                ],
            ),
            judge_static,
        ),
    ],
}

REQUIREMENTS = {
    "weight_memory_gb": [
        Requirement("params * bits / 8 bytes", ("70b", "7b_3bit", "other")),
        Requirement("in GB of 10^9 bytes, fractions kept", ("70b", "7b_3bit", "other")),
        Requirement("any number of bits (3 too)", ("7b_3bit", "other")),
    ],
    "prefill_flops": [
        Requirement("about 2 * params * tokens FLOPs", ("8b", "random")),
    ],
    "roofline_step_time": [
        Requirement(
            "max(FLOPs / peak, bytes / bandwidth), in seconds", ("memory_bound", "prefill_8b", "compute_bound")
        ),
        Requirement("memory-bound work: the bytes decide", ("memory_bound",)),
        Requirement("compute-bound work: the FLOPs decide", ("prefill_8b", "compute_bound")),
    ],
    "critical_batch_size": [
        Requirement("peak / bandwidth * bytes_per_param / 2", ("a100_bf16", "a100_int8", "a100_fp32", "int8")),
        Requirement("fewer bytes per weight, a smaller batch (int8)", ("a100_int8", "int8")),
    ],
    "static_batch_throughput": [
        Requirement(
            "consecutive requests in batches of batch_size, each running as many steps as its longest request",
            ("example", "random"),
        ),
        Requirement("the last batch may be smaller", ("example", "random")),
        Requirement("generated tokens per second", ("example", "random")),
    ],
}
