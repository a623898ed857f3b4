"""Chapter 3's answers beyond its exercises' signatures, and the numbers its cells show before the
learner's functions are written, computed with the chapter's answers (``solutions/03_quantization.py``,
through the course's functions that check their arguments). Shipped code calls these through
``course.quantization.COURSE``; in the learners' copy, each call answers from what it returned when
the copy was made (its arguments are small: seeds, widths, a layer's name)."""

from __future__ import annotations

import torch

from course import quantization as q

ROUND_TRIP = {"quantize_dequantize": q.round_trip, "relative_error": q.relative_norm_error}  # the course's two


def quantize(weight: torch.Tensor, bits: int, group_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The codes (rows, cols) int32 and the scales (rows, cols // group) of the exercise's round trip,
    in ``weight``'s dtype: what ``quantize_dequantize`` multiplies back (an all-zero group: scale 0,
    codes 0)."""
    levels = 2 ** (bits - 1) - 1
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    grouped = weight.reshape(rows, cols // group, group)  # (rows, groups, group)
    scale = grouped.abs().amax(dim=-1) / levels  # (rows, groups)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero group divides by 1
    codes = torch.round(grouped / safe.unsqueeze(-1)).clamp(-levels, levels)
    return codes.reshape(rows, cols).to(torch.int32), scale


def bits_sweep(seed: int) -> dict[str, list[float]]:
    """:func:`course.quantization.bits_sweep` of ``gaussian_matrix(256, 512, seed=seed)``."""
    return q.bits_sweep(q.gaussian_matrix(256, 512, seed=seed), **ROUND_TRIP)


def worst_half_steps(seed: int) -> dict[str, float]:
    """The largest error of the round trip of ``outlier_matrix(256, 512, seed=seed)``, in half-steps
    of each weight's group, at 8, 4 and 3 bits, per row and in groups of 32."""
    spiky = q.outlier_matrix(256, 512, seed=seed)
    return {
        f"int{bits} {'per row ' if group is None else 'group 32'}": (
            (q.round_trip(spiky, bits, group) - spiky).abs() / q.half_step(spiky, bits, group)
        )
        .max()
        .item()
        for bits in (8, 4, 3)
        for group in (None, 32)
    }


def quantization_view(bits: int, group_size, outlier: float) -> dict[str, object]:
    """:func:`course.quantization.quantization_view`, the sliders' view."""
    return q.quantization_view(bits, group_size, outlier, **ROUND_TRIP)


def int8_error(seed: int) -> float:
    """:func:`course.quantization.int8_error` of ``gaussian_matrix(1024, 4096, seed=seed)``."""
    int8 = {name: q.course_answer(name) for name in ("quantize_int8", "dequantize_int8")}
    return q.int8_error(q.gaussian_matrix(1024, 4096, seed=seed), **int8, relative_error=q.relative_norm_error)


def llm_int8_example() -> dict[str, float]:
    """:func:`course.quantization.llm_int8_example`."""
    return q.llm_int8_example(quantize_int8=q.course_answer("quantize_int8"), relative_error=q.relative_norm_error)


def model_losses(windows: int) -> dict[str, list[float]]:
    """``model_losses`` of the course's target, each granularity's losses in the order of ``MODEL_SETTINGS``."""
    target, held_out, _, _ = q.calibrated(q.CALIBRATION_WINDOWS)
    losses = q.model_losses(target, held_out, windows, quantize_dequantize=q.round_trip)
    return {label: list(by_bits.values()) for label, by_bits in losses.items()}


def gptq_layer(name: str, calibration_windows: int) -> dict[str, float]:
    """:func:`course.quantization.gptq_layer` of the target's layer ``name``, calibrated on ``calibration_windows``."""
    target, _, statistics, _ = q.calibrated(calibration_windows)
    weight = target.get_submodule(name).weight.detach()
    return q.gptq_layer(weight, statistics["hessian"][name], **ROUND_TRIP, gptq_quantize=q.quantize_gptq)


def awq_studies(bits: int, calibration_windows: int) -> dict[str, dict]:
    """``awq_layer_study`` of a layer with 3 outlier input channels and of the target's layers in
    ``AWQ_STUDIED``, each study's errors as a list in the grid's order."""
    outlier_x = q.salient_inputs(magnitude=20.0)  # (512 tokens, 256 channels)
    studies = {
        "3 outlier channels": q.awq_layer_study(
            [q.gaussian_matrix(256, 256, seed=5)], q.hessian(outlier_x), outlier_x.abs().mean(dim=0).double(), bits
        )
    }
    target, _, statistics, _ = q.calibrated(calibration_windows)
    for block, roles in q.AWQ_STUDIED:
        names = [f"{block}.{role}" for role in roles]
        weights = [target.get_submodule(name).weight.detach() for name in names]
        studies[f"{block} {'+'.join(r.split('.')[1] for r in roles)}"] = q.awq_layer_study(
            weights, statistics["hessian"][names[0]], statistics["mean_abs"][names[0]], bits
        )
    return {label: {**study, "errors": list(study["errors"].values())} for label, study in studies.items()}


def awq_losses(bits_list: tuple, windows: int, calibration_windows: int) -> dict[str, dict]:
    """``awq_against_rtn`` of the target, keyed by the bit width as a string."""
    target, held_out, statistics, _ = q.calibrated(calibration_windows)
    measured = q.awq_against_rtn(target, statistics, held_out, bits_list, 64, windows)
    return {str(bits): value for bits, value in measured.items()}
