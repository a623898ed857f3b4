"""Chapter 8's SmolLM2-135M timed with the learner's int4 codes: layers of up to 28 MB, where the
course's small target's per-call costs weigh less against the bytes a fused int4 product saves.

Not handled: other models, the learner's own forward (the codes go through the fused product).
"""

from __future__ import annotations

import torch
from torch import nn

from course import timing
from course.stored_weights import FusedInt4

SMOLLM2_PROMPT = "Name three rivers of Europe."


def smollm2_time(layer_class, group_size: int | None = 64, new_tokens: int = 16, repeats: int = 3) -> dict[str, dict]:
    """Chapter 8's SmolLM2-135M decoding ``new_tokens`` greedily after a chat prompt, float32 first,
    then with every linear layer of the decoder and the output layer (an int4 copy; the embedding
    stays float32) stored as the codes and scales the learner's ``layer_class(weight, group_size)``
    makes (``group_size`` None: one scale per row), through torch's fused int4 product (the learner's
    own forward rebuilds a float32 matrix per call, which on layers this large costs more than it
    saves). Each timed ``repeats`` times after one untimed call, at the thread count in force: name
    -> ``{"seconds": [...], "tokens": [...]}``, as ``course.learner_server.LearnerServer.time``. Needs chapter 8's
    model (the llm extra): raises ``course.pretrained.MissingPackage`` without it."""
    from course import in_practice, pretrained

    model, tokenizer = pretrained.load()
    prompt = in_practice.chat_prompt(tokenizer, SMOLLM2_PROMPT)

    def make(layer: nn.Linear) -> nn.Module:
        learner = layer_class(layer.weight.detach().float(), group_size or layer.in_features)
        return FusedInt4(learner.codes, learner.scale)

    @torch.no_grad()
    def run():
        return model.generate(prompt, max_new_tokens=new_tokens, do_sample=False)[0].tolist()

    results = {"fp32 SmolLM2": {"tokens": run(), "seconds": timing.repeat_seconds(run, warmup=0, repeats=repeats)}}
    with in_practice.int4_linears(model, group_size or 64, output_layer=True, make=make):
        results["your codes in SmolLM2, fused int4"] = {
            "tokens": run(),
            "seconds": timing.repeat_seconds(run, warmup=0, repeats=repeats),
        }
    return results
