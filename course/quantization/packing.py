"""Codes unpacked from bytes: 2, 4 or 8 bits a code (``unpack_codes``, as chapter 8's NF4 bytes and
chapter 9's stored weights hold them), and two signed 4-bit codes a byte (``unpack_int4``, what
chapter 9's exercise ``pack_int4`` stores). Packing is the exercises' (chapters 8 and 9): the course
packs through their answers (``course.answers.choosing_a_technique.pack_codes``, instructor-only).
The int4 layer that multiplies with the bytes through torch's fused kernel is ``course.kernels.int4``."""

from __future__ import annotations

import torch

from course.quantization.absmax import described


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Bytes back to codes, high bits first: (rows, bytes) uint8 -> (rows, bytes * 8 // bits) uint8.
    Shifts and masks stay in uint8: on every call of a stored layer, wider types cost twice the time."""
    per_byte, mask = 8 // bits, 2**bits - 1
    parts = [(packed >> (bits * (per_byte - 1 - i))) & mask for i in range(per_byte)]  # high bits first
    return torch.stack(parts, dim=-1).reshape(packed.shape[0], -1)  # (rows, bytes, per_byte) -> (rows, cols)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The codes ``pack_int4`` stored (chapter 9's exercise): (rows, bytes) uint8 -> (rows, 2 * bytes) int32 in [-8, 7].

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
