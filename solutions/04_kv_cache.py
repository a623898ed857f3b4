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
# # Chapter 4: The KV cache, and what it costs
#
# A decoder generates one token at a time, and each new token attends to every token before it.
# Recomputing the keys and values of the whole prefix at every step would make generation
# quadratic in its length. Instead they are computed once and kept: the **KV cache**. It turns
# recomputation into memory, and at long contexts or large batches that memory outgrows the model
# itself. This chapter sizes the cache, shows why sharing key-value heads (GQA, MQA) shrinks it,
# checks that caching changes nothing in the output, and simulates how a server pages it.
#
# You will:
#
# 1. compute the cache's size for real models (graded);
# 2. write one cached attention step and check it against full recomputation (graded);
# 3. compare MHA, GQA and MQA;
# 4. count the pages a paged cache needs (graded), and simulate a server's cache memory;
# 5. measure generation with and without the cache on the course model.

# %% tags=["parameters"]
# Sizes of the measurements (papermill can change them: `-y "GEN_LENGTHS: [64, 128, 256, 500]"`).
GEN_LENGTHS = [32, 64, 128, 256]  # generated tokens in the with/without cache comparison
REPEATS = 3  # timings per length and way; the medians are shown

# %%
import torch

from course import checkpoints, corpus, flash_attention, kv_cache, timing, withheld
from course.device import best_device, describe
from course.model import generate, repeat_kv
from course.plots import kv_cache as plots

device = best_device()
print(describe(device))

# %% [markdown]
# ## 1. Bytes per token
#
# Every layer keeps, for every token so far, one key and one value vector per **key-value head**:
#
# $$ \text{bytes} = 2 \times \text{layers} \times \text{kv heads} \times \text{head dim} \times \text{tokens} \times \text{batch} \times \text{bytes per element} .$$
#
# A 7B model in the Llama-2 mould (32 layers, 32 heads of 128, so width 4096) in fp16 keeps
# 2 x 32 x 32 x 128 x 2 = 524,288 bytes, **half a MiB per token**. At 32k tokens that is 17.2 GB,
# more than the 13.5 GB of its fp16 weights, for a single sequence.
#
# ### Your turn: `kv_cache_bytes`
#
# Write `kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2)`,
# the bytes of the cache as a whole number.
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


# %% nbgrader={"grade": false, "grade_id": "kv_cache_bytes", "locked": false, "schema_version": 3, "solution": true}
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, batch=1, bytes_per_element=2):
    """Bytes of keys and values cached for `batch` sequences of `seq_len` tokens."""
    ### BEGIN SOLUTION
    return int(2 * n_layers * n_kv_heads * head_dim * seq_len * batch * bytes_per_element)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from autograder import check

