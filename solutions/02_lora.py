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
# # Chapter 2: LoRA, adapting a model without paying for it
#
# Fine-tuning every weight of a 7B model takes about 104 GiB of memory for the weights and the
# optimiser's state: more than any single consumer GPU has. Yet the *change* fine-tuning makes
# to a weight matrix is usually simple: it can be written, almost exactly, as the product of two
# thin matrices. LoRA (Hu et al., 2021) trains only those two: the base model stays frozen, and
# the trainable part is small, 2r/d of each d x d layer it adapts (0.39% of a 4096 x 4096 layer at
# rank 8). QLoRA (Dettmers et al., 2023) then keeps the frozen base in 4 bits (chapter 3's NF4).
#
# You will:
#
# 1. count what a low-rank adapter trains (graded);
# 2. find, with the SVD, the best any rank-r adapter can do on a given change (graded);
# 3. build `LoRALinear`: a frozen layer plus a scaled low-rank update that merges back in (graded);
# 4. add up the memory of full fine-tuning, LoRA and QLoRA (graded);
# 5. train real adapters on the course model for a genre it has not seen, swap two of them on one
#    frozen base, and try QLoRA.
#
# Exercises are marked **Your turn**; run the check cell after each one. Once you have written an
# exercise, the cells and sliders that use it are drawn by your function (each cell says so);
# before that they show the course's numbers on the same inputs.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p ADAPT_STEPS 200`).
ADAPT_STEPS = 30  # training steps per adapter; 200 shows what longer training does (about six minutes)
RANKS = [1, 4, 16]  # the adapters' ranks in the comparison
EVAL_WINDOWS = 24  # 256-byte windows of held-out comedies per loss estimate

# %%
import copy

import torch

from course import checkpoints, corpus, evaluation, lora, quantization, timing
from course.device import best_device, describe
from course.plots import lora as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. Two thin matrices instead of one big change
#
# Fine-tuning turns a weight $W$ (shape $d_{out} \times d_{in}$) into $W + \Delta W$. LoRA writes
# the change as a product of rank $r$:
#
# $$ W' = W + \frac{\alpha}{r}\, B A, \qquad A \in \mathbb{R}^{r \times d_{in}}, \quad B \in \mathbb{R}^{d_{out} \times r}. $$
#
# $W$ is frozen; only $A$ and $B$ train: $r\,(d_{in} + d_{out})$ numbers instead of
# $d_{in}\, d_{out}$. For a 1000 x 1000 layer at $r = 8$ that is 16,000 numbers against a
# million; for a 4096 x 4096 projection, 65,536 against 16.8 million, 0.39%.
#
# ### Your turn: `lora_parameters`
#
# Write `lora_parameters(d_in, d_out, rank)`: the number of trainable numbers of a rank-`rank`
# adapter on a `d_in` -> `d_out` layer.
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
from torch import nn


# %% nbgrader={"grade": false, "grade_id": "lora_parameters", "locked": false, "schema_version": 3, "solution": true}
def lora_parameters(d_in, d_out, rank):
    """Trainable numbers of a rank-`rank` adapter on a d_in -> d_out layer."""
    ### BEGIN SOLUTION
    return rank * (d_in + d_out)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_lora_parameters", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from autograder import check

check("lora_parameters")
### BEGIN HIDDEN TESTS
check("lora_parameters", hidden=True)
### END HIDDEN TESTS

# %%
count = lora.yours(globals(), "lora_parameters", "this table")
for d, r in lora.SECTION_ROWS:  # (1000, 8), (4096, 8), (4096, 16), (8192, 64)
    trainable = count(d, d, r)
    print(f"{d} x {d} at rank {r:2d}: {trainable:>9,} trainable numbers, {100 * trainable / (d * d):.2f}% of the layer")

# %% [markdown]
# ## 2. How much rank does a change need? Ask the SVD
#
# Any matrix can be written as a sum of rank-one pieces ordered by size, its singular value
# decomposition $\Delta = \sum_i \sigma_i u_i v_i^\top$ with $\sigma_1 \ge \sigma_2 \ge \dots$.
# Keeping the $r$ largest pieces gives the **best** rank-$r$ approximation there is
# (Eckart-Young): no adapter of rank $r$, however it is trained, can get closer. Its relative
# error comes from the singular values alone:
#
# $$ \frac{\lVert \Delta - \Delta_r \rVert_F}{\lVert \Delta \rVert_F} = \sqrt{\frac{\sum_{i > r} \sigma_i^2}{\sum_i \sigma_i^2}} .$$
#
# ### Your turn: `best_low_rank_error`
#
# Write `best_low_rank_error(delta, rank)`, the relative error above, as a float.
# `torch.linalg.svdvals(delta)` returns the singular values, largest first.


