"""The learner's server, ready to time: the course's target with every linear layer the learner's
``Int4Linear`` and the learner's greedy loop, the same codes also through torch's fused int4
product (the layers that read one input sharing one product), and the reading of what the clock
measured, with the line the class leaderboard reads back from a saved notebook, and the reading of
why the learner's server and the fused product of its codes differ (:func:`gap_reading`).

Not handled: other devices (the learner's loop makes its tensors on the CPU), other weight formats,
sampling (greedy only).
"""

from __future__ import annotations

import re
import statistics

import torch
from torch import nn

from course import timing, withheld
from course.choosing_a_technique import gptq_int4_codes, prompts, target
from course.drafts import draft_model
from course.model import generate
from course.quantization import unpack_int4
from course.stored_weights import FusedInt4, replace_layers


def learner_layers(model: nn.Module, layer_class, group_size: int | None, calibration: str = "none") -> nn.Module:
    """A copy of ``model`` (the course's target) whose linear layers are the learner's
    ``layer_class(weight, group_size)`` (``group_size`` None: one scale per row, given as the
    layer's input width), or with GPTQ's codes and scales given (the capstone's,
    ``course.choosing_a_technique.gptq_int4_codes``), ``layer_class(weight, group_size, codes=..., scale=...)``."""
    given = gptq_int4_codes(group_size) if calibration == "gptq" else None

    def make(layer: nn.Linear, path: str) -> nn.Module:
        weight, group = layer.weight.detach(), group_size or layer.in_features
        if given is None:
            return layer_class(weight, group)
        packed, scale = given[path]
        return layer_class(weight, group, codes=unpack_int4(packed), scale=scale.float())

    return replace_layers(model, nn.Linear, make)


class SharedProduct(nn.Module):
    """One int4 product for the layers that read the same input (attention's q, k and v projections;
    SwiGLU's gate and up): their codes and scales stacked into one :class:`course.stored_weights.FusedInt4`,
    computed once per input tensor; each layer becomes a :class:`ProductSlice` of it. Serving engines
    call this fused QKV: the outputs are the same numbers (the kernel computes each output from the
    same inputs), in one kernel call instead of three, which on small layers is mostly per-call
    overhead saved. Not handled: an input changed in place between the slices' calls."""

    def __init__(self, layers: list[FusedInt4]):
        super().__init__()
        self.layer = FusedInt4(
            torch.cat([layer.codes for layer in layers]), torch.cat([layer.scale for layer in layers])
        )
        self._input, self._output = None, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x is not self._input:  # a new input: one product for every slice
            self._input, self._output = x, self.layer(x)
        return self._output


class ProductSlice(nn.Module):
    """Outputs ``start:stop`` of a :class:`SharedProduct`: what one of its layers computes."""

    def __init__(self, shared: SharedProduct, start: int, stop: int):
        super().__init__()
        self.shared, self.start, self.stop = shared, start, stop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(x)[..., self.start : self.stop]


SHARED_INPUTS = (("attn", ("q_proj", "k_proj", "v_proj")), ("mlp", ("gate_proj", "up_proj")))


def share_products(model: nn.Module) -> nn.Module:
    """``model`` (changed in place, and returned) with the int4 layers of each block that read the same
    input computed as one :class:`SharedProduct`, where they share input width and group size."""
    for block in getattr(model, "blocks", []):
        for part, names in SHARED_INPUTS:
            owner = getattr(block, part)
            layers = [getattr(owner, name) for name in names]
            if not all(isinstance(layer, FusedInt4) for layer in layers):
                continue
            if len({(layer.in_features, layer.group_size) for layer in layers}) != 1:
                continue
            shared, start = SharedProduct(layers), 0
            for name, layer in zip(names, layers, strict=True):
                setattr(owner, name, ProductSlice(shared, start, start + layer.out_features))
                start += layer.out_features
    return model


def not_written(layer_class, loop) -> list[str]:
    """Which of the learner's ``Int4Linear`` (``layer_class``) and ``speculative_greedy`` (``loop``)
    still raise NotImplementedError, tried on a small layer and one token of the course's models."""
    missing = []
    try:
        layer_class(torch.zeros(16, 128), 64)
    except NotImplementedError:
        missing.append("Int4Linear")
    try:
        loop(target(), draft_model("draft"), prompts()[0], 1, 1)
    except NotImplementedError:
        missing.append("speculative_greedy")
    return missing


