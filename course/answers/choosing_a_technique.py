"""Chapter 9's course-side computations that run an exercise's answer: packing codes into bytes
(``pack_int4``'s solution cell, and the course's packer for every width its stored formats use),
the int4 layers built on them (chapter 3's section on the fused int4 product times them), and the
capstone's figures of the stored target (bytes, held-out loss, tokens per target call). Plain data
in and out: shipped code reaches them through ``course.choosing_a_technique.COURSE``
(``withheld.module``), and the learners' copy, which leaves this module out, answers from what
they returned when it was made.

Not handled: packing widths other than 2, 4 and 8 bits."""

from __future__ import annotations

import functools
from dataclasses import asdict

import torch
import torch.nn.functional as F

from course import choosing_a_technique as technique
from course import evaluation, quantization, timing, withheld
from course.drafts import DRAFTS, draft_model
from course.kernels import int4
from course.stored_weights import course_int4_layer, weight_bytes

SOLUTION = withheld.answers(technique.CHAPTER)  # pack_int4 and capstone_configuration, as written in the chapter


# --- codes packed into bytes --------------------------------------------------------------------------


def _check_codes(values: torch.Tensor, low: int, high: int, per_byte: int, what: str) -> None:
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or values.is_floating_point():
        raise ValueError(f"{what} must be a 2-D integer tensor, got {getattr(values, 'shape', type(values).__name__)}")
    if values.shape[1] % per_byte:
        raise ValueError(f"{values.shape[1]} columns: {per_byte} codes share a byte, so the columns must be a multiple")
    if values.numel() and (values.min() < low or values.max() > high):
        raise ValueError(f"{what} must lie in [{low}, {high}], got [{int(values.min())}, {int(values.max())}]")