check("kv_cache_bytes")
### BEGIN HIDDEN TESTS
check("kv_cache_bytes", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Published configurations, side by side (weights in fp16, cache in fp16):

# %%
sizes = kv_cache.yours(globals(), "kv_cache_bytes", "this table")
for row in kv_cache.published_rows(kv_cache_bytes=sizes):
    print(
        f"{row['name']:12s} {row['kind']:28s} {row['per_token'] / 2**10:5.0f} KiB/token   32k tokens: "
        f"{row['at_32k'] / 1e9:5.1f} GB   weights {row['weights'] / 1e9:5.1f} GB   "
        f"cache = weights at {row['crossover']:,} tokens "
        f"(at 4,096 tokens a sequence: batch {row['crossover'] / 4096:.1f})"
    )

# %% [markdown]
# ### Try it
#
# Start at Llama-2-7B and 4,096 tokens, then raise the batch: at batch 4 the cache is 8.6 GB
# against 13.5 GB of weights, at batch 8 it is 17.2 GB. It overtakes the weights in between, at
# batch 6.3 (the last column above). Switch to Llama-3-8B: 8 key-value heads instead of 32 cut
# the cache by 4. Set the kv heads to 1 (MQA) and then change the cache's dtype: an fp8 cache
# halves it again.

# %%
plots.widget_kv_cache(kv_cache.yours(globals(), "kv_cache_bytes", "the chart"))

# %% [markdown]
# ## 2. One cached step equals recomputing everything
#
# Causal attention for the token at position $t$ uses its own query and the keys and values of
# positions $0 \dots t$. Those earlier keys and values do not depend on anything that comes
# later, so they can be kept from earlier steps: each new token computes **only its own** query,
# key and value, appends the key and value to the cache, and attends over the cache.
#
# ### Your turn: `attention_step`
#
# Write `attention_step(q, k, v, cache_k, cache_v)` for one head: `q`, `k`, `v` have shape `(D,)`
# (the new token), `cache_k` and `cache_v` shape `(t, D)` (the tokens before it; `t` may be 0).
# Return `(output, cache_k, cache_v)`: the attention output `(D,)` of the new token over all
# `t + 1` positions, and the caches with the new row appended at the end.
#
# $$ \text{output} = \operatorname{softmax}\left(\frac{K q}{\sqrt{D}}\right)^{\!\top} V, \qquad K, V \text{ the caches after appending.} $$


# %% nbgrader={"grade": false, "grade_id": "attention_step", "locked": false, "schema_version": 3, "solution": true}
def attention_step(q, k, v, cache_k, cache_v):
    """One cached decoding step of single-head attention: (output, cache_k, cache_v)."""
    ### BEGIN SOLUTION
    cache_k = torch.cat([cache_k, k[None]], dim=0)  # (t + 1, D)
    cache_v = torch.cat([cache_v, v[None]], dim=0)
    weights = torch.softmax(cache_k @ q / math.sqrt(q.shape[-1]), dim=0)  # (t + 1,)
    return weights @ cache_v, cache_k, cache_v
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_attention_step", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("attention_step")
### BEGIN HIDDEN TESTS
check("attention_step", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Now run your `attention_step` token by token over a whole sequence and compare with causal
# attention computed in one go over all positions (the course's `flash_attention.naive_attention`,
# chapter 5). A correct step agrees with it to rounding:

# %%
generator = torch.Generator().manual_seed(0)
T, D = 64, 32
q_all, k_all, v_all = (torch.randn(T, D, generator=generator) for _ in range(3))
empty = torch.zeros(0, D)
if withheld.written(globals(), "attention_step", q_all[0], k_all[0], v_all[0], empty, empty):
    cache_k, cache_v, outputs = empty, empty, []
    for t in range(T):
        out, cache_k, cache_v = attention_step(q_all[t], k_all[t], v_all[t], cache_k, cache_v)
        outputs.append(out)
    causal = flash_attention.naive_attention(q_all, k_all, v_all, causal=True)
    difference = (torch.stack(outputs) - causal).abs().max().item()
    print(f"your attention_step, {T} cached steps against one causal pass: largest difference {difference:.1e}")
else:
    print("Your attention_step is not written yet: write it above, then run this cell again.")

# %% [markdown]
# The same holds for the whole course model: generating with its cache gives the same tokens and
# the same logits as recomputing the full prefix at every step.

# %%
target = checkpoints.load("target").to(device)
prompt = corpus.encode("MACBETH:\n")[None].to(device)
cached, cached_logits = generate(target, prompt, 40, use_cache=True, return_logits=True)
uncached, uncached_logits = generate(target, prompt, 40, use_cache=False, return_logits=True)
print(
    f"same tokens: {torch.equal(cached, uncached)}; largest logit difference: "
    f"{(cached_logits - uncached_logits).abs().max().item():.1e}"
)
print(corpus.decode(cached[0].cpu()))

# %% [markdown]
# ## 3. MHA, GQA, MQA: fewer key-value heads
#
# In multi-head attention (MHA) every query head has its own key and value head. **Grouped-query
# attention** (GQA) lets a group of query heads share one key-value head; **multi-query
# attention** (MQA) shares a single one among all. The cache shrinks by the group size; the
# attention itself is computed exactly as in MHA with each key-value head repeated for its
# queries. The course model uses GQA: 8 query heads share 2 key-value heads.
#
# The check below builds MHA keys and values by repeating each of 2 heads 4 times, and compares
# attention over them with GQA's, head by head:

# %%
B, H, K, T, D = 1, 8, 2, 16, 32
q = torch.randn(B, H, T, D, generator=generator)
k, v = torch.randn(B, K, T, D, generator=generator), torch.randn(B, K, T, D, generator=generator)
gqa = torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(k, H // K), repeat_kv(v, H // K), is_causal=True)
per_head = torch.stack(
    [
        torch.nn.functional.scaled_dot_product_attention(
            q[:, h], k[:, h // (H // K)], v[:, h // (H // K)], is_causal=True
        )
        for h in range(H)
    ],
    dim=1,
)
print(f"GQA equals MHA with repeated key-value heads: largest difference {(gqa - per_head).abs().max().item():.1e}")
sizes = kv_cache.yours(globals(), "kv_cache_bytes", "the course model's cache sizes")
for name, (heads, size) in kv_cache.head_sharing_sizes(target.config, kv_cache_bytes=sizes).items():
    print(f"course model, {name:16s} {heads} kv heads: {size / 2**20:5.2f} MiB for 512 tokens in fp32")

# %% [markdown]
# What it costs: fewer key-value heads means fewer distinct "views" of the context per layer, and
# quality can drop a little. The GQA paper (Ainslie et al., 2023) found 8 key-value groups close
# to MHA's quality at close to MQA's speed, which is why Llama-3, Mistral and most recent models
# use it. Decode reads the whole cache at every step, so a smaller cache is also a faster step
# once the context is long (chapter 1's arithmetic, with the cache's bytes added to the weights').
#
# ## 4. Paging the cache
#
# A server does not know how long an answer will be. Systems before vLLM reserved, for every
# request, a contiguous block for the maximum length. Most of it stays empty: PagedAttention
# (Kwon et al., 2023) measured that such systems used only 20.4% to 38.2% of their KV memory for
# actual tokens. Paging hands out memory in small fixed-size pages as a sequence grows, like an
# operating system's virtual memory; only the last page of each sequence is partly empty, and vLLM
# wastes under 4%.
#
# ### Your turn: `pages_needed`
#
# Write `pages_needed(lengths, page_size)`: how many pages of `page_size` tokens sequences of the
# given lengths occupy. Each sequence has its own pages, and a partly filled page counts whole.


# %% nbgrader={"grade": false, "grade_id": "pages_needed", "locked": false, "schema_version": 3, "solution": true}
def pages_needed(lengths, page_size):
    """Pages of `page_size` tokens that sequences of `lengths` tokens occupy, each its own."""
    ### BEGIN SOLUTION
    return sum(math.ceil(n / page_size) for n in lengths)
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_pages_needed", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("pages_needed")
### BEGIN HIDDEN TESTS
check("pages_needed", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# The simulation: 200 requests with prompts and answers of very different lengths (up to 2,048
# tokens together) queue at a server whose cache holds 32,768 tokens. Each step, every running
# sequence decodes one token; waiting requests are admitted while memory allows. Contiguous
# allocation reserves 2,048 tokens per request up front; paged allocation adds a page when a
# sequence needs one (and, when memory runs out, preempts the newest request, which starts over
# later, as vLLM does).

# %%
counts = kv_cache.yours(globals(), "pages_needed", "this simulation's page counts")
trace = kv_cache.request_trace(200)
for page in (None, 256, 64, 16):
    result = kv_cache.simulate_allocation(trace, 32768, page, pages_needed=counts)
    name = "contiguous" if page is None else f"pages of {page}"
    print(
        f"{name:14s} memory used for tokens {100 * result.used_share:5.1f}%   "
        f"sequences at once {result.mean_batch:5.1f}   steps {result.steps:5d}   preemptions {result.preemptions}"
    )

# %% [markdown]
# More sequences in the same memory means larger decode batches, and chapter 1 showed what
# larger batches do for throughput. Smaller pages waste less, but each page is a separate lookup
# for the attention kernel; vLLM uses 16 tokens.
#
# ### Try it
#
# Move the page size from 1 to 1024, and read the line under the numbers: how much of paging's
# advantage is left once a page holds half a request's maximum length? Below 64 the waste is a few
# per cent. Halve the capacity: how do the preemptions change?

# %%
plots.widget_paging(kv_cache.yours(globals(), "pages_needed", "the chart's page counts"))

# %% [markdown]
# ## 5. Measured: generation with and without the cache
#
# Without a cache, step $t$ reruns the model over all $t$ tokens so far: the total work grows
# with the square of the length. With the cache each step processes one token: linear. Here is
# the course model on this machine (greedy, a one-byte prompt), each length timed both ways in
# turn, the median of several repeats, with the thread count chosen for this machine:

# %%
seed_prompt = corpus.encode("\n")[None].to(device)
print(timing.pin_threads(lambda: generate(target, seed_prompt, 32), device))
measured = kv_cache.cache_timings(target, seed_prompt, GEN_LENGTHS, repeats=REPEATS)
for length, a, b in zip(GEN_LENGTHS, measured["with_cache"], measured["without_cache"], strict=True):
    print(f"{length:4d} tokens: cache {a:6.2f} s, no cache {b:6.2f} s: {b / a:5.1f}x")
print(kv_cache.cache_speed_reading(**measured))
plots.plot_cache_speed(GEN_LENGTHS, measured["with_cache"], measured["without_cache"])

# %% [markdown]
# What holds everywhere: without the cache the time grows faster than the length, with it in
# proportion, so the cache's advantage grows with the length, and the reading above says from
# which length on it reaches a given factor on this machine. For a model this small, each step's
# fixed costs (launching dozens of small operations) are a large part of its time and hide part
# of the difference at short lengths.
#
# ## In practice
#
# * **Run it on a pretrained LLM**: [chapter 8, section 4](08_in_practice.ipynb#chapter-4) checks the bytes-per-token formula against the cache transformers keeps for SmolLM2-135M.
# * **transformers** keeps the cache in `past_key_values` (a `DynamicCache` by default;
#   `StaticCache` preallocates for `torch.compile`); `generate(use_cache=True)` is the default.
# * **vLLM** pages the cache (PagedAttention, 16-token blocks), shares pages between requests with
#   a common prefix, and preempts by recomputing or swapping to CPU memory.
# * Cache quantization (fp8 KV caches in vLLM and TensorRT-LLM) halves the cache again.
#
# ## Check yourself
#
# 1. How many bytes per token does Llama-3-8B's cache take in fp16, and why is it a quarter of
#    Llama-2-7B's?
# 2. Why can the keys and values of earlier tokens be reused, and why not their outputs'
#    attention weights?
# 3. A server reserves 2,048 tokens per request and the average request uses 500. What share of
#    the cache holds tokens?
# 4. Why do larger pages waste more memory, and what do smaller pages cost?
#
# <details><summary>Answers</summary>
#
# 1. 2 x 32 x 8 x 128 x 2 = 131,072 bytes (128 KiB); 8 key-value heads instead of 32.
# 2. A token's key and value depend only on that token and the ones before it (causal), so they
#    never change. Its attention weights over the context change as the context grows, but only
#    the new token's query needs them.
# 3. About 500 / 2048 = 24%: inside the 20.4-38.2% that PagedAttention measured.
# 4. Only the last page of a sequence is partly empty, on average half a page per sequence; larger
#    pages make that half larger. Smaller pages mean a longer page table per sequence and more
#    scattered reads for the attention kernel.
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

quiz.show("kv_cache")


# %% nbgrader={"grade": false, "grade_id": "quiz_kv_cache", "locked": false, "schema_version": 3, "solution": true}
def quiz_answers():
    """Your answer to each question of the quiz: question number -> letter."""
    ### BEGIN SOLUTION
    return {1: "c", 2: "d", 3: "b", 4: "a", 5: "b", 6: "c"}
    ### END SOLUTION


# %% tags=["raises-exception"] nbgrader={"grade": true, "grade_id": "test_quiz_kv_cache", "locked": true, "points": 6, "schema_version": 3, "solution": false}
from autograder import check

check("quiz_kv_cache")
### BEGIN HIDDEN TESTS
check("quiz_kv_cache", hidden=True)
### END HIDDEN TESTS