def baseline(new_tokens: int):
    """A call that generates ``new_tokens`` after the first prompt with the float32 target alone: the baseline."""
    return lambda: generate(target(), prompts()[0], new_tokens)[0].tolist()


class LearnerServer:
    """The learner's server, ready to time: the course's target with every linear layer an instance of
    the learner's ``layer_class(weight, group_size)`` (given GPTQ's codes with ``calibration``
    "gptq", :func:`learner_layers`) and the learner's greedy ``loop(target, draft, prompt, k,
    new_tokens)`` with ``draft``, both written (:func:`not_written`); the same codes and scales also
    through torch's fused int4 product (``course.stored_weights.FusedInt4``). On the CPU, the first
    held-out prompt. ``note`` says where the learners' copy had no GPTQ codes for ``group_size``
    and the layers rounded to nearest instead (the same bytes and products). Not handled: other
    devices (the learner's loop makes its tensors on the CPU), other weight formats."""

    def __init__(
        self,
        layer_class,
        loop,
        group_size: int | None = 64,
        draft: str = "distilled",
        k: int = 4,
        calibration: str = "none",
    ):
        self.loop, self.k, self.draft, self.note = loop, k, draft_model(draft), ""
        try:
            self.stored = learner_layers(target(), layer_class, group_size, calibration)
        except withheld.NotRecorded:  # the learners' copy holds GPTQ's codes of the released configurations only
            self.stored = learner_layers(target(), layer_class, group_size)
            self.note = (
                "this copy of the course holds no GPTQ codes in these groups, so your layers round to nearest "
                "here: the same bytes and the same products, so the same time"
            )
        self.fused = share_products(
            replace_layers(
                self.stored,
                lambda module: isinstance(getattr(module, "codes", None), torch.Tensor),
                lambda layer: FusedInt4(layer.codes, layer.scale),
            )
        )

    def generations(self, new_tokens: int) -> dict:
        """name -> a call that generates ``new_tokens`` after the first prompt."""
        prompt = prompts()[0]
        return {
            "fp32 target alone": baseline(new_tokens),
            "your server": lambda: list(self.loop(self.stored, self.draft, prompt, self.k, new_tokens)),
            "your codes, fused int4 product": lambda: list(
                self.loop(self.fused, self.draft, prompt, self.k, new_tokens)
            ),
        }

    def time(self, new_tokens: int, repeats: int = 3) -> dict[str, dict]:
        """name -> ``{"seconds": [...], "tokens": [...]}``, each generation timed ``repeats`` times
        after one untimed call, at the thread count in force."""
        results = {}
        for name, run in self.generations(new_tokens).items():
            results[name] = {"tokens": run(), "seconds": timing.repeat_seconds(run, warmup=0, repeats=repeats)}
        return results

    def layer_seconds(self, repeats: int = 7) -> dict[str, float]:
        """Median seconds of one token through every linear layer of the target once (one decode
        step's products, without the rest of the model), three ways: ``"float32"`` (the target's
        ``nn.Linear``), ``"yours"`` (the learner's layers) and ``"fused"`` (the same codes and scales
        through the fused int4 product, a layer at a time); ``"layers"`` counts them and
        ``"rebuilt_bytes"`` is the float32 their weights take: what a forward that rebuilds its
        matrix writes on every step. At the thread count in force."""
        fp32 = target()
        stored = {
            path: module
            for path, module in self.stored.named_modules()
            if path and isinstance(getattr(module, "codes", None), torch.Tensor)
        }
        plain = [fp32.get_submodule(path) for path in stored]
        ways = {
            "float32": plain,
            "yours": list(stored.values()),
            "fused": [FusedInt4(layer.codes, layer.scale) for layer in stored.values()],
        }
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(1, 1, layer.in_features, generator=generator) for layer in plain]  # (B, T, in)

        def step(modules):
            def run():
                for module, x in zip(modules, inputs, strict=True):
                    module(x)

            return run

        with torch.no_grad():
            seconds = {
                name: statistics.median(timing.repeat_seconds(step(modules), repeats=repeats))
                for name, modules in ways.items()
            }
        return seconds | {"layers": len(plain), "rebuilt_bytes": sum(4 * layer.weight.numel() for layer in plain)}


