"""Chapter 8's library check of GPTQ: the course's ``gptq_quantize`` (chapter 3) against
llmcompressor's (vLLM's quantization library) on SmolLM2, layer by layer and on the model's loss.

Layer by layer, both run on the same weight, the same Hessian and the same scales: the course's
GPTQ chooses each group's scale from the error-updated weights as its sweep reaches the group,
and llmcompressor's ``quantize_weight`` (which takes scales fixed beforehand) is handed exactly
those scales, so that the two sweeps walk the same path. One difference stays by design: the
course's grid is symmetric with ``2^(b-1) - 1`` levels a side (-7..7 at 4 bits),
compressed-tensors' also allows ``-2^(b-1)`` (-8). Where a weight, moved by the errors spread
onto it, falls beyond -7.5 steps, the library keeps -8 and the course clamps to -7; the rest of
that row then differs too, as each rounding error moves the columns after it.

On the model, llmcompressor runs its own way (``oneshot`` with a ``GPTQModifier``): scales fixed
from the original weights before the sweep (absmax / 7.5 at 4 bits, its 16-level grid), blocked
lazy updates. So the losses are compared as results, not code for code.

A worked example::

    agreement = gptq_library_check.layer_agreement(weight, hessian, bits=4, group_size=64)
    agreement.share  # 0.999...: codes the two choose alike

Not handled: act-order (off on both sides: ``actorder=None``; llmcompressor's default is
"static"), asymmetric grids, GPUs (llmcompressor's Triton kernel is not compared).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from course import in_practice, quantization, withheld

DAMPING = 0.01  # the share of the Hessian's mean diagonal added to it, on both sides


def _library():
    from course import pretrained

    pretrained.require("llmcompressor")


def quantization_args(bits: int, group_size: int):
    """compressed-tensors' description of the course's scheme: symmetric integer codes, one scale per
    ``group_size`` columns, columns in order (act-order off)."""
    _library()
    from compressed_tensors.quantization import QuantizationArgs

    return QuantizationArgs(
        num_bits=bits, type="int", symmetric=True, strategy="group", group_size=group_size, actorder=None
    )


@contextlib.contextmanager
def flush_denormals():
    """Within the block, float32 numbers below 1.2e-38 count as zero: GPTQ's error updates on
    Hessians of few tokens produce such numbers, on which a CPU computes many times slower. Off again
    afterwards."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def library_codes(
    weight: torch.Tensor, hessian: torch.Tensor, scale: torch.Tensor, bits: int, group_size: int
) -> torch.Tensor:
    """The codes llmcompressor's GPTQ (``quantize_weight``, blocks of 128 columns) chooses for
    ``weight`` (rows, cols) with ``hessian`` (cols, cols) and the fixed ``scale`` (rows, cols / group_size)."""
    _library()
    from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight

    scale = scale.float()
    quantized, _, fallback = quantize_weight(
        weight.float().clone()[None],
        hessian.float()[None],
        scale[None],
        torch.zeros_like(scale)[None],
        None,
        quantization_args(bits, group_size),
        blocksize=128,
        percdamp=DAMPING,
    )
    if bool(fallback.any()):
        raise ValueError("llmcompressor could not factor this Hessian and rounded to nearest instead")
    step = scale.repeat_interleave(group_size, dim=1)
    step = torch.where(step > 0, step, torch.ones_like(step))
    return torch.round(quantized[0] / step).to(torch.int32)


@dataclass(frozen=True)
class Agreement:
    """How alike two GPTQs chose one layer's codes."""

    same: int  # codes chosen alike
    total: int  # codes in the layer
    rows_differing: int  # rows with at least one different code
    first_at_extra_level: int  # of those, rows whose first difference is the library's extra level

    @property
    def share(self) -> float:
        return self.same / self.total

    @property
    def identical(self) -> bool:
        return self.same == self.total


