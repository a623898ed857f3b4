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
# # Chapter 1: Prefill and decode arithmetic
#
# A language model answers in two phases that cost completely different things.
#
# * **Prefill** pushes the whole prompt through the weights at once. Every weight meets every
#   prompt token, so the work is large and parallel: the phase is limited by arithmetic
#   (*compute-bound*). It decides the **time to first token**, which grows with the prompt.
# * **Decode** then produces one token at a time, each depending on the one before. Each step
#   still reads *every* weight from memory, but does only two operations with each: the phase is
#   limited by how fast memory delivers the weights (*memory-bound*). It decides **tokens per
#   second**, and on any answer longer than a sentence, most of the wall-clock time.
#
# This chapter turns those sentences into numbers you can compute, plot and measure: weight
# memory, FLOPs, the roofline that says which limit wins, the batch size where decode stops being
# memory-bound, and why servers batch requests and let them join mid-flight.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them, e.g. `-p MAX_BATCH 256`).
MAX_BATCH = 64

# %%
import os

import torch

from course import evaluation, prefill_decode, readings, timing
from course.device import best_device, describe
from course.model import TIMING, LanguageModel
from course.plots import prefill_decode as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. Weights: bytes before anything else
#
# A model with $N$ parameters stored at $b$ bits needs $N b / 8$ bytes. For a 70-billion-parameter
# model that is 140 GB at 16 bits, 70 GB at 8 and 35 GB at 4. Only the last fits on one 80 GB card
# with room for the KV cache. This is why, when memory is short, dropping precision usually beats
# dropping parameters: a 70B model at 4 bits (35 GB) generally answers better than an 8B model at
# 16 bits (16 GB) and still fits on the same card. (Chapter 3 measures what the bits cost.)
#
# ### Your turn: `weight_memory_gb`
#
# Write `weight_memory_gb(params, bits)`: the weights' size in GB (10^9 bytes).
#
# The cell below holds the imports that grading gives your answers. Helper functions and more
# imports may go in your answer cell or in code cells you add: grading runs the cells you added,
# in notebook order, with your answers, but not the chapter's own cells, and without the `course`
# package (the check cell tells you when an answer relies on either). Save the notebook before
# you hand it in: grading reads the saved file, not the kernel.

# %% tags=["grader-setup"] nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math


# %% nbgrader={"grade": false, "grade_id": "weight_memory_gb", "locked": false, "schema_version": 3, "solution": true}
def weight_memory_gb(params, bits):
    """GB (1e9 bytes) of `params` weights stored at `bits` bits each."""
    ### BEGIN SOLUTION
    return params * bits / 8 / 1e9
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_weight_memory_gb", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from autograder import check

