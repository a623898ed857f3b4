"""course.quant: exact small cases, properties on the chapter's matrices, an independent
numpy implementation, the published NF4 table, and the errors bad arguments give."""

import math

import numpy as np
import pytest
import torch

from course import quant

# The NF4 table as bitsandbytes ships it (QLoRA, arXiv 2305.14314), typed in from the source.
PUBLISHED_NF4 = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]


def numpy_round_trip(weight: np.ndarray, bits: int, group: int | None) -> np.ndarray:
    """An independent, loop-based implementation of the same scheme, for cross-checking."""
    levels = 2 ** (bits - 1) - 1
    out = np.zeros_like(weight, dtype=np.float64)
    rows, cols = weight.shape
    group = cols if group is None else group
    for r in range(rows):
        for start in range(0, cols, group):
            block = weight[r, start:start + group].astype(np.float64)
            scale = np.abs(block).max() / levels
            if scale == 0:
                continue
            out[r, start:start + group] = np.clip(np.rint(block / scale), -levels, levels) * scale
    return out


MATRICES = {
    "gaussian": lambda: quant.gaussian_matrix(64, 256, seed=5),
    "outliers": lambda: quant.outlier_matrix(64, 256, seed=5),
}


def test_worked_example():
    row = torch.tensor([[0.5, -0.2, 0.1, 0.0]])
    codes, scale = quant.quantize(row, 4)
    assert codes.tolist() == [[7, -3, 1, 0]]
    assert scale.item() == pytest.approx(0.5 / 7)
    assert quant.quantize_dequantize(row, 4).tolist()[0] == pytest.approx([0.5, -3 * 0.5 / 7, 0.5 / 7, 0.0])


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("group", [None, 8, 64])
def test_matches_independent_numpy_implementation(bits, group):
    weight = quant.outlier_matrix(16, 128, seed=bits)
    ours = quant.quantize_dequantize(weight.double(), bits, group).numpy()
    theirs = numpy_round_trip(weight.double().numpy(), bits, group)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("group", [None, 16, 128])
def test_error_at_most_half_a_step(name, bits, group):
    weight = MATRICES[name]()
    error = (quant.quantize_dequantize(weight, bits, group) - weight).abs()
    assert (error <= quant.half_step(weight, bits, group) * (1 + 1e-5) + 1e-9).all()


@pytest.mark.parametrize("name", MATRICES)
def test_more_bits_never_worse(name):
    weight = MATRICES[name]()
    for group in (None, 32):
        errors = [quant.relative_error(weight, quant.quantize_dequantize(weight, b, group)) for b in range(2, 9)]
        assert all(a >= b for a, b in zip(errors, errors[1:])), errors
        assert errors[-1] / errors[-2] == pytest.approx(0.5, abs=0.05)  # each bit halves the step


@pytest.mark.parametrize("name", MATRICES)
@pytest.mark.parametrize("bits", [3, 4, 8])
def test_smaller_groups_never_worse(name, bits):
    weight = MATRICES[name]()
    per_tensor = quant.relative_error(weight, quant.quantize_dequantize_per_tensor(weight, bits))
    errors = [quant.relative_error(weight, quant.quantize_dequantize(weight, bits, g)) for g in (None, 128, 32, 8)]
    assert per_tensor >= errors[0]
    assert all(a >= b for a, b in zip(errors, errors[1:])), errors


@pytest.mark.parametrize("bits", [4, 8])
def test_outliers_more_than_double_the_per_row_error(bits):
    clean = quant.gaussian_matrix(256, 512, seed=0)
    spiky = quant.outlier_matrix(256, 512, seed=0)
    ratio = (quant.relative_error(spiky, quant.quantize_dequantize(spiky, bits))
             / quant.relative_error(clean, quant.quantize_dequantize(clean, bits)))
    assert ratio > 2


def test_groups_repair_most_of_the_outlier_damage():
    spiky = quant.outlier_matrix(256, 512, seed=0)
    errors = quant.granularity_errors(spiky)
    assert errors["int4_g32"] < errors["int4_row"] / 2


def test_all_zero_groups_and_rows_come_back_as_zeros():
    weight = quant.gaussian_matrix(4, 32, seed=1)
    weight[1] = 0
    weight[2, :8] = 0
    out = quant.quantize_dequantize(weight, 4, 8)
    assert torch.isfinite(out).all()
    assert (out[1] == 0).all() and (out[2, :8] == 0).all()
    codes, scale = quant.quantize_int8(weight)
    assert (codes[1] == 0).all() and scale[1].item() == 0
    assert torch.isfinite(quant.nf4_quantize_dequantize(weight, 8)).all()


