"""Weights stored in fewer bits, as a checkpoint would hold them: integer codes (two 4-bit codes,
or four 2-bit codes, to a byte) and fp16 scales, their bytes counted from those tensors. Int4 goes
through torch's fused int4 product where it takes the layer (``course.kernels.int4``); every other
format is rebuilt into a float32 matrix on every call.

A worked example: int4 codes with one fp16 scale per 64 weights take 64 / 2 + 2 = 34 bytes per 64
weights, 4.25 bits each; the course's target's 4.2M linear weights then take 2.2 MB instead of 16.9 MB.

Not handled: layers with a bias (the course model has none), fused kernels for int8, int2 and NF4
(rebuilding those weights in torch costs time on a CPU), activation quantization.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from course import quantization
from course.kernels import int4
from course.kernels.int4 import FusedInt4
from course.model import LanguageModel
from course.quantization import unpack_codes

FORMAT_BITS = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4, "nf4": 4, "int2": 2}
GROUPED = ("int8", "int4", "nf4", "int2")  # formats with codes and scales
CALIBRATED = ("int8", "int4", "int2")  # the absmax formats whose codes GPTQ can choose


@functools.cache
def _nf4_pairs(device: torch.device) -> torch.Tensor:
    """(256, 2): the NF4 levels of a packed byte's high and low nibble."""
    levels = quantization.nf4_levels()
    byte = torch.arange(256)
    return torch.stack([levels[byte >> 4], levels[byte & 15]], dim=-1).to(device)


class StoredLinear(nn.Module):
    """A bias-free linear layer kept in a stored format and rebuilt into float32 on every call,
    except int4 with ``fused``, which goes through torch's fused int4 product where it takes the layer.

    ``int8``: int8 codes; ``int4``, ``int2``: absmax codes offset to unsigned and packed; ``nf4``:
    indices of the 16 NF4 levels, packed; each with one fp16 scale per row or per ``group_size``
    columns (NF4 in groups of 64: 4.25 bits a weight; chapter 3's 4.5 counts QLoRA's fp32 scales).
    ``fp16``: the weights in half precision. With ``hessian`` (H = X^T X / n of the layer's
    calibration inputs), the absmax formats take GPTQ's codes and scales instead of rounding to nearest.
    """

    def __init__(
        self,
        linear: nn.Linear,
        weights: str,
        group_size: int | None = None,
        hessian: torch.Tensor | None = None,
        fused: bool = True,
    ):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("StoredLinear handles bias-free layers only (the course model has no biases)")
        if weights not in FORMAT_BITS or weights == "fp32":
            raise ValueError(f"weights must be one of {', '.join(f for f in FORMAT_BITS if f != 'fp32')}")
        if hessian is not None and weights not in CALIBRATED:
            raise ValueError(f"GPTQ chooses absmax codes: calibrate {', '.join(CALIBRATED)}, not {weights}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weights, self.bits, self.fused = weights, FORMAT_BITS[weights], fused
        weight = linear.weight.detach().float()
        if weights == "fp16":
            self.register_buffer("weight16", weight.half())
            return
        if weights == "nf4":
            codes, scale = quantization.quantize_nf4(weight, group_size)  # (out, in) uint8 in 0..15
            stored = int4.COURSE.pack_codes(codes, 4)
        else:
            codes, scale = (  # (out, in) int32, symmetric
                quantization.quantize(weight, self.bits, group_size)
                if hessian is None
                else quantization.quantize_gptq(weight, hessian, self.bits, group_size)
            )
            offset = 2 ** (self.bits - 1)
            stored = codes.to(torch.int8) if self.bits == 8 else int4.COURSE.pack_codes(codes + offset, self.bits)
        self.register_buffer("codes", stored)
        self.register_buffer("scale", scale.half())  # (out, groups)

    def weight(self) -> torch.Tensor:
        """The float32 (out, in) matrix the stored tensors encode."""
        if self.weights == "fp16":
            return self.weight16.float()
        if self.weights == "nf4":  # one lookup per byte: the levels of its two nibbles
            pairs = torch.index_select(_nf4_pairs(self.codes.device), 0, self.codes.flatten().int())  # (bytes, 2)
            return quantization.dequantize(pairs.reshape(self.out_features, -1), self.scale.float())
        if self.bits == 8:
            codes = self.codes.float()
        else:
            codes = unpack_codes(self.codes, self.bits).float() - 2 ** (self.bits - 1)
        return quantization.dequantize(codes, self.scale.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weights == "int4" and self.fused:  # torch's fused int4 product where it takes the layer
            return int4.linear(x, self.codes, self.scale, int4.prepared_for(self, self.codes, self.scale))
        return F.linear(x, self.weight().to(x.dtype))

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, {self.weights}"


def store_weights(
    model: LanguageModel,
    weights: str,
    group_size: int | None = None,
    hessians: dict[str, torch.Tensor] | None = None,
    fused: bool = True,
) -> LanguageModel:
    """A copy of ``model`` whose linear layers are :class:`StoredLinear` in ``weights``; the tied
    embedding (also the output layer) and the norms stay in float32. ``fp32``: a plain copy.
    ``hessians`` (layer name -> H, ``course.choosing_a_technique.calibration_hessians``): GPTQ's
    codes instead of rounding."""
    if weights not in FORMAT_BITS:
        raise ValueError(f"weights must be one of {', '.join(FORMAT_BITS)}, got {weights!r}")
    if weights == "fp32":
        return replace_layers(model, nn.Linear, lambda layer: layer)
    return replace_layers(
        model,
        nn.Linear,
        lambda layer, path: StoredLinear(layer, weights, group_size, hessians[path] if hessians else None, fused),
    )


def replace_layers(model: nn.Module, kind, make) -> nn.Module:
    """A copy of ``model`` in which every module of type ``kind`` (or for which ``kind(module)`` is
    true) is ``make(module)``, or ``make(module, path)`` where ``make`` takes two arguments (the
    module's dotted name in ``model``)."""
    import copy
    import inspect

    matches = (lambda module: isinstance(module, kind)) if isinstance(kind, type) else kind
    named = len(inspect.signature(make).parameters) == 2
    replaced = copy.deepcopy(model)
    for path, module in list(replaced.named_modules()):
        if path and matches(module):
            parent, _, leaf = path.rpartition(".")
            setattr(replaced.get_submodule(parent), leaf, make(module, path) if named else make(module))
    return replaced


def gptq_codes(
    weight: torch.Tensor, hessian: torch.Tensor, group_size: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ's signed 4-bit codes (out, in) and float32 scales (out, groups) for ``weight``: what a
    calibrated int4 layer is given (chapter 3's ``gptq_quantize``)."""
    return quantization.quantize_gptq(weight.detach().float(), hessian, 4, group_size)


def weight_bytes(model: nn.Module | None) -> int:
    """Bytes of every tensor a checkpoint of ``model`` holds (weights, codes, scales, norms); 0 for None."""
    if model is None:
        return 0
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def course_int4_layer(weight: torch.Tensor, group_size: int, codes=None, scale=None) -> FusedInt4:
    """The course's stored int4 layer for ``weight``, built as the learner's ``Int4Linear(weight,
    group_size)`` is: chapter 3's codes of ``weight`` and their float16 scales, or the ``codes`` and
    ``scale`` given (GPTQ's), packed by chapter 9's ``pack_int4``, through the fused product."""
    return FusedInt4(*int4.COURSE.int4_buffers(weight, group_size, codes, scale))
