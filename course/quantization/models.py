"""Whole models quantized: the course model's linears rounded to nearest, through NF4, GPTQ and AWQ,
their calibration statistics, and their held-out losses read as sentences. A function that rounds
with one of chapter 3's exercises takes it as a parameter (a notebook's own, or the course's:
``round_trip``, ``quantize_gptq``)."""

from __future__ import annotations

import torch

from course.quantization.absmax import dequantize, round_trip
from course.quantization.awq import awq_model
from course.quantization.gptq import one_thread_on_cpu, quantize_gptq
from course.quantization.nf4 import nf4_quantize_dequantize

GPTQ_BITS = (6, 5, 4, 3, 2)  # the bit widths chapter 3 compares GPTQ and round-to-nearest at, groups of 64
AWQ_BITS = (4, 3)  # the bit widths chapter 3 measures AWQ at, groups of 64
CALIBRATION_WINDOWS = 32  # 256-byte windows of training text whose inputs make the Hessians
EVAL_WINDOWS = 24  # 256-byte windows of held-out text per loss estimate
LOSS_NOISE = 0.001  # nats/byte: differences of held-out loss this small are not read as a difference


def quantize_model(
    model: torch.nn.Module, bits: int | str, group_size: int | None = None, *, quantize_dequantize=None
) -> torch.nn.Module:
    """A copy of ``model`` whose linear layers' weights went through a quantization round trip.

    ``bits`` is an int for absmax integer codes, rounded by ``quantize_dequantize`` (chapter 3's
    exercise: a notebook's own, or the course's ``round_trip``), or ``"nf4"``. Weight-only:
    activations and the tied embedding stay in floating point, as in most weight-only schemes.
    """
    import copy

    if bits != "nf4" and quantize_dequantize is None:
        raise ValueError("integer codes are rounded by quantize_dequantize: pass yours, or quantization.round_trip")
    quantized = copy.deepcopy(model)
    with torch.no_grad():
        for module in quantized.modules():
            if isinstance(module, torch.nn.Linear):
                weight = module.weight
                approx = (
                    nf4_quantize_dequantize(weight, group_size or 64)
                    if bits == "nf4"
                    else quantize_dequantize(weight, bits, group_size)
                )
                weight.copy_(approx)
    return quantized


def calibration_statistics(
    model: torch.nn.Module, tokens: torch.Tensor, windows: int = 32, seq_len: int = 256
) -> dict[str, dict[str, torch.Tensor]]:
    """What every linear layer's inputs X (n, in) look like while ``model`` reads ``windows`` evenly
    spaced windows of ``seq_len`` tokens of ``tokens``, from one pass: ``{"hessian": {name: X^T X / n},
    "mean_abs": {name: the mean |x| of each input channel}}``, both float64.

    Every layer's inputs come from the float model (all statistics from one pass), not from a model
    whose earlier layers are already quantized as in the GPTQ paper: cheaper, and close on small models.
    """
    sums: dict[str, torch.Tensor] = {}
    magnitudes: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}

    def keep(name):
        def hook(module, inputs, output):
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()  # (tokens, in)
            sums[name] = sums.get(name, 0) + (x.T @ x).double()  # float32 per batch, summed in float64
            magnitudes[name] = magnitudes.get(name, 0) + x.abs().sum(dim=0).double()  # (in,)
            counts[name] = counts.get(name, 0) + x.shape[0]

        return hook

    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    handles = [module.register_forward_hook(keep(name)) for name, module in linears.items()]
    starts = torch.linspace(0, len(tokens) - seq_len - 1, windows).long().tolist()
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for first in range(0, windows, 16):
                batch = torch.stack([tokens[s : s + seq_len] for s in starts[first : first + 16]]).to(device)
                model(batch)  # (b, T): the hooks collect X^T X and |X|
    finally:
        for handle in handles:
            handle.remove()
    return {
        "hessian": {name: sums[name].cpu() / counts[name] for name in linears},
        "mean_abs": {name: magnitudes[name].cpu() / counts[name] for name in linears},
    }


def calibration_hessians(
    model: torch.nn.Module, tokens: torch.Tensor, windows: int = 32, seq_len: int = 256
) -> dict[str, torch.Tensor]:
    """H = X^T X / n (float64) of every linear layer's inputs: :func:`calibration_statistics`' Hessians."""
    return calibration_statistics(model, tokens, windows, seq_len)["hessian"]


