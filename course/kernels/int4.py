"""Int4 weights that decode faster: a linear layer that keeps symmetric 4-bit codes packed two to a
byte (``code + 8``, the first of each pair in the high nibble, as chapter 9's ``pack_int4``)
with one scale per group of columns, and multiplies with torch's fused int4 kernel where torch has
one for the device.

Paths, one signature ``(x, packed, scale, prepared=None) -> y``:

* :func:`reference_linear`: dequantize to float32, then ``x @ W.T`` (every device; the result the
  fused paths are tested against);
* :func:`fused_linear`: ``torch.ops.aten._weight_int4pack_mm_for_cpu`` on the CPU,
  ``_weight_int4pack_mm`` (tinygemm, what gpt-fast and torchao build on) on CUDA. Both read the
  codes four bits at a time and compute in bfloat16: activations and scales are rounded to
  bfloat16 (8-bit mantissa), so the output differs from the reference by about 0.3% (relative
  Frobenius norm); :data:`TOLERANCE` is the bound the tests hold it to.
* :func:`linear`: the dispatcher: fused where :func:`fused_unavailable` finds nothing against it,
  the reference otherwise.

The kernels take a weight in their own tiled layout (:func:`prepare`: built once per layer and
device, and kept) and a ``(K / group, N, 2)`` bfloat16 tensor of scales and zeros, with a weight
``(q - 8) * scale + zero``: symmetric codes have zero 0. Their constraints: a group size of 32, 64,
128 or 256 that divides the input width (a larger group, one scale per row of 704 columns say, is
given to them as groups of the largest of those that divides it, each scale repeated: the same
weights); an output width that is a multiple of 16 (CPU) or 8
(CUDA); on CUDA an input width that is a multiple of 32.

Not handled: asymmetric codes (a zero per group), biases, MPS, training (no gradients flow to the
codes), codes changed in place after the first call (the prepared copy would be stale).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course import quantization, withheld

GROUP_SIZES = (32, 64, 128, 256)  # what torch's fused int4 kernels accept
TOLERANCE = 1e-2  # ||fused - reference|| / ||reference||: bfloat16 activations and scales (measured ~3e-3)
_ROWS_MULTIPLE = {"cpu": 16, "cuda": 8}  # the kernels' constraint on the output width N
_CUDA_INNER_K_TILES = (8, 4, 2)  # tinygemm's tilings of K, largest first: K must be a multiple of 16 x tiles


def check_stored(packed: torch.Tensor, scale: torch.Tensor) -> tuple[int, int, int]:
    """(out_features, in_features, group_size) of packed codes and their scales, or ValueError."""
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8 or packed.dim() != 2:
        raise ValueError(
            f"packed codes must be a 2-D torch.uint8 tensor (out, in // 2), got "
            f"{getattr(packed, 'dtype', type(packed).__name__)} {tuple(getattr(packed, 'shape', ()))}; "
            "build them with pack_int4 (chapter 9)"
        )
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point() or scale.dim() != 2:
        raise ValueError("scale must be a 2-D floating-point tensor (out, in // group_size)")
    out_features, in_features = packed.shape[0], 2 * packed.shape[1]
    if scale.shape[0] != out_features or scale.shape[1] < 1 or in_features % scale.shape[1]:
        raise ValueError(
            f"scale of shape {tuple(scale.shape)} does not fit codes for a ({out_features}, {in_features}) "
            "weight: it needs one row per output and a number of groups that divides the input width"
        )
    return out_features, in_features, in_features // scale.shape[1]


def dequantize(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 (out, in) weight the packed codes and their scales encode."""
    check_stored(packed, scale)
    return quantization.dequantize(quantization.unpack_int4(packed), scale.float())


