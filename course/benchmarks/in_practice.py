"""Chapter 8's measurements for ``make bench``: SmolLM2-135M decoding against the roofline, batched,
with int4 weights, and with prompt lookup and an int8 draft; the course's GPTQ against llmcompressor's
on the whole model, and llmcompressor's AWQ and SmoothQuant."""

from __future__ import annotations

import torch

from course import evaluation, pretrained, timing
from course import speculative_decoding as speculative
from course.in_practice import AsCourseModel, chat_prompt, int4_linears, int8_draft, storage_bytes


def calibrated_quantization(
    model,
    tokenizer,
    blocks: int = 30,
    calibration: tuple[int, int] = (16, 256),
    eval_tokens: int = 2048,
    grid: int = 20,
) -> dict[str, float]:
    """Chapter 8's GPTQ check on the whole model (the chapter runs its first blocks): the course's GPTQ
    against llmcompressor's (codes layer by layer, output error, held-out loss), and llmcompressor's
    AWQ and SmoothQuant W8A8, calibrated on ``calibration`` (windows, tokens) of the training plays,
    the loss on ``eval_tokens`` of the held-out plays. The loss ratios are each method's excess over
    float32 against round to nearest's (or W8A8 alone's)."""
    from course import corpus, gptq_library_check, in_practice

    try:
        pretrained.require("llmcompressor")
    except pretrained.MissingPackage as error:
        print(f"skipped: {error}")
        return {}
    train = in_practice.encode(tokenizer, corpus.decode(corpus.tokens("train")[:400_000]))
    held_out = in_practice.encode(tokenizer, corpus.decode(corpus.tokens("validation")[:40_000]))[: eval_tokens + 1]
    windows = gptq_library_check.calibration_windows(train, *calibration)
    names = [name for name in in_practice.linear_layers(model) if int(name.split(".")[2]) < blocks]

    def loss(m):
        return evaluation.text_loss(AsCourseModel(m), held_out, seq_len=256, batch=4)

    gptq = gptq_library_check.compare_gptq(model, tokenizer, pretrained.load, windows, names, loss)
    print(f"GPTQ, 4 bits, groups of 64, {len(names)} layers, calibration {calibration[0]} x {calibration[1]} tokens:")
    print(gptq_library_check.agreement_reading(gptq.agreements, 4))
    for label, ratios in gptq.error_ratios.items():
        print(f"{label}: output error {ratios.median():.3f} of round to nearest's (median)")
    losses = dict(gptq.losses)
    losses["llmcompressor's AWQ"] = loss(
        gptq_library_check.library_quantized(
            pretrained.load, gptq_library_check.awq_recipe(names, grid=grid), windows, tokenizer
        )
    )
    for label, smooth in (("W8A8", False), ("SmoothQuant + W8A8", True)):
        recipe = gptq_library_check.smoothquant_recipe(names, smooth=smooth)
        losses[label] = loss(gptq_library_check.library_quantized(pretrained.load, recipe, windows, tokenizer))
    for label, value in losses.items():
        print(f"{label:22s} held-out loss {value:.4f} nats per token ({eval_tokens} tokens)")
    print(
        gptq_library_check.losses_reading(
            losses, "float32", "round to nearest", [*gptq_library_check.GPTQ_METHODS, "llmcompressor's AWQ"]
        )
    )

    def excess(label, reference):
        return (losses[label] - losses["float32"]) / (losses[reference] - losses["float32"])

    return {
        "smollm2_gptq_code_agreement": gptq.share,
        "smollm2_course_gptq_error_vs_rtn": float(gptq.error_ratios["course's GPTQ"].median()),
        "smollm2_library_gptq_error_vs_rtn": float(gptq.error_ratios["llmcompressor's GPTQ"].median()),
        "smollm2_course_gptq_loss_vs_rtn": excess("course's GPTQ", "round to nearest"),
        "smollm2_library_gptq_loss_vs_rtn": excess("llmcompressor's GPTQ", "round to nearest"),
        "smollm2_awq_loss_vs_rtn": excess("llmcompressor's AWQ", "round to nearest"),
        "smollm2_smoothquant_loss_vs_w8a8": excess("SmoothQuant + W8A8", "W8A8"),
    }