def test_keeps_dtype_and_shape():
    weight = quant.gaussian_matrix(8, 64).to(torch.bfloat16)
    out = quant.quantize_dequantize(weight, 4, 16)
    assert out.dtype == torch.bfloat16 and out.shape == weight.shape


def test_int8_codes_and_scales():
    weight = quant.outlier_matrix(32, 64, seed=2)
    codes, scale = quant.quantize_int8(weight)
    assert codes.dtype == torch.int8 and scale.shape == (32, 1)
    assert codes.abs().max() == 127 and codes.min() >= -127
    back = quant.dequantize_int8(codes, scale)
    assert ((back - weight).abs() <= scale / 2 * (1 + 1e-5)).all()
    assert torch.equal(back, quant.quantize_dequantize(weight, 8))


def test_relative_error_definition():
    weight = torch.tensor([[3.0, 4.0]])
    assert quant.relative_error(weight, torch.zeros_like(weight)) == pytest.approx(1.0)
    assert quant.relative_error(weight, torch.tensor([[3.0, 3.0]])) == pytest.approx(1 / 5)


def test_effective_bits():
    assert quant.effective_bits(4, 64) == 4.25
    assert quant.effective_bits(4, None, cols=4096) == pytest.approx(4 + 16 / 4096)
    assert quant.effective_bits_double_quant() == pytest.approx(4 + 8 / 64 + 32 / (64 * 256))
    assert quant.effective_bits_double_quant() - 4 == pytest.approx(0.127, abs=5e-4)


def test_nf4_levels_match_the_published_table():
    np.testing.assert_allclose(quant.nf4_levels().numpy(), PUBLISHED_NF4, atol=2e-7)


def test_nf4_beats_int4_on_normal_weights():
    weight = quant.gaussian_matrix(128, 512, seed=4)
    nf4 = quant.relative_error(weight, quant.nf4_quantize_dequantize(weight, 64))
    int4 = quant.relative_error(weight, quant.quantize_dequantize(weight, 4, 64))
    assert nf4 < int4


def test_nf4_codes_are_nearest_levels():
    weight = quant.gaussian_matrix(4, 64, seed=6)
    codes, scale = quant.quantize_nf4(weight, 16)
    normalised = weight.reshape(4, 4, 16) / scale.unsqueeze(-1)
    nearest = (normalised.unsqueeze(-1) - quant.nf4_levels()).abs().argmin(dim=-1)
    assert torch.equal(codes.reshape(4, 4, 16).long(), nearest)


def test_int8_outlier_decomposition():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 128, generator=generator)
    x[:, [3, 50]] *= 25
    w = quant.gaussian_matrix(64, 128, seed=2)
    exact = x @ w.T
    plain = quant.int8_matmul(x, w)
    mixed, columns = quant.int8_matmul_with_outliers(x, w, threshold=6.0)
    assert sorted(columns.tolist()) == [3, 50]
    assert quant.relative_error(exact, mixed) < quant.relative_error(exact, plain) / 3
    same, none = quant.int8_matmul_with_outliers(x, w, threshold=math.inf)
    assert none.numel() == 0 and torch.allclose(same, plain)


@pytest.mark.parametrize("call, message", [
    (lambda w: quant.quantize_dequantize(w, 4, 48), "group_size 48 does not divide 64 columns"),
    (lambda w: quant.quantize_dequantize(w, 1), "bits must be between 2 and 16"),
    (lambda w: quant.quantize_dequantize(w, 17), "bits must be between 2 and 16"),
    (lambda w: quant.quantize_dequantize(w, 4.0), "whole number"),
    (lambda w: quant.quantize_dequantize(w, 4, 0), "group_size must be positive"),
    (lambda w: quant.quantize_dequantize(w[0], 4), "2-D matrix"),
    (lambda w: quant.quantize_dequantize(w.numpy(), 4), "torch.Tensor"),
    (lambda w: quant.quantize_dequantize(w.long(), 4), "floating-point"),
    (lambda w: quant.quantize_dequantize(w * float("nan"), 4), "NaN"),
    (lambda w: quant.relative_error(w, w[:2]), "shapes differ"),
    (lambda w: quant.relative_error(torch.zeros_like(w), w), "all-zero"),
    (lambda w: quant.int8_matmul_with_outliers(w[:, :10], w), "features"),
])
def test_bad_arguments_say_what_to_do(call, message):
    with pytest.raises(ValueError, match=message):
        call(quant.gaussian_matrix(4, 64))