def _check_input(x: torch.Tensor, in_features: int, packed: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.shape[-1] != in_features:
        raise ValueError(f"x has {x.shape[-1]} features in its last dimension, the layer takes {in_features}")
    if x.device != packed.device:
        raise ValueError(f"x is on {x.device} and the codes on {packed.device}; move one of them (.to(device))")


def reference_linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, prepared: Prepared | None = None
) -> torch.Tensor:
    """``x @ W.T`` with W dequantized to float32 first (a full-size matrix on every call)."""
    _, in_features, _ = check_stored(packed, scale)
    _check_input(x, in_features, packed)
    return F.linear(x, dequantize(packed, scale).to(x.dtype))


def kernel_group(group_size: int) -> int | None:
    """The group size the fused kernels are given for stored groups of ``group_size`` columns: itself
    when they take it, else the largest they take that divides it (the scales repeated), else None."""
    if group_size in GROUP_SIZES:
        return group_size
    return next((g for g in reversed(GROUP_SIZES) if group_size % g == 0), None)


def _cuda_inner_k_tiles(in_features: int) -> int | None:
    return next((tiles for tiles in _CUDA_INNER_K_TILES if in_features % (16 * tiles) == 0), None)


def fused_unavailable(packed: torch.Tensor, scale: torch.Tensor, device: torch.device | None = None) -> str | None:
    """Why torch's fused int4 product cannot take this layer on ``device`` (its codes' by default),
    or None when it can."""
    out_features, in_features, group_size = check_stored(packed, scale)
    device = torch.device(device) if device is not None else packed.device
    op = {"cpu": "_weight_int4pack_mm_for_cpu", "cuda": "_weight_int4pack_mm"}.get(device.type)
    if op is None:
        return f"torch has no fused int4 product for {device.type}"
    if not hasattr(torch.ops.aten, op):
        return f"this torch ({torch.__version__}) has no torch.ops.aten.{op}"
    if kernel_group(group_size) is None:
        return (
            f"groups of {group_size} columns: the fused kernel takes groups of {', '.join(map(str, GROUP_SIZES))} "
            "(or a multiple of one of them)"
        )
    if out_features % _ROWS_MULTIPLE[device.type]:
        multiple = _ROWS_MULTIPLE[device.type]
        return f"{out_features} outputs: the fused kernel on {device.type} needs a multiple of {multiple}"
    if device.type == "cuda" and _cuda_inner_k_tiles(in_features) is None:
        return f"{in_features} inputs: the fused kernel on CUDA needs a multiple of 32"
    return None


class Prepared(NamedTuple):
    """The fused kernel's inputs for one layer on one device (:func:`prepare`)."""

    weight: torch.Tensor  # the kernel's tiled layout of the codes
    scales_and_zeros: torch.Tensor  # (K / group, N, 2) bfloat16
    group_size: int
    in_features: int
    out_features: int


def prepare(packed: torch.Tensor, scale: torch.Tensor) -> Prepared:
    """The fused kernel's inputs on the codes' device, or ValueError (with the reason) where it cannot run."""
    reason = fused_unavailable(packed, scale)
    if reason:
        raise ValueError(f"the fused int4 product cannot take this layer: {reason}; use reference_linear")
    out_features, in_features, group_size = check_stored(packed, scale)
    group = kernel_group(group_size)
    scale = scale.repeat_interleave(group_size // group, dim=1)  # the same weights, in groups the kernel takes
    if packed.device.type == "cpu":
        unsigned = quantization.unpack_codes(packed, 4).to(torch.int32)  # (N, K) in 0..15 = code + 8
        weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unsigned.contiguous(), 1)
    else:  # CUDA takes the (N, K / 2) bytes as they are: the first code of a pair in the high nibble
        weight = torch.ops.aten._convert_weight_to_int4pack(packed.contiguous(), _cuda_inner_k_tiles(in_features))
    scales = scale.t().to(torch.bfloat16)  # (K / group, N)
    scales_and_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=-1).contiguous()  # (K / group, N, 2)
    return Prepared(weight, scales_and_zeros, group, in_features, out_features)