def gptq_model(
    model: torch.nn.Module,
    hessians: dict[str, torch.Tensor],
    bits: int,
    group_size: int | None = None,
    *,
    gptq_quantize,
) -> torch.nn.Module:
    """A copy of ``model`` whose linear layers hold the weights that ``gptq_quantize``'s codes and
    scales encode (chapter 3's exercise: a notebook's own, or the course's ``quantize_gptq``), each
    layer's with its calibration Hessian (:func:`calibration_hessians`); everything else as in
    :func:`quantize_model`."""
    import copy

    def gptq_round_trip(weight, hessian):
        return dequantize(*gptq_quantize(weight, hessian, bits, group_size)).to(weight.dtype)

    quantized = copy.deepcopy(model)
    with torch.no_grad(), one_thread_on_cpu(next(model.parameters()).device):
        for name, module in quantized.named_modules():
            if isinstance(module, torch.nn.Linear):
                weight = module.weight
                weight.copy_(gptq_round_trip(weight.float(), hessians[name]))
    return quantized


def gptq_against_rtn(
    model: torch.nn.Module,
    hessians: dict[str, torch.Tensor],
    held_out: torch.Tensor,
    bits_list=GPTQ_BITS,
    group_size: int | None = 64,
    windows: int = EVAL_WINDOWS,
    *,
    quantize_dequantize,
    gptq_quantize,
) -> dict[str, dict[int, float]]:
    """Held-out loss (nats per token) of ``model`` rounded to nearest by ``quantize_dequantize`` and
    through GPTQ by ``gptq_quantize`` at each bit width (chapter 3's exercises: a notebook's own, or
    the course's): ``{"round to nearest": {bits: loss}, "GPTQ": {bits: loss}}``."""
    from course import evaluation

    losses: dict[str, dict[int, float]] = {"round to nearest": {}, "GPTQ": {}}
    for bits in bits_list:
        rtn = quantize_model(model, bits, group_size, quantize_dequantize=quantize_dequantize)
        losses["round to nearest"][bits] = evaluation.text_loss(rtn, held_out, max_windows=windows)
        gptq = gptq_model(model, hessians, bits, group_size, gptq_quantize=gptq_quantize)
        losses["GPTQ"][bits] = evaluation.text_loss(gptq, held_out, max_windows=windows)
    return losses


def gptq_reading(
    baseline: float, losses: dict[str, dict[int, float]], harmless: float, noise: float = LOSS_NOISE
) -> str:
    """What GPTQ bought, read off :func:`gptq_against_rtn`'s losses: the fewest bits each method
    keeps within ``harmless`` nats of ``baseline``, the widths where GPTQ's loss is lower by more than
    ``noise``, and the widest gap between them."""
    from course import readings

    parts = []
    for method, by_bits in losses.items():
        bits = sorted(by_bits)
        lowest = readings.holds_from(bits, [by_bits[b] - baseline <= harmless for b in bits])
        parts.append(
            f"{method} stays within {harmless} nats/byte of float32 down to {lowest} bits"
            if lowest is not None
            else f"{method} is more than {harmless} nats/byte above float32 at every width tried"
        )
    rtn, gptq = losses["round to nearest"], losses["GPTQ"]
    widest = max(rtn, key=lambda b: rtn[b] - gptq[b])
    better = sorted((b for b in rtn if rtn[b] - gptq[b] > noise), reverse=True)
    close = sorted((b for b in rtn if abs(rtn[b] - gptq[b]) <= noise), reverse=True)
    parts.append(
        f"GPTQ's loss is lower by more than {noise} nats/byte at {readings.listing(better)} bits "
        f"({len(rtn)} widths tried), most at {widest} bits ({rtn[widest] - gptq[widest]:+.4f} nats/byte)"
        if better
        else f"GPTQ is better by more than {noise} nats/byte at none of the widths tried"
    )
    if close:
        parts.append(f"at {readings.listing(close)} bits the two are within {noise} nats/byte of each other")
    return "; ".join(parts)


def awq_against_rtn(
    model: torch.nn.Module,
    statistics: dict[str, dict[str, torch.Tensor]],
    held_out: torch.Tensor,
    bits_list=None,
    group_size: int | None = 64,
    windows: int = EVAL_WINDOWS,
) -> dict[int, dict]:
    """Held-out loss (nats per token) of ``model`` through :func:`awq_model` at each bit width
    (:data:`AWQ_BITS` unless given), with the alphas it chose: ``{bits: {"loss", "alphas"}}``."""
    from course import evaluation

    measured = {}
    for bits in AWQ_BITS if bits_list is None else bits_list:
        awq, alphas = awq_model(model, statistics, bits, group_size)
        measured[bits] = {"loss": evaluation.text_loss(awq, held_out, max_windows=windows), "alphas": alphas}
    return measured