def pack_codes(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned ``bits``-bit values (rows, cols) packed ``8 // bits`` to a byte, the first of each
    run in the highest bits (bitsandbytes' order, ``course.quantization.unpack_codes``' inverse):
    (rows, cols * bits // 8) uint8."""
    per_byte = 8 // bits
    _check_codes(values, 0, 2**bits - 1, per_byte, f"{bits}-bit values")
    rows, cols = values.shape
    grouped = values.to(torch.int32).reshape(rows, cols // per_byte, per_byte)  # (rows, bytes, per_byte)
    shifts = torch.arange(per_byte - 1, -1, -1, device=values.device, dtype=torch.int32) * bits  # high first
    return (grouped << shifts).sum(dim=-1).to(torch.uint8)


# --- the course's int4 layer: chapter 9's pack_int4 under torch's fused product -----------------------


def int4_buffers(
    weight: torch.Tensor, group_size: int | None, codes: torch.Tensor | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """What a stored int4 layer keeps for ``weight`` (out, in), as the learner's ``Int4Linear(weight,
    group_size)`` keeps it: chapter 3's symmetric absmax codes of the float32 weight (or the ``codes``
    and ``scale`` given, GPTQ's) packed two to a byte by ``pack_int4``, and the scales in float16:
    ``(out, in // 2)`` uint8 and ``(out, in // group_size)``."""
    if codes is None:
        codes, scale = quantization.quantize(weight.detach().float(), 4, group_size)
    _check_codes(codes, -8, 7, 2, "int4 codes")  # the exercise's answer need not check what the course passes it
    return SOLUTION.pack_int4(codes), scale.half()


def speedup(
    out_features: int,
    in_features: int,
    group_size: int = 64,
    device: torch.device | None = None,
    repeats: int = 7,
    seed: int = 0,
) -> dict:
    """One token through an (out, in) layer: float32 ``F.linear`` against the course's int4 layer
    (``course.stored_weights.course_int4_layer``).

    Returns both medians (seconds), the spread of each (``course.timing.spread``), the speed-up
    (float32 time / int4 time), and the bound the bytes set on it (float32 bytes / int4 bytes):
    the speed-up a product that only reads its weight would reach. Uses the thread count in force.
    """
    device = device or torch.device("cpu")
    weight = quantization.gaussian_matrix(out_features, in_features, seed=seed)
    layer = course_int4_layer(weight, group_size).to(device)
    weight = weight.to(device)
    x = torch.randn(1, in_features, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    with torch.no_grad():
        fp32 = timing.repeat_seconds(lambda: F.linear(x, weight), device, repeats=repeats)
        fused = timing.repeat_seconds(lambda: layer(x), device, repeats=repeats)
    median_fp32, median_int4 = sorted(fp32)[len(fp32) // 2], sorted(fused)[len(fused) // 2]
    return {
        "shape": (out_features, in_features),
        "fp32_bytes": 4 * weight.numel(),
        "path": layer.path,
        "fp32_seconds": median_fp32,
        "int4_seconds": median_int4,
        "fp32_spread": timing.spread(fp32),
        "int4_spread": timing.spread(fused),
        "speedup": median_fp32 / median_int4,
        "bound": 4 * weight.numel() / int4.stored_bytes(out_features, in_features, group_size),
    }


def agreement(size: int = 1024, group_size: int = 64, device_type: str = "cpu", seed: int = 4) -> dict:
    """One token through the int4 layer of ``gaussian_matrix(size, size, seed=seed)`` on
    ``device_type``, fused against dequantize-then-multiply: ``{"layer": its description, "path",
    "why": why the reference runs (or None), "difference": the relative difference of the outputs}``."""
    device = torch.device(device_type)
    layer = course_int4_layer(quantization.gaussian_matrix(size, size, seed=seed), group_size).to(device)
    x = torch.randn(1, size, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    with torch.no_grad():
        fused = layer(x)
    reference = int4.reference_linear(x, layer.codes, layer.scale)
    difference = quantization.relative_norm_error(reference, fused)
    return {"layer": str(layer), "path": layer.path, "why": layer.why_reference(), "difference": difference}


def speedups(sizes: tuple[int, ...], group_size: int = 64) -> dict:
    """:func:`speedup` of a square layer of each of ``sizes`` on this machine's best device (with the
    thread count in force), and the machine: ``{"machine": course.device.describe's line, "rows": [...]}``."""
    from course.device import best_device, describe

    device = best_device()
    return {"machine": describe(device), "rows": [speedup(n, n, group_size, device) for n in sizes]}


def pin_threads(size: int, group_size: int = 64) -> str:
    """``course.timing.pin_threads`` on one token through a ``size`` x ``size`` int4 layer on the CPU:
    the thread count it chose for what follows, and its message."""
    layer = course_int4_layer(quantization.gaussian_matrix(size, size), group_size)
    x = torch.randn(1, size)
    with torch.no_grad():
        return timing.pin_threads(lambda: layer(x), torch.device("cpu"))


# --- the capstone's figures of the stored target ------------------------------------------------------


def course_configuration() -> dict:
    """The course's answer to the capstone (its solution cell), as a configuration's dict."""
    return SOLUTION.capstone_configuration()


@functools.cache
def gptq_int4_codes(group_size: int | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """:func:`course.choosing_a_technique.gptq_int4_codes`' codes: the stored target's, by layer path."""
    model = technique.stored_target("int4", group_size, "gptq")
    return {
        path: (module.codes.clone(), module.scale.clone())
        for path, module in model.named_modules()
        if isinstance(module, technique.StoredLinear)
    }


@functools.cache
def format_bytes(weights: str, group_size: int | None) -> int:
    """Bytes of the target stored in ``weights`` (calibration changes the codes, not how many)."""
    return weight_bytes(technique.stored_target(weights, group_size))


@functools.cache
def format_figures(weights: str, group_size: int | None, calibration: str = "none") -> tuple[int, float]:
    """Bytes and held-out loss of the target stored in ``weights`` (on the CPU, one thread, fixed windows)."""
    with timing.threads(1):
        model = technique.stored_target(weights, group_size, calibration)
        return weight_bytes(model), evaluation.text_loss(
            model, technique.held_out(), max_windows=technique.EVAL_WINDOWS
        )


def configuration_figures(configuration: dict) -> dict:
    """The figures of a configuration (its :meth:`Configuration.as_dict`) from greedy runs of the
    real loop, as plain data (:class:`course.choosing_a_technique.Figures`' fields)."""
    return asdict(_measured(technique.Configuration.from_dict(configuration)))


@functools.lru_cache(maxsize=64)
def _measured(config) -> technique.Figures:
    target_bytes, loss = format_figures(*config.format)
    fp32_bytes, fp32_loss = format_figures("fp32", None)
    with timing.threads(1):
        target, drafter = technique.stored_target(*config.format), draft_model(config.draft)
        runs = [
            DRAFTS[config.draft].run(target, drafter, p, config.draft_length, technique.NEW_TOKENS)
            for p in technique.prompts()
        ]
    per_call = len(runs) * technique.NEW_TOKENS / sum(r["target_calls"] for r in runs)
    k = config.draft_length if drafter is not None else 0
    return technique.Figures(target_bytes, weight_bytes(drafter), fp32_bytes, loss, fp32_loss, per_call, k)


@functools.cache
def draft_curves(weights: str, group_size: int | None, calibration: str = "none") -> dict[str, list[float]]:
    """Tokens per target call at every draft length, for each model draft, with the target stored
    in ``weights``, ``group_size`` and ``calibration``: counted from where each draft agrees with the
    target's greedy output (``technique.greedy_tokens``, ``technique.calls_from_agreement``),
    without running the loop for every k."""
    tokens = technique.greedy_tokens(weights, group_size, calibration)
    curves = {}
    with timing.threads(1):
        for name, draft in DRAFTS.items():
            if draft.checkpoint is None:
                continue
            agreements = [technique.agreement(draft_model(name), t, technique.PROMPT_LENGTH) for t in tokens]
            curves[name] = [
                len(agreements) * technique.NEW_TOKENS / sum(technique.calls_from_agreement(a, k) for a in agreements)
                for k in technique.DRAFT_LENGTHS
            ]
    return curves
