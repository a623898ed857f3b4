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
# # Chapter 6: Speculative decoding
#
# Decoding one token reads every weight of the model (chapter 1): the big model spends most of
# its time waiting for memory, and checking five tokens in one forward pass costs about as much
# as producing one. Speculative decoding exploits that. A small **draft** model guesses k tokens
# cheaply, one at a time; the large **target** model scores all k in a single call and keeps the
# guesses it agrees with. With the right acceptance rule the output is distributed **exactly**
# as if the target had generated it alone: faster, and not an approximation.
#
# You will:
#
# 1. compute the acceptance rate of a draft (graded);
# 2. derive the expected tokens per target call (graded) and the speed-up (graded);
# 3. write the acceptance rule and check by sampling that it reproduces the target (graded);
# 4. run speculative decoding with the course's draft and target models and time it.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p NEW_TOKENS 300`).
NEW_TOKENS = 120  # tokens generated in each timed run
DRAFT_LENGTHS = [2, 4]  # k values measured on the course models

# %%
import torch

from course import checkpoints, corpus, speculative_decoding, timing
from course.device import best_device, describe
from course.model import generate
from course.plots import speculative_decoding as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. The acceptance rule
#
# At one position the target would sample from $p$ and the draft samples from $q$. The draft
# proposes $x \sim q$. The target then:
#
# * **accepts** $x$ with probability $\min\left(1, \frac{p(x)}{q(x)}\right)$;
# * otherwise **rejects** it and samples a replacement from the leftover distribution
#   $\frac{\max(0,\, p - q)}{\sum \max(0,\, p - q)}$, and the round ends there.
#
# Why this gives exactly $p$: a token is output either as an accepted proposal, with probability
# $q(x) \min(1, p(x)/q(x)) = \min(p(x), q(x))$, or as a replacement. The replacements make up
# precisely what is missing, $p(x) - \min(p(x), q(x)) = \max(0, p(x) - q(x))$, because the total
# rejection probability $1 - \sum \min(p, q)$ equals $\sum \max(0, p - q)$. The two parts add up
# to $p(x)$.
#
# The chance that a proposal is accepted is therefore
#
# $$ \alpha = \sum_x \min\big(p(x), q(x)\big), $$
#
# the overlap of the two distributions: 1 when the draft is perfect, 0 when they never agree.
#
# ### Your turn: `acceptance_rate`
#
# Write `acceptance_rate(target, draft)` for two probability vectors of the same length, as a float.
#
# The cell below holds the imports that grading gives your answers. Helper functions and more
# imports may go in your answer cell or in code cells you add: grading runs the cells you added,
# in notebook order, with your answers, but not the chapter's own cells, and without the `course`
# package (the check cell tells you when an answer relies on either). Save the notebook before
# grading it (`python -m autograder grade`): the grader reads the saved file.

# %% tags=["grader-setup"] nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

import numpy as np
import torch


# %% nbgrader={"grade": false, "grade_id": "acceptance_rate", "locked": false, "schema_version": 3, "solution": true}
def acceptance_rate(target, draft):
    """alpha = sum over tokens of min(p, q)."""
    ### BEGIN SOLUTION
    return torch.minimum(target, draft).sum().item()
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_acceptance_rate", "locked": true, "points": 2, "schema_version": 3, "solution": false}
from autograder import check

