"""``make bench`` (``python tools/benchmarks.py``): the course's measurements on this machine, as ratios.

Each line gives a ratio against a baseline timed in the same run, and against the physical bound
where there is one (this machine's memory bandwidth, measured first). Nothing here asserts a time;
the numbers are for reading, and for the closing notes of the work that changes them.
"""

from __future__ import annotations

import json
import statistics
import time

import torch

from course import paths, quantization, timing
from course.device import best_device, describe, synchronize, triton_available
from course.plots._widgets import figure_png

SLIDER_BUDGET = 0.1  # seconds per slider update
CHAPTER_BUDGET, COURSE_BUDGET = 90.0, 600.0  # seconds headless, per chapter and for all of them
REPORT = paths.DATA / "performance.json"
CACHE_LENGTHS = [64, 128, 256, 512]  # generated tokens, with and without the KV cache


def quantization_speed(device: torch.device, bound: float) -> None:
    print("\n== chapter 3: quantization ==")
    weight = quantization.gaussian_matrix(4096, 4096).to(device)
    seconds = timing.median_seconds(lambda: quantization.quantize_dequantize(weight, 4, 64), device, repeats=5)
    moved = 2 * weight.numel() * 4  # read the float32 weights, write them back
    print(
        f"int4 g64 round trip, 4096x4096: {1e3 * seconds:.1f} ms, {timing.gb_per_s(moved, seconds):.1f} GB/s "
        f"= {timing.gb_per_s(moved, seconds) / bound:.2f} of memory bandwidth"
    )

    nf4 = timing.median_seconds(lambda: quantization.quantize_nf4(weight, 64), device, repeats=3)
    levels = quantization.nf4_levels().to(device)
    small = weight[:512]

    def argmin_baseline():
        grouped = small.reshape(512, -1, 64)
        normalised = grouped / grouped.abs().amax(dim=-1, keepdim=True)
        return (normalised.unsqueeze(-1) - levels).abs().argmin(dim=-1)

    naive = timing.median_seconds(argmin_baseline, device, repeats=3) * (weight.shape[0] / 512)
    print(
        f"NF4 encode 4096x4096 (bucketize on midpoints): {1e3 * nf4:.0f} ms; "
        f"argmin over 16 levels baseline: {1e3 * naive:.0f} ms; speed-up {naive / nf4:.1f}x"
    )

    rows = {dtype: timing.matvec_bandwidth(4096, 4096, dtype, device) for dtype in (torch.float32, torch.bfloat16)}
    for row in rows.values():
        print(
            f"matvec 4096x4096 {row['dtype']:8s}: {1e3 * row['seconds']:.2f} ms, {row['gb_per_s']:.1f} GB/s "
            f"= {row['gb_per_s'] / bound:.2f} of memory bandwidth"
        )
    print(
        f"bf16 / fp32 matvec time: {rows[torch.bfloat16]['seconds'] / rows[torch.float32]['seconds']:.2f} "
        "(0.5 if reading the weights were all that counted)"
    )


