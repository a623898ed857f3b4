# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,nbgrader,-all
#     notebook_metadata_filter: -all
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 3: Quantization error and outliers
#
# A weight trained in 16 bits rarely needs 16 bits to be *used*. Store it in 8 or 4 and the model
# takes a half or a quarter of the memory, and because generating text is limited by how fast the
# weights can be read (chapter 1), it also gets faster. The price is rounding error. This chapter
# measures that error and finds out what controls it: the number of bits, how many weights share
# one scale, and, above all, the rare weight that is far larger than its neighbours.
#
# You will:
#
# 1. write symmetric absmax quantization at any bit width, per row and per group (graded);
# 2. measure the error it leaves, and see one outlier wreck a whole row;
# 3. pay for finer scales in bits, and compute what int4 really costs (graded);
# 4. store int8 codes with their scales (graded);
# 5. meet NF4, the 4-bit format of QLoRA, and LLM.int8()'s way of keeping outliers out of int8;
# 6. quantize a real (small) language model and watch its loss;
# 7. write GPTQ, which chooses the codes with calibration data, and measure what it buys (graded);
# 8. write AWQ, which protects the input channels that activations make salient, and see when
#    that pays (graded);
# 9. measure when int4 weights make a layer faster than float32, and why.
#
# Exercises are marked **Your turn**. Each is followed by a check cell: run it, read the hints,
# fix, repeat. Once you have written an exercise, the chapter's figures and readings that use it
# are drawn by your function (each cell says so); before that they show the course's numbers on
# the same inputs, so they work before you have written a line.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p MEASURE_SIZE 2048`).
MEASURE_SIZE = 4096  # the matrix of the bandwidth measurement
EVAL_WINDOWS = 24  # 256-byte windows of held-out text per loss estimate
HARMLESS_LOSS = 0.01  # nats/byte above float32 that the readings below call harmless
INT4_SIZES = (128, 256, 512, 1024, 2048, 4096)  # square layers timed in float32 and int4
GPTQ_BITS = (6, 5, 4, 3, 2)  # bit widths of the GPTQ comparison, groups of 64
CALIBRATION_WINDOWS = 32  # 256-byte windows of training text whose layer inputs make the Hessians
AWQ_BITS = (4, 3)  # bit widths of the AWQ comparison, groups of 64 (GPTQ_BITS must include them)

# %%
import torch

from course import quantization, readings, reference, timing, withheld
from course.device import best_device, describe
from course.plots import quantization as plots

device = best_device()
print(describe(device))
numbers = reference.load("quantization")  # the chapter's reference numbers, data/reference/quantization.json

# %% [markdown]
# ## 1. Scale, round, multiply back
#
# Symmetric absmax quantization of a group of weights $w_1 \dots w_n$ to $b$ bits:
#
# $$ s = \frac{\max_i |w_i|}{q_{\max}}, \qquad q_i = \operatorname{round}\left(\frac{w_i}{s}\right), \qquad \hat w_i = s\, q_i, \qquad q_{\max} = 2^{b-1} - 1 .$$
#
# The integers $q_i$ are what gets stored; $s$ is stored once per group. At 8 bits the codes run
# from -127 to 127, at 4 bits from -7 to 7. (The most negative code, -128 or -8, is given up so
# that the grid is symmetric around zero: one scale serves both signs, and the largest magnitude
# maps onto $+q_{\max}$ or $-q_{\max}$ whichever its sign. Zero would be exact with -128 kept too;
# using it needs a second scale for the negative side, or an offset, which asymmetric schemes
# store.) The largest weight maps exactly onto $\pm q_{\max}$, and every other weight lands
# within **half a step**, $s/2$, of its true value.
#
# Here is one row of four weights at 4 bits, through the course's implementation:

# %%
row = torch.tensor([[0.5, -0.2, 0.1, 0.0]])
codes, scale = quantization.quantize(row, bits=4)
print("scale  ", round(scale.item(), 4), "= 0.5 / 7")
print("codes  ", codes.tolist()[0])
print("back   ", [round(v, 4) for v in quantization.dequantize(codes, scale).tolist()[0]])

# %% [markdown]
# Which weights share a scale is the design choice of every quantization scheme:
#
# * **per tensor**: one scale for the whole matrix, the cheapest to store;
# * **per row** (per output channel): one scale for each row;
# * **per group**: one scale for every `group_size` consecutive weights within a row, typically
#   32 to 128. This is what 4-bit formats use.
#
# ### Your turn: `quantize_dequantize`
#
# Write `quantize_dequantize(weight, bits, group_size=None)`. It takes a `(rows, cols)` matrix and
# returns the matrix after a round trip through `bits`-bit codes, with one scale per row when
# `group_size` is `None` and one per `group_size` consecutive columns otherwise.
#
# * Raise `ValueError` (with a message that says what is wrong) when `group_size` does not divide
#   the number of columns.
# * A group of zeros has scale zero; make sure it comes back as zeros, not NaN.
# * Hint: `weight.reshape(rows, cols // group_size, group_size)` puts each group on the last axis.
#   Then `.abs().amax(dim=-1, keepdim=True)` is one absmax per group, and `torch.round` rounds.
#
# The cell below holds the imports that grading gives your answers. Helper functions and more
# imports may go in your answer cell or in code cells you add: grading runs the cells you added,
# in notebook order, with your answers, but not the chapter's own cells, and without the `course`
# package (the check cell tells you when an answer relies on either). Save the notebook before
# you hand it in: grading reads the saved file, not the kernel.

# %% tags=["grader-setup"] nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

import numpy as np
import torch


