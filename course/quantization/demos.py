"""Chapter 3's demonstrations and headline numbers: drawn by the notebook's own functions once
written, the course's recorded numbers before that."""

from __future__ import annotations

import torch

from course.quantization import absmax
from course.quantization.absmax import (
    dequantize,
    dequantize_int8,
    effective_bits,
    effective_bits_double_quant,
    half_step,
    quantize_dequantize,
    quantize_int8,
    relative_error,
)
from course.quantization.awq import AWQ_GRID, awq_grid, awq_layer_study
from course.quantization.gptq import gptq_quantize_dequantize, hessian, output_error
from course.quantization.int8 import int8_matmul, int8_matmul_with_outliers
from course.quantization.matrices import gaussian_matrix, outlier_matrix, salient_inputs
from course.quantization.models import (
    AWQ_BITS,
    CALIBRATION_WINDOWS,
    EVAL_WINDOWS,
    GPTQ_BITS,
    MODEL_SETTINGS,
    awq_against_rtn,
    calibrated,
    course_model_awq,
    course_model_calibrated,
    course_model_gptq,
    model_losses,
)
from course.quantization.nf4 import nf4_quantize_dequantize
from course.withheld import withheld


def granularity_errors(
    weight: torch.Tensor, bits_list=(8, 4), groups=(None, 128, 32), quantize_dequantize=None, relative_error=None
) -> dict[str, float]:
    """Relative error at each bit width and granularity, keyed like ``int4_g32`` or ``int8_row``
    (through a notebook's own ``quantize_dequantize`` and ``relative_error`` when given)."""
    round_trip = quantize_dequantize or absmax.quantize_dequantize
    error = relative_error or absmax.relative_error
    errors = {}
    for bits in bits_list:
        for group in groups:
            key = f"int{bits}_{'row' if group is None else f'g{group}'}"
            errors[key] = error(weight, round_trip(weight, bits, group))
    return errors


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


def reference_numbers() -> dict[str, tuple[float, float, str]]:
    """Chapter 3's headline numbers: name -> (value, tolerance, how it was made)."""
    numbers: dict[str, tuple[float, float, str]] = {}
    clean = gaussian_matrix(256, 512, seed=0)
    spiky = outlier_matrix(256, 512, seed=0)
    for key, value in granularity_errors(spiky).items():
        numbers[f"outlier_{key}"] = (value, 2e-4, f"relative error, outlier_matrix(256, 512, seed=0), {key}")
    for key, value in granularity_errors(clean).items():
        numbers[f"clean_{key}"] = (value, 2e-4, f"relative error, gaussian_matrix(256, 512, seed=0), {key}")
    numbers["outlier_error_ratio_int8_row"] = (
        numbers["outlier_int8_row"][0] / numbers["clean_int8_row"][0],
        0.05,
        "int8 per-row error with outlier columns over the error without them",
    )
    numbers["int4_g64_fp16_bits"] = (effective_bits(4, 64), 0.0, "4 + 16/64")
    numbers["nf4_double_quant_bits"] = (effective_bits_double_quant(), 1e-9, "4 + 8/64 + 32/(64*256)")
    numbers["nf4_g64_normal"] = (
        relative_error(clean, nf4_quantize_dequantize(clean, 64)),
        2e-4,
        "NF4, groups of 64, gaussian_matrix(seed=0)",
    )
    calibrated = course_model_calibrated()
    baseline, by_method = course_model_gptq(calibrated)
    by_method["AWQ"] = {bits: measured["loss"] for bits, measured in course_model_awq(calibrated).items()}
    how = f"course target, groups of 64, {EVAL_WINDOWS} held-out windows, {CALIBRATION_WINDOWS} calibration windows"
    numbers["model_fp32_loss"] = (baseline, 1e-4, f"float32 held-out loss (nats/byte), {EVAL_WINDOWS} windows")
    for method, key in (("round to nearest", "rtn"), ("GPTQ", "gptq"), ("AWQ", "awq")):
        for bits, loss in by_method[method].items():
            tolerance = 0.02 if bits == 2 else 3e-3  # float32 sums in another order move GPTQ's codes a little
            numbers[f"model_{key}_g64_{bits}bit_loss"] = (loss, tolerance, f"{method}, {bits} bits, {how}")
    numbers["int4_g64_normal"] = (
        relative_error(clean, quantize_dequantize(clean, 4, 64)),
        2e-4,
        "int4, groups of 64, gaussian_matrix(seed=0)",
    )
    return numbers


