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
# # Chapter 7: Distillation, and a better draft
#
# Chapter 6's speed-up rests on one number: how often the draft agrees with the target. The
# draft was trained on the text alone, to predict the next byte. **Knowledge distillation**
# (Hinton et al., 2015) trains it on something richer: the target's whole predicted distribution
# at every position. This chapter writes the distillation loss, compares a draft distilled from
# the target with the draft trained on hard labels, and ends with a short look at pruning.
#
# You will:
#
# 1. write the soft-target loss with a temperature (graded);
# 2. compare the two drafts: validation loss, acceptance rate and speed-up in chapter 6's loop;
# 3. write magnitude pruning (graded), then prune the target two ways and measure what each costs.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p NEW_TOKENS 300`).
NEW_TOKENS = 120  # tokens per speculative run
PROMPTS = 4  # held-out openings to generate from
DRAFT_LENGTH = 4
REPEATS = 3  # timed repeats; speed-ups are medians over them
EVAL_WINDOWS = 24  # 256-byte windows of held-out text per loss estimate

# %%
import torch

from course import checkpoints, corpus, distillation, evaluation, readings, speculative_decoding, timing, withheld
from course.device import best_device, describe
from course.model import generate
from course.plots import distillation as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. Soft targets
#
# A hard label says only which byte came next. The target's distribution says much more: after
# some contexts it puts nearly all its weight on one byte, after others it spreads it over the
# first letters of a few plausible words, in proportions that encode what it learned. The cell
# below prints the target's likeliest next bytes after two contexts. Matching that distribution
# gives the student a signal at every one of the 256 outputs, not one.

# %%
target = checkpoints.load("target").to(device)
with torch.no_grad():
    for context in ("KING HEN", "my lord, "):
        logits = target(corpus.encode(context)[None].to(device))[0, -1]
        print(distillation.next_byte_reading(context, torch.softmax(logits.double(), dim=-1).cpu()))

# %% [markdown]
# A **temperature** T > 1 softens both distributions, $\operatorname{softmax}(z / T)$, so that the
# small probabilities (which rival continuations are nearly right) weigh more. The loss is the
# KL divergence from the teacher's softened distribution to the student's, multiplied by $T^2$
# (the gradients of the softened distributions shrink like $1/T^2$; the factor keeps the loss's
# pull the same as T changes):
#
# $$ \mathcal{L} = T^2 \cdot \frac{1}{N} \sum_{\text{positions}} \sum_{x} p^T_{\text{teacher}}(x)\, \log \frac{p^T_{\text{teacher}}(x)}{p^T_{\text{student}}(x)} .$$
#
# For a draft, the aim is specific: speculative decoding accepts with the overlap of the two
# distributions at the sampling temperature, so the course's distilled draft was trained with
# T = 1 and the soft targets alone (`course.train`, schedule `distilled`: same architecture,
# steps, data and seed as the ordinary draft; only the loss differs).
#
# ### Your turn: `distillation_loss`
#
# Write `distillation_loss(student_logits, teacher_logits, temperature)` for logits of shape
# `(..., vocab)`: the formula above, averaged over all leading positions, as a 0-d tensor or a
# float. `torch.log_softmax` gives stable log-probabilities.
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


# %% nbgrader={"grade": false, "grade_id": "distillation_loss", "locked": false, "schema_version": 3, "solution": true}
def distillation_loss(student_logits, teacher_logits, temperature):
    """T^2 * KL(teacher || student) of the temperature-softened distributions, mean over positions."""
    ### BEGIN SOLUTION
    vocab = student_logits.shape[-1]
    student = torch.log_softmax(student_logits.reshape(-1, vocab) / temperature, dim=-1)
    teacher = torch.log_softmax(teacher_logits.reshape(-1, vocab) / temperature, dim=-1)
    return (teacher.exp() * (teacher - student)).sum(dim=-1).mean() * temperature**2
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_distillation_loss", "locked": true, "points": 4, "schema_version": 3, "solution": false}
from autograder import check