# %% nbgrader={"grade": false, "grade_id": "best_low_rank_error", "locked": false, "schema_version": 3, "solution": true}
def best_low_rank_error(delta, rank):
    """Relative Frobenius error of the best rank-`rank` approximation of `delta`."""
    ### BEGIN SOLUTION
    s = torch.linalg.svdvals(delta.double())
    return math.sqrt((s[rank:].square().sum() / s.square().sum()).item())
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_best_low_rank_error", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("best_low_rank_error")
### BEGIN HIDDEN TESTS
check("best_low_rank_error", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Here is a change of rank 4 with a little noise on top (5% of its size), and the best error at a
# few ranks. The last line reads them: which rank gets down to the noise's own size, what the
# ranks below it leave, and what a larger rank buys.

# %%
change = lora.SECTION_CHANGE  # 64 x 64, rank 4, noise 5% of the change, seed 0
shown = lora.SECTION_RANKS  # [1, 2, 4, 8, 32]
errors = lora.your_rank_errors(globals(), "these errors")(**change, ranks=shown)  # best_low_rank_error at each
for r, error in zip(shown, errors, strict=True):
    print(f"rank {r:2d}: best possible error {100 * error:5.1f}%")
print(lora.rank_reading(dict(zip(shown, errors, strict=True)), lora.noise_share(**change)))

# %% [markdown]
# ### Try it
#
# Move the sliders. Raise the true rank: the knee moves with it. Raise the noise: the floor
# rises and the knee softens. Real fine-tuning changes look like the noisy case, with a few large
# directions on top of a long tail; the LoRA paper found ranks as small as 1 to 8 enough for
# GPT-3's attention weights.

# %%
plots.widget_rank_error(
    lora.your_rank_errors(globals(), "the sliders' chart"),
    lora.yours(globals(), "lora_parameters", "the count in its title"),
)

# %% [markdown]
# ## 3. `LoRALinear`: a frozen layer plus a low-rank update
#
# The adapter wraps the base layer rather than copying it:
#
# $$ y = \text{base}(x) + \frac{\alpha}{r}\, x A^\top B^\top $$
#
# Two details make it work:
#
# * **B starts at zero**, so $BA = 0$ and the adapted model starts exactly where the pretrained
#   one is. ($A$ starts random, or the gradient of $B$ would be zero too.)
# * **The scale $\alpha / r$** keeps the update's size about the same when you change the rank,
#   so a learning rate tuned at one rank still works at another. $\alpha$ defaults to $r$ (scale 1).
#
# Once trained, the update can be **merged**: $W + \frac{\alpha}{r} BA$ is an ordinary matrix of
# the same shape, so the merged layer costs nothing extra at inference.
#
# ### Your turn: `LoRALinear`
#
# Write the class `LoRALinear(base, rank, alpha=None)`:
#
# * freeze the base layer's parameters (`requires_grad_(False)`) and keep the layer itself as
#   `self.base`;
# * `self.lora_A`: an `nn.Parameter` of shape `(rank, base.in_features)`, random (for example
#   `torch.randn(...) / math.sqrt(base.in_features)`); the check trains your adapter for two
#   steps and expects both factors to get a gradient;
# * `self.lora_B`: an `nn.Parameter` of shape `(base.out_features, rank)`, zeros;
# * `forward(x)`: the formula above, for `x` of shape `(..., in_features)`;
# * `merge()`: a **new** `nn.Linear` with weight `base.weight + (alpha / rank) * lora_B @ lora_A`
#   and the base's bias; the base layer itself must not change, other adapters may share it.


# %% nbgrader={"grade": false, "grade_id": "lora_linear", "locked": false, "schema_version": 3, "solution": true}
class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable update (alpha / rank) * B A."""

    def __init__(self, base, rank, alpha=None):
        super().__init__()
        ### BEGIN SOLUTION
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.scale = (rank if alpha is None else alpha) / rank
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)
        ### END SOLUTION

    def merge(self):
        ### BEGIN SOLUTION
        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        with torch.no_grad():
            merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                merged.bias.copy_(self.base.bias)
        return merged
        ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_lora_linear", "locked": true, "points": 6, "schema_version": 3, "solution": false}
check("lora_linear")
### BEGIN HIDDEN TESTS
check("lora_linear", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Can a trained adapter find the SVD's answer? Give a rank-4 adapter a 64 x 64 layer whose target
# is the base plus a rank-4 change, and train only $A$ and $B$ (Adam, 400 steps) to match its
# outputs: `lora.learned_change` in `course/lora.py` does it, with your `LoRALinear` once it is
# written. The experiments of sections 5 to 7 take your class the same way; until it is written,
# they show the numbers of the course's own `LoRALinear`, recorded on the same settings.

# %%
your_layer = lora.your_layer(globals(), "this experiment")  # your LoRALinear, once it builds, runs and merges
learned = lora.experiment("learned_change", your_layer)
print(
    f"error of the change the adapter learned: {100 * learned['error']:.2f}% "
    "(the change has rank 4 exactly: the SVD's floor at rank 4 is 0)"
)
print(f"the base weight is untouched: {learned['untouched']}")

# %% [markdown]
# ## 4. The memory bill of fine-tuning
#
# Training with Adam keeps, for every trainable parameter, the weight, its gradient and two
# moments, and mixed-precision training adds an fp32 master copy of the weight:
#
# | | bytes per parameter | 7B model |
# | --- | --- | --- |
# | full fine-tune: bf16 weights 2 + bf16 gradients 2 + fp32 Adam moments 8 + fp32 master copy 4 | 16 | 104 GiB |
# | LoRA: frozen bf16 weights, no gradients or moments for them | 2 | 13 GiB |
# | QLoRA: frozen NF4 weights (chapter 3) | 0.5 | 3.3 GiB |
#
# The adapters' own weights, gradients and moments are left out: well under 1% of the model.
# Activations come on top of all three and grow with batch and sequence length. (Without the
# master copy full fine-tuning is 12 bytes, 78 GiB for 7B: still past any single consumer GPU.)
#
# ### Your turn: `finetune_memory_gib`
#
# Write `finetune_memory_gib(params, method)` for `method` in `"full"`, `"lora"`, `"qlora"`,
# in GiB (2**30 bytes), with the bytes per parameter of the table.


# %% nbgrader={"grade": false, "grade_id": "finetune_memory", "locked": false, "schema_version": 3, "solution": true}
def finetune_memory_gib(params, method):
    """GiB of weights plus training state: "full" (Adam, master copy), "lora" or "qlora"."""
    ### BEGIN SOLUTION
    per_parameter = {"full": 2 + 2 + 8 + 4, "lora": 2, "qlora": 0.5}
    return params * per_parameter[method] / 2**30
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_finetune_memory", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("finetune_memory")
### BEGIN HIDDEN TESTS
check("finetune_memory", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Try it
#
# Which methods fit a 13B model on a 24 GiB card? What does it take to fully fine-tune a 70B
# model, and how many 80 GiB GPUs is that before a single activation? The bars stack the table's
# bytes per parameter; the totals above them are your function's once it is written.

# %%
plots.widget_finetune_memory(lora.yours(globals(), "finetune_memory_gib", "the totals above the bars"))

# %% [markdown]
# ## 5. Adapting the course model to comedies
#
# The course's target model (4.3M parameters, chapter 1) was trained on Shakespeare's histories
# and tragedies; the comedies were held out. They are a new domain for it: more prose, more
# banter, other names. Six comedies are for adapting, two others (*Much Ado About Nothing* and
# *Twelfth Night*) for measuring.
#
# We put one adapter on each attention projection (`q_proj`, `k_proj`, `v_proj`, `o_proj`) of all
# six layers and train it on the six comedies, at several ranks (`lora.comedy_adapter` in
# `course/lora.py`: `make_adapter` wraps each projection in your class, `use_adapter` swaps it in,
# `finetune` trains the adapter's factors with AdamW). For reference, the same number of steps of
# full fine-tuning (every weight trains). The numbers are losses on the two unseen
# comedies in nats per byte; lower is better. The default 30 steps are a quick look;
# `-p ADAPT_STEPS 200` shows what longer training does. The course model's layers are narrow (256
# wide, 64 for `k_proj` and `v_proj`), so an adapter is a larger share of it than of a large
# model's (2r/d of a d x d layer): the share is printed beside each rank.

# %%
target = checkpoints.load("target").to(device)
adapt_text = corpus.domain_tokens("adapt")
eval_text = corpus.domain_tokens("eval")


def comedy_loss(model):
    return evaluation.text_loss(model, eval_text, max_windows=EVAL_WINDOWS)


print(timing.pin_threads(lambda: evaluation.text_loss(target, eval_text, max_windows=4), device))
base_loss = comedy_loss(target)
your_layer = lora.your_layer(globals(), "these adapters")
adapted = {rank: lora.experiment("comedy_adapter", your_layer, rank, ADAPT_STEPS, EVAL_WINDOWS) for rank in RANKS}
rank_losses = {rank: result["loss"] for rank, result in adapted.items()}

full_model = copy.deepcopy(target)
lora.finetune(full_model, list(full_model.parameters()), adapt_text, ADAPT_STEPS, lr=3e-4, description="full fine-tune")
full_loss = comedy_loss(full_model)
del full_model

print(f"base model:         {base_loss:.3f} nats/byte")
for rank, result in adapted.items():
    print(
        f"LoRA rank {rank:2d}:       {result['loss']:.3f}  ({result['trainable']:,} trainable numbers, "
        f"{100 * result['trainable'] / target.num_parameters():.2f}% of the model)"
    )
print(f"full fine-tune:     {full_loss:.3f}  ({target.num_parameters():,} trainable numbers)")
print(f"base weights untouched by the adapters' training: {all(r['untouched'] for r in adapted.values())}")

# %%
gains = {rank: base_loss - loss for rank, loss in rank_losses.items()}
full_gain = base_loss - full_loss
print(
    "gain over the base model, nats/byte: "
    + "".join(f"rank {rank} {gain:+.3f}, " for rank, gain in gains.items())
    + f"full fine-tune {full_gain:+.3f}"
)
print(lora.gains_reading(gains, full_gain))
whose = "your LoRALinear" if your_layer else "the course's LoRALinear, recorded"
plots.plot_adapter_losses(base_loss, rank_losses, full_loss, adapters=f"LoRA ({whose})")

# %% [markdown]
# The printed gains say how far each adapter moved the model in this run, against full
# fine-tuning with the same number of steps. What shapes them: an adapter of rank r can only
# change each layer along r directions, and in a few steps it first finds the directions that
# matter most, so a small rank is not necessarily far behind (section 2 in miniature). A larger
# rank has room for more, and how much more it finds depends on how many steps it gets. Full
# fine-tuning changes every weight but needs a smaller learning rate to stay stable (3e-4 here,
# against 3e-3 for the adapters); the last line above compares its gain with the best adapter's
# in this run.
#
# Train longer and the order of the ranks can turn round: after 200 steps (measured once, on 2 CPU
# cores with the course's own `LoRALinear`) the loss on the unseen comedies was 1.455 at rank 1, 1.463 at rank 2, 1.489 at
# rank 4, 1.483 at rank 8, 1.500 at rank 16, 1.498 at rank 32 and 1.498 for full fine-tuning.
# The larger the update, the more it fits the six training comedies themselves (their
# characters, their plots) instead of what comedies share. A small rank is also a regulariser;
# in practice one tunes rank, learning rate and steps on held-out data from the new domain, as here.
#
# ## 6. Hot-swapping adapters on one frozen base
#
# Because an adapter only *wraps* the base layers, one base model can carry many adapters and
# switch between them per request by swapping module references: nothing is copied, and the
# base weights never change. A server keeps one copy of the base in memory and one small adapter
# per customer or task.
#
# A second adapter, for a domain with an obvious signature: the same comedies set in capitals.
# Then the prompt goes to the base, the comedy adapter and the capitals adapter in turn, on one
# base model (`lora.swapped_adapters` in `course/lora.py`). For each text we count how many of its
# words are real ones (words that occur in the comedies, in capitals for the capitals adapter):

# %%
your_layer = lora.your_layer(globals(), "the adapters that swap here")
swapped = lora.experiment("swapped_adapters", your_layer, ADAPT_STEPS, EVAL_WINDOWS)
for text in swapped["texts"]:
    print(f"--- {text['adapter']} ({text['real']} of {text['words']} words are real) ---\n{text['text']}\n")
print(
    f"base weights identical after training the comedy and capitals adapters and switching {swapped['switches']} "
    f"times: {swapped['untouched']}; held-out comedies in capitals: {swapped['capitals_before']:.2f} nats/byte for "
    f"the base, {swapped['capitals_after']:.2f} with the capitals adapter (the same comedies in ordinary case: "
    f"{base_loss:.2f} for the base)"
)

# %% [markdown]
# Why the capitals adapter writes words that look like words but mostly are not: to a byte-level
# model "THE" and "the" have no byte in common. Everything it learned about spelling is tied to
# the lowercase bytes, and capital letters were, in its training plays, almost only the first
# letters of lines and the speakers' names. The adapter sits in the attention layers and cannot
# change the embedding that turns bytes into vectors, nor the output layer tied to it. In a few
# steps it learns the obvious part, that every letter is now a capital, and the shape of words
# (their lengths, which letters are common), but not the spelling of each word in its new bytes.
# The printed losses say how far it got: well down from the base's on capitals, still far above
# the base's on ordinary text. Capitals are an extreme domain shift for a byte-level model, chosen
# to make switching adapters visible, not an easy adaptation.
#
# %% [markdown]
# Merging is the other option: fold one adapter into the weights and serve the merged model with
# no extra work per token, at the price of one copy of the model per adapter. Merged correctly,
# every adapted layer of the model gives the same outputs up to rounding; the line below measures
# it for the rank-4 comedy adapter, each layer replaced by its `merge()` (`lora.merge_difference`):

# %%
your_layer = lora.your_layer(globals(), "the merged model")
difference = lora.experiment("merge_difference", your_layer, ADAPT_STEPS)
print(f"largest logit difference, merged vs adapter: {difference:.2e}")

# %% [markdown]
# ## 7. QLoRA: the frozen base in 4 bits
#
# QLoRA stores the frozen base in NF4 (chapter 3), dequantizing each weight on the fly for the
# matrix product, and trains the adapters in 16 bits on top. Here the base's linear layers go
# through NF4 with groups of 64 (simulated: the rounded weights are kept as floats), and a
# rank-4 adapter trains on top (`lora.qlora_loss`). The last line reads what NF4's rounding costs the base and how
# much of it the adapter makes up.

# %%
nf4_base = quantization.quantize_model(target, "nf4", 64)
nf4_loss = comedy_loss(nf4_base)
your_layer = lora.your_layer(globals(), "the QLoRA adapter")
qlora_loss = lora.experiment("qlora_loss", your_layer, ADAPT_STEPS, EVAL_WINDOWS)
lora_loss = lora.experiment("comedy_adapter", your_layer, 4, ADAPT_STEPS, EVAL_WINDOWS)["loss"]
print(f"NF4 base:           {nf4_loss:.3f} nats/byte (fp32 base {base_loss:.3f})")
print(f"QLoRA rank 4:       {qlora_loss:.3f}            (LoRA rank 4 on the fp32 base {lora_loss:.3f})")
print(lora.qlora_reading(base_loss, nf4_loss, lora_loss, qlora_loss))

# %% [markdown]
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 2](08_in_practice.ipynb#chapter-2) trains peft adapters and a bitsandbytes QLoRA on SmolLM2-135M, checked against `LoRALinear`.
# * **peft**: `LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])` and
#   `get_peft_model(model, config)` wrap the named layers as you did; `model.merge_and_unload()`
#   merges; `load_adapter(...)` and `set_adapter(name)` hot-swap adapters on one base.
# * **bitsandbytes**: `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
#   bnb_4bit_use_double_quant=True)` loads the frozen base in NF4 for QLoRA; peft's
#   `prepare_model_for_kbit_training` sets it up for training.
# * Servers such as **vLLM** and **LoRAX** serve many LoRA adapters over one base model, batching
#   requests for different adapters together.
#
# ## Check yourself
#
# 1. Why is B initialised to zero, and why must A not be?
# 2. A 4096 x 4096 layer gets a rank-16 adapter. What share of the layer trains?
# 3. A change has rank 4 plus a little noise. What does a rank-2 adapter achieve, and a rank-32?
# 4. Why does QLoRA fit a 7B fine-tune on a 24 GiB GPU when full fine-tuning needs about 104 GiB?
# 5. When would you merge an adapter, and when keep it separate?
#
# <details><summary>Answers</summary>
#
# 1. B = 0 makes BA = 0, so training starts at the pretrained model. If A were zero too, both
#    gradients would be zero (each is proportional to the other factor) and nothing would train.
# 2. 16 x (4096 + 4096) = 131,072 of 16.8 million: 0.78%.
# 3. Rank 2 stays far above the noise's own size (it misses two of the four directions). Rank 4
#    gets down to about the noise's size; rank 32 gets lower only by fitting part of the noise,
#    which is no part of the change, with eight times the parameters.
# 4. No gradients or optimiser state for the frozen weights, and those weights in 4 bits:
#    0.5 bytes per parameter, about 3.3 GiB, against 16 bytes per parameter.
# 5. Merge to serve one adapter at full speed; keep them separate to serve many adapters from
#    one base, switching per request.
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

quiz.show("lora")


# %% nbgrader={"grade": false, "grade_id": "quiz_lora", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "c", 3: "d", 4: "b", 5: "d", 6: "a"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_lora", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_lora")
### BEGIN HIDDEN TESTS
check("quiz_lora", hidden=True)
### END HIDDEN TESTS
