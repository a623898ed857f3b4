"""Chapter 3's demonstrations and headline numbers.

A demonstration takes the chapter's exercises it uses as keyword-only parameters, so that a cell
draws it with the notebook's own functions once they are written (:func:`shown`). Before that the
cell shows the course's numbers on the same fixed inputs: ``recorded_*`` (the course's answers run
by ``course/answers/quantization.py``; in the learners' copy, what they returned when the copy was
made) or ``stored_*`` (what ``make reference`` stored in data/reference/quantization.json).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from course import withheld
from course.quantization.absmax import (
    COURSE,
    course_answer,
    dequantize,
    effective_bits_double_quant,
    relative_norm_error,
    round_trip,
)
from course.quantization.awq import AWQ_GRID, awq_grid
from course.quantization.gptq import output_error
from course.quantization.int8 import int8_matmul, int8_matmul_with_outliers
from course.quantization.matrices import gaussian_matrix, outlier_matrix
from course.quantization.models import (
    AWQ_BITS,
    CALIBRATION_WINDOWS,
    EVAL_WINDOWS,
    GPTQ_BITS,
    MODEL_SETTINGS,
    course_model_awq,
    course_model_calibrated,
    course_model_gptq,
)
from course.quantization.nf4 import nf4_quantize_dequantize

# --- the notebook's functions, or the course's numbers ---------------------------------------------

TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "quantize_dequantize": (torch.tensor([[0.5, -0.2, 0.1, 0.0]]), 4),
    "relative_error": (torch.tensor([[0.5, -0.2]]), torch.tensor([[0.5, -0.1]])),
    "quantize_int8": (torch.tensor([[0.5, -0.2]]),),
    "dequantize_int8": (torch.tensor([[127, -51]], dtype=torch.int8), torch.tensor([[0.5 / 127]])),
    "gptq_quantize": (torch.tensor([[0.5, -0.2]]), torch.eye(2), 4),
}


def your_functions(namespace: dict, what: str, *names: str) -> dict | None:
    """The notebook's own ``names`` (chapter 3's exercises), by name, once every one is written (tried
    on :data:`TRIED_ON`, ``withheld.written``); None before that. Prints whose numbers ``what`` shows."""
    from course.readings import listing

    missing = [name for name in names if not withheld.written(namespace, name, *TRIED_ON[name])]
    quoted = listing([f"`{name}`" for name in missing or names])
    if not missing:
        print(f"Your {quoted} {'draws' if len(names) == 1 else 'draw'} {what}.")
        return {name: namespace[name] for name in names}
    it, verb = ("it", "is") if len(missing) == 1 else ("them", "are")
    print(
        f"Your {quoted} {verb} not written yet: the course's numbers, recorded on the same inputs, draw {what} "
        f"(write {it}, then run this cell again)."
    )
    return None


def shown(namespace: dict, what: str, demo: Callable, *args, course: Callable[[], object], **kwargs):
    """``demo(*args, **kwargs)`` with the notebook's own functions for the exercises ``demo`` takes
    (its keyword-only parameters named in :data:`TRIED_ON`) once they are all written; before that
    ``course()``, the course's numbers on the same inputs. Prints whose numbers ``what`` shows.

    While the learners' copy is recorded, ``course()`` is called beside the notebook's own: the
    instructor's notebook, whose functions are the solution's, then records what a blank notebook
    shows here."""
    parameters = inspect.signature(demo).parameters.values()
    needs = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in TRIED_ON]
    yours = your_functions(namespace, what, *needs)
    if yours is None:
        return course()
    if withheld.is_recording():
        course()
    return demo(*args, **kwargs, **yours)


# --- one matrix: bits, granularity, outliers -------------------------------------------------------


def granularity_errors(
    weight: torch.Tensor, bits_list=(8, 4), groups=(None, 128, 32), *, quantize_dequantize, relative_error
) -> dict[str, float]:
    """Relative error at each bit width and granularity, keyed like ``int4_g32`` or ``int8_row``."""
    errors = {}
    for bits in bits_list:
        for group in groups:
            key = f"int{bits}_{'row' if group is None else f'g{group}'}"
            errors[key] = relative_error(weight, quantize_dequantize(weight, bits, group))
    return errors


def granularity_errors_of(
    with_outliers: torch.Tensor, without: torch.Tensor, *, quantize_dequantize, relative_error
) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`granularity_errors` of a matrix with outlier columns and of one without: (with, without)."""
    functions = {"quantize_dequantize": quantize_dequantize, "relative_error": relative_error}
    return granularity_errors(with_outliers, **functions), granularity_errors(without, **functions)


