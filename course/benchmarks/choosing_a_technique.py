"""Chapter 9's measurements for ``make bench``: the capstone's reference configuration, its parts, the
reference server built as the exercises build it, and the learner's server with the solution's own
``Int4Linear`` and ``speculative_greedy`` (its codes and loop, as a learner who wrote them runs them).

Not handled: another chapter's solution cells (:func:`solution_answers` reads chapter 9's).
"""

from __future__ import annotations

import torch

from course import paths, timing
from course.choosing_a_technique import Configuration, generation, measure, reference, time_generation
from course.drafts import greedy_speculative
from course.learner_server import LearnerServer, gap_reading, server_reading, speedups
from course.smollm2_timing import smollm2_time
from course.stored_weights import course_int4_layer

SOLUTION = "09_choosing_a_technique.py"
LEARNERS_CODE = ("imports", "pack_int4", "int4_linear", "speculative_greedy")  # the grade ids the server runs


def answer_cells() -> dict[str, str]:
    """The source of each cell of ``solutions/09_choosing_a_technique.py`` that has an nbgrader
    grade id, by that id (read with jupytext, as ``make release`` reads it; markers included)."""
    import jupytext

    notebook = jupytext.read(paths.require(paths.SOLUTIONS / SOLUTION))
    return {
        cell.metadata["nbgrader"]["grade_id"]: cell.source
        for cell in notebook.cells
        if cell.metadata.get("nbgrader", {}).get("grade_id")
    }


def solution_answers(grade_ids=LEARNERS_CODE) -> dict:
    """The namespace of this chapter's solution cells ``grade_ids`` (:func:`answer_cells`), run in
    order in a fresh namespace: the learner's code as the solution writes it. KeyError names a
    grade id that has no cell."""
    cells = answer_cells()
    namespace: dict = {"__name__": "solution"}
    for grade_id in grade_ids:
        if grade_id not in cells:
            raise KeyError(f"{SOLUTION} has no cell with grade id {grade_id!r}")
        exec(compile(cells[grade_id], f"{SOLUTION}:{grade_id}", "exec"), namespace)
    return namespace


def _reference_configuration_server(layer, loop) -> LearnerServer:
    """The learner's server of the reference configuration, with ``layer`` and ``loop``."""
    ours = reference()
    return LearnerServer(layer, loop, ours.group_size, ours.draft, ours.draft_length, ours.calibration)


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter on ``device`` (printed; ratios returned for
    ``data/performance.json``): the reference configuration and each of its parts against the fp32
    target alone, with the memory bound ``bound`` (GB/s); then the reference server built as the
    exercises build it, the learner's server (the solution's layer and loop, and its codes through the
    fused product), and SmolLM2 with the course's int4 codes."""
    print("\n== chapter 9: the capstone's reference configuration ==")
    baseline, parts, new = Configuration(), reference().parts(), 128
    chosen, tried = timing.choose_threads(generation(baseline, device, new), device)
    print(timing.describe_threads(chosen, tried))
    with timing.threads(chosen):
        seconds = time_generation([baseline, *parts.values()], device, new)
    for name, config in {"fp32 alone": baseline, **parts}.items():
        figures = measure(config)
        roof = bound * 1e9 / figures.target_bytes  # target steps per second if reading its weights were all
        print(
            f"{name:31s} {new / seconds[config]:6.0f} tokens/s, {seconds[baseline] / seconds[config]:4.2f}x the fp32 "
            f"target alone; {figures.tokens_per_call:.2f} tokens per target call, target weights "
            f"{figures.target_bytes / 1e6:.1f} MB (the memory bound: {roof:.0f} target calls/s)"
        )
    ratios = {
        f"capstone_speedup_{name.split(',')[0].replace(' ', '_')}": seconds[baseline] / seconds[config]
        for name, config in parts.items()
    }
    # the server the learner builds, with the course's layer (fused int4 product) and loop
    server = _reference_configuration_server(course_int4_layer, greedy_speculative)
    with timing.threads(chosen):
        results = server.time(new)
    print("the reference server, built as the chapter's exercises build it (the course's layer and loop):")
    print(server_reading(results, new))
    speedup = speedups(results)
    ratios["capstone_speedup_reference_server"] = speedup["your server"]
    ratios["capstone_speedup_reference_server_shared"] = speedup["your codes, fused int4 product"]
    # the learner's server: the solution's own layer (a float32 rebuild per call) and loop
    learner = solution_answers()
    server = _reference_configuration_server(learner["Int4Linear"], learner["speculative_greedy"])
    with timing.threads(chosen):
        results, layers = server.time(new), server.layer_seconds()
    print(f"the learner's server (the solution's Int4Linear and speculative_greedy), {chosen} CPU thread(s):")
    print(server_reading(results, new, record=False))
    print(gap_reading(results, layers))
    speedup = speedups(results)
    ratios["capstone_speedup_learner_server"] = speedup["your server"]
    ratios["capstone_speedup_learner_server_fused"] = speedup["your codes, fused int4 product"]
    print(
        f"learner's codes and loop, fused product: {ratios['capstone_speedup_learner_server_fused']:.2f}x the fp32 "
        f"target timed in the same run, {chosen} CPU thread(s)"
    )
    # the same layer in chapter 8's SmolLM2 (its layers large enough for fewer bytes to pay)
    with timing.threads(chosen):
        smollm2 = smollm2_time(course_int4_layer, 64, new_tokens=32)
    print("SmolLM2-135M with the course's int4 codes (groups of 64), through the fused product:")
    print(server_reading(smollm2, 32, record=False))
    ratios["capstone_speedup_smollm2_int4"] = speedups(smollm2)["your codes in SmolLM2, fused int4"]
    return ratios