# %% nbgrader={"grade": false, "grade_id": "quantize_dequantize", "locked": false, "schema_version": 3, "solution": true}
def quantize_dequantize(weight, bits, group_size=None):
    """Round-trip `weight` (rows, cols) through symmetric `bits`-bit codes, per row or per group."""
    ### BEGIN SOLUTION
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group != 0:
        raise ValueError(f"group_size {group} does not divide {cols} columns")
    levels = 2 ** (bits - 1) - 1
    grouped = weight.reshape(rows, cols // group, group)  # (rows, groups, group)
    scale = grouped.abs().amax(dim=-1, keepdim=True) / levels  # (rows, groups, 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero group: codes are 0 anyway
    codes = torch.round(grouped / scale).clamp(-levels, levels)
    return (codes * scale).reshape(rows, cols)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quantize_dequantize", "locked": true, "points": 8, "schema_version": 3, "solution": false}
from autograder import check

check("quantize_dequantize")
### BEGIN HIDDEN TESTS
check("quantize_dequantize", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Your turn: `relative_error`
#
# To compare schemes we need one number per matrix. Write `relative_error(weight, approx)`, the
# Frobenius norm of the difference divided by the Frobenius norm of the original:
#
# $$ \frac{\lVert W - \hat W \rVert_F}{\lVert W \rVert_F} $$
#
# Return a Python `float` (`.item()` turns a one-element tensor into one).


# %% nbgrader={"grade": false, "grade_id": "relative_error", "locked": false, "schema_version": 3, "solution": true}
def relative_error(weight, approx):
    """||weight - approx|| / ||weight||, Frobenius norms, as a float."""
    ### BEGIN SOLUTION
    return ((weight - approx).norm() / weight.norm()).item()
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_relative_error", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("relative_error")
### BEGIN HIDDEN TESTS
check("relative_error", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Each bit halves the error
#
# Every extra bit doubles the number of codes, so the step, and with it the error, halves. On a
# log scale that is a straight line. Whatever the bit width, no weight is off by more than half a
# step of its own group; the cell after the chart checks it on a whole matrix.

# %%
clean = quantization.gaussian_matrix(256, 512, seed=0)  # N(0, 0.02^2), like the bulk of a trained layer
spiky = quantization.outlier_matrix(256, 512, seed=0)  # the same, with 4 columns 20x larger
sweep = quantization.shown(
    globals(), "the chart", quantization.bits_sweep, clean, course=lambda: quantization.recorded_bits_sweep(0)
)
plots.plot_bits_sweep(sweep)

# %%
for label, worst in quantization.worst_half_steps(0).items():  # the course's quantizer, on `spiky`
    print(f"{label}: worst error = {worst:.3f} half-steps")

# %% [markdown]
# ## 3. One weight can ruin a row
#
# The scale is set by the largest magnitude in its group, so a single large weight stretches the
# step for everyone else. Trained transformers reliably grow such outliers in a few feature
# dimensions. Take 64 ordinary weights (standard deviation 0.15) at int8, then set one of them to
# 4.2:

# %%
example = quantization.outlier_row_example(outlier=4.2)
print(f"int8 step without the outlier: {example['scale_before']:.5f}")
print(f"int8 step with it:             {example['scale_after']:.5f}  ({example['scale_ratio']:.1f}x coarser)")
print(f"error of the outlier itself:   {example['outlier_error']:.5f}  (it defines the scale, so it is exact)")
print(
    f"error of the other 63 weights: {100 * example['rest_error_before']:.2f}% -> {100 * example['rest_error_after']:.2f}%"
)
print(f"share of them rounded to zero: {100 * example['zeroed_before']:.0f}% -> {100 * example['zeroed_after']:.0f}%")
plots.plot_outlier_row(4.2)

# %% [markdown]
# The outlier is stored perfectly and the weights doing the actual work pay for it. The repair is
# to share a scale among fewer weights: an outlier then coarsens only its own group. The matrices
# below are 256 x 512 Gaussian weights, once as they are and once with four columns twenty times
# larger (before your functions are written, the numbers stored in `data/reference/quantization.json`):

# %%
errors_spiky, errors_clean = quantization.shown(
    globals(),
    "these errors",
    quantization.granularity_errors_of,
    spiky,
    clean,
    course=lambda: quantization.stored_granularity_errors(numbers),
)
for key in errors_spiky:
    print(f"{key:10s} with outliers {100 * errors_spiky[key]:5.2f}%   without {100 * errors_clean[key]:5.2f}%")
ratio = errors_spiky["int8_row"] / errors_clean["int8_row"]
print(
    f"\noutlier columns multiply the int8 per-row error by {ratio:.1f} "
    f"(the course's reference: {numbers['outlier_error_ratio_int8_row']['value']:.1f})"
)
print(quantization.granularity_reading(errors_spiky, errors_clean))
plots.plot_granularity_bars(errors_spiky, errors_clean)

# %% [markdown]
# Three things to read off the chart. Eight bits are forgiving: even per row the error stays at a
# few per cent. Four bits are not: per row, the outliers push the error past 40%, and it takes
# groups of 32 to bring it down to about 16%. Without outliers smaller groups still help, but
# less: the two lines printed above the chart say by how much at each width. **Outliers, not the
# bit width alone, set the error.**
#
# ### Try it
#
# Move the sliders. Which group size brings int4 with outliers below 20%? At what outlier
# magnitude does per-row int8 stop being harmless? Set the outlier to 1 (no outliers) and watch
# the bars flatten. The middle panel shows the values row 0 comes back as and how many of its
# weights take each: the ordinary weights crowd into the few values near zero (the outliers take
# the outer ones), and its title gives the share of all weights rounded to 0. Before your
# functions are written, the sliders show the course's views, recorded at outliers x1 and x20:
# write your functions to see the others.

# %%
yours = quantization.your_functions(globals(), "the sliders' chart", "quantize_dequantize", "relative_error")
plots.widget_quantization(**(yours or {}))

# %% [markdown]
# ## 4. Scales are not free
#
# Every group stores its own scale, usually in 16 bits. One fp16 scale per 64 weights adds
# 16 / 64 = 0.25 bits to each weight, so "4-bit" int4 with groups of 64 really costs **4.25 bits**.
# Smaller groups cut the error and raise the bill: groups of 16 cost a whole extra bit per weight.
#
# ### Your turn: `effective_bits`
#
# Write `effective_bits(bits, group_size, scale_bits=16)`: the bits stored per weight, counting
# the scale that each group of `group_size` weights shares.


# %% nbgrader={"grade": false, "grade_id": "effective_bits", "locked": false, "schema_version": 3, "solution": true}
def effective_bits(bits, group_size, scale_bits=16):
    """Bits per weight including the group's share of one `scale_bits`-bit scale."""
    ### BEGIN SOLUTION
    return bits + scale_bits / group_size
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_effective_bits", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("effective_bits")
### BEGIN HIDDEN TESTS
check("effective_bits", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# QLoRA's NF4 keeps its scales (one absmax per block of 64 weights) in **fp32**: 32 / 64 = 0.5 bits
# per weight, so 4.5 bits in all (chapter 8 measures bitsandbytes' NF4 layers at 0.5625 bytes per
# weight, the same 4.5 bits). QLoRA then adds **double quantization**: those fp32 constants are
# themselves quantized to 8 bits, with one fp32 constant for every 256 of them. The overhead drops
# from 0.5 to 8/64 + 32/(64 x 256) = 0.127 bits per weight, below even fp16 scales' 0.25:

# %%
course_bits = quantization.course_answer("effective_bits")  # the course's: yours is checked above
for group in (128, 64, 32, 16):
    print(f"int4, fp16 scale per {group:3d} weights: {course_bits(4, group):.3f} bits")
fp32_constants = course_bits(4, 64, scale_bits=32)
double = quantization.effective_bits_double_quant()
print(f"NF4, fp32 absmax per  64 weights: {fp32_constants:.3f} bits (QLoRA without double quantization)")
print(f"NF4, double-quantized constants:  {double:.3f} bits (saves {fp32_constants - double:.3f} bits per weight)")
assert course_bits(4, 64) == numbers["int4_g64_fp16_bits"]["value"] == 4.25

# %% [markdown]
# ## 5. Storing int8: codes and scales
#
# A real format keeps the integer codes, not the round-tripped floats: one `torch.int8` per
# weight and one scale per row. Dequantizing multiplies them back.
#
# ### Your turn: `quantize_int8` and `dequantize_int8`
#
# * `quantize_int8(weight)` returns `(codes, scale)`: `codes` of dtype `torch.int8` with values in
#   [-127, 127], and `scale` of shape `(rows, 1)`, one per row.
# * `dequantize_int8(codes, scale)` returns the matrix `codes * scale`, as floats.
#
# Round before you convert: `.to(torch.int8)` on its own truncates.


# %% nbgrader={"grade": false, "grade_id": "int8", "locked": false, "schema_version": 3, "solution": true}
def quantize_int8(weight):
    """Per-row symmetric int8: (codes as torch.int8, scale of shape (rows, 1))."""
    ### BEGIN SOLUTION
    scale = weight.abs().amax(dim=1, keepdim=True) / 127  # (rows, 1)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(weight / safe).clamp(-127, 127).to(torch.int8)
    return codes, scale
    ### END SOLUTION


def dequantize_int8(codes, scale):
    """int8 codes times their row's scale, as float32."""
    ### BEGIN SOLUTION
    return codes.float() * scale.float()
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_int8", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("int8")
### BEGIN HIDDEN TESTS
check("int8", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# What the int8 copy of a 1024 x 4096 block of weights weighs, against the float formats:

# %%
layer = quantization.gaussian_matrix(1024, 4096, seed=1)
stored = layer.numel() * 1 + layer.shape[0] * 2  # one byte per code, one fp16 scale per row
for name, n_bytes in (("fp32", layer.numel() * 4), ("bf16", layer.numel() * 2), ("int8 + fp16 scales", stored)):
    print(f"{name:18s} {n_bytes / 2**20:6.2f} MiB per 1024 x 4096 block")
int8_error = quantization.shown(
    globals(), "this error", quantization.int8_error, layer, course=lambda: quantization.recorded_int8_error(1)
)
print(f"relative error of the int8 copy: {100 * int8_error:.2f}%")

# %% [markdown]
# ## 6. NF4: levels where the weights are
#
# Integer codes are evenly spaced, but trained weights are roughly normally distributed: most of
# them sit near zero, where evenly spaced levels are too sparse, and few sit near the absmax,
# where levels are wasted. **NormalFloat-4** (QLoRA) places its 16 levels at quantiles of a
# normal distribution instead, with an exact zero, so each level is used about equally often.
# `course.quantization.nf4_levels()` builds them from the normal quantile function; the tests compare
# them with the table that bitsandbytes ships.

# %%
plots.plot_nf4_levels()

# %%
errors = quantization.shown(  # before yours are written, as stored in data/reference/quantization.json
    globals(),
    "these errors",
    quantization.nf4_against_int4,
    clean,
    course=lambda: quantization.stored_nf4_against_int4(numbers),
)
nf4_error, int4_error = errors["nf4"], errors["int4"]
print(f"normal weights, groups of 64: int4 {100 * int4_error:.2f}%   NF4 {100 * nf4_error:.2f}%")
print(f"NF4 uses 16 levels to int4's 15, and places them better: {100 * (1 - nf4_error / int4_error):.0f}% less error")

# %% [markdown]
# ## 7. LLM.int8(): keep the outliers out of int8
#
# In large models the outliers are in the *activations* too: a handful of feature dimensions carry
# values tens of times larger than the rest, in almost every token. LLM.int8() (Dettmers et al.,
# 2022) splits the matrix product: the few input features where some |x| reaches a threshold
# (6.0 in the paper) are multiplied in 16 bits, everything else in int8. Over 99.9% of the values
# still go through int8. Here, 64 tokens of 512 features go through a 256 x 512 layer, and 3 of
# the features carry outliers of about 20 in every token (`quantization.llm_int8_example`):

# %%
example = quantization.shown(
    globals(), "these errors", quantization.llm_int8_example, course=quantization.recorded_llm_int8_example
)
print(f"int8 everywhere:           {100 * example['int8']:.2f}% error")
print(
    f"outlier features in float: {100 * example['mixed']:.2f}% error "
    f"({example['kept']} of {example['features']} features kept in float)"
)

# %% [markdown]
# ## 8. The course model, quantized
#
# Errors in single matrices are one thing; what matters is the model's output. The course's
# target model (4.3M parameters, a Llama-style decoder trained on Shakespeare's plays; its card is
# `data/models/target/card.json`) goes through the same round trip in every linear layer, at
# several bit widths and granularities. Its loss on held-out plays says what the rounding
# costs. (A quick estimate on part of the held-out text.)

# %%
from tqdm.auto import tqdm

from course import checkpoints, corpus, evaluation

target = checkpoints.load("target")
held_out = corpus.tokens("validation")


def held_out_loss(model):
    return evaluation.text_loss(model, held_out, max_windows=EVAL_WINDOWS)


print(timing.pin_threads(lambda: evaluation.text_loss(target, held_out, max_windows=4), device))
baseline = held_out_loss(target)
losses = quantization.shown(
    globals(),
    "the integer rows and the chart",
    quantization.model_losses,
    target,
    held_out,
    EVAL_WINDOWS,
    progress=lambda settings: tqdm(settings, desc="quantizing the model"),
    course=lambda: quantization.recorded_model_losses(EVAL_WINDOWS),
)
nf4 = held_out_loss(quantization.quantize_model(target, "nf4", 64))  # NF4 is the course's: not an exercise
print(f"float32: {baseline:.3f} nats/byte (perplexity {evaluation.perplexity(baseline):.2f})")
for label, by_bits in losses.items():
    print(f"{label:9s} " + "  ".join(f"int{b}: {loss:.3f}" for b, loss in sorted(by_bits.items(), reverse=True)))
print(f"NF4, group 64: {nf4:.3f}   int4, group 32: {losses['group 32'][4]:.3f}")
for label, by_bits in losses.items():
    harmless = readings.holds_from(list(by_bits), [loss - baseline <= HARMLESS_LOSS for loss in by_bits.values()])
    print(
        f"{label:9s} stays within {HARMLESS_LOSS} nats/byte of float32 "
        + (f"down to {harmless} bits" if harmless is not None else "at none of the widths tried")
        + f"; at 2 bits it loses {by_bits[2] - baseline:.2f}"
    )
plots.plot_model_bits(losses, baseline)

# %% [markdown]
# Read the chart from the right, with the printed lines beside it. Every bit removed doubles the
# rounding step, so the loss can only stay flat while the rounding error is small next to what
# the model tolerates, and then climbs, faster and faster. At 2 bits the codes are -1, 0 and +1,
# and finer groups are what is left of the model. This model is small and was trained briefly,
# so its weights have few extreme outliers. Large models grow outlier features (section 7), and
# there the per-row damage of section 3 shows up at 8 and 4 bits already: the reason behind
# groups, NF4 and LLM.int8().

# %% [markdown]
# ## 9. GPTQ: rounding that knows the inputs
#
# Round-to-nearest treats every weight alone. But a layer is judged by its outputs, $XW^\top$ over
# the inputs $X$ it really sees, and inputs are correlated: when one weight is rounded up, its
# neighbours in the row can move a little to cancel the error on the outputs. **GPTQ** (Frantar et
# al., 2022) does exactly that, one column at a time. It minimises the output error
#
# $$ \lVert X W^\top - X Q^\top \rVert^2 \;\propto\; \operatorname{tr}\big((W - Q)\, H\, (W - Q)^\top\big), \qquad H = \tfrac{1}{n} X^\top X, $$
#
# with the Hessian $H$ measured on a little **calibration** text. Sweep the columns $j = 0, 1, \dots$:
#
# 1. round column $j$ to its codes, $q_j = \operatorname{round}(w_j / s)$, as before;
# 2. spread its error over the columns not yet quantized:
#    $w_{j+1:} \leftarrow w_{j+1:} - \dfrac{w_j - s q_j}{U_{jj}}\, U_{j,\,j+1:}$,
#
# where $U$ is the upper Cholesky factor of $H^{-1}$ ($H^{-1} = U^\top U$): row $j$ of $U$ is the
# optimal correction once the columns before $j$ are fixed, so one factorisation serves the whole
# sweep. Two details make it work in practice: $H$ is **damped**, $H + \lambda I$ with $\lambda$ a
# small share (1%) of the mean of its diagonal, because a Hessian from few samples is singular;
# and with groups, each group's scale is taken from the weights **as the sweep has left them** when
# it reaches the group's first column, not fixed beforehand.
#
# ### Your turn: `gptq_quantize`
#
# Write `gptq_quantize(weight, hessian, bits, group_size=None, damping=0.01)`. It returns
# `(codes, scale)`: integer-valued codes of shape `(rows, cols)` in $[-q_{\max}, q_{\max}]$, and the
# scales, shape `(rows, cols // group_size)` (one column per row when `group_size` is `None`),
# symmetric absmax as in section 1.
#
# * Work on a copy of `weight` (in its own dtype): the sweep changes it.
# * `hessian` is $H$, `(cols, cols)`. Add `damping * H.diagonal().mean()` to its diagonal, then
#   take $U$, the upper-triangular Cholesky factor of $H^{-1}$ ($H^{-1} = U^\top U$; the tools are
#   `torch.linalg.cholesky`, `torch.cholesky_inverse` and `upper=True`).
# * At the first column of each group, the scale is the absmax of that group's columns of the
#   updated copy over $q_{\max}$ (an all-zero group: scale 0, codes 0, no NaN).
# * Raise `ValueError` when `group_size` does not divide the columns.
#
# An identity Hessian (inputs uncorrelated, all alike) leaves nothing to compensate: the answer
# must then be round-to-nearest's codes. The check compares your codes with the course's exactly on
# float64 inputs.


# %% nbgrader={"grade": false, "grade_id": "gptq_quantize", "locked": false, "schema_version": 3, "solution": true}
def gptq_quantize(weight, hessian, bits, group_size=None, damping=0.01):
    """GPTQ's codes and scales for `weight` (rows, cols), given H = X^T X / n of its inputs."""
    ### BEGIN SOLUTION
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group != 0:
        raise ValueError(f"group_size {group} does not divide {cols} columns")
    levels = 2 ** (bits - 1) - 1
    w = weight.clone()
    h = hessian.to(w.dtype).clone()
    h += damping * h.diagonal().mean() * torch.eye(cols, dtype=h.dtype)
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    codes = torch.zeros_like(w)
    scale = torch.zeros(rows, cols // group, dtype=w.dtype)
    for j in range(cols):
        if j % group == 0:
            scale[:, j // group] = w[:, j : j + group].abs().amax(dim=1) / levels
            step = torch.where(scale[:, j // group] > 0, scale[:, j // group], torch.ones_like(scale[:, 0]))
        codes[:, j] = torch.round(w[:, j] / step).clamp(-levels, levels)
        error = (w[:, j] - codes[:, j] * step) / u[j, j]
        w[:, j + 1 :] -= error[:, None] * u[j, j + 1 :][None, :]
    return codes, scale
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_gptq_quantize", "locked": true, "points": 11, "schema_version": 3, "solution": false}
check("gptq_quantize")
### BEGIN HIDDEN TESTS
check("gptq_quantize", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# On one layer of the course model, with its Hessian measured on training text: the output error
# your GPTQ leaves (the course's, before yours is written), as a share of round-to-nearest's, and
# how far each moved the weights.

# %%
train_text = corpus.tokens("train")
statistics = quantization.calibration_statistics(target, train_text, windows=CALIBRATION_WINDOWS)
hessians = statistics["hessian"]  # name -> H = X^T X / n of the layer's inputs
name = "blocks.0.mlp.down_proj"
layer0 = quantization.shown(
    globals(),
    "these errors",
    quantization.gptq_layer,
    target.get_submodule(name).weight.detach(),
    hessians[name],
    course=lambda: quantization.recorded_gptq_layer(name, CALIBRATION_WINDOWS),
)
print(
    f"{name}, 4 bits, groups of 64: GPTQ leaves {layer0['gptq'] / layer0['rtn']:.2f} of round-to-nearest's output error"
)
further = layer0["gptq_weights"] > layer0["rtn_weights"]
print(
    f"its weights are {'further from' if further else 'closer to'} the originals (relative error "
    f"{layer0['gptq_weights']:.4f} against {layer0['rtn_weights']:.4f}): GPTQ does not aim at the weights, "
    "it aims at the outputs"
)

# %% [markdown]
# Now the whole model: every linear layer through GPTQ with its own Hessian, at each bit width with
# groups of 64, against round-to-nearest, on held-out plays, through your `quantize_dequantize` and
# `gptq_quantize` (before they are written, the losses stored in `data/reference/quantization.json`).
# (To stay quick, the Hessians come from one pass of the float model over CALIBRATION_WINDOWS
# windows of 256 bytes of training text, not layer by layer through the already quantized model as
# in the paper.)

# %%
by_method = quantization.shown(
    globals(),
    "these losses and the chart",
    quantization.gptq_against_rtn,
    target,
    hessians,
    held_out,
    GPTQ_BITS,
    64,
    EVAL_WINDOWS,
    course=lambda: quantization.stored_gptq_losses(numbers, GPTQ_BITS),
)
for bits in GPTQ_BITS:
    rtn_gap = by_method["round to nearest"][bits] - baseline
    gptq_gap = by_method["GPTQ"][bits] - baseline
    share = (
        f"; GPTQ removes {min(1 - gptq_gap / rtn_gap, 1):.0%} of the increase"
        if rtn_gap > quantization.LOSS_NOISE
        else f"; both within {quantization.LOSS_NOISE} of float32"
    )
    print(f"{bits} bits, groups of 64: round to nearest {rtn_gap:+.4f}, GPTQ {gptq_gap:+.4f} nats/byte{share}")
print(quantization.gptq_reading(baseline, by_method, HARMLESS_LOSS))
plots.widget_gptq(baseline, by_method)

# %% [markdown]
# ## 10. AWQ: protect the channels the activations make salient
#
# GPTQ lets correlated inputs cancel each other's rounding errors. **AWQ** (activation-aware weight
# quantization, Lin et al., 2023) starts from another observation: in large models a few input
# channels carry activations many times larger than the rest, and the weights that multiply them
# matter most to the outputs. Round those weights more finely and the outputs improve, without
# storing a single extra bit:
#
# $$ \hat W = Q\big(W \operatorname{diag}(s)\big)\, \operatorname{diag}(s)^{-1}, \qquad s_j = \overline{|x_j|}^{\,\alpha} . $$
#
# Each input column $j$ is multiplied by $s_j$ before rounding and divided after. A salient column
# scaled up gets a finer step relative to its own size (the group's absmax may grow and coarsen
# the others: the trade-off). Served, the stored codes are those of $W\operatorname{diag}(s)$ and
# $1/s$ is folded into whatever produces the input (the norm's weight before q, k, v or gate and
# up; up_proj's rows before down_proj), so the product costs nothing extra. The exponent $\alpha$
# is searched on calibration data: 20 values from 0 (all $s_j = 1$: round to nearest) to 0.95,
# keeping the one with the least output error $\operatorname{tr}((W-\hat W)H(W-\hat W)^\top)$, the
# same measure as GPTQ's. Layers that read the same input share one $s$, so it can be folded once.
#
# ### Your turn: `awq_quantize`
#
# Write `awq_quantize(weight, hessian, mean_abs, bits, group_size=None, grid=20)`. `weight` is a
# `(rows, cols)` layer, `hessian` its $H$ and `mean_abs` the mean $|x|$ of each of its `cols` input
# channels, both from calibration. For each exponent $\alpha$ in $0, 1/\text{grid}, \dots,
# (\text{grid}-1)/\text{grid}$:
#
# * `s = mean_abs ** alpha`, at least `1e-4` (`.clamp(min=1e-4)`: a channel that never fires has
#   mean $|x|$ 0), divided by `(s.max() * s.min()).sqrt()` so that the scales sit around 1 (this
#   step changes nothing in exact arithmetic: a group's absmax scale follows its weights);
# * `approx = Q(weight * s) / s`, with `Q` section 1's round trip at `bits` bits and `group_size`;
# * its output error $\operatorname{tr}((W-\hat W)H(W-\hat W)^\top)$.
#
# Return `(alpha, approx, errors)`: the exponent with the least error (the first, if several tie)
# as a float, its `approx`, and the `grid` errors in the order tried (a list or a tensor). Raise
# `ValueError` when `group_size` does not divide the columns.


# %% nbgrader={"grade": false, "grade_id": "awq_quantize", "locked": false, "schema_version": 3, "solution": true}
def awq_quantize(weight, hessian, mean_abs, bits, group_size=None, grid=20):
    """AWQ for one layer: the best alpha of the grid, Q(W * s) / s with s = mean|x| ** alpha, every alpha's error."""
    ### BEGIN SOLUTION
    rows, cols = weight.shape
    group = cols if group_size is None else group_size
    if cols % group != 0:
        raise ValueError(f"group_size {group} does not divide {cols} columns")
    levels = 2 ** (bits - 1) - 1

    def round_trip(w):
        grouped = w.reshape(rows, cols // group, group)
        scale = grouped.abs().amax(dim=-1, keepdim=True) / levels
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        return (torch.round(grouped / scale).clamp(-levels, levels) * scale).reshape(rows, cols)

    best, errors = None, []
    for step in range(grid):
        alpha = step / grid
        s = mean_abs.to(weight.dtype).pow(alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        approx = round_trip(weight * s) / s
        delta = weight - approx
        errors.append(torch.trace(delta @ hessian.to(weight.dtype) @ delta.T).item())
        if best is None or errors[-1] < best[0]:
            best = (errors[-1], alpha, approx)
    return best[1], best[2], errors
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_awq_quantize", "locked": true, "points": 6, "schema_version": 3, "solution": false}
check("awq_quantize")
### BEGIN HIDDEN TESTS
check("awq_quantize", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
#
# First a layer like those of large models: 256 inputs, 3 of them 20 times larger in every token
# (the outliers of section 7), uncorrelated. Then two sets of the course model's layers, at 3 bits
# with groups of 64, with the same calibration statistics as GPTQ's (the mean $|x|$ of each input
# channel came from the same pass as the Hessians). These studies and the model's AWQ losses below
# are the course's AWQ and GPTQ (`quantization.awq_layer_study`, `awq_against_rtn`), not yours,
# with the numbers the course recorded:

# %%
layer_studies = quantization.recorded_awq_studies(3, CALIBRATION_WINDOWS)
for label, study in layer_studies.items():
    print(
        f"{label:28s} most active channel {quantization.salience(study['mean_abs']):5.1f}x the median; "
        f"AWQ (alpha {study['alpha']:.2f}) leaves {study['errors'][study['alpha']]:.2f} of round-to-nearest's "
        f"output error, GPTQ {study['gptq']:.2f}"
    )

# %% [markdown]
# Now every layer of the course model (o_proj is rounded to nearest: its inputs come from eight
# query heads and $1/s$ cannot be folded into v_proj's two, which AWQ's implementations skip too),
# at 4 and 3 bits with groups of 64, on held-out plays, beside GPTQ and round to nearest:

# %%
awq_measured = quantization.recorded_awq_losses(AWQ_BITS, EVAL_WINDOWS, CALIBRATION_WINDOWS)
awq_losses = {
    "round to nearest": {bits: by_method["round to nearest"][bits] for bits in AWQ_BITS},
    "AWQ": {bits: measured["loss"] for bits, measured in awq_measured.items()},
    "GPTQ": {bits: by_method["GPTQ"][bits] for bits in AWQ_BITS},
}
for bits in AWQ_BITS:
    alphas = list(awq_measured[bits]["alphas"].values())
    print(
        f"{bits} bits, groups of 64: "
        + ", ".join(f"{method} {awq_losses[method][bits] - baseline:+.4f}" for method in awq_losses)
        + f" nats/byte; AWQ's alphas {min(alphas):.2f} to {max(alphas):.2f}"
    )
saliences = [quantization.salience(m) for name, m in statistics["mean_abs"].items() if not name.endswith("o_proj")]
print(quantization.awq_reading(baseline, awq_losses, saliences))
plots.plot_awq(layer_studies, baseline, awq_losses)

# %% [markdown]
# The left panel is AWQ's premise, and the printed lines say how far each layer meets it. Where a
# few channels stand far above the rest (the layer with three outlier channels), scaling them is
# cheap insurance: their weights get most of the resolution, and AWQ removes most of the output
# error, more than GPTQ, which has no correlations to exploit among independent inputs. The
# course model's layers have correlated inputs, which GPTQ uses: even in its most outlier-heavy
# layer (blocks.5's down_proj, printed above), GPTQ removes more of the output error than AWQ. A
# lower output error on the calibration text need not carry over to the held-out loss, least of
# all at 4 bits, where round to nearest's damage is already small: AWQ's measure is one layer's
# outputs, not the model's loss, and the reading above says which way it went. The two ideas combine (AWQ's scales, then
# GPTQ's rounding); chapter 8 finds the activation outliers of a pretrained model, where AWQ's
# premise holds.

# %% [markdown]
# ## 11. Measured on your machine: fewer bytes to read
#
# Generating a token reads every weight once (chapter 1), so the time of a matrix-vector product
# with a big matrix is set by the bytes of the matrix. Here is one on this machine in float32 and
# in bfloat16, half the bytes:

# %%
print(timing.pin_threads(lambda: timing.matvec_bandwidth(MEASURE_SIZE, MEASURE_SIZE, torch.float32, device, 3), device))
rows = []
for dtype in (torch.float32, torch.bfloat16):
    result = timing.matvec_bandwidth(MEASURE_SIZE, MEASURE_SIZE, dtype, device)
    rows.append(result)
    print(
        f"{result['dtype']:9s} {result['bytes'] / 2**20:6.1f} MiB  {1e3 * result['seconds']:7.3f} ms  "
        f"{result['gb_per_s']:6.1f} GB/s effective"
    )
ratio = rows[1]["seconds"] / rows[0]["seconds"]
print(f"bfloat16 / float32 time: {ratio:.2f} (0.50 if reading the bytes were all that counted)")
print(
    readings.fewer_bytes(
        rows[0]["seconds"], rows[1]["seconds"], rows[1]["bytes"] / rows[0]["bytes"], "bfloat16", "float32"
    )
)

# %% [markdown]
# Whether half the bytes give half the time depends on the kernel, and the printed line says
# what happens on this machine. Half the bytes explain at most half the time: a larger speed-up
# comes from somewhere else (such as the 32 MiB bfloat16 matrix fitting a cache that the 64 MiB float32
# one overflows, or another program slowing one of the two runs), and the line says so. On a GPU the bfloat16 product takes about half the time: the
# weights are read at full bandwidth whatever their type. On many CPUs it does *not*, because
# torch has no kernel there that reads bfloat16 as fast as it computes with it: the bytes shrink
# but the arithmetic around them gets slower. Lower precision pays off only when a kernel reads
# the small format directly, which is what the libraries below provide.
#
# ## 12. Int4 that pays: a kernel that reads the codes
#
# The course's int4 layer (`course.kernels.int4.FusedInt4`) stores a layer the way int4 formats do:
# the codes packed two to a byte, one fp16 scale per group of 64 columns (handed to the kernel as
# the bfloat16 scale and zero pair it reads). Its forward does not rebuild a float32 matrix:
# it calls torch's fused int4 product (`torch.ops.aten._weight_int4pack_mm_for_cpu` on the CPU,
# `_weight_int4pack_mm` on CUDA, the kernel torchao and gpt-fast use), which reads the four-bit
# codes directly and multiplies in bfloat16. The dequantize-then-multiply path stays beside it as
# the reference it is tested against; layers the kernel cannot take (group sizes other than 32 to
# 256, odd widths) go through the reference, and the layer says why. (Its codes are packed by
# chapter 9's exercise `pack_int4`, and chapter 9's `Int4Linear` is this layer written by you. A
# course given for credit leaves the packing out until then: there the next two cells show what
# your instructor's machine recorded, and the timing cell says so.) First, the two paths agree to bfloat16's
# rounding, on the CPU, where torch always has the kernel:

# %%
from course.kernels import int4

agreed = int4.agreement(1024, 64, "cpu")  # a 1024 x 1024 layer of Gaussian weights, groups of 64
why = f" ({agreed['why']})" if agreed["why"] else ""
print(f"{agreed['layer']}: the path taken is {agreed['path']!r}{why}")
print(
    f"fused against dequantize-then-multiply: relative difference {agreed['difference']:.1e} (bound {int4.TOLERANCE:g})"
)
assert agreed["difference"] < int4.TOLERANCE

# %% [markdown]
# Now the speed-up a token sees through one layer, float32 against int4, at sizes from a layer
# that fits in any cache to one of 64 MiB. The threads are chosen the course's way (one thread
# against all usable ones on the largest product), and each line prints the spread of its repeats:
# a large spread means other work shared the machine.

# %% tags=["measures"]
if withheld.in_learners_copy():  # the course's int4 layer is left out: what was measured when the copy was made
    print(
        "This copy of the course leaves out how the int4 layer packs its codes (chapter 9's exercise `pack_int4`), "
        "so this machine's int4 products are not timed here: below are those measured when the copy was made "
        "(chapter 9 times yours)."
    )
else:
    print(int4.pin_threads(INT4_SIZES[-1], 64))  # timing.pin_threads on the largest int4 product
measured = int4.speedups(INT4_SIZES, 64)  # one token through each size, on this machine
print(f"measured on {measured['machine']}")
for r in measured["rows"]:
    print(
        f"{r['shape'][0]:5d} x {r['shape'][1]:<5d} {r['fp32_bytes'] / 2**20:6.2f} MiB  float32 {1e6 * r['fp32_seconds']:8.1f} us "
        f"(spread {r['fp32_spread']:.0%})  int4 {1e6 * r['int4_seconds']:8.1f} us (spread {r['int4_spread']:.0%})  "
        f"speed-up {r['speedup']:5.2f}x  bound {r['bound']:.2f}x"
    )
print(int4.crossover_reading(measured["rows"]))
plots.plot_int4_speedup(measured["rows"], measured["machine"])

# %% [markdown]
# Chapter 1's roofline explains the shape. A token's product with a layer does two FLOPs per
# weight, far too few to keep the arithmetic busy: its time is the time to bring the weight in,
# bytes over bandwidth, plus a fixed cost per call. A large layer comes from main memory, and
# there the int4 layer reads about a seventh of float32's bytes (the dashed line: four bits a
# weight plus a bfloat16 scale and zero per 64), so the speed-up climbs toward that bound (a reading
# above it means float32 lost more than bytes there: a cache or noise, and the reading says so). A small
# layer sits in the processor's caches, whose bandwidth is many times that of memory: float32 is
# already fast there, and the kernel's own work (unpacking the nibbles, rounding the activations
# to bfloat16, the scales) and its fixed cost per call are what remain. Fewer bytes pay where the
# bytes are the bottleneck; the printed reading says where that starts on the machine measured.
# Chapter 9's capstone stores its target's layers this way, and chapter 8 decodes a pretrained
# model through them.
#
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 3](08_in_practice.ipynb#chapter-3) quantizes SmolLM2-135M with these functions, checks NF4 code for code against bitsandbytes, and finds its activation outliers.
#
# | what you built | what people use |
# | --- | --- |
# | `quantize_dequantize`, groups | **torchao** `quantize_(model, Int4WeightOnlyConfig(group_size=64))`, `Int8WeightOnlyConfig()` |
# | NF4, double quantization | **bitsandbytes** `quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)`; in transformers `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)` |
# | outlier decomposition | **bitsandbytes** `LLM.int8()` (`load_in_8bit=True`, threshold 6.0) |
# | `gptq_quantize`, calibration Hessians | **GPTQModel**, **llmcompressor** (`GPTQModifier`): the same sweep, in blocks of columns, with act-order and sequential calibration layer by layer |
# | `awq_model`, salient channels | **llmcompressor** (`AWQModifier`), **AutoAWQ**: the same search of alpha, with each block's whole output as the measure and a search of each group's clipping range |
# | `Int4Linear` (fused int4 product) | **torchao** `Int4WeightOnlyConfig` and **gpt-fast** call the same `_weight_int4pack_mm` kernels |
#
# Rule of thumb from the papers: 8-bit weights are nearly free; 4-bit weights need groups and
# often a calibrated method; below 4 bits quality falls quickly. Always evaluate the quantized
# model on the task you care about, not only on an average.
#
# ## Check yourself
#
# 1. Why does symmetric int8 use codes -127..127 and not -128..127?
# 2. A row's largest weight doubles. What happens to the error of the other weights, and why?
# 3. int4 with an fp16 scale per 32 weights: how many bits per weight? Per 128?
# 4. Why do outliers hurt per-row quantization far more than per-group?
# 5. Why does NF4 beat int4 on normally distributed weights, with the same 4 bits?
#
# <details><summary>Answers</summary>
#
# 1. So that the codes are symmetric around an exact zero and the absmax maps to +-127 whichever
#    its sign; -128 would need a second scale or an asymmetric range.
# 2. The scale doubles, so every other weight's step doubles and its error (up to half a step)
#    roughly doubles; the largest weight itself stays exact.
# 3. 4 + 16/32 = 4.5 bits; 4 + 16/128 = 4.125 bits.
# 4. A per-row scale is stretched by the row's outlier for every weight in the row; a group's
#    scale only for the few weights in the outlier's own group.
# 5. Its levels sit at the quantiles of a normal distribution, dense near zero where most weights
#    are; int4's evenly spaced levels waste resolution in the tails.
#
# </details>
#
# ## Quiz
#
# Choose an answer to each question, then put your choices in `quiz_answers()` below for points
# (the line under the quiz shows them as code). In the course's own repository the quiz says at once
# whether each choice is right, and why; in a copy given for credit it records your choices, and
# the answers with their explanations come in the feedback on your graded notebook.

# %%
from course import quiz

quiz.show("quantization")


# %% nbgrader={"grade": false, "grade_id": "quiz_quantization", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "b", 2: "d", 3: "c", 4: "c", 5: "d", 6: "a", 7: "a", 8: "b"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_quantization", "locked": true, "points": 8, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_quantization")
### BEGIN HIDDEN TESTS
check("quiz_quantization", hidden=True)
### END HIDDEN TESTS