check("weight_memory_gb")
### BEGIN HIDDEN TESTS
check("weight_memory_gb", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Prefill: compute-bound
#
# A matrix-vector product with a weight matrix does one multiply and one add per weight, so a
# forward pass over one token costs about $2N$ FLOPs, and prefill over a $T$-token prompt about
# $2NT$. (Attention adds a term that grows with $T^2$; it matters for long prompts, and chapter 5
# deals with it.) An 8B model reading a 1000-token prompt: 16 TFLOPs, about 51 ms at an A100's
# 312 TFLOP/s peak.
#
# ### Your turn: `prefill_flops`


# %% nbgrader={"grade": false, "grade_id": "prefill_flops", "locked": false, "schema_version": 3, "solution": true}
def prefill_flops(params, tokens):
    """Approximate FLOPs of one forward pass over a `tokens`-token prompt."""
    ### BEGIN SOLUTION
    return 2 * params * tokens
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_prefill_flops", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("prefill_flops")
### BEGIN HIDDEN TESTS
check("prefill_flops", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The roofline
#
# Any piece of work needs some FLOPs and moves some bytes. Hardware can do at most its peak FLOP/s
# and move at most its bandwidth in bytes/s, and the two proceed in parallel, so the work takes at
# least
#
# $$ t = \max\left(\frac{\text{FLOPs}}{\text{peak FLOP/s}},\ \frac{\text{bytes}}{\text{bandwidth}}\right). $$
#
# Which term wins depends on the **arithmetic intensity**, FLOPs per byte moved. Below the
# hardware's *ridge point*, peak / bandwidth (153 FLOPs per byte on an A100-80G), the work waits
# on memory; above it, on arithmetic. Prefill of a long prompt does $2T$ FLOPs for every weight
# read: far above the ridge. A decode step for one sequence does 2 FLOPs per weight, that is
# 1 FLOP per byte at 16 bits: far below.
#
# ### Your turn: `roofline_step_time`
#
# Write `roofline_step_time(flops, n_bytes, peak_flops, bandwidth)`: the roofline's time in seconds.


# %% nbgrader={"grade": false, "grade_id": "roofline_step_time", "locked": false, "schema_version": 3, "solution": true}
def roofline_step_time(flops, n_bytes, peak_flops, bandwidth):
    """Seconds for work of `flops` FLOPs moving `n_bytes` bytes, by the roofline."""
    ### BEGIN SOLUTION
    return max(flops / peak_flops, n_bytes / bandwidth)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_roofline_step_time", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("roofline_step_time")
### BEGIN HIDDEN TESTS
check("roofline_step_time", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Batching: read the weights once, serve many
#
# Decode is memory-bound because one step reads all weights to make one token. Run $B$ sequences
# in the same step and the weights are still read once, but they now make $B$ tokens: the
# arithmetic intensity is $2B / \text{bytes per weight}$. Throughput rises almost linearly with
# $B$ until the intensity reaches the ridge. That **critical batch size** is
#
# $$ B^* = \frac{\text{peak FLOP/s}}{\text{bandwidth}} \cdot \frac{\text{bytes per weight}}{2}, $$
#
# about 153 for an A100-80G in bf16, 295 for an H100 SXM. Past it, a bigger batch only makes each
# step longer. Quantized weights (fewer bytes per weight) halve $B^*$ at 8 bits.
#
# ### Your turn: `critical_batch_size`
#
# Write `critical_batch_size(peak_flops, bandwidth, bytes_per_param)`.


# %% nbgrader={"grade": false, "grade_id": "critical_batch_size", "locked": false, "schema_version": 3, "solution": true}
def critical_batch_size(peak_flops, bandwidth, bytes_per_param):
    """Batch size at which a decode step turns from memory-bound to compute-bound."""
    ### BEGIN SOLUTION
    return peak_flops / bandwidth * bytes_per_param / 2
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_critical_batch_size", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("critical_batch_size")
### BEGIN HIDDEN TESTS
check("critical_batch_size", hidden=True)
### END HIDDEN TESTS

# %%
for name, hardware in prefill_decode.PRESETS.items():
    print(
        f"{name:9s} ridge {hardware.ridge:5.0f} FLOP/B   critical batch bf16 {prefill_decode.critical_batch(hardware, 16):4.0f}"
        f"   int8 weights {prefill_decode.critical_batch(hardware, 8):4.0f}"
    )

# %% [markdown]
# ## 5. Measured on your machine
#
# Two numbers describe this machine's roofline: how fast it reads memory (a matrix-vector product
# with a 256 MB matrix, far larger than any cache: exactly the access pattern of decode) and how
# fast it multiplies big matrices (peak FLOP/s). Each is the median of several runs after a warm-up.
#
# First, how many threads to measure with. torch starts one thread per core it sees, and a
# matrix product splits its work among them: every thread must finish its share before the next
# operation starts. When other programs keep some of those cores busy (a browser, a second
# notebook, other learners on a shared JupyterHub node), the threads that got a core wait for the
# ones that did not, at every one of the thousands of operations of a decode: more threads than
# free cores (*oversubscription*) can be several times slower than one thread. A container can
# also see more cores than it may use. So each chapter that measures counts the CPUs this process
# may really use (its CPU affinity and its container's CPU quota), times one thread against all
# of them on the work it is about to measure, in turn, keeps all of them only when they are
# clearly faster (by 15%: the other work may start after the choice) and one thread otherwise, and
# prints which and why. The model it times is the course's decoder widened to about 90 million
# parameters, with random weights (timing does not depend on what the weights are).

# %%
dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
torch.manual_seed(0)
big = LanguageModel(TIMING).to(device=device, dtype=dtype).eval()
print(timing.pin_threads(lambda: evaluation.decode_step_seconds(big, batch=1, steps=1), device))

# %%
bandwidth = timing.memory_bandwidth(device) * 1e9
peak = timing.matmul_flops(1024 if device.type == "cpu" else 8192, dtype, device)
memory = (
    torch.cuda.get_device_properties(device).total_memory
    if device.type == "cuda"
    else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
)
here = prefill_decode.Hardware("this machine", peak, bandwidth, memory)
print(
    f"memory bandwidth {bandwidth / 1e9:.1f} GB/s   matmul {peak / 1e9:.0f} GFLOP/s ({str(dtype)[6:]})   "
    f"ridge {here.ridge:.1f} FLOP/B"
)

# %% [markdown]
# ### Try it
#
# The sliders put one model on one device; "this machine" is the one you just measured (it joins
# the hardware list once your four functions above are written; until then the course's formulas
# stand in for the ones not written yet, on the other devices). Start at
# 8B, 16 bits, batch 1 on an A100: decode sits far down the sloped (memory) part of the roof.
# Raise the batch until the blue point reaches the flat part. Then try 70B at 16 bits on an
# A100-80G (it does not fit), and at 4 bits. Watch the time to first token as the prompt grows,
# and tokens per second as the bits shrink. How long would your machine take per token of an 8B model?

# %%
yours = prefill_decode.Formulas.of(globals())  # your functions of sections 1-4 that are written
print(
    prefill_decode.whose(
        yours,
        "This figure",
        instead="the course's formulas stand in for them, and this machine joins the hardware list once "
        "all four are written (then run this cell again)",
    )
)
plots.widget_roofline(here if yours.complete else None, yours.or_course())

# %% [markdown]
# Now the 90-million-parameter model, too big for any cache. We time prefill of a 256-token
# prompt and decode of single tokens with a KV cache (chapter 4), and compare both with the
# roofline of this machine.

# %% tags=["measures"]
n_params = big.num_parameters()
n_bytes = n_params * big.embed.weight.element_size()
prefill_per_token = evaluation.prefill_seconds_per_token(big, batch=1, prompt_len=256, repeats=3)
decode_per_token = evaluation.decode_step_seconds(big, batch=1)
print(f"{n_params / 1e6:.0f}M parameters, {n_bytes / 1e6:.0f} MB")
print(f"prefill: {1e3 * prefill_per_token:.2f} ms per prompt token")
print(
    f"decode:  {1e3 * decode_per_token:.2f} ms per generated token, {1 / decode_per_token:.1f} tokens/s "
    f"({decode_per_token / prefill_per_token:.0f}x a prefill token)"
)
yours = prefill_decode.Formulas.of(globals())
if yours.can("roofline_seconds"):
    predicted_decode = prefill_decode.roofline_time(2 * n_params, n_bytes, here, yours)
    print(
        f"decode at batch 1 reaches {readings.share_of_roof(predicted_decode / decode_per_token)} "
        f"(your roofline_step_time predicts {1e3 * predicted_decode:.2f} ms: {n_bytes / 1e6:.0f} MB at "
        f"{bandwidth / 1e9:.1f} GB/s, as measured above)"
    )
else:
    print("Your roofline_step_time is not written yet: the prediction for decode at batch 1 is left out.")

# %% [markdown]
# Prefill shares each weight read across the whole prompt, where decode reads every weight for each
# token: the ratio printed above is what that is worth on this machine. Now decode with growing
# batches: if decode is memory-bound, a step for 8 sequences costs barely more than a step for one.

# %% tags=["measures"]
batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= MAX_BATCH]
# batch 1 is the decode step measured above; the larger batches are measured here
measured = {1: 1 / decode_per_token} | evaluation.decode_throughput(big, batches[1:])
efficiency = evaluation.scaling_efficiency(measured)
for batch, rate in measured.items():
    print(
        f"batch {batch:3d}: {rate:7.1f} tokens/s, a step of {1e3 * batch / rate:6.2f} ms   "
        f"{rate / measured[1]:5.1f}x batch 1   ({efficiency[batch]:.0%} of perfect scaling)"
    )
row_cost = evaluation.linear_row_cost(big)
print(evaluation.describe_row_cost(row_cost))
print(evaluation.decode_batch_reading(measured, row_cost))
bend = evaluation.scaling_bend(measured)
if bend is None:
    reading = f"scaling stays above half of perfect up to batch {batches[-1]}"
else:
    reading = f"scaling falls below half of perfect at batch {bend}"
yours = prefill_decode.Formulas.of(globals())
if not yours.can("critical_batch_of"):
    print(f"{reading}; your critical_batch_size is not written yet: the figure leaves the critical batch out")
else:
    critical = prefill_decode.critical_batch(here, 8 * big.embed.weight.element_size(), yours)
    if bend is None:
        print(f"{reading}; this machine's roofline bends at {critical:.3g} (your critical_batch_size)")
    else:
        where = "about where" if 0.8 <= bend / critical <= 1.25 else "earlier than" if bend < critical else "later than"
        print(f"{reading}: {where} this machine's roofline bends ({critical:.3g}, your critical_batch_size)")
plots.plot_decode_batch(n_params, 8 * big.embed.weight.element_size(), here, measured, batches, yours)

# %%
points = [
    (f"measured decode, batch {b}", 2 * b / big.embed.weight.element_size(), 2 * n_params * measured[b])
    for b in (1, batches[-1])
]
points.append(
    ("measured prefill, 256 tokens", 2 * 256 / big.embed.weight.element_size(), 2 * n_params / prefill_per_token)
)
yours = prefill_decode.Formulas.of(globals())
print(prefill_decode.whose(yours, "This machine's roofline", instead="the predictions that need them are left out"))
plots.plot_roofline(n_params, 8 * big.embed.weight.element_size(), 1, 256, here, points, yours)

# %% tags=["measures"]
prefill_rate = 2 * n_params / prefill_per_token
print(f"prefill of 256 tokens runs at {readings.share_of_roof(prefill_rate / peak, 'the flat (compute) roof')}")
print(
    f"decode at batch {batches[-1]} runs at "
    f"{readings.share_of_roof(2 * n_params * measured[batches[-1]] / peak, 'the flat (compute) roof')}"
)

# %% [markdown]
# The printed readings say where this machine's points sit; they differ from one machine to the
# next, and on a busy machine from one run to the next. What holds everywhere: decode at batch 1
# stays *under* the sloped roof of the memory it reads from, because reading the weights is the
# least it must do, and the gap is the smaller matrices of each layer and the work between them.
# (A reading above 100% means the roof was measured low: part of the weights came from a cache
# faster than the memory the bandwidth was measured on, or the machine was busier then.) Batching raises the
# arithmetic intensity, so the point moves right, toward the flat roof; prefill starts there.
#
# Where the measured bend comes earlier than the roofline predicts (it usually does on a CPU),
# the reasons are these: a decode step for a small batch multiplies thin matrices, which run well
# below the big-matrix FLOP/s that sets the flat roof; some CPUs multiply a single row with a
# fast matrix-vector kernel and two or more rows with a general kernel that is slower at that
# shape, so batch 2 can even decode fewer tokens per second than batch 1 (the row timings above
# show whether this machine does); and the work around the matrix products (norms, rotations,
# attention over the cache) grows with the batch too. On a GPU the measured curve usually follows
# the prediction much further; the line printed above the figure says where this machine's curve bends.
#
# ## 6. Static and continuous batching
#
# A server receives requests at random times, with different prompt and answer lengths. **Static
# batching** waits for a batch, runs it until its *longest* answer is done, and only then starts
# the next: short answers idle in their slots and newcomers wait. **Continuous batching** (Orca,
# OSDI 2022; vLLM, TGI) schedules at every step: a finished request leaves at once and a waiting
# one joins in the next step. The simulator below serves the same trace of requests both ways on
# the roofline's cost model of an 8B model on an A100.
#
# ### Your turn: `static_batch_throughput`
#
# Requests with output lengths `output_lengths` (in arrival order) are served in static batches of
# `batch_size` consecutive requests (the last batch may be smaller). Every decode step takes
# `step_seconds`, whatever the batch, and a batch runs as many steps as its longest request needs.
# Return the throughput: generated tokens per second. For `[10, 40, 20, 30, 5, 15, 25]`, batches
# of 3 and 0.02 s per step: the batches `[10, 40, 20]`, `[30, 5, 15]` and `[25]` take 40, 30 and 25
# steps, so 145 tokens in 1.9 s: about 76.3 tokens/s.


# %% nbgrader={"grade": false, "grade_id": "static_batch_throughput", "locked": false, "schema_version": 3, "solution": true}
def static_batch_throughput(output_lengths, batch_size, step_seconds):
    """Tokens per second when requests run in static batches of `batch_size`, in order."""
    ### BEGIN SOLUTION
    steps = sum(max(output_lengths[i : i + batch_size]) for i in range(0, len(output_lengths), batch_size))
    return sum(output_lengths) / (steps * step_seconds)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_static_batch_throughput", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("static_batch_throughput")
### BEGIN HIDDEN TESTS
check("static_batch_throughput", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Try it
#
# Raise the arrival rate. Static batching's time to first token grows with the queue, and its
# latencies spread out, because every request waits for the slowest of its batch. Continuous
# batching keeps the first token near one step away until the batch limit is reached. Then lower
# the batch limit to 1: both become the same one-at-a-time server.

# %%
yours = prefill_decode.Formulas.of(globals())
print(
    prefill_decode.whose(
        yours,
        "The simulator",
        prefill_decode.PREFILL,
        instead="the course's formulas cost its steps in their place (write yours, then run this cell again to "
        "move the sliders with them)",
    )
)
plots.widget_batching(yours.or_course())

# %% [markdown]
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 1](08_in_practice.ipynb#chapter-1) times prefill and decode of SmolLM2-135M in transformers against this machine's roofline.
# * **vLLM**, **TGI** and **TensorRT-LLM** all batch continuously; vLLM also pages the KV cache
#   (chapter 4). Orca reported 36.9x the throughput of FasterTransformer at the same latency.
# * Published decode speeds follow the roofline: torchao reports Llama-2-7B at batch 1 on an A100
#   at about 107 tokens/s in bf16 (about 70% of peak bandwidth), 171 with int8 weights, 201 with
#   int4: fewer bytes per token, more tokens per second.
# * Servers split the two phases' budgets: time to first token (prefill, prompt length) and time
#   per output token (decode, batch and model bytes), and some run prefill and decode on different
#   machines for that reason.
#
# ## Check yourself
#
# 1. Why is prefill compute-bound and decode memory-bound on the same hardware?
# 2. A 13B model in bf16 on an A100-80G: what is the smallest decode step time at batch 1?
# 3. Why does batching help decode so much and prefill so little?
# 4. Why does int8 weight storage halve the critical batch size?
# 5. In static batching, which request's length sets how long a batch takes?
#
# <details><summary>Answers</summary>
#
# 1. Prefill does 2T FLOPs per weight read (T prompt tokens), far above the ridge; decode does 2
#    per sequence, far below it.
# 2. 26 GB / 2.039 TB/s = 12.8 ms (about 78 tokens/s).
# 3. Batching raises decode's FLOPs per byte, which was the bottleneck; prefill is already
#    compute-bound, so more work just takes proportionally longer.
# 4. Each weight is one byte instead of two, so each byte read carries twice the FLOPs per
#    sequence: the ridge is reached at half the batch.
# 5. The longest one: every other request in the batch waits for it.
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

quiz.show("prefill_decode")


# %% nbgrader={"grade": false, "grade_id": "quiz_prefill_decode", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "a", 3: "d", 4: "b", 5: "a", 6: "c"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_prefill_decode", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_prefill_decode")
### BEGIN HIDDEN TESTS
check("quiz_prefill_decode", hidden=True)
### END HIDDEN TESTS