def _fused(x: torch.Tensor, prepared: Prepared) -> torch.Tensor:
    if not x.is_floating_point() or x.shape[-1] != prepared.in_features:
        _check_input(x, prepared.in_features, prepared.weight)
    flat = x.reshape(-1, prepared.in_features).to(torch.bfloat16).contiguous()  # (tokens, K)
    op = torch.ops.aten._weight_int4pack_mm_for_cpu if x.is_cpu else torch.ops.aten._weight_int4pack_mm
    y = op(flat, prepared.weight, prepared.group_size, prepared.scales_and_zeros)  # (tokens, N) bfloat16
    return y.to(x.dtype).reshape(*x.shape[:-1], prepared.out_features)


def fused_linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, prepared: Prepared | None = None
) -> torch.Tensor:
    """``x @ W.T`` through torch's fused int4 kernel, computed in bfloat16, returned in ``x``'s dtype.
    Raises ValueError, with the reason, for a layer the kernel cannot take."""
    _, in_features, _ = check_stored(packed, scale)
    _check_input(x, in_features, packed)
    return _fused(x, prepared if prepared is not None else prepare(packed, scale))


def linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, prepared: Prepared | None = None
) -> torch.Tensor:
    """The dispatcher: the fused kernel where it takes the layer, :func:`reference_linear` otherwise.
    ``prepared`` (from :func:`prepare`, or :func:`prepared_for`) skips the checks on every call."""
    if prepared is not None and prepared.weight.device == x.device:
        return _fused(x, prepared)
    path = reference_linear if fused_unavailable(packed, scale, x.device) else fused_linear
    return path(x, packed, scale)


def prepared_for(module: nn.Module, packed: torch.Tensor, scale: torch.Tensor) -> Prepared | None:
    """The kernel's inputs for ``module``'s codes, built on the first call on a device and kept on the
    module; None where the reference path runs."""
    cache = module.__dict__.setdefault("_int4_prepared", {})
    key = (packed.device, packed.data_ptr())
    if key not in cache:
        cache.clear()
        cache[key] = None if fused_unavailable(packed, scale) else prepare(packed, scale)
    return cache[key]


class FusedInt4(nn.Module):
    """Codes already packed two to a byte (``pack_int4``'s layout, chapter 9's exercise) and their
    float16 scales, served through :func:`linear`: the fused kernel where it applies (:attr:`path`
    says which, :meth:`why_reference` why not), what a stored layer's ``codes`` and ``scale`` cost
    with a kernel that reads them four bits at a time. Not handled: a bias, codes changed after the
    first call."""

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.out_features, self.in_features, self.group_size = check_stored(packed, scale)
        self.register_buffer("codes", packed)  # (out, in // 2) uint8
        self.register_buffer("scale", scale.to(torch.float16))  # (out, in // group_size)

    def weight(self) -> torch.Tensor:
        """The float32 (out, in) matrix the codes and scales encode."""
        return dequantize(self.codes, self.scale)

    @property
    def path(self) -> str:
        """``fused cpu``, ``fused cuda`` or ``reference``: what :meth:`forward` runs on the codes' device."""
        return "reference" if self.why_reference() else f"fused {self.codes.device.type}"

    def why_reference(self) -> str | None:
        """Why the fused kernel cannot take this layer on its device, or None."""
        return fused_unavailable(self.codes, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.codes, self.scale, prepared_for(self, self.codes, self.scale))

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, int4, groups of {self.group_size}, {self.path}"


# --- what it buys: a matrix-vector product against float32 ------------------------------------------


def stored_bytes(out_features: int, in_features: int, group_size: int) -> int:
    """Bytes the fused kernel reads for one product: the codes (half a byte each) and a bfloat16
    scale and zero per group."""
    return out_features * in_features // 2 + 4 * out_features * (in_features // group_size)


NOISY_SPREAD = 0.5  # repeats spread wider than this (timing.spread) time other work more than the product


