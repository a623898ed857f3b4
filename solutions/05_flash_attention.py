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
# # Chapter 5: FlashAttention's online softmax
#
# Attention compares every query with every key: for a sequence of N tokens, an N x N matrix of
# scores per head. Standard implementations write that matrix to the GPU's main memory, read it
# back for the softmax, write the probabilities, and read them again to multiply by the values.
# At long sequence lengths that traffic, not the arithmetic, sets the time, and the matrix itself
# can exhaust memory. FlashAttention (Dao et al., 2022) computes **exactly** the same result one
# tile at a time in fast on-chip memory and never stores the matrix. The idea that makes it
# possible is the **online softmax**.
#
# You will:
#
# 1. write the online softmax's update for one block of keys (graded);
# 2. use it for blockwise attention, exact for every block size (graded);
# 3. count the memory traffic of standard and tiled attention;
# 4. meet the same algorithm as a Triton GPU kernel, and time the versions on this machine.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-y "LENGTHS: [256, 512, 1024, 2048]"`).
LENGTHS = [128, 256, 512, 1024]  # sequence lengths of the timing comparison
HEADS, HEAD_DIM = 4, 64

# %%
import math

import torch

from course import flash_attention, readings, timing, withheld
from course.device import best_device, describe, triton_available
from course.plots import flash_attention as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. A softmax that does not need to see everything first
#
# The softmax of a row of scores $s_1 \dots s_n$ needs the maximum (for numerical safety: $e^{s}$
# overflows float32 above $s \approx 88$) and the sum of exponentials, both over the whole row.
# Tiling seems impossible: each block of keys sees only part of the row.
#
# The fix is to keep running values and **correct** them when a block brings news. After the keys
# seen so far, keep the maximum $m$, the normaliser $\ell = \sum_j e^{s_j - m}$ and the unnormalised
# output $o = \sum_j e^{s_j - m} v_j$. A new block of scores $s_j$ with values $v_j$ updates them:
#
# $$ m_{new} = \max\left(m, \max_j s_j\right), \qquad
#    \ell_{new} = \ell\, e^{m - m_{new}} + \sum_j e^{s_j - m_{new}}, \qquad
#    o_{new} = o\, e^{m - m_{new}} + \sum_j e^{s_j - m_{new}} v_j $$
#
# The factor $e^{m - m_{new}} \le 1$ rescales everything accumulated so far to the new maximum.
# After the last block, $o / \ell$ is exactly the softmax-weighted sum of the values.
#
# ### Your turn: `online_softmax_update`
#
# Write `online_softmax_update(m, l, o, scores, v)` for a set of queries at once: `m` and `l` of
# shape `(n_q, 1)`, `o` of shape `(n_q, D)`, `scores` `(n_q, block)` (already scaled by
# $1/\sqrt{D}$), `v` `(block, D)`. Return the new `(m, l, o)`.
#
# Before the first block, `m` is `-inf` and `l` and `o` are zero. Then $e^{m - m_{new}}$ is
# $e^{-\infty} = 0$, which is right, as long as $m_{new}$ is finite.
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


# %% nbgrader={"grade": false, "grade_id": "online_softmax_update", "locked": false, "schema_version": 3, "solution": true}
def online_softmax_update(m, l, o, scores, v):
    """Fold one block of scores (n_q, block) and values (block, D) into the running (m, l, o)."""
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    correction = torch.exp(m - m_new)
    p = torch.exp(scores - m_new)
    return m_new, l * correction + p.sum(dim=-1, keepdim=True), o * correction + p @ v
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_online_softmax_update", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from autograder import check