check("acceptance_rate")
### BEGIN HIDDEN TESTS
check("acceptance_rate", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Your turn: `speculative_token`
#
# Write `speculative_token(target, draft, generator)`: one position of the rule. Draw the
# proposal from `draft` with `torch.multinomial(draft, 1, generator=generator)`, accept it with
# probability min(1, p(x)/q(x)) (compare `torch.rand(1, generator=generator)` with it), and
# otherwise draw from the normalised leftover. Return `(token, accepted)`: an `int` and a `bool`.
# Use the `generator` for every random draw, so that results can be reproduced.


# %% nbgrader={"grade": false, "grade_id": "speculative_token", "locked": false, "schema_version": 3, "solution": true}
def speculative_token(target, draft, generator):
    """Propose from the draft, verify with the target: (token, whether the proposal was accepted)."""
    ### BEGIN SOLUTION
    x = int(torch.multinomial(draft, 1, generator=generator))
    if torch.rand(1, generator=generator).item() < min(1.0, (target[x] / draft[x]).item()):
        return x, True
    leftover = (target - draft).clamp(min=0)
    return int(torch.multinomial(leftover / leftover.sum(), 1, generator=generator)), False
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_speculative_token", "locked": true, "points": 5, "schema_version": 3, "solution": false}
check("speculative_token")
### BEGIN HIDDEN TESTS
check("speculative_token", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The proof, by experiment: 40,000 tokens through the rule with a draft that disagrees with the
# target. The frequencies land on the target's probabilities, not the draft's:

# %%
p = torch.tensor([0.40, 0.30, 0.20, 0.10, 0.00, 0.00])
q = torch.tensor([0.10, 0.10, 0.20, 0.20, 0.30, 0.10])
generator = torch.Generator().manual_seed(0)
draws = [speculative_decoding.speculative_token(p, q, generator) for _ in range(40_000)]
freq = torch.bincount(torch.tensor([t for t, _ in draws]), minlength=6).double() / len(draws)
print("target p   ", [f"{x:.3f}" for x in p.tolist()])
print("draft q    ", [f"{x:.3f}" for x in q.tolist()])
print("output     ", [f"{x:.3f}" for x in freq.tolist()])
print(
    f"largest gap to p: {(freq - p).abs().max().item():.4f}; accepted {sum(a for _, a in draws) / len(draws):.3f} "
    f"of proposals (alpha = {speculative_decoding.acceptance_rate(p, q):.3f})"
)
assert (freq - p.double()).abs().max() < 0.01

# %% [markdown]
# ## 2. Tokens per target call, and the speed-up
#
# A round drafts k tokens and calls the target once. The drafts are accepted one after another
# until the first rejection; the target's call always contributes one token of its own (the
# replacement, or, when all k were accepted, a bonus token sampled from its last position). With
# each proposal accepted with probability $\alpha$, the expected tokens per call are
#
# $$ 1 + \alpha + \alpha^2 + \dots + \alpha^k = \frac{1 - \alpha^{k+1}}{1 - \alpha} .$$
#
# ### Your turn: `expected_tokens_per_call`
#
# Write `expected_tokens_per_call(alpha, draft_length)`. It must also work for `alpha = 1`
# (every proposal accepted: k + 1 tokens).


# %% nbgrader={"grade": false, "grade_id": "expected_tokens_per_call", "locked": false, "schema_version": 3, "solution": true}
def expected_tokens_per_call(alpha, draft_length):
    """(1 - alpha^(k+1)) / (1 - alpha), and k + 1 at alpha = 1."""
    ### BEGIN SOLUTION
    if alpha >= 1:
        return float(draft_length + 1)
    return (1 - alpha ** (draft_length + 1)) / (1 - alpha)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_expected_tokens_per_call", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("expected_tokens_per_call")
### BEGIN HIDDEN TESTS
check("expected_tokens_per_call", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The draft is not free. If one draft step costs $c$ target steps, a round costs $kc + 1$ target
# steps (verifying k + 1 positions in one call costs about one step, as long as decoding is
# memory-bound), so the speed-up over the target alone is
#
# $$ \frac{1 - \alpha^{k+1}}{(1 - \alpha)(kc + 1)} .$$
#
# Leviathan et al.'s example: $\alpha = 0.8$, $k = 5$, $c = 0.05$ gives 2.95x.
#
# ### Your turn: `speculative_speedup`
#
# Write `speculative_speedup(alpha, draft_length, cost)` with the formula above (you may call
# your `expected_tokens_per_call`).


# %% nbgrader={"grade": false, "grade_id": "speculative_speedup", "locked": false, "schema_version": 3, "solution": true}
def speculative_speedup(alpha, draft_length, cost):
    """Speed-up over the target alone when one draft step costs `cost` target steps."""
    ### BEGIN SOLUTION
    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost + 1)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_speculative_speedup", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("speculative_speedup")
### BEGIN HIDDEN TESTS
check("speculative_speedup", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ### Try it
#
# The dots are simulations of the rule with a pair of distributions whose overlap is exactly
# alpha; they sit on the formula's curve. At alpha = 0.5 the tokens per call saturate near 2
# whatever k is; at 0.95 they keep climbing. Raise the draft's cost and watch the best k shrink:
# with c = 0.3, speculation barely pays even at alpha = 0.8.

# %%
plots.widget_speculative()

# %% [markdown]
# ## 3. Speculative decoding with the course's models
#
# `course.speculative_decoding.speculative_generate(target, draft, prompt, k, ...)` runs whole rounds:
# the draft proposes k tokens (each from its own distribution, with its KV cache), the target
# scores the prompt's unseen tokens plus all k proposals in **one** forward pass, the rule above
# runs position by position, and both caches are rolled back to the verified length. Draft:
# 315,552 parameters; target: 4,295,936 (13.6x larger).
#
# At temperature 0 (greedy) the rule accepts exactly the proposals that equal the target's
# argmax, so the output must be the target's greedy output, token for token:

# %%
target = checkpoints.load("target").to(device)
draft = checkpoints.load("draft").to(device)
prompt = corpus.encode("KING RICHARD:\n")[None].to(device)
alone = generate(target, prompt, NEW_TOKENS)
run = speculative_decoding.speculative_generate(target, draft, prompt, 4, NEW_TOKENS, temperature=0)
print(f"identical to the target's greedy output: {torch.equal(alone, run['tokens'])}")
print(f"{NEW_TOKENS} tokens in {run['target_calls']} target calls ({NEW_TOKENS / run['target_calls']:.2f} per call)")
print(corpus.decode(run["tokens"][0].cpu()))

# %% [markdown]
# ## 4. Measured on this machine
#
# Sampling at temperature 1, for a few draft lengths: the acceptance rate at each drafted
# position, the tokens per target call against the formula at the measured alpha, and the
# wall-clock time against the target generating alone (with its KV cache).

# %%
from tqdm.auto import tqdm


def sampled(k):
    return speculative_decoding.speculative_generate(
        target, draft, prompt, k, NEW_TOKENS, temperature=1.0, generator=torch.Generator().manual_seed(1)
    )


alone_seconds = timing.median_seconds(
    lambda: generate(target, prompt, NEW_TOKENS, temperature=1.0, generator=torch.Generator().manual_seed(1)),
    device,
    0,
    3,
)
draft_seconds = timing.median_seconds(lambda: generate(draft, prompt, NEW_TOKENS), device, 0, 3)
cost = draft_seconds / alone_seconds
print(f"target alone: {NEW_TOKENS / alone_seconds:.0f} tokens/s; a draft step costs c = {cost:.2f} target steps")
for k in tqdm(DRAFT_LENGTHS, desc="speculative runs"):
    run = sampled(k)
    alpha = sum(run["accepted"]) / sum(run["proposed"])
    per_call = NEW_TOKENS / run["target_calls"]
    seconds = timing.median_seconds(lambda: sampled(k), device, 0, 3)
    positions = ", ".join(f"{a / max(p, 1):.2f}" for a, p in zip(run["accepted"], run["proposed"], strict=True))
    print(
        f"k = {k}: alpha {alpha:.2f} (by position: {positions}); tokens per call {per_call:.2f}, formula "
        f"{speculative_decoding.expected_tokens_per_call(alpha, k):.2f}; speed-up {alone_seconds / seconds:.2f}x "
        f"(formula with c: {speculative_decoding.speedup(alpha, k, cost):.2f}x)"
    )

# %% [markdown]
# Two things to read here. The acceptance rate is per proposal; a position is only *reached*
# when every proposal before it was accepted, which is why later positions see fewer trials.
# The measured tokens per call track the formula; they fall a little short of it because the
# acceptance rate is not the same at every position (the formula assumes one alpha for all).
# And the speed-up is modest: on a CPU this small draft is not cheap relative to the target
# (each layer's fixed overhead counts more than its size), so $c$ is large. A draft 100x smaller
# than a 70B target on a GPU has c around 0.01 to 0.05, where the same acceptance gives 2 to 3x.
# Chapter 7 raises alpha by distilling the draft from the target.
#
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 6](08_in_practice.ipynb#chapter-6) runs prompt lookup and assisted generation in transformers, and the same rule through `speculative_generate`.
# * **transformers**: `model.generate(..., assistant_model=draft)` (assisted generation); the
#   draft must share the tokenizer.
# * **vLLM**: speculative decoding with a draft model, n-gram (prompt lookup) drafts, or
#   EAGLE/Medusa heads that draft from the target's own hidden states.
# * Papers report 2-3x on T5-XXL (Leviathan et al.) and 1.9-2.5x on Chinchilla 70B (Chen et al.),
#   with identical output distributions.
#
# ## Check yourself
#
# 1. Why is the output distributed exactly as the target's, whatever the draft?
# 2. p = (0.5, 0.5), q = (0.9, 0.1). What is alpha?
# 3. At alpha = 0.6, how many tokens per call do k = 4 drafts give? Is k = 16 much better?
# 4. When does speculative decoding fail to speed things up?
#
# <details><summary>Answers</summary>
#
# 1. Accepted proposals contribute min(p, q); rejections resample from the normalised
#    max(0, p - q), whose total weight 1 - alpha is exactly what is missing; together: p.
# 2. min(0.5, 0.9) + min(0.5, 0.1) = 0.6.
# 3. (1 - 0.6^5) / 0.4 = 2.31; k = 16 gives 2.50: barely more, at four times the drafting cost.
# 4. When the draft rarely agrees with the target (small alpha), or when the draft is not much
#    cheaper than the target (large c), or when the target is compute-bound (large batches), so
#    that verifying k + 1 tokens costs more than one step.
#
# </details>
#
# ## Quiz
#
# Choose an answer to each question: the quiz says at once whether it is right, and why. Then put
# your choices in `quiz_answers()` below for points (the line under the quiz shows them as code).

# %%
from course import quiz

quiz.show("speculative_decoding")


# %% nbgrader={"grade": false, "grade_id": "quiz_speculative_decoding", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "b", 2: "d", 3: "c", 4: "c", 5: "c", 6: "b"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_speculative_decoding", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_speculative_decoding")
