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
# 4. run speculative decoding with the course's draft and target models;
# 5. write a draft that costs almost nothing, an n-gram table (graded), and meet prompt lookup;
# 6. compare all four drafts, measured by the course's loop: acceptance rate, cost and wall-clock
#    speed-up.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-p NEW_TOKENS 200`).
NEW_TOKENS = 100  # tokens generated from each prompt in the timed runs
PROMPTS = 2  # held-out openings to generate from
DRAFT_LENGTH = 4  # k, tokens drafted per target call, for every draft
REPEATS = 3  # timed repeats; speed-ups are medians over them

# %%
import torch

from course import checkpoints, corpus, readings, speculative_decoding, timing, withheld
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
# you hand it in: grading reads the saved file, not the kernel.

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
# Write `speculative_token(target, draft, generator)`: one position of the rule. First draw the
# proposal from `draft` with `torch.multinomial(draft, 1, generator=generator)`; then accept it
# with probability min(1, p(x)/q(x)) (compare `torch.rand(1, generator=generator)`, drawn after
# the proposal, with it), and otherwise draw from the normalised leftover. Return
# `(token, accepted)`: an `int` and a `bool`. Use the `generator` for every random draw, in that
# order, so that results can be reproduced: section 5's loop draws each proposal from a generator
# seeded as the one it gives your function, so the proposal must be your first draw.


# %% nbgrader={"grade": false, "grade_id": "speculative_token", "locked": false, "schema_version": 3, "solution": true}
def speculative_token(target, draft, generator):
    """Propose from the draft (the first draw, torch.multinomial), verify with the target (then
    torch.rand): (token, whether the proposal was accepted)."""
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
# The proof, by experiment: 40,000 tokens through your `speculative_token` with a draft that
# disagrees with the target. With the rule written right, the frequencies land on the target's
# probabilities, not the draft's:

# %%
p = torch.tensor([0.40, 0.30, 0.20, 0.10, 0.00, 0.00])
q = torch.tensor([0.10, 0.10, 0.20, 0.20, 0.30, 0.10])
print("target p   ", [f"{x:.3f}" for x in p.tolist()])
print("draft q    ", [f"{x:.3f}" for x in q.tolist()])
alpha = speculative_decoding.course_answer("acceptance_rate")(p, q)
if withheld.written(globals(), "speculative_token", p, q, torch.Generator().manual_seed(1)):
    generator = torch.Generator().manual_seed(0)
    draws = [speculative_token(p, q, generator) for _ in range(40_000)]
    freq = torch.bincount(torch.tensor([int(t) for t, _ in draws]), minlength=6).double() / len(draws)
    gap = (freq - p).abs().max().item()
    print("your output", [f"{x:.3f}" for x in freq.tolist()])
    print(
        f"largest gap to p: {gap:.4f} ({'within' if gap < 0.01 else 'beyond'} the sampling noise of 0.01); "
        f"accepted {sum(bool(a) for _, a in draws) / len(draws):.3f} of proposals (alpha = {alpha:.3f})"
    )
else:
    print(f"alpha = {alpha:.3f}: the share of proposals the rule should accept")
    print("Your speculative_token is not written yet: write it above, then run this cell again.")

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
# whatever k is; at 0.95 they keep climbing. Raise the draft's cost and watch the best k shrink
# and the speed-up with it. At alpha = 0.8:

# %%
tokens_per_call = speculative_decoding.yours(globals(), "expected_tokens_per_call", "the chart's left panel")
speedup = speculative_decoding.yours(globals(), "speculative_speedup", "these speed-ups and the chart's right panel")
lengths = list(range(1, 33))
for cost in (0.01, 0.05, 0.3, 0.5):
    speeds = speculative_decoding.speedups([0.8], lengths, [cost], speedup)[0][0]
    best = lengths[speeds.index(max(speeds))]
    print(f"c = {cost:4}: best k = {best:2d}, {speeds[best - 1]:.2f}x (k = 4: {speeds[3]:.2f}x)")
print("The chart's dots simulate the course's rule.")
plots.widget_speculative(tokens_per_call, speedup)

