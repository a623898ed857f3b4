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
# # Chapter 9: Choosing a technique
#
# The earlier chapters built one technique at a time: LoRA, quantization, the KV cache,
# FlashAttention's online softmax, speculative decoding, distillation. A real problem rarely names
# its technique. This chapter puts them side by side: what each one is for, what it costs, and which
# to try first. It ends with a capstone that combines several of them on the course's own model.
#
# You will:
#
# 1. write the rule for when fine-tuning is the right tool at all, and classify short scenarios
#    with it (graded);
# 2. ask an interactive guide which technique to try first for a situation of your own;
# 3. pack 4-bit codes two to a byte (graded), then choose a configuration that makes the course's
#    target cheaper and faster within a budget (graded), and measure it;
# 4. answer the quiz (graded).

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p TIMED_TOKENS 128`).
TIMED_TOKENS = 64  # tokens per timed generation

# %%
import torch

from course import choosing_a_technique as technique
from course import timing
from course.device import best_device, describe
from course.plots import choosing_a_technique as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. When to fine-tune
#
# Fine-tuning changes the weights; prompting changes only what goes in. Fine-tuning costs a
# training run, a copy of the model or an adapter to keep, and an evaluation every time it changes.
# Three common requests look like fine-tuning jobs and are not:
#
# * **"The model should know our documents."** That is **retrieval**: find the relevant passages
#   and put them in the prompt. Training is a poor way to store facts (the model paraphrases and
#   mixes them up, and cannot say where they came from), while a passage in the prompt is exact
#   and can be quoted.
# * **"Our data changes all the time."** Then every change would mean training again. A prompt or
#   a retrieval index changes in seconds.
# * **"We have not really tried prompting yet."** A clear instruction with a few examples is often
#   enough, and it costs nothing to change.
#
# The rule: **prompting** (with retrieval) for knowledge and instructions; **fine-tuning** for a
# consistent format, a consistent tone, or a narrow task at high volume. Those are the cases where
# the behaviour must come out the same every time, or where a long prompt with many examples costs
# too much at the volume served. Even then, prompting comes first, and fine-tuning is for what does
# not move every week.
#
# ### Your turn: `fine_tuning_advice`
#
# Write `fine_tuning_advice(need, changes_often, tried_prompting)`. `need` is one of
# `"knowledge"`, `"instructions"`, `"format"`, `"tone"` and `"narrow_task"`; `changes_often` says
# whether what the model must learn changes often; `tried_prompting` whether prompting has
# seriously been tried. Return exactly one of the strings `"retrieval"`, `"prompting"` or
# `"fine-tuning"` (with a hyphen: the checks compare the strings), following the rule above, and
# raise `ValueError` for a need that is not on the list.
#
# The cell below holds the only imports the grader gives your answers; you may import more
# inside your own cells.

# %% tags=["grader-setup"] nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

import numpy as np
import torch


# %% nbgrader={"grade": false, "grade_id": "fine_tuning_advice", "locked": false, "schema_version": 3, "solution": true}
def fine_tuning_advice(need, changes_often, tried_prompting):
    """Return "retrieval", "prompting" or "fine-tuning": the first thing to do for this need."""
    ### BEGIN SOLUTION
    if need not in ("knowledge", "instructions", "format", "tone", "narrow_task"):
        raise ValueError(f"unknown need {need!r}: use knowledge, instructions, format, tone or narrow_task")
    if need == "knowledge":
        return "retrieval"
    if need == "instructions" or changes_often or not tried_prompting:
        return "prompting"
    return "fine-tuning"
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_fine_tuning_advice", "locked": true, "points": 4, "schema_version": 3, "solution": false}
from autograder import check

check("fine_tuning_advice")
### BEGIN HIDDEN TESTS
check("fine_tuning_advice", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Eight short scenarios, each described by its need and the two questions. Your function's advice
# beside the rule's:

# %%
for scenario in technique.SCENARIOS:
    try:
        yours = fine_tuning_advice(scenario.need, scenario.changes_often, scenario.tried_prompting)
    except NotImplementedError:
        yours = "(not written yet)"
    rule = technique.fine_tuning_advice(scenario.need, scenario.changes_often, scenario.tried_prompting)
    print(f"- {scenario.text}")
    print(
        f"    need {scenario.need}, changes often: {scenario.changes_often}, prompting tried: "
        f"{scenario.tried_prompting}  ->  yours: {yours};  the rule: {rule}"
    )

# %% [markdown]
# Only three of the eight end in fine-tuning: a format that prompting keeps breaking, and two
# narrow tasks run thousands of times a day. A style guide that is rewritten every week is not one
# of them, however consistent each week's posts must be.
#
# ## 2. From a problem to a technique
#
# Once fine-tuning, or serving, is the job, the problem usually names the first technique to try:
#
# | problem | first thing to try | changes behaviour? | measured in |
# | --- | --- | --- | --- |
# | adapting a large model on one GPU | LoRA; QLoRA if the base does not fit in 16 bits | yes (that is the point) | chapter 2 |
# | model too large to serve | 8-bit weights; then 4-bit with GPTQ or AWQ and calibration | slightly: evaluate | chapters 1, 3 |
# | long sequences slow or out of memory | FlashAttention-style kernels | no (exact) | chapter 5 |
# | decoding too slow | the KV cache (always), then speculative decoding | no (exact in distribution) | chapters 4, 6, 7 |
# | still too slow or too large | distil into a smaller model | yes: evaluate on rare cases | chapter 7 |
#
# The last column matters as much as the second. Three techniques leave the outputs exactly as
# they were: the cache reuses exact keys and values, tiled attention computes exact attention, and
# speculative decoding keeps the target's distribution. They can be switched on without asking
# whether quality suffered. Quantization, adapters and distillation change the model, so each
# needs an evaluation; distillation most of all, and on the rare inputs where a smaller model
# drifts first, not only on the average.
#
# ### Try it
#
# Describe a situation: the problem, the model's size, the GPU's memory. The guide answers with
# the first technique to try and why, using chapter 1's and chapter 2's arithmetic for the memory;
# tick "done that" to see what comes after it. Try a 13B model to adapt on a 24 GiB GPU (16-bit
# weights do not fit: QLoRA), then on an 80 GiB one.

# %%
plots.widget_guide()

# %% [markdown]
# ## 3. The capstone: cheaper and faster within a budget
#
# Serve the course's target (4.3M parameters, 17.2 MB in float32) more cheaply and faster, by
# combining what the chapters built: weights stored in fewer bits (chapter 3), the KV cache
# (chapter 4, always on) and speculative decoding with a draft (chapters 6 and 7). The budget:
#
# * the weights the server holds, target and draft as stored, take **at most a quarter** of the
#   float32 target's bytes;
# * the held-out loss stays **within 0.02 nats/byte** of the float32 target's;
# * the target calls yield **at least 2 tokens on average** in greedy decoding: the new tokens of
#   all the held-out prompts divided by the target calls that made them (one call may yield only
#   its own token, as long as the average holds).
#
# These three figures are deterministic: bytes are counted from the stored tensors, the loss comes
# from fixed windows of the held-out plays, and the tokens per call from greedy runs on fixed
# held-out prompts. So they are graded, and the grader recomputes them from your configuration.
# The wall-clock speed-up depends on your machine and on what else runs on it: it is measured and
# reported, not graded.
#
# ### Codes, stored for real
#
# Chapter 3 quantized in simulation: the rounded weights went back into float32 matrices, as large
# as before. A server keeps the **codes** and the **scales**: int8 codes one per byte, 4-bit codes
# two per byte, and one fp16 scale per row or per group. The usual packing (bitsandbytes') shifts
# each signed 4-bit code by 8 into 0..15 and puts the first code of each pair in the high four bits
# of the byte, the second in the low four:
#
# $$ \text{byte} = (c_0 + 8) \cdot 16 + (c_1 + 8) .$$
#
# The codes -7 and 7 become 1 and 15: the byte 0x1F, 31.
#
# ### Your turn: `pack_int4`
#
# Write `pack_int4(codes)` for a 2-D integer tensor of codes in [-8, 7] with an even number of
# columns: return a `torch.uint8` tensor of shape `(rows, cols // 2)`, packed as above. Raise
# `ValueError` when the number of columns is odd.


# %% nbgrader={"grade": false, "grade_id": "pack_int4", "locked": false, "schema_version": 3, "solution": true}
def pack_int4(codes):
    """Two signed 4-bit codes per byte: (code + 8), the first of each pair in the high nibble."""
    ### BEGIN SOLUTION
    if codes.shape[1] % 2:
        raise ValueError(f"{codes.shape[1]} columns: two codes share a byte, so the columns must be even")
    shifted = codes.to(torch.int32) + 8
    return (shifted[:, 0::2] * 16 + shifted[:, 1::2]).to(torch.uint8)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_pack_int4", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("pack_int4")
### BEGIN HIDDEN TESTS
check("pack_int4", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# `course.choosing_a_technique.StoredLinear` keeps a layer that way: the packed codes and the fp16
# scales are its only tensors, and every call rebuilds the float32 matrix from them. The target
# stored in each format, its bytes counted from the tensors a checkpoint of it would hold (the
# tied embedding, which is also the output layer, and the norms stay in float32 in every format),
# and its loss on held-out text:

# %%
for row in technique.format_table():
    name = row["weights"] + (f" g{row['group_size']}" if row["group_size"] else "")
    print(
        f"{name:9s} {row['bytes'] / 1e6:6.2f} MB = {100 * row['share']:5.1f}% of fp32 ({row['bits']:6.3f} bits per "
        f"linear weight); held-out loss {row['loss']:.4f} nats/byte ({row['loss_gap']:+.4f})"
    )

# %% [markdown]
# Two things stand out. int8 keeps the loss but misses a quarter: 8 bits plus the scales is a
# little over a quarter of 32, and the float32 embedding adds the rest. And 2-bit codes (three
# levels: -1, 0, +1 times the scale) save bytes at a cost in loss far over the budget: between
# them, 4-bit codes are where the budget lives.
#
# ### Choose a configuration
#
# A configuration is four choices:
#
# * `weights`: `"fp32"`, `"fp16"`, `"int8"`, `"int4"`, `"nf4"` or `"int2"`;
# * `group_size`: `None` (one scale per row), `32` or `64` for the formats with scales, `None`
#   for fp32 and fp16;
# * `draft`: `"none"`, `"draft"` (trained on the text, chapter 6) or `"distilled"` (chapter 7);
#   the drafts stay in float32 (315,552 parameters: 1.26 MB);
# * `draft_length`: the tokens drafted per target call, 1 to 8.
#
# Explore first. The left panel places each weight format by the bytes served (with the draft you
# chose) and the loss; the right one shows the tokens per target call of each draft for every k,
# with the target in your weight format. Those curves come from one greedy run per prompt: a
# greedy round keeps the draft's guesses while they equal the target's own greedy tokens, so
# knowing where the two agree is enough to count the calls of every k.

# %%
plots.widget_capstone()

# %% [markdown]
# ### Your turn: `capstone_configuration`
#
# Return your configuration as a dict with the keys `weights`, `group_size`, `draft` and
# `draft_length`. The checks measure it (a few seconds for a configuration not measured yet) and
# say which part of the budget it meets.


# %% nbgrader={"grade": false, "grade_id": "capstone_configuration", "locked": false, "schema_version": 3, "solution": true}
def capstone_configuration():
    """The configuration you submit: a dict with the keys weights, group_size, draft, draft_length."""
    ### BEGIN SOLUTION
    return {"weights": "int4", "group_size": 64, "draft": "distilled", "draft_length": 4}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_capstone_configuration", "locked": true, "points": 6, "schema_version": 3, "solution": false}
check("capstone_configuration")

# %% [markdown]
# Your configuration, measured the way the grader measures it: the real speculative loop with
# the stored target and both KV caches, greedy, on the held-out prompts.

# %%
try:
    chosen = technique.Configuration.from_dict(capstone_configuration())
except (NotImplementedError, ValueError) as problem:
    chosen = technique.REFERENCE
    print(f"capstone_configuration(): {problem or 'not written yet'}; measuring the reference configuration instead")
figures = technique.measure(chosen)
print(f"{chosen.label()}: {figures.summary()}")
for part, met in figures.within().items():
    print(f"  {part.replace('_', ' ')}: {'within the budget' if met else 'over the budget'}")
if chosen.draft != "none":
    curve = technique.draft_curves(chosen.weights, chosen.group_size)[chosen.draft][chosen.draft_length - 1]
    print(f"  tokens per call from where the draft agrees with the target, without the loop: {curve:.2f}")
plots.plot_capstone(chosen.weights, chosen.group_size, chosen.draft, chosen.draft_length)

# %% [markdown]
# ### The wall clock, measured here
#
# The same greedy text generated four ways: the float32 target alone (the baseline), your
# weights alone, your draft with float32 weights, and both together. Each is timed on the first
# held-out prompt, at the thread count that suits this machine best.

# %%
baseline = technique.Configuration()
chosen_threads, tried = timing.choose_threads(technique.generation(baseline, device, TIMED_TOKENS), device)
print(timing.describe_threads(chosen_threads, tried))
parts = chosen.parts()
with timing.threads(chosen_threads):
    seconds = technique.time_generation([baseline, *parts.values(), technique.REFERENCE], device, TIMED_TOKENS)
print(f"fp32 target alone: {TIMED_TOKENS / seconds[baseline]:.0f} tokens/s")
speedups = {name: seconds[baseline] / seconds[config] for name, config in parts.items()}
print(technique.speedup_reading(speedups))
plots.plot_speedups(speedups)

# %% [markdown]
# How to read it. Speculative decoding saves target calls: each call verifies several tokens for
# about the price of one, as long as decoding waits on memory. Stored codes save bytes, but here
# each call rebuilds every float32 matrix from its codes before multiplying, in separate torch
# operations, and on a CPU that rebuilding can cost more than reading the bytes it saved. Fused
# low-bit kernels (bitsandbytes, llama.cpp, Marlin, torchao) dequantize inside the matrix product,
# as each block of codes arrives, so there the fewer bytes do turn into faster decoding: torchao
# reports Llama-2-7B on an A100 going from 107 tokens/s in bf16 to 201 with int4 weights in groups
# of 64. The figures the budget grades do not depend on any of this.
#
# ## In practice
#
# * **Serving engines** combine all of it: vLLM serves GPTQ, AWQ or bitsandbytes weights with a
#   paged KV cache, continuous batching and speculative decoding (a draft model, n-gram lookup,
#   or EAGLE heads); llama.cpp stores 4-bit codes with a scale per block of 32 (its Q4 formats).
# * **transformers**: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")` to
#   load in NF4, `generate(..., assistant_model=draft)` for speculation, and peft's
#   `get_peft_model` for LoRA on top of a 4-bit base (QLoRA).
# * What the capstone leaves out: calibrated quantization (GPTQ and AWQ choose codes with sample
#   text, which matters most at 4 bits and below on large models), fused kernels, quantized
#   drafts and batching.
#
# ## Closing note: the reference configuration
#
# The course's own answer to the capstone is 4-bit codes with an fp16 scale per 64 weights and the
# distilled draft proposing 4 tokens per call. Its figures, and its speed-up on this machine:

# %%
reference = technique.measure(technique.REFERENCE)
print(f"reference configuration: {technique.REFERENCE.label()}")
print(f"  weights: {reference.weight_bytes / 1e6:.2f} MB, {100 * reference.weights_share:.1f}% of the fp32 target's")
print(
    f"  held-out loss: {reference.loss:.4f} nats/byte, {reference.loss_gap:+.4f} from fp32's {reference.fp32_loss:.4f}"
)
print(
    f"  tokens per target call: {reference.tokens_per_call:.2f} (greedy, {len(technique.PROMPT_STARTS)} held-out "
    f"prompts x {technique.NEW_TOKENS} tokens)"
)
print(
    f"  wall-clock speed-up over the fp32 target alone, here: {seconds[baseline] / seconds[technique.REFERENCE]:.2f}x "
    f"({chosen_threads} thread{'s' if chosen_threads > 1 else ''}, {TIMED_TOKENS} tokens)"
)

# %% [markdown]
# ## Check yourself
#
# 1. A team wants the model to answer from a wiki that changes every day. What first, and why not
#    fine-tuning?
# 2. Which of the table's techniques can be turned on without evaluating quality again?
# 3. Why does int8 miss the capstone's memory budget, when 8 bits is a quarter of 32?
# 4. Why does the choice of draft change the tokens per call but not the held-out loss?
#
# <details><summary>Answers</summary>
#
# 1. Retrieval: knowing documents is its job, and a wiki that changes daily would need training
#    every day.
# 2. The KV cache, FlashAttention-style kernels and speculative decoding: their outputs are those
#    of the model without them (exactly, or exactly in distribution).
# 3. The scales cost bytes too (an fp16 scale per row of 256 adds 1/16 of a bit per weight), and
#    the tied embedding and the norms stay in float32; the draft's float32 bytes add more.
# 4. The output follows the target's distribution whatever the draft; the draft only decides how
#    many of its guesses each target call accepts.
#
# </details>
#
# ## Quiz
#
# Choose an answer to each question: the quiz says at once whether it is right, and why. Then put
# your choices in `quiz_answers()` below for points (the line under the quiz shows them as code).

# %%
from course import quiz

quiz.show("choosing_a_technique")


# %% nbgrader={"grade": false, "grade_id": "quiz_choosing_a_technique", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "a", 3: "d", 4: "b", 5: "b", 6: "d", 7: "c"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_choosing_a_technique", "locked": true, "points": 7, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_choosing_a_technique")