def stored_granularity_errors(numbers: dict) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`granularity_errors` of ``outlier_matrix`` and ``gaussian_matrix`` (256 x 512, seed 0)
    as ``make reference`` stored them: (with outliers, without)."""
    keys = [f"int{bits}_{'row' if group is None else f'g{group}'}" for bits in (8, 4) for group in (None, 128, 32)]
    return tuple({key: numbers[f"{kind}_{key}"]["value"] for key in keys} for kind in ("outlier", "clean"))


def granularity_reading(with_outliers: dict[str, float], without: dict[str, float], group: int = 32) -> str:
    """How much groups of ``group`` cut the error of one scale per row, with outliers and without, at
    each bit width of two :func:`granularity_errors` results, and where the groups matter more."""
    lines = []
    for bits in sorted({int(key[3:].split("_")[0]) for key in with_outliers}, reverse=True):
        row, grouped = f"int{bits}_row", f"int{bits}_g{group}"
        gains = [errors[row] / errors[grouped] for errors in (with_outliers, without)]
        where = "with outliers" if gains[0] > gains[1] else "without them"
        lines.append(
            f"int{bits}, groups of {group} instead of one scale per row: the error falls {gains[0]:.2f}x with outliers "
            f"({100 * with_outliers[row]:.2f}% -> {100 * with_outliers[grouped]:.2f}%) and {gains[1]:.2f}x without "
            f"({100 * without[row]:.2f}% -> {100 * without[grouped]:.2f}%): the groups matter more {where}"
        )
    return "\n".join(lines)


def bits_sweep(
    weight: torch.Tensor, groups=(None, 128, 32), bits_range=range(2, 9), *, quantize_dequantize, relative_error
) -> dict[str, list[float]]:
    """Relative error at each width of ``bits_range``, one list per granularity ("per row", "group 128", ...)."""
    return {
        "per row" if group is None else f"group {group}": [
            relative_error(weight, quantize_dequantize(weight, b, group)) for b in bits_range
        ]
        for group in groups
    }


def recorded_bits_sweep(seed: int = 0) -> dict[str, list[float]]:
    """The course's :func:`bits_sweep` of ``gaussian_matrix(256, 512, seed=seed)``."""
    return COURSE.bits_sweep(seed)


def worst_half_steps(seed: int = 0) -> dict[str, float]:
    """The largest error of the course's round trip of ``outlier_matrix(256, 512, seed=seed)``, in
    half-steps of each weight's group, at 8, 4 and 3 bits, per row and in groups of 32."""
    return COURSE.worst_half_steps(seed)


def outlier_row_example(outlier: float = 4.2, seed: int = 3) -> dict[str, float]:
    """One row of 64 ordinary weights, int8 per-row, before and after one weight becomes ``outlier``
    (the course's round trip)."""
    row = gaussian_matrix(1, 64, std=0.15, seed=seed)
    spiked = row.clone()
    spiked[0, 0] = outlier
    before = round_trip(row, 8)
    after = round_trip(spiked, 8)
    rest = slice(1, None)
    return {
        "scale_before": row.abs().max().item() / 127,
        "scale_after": spiked.abs().max().item() / 127,
        "scale_ratio": spiked.abs().max().item() / row.abs().max().item(),
        "outlier_error": (after[0, 0] - spiked[0, 0]).abs().item(),
        "rest_error_before": relative_norm_error(row[:, rest], before[:, rest]),
        "rest_error_after": relative_norm_error(spiked[:, rest], after[:, rest]),
        "zeroed_before": (before[0, rest] == 0).float().mean().item(),
        "zeroed_after": (after[0, rest] == 0).float().mean().item(),
    }


QUANTIZATION_VIEW = (128, 512, 0)  # rows, cols and seed of the matrix under chapter 3's sliders
VIEW_GROUPS = ("tensor", "row", 128, 64, 32, 16)  # the granularities the sliders offer