def outlier_row_example(outlier: float = 4.2, seed: int = 3) -> dict[str, float]:
    """One row of 64 ordinary weights, int8 per-row, before and after one weight becomes ``outlier``."""
    row = gaussian_matrix(1, 64, std=0.15, seed=seed)
    spiked = row.clone()
    spiked[0, 0] = outlier
    before = quantize_dequantize(row, 8)
    after = quantize_dequantize(spiked, 8)
    rest = slice(1, None)
    return {
        "scale_before": row.abs().max().item() / 127,
        "scale_after": spiked.abs().max().item() / 127,
        "scale_ratio": spiked.abs().max().item() / row.abs().max().item(),
        "outlier_error": (after[0, 0] - spiked[0, 0]).abs().item(),
        "rest_error_before": relative_error(row[:, rest], before[:, rest]),
        "rest_error_after": relative_error(spiked[:, rest], after[:, rest]),
        "zeroed_before": (before[0, rest] == 0).float().mean().item(),
        "zeroed_after": (after[0, rest] == 0).float().mean().item(),
    }


# --- Chapter 3's demonstrations: drawn by the notebook's own functions once written ---------------
#
# The learners' copy holds no answer (course/withheld.py): there, the functions marked @withheld
# below answer from the results recorded for the copy when it was made, the course's numbers on the
# chapter's fixed inputs, which the cells show until the learner's own functions are written.

TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "quantize_dequantize": (torch.tensor([[0.5, -0.2, 0.1, 0.0]]), 4),
    "relative_error": (torch.tensor([[0.5, -0.2]]), torch.tensor([[0.5, -0.1]])),
    "quantize_int8": (torch.tensor([[0.5, -0.2]]),),
    "dequantize_int8": (torch.tensor([[127, -51]], dtype=torch.int8), torch.tensor([[0.5 / 127]])),
    "gptq_quantize": (torch.tensor([[0.5, -0.2]]), torch.eye(2), 4),
}


def your_functions(namespace: dict, what: str, *names: str) -> dict | None:
    """The notebook's own ``names`` (chapter 3's exercises) once all are written, None before that,
    with the line saying whose numbers ``what`` shows (:func:`course.withheld.yours`)."""
    from course import withheld

    return withheld.yours(namespace, TRIED_ON, names, what, together=True)


def bits_sweep(
    weight: torch.Tensor, groups=(None, 128, 32), bits_range=range(2, 9), quantize_dequantize=None, relative_error=None
) -> dict[str, list[float]]:
    """Relative error at each width of ``bits_range``, one list per granularity ("per row", "group 128", ...)."""
    round_trip = quantize_dequantize or absmax.quantize_dequantize
    error = relative_error or absmax.relative_error
    return {
        "per row" if group is None else f"group {group}": [
            error(weight, round_trip(weight, b, group)) for b in bits_range
        ]
        for group in groups
    }


@withheld
def recorded_bits_sweep(seed: int = 0) -> dict[str, list[float]]:
    """The course's :func:`bits_sweep` of ``gaussian_matrix(256, 512, seed=seed)``."""
    return bits_sweep(gaussian_matrix(256, 512, seed=seed))


@withheld
def worst_half_steps(seed: int = 0) -> dict[str, float]:
    """The largest error of the course's round trip of ``outlier_matrix(256, 512, seed=seed)``, in
    half-steps of each weight's group, at 8, 4 and 3 bits, per row and in groups of 32."""
    spiky = outlier_matrix(256, 512, seed=seed)
    return {
        f"int{bits} {'per row ' if group is None else 'group 32'}": (
            (quantize_dequantize(spiky, bits, group) - spiky).abs() / half_step(spiky, bits, group)
        )
        .max()
        .item()
        for bits in (8, 4, 3)
        for group in (None, 32)
    }


