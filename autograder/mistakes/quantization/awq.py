"""Chapter 3's known mistakes in ``awq_quantize``: AWQ's search with one step changed, what each
such variant returns on a check's inputs, and wrong answers written out."""

from __future__ import annotations

import torch

from autograder.chapters.quantization.absmax import too_many_levels_hint
from autograder.mistakes import Planted, answer_cell
from autograder.mistakes.quantization.absmax import grouped_round_trip
from course import quantization


def awq_search_variant(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    mean_abs: torch.Tensor,
    bits: int,
    group_size: int | None,
    grid: int,
    *,
    alphas: list[float] | None = None,
    exponent: float = 1.0,
    clamp_first: bool = False,
    measure: str = "output",
    prescale: bool = True,
    unscale: bool = True,
    levels: int | None = None,
) -> torch.Tensor:
    """The errors, one per exponent tried, of AWQ on one layer (float64) with the step the keyword-only
    arguments name changed to a mistake: ``alphas`` replaces the grid 0, 1/grid, ..., (grid - 1)/grid;
    ``exponent`` -1 shrinks the salient channels; ``clamp_first`` clamps mean|x| before the power (a
    channel that never fires then gets (1e-4)^alpha, not 1e-4); ``measure`` "weights" scores the
    weights' squared error; ``prescale`` False rounds W itself (then divides by s), ``unscale`` False
    leaves Q(W diag(s)) undivided, ``levels`` replaces 2^(bits-1) - 1."""
    w, h, m = weight.double(), hessian.double(), mean_abs.double()
    errors = []
    for alpha in quantization.awq_grid(grid) if alphas is None else alphas:
        s = m.clamp(min=1e-4).pow(exponent * alpha) if clamp_first else m.pow(exponent * alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        rounded = grouped_round_trip(w * s if prescale else w, bits, group_size, levels=levels)
        approx = rounded / s if unscale else rounded
        if measure == "output":
            errors.append(quantization.output_error(w, approx, h))
        else:
            errors.append(((w - approx) ** 2).sum().item())
    return torch.tensor(errors, dtype=torch.float64)


def of_awq_quantize(weight, hessian, mean_abs, bits, group, grid) -> list[tuple[str, torch.Tensor | None]]:
    """(hint, the errors that mistake gives on these inputs, in the grid's order), None where the
    mistake makes no finite errors (one that makes s infinite)."""

    def variant(**changed):
        return lambda: awq_search_variant(weight, hessian, mean_abs, bits, group, grid, **changed)

    mistakes = [
        (
            "the rounded weights were not divided by s: W_hat = Q(W * s) / s, so that W_hat x = W x up to rounding",
            variant(unscale=False),
        ),
        (
            "the salient channels were shrunk: s = mean|x| ** alpha multiplies the weights of the most active "
            "channels before rounding (and divides them after)",
            variant(exponent=-1),
        ),
        (
            "the search scored the error of the weights: score the outputs' error tr((W - W_hat) H (W - W_hat)^T), "
            "which weighs each channel by how active it is",
            variant(measure="weights"),
        ),
        (
            "the exponents tried are 0, 1/grid, ..., (grid - 1)/grid (range(grid) divided by grid), not "
            "torch.linspace(0, 1, grid)",
            variant(alphas=torch.linspace(0, 1, grid).tolist()),
        ),
        (
            "the weights were only divided by s: multiply W by s before rounding, W_hat = Q(W * s) / s, "
            "so that the salient channels get finer steps",
            variant(prescale=False),
        ),
        (
            "s came from the weights' column means: s = mean_abs ** alpha, the mean |x| of the inputs "
            "(AWQ protects the channels whose activations are large, not whose weights are)",
            lambda: awq_search_variant(weight, hessian, weight.double().abs().mean(dim=0), bits, group, grid),
        ),
        (
            "s came from diag(H), the mean of x squared: s = mean_abs ** alpha, the mean |x| of the inputs",
            lambda: awq_search_variant(weight, hessian, torch.diagonal(hessian.double()), bits, group, grid),
        ),
        (f"the round trip: {too_many_levels_hint(bits)}", variant(levels=2**bits - 1)),
        (
            "mean |x| was clamped before the power: s = mean_abs ** alpha first, then at least 1e-4 "
            "(mean_abs.pow(alpha).clamp(min=1e-4)); clamping first gives a channel that never fires "
            "(1e-4) ** alpha, not 1e-4",
            variant(clamp_first=True),
        ),
    ]
    found = []
    for hint, make in mistakes:
        errors = make()
        found.append((hint, errors if torch.isfinite(errors).all() else None))
    return found


# --- wrong answers written out -------------------------------------------------------------------------

SCALES = "mean_abs.to(weight.dtype).pow(alpha).clamp(min=1e-4)"  # the solution's s, before its normalisation
APPROX = "round_trip(weight * s) / s"  # the solution's W_hat


def awq_source(*replaced: tuple[str, str]) -> str:
    """The solution's ``awq_quantize`` with each (old, new) of ``replaced`` substituted in its cell: a
    wrong answer's source (:func:`autograder.mistakes.answer_cell`)."""
    return answer_cell("03_quantization", "awq_quantize", *replaced)


SEARCHED = ("salient", "per_row", "dead_channel")  # the checks whose answer comes from the search


def _failing(checks, words: str) -> tuple[set[str], str]:
    """The checks a mistake fails: with per_row, bad_group too, which judges the result on a group size
    that divides the columns beside its ValueError on one that does not."""
    checks = (*checks, "bad_group") if "per_row" in checks else checks
    return {f"awq_quantize.{c}" for c in checks}, words


JUDGED = {  # judged in the tests' process, each failing exactly its checks (tests: AWQ_WORDS, where they differ)
    "awq_not_divided_after": Planted(
        "awq_quantize", awq_source((APPROX, "round_trip(weight * s)")), *_failing(SEARCHED, "not divided by s")
    ),
    "awq_salient_channels_shrunk": Planted(
        "awq_quantize",
        awq_source(("pow(alpha)", "pow(-alpha)")),
        *_failing(("salient", "per_row"), "shrunk"),  # and dead_channel, told by the clamp's hint: 1 / 0
    ),
    "awq_weight_error": Planted(
        "awq_quantize",
        awq_source(("torch.trace(delta @ hessian.to(weight.dtype) @ delta.T)", "(delta ** 2).sum()")),
        *_failing(("uniform", *SEARCHED), "error of the weights"),
    ),
    "awq_alpha_one_tried": Planted(
        "awq_quantize",
        awq_source(("alpha = step / grid", "alpha = torch.linspace(0, 1, grid)[step].item()")),
        *_failing(SEARCHED, "linspace"),
    ),
    "awq_no_clamp": Planted(
        "awq_quantize",
        awq_source((SCALES, SCALES.replace(".clamp(min=1e-4)", ""))),
        *_failing(("dead_channel",), "never fires"),
    ),
    "awq_only_divided_by_s": Planted(
        "awq_quantize", awq_source((APPROX, "round_trip(weight) / s")), *_failing(SEARCHED, "only divided by s")
    ),
    "awq_scales_from_the_weights": Planted(
        "awq_quantize",
        awq_source(("mean_abs.to(weight.dtype)", "weight.abs().mean(dim=0)")),
        *_failing(("uniform", *SEARCHED), "weights' column means"),
    ),
    "awq_scales_from_the_hessian_diagonal": Planted(
        "awq_quantize",
        awq_source(("mean_abs.to(weight.dtype)", "hessian.diagonal().to(weight.dtype)")),
        *_failing(("uniform", *SEARCHED), "diag(H)"),
    ),
    "awq_clamped_before_the_power": Planted(
        "awq_quantize",
        awq_source((SCALES, "mean_abs.to(weight.dtype).clamp(min=1e-4).pow(alpha)")),
        *_failing(("dead_channel",), "clamped before the power"),
    ),
    "awq_last_of_tied_exponents": Planted(  # the prompt: the first, if several tie
        "awq_quantize",
        awq_source(("errors[-1] < best[0]", "errors[-1] <= best[0]")),
        *_failing(("uniform",), "20 exponents tie for the least error"),
    ),
    "awq_too_many_levels": Planted(
        "awq_quantize",
        awq_source(("levels = 2 ** (bits - 1) - 1", "levels = 2 ** bits - 1")),
        *_failing(("uniform", "salient", "dead_channel", "per_row"), "levels instead of"),
    ),
}