# %% [markdown]
# ## 3. Speculative decoding with the course's models
#
# The course's loop, `speculative_decoding.speculative_generate(target, draft, prompt, k, ...)`,
# runs whole rounds: the draft proposes k tokens (each from its own distribution, with its KV
# cache), the target scores the prompt's unseen tokens plus all k proposals in **one** forward
# pass, the rule above runs position by position, and both caches are rolled back to the verified
# length. Chapter 9 asks you to write its greedy form, so the cells here run it through
# `greedy_run` and `drafts_measured`, which take the course's drafts by name. Draft: 315,552
# parameters; target: 4,295,936 (13.6x larger).
#
# At temperature 0 (greedy) the rule accepts exactly the proposals that equal the target's
# argmax, so the output must be the target's greedy output, token for token:

# %%
target = checkpoints.load("target").to(device)
prompt = corpus.encode("KING RICHARD:\n")[None].to(device)
print(timing.pin_threads(lambda: generate(target, prompt, 32), device))
if speculative_decoding.copy_note():
    print(speculative_decoding.copy_note())
alone = generate(target, prompt, NEW_TOKENS)[0].tolist()
tokens, rounds = speculative_decoding.greedy_run("draft model", prompt[0].tolist(), 4, NEW_TOKENS)
print(f"identical to the target's greedy output: {alone == tokens}")
print(f"{NEW_TOKENS} tokens in {len(rounds)} target calls ({NEW_TOKENS / len(rounds):.2f} per call)")
print(corpus.decode(torch.tensor(tokens)))

# %% [markdown]
# ## 4. Drafts that cost almost nothing
#
# On a CPU the draft model above is not cheap next to the target: each of its steps launches the
# same kinds of small operations, and at this size their fixed cost weighs more than their
# arithmetic, so a draft step costs a good fraction of a target step (section 5 measures it).
# Servers have two drafts that need no model at all:
#
# * **An n-gram table.** Count, in a large text, which token followed every context of n tokens,
#   and propose the most frequent follower of the last n tokens, then of the last n tokens with
#   that proposal appended, and so on. Over bytes and the course's training plays, with n up to
#   6, it knows that "KING HEN" goes on "RY" and that "my lo" goes on "rd". A lookup costs
#   microseconds.
# * **Prompt lookup.** Search the text so far (prompt and output) for an earlier occurrence of
#   its last few tokens, and propose what followed it there. It has nothing to learn and pays off
#   when the output repeats its input: code being edited, quotations, a summary that reuses the
#   document's phrases, or a small model that loops. transformers calls it
#   `prompt_lookup_num_tokens`; vLLM has it as its n-gram speculator.
#
# Both are **deterministic**: a proposal is not drawn from a distribution, so q puts all its mass
# on the proposed token, and the rule of section 1 applies unchanged: the proposal x is kept with
# probability min(1, p(x) / 1) = p(x), and a rejection resamples from p with x removed. At
# temperature 0 a proposal is kept exactly when it is the target's argmax, so the output is the
# target's greedy output whichever draft proposed. (At temperature above 0 the course's n-gram
# draft samples from its counts instead, raised to the power 1/T as the target's probabilities
# are: its q is then that distribution, and it agrees with the target more often.)
#
# ### Your turn: `ngram_draft`
#
# Write `ngram_draft(text, context, n, k)`: `text` is a 1-D tensor of tokens (the table's source),
# `context` a list of ints (at least `n` of them). Propose up to `k` tokens, as a list of ints:
#
# * each proposal is the token that most often follows the last `n` tokens of the context in
#   `text`; on a tie, the smallest token;
# * each proposal joins the context before the next lookup;
# * when the last `n` tokens never occur in `text` with a token after them, stop and return the
#   proposals so far (possibly none): do not back off to a shorter context (the course's
#   `NGramDraft` below does, to always have a proposal; this exercise does not).
#
# Example: in "the cat sat on the mat; the cat ran; the hat" the context "a cat" with n = 2 ends in
# "at", followed three times by " ", once by ";" and once by nothing (the end): propose " ". Then
# "t " is followed once each by "s", "o" and "r": the smallest, "o". Then " o", "on", "n " give
# "n", " ", "t". A plain loop over the text for every proposal is fine here.