def slider_latency() -> dict[str, float]:
    """Median time of one slider update (recompute plus redraw to PNG) over a sweep of its values."""
    import course.plots.flash_attention
    import course.plots.kv_cache
    import course.plots.lora
    import course.plots.prefill_decode
    import course.plots.quantization
    import course.plots.speculative_decoding

    plots = course.plots

    print("\n== slider updates (recompute + redraw to PNG; goal 100 ms) ==")
    sweeps = {
        "ch1 batch": (plots.prefill_decode.plot_roofline, [dict(batch=b) for b in (1, 4, 16, 64, 256, 1024)]),
        "ch1 hardware": (
            plots.prefill_decode.plot_roofline,
            [dict(hardware=h) for h in ("T4", "A100-80G", "H100 SXM", "H200")],
        ),
        "ch1 arrival rate": (plots.prefill_decode.plot_batching, [dict(rate=r) for r in (2.0, 8.0, 20.0, 40.0)]),
        "ch3 bits": (plots.quantization.plot_quantization, [dict(bits=b, group_size=32) for b in range(2, 9)]),
        "ch3 group size": (
            plots.quantization.plot_quantization,
            [dict(group_size=g) for _, g in plots.quantization.GROUP_CHOICES],
        ),
        "ch3 outlier": (plots.quantization.plot_quantization, [dict(outlier=o) for o in (1.0, 10.0, 20.0, 40.0, 60.0)]),
        "ch2 rank": (plots.lora.plot_rank_error, [dict(rank=r) for r in (1, 2, 4, 8, 16, 32)]),
        "ch2 noise": (plots.lora.plot_rank_error, [dict(noise=n) for n in (0.0, 0.02, 0.1, 0.5)]),
        "ch2 parameters": (plots.lora.plot_finetune_memory, [dict(params=p * 1e9) for p in (1, 7, 13, 70)]),
        "ch4 context": (plots.kv_cache.plot_kv_cache, [dict(context=c) for c in (512, 4096, 32768, 131072)]),
        "ch4 kv heads": (plots.kv_cache.plot_kv_cache, [dict(n_kv_heads=h) for h in (1, 4, 8, 32)]),
        "ch4 page size": (plots.kv_cache.plot_paging, [dict(page_size=p) for p in (1, 16, 256, 1024)]),
        "ch5 block index": (plots.flash_attention.plot_online_softmax, [dict(step=i) for i in (1, 2, 3, 4, 5, 6)]),
        "ch5 sequence length": (plots.flash_attention.plot_io, [dict(n=n) for n in (256, 4096, 65536)]),
        "ch6 alpha": (plots.speculative_decoding.plot_speculative, [dict(alpha=a) for a in (0.3, 0.6, 0.8, 0.95)]),
        "ch6 draft cost": (plots.speculative_decoding.plot_speculative, [dict(cost=c) for c in (0.0, 0.05, 0.2, 0.5)]),
    }
    over, medians = [], {}
    for name, (plot, values) in sweeps.items():
        figure_png(plot(**values[0]))  # warm-up: fonts, caches
        times = []
        for kwargs in values:
            start = time.perf_counter()
            figure_png(plot(**kwargs))
            times.append(time.perf_counter() - start)
        medians[name] = median = statistics.median(times)
        verdict = "ok" if median <= SLIDER_BUDGET else f"over by {1e3 * (median - SLIDER_BUDGET):.0f} ms"
        over += [name] if median > SLIDER_BUDGET else []
        print(f"{name:20s} median {1e3 * median:6.1f} ms over {len(values)} values ({verdict})")
    print(f"{len(over)} of {len(sweeps)} sliders over the 100 ms budget" + (f": {', '.join(over)}" if over else ""))
    return medians


def course_model(device: torch.device) -> dict[str, float]:
    from course import checkpoints, corpus, evaluation, kv_cache

    print("\n== the course model (median of 3 repeats, each length with and without the cache in turn) ==")
    for name in ("target", "draft"):
        model = checkpoints.load(name, device)
        loss = evaluation.text_loss(model, corpus.tokens("validation").to(device))
        print(
            f"{name}: {model.num_parameters():,} parameters, {loss:.3f} nats/byte on all held-out plays "
            f"(perplexity {evaluation.perplexity(loss):.2f})"
        )
    target = checkpoints.load("target", device, max_seq_len=1024)
    measured = kv_cache.cache_timings(target, corpus.encode("\n")[None].to(device), CACHE_LENGTHS, repeats=3)
    for length, a, b in zip(CACHE_LENGTHS, measured["with_cache"], measured["without_cache"], strict=True):
        print(
            f"decode, {length:3d} generated tokens: cache {a:6.2f} s, no cache {b:6.2f} s: {b / a:5.1f}x "
            "(goal 10x at 512)"
        )
    print(kv_cache.cache_speed_reading(**measured))
    prefill = evaluation.prefill_seconds_per_token(target, 1, 256)
    step = evaluation.decode_step_seconds(target, 1)
    print(
        f"prefill {1e3 * prefill:.3f} ms per prompt token, decode {1e3 * step:.2f} ms per generated token: "
        f"a generated token costs {step / prefill:.0f}x a prompt token"
    )
    speedups = [b / a for a, b in zip(measured["with_cache"], measured["without_cache"], strict=True)]
    return {f"cache_speedup_{n}": x for n, x in zip(CACHE_LENGTHS, speedups, strict=True)}