def compare_codes(course: torch.Tensor, library: torch.Tensor, bits: int) -> Agreement:
    """Count where two (rows, cols) code matrices agree, and how many differing rows first differ
    where the library chose -2^(bits-1), a level the course's grid does not have."""
    differ = course != library
    rows = differ.any(dim=1)
    first = differ.int().argmax(dim=1)  # the first differing column of each row
    extra = library[rows, first[rows]] == -(2 ** (bits - 1))
    return Agreement(
        same=int((~differ).sum()),
        total=course.numel(),
        rows_differing=int(rows.sum()),
        first_at_extra_level=int(extra.sum()),
    )


def layer_agreement(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    bits: int = 4,
    group_size: int = 64,
    chosen: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Agreement:
    """The course's :func:`course.quantization.quantize_gptq` against llmcompressor's on one layer:
    same weight, Hessian, damping and (the course's) scales. ``chosen``: the course's (codes, scale)
    when already computed."""
    with flush_denormals():
        codes, scale = chosen or quantization.quantize_gptq(weight.float(), hessian, bits, group_size, DAMPING)
        theirs = library_codes(weight, hessian, scale, bits, group_size)
    return compare_codes(codes, theirs, bits)


def calibration_windows(tokens: torch.Tensor, windows: int, seq_len: int) -> torch.Tensor:
    """(windows, seq_len): evenly spaced windows of a 1-D token sequence."""
    if tokens.dim() != 1 or len(tokens) < seq_len:
        raise ValueError(f"need a 1-D sequence of at least {seq_len} tokens, got shape {tuple(tokens.shape)}")
    starts = torch.linspace(0, len(tokens) - seq_len, windows).long().tolist()
    return torch.stack([tokens[s : s + seq_len] for s in starts])


def decoder_hessians(model: torch.nn.Module, windows: torch.Tensor, names) -> dict[str, torch.Tensor]:
    """H = X^T X / n (float64) of the inputs of the decoder's linear layers ``names`` (as
    ``in_practice.linear_layers`` names them) while the float model reads ``windows`` (n, T)."""
    from course import in_practice

    view = in_practice.AsCourseModel(model)
    hessians = quantization.calibration_hessians(view, windows.flatten(), len(windows), windows.shape[1])
    return {name: hessians[f"model.{name}"] for name in names}


@contextlib.contextmanager
def gptq_weights(model: torch.nn.Module, hessians: dict[str, torch.Tensor], bits: int = 4, group_size: int = 64):
    """Within the block, the linear layers named in ``hessians`` hold the course's GPTQ round trip of
    their weights; yields {name: (codes, scale)}; afterwards the original weights are back."""
    from course import in_practice

    layers = in_practice.linear_layers(model)
    originals = {name: layers[name].weight.detach().clone() for name in hessians}
    chosen = {}
    try:
        with torch.no_grad(), flush_denormals():
            for name, hessian in hessians.items():
                chosen[name] = quantization.quantize_gptq(originals[name].float(), hessian, bits, group_size, DAMPING)
                layers[name].weight.copy_(quantization.dequantize(*chosen[name]).to(originals[name].dtype))
        yield chosen
    finally:
        with torch.no_grad():
            for name, weight in originals.items():
                layers[name].weight.copy_(weight)


@contextlib.contextmanager
def rounded_weights(model: torch.nn.Module, names, bits: int = 4, group_size: int = 64):
    """Within the block, the linear layers ``names`` hold their round-to-nearest round trip (chapter 3)."""
    from course import in_practice

    layers = in_practice.linear_layers(model)
    originals = {name: layers[name].weight.detach().clone() for name in names}
    try:
        with torch.no_grad():
            for name in names:
                layers[name].weight.copy_(quantization.round_trip(originals[name], bits, group_size))
        yield
    finally:
        with torch.no_grad():
            for name, weight in originals.items():
                layers[name].weight.copy_(weight)


@contextlib.contextmanager
def without_pinned_memory():
    """llmcompressor pins its cached activations for faster copies to an accelerator, which raises
    "Cannot access accelerator device when none is available" on a machine without one: within the
    block, pinning does nothing where no accelerator is present."""
    _library()
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.pin_memory
    if not torch.accelerator.is_available():
        IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original


def target_patterns(names) -> list[str]:
    """llmcompressor's targets for exactly the linear layers ``names`` (regular expressions on the
    module names of the transformers model)."""
    import re

    return [f"re:^{re.escape(name)}$" for name in names]


def gptq_recipe(names, bits: int = 4, group_size: int = 64):
    """llmcompressor's GPTQ on the linear layers ``names``: the course's scheme, its damping, act-order off."""
    _library()
    from compressed_tensors.quantization import QuantizationScheme
    from llmcompressor.modifiers.quantization import GPTQModifier

    scheme = QuantizationScheme(targets=target_patterns(names), weights=quantization_args(bits, group_size))
    # act-order off on the modifier too: its default ("static") overrides the scheme's None
    return GPTQModifier(config_groups={"course": scheme}, actorder=None, dampening_frac=DAMPING, block_size=128)


def library_quantized(load, recipe, windows: torch.Tensor, tokenizer):
    """A fresh model from ``load()`` run through llmcompressor's ``oneshot`` with ``recipe``, calibrated
    on ``windows`` (n, T) in one batch (its basic pipeline: every layer's inputs from one pass, as
    :func:`decoder_hessians` takes them). Nothing is saved to disk."""
    _library()
    from loguru import logger

    logger.disable("llmcompressor")  # its log of each layer's steps, with their clocks: noise for the chapter
    with without_pinned_memory(), flush_denormals(), contextlib.ExitStack() as done:
        done.callback(logger.enable, "llmcompressor")
        from datasets import Dataset
        from llmcompressor import oneshot

        model, _ = load()
        data = Dataset.from_dict({"input_ids": windows.tolist(), "attention_mask": torch.ones_like(windows).tolist()})
        oneshot(
            model=model,
            dataset=data,
            recipe=recipe,
            tokenizer=tokenizer,
            num_calibration_samples=len(windows),
            max_seq_length=windows.shape[1],
            batch_size=len(windows),
            pipeline="basic",
        )
    return model.eval()


def agreement_reading(agreements: dict[str, Agreement], bits: int) -> str:
    """What the layer-by-layer comparison says, read off the counts."""
    same = sum(a.same for a in agreements.values())
    total = sum(a.total for a in agreements.values())
    identical = sum(a.identical for a in agreements.values())
    rows = sum(a.rows_differing for a in agreements.values())
    extra = sum(a.first_at_extra_level for a in agreements.values())
    reading = (
        f"the course's GPTQ and llmcompressor's choose the same code for {same / total:.4%} of {total:,} weights; "
        f"{identical} of {len(agreements)} layers bit for bit"
    )
    if rows:
        reading += (
            f"; of the {rows} rows that differ, {extra} ({extra / rows:.0%}) first differ where llmcompressor chose "
            f"{-(2 ** (bits - 1))}, a level the course's symmetric grid does not have"
        )
    return reading


def output_errors(
    originals: dict[str, torch.Tensor], quantized: dict[str, torch.Tensor], hessians: dict[str, torch.Tensor]
) -> dict[str, float]:
    """tr((W - Q) H (W - Q)^T) of each layer (what GPTQ minimises): name -> error."""
    return {name: quantization.output_error(originals[name], quantized[name], hessians[name]) for name in hessians}


def losses_reading(losses: dict[str, float], baseline: str, rtn: str, gptq: list[str]) -> str:
    """How much of round to nearest's loss above ``baseline`` each GPTQ took back."""
    gap = losses[rtn] - losses[baseline]
    parts = []
    for name in gptq:
        if gap > 0:
            parts.append(f"{name} {in_practice.taken_back((losses[rtn] - losses[name]) / gap)}")
        else:
            parts.append(f"{name} {losses[name] - losses[rtn]:+.4f} against it")
    return f"round to nearest costs {gap:+.4f} nats per token; " + ", ".join(parts)


@dataclass
class Comparison:
    """The course's GPTQ against llmcompressor's on some linear layers of one model (:func:`compare_gptq`)."""

    agreements: dict[str, Agreement]  # layer by layer: same weight, Hessian and scales
    losses: dict[str, float]  # held-out loss: "float32", "round to nearest", "course's GPTQ", "llmcompressor's GPTQ"
    error_ratios: dict[str, torch.Tensor]  # each GPTQ's output error over round to nearest's, layer by layer

    @property
    def share(self) -> float:
        return sum(a.same for a in self.agreements.values()) / sum(a.total for a in self.agreements.values())


GPTQ_METHODS = ("course's GPTQ", "llmcompressor's GPTQ")


def compare_gptq(
    model, tokenizer, load, windows: torch.Tensor, names, held_out_loss, bits: int = 4, group_size: int = 64
) -> Comparison:
    """Chapter 3's GPTQ (course's reference) against llmcompressor's on the linear layers ``names`` of
    ``model``, calibrated on ``windows`` (n, T): the codes layer by layer, each layer's output error
    and ``held_out_loss(model)`` with those layers quantized. ``load()`` gives a fresh copy of the
    model for the library to quantize (``model`` is left as it was)."""
    hessians = decoder_hessians(model, windows, names)
    originals = {name: model.get_submodule(name).weight.detach().clone() for name in names}
    losses, quantized = {"float32": held_out_loss(model)}, {}
    with rounded_weights(model, names, bits, group_size):
        losses["round to nearest"] = held_out_loss(model)
        quantized["round to nearest"] = {name: model.get_submodule(name).weight.detach().clone() for name in names}
    with gptq_weights(model, hessians, bits, group_size) as course_codes:
        losses["course's GPTQ"] = held_out_loss(model)
        quantized["course's GPTQ"] = {name: model.get_submodule(name).weight.detach().clone() for name in names}
    agreements = {
        name: layer_agreement(originals[name], hessians[name], bits, group_size, chosen=course_codes[name])
        for name in names
    }
    library = library_quantized(load, gptq_recipe(names, bits, group_size), windows, tokenizer)
    losses["llmcompressor's GPTQ"] = held_out_loss(library)
    quantized["llmcompressor's GPTQ"] = {name: library.get_submodule(name).weight.detach() for name in names}
    del library
    errors = {label: output_errors(originals, weights, hessians) for label, weights in quantized.items()}
    ratios = {
        label: torch.tensor([errors[label][n] / errors["round to nearest"][n] for n in names]) for label in GPTQ_METHODS
    }
    return Comparison(agreements, losses, ratios)


def gptq_on_pretrained(windows: torch.Tensor, ids: torch.Tensor, names: list[str]) -> dict:
    """:func:`compare_gptq` on the pretrained model as loaded, calibrated on ``windows`` (n, T), its
    loss :func:`course.in_practice.held_out_loss` on ``ids`` (T,), as plain data
    (:func:`comparison_of` makes it a :class:`Comparison` again). It runs chapter 3's GPTQ: the
    learners' copy has what it returned when the copy was made."""
    return withheld.module("course.answers.in_practice").gptq_on_pretrained(windows, ids, names)


def comparison_of(numbers: dict) -> Comparison:
    """The :class:`Comparison` that :func:`gptq_on_pretrained`'s numbers describe."""
    return Comparison(
        {name: Agreement(*counts) for name, counts in numbers["agreements"].items()},
        dict(numbers["losses"]),
        dict(numbers["error_ratios"]),
    )


def awq_recipe(names, bits: int = 4, group_size: int = 64, grid: int = 20):
    """llmcompressor's AWQ (activation-aware scales searched on ``grid`` points, then rounding to
    nearest) on the linear layers ``names``, the course's scheme."""
    _library()
    from compressed_tensors.quantization import QuantizationScheme
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier

    scheme = QuantizationScheme(targets=target_patterns(names), weights=quantization_args(bits, group_size))
    return [AWQModifier(n_grid=grid), QuantizationModifier(config_groups={"course": scheme})]


def smoothquant_recipe(names, strength: float = 0.8, smooth: bool = True):
    """llmcompressor's W8A8 (int8 weights per row, int8 activations per token, computed at run time)
    on the linear layers ``names``, after SmoothQuant moved ``strength`` of the activations' range
    into the weights (``smooth=False``: W8A8 alone)."""
    _library()
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform import SmoothQuantModifier

    w8a8 = QuantizationModifier(scheme="W8A8", targets=target_patterns(names))
    return [SmoothQuantModifier(smoothing_strength=strength), w8a8] if smooth else [w8a8]
