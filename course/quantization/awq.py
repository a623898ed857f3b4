"""AWQ (Lin et al., 2023): the salient input channels scaled up before rounding, the power of
their activations' mean magnitude searched on calibration data; one layer, and the course model.
The search on one layer is the chapter's exercise, ``awq_quantize``: the course uses its answer
(:func:`awq_layers`)."""

from __future__ import annotations

import torch

from course.quantization.absmax import check_matrix, course_answer, group_columns, round_trip, working
from course.quantization.gptq import gptq_quantize_dequantize, one_thread_on_cpu, output_error

AWQ_GRID = 20  # exponents 0, 1/20, ..., 19/20 tried (the paper's grid)
AWQ_SHARED_INPUTS = (  # the course model's linears that read the same input, so share one scale
    ("attn.q_proj", "attn.k_proj", "attn.v_proj"),  # 1/s folds into the attention norm's weight
    ("mlp.gate_proj", "mlp.up_proj"),  # 1/s folds into the MLP norm's weight
    ("mlp.down_proj",),  # 1/s folds into up_proj's rows (row scaling commutes with absmax codes)
)


def awq_grid(grid: int) -> list[float]:
    """The exponents AWQ tries: 0, 1/grid, ..., (grid - 1)/grid."""
    return [step / grid for step in range(grid)]


def awq_layers(
    weights: list[torch.Tensor],
    hessian: torch.Tensor,
    mean_abs: torch.Tensor,
    bits: int,
    group_size: int | None = None,
    grid: int = AWQ_GRID,
) -> tuple[float, list[torch.Tensor], dict[float, float]]:
    """AWQ on ``weights``, layers that read the same input (whose H and mean |x| are given), with one
    scale per input column between them: (the exponent alpha of the least output error summed over
    the layers, the first if several tie; each layer's Q(W diag(s)) diag(s)^-1 with s = mean|x| **
    alpha, in its dtype; {alpha: the summed tr((W - W_hat) H (W - W_hat)^T)}).

    The chapter's ``awq_quantize`` (its answer) on the layers stacked row on row, in float64 on the
    CPU: that changes nothing, since each row is rounded on its own and the output error sums over
    the rows. Alpha 0 is round to nearest, so the best is never worse on the calibration inputs.
    """
    for weight in weights:
        check_matrix(weight)
    group_columns(weights[0], group_size)
    cols = weights[0].shape[1]
    if any(w.shape[1] != cols for w in weights) or tuple(getattr(mean_abs, "shape", ())) != (cols,):
        raise ValueError(
            f"the layers must read the same {cols} inputs, with mean_abs holding one value per input column, got "
            f"widths {[w.shape[1] for w in weights]} and mean_abs of shape {tuple(getattr(mean_abs, 'shape', ()))}"
        )
    stacked = torch.cat([working(w).detach().cpu().double() for w in weights])  # (rows of all, cols)
    with one_thread_on_cpu(stacked.device):
        alpha, approx, errors = course_answer("awq_quantize")(
            stacked, hessian.detach().cpu().double(), mean_abs.detach().cpu().double(), bits, group_size, grid
        )
    parts = approx.split([len(w) for w in weights])
    approxes = [part.to(device=w.device, dtype=w.dtype) for part, w in zip(parts, weights, strict=True)]
    return float(alpha), approxes, dict(zip(awq_grid(grid), (float(e) for e in errors), strict=True))


def awq_search(
    weights: list[torch.Tensor],
    hessian: torch.Tensor,
    mean_abs: torch.Tensor,
    bits: int,
    group_size: int | None = None,
    grid: int = AWQ_GRID,
) -> tuple[float, dict[float, float]]:
    """The exponent :func:`awq_layers` chooses for ``weights``, and every exponent's summed output error."""
    alpha, _, errors = awq_layers(weights, hessian, mean_abs, bits, group_size, grid)
    return alpha, errors


def awq_layer_study(
    weights: list[torch.Tensor], hessian: torch.Tensor, mean_abs: torch.Tensor, bits: int, group_size: int | None = 64
) -> dict:
    """One set of layers reading the same input, seen by AWQ and GPTQ: ``{"mean_abs", "alpha",
    "errors": {alpha: output error / round-to-nearest's}, "gptq": GPTQ's output error / round-to-nearest's}``."""
    alpha, errors = awq_search(weights, hessian, mean_abs, bits, group_size)
    gptq = sum(output_error(w, gptq_quantize_dequantize(w, hessian, bits, group_size), hessian) for w in weights)
    return {
        "mean_abs": mean_abs,
        "alpha": alpha,
        "errors": {a: e / errors[0.0] for a, e in errors.items()},
        "gptq": gptq / errors[0.0],
    }


def awq_model(
    model: torch.nn.Module,
    statistics: dict[str, dict[str, torch.Tensor]],
    bits: int,
    group_size: int | None = None,
    grid: int = AWQ_GRID,
) -> tuple[torch.nn.Module, dict[str, float]]:
    """A copy of ``model`` whose linears went through AWQ (:func:`awq_layers`) by the sets of
    :data:`AWQ_SHARED_INPUTS`, each set with one scale per input column (statistics:
    :func:`calibration_statistics`'), and the alpha chosen for each set (named by its first layer).

    Not handled: o_proj is rounded to nearest, as AWQ's implementations do under grouped-query
    attention (its input comes from the query heads, and 1/s cannot be folded into v_proj's fewer
    rows); AWQ's clipping search of each group's range; linears named otherwise than the course
    model's (rounded to nearest)."""
    import copy

    quantized = copy.deepcopy(model)
    linears = {name: m for name, m in quantized.named_modules() if isinstance(m, torch.nn.Linear)}
    measured = set(statistics.get("hessian", {})) & set(statistics.get("mean_abs", {}))
    missing = [name for name in linears if name not in measured]
    if missing:
        raise ValueError(
            f"the statistics lack {len(missing)} of the model's linear layers (such as {missing[0]}); make them "
            "with calibration_statistics(model, tokens) on this model"
        )
    blocks = sorted({name.rsplit(".", 2)[0] for name in linears})
    chosen: dict[str, float] = {}
    with torch.no_grad():
        done = set()
        for block in blocks:
            for roles in AWQ_SHARED_INPUTS:
                names = [f"{block}.{role}" for role in roles]
                if not all(name in linears for name in names):
                    continue
                weights = [linears[name].weight.float() for name in names]
                alpha, approxes, _ = awq_layers(
                    weights, statistics["hessian"][names[0]], statistics["mean_abs"][names[0]], bits, group_size, grid
                )
                for name, approx in zip(names, approxes, strict=True):
                    linears[name].weight.copy_(approx)
                chosen[names[0]] = alpha
                done.update(names)
        for name, module in linears.items():
            if name not in done:
                module.weight.copy_(round_trip(module.weight, bits, group_size))
    return quantized, chosen


def salience(mean_abs: torch.Tensor) -> float:
    """How salient a layer's most active input channel is: its mean |x| over the median channel's."""
    return (mean_abs.max() / mean_abs.median()).item()