def decode_roofline(device: torch.device, bound: float) -> dict[str, float]:
    from course import evaluation, prefill_decode
    from course.model import TIMING, LanguageModel

    print("\n== chapter 1: decode against the memory roofline ==")
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    model = LanguageModel(TIMING).to(device=device, dtype=dtype).eval()
    n_bytes = model.num_parameters() * model.embed.weight.element_size()
    per_batch = evaluation.decode_throughput(model, (1, 2, 4, 8, 16, 32, 64, 128), steps=6)
    efficiency = evaluation.scaling_efficiency(per_batch)
    predicted = bound * 1e9 / n_bytes  # tokens/s at batch 1 if reading the weights were all
    print(
        f"{n_bytes / 1e6:.0f} MB of weights; batch 1 decodes {per_batch[1]:.1f} tokens/s = "
        f"{per_batch[1] / predicted:.0%} of the memory roofline ({predicted:.1f} tokens/s at {bound:.1f} GB/s)"
    )
    for batch, rate in per_batch.items():
        print(f"  batch {batch:3d}: {rate:7.1f} tokens/s, {efficiency[batch]:4.0%} of perfect scaling")
    row_cost = evaluation.linear_row_cost(model)
    print(evaluation.describe_row_cost(row_cost))
    print(evaluation.decode_batch_reading(per_batch, row_cost))
    bend = evaluation.scaling_bend(per_batch)
    peak = timing.matmul_flops(1024, dtype, device)
    here = prefill_decode.Hardware("here", peak, bound * 1e9, 0)
    critical = prefill_decode.critical_batch(here, 8 * model.embed.weight.element_size())
    print(
        f"scaling falls below half of perfect at batch {bend}; the roofline's bend "
        f"(matmul {peak / 1e9:.0f} GFLOP/s) is at {critical:.0f}"
    )
    return {"decode_vs_roofline": per_batch[1] / predicted, "two_rows_vs_one": row_cost[2]}


def attention_timing(device: torch.device) -> dict[str, float]:
    """Chapter 5: the blockwise reference and the Triton kernel against torch's SDPA."""
    from course import flash_attention

    print("\n== chapter 5: attention ==")
    ratios = {}
    if device.type == "cuda" and triton_available(device):
        from course.kernels import flash_attention as triton_kernel

        for n in (1024, 4096, 16384):
            q, k, v = (torch.randn(1, 16, n, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
            sdpa = timing.median_seconds(
                lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), device, repeats=10
            )
            kernel = timing.median_seconds(
                lambda: triton_kernel.blockwise_attention(q, k, v, 64, causal=True), device, repeats=10
            )
            flops = 4 * 16 * n * n * 64 * 0.5
            ratios[f"triton_vs_sdpa_{n}"] = kernel / sdpa
            print(
                f"N = {n:5d}, 16 heads of 64, causal, bf16: Triton {1e3 * kernel:.2f} ms "
                f"({flops / kernel / 1e12:.0f} TFLOP/s), SDPA {1e3 * sdpa:.2f} ms: Triton / SDPA = {kernel / sdpa:.2f} "
                "(goal <= 1.2 at 4096)"
            )
    else:
        print("Triton kernel: not timed (needs a CUDA GPU; its logic is tested through the interpreter)")
    for n in (512, 2048):
        q, k, v = (torch.randn(1, 4, n, 64, device=device) for _ in range(3))
        sdpa = timing.median_seconds(
            lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), device, repeats=3
        )
        full = timing.median_seconds(lambda: flash_attention.naive_attention(q, k, v, causal=True), device, repeats=3)
        loop = timing.median_seconds(
            lambda: flash_attention.blockwise_attention(q, k, v, 64, causal=True), device, repeats=3
        )
        print(
            f"N = {n:4d}, 4 heads of 64, causal, fp32: full score matrix {full / sdpa:.1f}x SDPA's time, "
            f"blockwise torch loop {loop / sdpa:.1f}x ({1e3 * sdpa:.2f} ms for SDPA)"
        )
    return ratios


def speculative_decoding(device: torch.device) -> dict[str, dict]:
    """Chapters 6 and 7: the four drafts, greedy and sampled: alpha, c, tokens per call against the
    formula, and the wall-clock speed-up over the target alone."""
    from course import checkpoints, corpus, speculative_decoding

    print("\n== chapters 6 and 7: speculative decoding, four drafts (median of 3 repeats) ==")
    target = checkpoints.load("target", device)
    text = corpus.tokens("validation")
    prompts = [text[s : s + 32][None].to(device) for s in (1000, 90_000, 200_000, 350_000)]
    drafts = {
        "draft model": checkpoints.load("draft", device),
        "distilled draft": checkpoints.load("distilled", device),
        "n-gram table": speculative_decoding.training_ngram_draft(),
        "prompt lookup": speculative_decoding.PromptLookupDraft(),
    }
    new, k = 200, 4
    report = {}
    for temperature, label in ((0.0, "greedy"), (1.0, "sampled")):
        results = speculative_decoding.measure_drafts(target, drafts, prompts, k, new, temperature, repeats=3)
        print(f"-- {label}, k = {k}, {len(prompts)} prompts x {new} tokens --")
        for name, r in results.items():
            print(
                f"{name:15s} alpha {r['alpha']:.3f}  c {r['cost']:.3f}  verify {r['verify']:.2f}  tokens per call "
                f"{r['tokens_per_call']:.2f} vs formula {r['formula']:.2f} "
                f"({100 * (r['tokens_per_call'] / r['formula'] - 1):+.1f}%)"
                f"  speed-up {r['speedup']:.2f}x (formula with c {r['formula_speedup']:.2f}x; goal 2x)"
            )
            report[f"{name}, {label}"] = {
                key: round(r[key], 4)
                for key in ("alpha", "cost", "verify", "tokens_per_call", "formula", "speedup", "formula_speedup")
            }
        print(speculative_decoding.drafts_reading(results))
    return report


