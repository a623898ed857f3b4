"""Codes packed into bytes: 2, 4 or 8 bits (``pack_codes``, as chapter 8's NF4 bytes and chapter 9's
stored weights are), and two signed 4-bit codes to a byte (``pack_int4``, chapter 9's exercise); the
int4 layer that multiplies with them through torch's fused kernel is ``course.kernels.int4``."""

from __future__ import annotations

import torch

from course.quantization.absmax import described
from course.withheld import withheld


def _check_codes(values: torch.Tensor, low: int, high: int, per_byte: int, what: str) -> None:
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or values.is_floating_point():
        raise ValueError(f"{what} must be a 2-D integer tensor, got {getattr(values, 'shape', type(values).__name__)}")
    if values.shape[1] % per_byte:
        raise ValueError(f"{values.shape[1]} columns: {per_byte} codes share a byte, so the columns must be a multiple")
    if values.numel() and (values.min() < low or values.max() > high):
        raise ValueError(f"{what} must lie in [{low}, {high}], got [{int(values.min())}, {int(values.max())}]")


@withheld
def pack_codes(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned ``bits``-bit values (rows, cols) packed ``8 // bits`` to a byte, the first of each
    run in the highest bits (bitsandbytes' order): (rows, cols * bits // 8) uint8."""
    per_byte = 8 // bits
    _check_codes(values, 0, 2**bits - 1, per_byte, f"{bits}-bit values")
    rows, cols = values.shape
    grouped = values.to(torch.int32).reshape(rows, cols // per_byte, per_byte)  # (rows, bytes, per_byte)
    shifts = torch.arange(per_byte - 1, -1, -1, device=values.device, dtype=torch.int32) * bits  # high first
    return (grouped << shifts).sum(dim=-1).to(torch.uint8)


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of :func:`pack_codes`: (rows, bytes) uint8 -> (rows, bytes * 8 // bits) uint8.
    Shifts and masks stay in uint8: on every call of a stored layer, wider types cost twice the time."""
    per_byte, mask = 8 // bits, 2**bits - 1
    parts = [(packed >> (bits * (per_byte - 1 - i))) & mask for i in range(per_byte)]  # high bits first
    return torch.stack(parts, dim=-1).reshape(packed.shape[0], -1)  # (rows, bytes, per_byte) -> (rows, cols)


@withheld
def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Signed 4-bit codes in [-8, 7] (rows, cols) stored as ``code + 8``, two to a byte, the first
    code of each pair in the high nibble: (rows, cols // 2) uint8. ``[[-7, 7]]`` -> ``[[0x1F]]``."""
    _check_codes(codes, -8, 7, 2, "int4 codes")
    return pack_codes(codes + 8, 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The codes :func:`pack_int4` stored: (rows, bytes) uint8 -> (rows, 2 * bytes) int32 in [-8, 7].

    Floating-point (or boolean) tensors and tensors that are not 2-D raise ValueError: they are not bytes."""
    if (
        not isinstance(packed, torch.Tensor)
        or packed.is_floating_point()
        or packed.is_complex()
        or packed.dtype == torch.bool
        or packed.dim() != 2
    ):
        raise ValueError(
            f"packed must be a 2-D tensor of torch.uint8 bytes (rows, bytes), got {described(packed, dtype=True)}; "
            "pass what pack_int4 returns (pack signed codes in [-8, 7] with pack_int4 first)"
        )
    return unpack_codes(packed, 4).to(torch.int32) - 8