def crossover_reading(rows: list[dict]) -> str:
    """Where the int4 layer starts to beat float32, read off :func:`speedups`' rows, and how close the
    largest layer comes to the bytes ratio's bound; first, the sizes whose repeats spread beyond
    :data:`NOISY_SPREAD`, whose speed-ups then say more about other work on the machine."""
    from course import readings

    rows = sorted(rows, key=lambda r: r["fp32_bytes"])
    sizes = [f"{r['shape'][0]}x{r['shape'][1]} ({r['fp32_bytes'] / 2**20:.2f} MiB in float32)" for r in rows]
    start = readings.holds_from(range(len(rows)), [r["speedup"] >= 1 for r in rows])
    if start is None:
        where = "int4 is slower than float32 at the largest size measured: the fixed costs still dominate here"
    elif start == 0:
        where = "int4 is at least as fast as float32 at every size measured, from the smallest on"
    else:
        below = sizes[start - 1].split(" ")[0]
        where = f"int4 crosses 1x between {below} and {sizes[start]}: at least as fast from there on, slower below"
    largest = rows[-1]
    share = largest["speedup"] / largest["bound"]
    reach = (
        f"at {sizes[-1].split(' ')[0]} it runs {largest['speedup']:.2f}x float32's speed, {share:.2f} of the bytes "
        f"ratio's bound ({largest['bound']:.2f}x)"
    )
    if share > 1:
        reach += "; above the bound, so float32 read its weight below full bandwidth here (noise, or caches)"
    spreads = [max(r.get("fp32_spread", 0.0), r.get("int4_spread", 0.0)) for r in rows]
    noisy = [(size.split(" ")[0], spread) for size, spread in zip(sizes, spreads, strict=True) if spread > NOISY_SPREAD]
    if not noisy:
        return f"{where}; {reach}"
    if start is None and noisy[-1][0] == sizes[-1].split(" ")[0]:
        where = "int4 measured slower than float32 at the largest size, whose repeats are too noisy to say why"
    listed = ", ".join(f"{size} ({spread:.0%})" for size, spread in noisy)
    caution = (
        f"other work shared the machine while these sizes were timed, their repeats spreading widely: {listed}; "
        "their speed-ups are noise (time them again on a quiet machine)"
    )
    return f"{caution}. Otherwise: {where}; {reach}"


# --- chapter 3's section 12: they build the course's int4 layer on chapter 9's exercise, pack_int4 ------


COURSE = withheld.module("course.answers.choosing_a_technique")  # the layer's packing: instructor-only, recorded


def agreement(size: int = 1024, group_size: int = 64, device_type: str = "cpu", seed: int = 4) -> dict:
    """One token through the int4 layer of ``gaussian_matrix(size, size, seed=seed)`` on
    ``device_type``, fused against dequantize-then-multiply: ``{"layer": its description, "path",
    "why": why the reference runs (or None), "difference": the relative difference of the outputs}``."""
    return COURSE.agreement(size, group_size, device_type, seed)


def speedups(sizes: tuple[int, ...], group_size: int = 64) -> dict:
    """One token through a square int4 layer of each of ``sizes`` against float32 ``F.linear`` on
    this machine's best device (with the thread count in force), and the machine: ``{"machine":
    course.device.describe's line, "rows": [...]}``, each row both medians (seconds), their spreads
    (``course.timing.spread``), the speed-up (float32 time / int4 time) and the bound the bytes set
    on it (float32 bytes / int4 bytes, :func:`stored_bytes`). Plain data, so that the learners'
    copy, which has no int4 layer until chapter 9's exercise is written, shows those measured when
    it was made."""
    return COURSE.speedups(tuple(sizes), group_size)


def pin_threads(size: int, group_size: int = 64) -> str:
    """``course.timing.pin_threads`` on one token through a ``size`` x ``size`` int4 layer on the CPU:
    the thread count it chose for what follows, and its message."""
    return COURSE.pin_threads(size, group_size)