def speedups(results: dict[str, dict]) -> dict[str, float]:
    """Each of :meth:`LearnerServer.time`'s results (or :func:`course.smollm2_timing.smollm2_time`'s)
    as a speed-up over the first, the baseline: the ratio of their median seconds."""
    base = statistics.median(next(iter(results.values()))["seconds"])
    return {name: base / statistics.median(result["seconds"]) for name, result in results.items()}


def gap_reading(results: dict[str, dict], layers: dict[str, float]) -> str:
    """Why the learner's server (the second of :meth:`LearnerServer.time`'s results) and the same
    codes and loop through the fused product (the third) differ, read off their speed-ups and
    :meth:`LearnerServer.layer_seconds`: the learner's layer against the fused product, per step."""
    names, ratio = list(results), speedups(results)
    yours, fused = (ratio[name] for name in names[1:3])
    figures = f"your server {yours:.2f}x {names[0]}, your codes and loop through the fused product {fused:.2f}x"
    per_step = (
        f"one token through the {layers['layers']:.0f} linear layers (one target step's products) takes "
        f"{1e3 * layers['yours']:.2f} ms in your Int4Linear, {1e3 * layers['fused']:.2f} ms through the fused product "
        f"of the same codes, {1e3 * layers['float32']:.2f} ms in float32"
    )
    ratio = layers["yours"] / layers["fused"]
    if ratio > 1.2:
        return (
            f"{figures}. Why: {per_step}. Your layers take "
            f"{ratio:.1f}x the fused product's time: your forward rebuilds its float32 matrix from codes and scales "
            f"on every call ({layers['rebuilt_bytes'] / 1e6:.1f} MB of float32 written on each step and read "
            "back by the product; the float32 target only reads them), while the fused product reads the codes "
            "four bits at a time inside the product"
        )
    return (
        f"{figures}. {per_step}: your layers take {ratio:.2f}x the fused product's time, so they pay no float32 "
        "rebuild here, and the servers' gap is not the layer's (the spreads above say how much of it is noise)"
    )


def server_reading(results: dict[str, dict], new_tokens: int, record: bool = True) -> str:
    """What :meth:`LearnerServer.time` measured, one line each: tokens per second, the spread of the
    repeats, the speed-up over the first (the baseline), and whether the tokens are its own; with
    ``record``, the line the class leaderboard reads (:func:`speedup_line`)."""
    names, ratio = list(results), speedups(results)
    lines = []
    for name in names:
        times = results[name]["seconds"]
        lines.append(
            f"{name:32s} {new_tokens / statistics.median(times):7.0f} tokens/s (spread "
            f"{100 * timing.spread(times):.0f}%), {ratio[name]:.2f}x {names[0]}"
        )
    if record:
        lines.append(speedup_line({name: ratio[name] for name in names[1:]}))
    same = results[names[1]]["tokens"] == results[names[-1]]["tokens"]
    fp32, yours = (results[name]["tokens"][-new_tokens:] for name in names[:2])  # the new tokens, not the prompt
    differ = sum(a != b for a, b in zip(fp32, yours, strict=True))
    lines.append(
        (
            f"your server's tokens {'equal' if same else 'differ from'} those through the fused product"
            f"{'' if same else ' (bfloat16 products can flip a close greedy choice)'}; "
            if len(names) > 2
            else ""
        )
        + f"{differ} of the {new_tokens} new tokens differ from {names[0]}'s"
        + (" (int4 weights are another model)" if differ else "")
    )
    return "\n".join(lines)


SPEEDUP_LINE = "measured speed-up over the fp32 target:"


def speedup_line(speedups: dict[str, float]) -> str:
    """The line the class leaderboard reads from a saved notebook (:func:`read_speedups`)."""
    return f"{SPEEDUP_LINE} " + "; ".join(f"{name} {ratio:.3f}x" for name, ratio in speedups.items())


def read_speedups(text: str) -> dict[str, float]:
    """The speed-ups of the last :func:`speedup_line` in ``text`` (a cell's output), or {}: what a
    learner's machine measured, reported beside the graded figures and never graded (the file can
    say anything). Anything unreadable is left out."""
    found = {}
    for line in text.splitlines():
        if line.startswith(SPEEDUP_LINE):
            found = {}
            for part in line[len(SPEEDUP_LINE) :].split(";"):
                name, _, ratio = part.strip().rpartition(" ")
                number = re.fullmatch(r"(\d{1,4}(?:\.\d+)?)x", ratio)
                if name and number:
                    found[name[:60]] = float(number.group(1))
    return found
