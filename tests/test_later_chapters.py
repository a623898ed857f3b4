"""The package code behind chapters 2 and 4 to 7: adapters on the course model, the KV cache's
sizes and paging, exact blockwise attention (and the Triton kernel through its interpreter),
speculative decoding's exactness, and the distillation loss. Independent references throughout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from course import attention as at
from course import checkpoints, corpus, distill, kv_cache, lora
from course import speculative as sp
from course.model import generate


# --- chapter 2: adapters on the whole model ----------------------------------------------------------

def test_adapters_hot_swap_without_touching_the_base():
    model = checkpoints.load("draft")
    fingerprint = lora.weights_fingerprint(model)
    windows = corpus.tokens("validation")[:2 * 65].reshape(2, 65)[:, :-1]
    with torch.no_grad():
        plain = model(windows)
    first, second = lora.make_adapter(model, 2), lora.make_adapter(model, 4, seed=1)
    lora.use_adapter(model, first)
    with torch.no_grad():
        assert torch.allclose(model(windows), plain, atol=1e-6)  # B = 0: the adapter starts at the base
    lora.finetune(model, lora.adapter_parameters(first), corpus.domain_tokens("adapt"), 3, lr=1e-2, batch=2,
                  seq_len=32, progress=False)
    with torch.no_grad():
        adapted = model(windows)
    assert not torch.allclose(adapted, plain, atol=1e-4)
    lora.use_adapter(model, second)
    with torch.no_grad():
        assert torch.allclose(model(windows), plain, atol=1e-6)
    lora.use_adapter(model, first)
    with torch.no_grad():
        assert torch.equal(model(windows), adapted)
    lora.use_adapter(model, None)
    assert lora.weights_fingerprint(model) == fingerprint
    other = checkpoints.load("draft")
    with pytest.raises(ValueError, match="another model"):
        lora.use_adapter(other, first)


def test_domain_split_keeps_evaluation_plays_apart():
    adapt, evaluation = corpus.domain_tokens("adapt"), corpus.domain_tokens("eval")
    assert len(adapt) > 2 * len(evaluation) > 0
    assert corpus.encode("MALVOLIO").tolist() not in [adapt[i:i + 8].tolist() for i in range(0, 2000)]
    with pytest.raises(ValueError, match="adapt"):
        corpus.domain_tokens("train")


# --- chapter 4: the KV cache ---------------------------------------------------------------------------

def test_cache_bytes_match_published_figures():
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 1) == 512 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-3-8B"], 1) == 128 * 1024
    assert kv_cache.cache_bytes(kv_cache.PUBLISHED["Llama-2-7B"], 32768) == pytest.approx(17.18e9, rel=1e-3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_cache.kv_cache_bytes(32, 0, 128, 10)


def test_cached_steps_equal_causal_attention():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(40, 16, generator=g, dtype=torch.float64) for _ in range(3))
    cache_k, cache_v, outs = torch.zeros(0, 16, dtype=torch.float64), torch.zeros(0, 16, dtype=torch.float64), []
    for t in range(40):
        out, cache_k, cache_v = kv_cache.attention_step(q[t], k[t], v[t], cache_k, cache_v)
        outs.append(out)
    assert torch.allclose(torch.stack(outs), at.naive_attention(q, k, v, causal=True), atol=1e-12)


def test_paging_uses_memory_better_than_contiguous():
    trace = kv_cache.request_trace(120, seed=3)
    contiguous = kv_cache.simulate_allocation(trace, 32768, None)
    paged = kv_cache.simulate_allocation(trace, 32768, 16)
    assert 0.15 < contiguous.used_share < 0.45  # PagedAttention measured 20.4-38.2% in earlier systems
    assert paged.used_share > 0.96  # vLLM: under 4% waste
    assert paged.mean_batch > 2 * contiguous.mean_batch and paged.steps < contiguous.steps
    for reserved, used, _ in paged.timeline:
        assert used <= reserved <= 32768
    assert kv_cache.pages_needed([5, 16, 17], 16) == 4


# --- chapter 5: attention -------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 7, 16, 64, 100, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_attention_is_exact(block, causal):
    g = torch.Generator().manual_seed(block)
    q, k, v = (torch.randn(2, 3, 100, 16, generator=g, dtype=torch.float64) for _ in range(3))
    assert torch.allclose(at.blockwise_attention(q, k, v, block, causal), at.naive_attention(q, k, v, causal),
                          atol=1e-12)


def test_blockwise_attention_is_stable_for_large_scores_and_checks_shapes():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(8, 16, generator=g) for _ in range(3))
    out = at.blockwise_attention(q * 1000, k, v, 3)
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="head dim"):
        at.blockwise_attention(q, k[:, :8], v, 4)
    with pytest.raises(ValueError, match="block"):
        at.blockwise_attention(q, k, v, 0)


def test_io_model_tiled_moves_less_at_long_sequences():
    sram = 192 * 1024 / 2
    assert at.tiled_io_elements(16384, 64, sram) < at.standard_io_elements(16384, 64) / 5
    ratio = at.tiled_io_elements(32768, 64, sram) / at.tiled_io_elements(16384, 64, sram)
    assert 3.5 < ratio < 4.5  # Theta(N^2 d^2 / M): quadratic in N


TRITON_SCRIPT = textwrap.dedent("""
    import torch
    from course import attention as at
    from course.kernels import flash
    g = torch.Generator().manual_seed(0)
    cases = [((2, 3, 100, 32), False, 16), ((1, 2, 77, 16), True, 32), ((1, 1, 64, 64), True, 64),
             ((2, 50, 16), False, 16), ((1, 1, 40, 16), False, 128)]
    for shape, causal, block in cases:
        q, k, v = (torch.randn(*shape, generator=g) for _ in range(3))
        error = (flash.blockwise_attention(q, k, v, block, causal) - at.naive_attention(q, k, v, causal)).abs().max()
        assert error < 1e-5, (shape, causal, block, float(error))
    try:
        flash.blockwise_attention(q, k, v, 24)
    except ValueError as e:
        assert "block" in str(e)
    else:
        raise AssertionError("block 24 accepted")
    print("ok", len(cases))