def quantization_view(
    bits: int, group_size, outlier: float, *, quantize_dequantize, relative_error
) -> dict[str, object]:
    """What chapter 3's sliders show of ``outlier_matrix(128, 512, magnitude=outlier)`` at ``bits``
    and ``group_size`` ("tensor", "row" or a number): row 0 after the round trip, the share of all
    weights rounded to zero, and the relative error of every granularity of :data:`VIEW_GROUPS`."""
    rows, cols, seed = QUANTIZATION_VIEW
    weight = outlier_matrix(rows, cols, magnitude=outlier, seed=seed)

    def approx(group):
        if group == "tensor":  # one scale for the whole matrix: the matrix as one row
            return quantize_dequantize(weight.reshape(1, -1), bits, None).reshape(weight.shape)
        return quantize_dequantize(weight, bits, None if group == "row" else group)

    chosen = approx(group_size)
    return {
        "row": chosen[0].float(),
        "zero_share": (chosen == 0).float().mean().item(),
        "errors": [relative_error(weight, approx(group)) for group in VIEW_GROUPS],
    }


def recorded_quantization_view(bits: int, group_size, outlier: float) -> dict[str, object]:
    """The course's :func:`quantization_view`."""
    return COURSE.quantization_view(bits, group_size, outlier)


# --- int8, NF4, LLM.int8() -----------------------------------------------------------------------------


def int8_error(weight: torch.Tensor, *, quantize_int8, dequantize_int8, relative_error) -> float:
    """The relative error of ``weight``'s int8 copy: its codes and per-row scales, multiplied back."""
    return relative_error(weight, dequantize_int8(*quantize_int8(weight)))


def recorded_int8_error(seed: int = 1) -> float:
    """The course's :func:`int8_error` of ``gaussian_matrix(1024, 4096, seed=seed)``."""
    return COURSE.int8_error(seed)


def nf4_against_int4(weight: torch.Tensor, group_size: int = 64, *, quantize_dequantize, relative_error) -> dict:
    """The relative error of ``weight`` through NF4 and through int4, both with one absmax scale per
    ``group_size`` columns: ``{"nf4", "int4"}``."""
    return {
        "nf4": relative_error(weight, nf4_quantize_dequantize(weight, group_size)),
        "int4": relative_error(weight, quantize_dequantize(weight, 4, group_size)),
    }


def stored_nf4_against_int4(numbers: dict) -> dict:
    """:func:`nf4_against_int4` of ``gaussian_matrix(256, 512, seed=0)``, as ``make reference`` stored it."""
    return {name: numbers[f"{name}_g64_normal"]["value"] for name in ("nf4", "int4")}


def llm_int8_example(*, quantize_int8, relative_error) -> dict[str, float]:
    """Chapter 3's LLM.int8() example: 64 tokens of 512 features, 3 of them 20x larger, through a
    256 x 512 layer: the relative error of int8 everywhere and with the outlier features in float."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=generator)  # (tokens, features)
    x[:, [7, 100, 300]] *= 20.0  # three outlier features, in every token
    w = gaussian_matrix(256, 512, seed=2)  # (out, in)
    exact = x @ w.T
    mixed, columns = int8_matmul_with_outliers(x, w, 6.0, quantize_int8=quantize_int8)
    return {
        "int8": relative_error(exact, int8_matmul(x, w, quantize_int8=quantize_int8)),
        "mixed": relative_error(exact, mixed),
        "kept": len(columns),
        "features": x.shape[1],
    }


def recorded_llm_int8_example() -> dict[str, float]:
    """The course's :func:`llm_int8_example`."""
    return COURSE.llm_int8_example()


# --- the course model ------------------------------------------------------------------------------


def recorded_model_losses(windows: int = EVAL_WINDOWS) -> dict[str, dict[int, float]]:
    """The course's ``model_losses`` of its target on ``windows`` held-out windows."""
    widths = [bits for bits, group in MODEL_SETTINGS if group is None]
    return {label: dict(zip(widths, losses, strict=True)) for label, losses in COURSE.model_losses(windows).items()}


def gptq_layer(weight, hessian, *, quantize_dequantize, relative_error, gptq_quantize) -> dict[str, float]:
    """One layer at 4 bits in groups of 64, rounded to nearest and through GPTQ: each one's output
    error (:func:`output_error`) and the relative error of its weights."""
    rtn = quantize_dequantize(weight, 4, 64)
    gptq = dequantize(*gptq_quantize(weight, hessian, 4, 64)).to(weight.dtype)
    return {
        "rtn": output_error(weight, rtn, hessian),
        "gptq": output_error(weight, gptq, hessian),
        "rtn_weights": relative_error(weight, rtn),
        "gptq_weights": relative_error(weight, gptq),
    }


