"""The course's models as chapter 9's sandboxed checks serve them: the scenario
:func:`on_course_model`, which rebuilds the course's model from the text of ``course/model.py``
(:func:`model_source`) and a checkpoint's state dict (:func:`model_spec`), then drives it with the
learner's Int4Linear (``int4_layer.py``) or speculative_greedy (``speculative.py``)."""

from __future__ import annotations

import functools
import inspect

from course import checkpoints
from course import model as course_model


def on_course_model(answer, job, model_source, target, draft, inputs) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): the course's model, defined
    by ``model_source`` (the text of ``course/model.py``, which imports only torch, since the
    course itself cannot be imported in the sandbox) and rebuilt from its state dict and
    configuration (``target``, ``draft``: ``{"state": ..., "config": ...}``). Then the learner's
    ``answer`` drives it:

    * ``job == "loss"``: ``answer`` is the learner's int4 layer class; every linear layer of the
      target becomes ``answer(weight, group_size)`` (``group_size`` None: the layer's input width,
      one scale per row), or ``answer(weight, group_size, codes=codes, scale=scale)`` where
      ``inputs["codes"]`` gives the layer's (codes, scale) by name (GPTQ's); reports the mean next-byte loss over the
      windows ``inputs["windows"]`` (B, T + 1) computed through those layers, the bytes of
      every layer's own tensors (its state dict) and, where codes were given, the share of the
      weights the layers serve that are the given code times its scale (``codes_kept``).
    * ``job == "speculate"``: ``answer`` is the learner's loop, given the models behind the course
      model's interface only (``model(tokens, cache)``, ``model.new_cache(1, max_len)``); reports
      the tokens of ``answer(target, draft, prompt, k, new_tokens)``, the target's and the
      draft's calls counted, and the positions each was fed.
    """
    import sys
    import types

    import torch
    import torch.nn.functional as F

    course_model = types.ModuleType("course_model_in_the_sandbox")
    sys.modules[course_model.__name__] = course_model  # dataclasses look their module up while defined
    try:
        exec(compile(model_source, "course/model.py", "exec"), course_model.__dict__)
    finally:
        del sys.modules[course_model.__name__]

    def build(spec):
        model = course_model.LanguageModel(course_model.ModelConfig(**spec["config"]))
        model.load_state_dict(spec["state"])
        return model.eval()

    class Served:
        """The model behind its interface, its calls and the positions fed counted; feeding it nothing
        or more than its cache holds fails with what that means (not the model's own error)."""

        def __init__(self, model, name, last_caches):
            self.model, self.name, self.calls, self.fed = model, name, 0, 0
            self.last_caches = last_caches  # each model served: the cache it was last fed with (shared)

        def new_cache(self, batch=1, max_len=None):
            if batch != 1:
                raise ValueError("this model serves one sequence: new_cache(1, max_len)")
            return self.model.new_cache(1, max_len)

        def __call__(self, tokens, cache=None):
            self.calls, self.fed = self.calls + 1, self.fed + tokens.shape[1]
            if tokens.dim() == 2 and tokens.shape[1] == 0:
                cached = f"; its cache holds {cache.length} positions" if cache is not None else ""
                for beside, other in self.last_caches.items():
                    if beside != self.name and cache is not None and other is not None and other.length > cache.length:
                        # fed nothing, this cache holds at least the tokens so far; the other's holds more
                        cached += f", the {beside}'s {other.length}: the {beside}'s was not rolled back either"
                raise ValueError(f"the {self.name} was fed no tokens (a tensor of shape {tuple(tokens.shape)}{cached})")
            if cache is not None and cache.length + tokens.shape[1] > cache.max_len:
                raise ValueError(
                    f"the {self.name}'s KV cache holds {cache.max_len} positions, {cache.length + tokens.shape[1]} "
                    "needed: was it rolled back to the positions kept after a rejection?"
                )
            self.last_caches[self.name] = cache
            return self.model(tokens, cache)

    def codes_served(layer, codes, scale) -> int:
        """How many of the weights ``layer`` serves are the code given times its scale (in float16,
        as the layer keeps it), within an eighth of a step (torch's fused int4 product serves them
        within 0.05 of one; a code rounded again on a finer grid moves by 0.14 or more): read off
        the layer's output for each unit input."""
        columns = codes.shape[1]
        step = scale.half().float().repeat_interleave(columns // scale.shape[1], dim=1)
        served_weight = layer(torch.eye(columns)[None]).float()[0].T  # (out, in): row j of I picks column j
        return int(((served_weight - codes.float() * step).abs() <= step / 8).sum())

    with torch.no_grad():
        if job == "loss":
            served, layers, kept, weights = build(target), [], 0, 0
            for name, module in list(served.named_modules()):
                if isinstance(module, torch.nn.Linear):
                    weight, given = module.weight.detach(), inputs.get("codes", {}).get(name + ".weight")
                    group = inputs["group_size"] or weight.shape[1]
                    if given is None:
                        layers.append(answer(weight, group))
                    else:
                        layers.append(answer(weight, group, codes=given[0], scale=given[1]))
                        kept, weights = kept + codes_served(layers[-1], *given), weights + weight.numel()
                    parent, _, leaf = name.rpartition(".")
                    setattr(served.get_submodule(parent), leaf, layers[-1])
            windows = inputs["windows"]
            logits = served(windows[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))
            stored = sum(t.numel() * t.element_size() for layer in layers for t in layer.state_dict().values())
            found = {"loss": float(loss), "layer_bytes": int(stored), "layers": len(layers)}
            return found | ({"codes_kept": kept / weights} if weights else {})
        last_caches: dict = {}  # no link between the two served objects: their arguments' fingerprints stay plain
        served, drafter = Served(build(target), "target", last_caches), Served(build(draft), "draft", last_caches)
        tokens = answer(served, drafter, inputs["prompt"], inputs["k"], inputs["new_tokens"])
        tokens = tokens.flatten().tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
        return {
            "tokens": [int(t) for t in tokens],
            "target_calls": served.calls,
            "target_fed": served.fed,
            "draft_fed": drafter.fed,
        }


@functools.cache
def model_source() -> str:
    """The text of ``course/model.py``, which the scenario runs: the course's model, written once."""
    return inspect.getsource(course_model)


@functools.cache
def model_spec(name: str) -> dict:
    """A course model as the scenario rebuilds it: its state dict and configuration (loaded once)."""
    loaded = checkpoints.load(name)
    return {"state": dict(loaded.state_dict()), "config": loaded.config.to_dict()}