def stored_granularity_errors(numbers: dict) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`granularity_errors` of ``outlier_matrix`` and ``gaussian_matrix`` (256 x 512, seed 0)
    as ``make reference`` stored them: (with outliers, without)."""
    keys = [f"int{bits}_{'row' if group is None else f'g{group}'}" for bits in (8, 4) for group in (None, 128, 32)]
    return tuple({key: numbers[f"{kind}_{key}"]["value"] for key in keys} for kind in ("outlier", "clean"))


QUANTIZATION_VIEW = (128, 512, 0)  # rows, cols and seed of the matrix under chapter 3's sliders
VIEW_GROUPS = ("tensor", "row", 128, 64, 32, 16)  # the granularities the sliders offer


def quantization_view(
    bits: int, group_size, outlier: float, quantize_dequantize=None, relative_error=None
) -> dict[str, object]:
    """What chapter 3's sliders show of ``outlier_matrix(128, 512, magnitude=outlier)`` at ``bits``
    and ``group_size`` ("tensor", "row" or a number): row 0 after the round trip, the share of all
    weights rounded to zero, and the relative error of every granularity of :data:`VIEW_GROUPS`."""
    round_trip = quantize_dequantize or absmax.quantize_dequantize
    error = relative_error or absmax.relative_error
    rows, cols, seed = QUANTIZATION_VIEW
    weight = outlier_matrix(rows, cols, magnitude=outlier, seed=seed)

    def approx(group):
        if group == "tensor":  # one scale for the whole matrix: the matrix as one row
            return round_trip(weight.reshape(1, -1), bits, None).reshape(weight.shape)
        return round_trip(weight, bits, None if group == "row" else group)

    chosen = approx(group_size)
    return {
        "row": chosen[0].float(),
        "zero_share": (chosen == 0).float().mean().item(),
        "errors": [error(weight, approx(group)) for group in VIEW_GROUPS],
    }


@withheld
def recorded_quantization_view(bits: int, group_size, outlier: float) -> dict[str, object]:
    """The course's :func:`quantization_view`."""
    return quantization_view(bits, group_size, outlier)


@withheld
def recorded_int8_error(seed: int = 1) -> float:
    """The relative error of the course's int8 copy of ``gaussian_matrix(1024, 4096, seed=seed)``."""
    layer = gaussian_matrix(1024, 4096, seed=seed)
    return relative_error(layer, dequantize_int8(*quantize_int8(layer)))


def llm_int8_example(quantize_int8=None, relative_error=None) -> dict[str, float]:
    """Chapter 3's LLM.int8() example: 64 tokens of 512 features, 3 of them 20x larger, through a
    256 x 512 layer: the relative error of int8 everywhere and with the outlier features in float."""
    error = relative_error or absmax.relative_error
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 512, generator=generator)  # (tokens, features)
    x[:, [7, 100, 300]] *= 20.0  # three outlier features, in every token
    w = gaussian_matrix(256, 512, seed=2)  # (out, in)
    exact = x @ w.T
    mixed, columns = int8_matmul_with_outliers(x, w, 6.0, quantize_int8)
    return {
        "int8": error(exact, int8_matmul(x, w, quantize_int8)),
        "mixed": error(exact, mixed),
        "kept": len(columns),
        "features": x.shape[1],
    }


@withheld
def recorded_llm_int8_example() -> dict[str, float]:
    """The course's :func:`llm_int8_example`."""
    return llm_int8_example()


@withheld
def _recorded_model_losses(windows: int) -> dict[str, list[float]]:
    """The course's :func:`model_losses` of its target, each granularity's losses in the order of
    :data:`MODEL_SETTINGS`."""
    target, held_out, _, _ = calibrated(CALIBRATION_WINDOWS)
    return {label: list(by_bits.values()) for label, by_bits in model_losses(target, held_out, windows).items()}


def recorded_model_losses(windows: int = EVAL_WINDOWS) -> dict[str, dict[int, float]]:
    """The course's :func:`model_losses` of its target on ``windows`` held-out windows, as recorded."""
    widths = [bits for bits, group in MODEL_SETTINGS if group is None]
    return {label: dict(zip(widths, losses, strict=True)) for label, losses in _recorded_model_losses(windows).items()}


def gptq_layer(weight, hessian, quantize_dequantize=None, relative_error=None, gptq_quantize=None) -> dict[str, float]:
    """One layer at 4 bits in groups of 64, rounded to nearest and through GPTQ: each one's output
    error (:func:`output_error`) and the relative error of its weights."""
    round_trip = quantize_dequantize or absmax.quantize_dequantize
    error = relative_error or absmax.relative_error
    rtn = round_trip(weight, 4, 64)
    if gptq_quantize is None:
        gptq = gptq_quantize_dequantize(weight, hessian, 4, 64)
    else:
        gptq = dequantize(*gptq_quantize(weight, hessian, 4, 64)).to(weight.dtype)
    return {
        "rtn": output_error(weight, rtn, hessian),
        "gptq": output_error(weight, gptq, hessian),
        "rtn_weights": error(weight, rtn),
        "gptq_weights": error(weight, gptq),
    }


