"""Chapters 6 and 7's measurements for ``make bench``: the four drafts, greedy and sampled."""

from __future__ import annotations

import torch

from course import checkpoints, corpus
from course.answers.speculative_decoding import measure_drafts, training_ngram_draft
from course.speculative_decoding import PromptLookupDraft, course_answer, drafts_reading


def benchmark(device: torch.device, bound: float) -> dict[str, dict]:
    """``make bench``'s measurements of chapters 6 and 7 on ``device`` (printed; returned as the table
    ``speculative_drafts`` of ``data/performance.json``): the four drafts, greedy and sampled: alpha,
    c, tokens per call against the formula, and the wall-clock speed-up over the target alone.
    (``bound`` is not used here.)"""
    print("\n== chapters 6 and 7: speculative decoding, four drafts (median of 3 repeats) ==")
    target = checkpoints.load("target", device)
    text = corpus.tokens("validation")
    prompts = [text[s : s + 32][None].to(device) for s in (1000, 90_000, 200_000, 350_000)]
    drafts = {
        "draft model": checkpoints.load("draft", device),
        "distilled draft": checkpoints.load("distilled", device),
        "n-gram table": training_ngram_draft(),
        "prompt lookup": PromptLookupDraft(),
    }
    new, k = 200, 4
    report = {}
    for temperature, label in ((0.0, "greedy"), (1.0, "sampled")):
        formula = course_answer("expected_tokens_per_call")
        results = measure_drafts(target, drafts, prompts, k, new, temperature, repeats=3, tokens_per_call=formula)
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
        print(drafts_reading(results))
    return {"speculative_drafts": report}