def chapter_times() -> dict[str, float]:
    """Each instructor notebook executed headless with papermill, timed."""
    import tempfile

    import nbformat
    import papermill

    from autograder import release

    print("\n== chapters headless (papermill; goal 90 s each, 10 min all) ==")
    times = {}
    with tempfile.TemporaryDirectory() as folder:
        for source in release.chapters():
            notebook = f"{folder}/{source.stem}.ipynb"
            nbformat.write(release.instructor_notebook(source), notebook)
            started = time.perf_counter()
            papermill.execute_notebook(
                notebook, notebook, kernel_name="course", cwd=str(paths.NOTEBOOKS), progress_bar=False
            )
            times[source.stem] = time.perf_counter() - started
            verdict = (
                "ok" if times[source.stem] <= CHAPTER_BUDGET else f"over by {times[source.stem] - CHAPTER_BUDGET:.0f} s"
            )
            print(f"{source.stem:26s} {times[source.stem]:5.1f} s ({verdict})")
    total = sum(times.values())
    print(
        f"all chapters: {total:.0f} s ({'ok' if total <= COURSE_BUDGET else f'over by {total - COURSE_BUDGET:.0f} s'})"
    )
    return times


def budget(
    chapters: dict[str, float],
    sliders: dict[str, float],
    ratios: dict[str, float],
    machine: str,
    threads: str = "",
    drafts: dict | None = None,
) -> None:
    """Print what is over the performance budget, and by how much; record everything in data/."""
    over = [
        f"{name}: {t:.0f} s, {t - CHAPTER_BUDGET:.0f} s over 90 s" for name, t in chapters.items() if t > CHAPTER_BUDGET
    ]
    if sum(chapters.values()) > COURSE_BUDGET:
        over.append(
            f"all chapters: {sum(chapters.values()):.0f} s, {sum(chapters.values()) - COURSE_BUDGET:.0f} s over"
        )
    over += [
        f"slider {name}: {1e3 * t:.0f} ms, {1e3 * (t - SLIDER_BUDGET):.0f} ms over 100 ms"
        for name, t in sliders.items()
        if t > SLIDER_BUDGET
    ]
    print("\n== performance budget ==")
    print("\n".join(f"OVER  {line}" for line in over) if over else "everything within budget")
    report = {
        "machine": machine,
        "chapter_seconds": {k: round(v, 1) for k, v in chapters.items()},
        "slider_ms": {k: round(1e3 * v, 1) for k, v in sliders.items()},
        "threads": threads,
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "speculative_drafts": drafts or {},
        "over_budget": over,
    }
    REPORT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"recorded in {REPORT.relative_to(paths.ROOT)}")


def main() -> None:
    from course import checkpoints, corpus
    from course.model import generate

    device = best_device()
    torch.manual_seed(0)
    print(describe(device))
    target = checkpoints.load("target", device)
    threads = timing.pin_threads(lambda: generate(target, corpus.encode("\n")[None].to(device), 32), device)
    print(threads)
    bound = timing.memory_bandwidth(device)
    print(f"memory bandwidth, reading a 256 MB matrix (the bound below): {bound:.1f} GB/s")
    synchronize(device)
    quantization_speed(device, bound)
    ratios = decode_roofline(device, bound)
    ratios.update(course_model(device))
    ratios.update(attention_timing(device))
    drafts = speculative_decoding(device)
    sliders = slider_latency()
    chapters = chapter_times()
    budget(chapters, sliders, ratios, describe(device), threads, drafts)


if __name__ == "__main__":
    main()