check("online_softmax_update")
### BEGIN HIDDEN TESTS
check("online_softmax_update", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Try it
#
# Step through one query's row of 48 scores, eight keys at a time. The running maximum jumps when
# the large score arrives; at that moment everything accumulated before is scaled down, and the
# normalised output (right) moves towards the exact answer, reaching it at the last block. Set
# the block size to 48 for ordinary softmax, or to 1 for a fully streaming one. Once your
# `online_softmax_update` is written, it computes the running values drawn here.

# %%
plots.widget_online_softmax(flash_attention.yours(globals(), "online_softmax_update", "the chart"))

# %% [markdown]
# ## 2. Blockwise attention
#
# With the update, attention needs only one block of keys and values at a time:
#
# ```
# m = -inf, l = 0, o = 0                       (one per query)
# for each block of keys and values:
#     scores = q @ k_block.T / sqrt(D)
#     m, l, o = online_softmax_update(m, l, o, scores, v_block)
# return o / l
# ```
#
# ### Your turn: `blockwise_attention`
#
# Write `blockwise_attention(q, k, v, block)` for `q` of shape `(n_q, D)` and `k`, `v` of shape
# `(n_k, D)`, visiting `block` keys at a time with the online softmax (the last block may be
# shorter), without ever forming the full `(n_q, n_k)` score matrix. A loop over queries (one at a
# time, or a block of them) with an ordinary softmax over all keys saves memory too, but it is not
# this algorithm: the checks record what your function creates and fail any scores of a query
# against all keys at once. It must equal ordinary softmax attention for every block size, and
# survive large scores.


# %% nbgrader={"grade": false, "grade_id": "blockwise_attention", "locked": false, "schema_version": 3, "solution": true}
def blockwise_attention(q, k, v, block):
    """Exact softmax attention, one block of `block` keys at a time."""
    ### BEGIN SOLUTION
    m = torch.full((q.shape[0], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros(q.shape[0], 1, dtype=q.dtype, device=q.device)
    o = torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[0], block):
        scores = q @ k[start : start + block].T / math.sqrt(q.shape[-1])
        m, l, o = online_softmax_update(m, l, o, scores, v[start : start + block])
    return o / l
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_blockwise_attention", "locked": true, "points": 7, "schema_version": 3, "solution": false}
check("blockwise_attention")
### BEGIN HIDDEN TESTS
check("blockwise_attention", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The course's version also handles batches of heads and causal masking. It agrees with the full
# computation for block sizes that do and do not divide the length, causal or not, and with
# scores large enough that a naive `exp` would overflow:

# %%
generator = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 4, 100, 32, generator=generator) for _ in range(3))  # (B, H, N, D)
for causal in (False, True):
    reference = flash_attention.naive_attention(q, k, v, causal=causal)
    worst = max(
        (flash_attention.batched_blockwise_attention(q, k, v, b, causal=causal) - reference).abs().max().item()
        for b in (1, 7, 16, 64, 100, 128)
    )
    print(f"causal={causal!s:5}: largest difference over blocks 1, 7, 16, 64, 100, 128: {worst:.1e}")
big = flash_attention.batched_blockwise_attention(q * 100, k, v, 16)
largest = (q * 100 @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).abs().max().item()
print(
    f"scores up to {largest:.0f} in size (exp() overflows float32 above 88): finite output {bool(torch.isfinite(big).all())}, "
    f"difference {(big - flash_attention.naive_attention(q * 100, k, v)).abs().max().item():.1e}"
)

# %% [markdown]
# ## 3. Why tiles are faster: counting memory traffic
#
# Standard attention moves $\Theta(Nd + N^2)$ elements between the GPU's main memory (HBM) and
# the chip: Q, K and V in, then the $N \times N$ scores out and back in, the probabilities out and
# back in, O out. Tiled attention keeps a block of queries in fast on-chip memory (SRAM, of size
# $M$) while all of K and V stream past it once, so K and V are read once per query block:
# $\Theta(N^2 d^2 / M)$ elements, and no $N \times N$ matrix ever leaves the chip. With $d = 64$
# and an A100's at most 164 KiB of shared memory per multiprocessor (of the 192 KiB it has for L1
# cache and shared memory together), $d^2/M$ is far below 1, so tiled attention moves many times
# fewer bytes. FlashAttention measured 7.6x faster attention on GPT-2.
#
# ### Try it
#
# Grow N: the standard curve bends upwards (the $N^2$ term), the ratio climbs. A larger head
# dimension or a smaller fast memory shrinks the advantage.

# %%
plots.widget_io()

# %% [markdown]
# ## 4. The GPU path: a Triton kernel
#
# The course's full copy has the same algorithm written in Triton, a Python dialect for GPU
# kernels (`course/kernels/flash_attention.py`; the learners' copy your instructor gives you for
# credit leaves it out, since it is section 2's answer in another language): each program instance
# owns a block of queries and a (batch, head), loads it once, and loops over blocks of keys and
# values with exactly the update you wrote, accumulating in fp32. It has the torch reference's
# signature, `blockwise_attention(q, k, v, block, causal=False)`, and `course.kernels.attention(...)`
# picks it for CUDA tensors when Triton is installed. The course's tests run it on the CPU through
# Triton's interpreter (`TRITON_INTERPRET=1`), so its logic is checked even where there is no GPU.

# %%
if triton_available(device) and device.type == "cuda" and not withheld.in_learners_copy():
    from course.kernels import flash_attention as kernel

    qg, kg, vg = (torch.randn(1, 8, 1024, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
    difference = (
        (
            kernel.blockwise_attention(qg, kg, vg, 64, causal=True).float()
            - flash_attention.naive_attention(qg.float(), kg.float(), vg.float(), causal=True)
        )
        .abs()
        .max()
        .item()
    )
    print(f"Triton kernel against the reference (bf16): largest difference {difference:.1e}")
elif withheld.in_learners_copy():
    print("The learners' copy leaves the Triton kernel out: it is the blockwise_attention you write, in Triton.")
else:
    print(
        "No CUDA GPU with Triton here: the chapter uses the torch reference. "
        "In Colab, choose a GPU runtime to run the kernel."
    )

# %% [markdown]
# ## 5. Measured on this machine
#
# Three ways to compute the same attention (4 heads of 64): the full score matrix, torch's
# `scaled_dot_product_attention`, which picks a fused kernel (FlashAttention's, on a recent GPU),
# and your `blockwise_attention` from section 2 (blocks of 64 keys, one head at a time), once you
# have written it. On a GPU the peak memory is measured; on the CPU the right panel shows the
# largest intermediate each one creates (the N x N scores for the full version, N x 64 for the
# blockwise one).

# %%
from tqdm.auto import tqdm


def your_blockwise_loop(q, k, v):
    """Your blockwise_attention, one head at a time: q, k, v of shape (1, HEADS, N, D)."""
    return torch.stack([blockwise_attention(q[0, h], k[0, h], v[0, h], 64) for h in range(q.shape[1])])[None]


versions = {
    "full score matrix": lambda q, k, v: flash_attention.naive_attention(q, k, v),
    "torch SDPA": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
}
tiny = [torch.randn(8, HEAD_DIM, device=device) for _ in range(3)]
try:
    if withheld.written(globals(), "blockwise_attention", *tiny, 4):
        versions["your blockwise loop"] = your_blockwise_loop
    else:
        print(
            "Your blockwise_attention is not written yet: it is left out of the timing (write it, then run this cell again)."
        )
except RuntimeError as error:  # a loop written for the CPU only, run on a GPU
    print(
        f"Your blockwise_attention fails on {device.type} ({error}): create m, l and o with device=q.device. It is left out of the timing."
    )
seconds = {name: [] for name in versions}
peak_mib = {name: [] for name in versions}
q, k, v = (torch.randn(1, HEADS, LENGTHS[-1], HEAD_DIM, device=device) for _ in range(3))
print(timing.pin_threads(lambda: versions["full score matrix"](q, k, v), device))
for n in tqdm(LENGTHS, desc="timing attention"):
    q, k, v = (torch.randn(1, HEADS, n, HEAD_DIM, device=device) for _ in range(3))
    for name, run in versions.items():
        seconds[name].append(timing.median_seconds(lambda: run(q, k, v), device, warmup=1, repeats=3))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            run(q, k, v)
            peak_mib[name].append(torch.cuda.max_memory_allocated(device) / 2**20)
        else:
            largest = {"full score matrix": n * n, "your blockwise loop": n * 64}.get(name, n * HEAD_DIM)
            peak_mib[name].append(HEADS * largest * 4 / 2**20)
for i, n in enumerate(LENGTHS):
    print(f"N = {n:5d}: " + "   ".join(f"{name} {1e3 * seconds[name][i]:7.2f} ms" for name in versions))
for i in (0, len(LENGTHS) - 1):
    full = seconds["full score matrix"][i]
    print(
        f"N = {LENGTHS[i]}: "
        + "; ".join(
            readings.faster(full, seconds[name][i], name, "the full score matrix")
            for name in versions
            if name != "full score matrix"
        )
    )
plots.plot_attention_timing(LENGTHS, seconds, peak_mib, measured_memory=device.type == "cuda")

# %% [markdown]
# The printed lines say which version was faster here, at the shortest and the longest length.
# What holds everywhere is the memory: the blockwise version's largest intermediate grows like N,
# the full version's like N squared. The time depends on the machine. The blockwise loop is
# written in Python, one small matrix product per block, so on a CPU it pays a fixed cost per
# block that a single large product does not, and a CPU's caches already hold what a GPU's SRAM
# holds. On a GPU, the fused kernels (SDPA's FlashAttention backend, or the Triton kernel) win on
# time as well, because the traffic of section 3 is what they save.
#
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 5](08_in_practice.ipynb#chapter-5) runs `blockwise_attention` on SmolLM2-135M's own q, k, v and inside the model, against torch's SDPA.
# * **FlashAttention-2** (2023) reorganised the loops for more parallelism: 1.7 to 3x over the
#   first version, up to 73% of an A100's peak. **FlashAttention-3** (2024) uses the H100's
#   asynchronous copies and fp8: up to 740 TFLOP/s in fp16.
# * **PyTorch's `scaled_dot_product_attention`** picks a backend at run time: FlashAttention,
#   memory-efficient attention (xFormers), cuDNN, or the plain math; `torch.nn.attention.sdpa_kernel`
#   chooses one explicitly.
# * Decode kernels (FlashDecoding, vLLM's paged attention) split the long cache across the chip
#   instead, since a single query is too little work for one program.
#
# ## Check yourself
#
# 1. Why can the softmax be computed block by block at all?
# 2. What goes wrong if the running output is not rescaled when the maximum grows?
# 3. Is FlashAttention an approximation? What does it change?
# 4. Why does tiled attention move fewer bytes, and what limits the saving?
#
# <details><summary>Answers</summary>
#
# 1. The maximum and the sum of exponentials can be kept as running values: a later, larger
#    maximum only multiplies what was summed so far by exp(m_old - m_new).
# 2. Earlier terms stay relative to the old, smaller maximum: they are weighted too heavily, and
#    the result is wrong whenever a later block has a larger score.
# 3. No: the result is exact, up to floating-point rounding. It changes where the numbers live
#    (on-chip) and in which order they are summed.
# 4. The N x N matrices never travel to main memory; K and V are read once per block of queries.
#    The saving shrinks as the head dimension grows relative to the fast memory (d^2 / M).
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

quiz.show("flash_attention")


# %% nbgrader={"grade": false, "grade_id": "quiz_flash_attention", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "d", 3: "a", 4: "d", 5: "b"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_flash_attention", "locked": true, "points": 5, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_flash_attention")
### BEGIN HIDDEN TESTS
check("quiz_flash_attention", hidden=True)
### END HIDDEN TESTS