check("distillation_loss")
### BEGIN HIDDEN TESTS
check("distillation_loss", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Two drafts, one architecture
#
# Both drafts have 315,552 parameters and saw the same 1,500 batches. Their cards record how
# they were trained and their losses on the held-out plays:

# %%
drafts = {name: checkpoints.load(name).to(device) for name in ("draft", "distilled")}
print(timing.pin_threads(lambda: generate(target, corpus.encode("\n")[None].to(device), 32), device))
for name in drafts:
    card = checkpoints.card(name)
    teacher = card["training"].get("teacher") or "none (hard labels)"
    print(
        f"{name:9s} teacher: {teacher:18s} held-out plays {card['validation_loss']:.3f} nats/byte, "
        f"comedies {card['comedies_loss']:.3f}"
    )
print(f"target    held-out plays {checkpoints.card('target')['validation_loss']:.3f} nats/byte")

# %% [markdown]
# Is the distilled draft better at the draft's real job too? Its acceptance rate, measured
# directly as the overlap $\sum \min(p, q)$ of its next-byte distributions with the target's on
# held-out text, and then in chapter 6's loop:

# %% tags=["measures"]
held_out = corpus.tokens("validation")
windows = torch.stack(
    [held_out[s : s + 256] for s in torch.linspace(0, len(held_out) - 257, EVAL_WINDOWS).long().tolist()]
)
with torch.no_grad():
    p = torch.softmax(target(windows.to(device)).double(), dim=-1)
    overlap = {
        name: torch.minimum(p, torch.softmax(model(windows.to(device)).double(), dim=-1)).sum(-1).mean().item()
        for name, model in drafts.items()
    }
starts = (1000, 90_000, 200_000, 350_000)[:PROMPTS]
if speculative_decoding.copy_note():
    print(speculative_decoding.copy_note())
temperature, label = 1.0, "sampled"
loop = dict(repeats=REPEATS, formula=True)
measured = speculative_decoding.drafts_measured(
    ("draft model", "distilled draft"), starts, 64, DRAFT_LENGTH, NEW_TOKENS, temperature, **loop
)
results = dict(zip(drafts, measured.values(), strict=True))  # "draft", "distilled"
print(f"in the loop, timed on {results['draft']['machine']}:")
named = {"draft": "the hard-label draft", "distilled": "the distilled draft"}
for name, r in results.items():
    print(
        f"{name:9s} overlap with the target on held-out text {overlap[name]:.3f};  in the loop (k = {DRAFT_LENGTH}, "
        f"{len(starts)} prompts, {label}): acceptance {r['alpha']:.2f}, {r['tokens_per_call']:.2f} tokens per "
        f"call, c = {r['cost']:.2f} (repeats {timing.spread(r['costs']):.0%} apart), "
        f"speed-up {readings.spread(r['speedups'])}"
    )
    print("  " + distillation.acceptance_reading(named[name], overlap[name], r))
    print("  " + readings.against_one(r["speedups"], named[name], "the target alone"))
gain = overlap["distilled"] - overlap["draft"]
print(
    f"distillation changed the overlap by {gain:+.3f} ({'more' if gain > 0 else 'less'} agreement with the target) "
    f"and the acceptance in the loop by {results['distilled']['alpha'] - results['draft']['alpha']:+.2f}; "
    + "in the loop, "
    + readings.paired(
        results["distilled"]["speedups"], results["draft"]["speedups"], "the distilled draft", "the hard-label one"
    )
)
if results["distilled"]["formula"] is not None:
    print("why, " + speculative_decoding.pair_reading(results, "distilled", "draft", named))

# %% [markdown]
# Same size, same data, same number of steps: only the loss differs, so the printed differences
# are what learning from the target's distributions instead of single bytes bought here. The
# overlap is the acceptance rate of sampling at temperature 1 (chapter 6), measured over
# thousands of positions; in a sampled loop, a few hundred proposals per draft leave the
# acceptance rates a few points noisy, and `-p NEW_TOKENS 400` narrows that down where the loop
# runs on this machine (a copy of the course given for credit replays the run recorded at the
# default sizes, and says so for others). (A greedy loop would measure something else: how
# often the draft's likeliest byte is the target's.) The line under each draft says how its acceptance in the loop compares with its overlap. The wall-clock
# speed-ups are noisier still: each repeat times the target alone and then each draft, moments
# apart, and the printed range over the repeats is how far one run can stray from another (c
# moves too, with whatever else the machine is doing). Where the range crosses 1x, the lines say
# "within the noise": a draft can then print 1.3x here and 0.9x in chapter 6 without either
# being a verdict. The two drafts do the same work per step (one architecture), yet their
# measured c can differ, and on a CPU c is large (chapter 6 explains why): a few hundredths of c
# per drafted token can undo what a few points of acceptance buy. The last line splits the gap
# between the two speed-ups by the formula into what each draft's acceptance buys and what its c
# costs, and says which counted for more here.
# DistillSpec (Zhou et al., 2023) reports 10 to 45% more speed-up from distilled drafts on real
# models.
#
# ## 3. Pruning, briefly
#
# The other way to a smaller model is to remove weights.
#
# * **Unstructured** (magnitude) pruning zeroes the individual weights of smallest magnitude. It
#   keeps quality well at moderate sparsity, but a matrix with scattered zeros is as large and as
#   slow as before unless the hardware supports the pattern (NVIDIA's 2:4 sparsity: two zeros in
#   every four weights).
# * **Structured** pruning removes whole rows, columns or heads, so the matrices really shrink
#   and get faster, at a higher cost in quality for the same number of weights removed.
#
# ### Your turn: `prune_smallest`
#
# Write `prune_smallest(weight, share)`: unstructured magnitude pruning of one matrix, counted like
# `torch.nn.utils.prune.l1_unstructured`. Return a copy of `weight`, in its shape, in which the
# `round(share * weight.numel())` weights of smallest magnitude `|w|`, ranked over the whole matrix
# (not row by row), are zero; leave `weight` itself as it was. The count is Python's `round` of
# that float, as torch computes it: 0.75 of a 5 x 5 matrix is round(18.75) = 19 weights (`int`
# would truncate to 18), and a half goes to the even number, round(4.5) = 4. Share 0 prunes
# nothing and share 1 everything; raise `ValueError` for a share outside [0, 1]. Example:
# `[[0.5, -2.0, 0.1, 3.0], [-0.3, 1.0, -4.0, 0.2]]` at share 0.5 loses its round(0.5 * 8) = 4
# smallest magnitudes, 0.1, 0.2, -0.3 and 0.5: `[[0, -2, 0, 3], [0, 1, -4, 0]]`. (Exact ties in
# magnitude at the cutoff may go either way: the checks use weights without ties.)


# %% nbgrader={"grade": false, "grade_id": "prune_smallest", "locked": false, "schema_version": 3, "solution": true}
def prune_smallest(weight, share):
    """A copy of `weight` with its round(share * numel) smallest-magnitude weights set to zero."""
    ### BEGIN SOLUTION
    if not 0 <= share <= 1:
        raise ValueError(f"share must be between 0 and 1, got {share}")
    flat = weight.flatten().clone()
    flat[flat.abs().argsort()[: round(share * flat.numel())]] = 0  # as torch.nn.utils.prune counts
    return flat.reshape(weight.shape)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_prune_smallest", "locked": true, "points": 7, "schema_version": 3, "solution": false}
check("prune_smallest")
### BEGIN HIDDEN TESTS
check("prune_smallest", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Here both kinds are applied to the target's feed-forward layers at several sparsities:
# unstructured pruning is your `prune_smallest` on each matrix, once you have written it;
# structured removes the hidden units (a row of the gate and up projections and the matching
# column of the down projection) with the smallest norms.

# %%
import copy


def prune_unstructured(model, share):
    pruned = copy.deepcopy(model)
    for block in pruned.blocks:
        for layer in (block.mlp.gate_proj, block.mlp.up_proj, block.mlp.down_proj):
            layer.weight.data = prune_smallest(layer.weight.data, share)
    return pruned


def prune_structured(model, share):
    pruned = copy.deepcopy(model)
    for block in pruned.blocks:
        mlp = block.mlp
        norms = mlp.gate_proj.weight.norm(dim=1) * mlp.up_proj.weight.norm(dim=1) * mlp.down_proj.weight.norm(dim=0)
        drop = norms.argsort()[: round(share * len(norms))]  # counted as torch.nn.utils.prune counts
        for layer, dim in ((mlp.gate_proj, 0), (mlp.up_proj, 0), (mlp.down_proj, 1)):
            layer.weight.data.index_fill_(dim, drop, 0.0)  # zeroing the unit = removing it
    return pruned


baseline = evaluation.text_loss(target, held_out, max_windows=EVAL_WINDOWS)
all_windows = (len(held_out) - 1) // 256
print(
    f"unpruned: {baseline:.3f} nats/byte on {EVAL_WINDOWS} evenly spaced 256-byte windows of the held-out plays "
    f"(the card's {checkpoints.card('target')['validation_loss']:.3f} is over all {all_windows}; every figure "
    "below uses the same windows)"
)
shares, structured = [0.25, 0.5, 0.75], []
unstructured = [] if withheld.written(globals(), "prune_smallest", torch.ones(2, 2), 0.5) else None
if unstructured is None:
    print(
        "Your prune_smallest is not written yet: unstructured pruning is left out (write it, then run this cell again)."
    )
for share in shares:
    structured.append(evaluation.text_loss(prune_structured(target, share), held_out, max_windows=EVAL_WINDOWS))
    said = f"{int(100 * share):2d}% of the feed-forward weights removed: structured {structured[-1]:.3f}"
    if unstructured is not None:
        unstructured.append(evaluation.text_loss(prune_unstructured(target, share), held_out, max_windows=EVAL_WINDOWS))
        said += f", unstructured with your prune_smallest {unstructured[-1]:.3f}"
    print(said)
if unstructured is not None:
    worse = [f"{int(100 * share)}%" for share, u, st in zip(shares, unstructured, structured, strict=True) if st > u]
    print(
        f"structured pruning cost more loss than unstructured at {readings.listing(worse)} of the weights removed"
        if worse
        else "structured pruning cost no more loss than unstructured at any share tried"
    )
plots.plot_drafts_and_pruning(overlap, shares, unstructured, structured, baseline)

# %% [markdown]
# Removing whole units usually costs more than removing the same number of scattered weights
# (with your `prune_smallest` written, the printed line says how it went here), but only structured pruning gives smaller dense
# matrices that run faster anywhere. In practice pruned models are fine-tuned (or distilled)
# afterwards to recover most of the loss.
#
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 6](08_in_practice.ipynb#chapter-6) speculates with drafts on SmolLM2-135M; a distilled draft is what would raise their acceptance.
# * Distilled small models: DistilBERT (40% smaller, 97% of BERT's quality), and most small
#   open models are distilled from larger ones.
# * Draft training: DistillSpec, EAGLE and Medusa train the draft (or draft heads) on the
#   target's own outputs for exactly the agreement measured here.
# * Pruning: `torch.nn.utils.prune` for experiments (its `l1_unstructured` is `prune_smallest`,
#   counted the same way), SparseGPT and Wanda for one-shot pruning of LLMs, NVIDIA's 2:4
#   structured sparsity for hardware speed-ups.
#
# ## Check yourself
#
# 1. What does the teacher's distribution tell the student that the hard label does not?
# 2. Why multiply the softened loss by T^2?
# 3. Why does a distilled draft make speculative decoding faster without changing its output?
# 4. Why does unstructured sparsity not speed up a dense matrix product?
#
# <details><summary>Answers</summary>
#
# 1. How plausible every other continuation is: which mistakes are nearly right and which are
#    absurd, at every position.
# 2. Softening by T scales the gradients of the KL by about 1/T^2; the factor restores them, so
#    mixing with the hard-label loss or changing T does not change the balance.
# 3. The output is the target's by construction (chapter 6); the draft only decides how often
#    proposals are accepted, which a draft closer to the target raises.
# 4. The zeros are scattered: the matrix keeps its shape and the hardware multiplies them anyway,
#    unless the pattern is one it can skip (2:4) or the sparsity is very high.
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

quiz.show("distillation")


# %% nbgrader={"grade": false, "grade_id": "quiz_distillation", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "d", 2: "a", 3: "d", 4: "c", 5: "b", 6: "b"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_distillation", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_distillation")
### BEGIN HIDDEN TESTS
check("quiz_distillation", hidden=True)
### END HIDDEN TESTS