""")


def test_triton_kernel_matches_the_reference_in_the_interpreter():
    pytest.importorskip("triton", reason="triton is installed with the dev extra on Linux: pip install triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", TRITON_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok 5" in done.stdout, done.stderr[-3000:]


# --- chapter 6: speculative decoding ---------------------------------------------------------------------

def test_speculative_sampling_reproduces_the_target():
    p = torch.tensor([0.05, 0.5, 0.2, 0.25, 0.0])
    q = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.3])
    g = torch.Generator().manual_seed(0)
    draws = [sp.speculative_token(p, q, g) for _ in range(40_000)]
    freq = torch.bincount(torch.tensor([t for t, _ in draws]), minlength=5).double() / len(draws)
    assert (freq - p.double()).abs().max() < 0.01
    assert abs(sum(a for _, a in draws) / len(draws) - sp.acceptance_rate(p, q)) < 0.01


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.95])
def test_tokens_per_call_formula_matches_simulation(alpha):
    p, q = torch.tensor([alpha, 1 - alpha, 0.0]), torch.tensor([alpha, 0.0, 1 - alpha])
    simulated = sp.simulate_tokens_per_call(p, q, 5, 4000, seed=1)
    assert simulated == pytest.approx(sp.expected_tokens_per_call(alpha, 5), rel=0.05)
    assert sp.expected_tokens_per_call(1.0, 5) == 6
    assert sp.speedup(0.8, 5, 0.05) == pytest.approx(2.95, abs=0.01)  # Leviathan et al.'s example


def test_speculative_generate_greedy_equals_the_target():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    prompt = corpus.encode("ROMEO:\n")[None]
    alone = generate(target, prompt, 60)
    for k in (1, 3, 5):
        run = sp.speculative_generate(target, draft, prompt, k, 60, temperature=0)
        assert torch.equal(run["tokens"], alone), k
        assert run["target_calls"] < 60


def test_speculative_generate_samples_the_targets_first_token_distribution():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    prompt = corpus.encode("KING:\nI ")[None]
    with torch.no_grad():
        p = torch.softmax(target(prompt)[0, -1].double(), -1)
    counts = torch.zeros(256, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    n = 1500
    for _ in range(n):
        counts[sp.speculative_generate(target, draft, prompt, 2, 1, temperature=1.0, generator=g)["tokens"][0, -1]] += 1
    top = p.argsort(descending=True)[:5]
    spread = (p[top] * (1 - p[top]) / n).sqrt()
    assert ((counts[top] / n - p[top]).abs() <= 5 * spread + 1e-3).all()


# --- chapter 7: distillation ----------------------------------------------------------------------------

def test_distillation_loss_against_a_direct_formula():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(3, 4, 7, generator=g, dtype=torch.float64), torch.randn(3, 4, 7, generator=g, dtype=torch.float64)
    for temperature in (1.0, 2.0, 5.0):
        ps, pt = torch.softmax(s / temperature, -1), torch.softmax(t / temperature, -1)
        direct = (pt * (pt.log() - ps.log())).sum(-1).mean() * temperature**2
        assert distill.distillation_loss(s, t, temperature).item() == pytest.approx(direct.item(), rel=1e-6)
    assert distill.distillation_loss(t, t, 3.0).item() == pytest.approx(0.0, abs=1e-6)
    assert distill.distillation_loss(torch.zeros(1, 2), torch.tensor([[2.0, 0.0]])).item() == pytest.approx(0.328, abs=1e-3)
    with pytest.raises(ValueError, match="same shape"):
        distill.distillation_loss(s, t[:, :2])


def test_distilled_draft_agrees_with_the_target_more_than_the_plain_draft():
    target = checkpoints.load("target")
    text = corpus.tokens("validation")
    windows = torch.stack([text[s:s + 128] for s in torch.linspace(0, len(text) - 129, 12).long().tolist()])
    with torch.no_grad():
        p = torch.softmax(target(windows).double(), -1)
        overlap = {name: torch.minimum(p, torch.softmax(checkpoints.load(name)(windows).double(), -1)).sum(-1).mean().item()
                   for name in ("draft", "distilled")}
    assert overlap["distilled"] > overlap["draft"] + 0.02, overlap
    assert checkpoints.card("distilled")["training"]["teacher"] == "target"