def recorded_gptq_layer(name: str, calibration_windows: int = CALIBRATION_WINDOWS) -> dict[str, float]:
    """The course's :func:`gptq_layer` of its target's layer ``name``, calibrated on ``calibration_windows``."""
    return COURSE.gptq_layer(name, calibration_windows)


def stored_gptq_losses(numbers: dict, bits_list=GPTQ_BITS) -> dict[str, dict[int, float]]:
    """``gptq_against_rtn``'s losses of the course model as ``make reference`` stored them."""
    return {
        label: {bits: numbers[f"model_{key}_g64_{bits}bit_loss"]["value"] for bits in bits_list}
        for label, key in (("round to nearest", "rtn"), ("GPTQ", "gptq"))
    }


AWQ_STUDIED = (("blocks.5", ("mlp.down_proj",)), ("blocks.3", ("mlp.gate_proj", "mlp.up_proj")))


def recorded_awq_studies(bits: int = 3, calibration_windows: int = CALIBRATION_WINDOWS) -> dict[str, dict]:
    """The course's ``awq_layer_study`` of a layer with 3 outlier input channels and of the course
    model's layers in :data:`AWQ_STUDIED`, by label."""
    grid = awq_grid(AWQ_GRID)
    return {
        label: {**study, "errors": dict(zip(grid, study["errors"], strict=True))}
        for label, study in COURSE.awq_studies(bits, calibration_windows).items()
    }


def recorded_awq_losses(
    bits_list=AWQ_BITS, windows: int = EVAL_WINDOWS, calibration_windows: int = CALIBRATION_WINDOWS
) -> dict[int, dict]:
    """The course's ``awq_against_rtn`` of its target at ``bits_list``, groups of 64."""
    measured = COURSE.awq_losses(tuple(bits_list), windows, calibration_windows)
    return {int(bits): value for bits, value in measured.items()}


# --- the reference numbers -------------------------------------------------------------------------


def reference_numbers() -> dict[str, tuple[float, float, str]]:
    """Chapter 3's headline numbers, from the course's answers: name -> (value, tolerance, how it was made)."""
    course = {"quantize_dequantize": round_trip, "relative_error": relative_norm_error}
    numbers: dict[str, tuple[float, float, str]] = {}
    clean = gaussian_matrix(256, 512, seed=0)
    spiky = outlier_matrix(256, 512, seed=0)
    for key, value in granularity_errors(spiky, **course).items():
        numbers[f"outlier_{key}"] = (value, 2e-4, f"relative error, outlier_matrix(256, 512, seed=0), {key}")
    for key, value in granularity_errors(clean, **course).items():
        numbers[f"clean_{key}"] = (value, 2e-4, f"relative error, gaussian_matrix(256, 512, seed=0), {key}")
    numbers["outlier_error_ratio_int8_row"] = (
        numbers["outlier_int8_row"][0] / numbers["clean_int8_row"][0],
        0.05,
        "int8 per-row error with outlier columns over the error without them",
    )
    numbers["int4_g64_fp16_bits"] = (course_answer("effective_bits")(4, 64), 0.0, "4 + 16/64")
    numbers["nf4_double_quant_bits"] = (effective_bits_double_quant(), 1e-9, "4 + 8/64 + 32/(64*256)")
    errors = nf4_against_int4(clean, 64, **course)
    numbers["nf4_g64_normal"] = (errors["nf4"], 2e-4, "NF4, groups of 64, gaussian_matrix(seed=0)")
    calibrated = course_model_calibrated()
    baseline, by_method = course_model_gptq(calibrated)
    by_method["AWQ"] = {bits: measured["loss"] for bits, measured in course_model_awq(calibrated).items()}
    how = f"course target, groups of 64, {EVAL_WINDOWS} held-out windows, {CALIBRATION_WINDOWS} calibration windows"
    numbers["model_fp32_loss"] = (baseline, 1e-4, f"float32 held-out loss (nats/byte), {EVAL_WINDOWS} windows")
    for method, key in (("round to nearest", "rtn"), ("GPTQ", "gptq"), ("AWQ", "awq")):
        for bits, loss in by_method[method].items():
            tolerance = 0.02 if bits == 2 else 3e-3  # float32 sums in another order move GPTQ's codes a little
            numbers[f"model_{key}_g64_{bits}bit_loss"] = (loss, tolerance, f"{method}, {bits} bits, {how}")
    numbers["int4_g64_normal"] = (errors["int4"], 2e-4, "int4, groups of 64, gaussian_matrix(seed=0)")
    return numbers
