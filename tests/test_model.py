"""The course model: cached decoding equals recomputation, GQA equals MHA with repeated heads,
the written-out attention equals torch's, training lowers the loss, checkpoints are verified."""

import pytest
import torch

from course import checkpoints, corpus
from course.model import KVCache, LanguageModel, ModelConfig, causal_mask, generate, repeat_kv, sample
from course.train import TrainConfig, fixed_windows, loss_on, train

TINY = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64)


def tiny_model(config=TINY, seed=0) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(config).eval()


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cached_generation_equals_recomputation(kv_heads):
    model = tiny_model(ModelConfig(**{**TINY.to_dict(), "n_kv_heads": kv_heads}))
    prompt = torch.randint(0, 256, (3, 7), generator=torch.Generator().manual_seed(1))
    cached, cached_logits = generate(model, prompt, 25, use_cache=True, return_logits=True)
    full, full_logits = generate(model, prompt, 25, use_cache=False, return_logits=True)
    assert torch.equal(cached, full)
    assert (cached_logits - full_logits).abs().max() < 1e-5


def test_sampled_generation_is_the_same_with_and_without_the_cache():
    model = tiny_model()
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(2))
    a = generate(model, prompt, 20, temperature=1.0, top_k=10, generator=torch.Generator().manual_seed(3))
    b = generate(
        model, prompt, 20, temperature=1.0, top_k=10, use_cache=False, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(a, b)


def test_prefill_in_chunks_equals_one_pass():
    model = tiny_model()
    tokens = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(4))
    whole = model(tokens)
    cache = model.new_cache(2)
    parts = torch.cat([model(tokens[:, :8], cache), model(tokens[:, 8:9], cache), model(tokens[:, 9:], cache)], dim=1)
    assert cache.length == 20
    assert (whole - parts).abs().max() < 1e-5


def test_grouped_query_attention_equals_mha_with_repeated_heads():
    gqa = tiny_model(ModelConfig(**{**TINY.to_dict(), "n_kv_heads": 2}))
    mha = LanguageModel(ModelConfig(**{**TINY.to_dict(), "n_kv_heads": 4})).eval()
    state = gqa.state_dict()
    d = TINY.head_dim
    for name, value in state.items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            heads = value.view(2, d, TINY.d_model)  # (K, D, C)
            state[name] = heads.repeat_interleave(2, dim=0).reshape(4 * d, TINY.d_model)  # (H, D, C) flattened
    mha.load_state_dict(state)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(5))
    assert (gqa(tokens) - mha(tokens)).abs().max() < 1e-5
    x = torch.randn(1, 2, 3, 4)
    assert torch.equal(repeat_kv(x, 3)[:, 3:6], x[:, 1:2].expand(1, 3, 3, 4))


def test_written_out_attention_equals_the_fused_kernel():
    model = tiny_model()
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(6))
    fused = model(tokens)
    model.set_attention(use_sdpa=False)
    assert (fused - model(tokens)).abs().max() < 1e-5


def test_causal_mask_aligns_the_last_query_with_the_last_key():
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert torch.equal(causal_mask(5, 9, start=3, stop=7), causal_mask(5, 9)[:, 3:7])


def test_causality():
    model = tiny_model()
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(7))
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 256
    assert torch.allclose(model(tokens)[:, :8], model(changed)[:, :8], atol=1e-6)


def test_training_a_few_steps_lowers_the_loss():
    data = corpus.tokens("validation")[:50_000]
    cfg = TrainConfig(steps=40, batch=8, seq_len=32, lr=3e-3, warmup=5, eval_every=40, eval_windows=8, bf16=False)
    windows = fixed_windows(data, 8, 32)
    before = loss_on(LanguageModel(TINY).eval(), windows)  # same seed as train's fresh model
    torch.manual_seed(cfg.seed)
    model, rows = train(TINY, cfg, data, data, progress=False)
    assert rows[-1]["val_loss"] < before - 1.0
    assert rows[-1]["val_loss"] == pytest.approx(loss_on(model, windows), abs=1e-3)


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="must divide n_heads"):
        ModelConfig(n_heads=8, n_kv_heads=3)
    with pytest.raises(ValueError, match="must divide d_model"):
        ModelConfig(d_model=100, n_heads=8)
    model = tiny_model()
    with pytest.raises(ValueError, match="exceed the model's 64 positions"):
        generate(model, torch.zeros(1, 60, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="prompt must be"):
        generate(model, torch.zeros(5, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="temperature"):
        sample(torch.zeros(1, 256), temperature=-1)
    with pytest.raises(ValueError, match="exceeds the model"):
        KVCache(TINY, 1, max_len=65)


def test_corpus_split_is_by_whole_plays():
    rows = corpus.summary()
    plays = [set(rows[split]["plays"]) for split in corpus.SPLITS]
    assert sum(len(p) for p in plays) == len(corpus.catalogue()) == 38
    assert all(not (a & b) for i, a in enumerate(plays) for b in plays[i + 1 :])
    assert set(corpus.VALIDATION_PLAYS) == plays[1] and len(plays[2]) == 8
    assert corpus.decode(corpus.encode("MACBETH:\nSo foul")) == "MACBETH:\nSo foul"
    assert "\nMACBETH:\nSo foul and fair a day I have not seen.\n" in corpus.text("validation")
    assert "**" not in corpus.text("train")


def test_checkpoint_round_trip_and_checksum(tmp_path):
    model = tiny_model()
    checkpoints.save(model, "tiny", {"note": "test"}, folder=tmp_path)
    loaded = checkpoints.load("tiny", folder=tmp_path)
    tokens = torch.randint(0, 256, (1, 10))
    assert torch.equal(model(tokens), loaded(tokens))
    weights = tmp_path / "tiny" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum mismatch.*git checkout"):
        checkpoints.load("tiny", folder=tmp_path)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        checkpoints.load("tiny", folder=tmp_path)
    with pytest.raises(FileNotFoundError, match="make model"):
        checkpoints.load("nonexistent", folder=tmp_path)


def test_the_learners_copy_says_how_to_get_a_missing_checkpoint_back_without_git_or_make(tmp_path, monkeypatch):
    from course import withheld

    monkeypatch.setattr(withheld, "in_learners_copy", lambda: True)
    checkpoints.save(tiny_model(), "tiny", {"note": "test"}, folder=tmp_path)
    (tmp_path / "tiny" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="missing: unpack the course folder your instructor gave you") as error:
        checkpoints.load("tiny", folder=tmp_path)
    assert "make" not in str(error.value) and "git" not in str(error.value)
