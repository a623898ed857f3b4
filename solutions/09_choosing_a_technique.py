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
# 3. build a server: pack 4-bit codes two to a byte, keep the target's layers as packed codes and
#    scales (rounded to nearest, or calibrated codes given to the layer), write the greedy
#    speculative loop with both KV caches (all graded); then choose a configuration within a budget
#    that no single chapter's technique meets (graded) and time your server against the float32 target;
# 4. answer the quiz (graded).

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p TIMED_TOKENS 128`).
TIMED_TOKENS = 64  # tokens per timed generation
SMOLLM2_TOKENS = 8  # tokens per timed generation of SmolLM2

# %%
import torch

from course import choosing_a_technique as technique
from course import learner_server, smollm2_timing, technique_guide, timing, withheld
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
the_rule = technique.course_answer("fine_tuning_advice")  # the course's answer to the exercise
for scenario in technique_guide.SCENARIOS:
    try:
        yours = fine_tuning_advice(scenario.need, scenario.changes_often, scenario.tried_prompting)
    except NotImplementedError:
        yours = "(not written yet)"
    rule = the_rule(scenario.need, scenario.changes_often, scenario.tried_prompting)
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
# When memory is short, drop precision before parameters. A 48 GiB GPU holds the weights of a 70B
# model in 4 bits (35 GB, which is 32.6 GiB) or of an 8B model in 16 bits (16 GB, 14.9 GiB), each
# within the 80% of its memory that the guide below leaves to the weights (38.4 GiB; the rest holds
# activations and the KV cache). A 40 GiB GPU does not hold the 70B model: 32.6 GiB is more than
# the 32 GiB it leaves to the weights. (Scales add a little: with one fp16 scale per 64 weights,
# 4.25 bits, the 70B model takes 34.6 GiB, still within 38.4.) The large model in 4 bits,
# calibrated (chapter 3), usually answers better, because quantization keeps what the larger model
# learned at a small cost in each weight, while the smaller model never learned it. Chapter 3
# measured that cost on the course model: at 4 bits with GPTQ, well under a hundredth of a nat per
# byte.
#
# ### Try it
#
# Describe a situation: the problem, the model's size, the GPU's memory. The guide answers with
# the first technique to try and why, using chapter 1's and chapter 2's arithmetic for the memory;
# tick "done that" to see what comes after it. Try a 70B model to serve on a 40 GiB GPU, then on a
# 48 GiB one; a 13B model to adapt on a 24 GiB GPU (16-bit weights do not fit: QLoRA), then on an
# 80 GiB one.

# %%
plots.widget_guide()

# %% [markdown]
# ## 3. The capstone: cheaper and faster within a budget
#
# Serve the course's target (4.3M parameters, 17.2 MB in float32) more cheaply and faster, by
# combining what the chapters built: weights stored in fewer bits, with calibrated codes
# (chapter 3), the KV cache (chapter 4, always on) and speculative decoding with a draft
# (chapters 6 and 7). The budget has three parts, each a figure computed exactly so:
#
# * **bytes**: the weights the server holds, the target's as stored (codes, scales, the float32
#   embedding and norms) plus the draft's (float32), take **at most 3.7 MB**;
# * **quality**: the target's held-out loss stays **within 0.0025 nats/byte** of the float32
#   target's. The loss is the mean next-byte cross-entropy over 16 fixed windows of 256 bytes of
#   the held-out plays (4,096 predictions, each counted once);
# * **speed, modelled**: the **modelled speed-up is at least 1.9**. Greedy decoding of 64 new
#   tokens after each of 3 fixed held-out prompts of 32 bytes is run through the real speculative
#   loop and its target calls counted. The tokens per target call are all the new tokens (192)
#   divided by all the target calls (a ratio of sums, not a mean of the three prompts' ratios). Each
#   target call follows k draft calls, and the budget counts a draft call as a quarter of a target
#   call (c = 0.25): the modelled speed-up is tokens per call / (1 + 0.25 k), chapter 6's formula
#   with the tokens per call counted instead of expected. Without a draft it is 1.
#
# These three figures are deterministic: bytes are counted from the stored tensors, the loss and
# the tokens come from fixed text and greedy decoding with every product in float32. So they are
# graded, and the grader recomputes them from your configuration. The wall-clock speed-up depends
# on your machine and on what else runs on it: it is measured and reported, not graded.
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
# ### Your turn: `Int4Linear`, the stored layer
#
# Write the layer a server keeps: `Int4Linear(weight, group_size, codes=None, scale=None)` takes a
# float `(out, in)` weight and keeps **only two tensors**, registered as buffers
# (`self.register_buffer(name, tensor)`):
#
# * `codes`: chapter 3's symmetric 4-bit codes, `round(weight / scale)` with `scale` the absmax of
#   each group of `group_size` consecutive columns divided by 7, packed with **your** `pack_int4`:
#   `torch.uint8`, shape `(out, in // 2)`;
# * `scale`: those scales in `torch.float16`, shape `(out, in // group_size)`.
#
# One scale per row is `group_size` equal to the number of columns. Rounding to nearest is one
# way to choose codes; chapter 3's GPTQ chooses them with calibration text and gives codes and
# scales of its own. So when `codes` (signed integers in [-8, 7], shape `(out, in)`) and `scale`
# (floats, shape `(out, in // group_size)`) are given, keep those, packed and in float16, instead
# of rounding the weight.
#
# `forward(x)` rebuilds the float32 weight from the two buffers (the high nibble holds the first
# code of each pair: `(byte >> 4) - 8`, then `(byte & 15) - 8`) and returns `x @ W.T`, for `x` of
# any leading shape. Compute rounded codes from the float32 scale, as chapter 3 does, then keep the
# scale in float16 (codes from the float16 scale are accepted too). The grader builds your layer on
# random matrices, then serves the course's whole target through it twice: every linear layer an
# `Int4Linear(weight, 64)`, then an `Int4Linear(weight, 64, codes=codes, scale=scale)` given GPTQ's
# codes and scales, in groups of 64 too; the held-out loss and the bytes are computed through your
# layers.


# %% nbgrader={"grade": false, "grade_id": "int4_linear", "locked": false, "schema_version": 3, "solution": true}
class Int4Linear(torch.nn.Module):
    """A bias-free linear layer kept as packed 4-bit codes and one float16 scale per group."""

    def __init__(self, weight, group_size=64, codes=None, scale=None):
        super().__init__()
        ### BEGIN SOLUTION
        if codes is None:  # round to nearest; otherwise keep the codes and scales given (GPTQ's)
            rows, cols = weight.shape
            grouped = weight.detach().float().reshape(rows, cols // group_size, group_size)
            scale = grouped.abs().amax(dim=-1) / 7  # (rows, groups)
            safe = torch.where(scale > 0, scale, torch.ones_like(scale))
            codes = torch.round(grouped / safe[..., None]).clamp(-7, 7).reshape(rows, cols).to(torch.int32)
        self.register_buffer("codes", pack_int4(codes))
        self.register_buffer("scale", scale.half())
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        high, low = (self.codes >> 4).to(torch.int32) - 8, (self.codes & 15).to(torch.int32) - 8
        codes = torch.stack([high, low], dim=-1).reshape(self.codes.shape[0], -1)  # (out, in)
        rows, cols = codes.shape
        grouped = codes.float().reshape(rows, self.scale.shape[1], -1) * self.scale.float()[..., None]
        return x @ grouped.reshape(rows, cols).T
        ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_int4_linear", "locked": true, "points": 7, "schema_version": 3, "solution": false}
check("int4_linear")
### BEGIN HIDDEN TESTS
check("int4_linear", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The target stored in each format, its bytes counted from the tensors a checkpoint of it would
# hold (the tied embedding, which is also the output layer, and the norms stay in float32 in every
# format), and its loss on held-out text (`course.stored_weights.StoredLinear` stores the
# other formats the same way, codes and scales only):

# %%
for row in technique.format_table():
    name = row["weights"] + (f" g{row['group_size']}" if row["group_size"] else "")
    print(
        f"{name:9s} {row['bytes'] / 1e6:6.2f} MB = {100 * row['share']:5.1f}% of fp32 ({row['bits']:6.3f} bits per "
        f"linear weight); held-out loss {row['loss']:.4f} nats/byte ({row['loss_gap']:+.4f})"
    )

# %% [markdown]
# The bytes are the target's alone: a server with a draft also holds the draft's float32 weights.
# The bits per linear weight count the scales, one fp16 scale per row or per group in every format
# with codes: int4 and nf4 in groups of 64 both take 4 + 16/64 = 4.25 bits. Chapter 3 priced NF4
# at 4.5 bits because it counted QLoRA's layout, whose absmax per 64 weights is fp32: 32/64 = 0.5
# bits of scale (4.127 in all with QLoRA's double quantization). The levels are the same; only
# the width of the scale differs.
# The losses are those of codes rounded to nearest; calibrated codes (GPTQ) take the same bytes
# and change the loss, and the widget below computes them for any format GPTQ can calibrate.
# GPTQ lowers what it measures, the layers' output error on its calibration text, to 30% of
# rounding's in groups of 32 as in groups of 64; but a loss change of a few thousandths of a nat
# also holds a first-order term, the held-out text's gradient times the change of the weights,
# which calibration never sees and which moves with the exact codes by as much as the whole gap:
# on the course model it is +0.0026 of GPTQ's +0.0033 in groups of 32, and −0.0006 in groups of 64.
# 2-bit codes have three levels (-1, 0, +1 times the scale): compare their loss with the budget's.
#
# ### Your turn: `speculative_greedy`, the loop
#
# Write `speculative_greedy(target, draft, prompt, k, new_tokens)`: greedy speculative decoding
# with a KV cache in **each** model (chapter 4's cache, chapter 6's loop at temperature 0).
# `prompt` is a `torch.long` tensor of shape `(1, T)`, the prompt's token ids (a batch of one, as
# the models take them); `k` and `new_tokens` are ints. The
# models have the course model's interface, and only that (they are not `nn.Module`s: no
# `parameters()`; they run on the CPU): `model(tokens, cache)` returns logits `(1, T, vocab)` for
# the `(1, T)` tokens fed (a `torch.long` tensor) and appends their keys and values to `cache`;
# `model.new_cache(1, max_len)` makes an empty cache for up to `max_len` positions (the prompt,
# the new tokens and one round's `k + 1` are enough), whose `length` counts the positions cached;
# setting `cache.length` to a smaller number drops the positions after it. Each round:
#
# 1. the draft proposes `k` tokens, one at a time, each its greedy choice, fed only what its cache
#    has not seen;
# 2. the target scores the tokens its cache has not seen plus the `k` guesses in **one call**;
# 3. keep the guesses up to the first that differs from the target's own greedy choice, then the
#    target's choice at that position (after `k` accepted guesses: its next token);
# 4. roll both caches back to the positions kept, so that no rejected guess stays in them.
#
# Return the prompt's tokens followed by exactly `new_tokens` new ones, as a list of ints: exactly
# the target's greedy decoding, whatever the draft. The grader runs your loop on the course's
# target and drafts, counts the target's calls and the positions each model is fed.


# %% nbgrader={"grade": false, "grade_id": "speculative_greedy", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def speculative_greedy(target, draft, prompt, k, new_tokens):
    """The prompt's tokens and new_tokens more, greedy, the draft proposing k per target call.

    prompt: a (1, T) torch.long tensor of token ids; returns a list of T + new_tokens ints.
    """
    ### BEGIN SOLUTION
    tokens = prompt[0].tolist()
    goal = len(tokens) + new_tokens
    target_cache, draft_cache = target.new_cache(1, goal + k + 1), draft.new_cache(1, goal + k + 1)
    while len(tokens) < goal:
        n, proposed = len(tokens), []
        fresh = tokens[draft_cache.length :]
        for _ in range(k):
            logits = draft(torch.tensor([fresh]), draft_cache)[0, -1]
            proposed.append(int(logits.argmax()))
            fresh = proposed[-1:]
        feed = tokens[target_cache.length :] + proposed
        choices = target(torch.tensor([feed]), target_cache)[0, -(k + 1) :].argmax(-1).tolist()
        accepted = 0
        while accepted < k and proposed[accepted] == choices[accepted]:
            accepted += 1
        tokens += proposed[:accepted] + [choices[accepted]]
        target_cache.length = n + accepted
        draft_cache.length = min(draft_cache.length, n + accepted)
    return tokens[:goal]
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_speculative_greedy", "locked": true, "points": 6, "schema_version": 3, "solution": false}
check("speculative_greedy")
### BEGIN HIDDEN TESTS
check("speculative_greedy", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Choose a configuration
#
# A configuration is five choices:
#
# * `weights`: `"fp32"`, `"fp16"`, `"int8"`, `"int4"`, `"nf4"` or `"int2"`;
# * `group_size`: `None` (one scale per row), `32` or `64` for the formats with scales, `None`
#   for fp32 and fp16;
# * `calibration`: `"none"` (codes rounded to nearest) or `"gptq"` (chapter 3's GPTQ, its
#   Hessians from the float32 target reading 32 windows of the training plays; for the absmax
#   formats int8, int4 and int2);
# * `draft`: `"none"`, `"draft"` (trained on the text, chapter 6) or `"distilled"` (chapter 7);
#   the drafts stay in float32 (315,552 parameters: 1.26 MB);
# * `draft_length`: the tokens drafted per target call, 1 to 8.
#
# Explore first. The left panel places each weight format by the bytes served (with the draft you
# chose) and the loss; the right one shows the modelled speed-up of each draft for every k, with
# the target in your weight format. Those curves come from one greedy run per prompt: a greedy
# round keeps the draft's guesses while they equal the target's own greedy tokens, so knowing
# where the two agree is enough to count the calls of every k. A longer k yields more tokens per
# target call and costs more draft calls: chapter 6's trade-off between alpha and c.

# %%
plots.widget_capstone()

# %% [markdown]
# ### Your turn: `capstone_configuration`
#
# Return your configuration as a dict with the keys `weights`, `group_size`, `calibration`,
# `draft` and `draft_length`. The checks measure it (a few seconds for a configuration not measured
# yet, more with GPTQ) and say which part of the budget it meets.


# %% nbgrader={"grade": false, "grade_id": "capstone_configuration", "locked": false, "schema_version": 3, "solution": true}
def capstone_configuration():
    """The configuration you submit: a dict with the keys weights, group_size, calibration, draft, draft_length."""
    ### BEGIN SOLUTION
    return {"weights": "int4", "group_size": None, "calibration": "gptq", "draft": "distilled", "draft_length": 4}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_capstone_configuration", "locked": true, "points": 6, "schema_version": 3, "solution": false}
check("capstone_configuration")

# %% [markdown]
# Your configuration, measured the way the grader measures it: the real speculative loop with
# the stored target and both KV caches, greedy, on the held-out prompts. The chart marks it with the
# star (the widget above starts from fp32 without a draft, wherever you left it); without a draft
# the right panel has no star, since every call then yields one token whatever k.

# %%
try:
    chosen = technique.Configuration.from_dict(capstone_configuration())
except NotImplementedError:
    chosen = technique.Configuration()
    print(
        "capstone_configuration() is not written yet (it raises NotImplementedError); measuring the fp32 target alone"
    )
except ValueError as problem:  # Configuration's own messages say which key is wrong and what it takes
    chosen = technique.Configuration()
    print(f"capstone_configuration(): {problem}; measuring the fp32 target alone instead")
try:
    figures = technique.measure(chosen)
except withheld.NotRecorded:  # the learners' copy holds the loop's figures of the configurations it was released with
    figures = technique.counted_figures(chosen)
    if chosen.draft != "none":  # without a draft every target call yields one token: nothing is counted
        print("(this copy of the course holds the loop's runs of a few configurations only: these tokens per call")
        print(" are counted from where the draft agrees with the target, which is the loop's count)")
passed = all(figures.within().values())
print(f"{chosen.label()}: {figures.summary()}")
for part, met in figures.within().items():
    print(f"  {part.replace('_', ' ')}: {'within the budget' if met else 'over the budget'}")
if chosen.draft != "none":  # the count read off the agreements (in the learners' copy, where it counted, the same)
    curve = technique.draft_curves(*chosen.format)[chosen.draft][chosen.draft_length - 1]
    print(f"  tokens per call from where the draft agrees with the target, without the loop: {curve:.2f}")
plots.plot_capstone(chosen.weights, chosen.group_size, chosen.draft, chosen.draft_length, chosen.calibration)

# %% [markdown]
# ### Your server, timed here
#
# Your own server: the course's target with every linear layer an `Int4Linear` of yours and your
# `speculative_greedy`, with your configuration's group size, calibration, draft and draft length
# (groups of 32, chapter 6's draft or k = 2 where your configuration has none), against the float32 target
# decoding alone with its KV cache. Your layer rebuilds its float32 matrix on every call, in
# separate torch operations; on a CPU that can cost more than the bytes it saves. So the same codes
# and scales are timed a second way, through torch's fused int4 matrix product
# (`torch.ops.aten._weight_int4pack_mm_for_cpu`; `_weight_int4pack_mm` on CUDA; wrapped by
# `course.kernels.int4`), which reads the codes four bits at a time inside the product: stored
# codes pay only with such a kernel; there, the layers that read the same input (q, k and v; gate
# and up) share one product, as serving engines fuse them: the same numbers in fewer calls. Each
# generation is timed on the first held-out prompt, at the thread count that suits this machine
# best, and the spread of the repeats is printed. The last line compares your server with the
# fused product of the same codes and loop, and times one token through all the linear layers both
# ways, to say where the gap comes from. Until your `Int4Linear` and `speculative_greedy` are both
# written, the cell says so and leaves your server out.

# %%
served = technique.Configuration(
    "int4",
    chosen.group_size if chosen.weights == "int4" else 32,
    chosen.draft if chosen.draft != "none" else "draft",
    chosen.draft_length if chosen.draft != "none" else 2,
    chosen.calibration if chosen.weights == "int4" else "none",
)
print(f"your server: {served.label()}")
server_threads, tried = timing.choose_threads(learner_server.baseline(TIMED_TOKENS), device)
print(timing.describe_threads(server_threads, tried))
missing = learner_server.not_written(Int4Linear, speculative_greedy)
if missing:
    one = len(missing) == 1
    print(
        f"Your {' and '.join(missing)} {'is' if one else 'are'} not written yet: your server is left out of the "
        f"timing (write {'it' if one else 'them'}, then run this cell again)."
    )
else:
    server = learner_server.LearnerServer(
        Int4Linear, speculative_greedy, served.group_size, served.draft, served.draft_length, served.calibration
    )
    if server.note:
        print(server.note)
    with timing.threads(server_threads):
        server_times, layer_times = server.time(TIMED_TOKENS), server.layer_seconds()
    print(learner_server.server_reading(server_times, TIMED_TOKENS))
    print(learner_server.gap_reading(server_times, layer_times))

# %% [markdown]
# The course's target is small: at a few hundred kilobytes a layer, every product's fixed costs
# weigh as much as its bytes. Chapter 8's SmolLM2-135M has layers of up to 28 MB (its output layer).
# Your `Int4Linear` makes the codes of SmolLM2's own weights here: rounded to nearest (no GPTQ),
# in your configuration's groups, or groups of 64 where it has one scale per row. They serve every
# linear layer of its decoder and its output layer, through the fused product, against float32,
# greedy, at the same thread count:

# %%
from course import pretrained

if "Int4Linear" in missing:
    print("Your Int4Linear is not written yet: SmolLM2 is left out (write it, then run this cell again).")
else:
    try:
        with timing.threads(server_threads):
            smollm2_times = smollm2_timing.smollm2_time(Int4Linear, served.group_size or 64, SMOLLM2_TOKENS)
    except pretrained.MissingPackage as absent:
        print(f"SmolLM2 is not installed here, so this part is left out: {absent}")
    else:
        print(learner_server.server_reading(smollm2_times, SMOLLM2_TOKENS, record=False))

# %% [markdown]
# How to read it. Speculative decoding saves target calls: each call verifies several tokens for
# about the price of one, as long as decoding waits on memory. Stored codes save bytes, and turn
# into speed only where the product reads them directly: fused low-bit kernels (torch's int4
# products, bitsandbytes, llama.cpp, Marlin, torchao) dequantize inside the matrix product, as each
# block of codes arrives: torchao reports Llama-2-7B on an A100 nearly doubling its decoding speed
# with int4 weights (107 tokens/s in bf16, 201 in int4). The figures the budget grades do not
# depend on any of this. The line of your server's cell that starts with "measured speed-up over the
# fp32 target:" is what the class leaderboard reports beside your graded figures (save the notebook
# with its outputs): it is never graded.
#
# ## In practice
#
# * **Serving engines** combine all of it: vLLM serves GPTQ, AWQ or bitsandbytes weights with a
#   paged KV cache, continuous batching and speculative decoding (a draft model, n-gram lookup,
#   or EAGLE heads); llama.cpp stores 4-bit codes with a scale per block of 32 (its Q4 formats).
# * **transformers**: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")` to
#   load in NF4, `generate(..., assistant_model=draft)` for speculation, and peft's
#   `get_peft_model` for LoRA on top of a 4-bit base (QLoRA).
# * What the capstone leaves out: AWQ (calibration that rescales the channels activations use
#   most), GPTQ's act-order, quantized drafts and embeddings, and batching.
#
# ## Closing note: the course's configuration
#
# Once your configuration is within the budget, the cell below shows the figures of the course's own
# configuration beside yours (its stored reference numbers; a copy of the course given for credit
# leaves them out, since they would name it, and says so), and how many configurations pass; until
# then it says what is still over.

# %%
if passed:
    print(f"yours:        {chosen.label()}: {figures.summary()}")
    print(f"the course's: {technique.stored_reference_reading()}")
    print(technique.stored_count_reading())
else:
    over = [part.replace("_", " ") for part, met in figures.within().items() if not met]
    print(f"{chosen.label()} is over the budget on: {', '.join(over)}; the course's answer shows once it is within")

# %% [markdown]
# ## Check yourself
#
# 1. A team wants the model to answer from a wiki that changes every day. What first, and why not
#    fine-tuning?
# 2. Which of the table's techniques can be turned on without evaluating quality again?
# 3. Why does int8 miss the capstone's bytes budget even without a draft?
# 4. Why does the choice of draft change the tokens per call but not the held-out loss?
#
# <details><summary>Answers</summary>
#
# 1. Retrieval: knowing documents is its job, and a wiki that changes daily would need training
#    every day.
# 2. The KV cache, FlashAttention-style kernels and speculative decoding: their outputs are those
#    of the model without them (exactly, or exactly in distribution).
# 3. Its codes alone take a byte for each of the target's 4.2M linear weights, 4.2 MB; the scales
#    and the float32 embedding and norms bring the target to 4.5 MB, over 3.7 MB before any draft.
# 4. The output follows the target's distribution whatever the draft; the draft only decides how
#    many of its guesses each target call accepts.
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

quiz.show("choosing_a_technique")


# %% nbgrader={"grade": false, "grade_id": "quiz_choosing_a_technique", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "d", 3: "a", 4: "d", 5: "b", 6: "c", 7: "b"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_choosing_a_technique", "locked": true, "points": 7, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_choosing_a_technique")
### BEGIN HIDDEN TESTS
check("quiz_choosing_a_technique", hidden=True)
### END HIDDEN TESTS