# %% nbgrader={"grade": false, "grade_id": "ngram_draft", "locked": false, "schema_version": 3, "solution": true}
def ngram_draft(text, context, n, k):
    """Up to k greedy proposals from the n-gram counts of `text`, each joining the context."""
    ### BEGIN SOLUTION
    text, context, proposed = text.tolist(), list(context), []
    for _ in range(k):
        last = context[-n:]
        counts = {}
        for i in range(len(text) - n):
            if text[i : i + n] == last:
                counts[text[i + n]] = counts.get(text[i + n], 0) + 1
        if not counts:
            break
        token = max(counts, key=lambda t: (counts[t], -t))
        proposed.append(token)
        context.append(token)
    return proposed
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_ngram_draft", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("ngram_draft")
### BEGIN HIDDEN TESTS
check("ngram_draft", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The course's `NGramDraft` does the same with a table built once from the training plays (every
# context of 1 to 6 bytes with the bytes that followed it, counted in a few seconds), and backs off
# to a shorter context when the longest was never seen, so it always has something to propose.
# Here it is, with prompt lookup, in the loop of section 3: both give the target's greedy output
# exactly, like the draft models.

# %%
held_out = corpus.tokens("validation")
starts = (1000, 90_000, 200_000, 350_000)[:PROMPTS]
prompts = [held_out[s : s + 32][None].to(device) for s in starts]
for context in ("KING HEN", "my lo", "To be, or not to"):
    proposal = speculative_decoding.table_proposals(corpus.encode(context).tolist(), 8)
    print(f"n-gram table after {context!r}: proposes {corpus.decode(torch.tensor(proposal, dtype=torch.long))!r}")
alone = generate(target, prompts[0], NEW_TOKENS)[0].tolist()
for name in speculative_decoding.COURSE_DRAFTS:
    tokens, rounds = speculative_decoding.greedy_run(name, prompts[0][0].tolist(), DRAFT_LENGTH, NEW_TOKENS)
    print(
        f"{name:15s} identical to the target's greedy output: {alone == tokens}; "
        f"{NEW_TOKENS / len(rounds):.2f} tokens per target call"
    )

# %% [markdown]
# ## 5. Four drafts, measured
#
# Now each draft against the target alone, greedy and sampled at temperature 1, on held-out
# openings: the acceptance rate alpha; the draft's cost c, its seconds per proposed token over
# the seconds of one target step, measured inside the loop (and how far apart the repeats put
# it); the tokens per target call against the formula at the measured alpha (your
# `expected_tokens_per_call`), taken round by round at the number of tokens the draft proposed in
# that round: k for a model draft, fewer or none for prompt lookup when the text offers no match,
# so its formula sits far below the one at k (the row prints the tokens drafted per call); and the
# wall-clock speed-up against the target generating alone
# with its KV cache, timed in turn with it, the median of several repeats, on the threads chosen
# in section 3. Where the course's loop runs (its own repository, on your machine), the sampled
# runs verify the proposals with your `speculative_token` once it is written: how often it
# accepts is their alpha (greedy runs need no draw: a proposal is kept exactly when it is the
# target's argmax). Where the loop is held back from you (a copy given for credit), the cell says
# so and shows the numbers the course's loop and rule gave when the copy was made, on the machine
# it names: your `speculative_token` does not change them there.

# %% tags=["measures"]
rule = speculative_token if withheld.written(globals(), "speculative_token", p, q, torch.Generator()) else None
formula = expected_tokens_per_call if withheld.written(globals(), "expected_tokens_per_call", 0.5, 4) else None
if speculative_decoding.copy_note():
    print(speculative_decoding.copy_note())
elif rule is None:
    print(
        "Your speculative_token is not written yet: the sampled runs verify with the course's rule (write it, "
        "then run this cell again)."
    )
else:
    print("The sampled runs verify the proposals with your speculative_token.")
if formula is None:
    print("Your expected_tokens_per_call is not written yet: the formula's numbers are left out.")
measured = {}
for temperature, label in ((0.0, "greedy"), (1.0, "sampled")):
    results = speculative_decoding.drafts_measured(
        speculative_decoding.COURSE_DRAFTS,
        starts,
        32,
        DRAFT_LENGTH,
        NEW_TOKENS,
        temperature,
        repeats=REPEATS,
        rule=rule,
        tokens_per_call=formula,
    )
    first = next(iter(results.values()))
    print(
        f"--- {label} (temperature {temperature:g}), k = {DRAFT_LENGTH}; a target step takes "
        f"{1e3 * first['step']:.1f} ms on {first['machine']} ---"
    )
    for name, r in results.items():
        said = f"{name:15s} alpha {r['alpha']:.2f}  c {r['cost']:.3f} (repeats {timing.spread(r['costs']):.0%} apart)"
        said += f"  verify {r['verify']:.2f}  tokens per call {r['tokens_per_call']:.2f}"
        said += f" (formula {r['formula']:.2f}, {r['drafted_per_call']:.2f} drafted per call)" if formula else ""
        said += f"  speed-up {readings.spread(r['speedups'])}"
        print(said + (f" (formula with c: {r['formula_speedup']:.2f}x)" if formula else ""))
        measured[f"{name}, {label}"] = r
    print(speculative_decoding.drafts_reading(results))
plots.plot_drafts(measured, DRAFT_LENGTH, speculative_decoding.yours(globals(), "speculative_speedup", "the map"))

# %% [markdown]
# How to read the table and the chart. Each draft sits on the map at its measured alpha and c;
# the contours are what the formula promises there, the label what the clock measured. The
# printed readings say which draft won on this machine and what held the others back. Four
# things explain the gaps, wherever the course runs:
#
# * **c.** A draft model's step is a forward pass, a lookup draft's step a few dictionary-like
#   searches; on a CPU the first is a sizeable share of a target step, the second a tiny one.
#   On a GPU serving a 70B target with a 1B draft, c is around 0.01 to 0.05.
# * **alpha.** A lookup draft's alpha is the share of positions where the most frequent
#   continuation (or the repeated text) is what the target would write; sampling at temperature
#   1 lowers every draft's alpha, because the target's own choice is then spread out.
# * **The verifying call.** The formula assumes that scoring k + 1 tokens costs one step. That
#   holds while a step is bound by reading the weights. On a CPU it often does not: chapter 1
#   showed that many CPUs multiply one row of activations with a fast matrix-vector kernel and
#   several rows with a slower general one, and for a model this small the work that grows with
#   the tokens (attention, norms, the output layer) is a visible part of a step too. The printed
#   "verify" says what a call cost here, in one-token steps.
# * **Tokens per call against the formula.** The formula assumes one alpha at every position
#   and independent acceptances; the per-position rates of a real draft differ, and agreement
#   comes in runs (a memorised phrase is accepted whole), which moves the measured tokens per
#   call off the formula by a few per cent either way.
#
# Prompt lookup proposes only where the text so far repeats; with short prompts and fresh text,
# that is rarely. It is the draft of choice for editing code or summarising a long document
# given in the prompt, where much of the output is copied. Chapter 7 raises a draft model's
# alpha by distilling it from the target.
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
# Choose an answer to each question, then put your choices in `quiz_answers()` below for points
# (the line under the quiz shows them as code). In the course's own repository the quiz says at once
# whether each choice is right, and why; in a copy given for credit it records your choices, and
# the answers with their explanations come in the feedback on your graded notebook.

# %%
from course import quiz

quiz.show("speculative_decoding")


# %% nbgrader={"grade": false, "grade_id": "quiz_speculative_decoding", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "b", 3: "d", 4: "c", 5: "a", 6: "d"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_speculative_decoding", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_speculative_decoding")
### BEGIN HIDDEN TESTS
check("quiz_speculative_decoding", hidden=True)
### END HIDDEN TESTS
