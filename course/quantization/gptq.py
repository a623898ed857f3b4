"""GPTQ (Frantar et al., 2022): rounding that compensates the error it makes, column by column,
with the Hessian of calibration inputs; the output error it minimises. The sweep is the chapter's
exercise, ``gptq_quantize``: the course's layers use its answer (:func:`quantize_gptq`)."""

from __future__ import annotations

import contextlib

import torch

from course import timing
from course.quantization.absmax import absmax_levels, check_matrix, course_answer, dequantize, group_columns, working


def one_thread_on_cpu(device: torch.device):
    """One torch thread on the CPU (a sweep of many small steps wastes the others), as is elsewhere."""
    return timing.threads(1) if device.type == "cpu" else contextlib.nullcontext()


def output_error(weight: torch.Tensor, approx: torch.Tensor, hessian: torch.Tensor) -> float:
    """tr((W - Q) H (W - Q)^T): the summed squared error of the layer's outputs over the calibration
    inputs when H = X^T X / n (what GPTQ minimises, one row at a time)."""
    delta = (weight - approx).double()  # (rows, cols)
    return torch.einsum("ij,jk,ik->", delta, hessian.to(device=delta.device, dtype=torch.float64), delta).item()


def hessian(inputs: torch.Tensor) -> torch.Tensor:
    """H = X^T X / n of a layer's calibration inputs X (n, cols), in float64 (any leading dims are flattened)."""
    flat = inputs.reshape(-1, inputs.shape[-1]).double()  # (n, cols)
    return flat.T @ flat / flat.shape[0]


def quantize_gptq(
    weight: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int | None = None, damping: float = 0.01
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ's codes (rows, cols) int32 and scales (rows, cols // group), on ``weight``'s device, for a
    layer whose calibration inputs have H = X^T X / n (:func:`hessian`): the chapter's
    ``gptq_quantize`` (its answer), after checking the arguments, in float32 (float64 kept) on a
    copy of the weight on the CPU.

    Inputs that never fire (a zero on H's diagonal) cannot matter: their columns are set to zero
    and their diagonal to 1 before the sweep. On the CPU the sweep runs on one thread: its
    factorisations of small matrices and thousands of small elementwise steps give each thread too
    little work, and two threads spent eight times the CPU time waiting on each other (the codes are
    the same). Not handled: act-order (columns by decreasing H[j, j]), blocked lazy updates (the
    same result, faster), asymmetric codes.
    """
    check_matrix(weight)
    absmax_levels(bits)
    group_columns(weight, group_size)
    cols = weight.shape[1]
    if not isinstance(hessian, torch.Tensor) or tuple(hessian.shape) != (cols, cols):
        raise ValueError(f"hessian must be a ({cols}, {cols}) tensor for a weight of {cols} columns")
    work = working(weight).detach().cpu().clone()
    h = hessian.detach().cpu().to(work.dtype).clone()
    dead = torch.diagonal(h) == 0  # inputs that are always zero: their weights cannot matter
    h[dead, dead] = 1.0
    work[:, dead] = 0.0
    with one_thread_on_cpu(work.device):  # see the docstring
        codes, scale = course_answer("gptq_quantize")(work, h, bits, group_size, damping)
    return codes.to(device=weight.device, dtype=torch.int32), scale.to(weight.device)


def gptq_quantize_dequantize(
    weight: torch.Tensor, hessian: torch.Tensor, bits: int, group_size: int | None = None, damping: float = 0.01
) -> torch.Tensor:
    """The weight :func:`quantize_gptq`'s codes and scales encode, in ``weight``'s dtype."""
    return dequantize(*quantize_gptq(weight, hessian, bits, group_size, damping)).to(weight.dtype)