def awq_reading(baseline: float, losses: dict[str, dict[int, float]], saliences: list[float]) -> str:
    """What AWQ bought on a model, read off the held-out losses of ``"round to nearest"``, ``"AWQ"``
    and ``"GPTQ"`` (``{method: {bits: loss}}``, at AWQ's bit widths) and the :func:`salience` of
    its layers' inputs."""

    def against_rtn(method: str, gap: float, rtn_gap: float) -> str:
        ratio = gap / rtn_gap  # the method's loss increase over round to nearest's
        if ratio > 1:
            return f"{method}'s is {ratio:.2f} times as large ({gap:+.4f})"
        return f"{method} removes {1 - ratio:.0%} of it ({gap:+.4f})"

    parts = []
    for bits in sorted(losses["AWQ"], reverse=True):
        rtn_gap = losses["round to nearest"][bits] - baseline
        gaps = {m: losses[m][bits] - baseline for m in ("AWQ", "GPTQ")}
        parts.append(
            f"at {bits} bits round to nearest raises the loss by {rtn_gap:+.4f} nats/byte; "
            + ", ".join(against_rtn(m, gaps[m], rtn_gap) for m in gaps)
            if rtn_gap > 0
            else f"at {bits} bits AWQ loses {gaps['AWQ']:+.4f} nats/byte where round to nearest loses nothing"
        )
    parts.append(
        f"the most active input channel of each layer carries {min(saliences):.1f} to {max(saliences):.1f} "
        "times the median channel's mean |x|"
    )
    return "; ".join(parts)


def course_model_calibrated():
    """The course's target, its held-out text, its calibration statistics and its float32 loss."""
    from course import checkpoints, corpus, evaluation

    target = checkpoints.load("target")
    held_out = corpus.tokens("validation")
    statistics = calibration_statistics(target, corpus.tokens("train"), CALIBRATION_WINDOWS)
    return target, held_out, statistics, evaluation.text_loss(target, held_out, max_windows=EVAL_WINDOWS)


def course_model_gptq(calibrated=None) -> tuple[float, dict[str, dict[int, float]]]:
    """The course's target, float32 and at :data:`GPTQ_BITS` with groups of 64, calibrated on
    :data:`CALIBRATION_WINDOWS` windows of training text: (float32 loss, :func:`gptq_against_rtn`)."""
    target, held_out, statistics, baseline = calibrated or course_model_calibrated()
    by_method = gptq_against_rtn(
        target, statistics["hessian"], held_out, quantize_dequantize=round_trip, gptq_quantize=quantize_gptq
    )
    return baseline, by_method


def course_model_awq(calibrated=None) -> dict[int, dict]:
    """The course's target through AWQ at :data:`AWQ_BITS`, groups of 64, calibrated as
    :func:`course_model_gptq`: :func:`awq_against_rtn`'s losses and alphas."""
    target, held_out, statistics, _ = calibrated or course_model_calibrated()
    return awq_against_rtn(target, statistics, held_out)


MODEL_SETTINGS = [(bits, group) for group in (None, 64, 32) for bits in (8, 6, 5, 4, 3, 2)]  # 64, 32 divide every width


def model_losses(model, held_out, windows: int = EVAL_WINDOWS, *, quantize_dequantize, progress=None) -> dict:
    """Held-out loss of ``model`` rounded to nearest by ``quantize_dequantize`` (chapter 3's exercise)
    at every setting of :data:`MODEL_SETTINGS`: ``{"per row" | "group 64" | "group 32": {bits: loss}}``."""
    from course import evaluation

    losses: dict[str, dict[int, float]] = {}
    for bits, group in progress(MODEL_SETTINGS) if progress else MODEL_SETTINGS:
        quantized = quantize_model(model, bits, group, quantize_dequantize=quantize_dequantize)
        label = "per row" if group is None else f"group {group}"
        losses.setdefault(label, {})[bits] = evaluation.text_loss(quantized, held_out, max_windows=windows)
    return losses


_CALIBRATED: dict[int, tuple] = {}


def calibrated(windows: int):
    """:func:`course_model_calibrated` with ``windows`` calibration windows, made once a process."""
    if windows not in _CALIBRATED:
        from course import checkpoints, corpus, evaluation

        target = checkpoints.load("target")
        held_out = corpus.tokens("validation")
        statistics = calibration_statistics(target, corpus.tokens("train"), windows)
        _CALIBRATED[windows] = (
            target,
            held_out,
            statistics,
            evaluation.text_loss(target, held_out, max_windows=EVAL_WINDOWS),
        )
    return _CALIBRATED[windows]