def benchmark(device: torch.device, bound: float) -> dict[str, float]:
    """``make bench``'s measurements of this chapter (printed; ratios returned for
    ``data/performance.json``): SmolLM2-135M on the CPU whatever ``device`` is, threads chosen as the
    chapter chooses them: decode against the memory roofline ``bound`` (GB/s), batch 8 against batch 1,
    int4 weights against float32, and speculative decoding against greedy (same output)."""
    print("\n== chapter 8: SmolLM2-135M (transformers) ==")
    try:
        model, tokenizer = pretrained.load()
    except pretrained.MissingPackage as error:
        print(f"skipped: {error}")
        return {}
    view = AsCourseModel(model)
    one = tokenizer("The", return_tensors="pt").input_ids
    with torch.no_grad():
        chosen, tried = timing.choose_threads(lambda: model(input_ids=one))
    print(timing.describe_threads(chosen, tried))
    with timing.threads(chosen):
        step = evaluation.decode_step_seconds(view, 1, steps=6)
        floor = storage_bytes(model) / (bound * 1e9)
        batch8 = evaluation.decode_step_seconds(view, 8, steps=6)
        with int4_linears(model, 64, output_layer=True):
            int4_step = evaluation.decode_step_seconds(view, 1, steps=6)
        print(
            f"decode batch 1 with int4 weights (the course's int4 layer, fused kernel, the output layer too): "
            f"{1 / int4_step:.1f} tokens/s against float32's {1 / step:.1f}: {step / int4_step:.2f}x"
        )
        print(
            f"decode batch 1: {1e3 * step:.1f} ms a token = {floor / step:.2f} of the memory roofline "
            f"({1e3 * floor:.1f} ms)"
        )
        print(f"decode batch 8: {8 * step / batch8:.2f}x the tokens per second of batch 1 (8 if memory-bound)")
        text = "A stitch in time saves nine, and a penny saved is a penny earned. " * 3
        request = chat_prompt(tokenizer, "Copy this text exactly:\n\n" + text)
        greedy_seconds = timing.median_seconds(
            lambda: model.generate(request, max_new_tokens=48, do_sample=False), warmup=1, repeats=3
        )
        lookup_seconds = timing.median_seconds(
            lambda: model.generate(request, max_new_tokens=48, do_sample=False, prompt_lookup_num_tokens=10),
            warmup=1,
            repeats=3,
        )
        greedy = model.generate(request, max_new_tokens=48, do_sample=False)
        new = greedy.shape[1] - request.shape[1]
        draft = AsCourseModel(int8_draft(model))
        course_seconds = timing.median_seconds(
            lambda: speculative.speculative_generate(view, draft, request, 4, new, temperature=0), warmup=0, repeats=3
        )
        same = torch.equal(speculative.speculative_generate(view, draft, request, 4, new, temperature=0)[0], greedy)
    print(f"prompt lookup (transformers): {greedy_seconds / lookup_seconds:.2f}x greedy's speed, {new} tokens")
    print(
        f"int8 draft, k = 4 (course's speculative_generate): {greedy_seconds / course_seconds:.2f}x; "
        f"same output: {same}"
    )
    library = calibrated_quantization(model, tokenizer)
    return {
        **library,
        "smollm2_decode_vs_roofline": floor / step,
        "smollm2_batch8_speedup": 8 * step / batch8,
        "smollm2_int4_decode_speedup": step / int4_step,
        "smollm2_prompt_lookup_speedup": greedy_seconds / lookup_seconds,
        "smollm2_int8_draft_speedup": greedy_seconds / course_seconds,
    }
