"""Chapter 3's known mistakes in ``gptq_quantize``: GPTQ with one step changed, what each such
variant returns on a check's inputs, and wrong answers written out."""

from __future__ import annotations

import torch

from autograder.chapters.quantization.absmax import too_many_levels_hint
from autograder.mistakes import Planted, answer_cell
from autograder.mistakes.quantization.absmax import computed
from course import quantization


def gptq_variant(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    bits: int,
    group_size: int | None = None,
    damping: float = 0.01,
    *,
    factor: str = "upper",
    compensate: bool = True,
    scales_from: str = "updated",
    subtract: bool = True,
    divide: bool = True,
    relative_damping: bool = True,
    levels: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ's (codes, scale) with the step the keyword-only arguments name changed to a mistake:
    ``factor`` "inverse" spreads the error with rows of H^-1 itself and "hessian" with the upper
    factor of H; ``compensate`` False rounds to nearest; ``scales_from`` "original" fixes each
    group's scale from the weights before the sweep; ``subtract`` False adds the error; ``divide``
    False leaves it undivided by U[j, j]; ``relative_damping`` False adds ``damping`` itself to the
    diagonal; ``levels`` replaces 2^(bits-1) - 1. Computed in float64 when given float64, as learners
    do (the judges compare codes exactly on float64 inputs)."""
    quantization.check_matrix(weight)
    levels = quantization.absmax_levels(bits) if levels is None else levels
    group = quantization.group_columns(weight, group_size)
    rows, cols = weight.shape
    if not isinstance(hessian, torch.Tensor) or tuple(hessian.shape) != (cols, cols):
        raise ValueError(f"hessian must be a ({cols}, {cols}) tensor for a weight of {cols} columns")
    if factor not in ("upper", "inverse", "hessian") or scales_from not in ("updated", "original"):
        raise ValueError(
            f"factor must be 'upper', 'inverse' or 'hessian' and scales_from 'updated' or 'original', got "
            f"{factor!r} and {scales_from!r}; leave both out for GPTQ"
        )
    with quantization.one_thread_on_cpu(weight.device):  # see the docstring
        work = quantization.working(weight).clone()
        h = hessian.to(device=work.device, dtype=work.dtype).clone()  # the Hessians are kept on the CPU
        dead = torch.diagonal(h) == 0  # inputs that are always zero: their weights cannot matter
        h[dead, dead] = 1.0
        work[:, dead] = 0.0
        eye = torch.eye(cols, dtype=h.dtype, device=h.device)
        h += damping * (torch.diagonal(h).mean() if relative_damping else 1.0) * eye
        if factor == "hessian":
            upper = torch.linalg.cholesky(h, upper=True)
        else:
            inverse = torch.cholesky_inverse(torch.linalg.cholesky(h))
            upper = torch.linalg.cholesky(inverse, upper=True) if factor == "upper" else inverse  # U: H^-1 = U^T U
        original = work.clone() if scales_from == "original" else work
        codes = torch.zeros(rows, cols, dtype=work.dtype, device=work.device)
        scale = torch.zeros(rows, cols // group, dtype=work.dtype, device=work.device)
        for j in range(cols):
            if j % group == 0:  # a new group: its scale from the weights as the sweep has left them
                scale[:, j // group] = original[:, j : j + group].abs().amax(dim=1) / levels
                step = torch.where(scale[:, j // group] > 0, scale[:, j // group], torch.ones_like(scale[:, 0]))
            codes[:, j] = torch.round(work[:, j] / step).clamp(-levels, levels)
            if not compensate:
                continue
            error = (work[:, j] - codes[:, j] * step) / (upper[j, j] if divide else 1.0)  # (rows,)
            if subtract:
                work[:, j + 1 :] -= error[:, None] * upper[j, j + 1 :][None, :]
            else:
                work[:, j + 1 :] += error[:, None] * upper[j, j + 1 :][None, :]
        return codes.to(torch.int32), scale


def of_gptq_quantize(weight, hessian, bits, group) -> list[tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    """(hint, codes and scales of that mistake on these inputs), in float64."""

    def variant(**changed):
        return lambda: gptq_variant(weight.double(), hessian.double(), bits, group, **changed)

    return computed(
        [
            (
                "no error compensation: these are round-to-nearest's codes; after rounding column j, subtract "
                "(w_j - q_j) / U[j, j] * U[j, j+1:] from the columns not yet quantized (a lower Cholesky factor "
                "does nothing there: its row j is zero past the diagonal; take upper=True)",
                variant(compensate=False),
            ),
            (
                "the error was not divided by U[j, j]: the columns not yet quantized move by "
                "-(w_j - q_j) / U[j, j] * U[j, j+1:]",
                variant(divide=False),
            ),
            (
                "the error was spread with rows of H^-1 itself: use U, the upper Cholesky factor of H^-1 "
                "(torch.linalg.cholesky(H_inv, upper=True)), whose rows already account for the columns done",
                variant(factor="inverse"),
            ),
            (
                "the Cholesky factor of H was used: GPTQ needs the factor of the inverse, H^-1 = U^T U",
                variant(factor="hessian"),
            ),
            (
                "these are the codes of no damping, or of one too small to matter here (a fixed amount such as "
                "1e-3 * I): add damping * mean(diag(H)) to H's diagonal before inverting it, a fraction of H's "
                "own scale",
                variant(damping=0.0),
            ),
            (
                "the damping was added as an absolute amount (H + damping * I): it is a fraction of H's scale, "
                "add damping * mean(diag(H)) to the diagonal",
                variant(relative_damping=False),
            ),
            (too_many_levels_hint(bits), variant(levels=2**bits - 1)),
            (
                "each group's scale came from the original weights, fixed before the sweep: take it from the "
                "error-updated weights when the sweep reaches the group's first column",
                variant(scales_from="original"),
            ),
            (
                "the error was added instead of subtracted: the columns not yet quantized move by -error * U[j, j+1:]",
                variant(subtract=False),
            ),
        ]
    )


# --- wrong answers written out -------------------------------------------------------------------------

UPPER = "torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)"  # the solution's U
UPDATE = "w[:, j + 1 :] -= error[:, None] * u[j, j + 1 :][None, :]"  # the solution's compensation


def gptq_source(*replaced: tuple[str, str]) -> str:
    """The solution's ``gptq_quantize`` with each (old, new) of ``replaced`` substituted in its cell: a
    wrong answer's source (:func:`autograder.mistakes.answer_cell`)."""
    return answer_cell("03_quantization", "gptq_quantize", *replaced)


COMPENSATED = {
    f"gptq_quantize.{c}" for c in ("per_row", "groups", "copy", "dtype", "few_samples", "output_error", "bad_group")
}  # bad_group: the codes on a group size that divides the columns, beside the ValueError on one that does not
GROUPED = COMPENSATED - {"gptq_quantize.per_row"}  # per row, one group: no scale to take too early

PLANTED = {  # graded end to end: the prompt says to work on a copy; the sandbox runs the scenario that sees it
    "gptq_sweeps_the_caller_s_weight": Planted(
        "gptq_quantize",
        gptq_source(("w = weight.clone()", "w = weight")),
        {"gptq_quantize.copy"},
        "weight passed in was changed",
    ),
}

JUDGED = {  # judged in the tests' process, each failing exactly its checks
    "gptq_no_compensation": Planted(
        "gptq_quantize", gptq_source((UPDATE, "pass")), COMPENSATED, "no error compensation"
    ),
    "gptq_rows_of_the_inverse": Planted(
        "gptq_quantize", gptq_source((UPPER, "torch.linalg.inv(h)")), COMPENSATED, "rows of H^-1 itself"
    ),
    "gptq_lower_factor": Planted(
        "gptq_quantize",
        gptq_source((UPPER, UPPER.replace(", upper=True)", ")"))),
        COMPENSATED,
        "lower Cholesky factor does nothing",
    ),
    "gptq_factor_of_the_hessian": Planted(
        "gptq_quantize",
        gptq_source((UPPER, "torch.linalg.cholesky(h, upper=True)")),
        COMPENSATED,
        "Cholesky factor of H",
    ),
    "gptq_no_damping": Planted(
        "gptq_quantize", gptq_source(("h += damping *", "h += 0.0 *")), COMPENSATED, "no damping"
    ),
    "gptq_scales_fixed_before_the_sweep": Planted(
        "gptq_quantize",
        gptq_source(("= w[:, j : j + group].abs()", "= weight[:, j : j + group].abs()")),
        GROUPED,
        "fixed before the sweep",
    ),
    "gptq_sweeps_in_float32": Planted(  # the prompt: in its own dtype
        "gptq_quantize",
        gptq_source(("w = weight.clone()", "w = weight.float().clone()")),
        {"gptq_quantize.dtype"},
        "the scale is torch.float32 for a float64 weight",
    ),
    "gptq_error_added": Planted(
        "gptq_quantize",
        gptq_source((UPDATE, UPDATE.replace("-=", "+="))),
        COMPENSATED,
        "added instead of subtracted",
    ),
    "gptq_too_many_levels": Planted(  # quantize_dequantize's mistake, named with the same words
        "gptq_quantize",
        gptq_source(("levels = 2 ** (bits - 1) - 1", "levels = 2 ** bits - 1")),
        COMPENSATED | {"gptq_quantize.identity", "gptq_quantize.zero_groups"},
        "levels instead of",
    ),
    "gptq_no_zero_group_guard": Planted(  # the prompt: an all-zero group, scale 0, codes 0, no NaN
        "gptq_quantize",
        gptq_source(
            (
                "step = torch.where(scale[:, j // group] > 0, scale[:, j // group], torch.ones_like(scale[:, 0]))",
                "step = scale[:, j // group]",
            )
        ),
        {"gptq_quantize.zero_groups"},
        "all-zero group",
    ),
    "gptq_absolute_damping": Planted(
        "gptq_quantize",
        gptq_source(("h.diagonal().mean() * torch.eye", "torch.eye")),
        COMPENSATED,
        "damping was added as an absolute amount",
    ),
    "gptq_error_not_divided_by_the_diagonal": Planted(
        "gptq_quantize", gptq_source((") / u[j, j]", ")")), COMPENSATED, "not divided by U[j, j]"
    ),
}
