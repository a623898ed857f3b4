"""Chapter 8's experiments on the pretrained model that run an earlier chapter's answers (chapter 2's
``LoRALinear``, chapter 3's int8 quantization, round trips and GPTQ, chapter 5's blockwise attention,
chapter 6's speculative loop), of plain data in and out: token ids, names and numbers. Each runs on
the model as loaded (:func:`course.in_practice.pristine`) and leaves it, and torch's random stream,
as it found them. Shipped code reaches them through ``withheld.module("course.answers.in_practice")``
(``course/in_practice.py``'s functions of the same names); the learners' copy, which leaves this
module out, answers them from its recordings."""

from __future__ import annotations

import torch

from course import flash_attention, lora, quantization
from course import speculative_decoding as speculative
from course.in_practice import (
    DRAFTS,
    AsCourseModel,
    attention_implementation,
    attention_inputs,
    blockwise_attention_function,
    held_out_loss,
    int8_draft,
    linear_inputs,
    own_random,
    pristine,
    quantized_weights,
    seeded_adapter,
)
from course.model import repeat_kv


@own_random
def lora_linear_output(path: str, r: int, alpha: float, tokens: int, seed: int = 0) -> torch.Tensor:
    """The course's LoRALinear over the model's linear layer ``path``, with :func:`seeded_adapter`'s
    A and B, on its x: (tokens, d_out)."""
    model, _ = pristine()
    base = model.get_submodule(path)
    a, b, x = seeded_adapter(base.in_features, base.out_features, r, tokens, seed)
    with torch.no_grad():
        ours = lora.course_answer("LoRALinear")(base, r, alpha=alpha)
        ours.lora_A.copy_(a)
        ours.lora_B.copy_(b)
        return ours(x)


@own_random
def requantized_loss(ids: torch.Tensor, method: str, group_size: int | None = None) -> float:
    """:func:`held_out_loss` on ``ids`` with every decoder linear layer through the course's round trip."""
    model, _ = pristine()
    with quantized_weights(model, method, group_size):
        return held_out_loss(model, ids)


@own_random
def outlier_product_errors(ids: torch.Tensor, layer: int, name: str, threshold: float = 6.0) -> tuple[float, float]:
    """Relative error of ``x @ W.T`` for the inputs x that layer ``layer``'s ``name`` sees on
    ``ids`` (T,): all in int8, and with the features reaching ``threshold`` in float (LLM.int8())."""
    model, _ = pristine()
    x = linear_inputs(model, ids[None], names=(name,))[(layer, name)]  # (tokens, features)
    path = f"model.layers.{layer}.{'mlp' if name in ('gate_proj', 'up_proj', 'down_proj') else 'self_attn'}.{name}"
    weight = model.get_submodule(path).weight.detach()
    exact = x @ weight.T
    int8 = quantization.course_answer("quantize_int8")  # chapter 3's exercise: the course's answer
    mixed, _ = quantization.int8_matmul_with_outliers(x, weight, threshold, quantize_int8=int8)
    return (
        quantization.relative_norm_error(exact, quantization.int8_matmul(x, weight, quantize_int8=int8)),
        quantization.relative_norm_error(exact, mixed),
    )


@own_random
def blockwise_differences(ids: torch.Tensor, layer: int, blocks: list[int]) -> list[float]:
    """Largest |blockwise_attention - SDPA| (causal) on the q, k, v attention layer ``layer`` sees for
    ``ids`` (T,), for each block size of ``blocks``."""
    model, _ = pristine()
    q, k, v = attention_inputs(model, ids[None], layer)
    n_rep = q.shape[1] // k.shape[1]
    k_all, v_all = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, T, D)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k_all, v_all, is_causal=True)
    return [
        (flash_attention.batched_blockwise_attention(q, k_all, v_all, block, causal=True) - fused).abs().max().item()
        for block in blocks
    ]


@own_random
def blockwise_logits(ids: torch.Tensor, block: int) -> tuple[float, float]:
    """The model on ``ids`` (T,) with the course's blockwise attention in every layer against torch's:
    (largest logit difference, share of positions with the same argmax)."""
    model, _ = pristine()
    with torch.no_grad():
        reference = model(input_ids=ids[None]).logits
        with attention_implementation(model, "course_blockwise", blockwise_attention_function(block)):
            swapped = model(input_ids=ids[None]).logits
    same = (swapped.argmax(-1) == reference.argmax(-1)).float().mean().item()
    return (swapped - reference).abs().max().item(), same


@own_random
def speculative_on_model(prompt: torch.Tensor, draft: str, k: int, new: int) -> tuple[torch.Tensor, list]:
    """The course's ``speculative_generate`` at temperature 0 with the model as target and ``draft``
    (one of ``DRAFTS``: prompt lookup of 2 tokens down to 1, or ``int8_draft``): (tokens, rounds)."""
    model, _ = pristine()
    if draft not in DRAFTS:
        raise ValueError(f"draft must be one of {', '.join(DRAFTS)}, got {draft!r}")
    drafter = (
        speculative.PromptLookupDraft(longest=2, shortest=1, vocab_size=model.config.vocab_size)
        if draft == "prompt lookup"
        else AsCourseModel(int8_draft(model))
    )
    tokens, rounds = speculative.speculative_generate(AsCourseModel(model), drafter, prompt, k, new, temperature=0)
    return tokens, [list(r) for r in rounds]


@own_random
def gptq_on_pretrained(windows: torch.Tensor, ids: torch.Tensor, names: list[str]) -> dict:
    """``course.gptq_library_check.compare_gptq`` on the pretrained model as loaded, calibrated on ``windows``
    (n, T), its loss :func:`course.in_practice.held_out_loss` on ``ids`` (T,), as plain data
    (``course.gptq_library_check.comparison_of`` makes it a ``Comparison`` again)."""
    from course import gptq_library_check, pretrained

    model, tokenizer = pristine()
    found = gptq_library_check.compare_gptq(
        model, tokenizer, pretrained.load, windows, names, lambda m: held_out_loss(m, ids)
    )
    return {
        "agreements": {
            name: [a.same, a.total, a.rows_differing, a.first_at_extra_level] for name, a in found.agreements.items()
        },
        "losses": found.losses,
        "error_ratios": found.error_ratios,
    }