@withheld
def recorded_gptq_layer(name: str, calibration_windows: int = CALIBRATION_WINDOWS) -> dict[str, float]:
    """The course's :func:`gptq_layer` of its target's layer ``name``, calibrated on ``calibration_windows``."""
    target, _, statistics, _ = calibrated(calibration_windows)
    return gptq_layer(target.get_submodule(name).weight.detach(), statistics["hessian"][name])


def stored_gptq_losses(numbers: dict, bits_list=GPTQ_BITS) -> dict[str, dict[int, float]]:
    """:func:`gptq_against_rtn`'s losses of the course model as ``make reference`` stored them."""
    return {
        label: {bits: numbers[f"model_{key}_g64_{bits}bit_loss"]["value"] for bits in bits_list}
        for label, key in (("round to nearest", "rtn"), ("GPTQ", "gptq"))
    }


AWQ_STUDIED = (("blocks.5", ("mlp.down_proj",)), ("blocks.3", ("mlp.gate_proj", "mlp.up_proj")))


@withheld
def _recorded_awq_studies(bits: int, calibration_windows: int) -> dict[str, dict]:
    """The course's :func:`awq_layer_study` of a layer with 3 outlier input channels and of the
    course model's layers in :data:`AWQ_STUDIED`, each study's errors as a list in the grid's order."""
    outlier_x = salient_inputs(magnitude=20.0)  # (512 tokens, 256 channels)
    studies = {
        "3 outlier channels": awq_layer_study(
            [gaussian_matrix(256, 256, seed=5)], hessian(outlier_x), outlier_x.abs().mean(dim=0).double(), bits
        )
    }
    target, _, statistics, _ = calibrated(calibration_windows)
    for block, roles in AWQ_STUDIED:
        names = [f"{block}.{role}" for role in roles]
        weights = [target.get_submodule(name).weight.detach() for name in names]
        studies[f"{block} {'+'.join(r.split('.')[1] for r in roles)}"] = awq_layer_study(
            weights, statistics["hessian"][names[0]], statistics["mean_abs"][names[0]], bits
        )
    return {label: {**study, "errors": list(study["errors"].values())} for label, study in studies.items()}


def recorded_awq_studies(bits: int = 3, calibration_windows: int = CALIBRATION_WINDOWS) -> dict[str, dict]:
    """The course's AWQ layer studies of chapter 3 (:func:`awq_layer_study`'s dicts), as recorded."""
    grid = awq_grid(AWQ_GRID)
    return {
        label: {**study, "errors": dict(zip(grid, study["errors"], strict=True))}
        for label, study in _recorded_awq_studies(bits, calibration_windows).items()
    }


@withheld
def _recorded_awq_losses(bits_list: tuple, windows: int, calibration_windows: int) -> dict[str, dict]:
    """The course's :func:`awq_against_rtn` of its target, keyed by the bit width as a string."""
    target, held_out, statistics, _ = calibrated(calibration_windows)
    return {
        str(bits): measured
        for bits, measured in awq_against_rtn(target, statistics, held_out, bits_list, 64, windows).items()
    }


def recorded_awq_losses(
    bits_list=AWQ_BITS, windows: int = EVAL_WINDOWS, calibration_windows: int = CALIBRATION_WINDOWS
) -> dict[int, dict]:
    """The course's :func:`awq_against_rtn` of its target at ``bits_list``, groups of 64, as recorded."""
    measured = _recorded_awq_losses(tuple(bits_list), windows, calibration_windows)
    return {int(bits): value for bits, value in measured.items()}


def chapter_recordings(eval_windows: int = EVAL_WINDOWS, calibration_windows: int = CALIBRATION_WINDOWS) -> None:
    """Call every recorded function above as chapter 3's cells call them before the learner's functions
    are written, so that the learners' copy records them (the instructor's notebook, whose functions
    are written, does not call them all)."""
    recorded_bits_sweep(0)  # with the arguments the cells give, as the recordings are matched on them
    recorded_int8_error(1)
    recorded_llm_int8_example()
