"""Chapter 9: choosing a technique. When to fine-tune at all, a guide from a problem to the first
technique to try, and the capstone: the course's target made cheaper and faster within a budget by
combining weights stored in fewer bits, the KV cache and speculative decoding.

The capstone's weights are really stored: integer codes (two 4-bit codes, or four 2-bit codes, to
a byte) and fp16 scales, so their bytes are counted from the tensors a checkpoint would hold. Int4
goes through torch's fused int4 product where it takes the layer (``course.kernels.int4``); every
other format is rebuilt into a float32 matrix on every call. A worked example: int4 codes with one fp16 scale per 64
weights take 64 / 2 + 2 = 34 bytes per 64 weights, 4.25 bits each; the target's 4.2M linear
weights then take 2.2 MB instead of 16.9 MB.

Not handled: quantized drafts or embeddings (both stay in float32), activation quantization,
fused kernels for int8, int2 and NF4 (rebuilding those weights in torch costs time on a CPU, which
the wall-clock measurement shows), sampling in the graded runs (greedy only, so that the figures are
deterministic), batches of more than one sequence.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from course import checkpoints, corpus, evaluation, lora, quantization, speculative_decoding, timing
from course.kernels import int4
from course.model import LanguageModel, generate
from course.quantization import pack_codes, pack_int4, unpack_codes, unpack_int4  # noqa: F401 (the chapter's names)

GiB = 2**30

# --- 1. When to fine-tune ---------------------------------------------------------------------------

NEEDS = {
    "knowledge": "the model should know our documents or facts",
    "instructions": "the model should follow our instructions",
    "format": "every answer in one consistent format",
    "tone": "one consistent tone or style",
    "narrow_task": "one narrow task at high volume",
}
ADVICE = ("retrieval", "prompting", "fine-tuning")
_SYNONYMS = {"rag": "retrieval", "prompt": "prompting", "finetuning": "fine-tuning", "fine-tune": "fine-tuning"}


def fine_tuning_advice(need: str, changes_often: bool, tried_prompting: bool) -> str:
    """The first thing to do for ``need`` (a key of :data:`NEEDS`): ``"retrieval"``, ``"prompting"``
    or ``"fine-tuning"``.

    Knowledge is retrieval's job; instructions are prompting's. Format, tone and narrow tasks are
    fine-tuning's, but only once prompting has seriously been tried, and not when what the model
    must learn changes often (every change would mean training again): then prompting.
    """
    if need not in NEEDS:
        raise ValueError(f"need must be one of {', '.join(NEEDS)}, got {need!r}")
    if need == "knowledge":
        return "retrieval"
    if need == "instructions" or changes_often or not tried_prompting:
        return "prompting"
    return "fine-tuning"


def advice_label(value) -> str | None:
    """``value`` as one of :data:`ADVICE` (case, spaces and common variants forgiven), else None."""
    if not isinstance(value, str):
        return None
    word = re.sub(r"[\s_]+", "-", value.strip().lower())
    word = _SYNONYMS.get(word, word)
    return word if word in ADVICE else None


@dataclass(frozen=True)
class Scenario:
    text: str
    need: str
    changes_often: bool
    tried_prompting: bool


SCENARIOS = (
    Scenario("A support team wants answers drawn from its 3,000 help-centre articles.", "knowledge", False, True),
    Scenario(
        "A legal team wants answers from contracts that are added and amended every day.", "knowledge", True, True
    ),
    Scenario(
        "Every reply must be JSON in one schema; a careful prompt with examples still breaks it one time in twenty.",
        "format",
        False,
        True,
    ),
    Scenario("A brand wants its own voice in every post; nobody has tried a system prompt yet.", "tone", False, False),
    Scenario(
        "A bank sorts two million transaction descriptions a day into 40 fixed categories; a long few-shot "
        "prompt works but is slow and costly at that volume.",
        "narrow_task",
        False,
        True,
    ),
    Scenario("An analyst wants summaries that follow a new five-step checklist.", "instructions", False, True),
    Scenario("A shop wants descriptions in a style guide its editors rewrite every week.", "tone", True, True),
    Scenario(
        "A clinic extracts the same 12 fields from thousands of referral letters a day; prompting was tried "
        "and keeps missing fields.",
        "narrow_task",
        False,
        True,
    ),
)


# --- 2. From a problem to a technique --------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row of the table: a problem, the first thing to try, whether it changes behaviour."""

    problem: str
    label: str
    first: str
    changes: str
    chapters: str


TABLE = (
    Row(
        "adapt",
        "Adapting a large model on one GPU",
        "LoRA; QLoRA if the base does not fit in 16 bits",
        "Yes (that is the point)",
        "chapter 2",
    ),
    Row(
        "serve",
        "Model too large to serve",
        "8-bit weights; then 4-bit with GPTQ or AWQ and calibration",
        "Slightly; evaluate",
        "chapters 1 and 3",
    ),
    Row(
        "long",
        "Long sequences slow or out of memory",
        "FlashAttention-style kernels",
        "No (exact)",
        "chapter 5",
    ),
    Row(
        "decode",
        "Decoding too slow",
        "KV cache (always), then speculative decoding",
        "No (exact distribution)",
        "chapters 4, 6 and 7",
    ),
    Row(
        "still",
        "Still too slow or too large",
        "Distil into a smaller model",
        "Yes; evaluate on rare cases",
        "chapter 7",
    ),
)
PROBLEMS = {row.problem: row for row in TABLE}
HEADROOM = 0.8  # share of a GPU's memory the weights may take; the rest is activations and the KV cache


@dataclass(frozen=True)
class Advice:
    problem: str
    technique: str
    why: str
    changes_behaviour: str
    chapter: str


def weights_gib(params_billion: float, bits: float) -> float:
    """GiB of weights: 7B in 16 bits is 13.0 GiB."""
    return params_billion * 1e9 * bits / 8 / GiB


def recommend(problem: str, params_billion: float = 7.0, gpu_gib: float = 24.0, first_done: bool = False) -> Advice:
    """The first technique to try for ``problem`` (a key of :data:`PROBLEMS`) with a model of
    ``params_billion`` on a GPU of ``gpu_gib``; with ``first_done``, what to try after that.

    Memory counts the weights only (chapter 1: 4 bits a weight, the scales left out) and the
    fine-tuning state (chapter 2); a model fits when it takes at most :data:`HEADROOM` of the GPU:
    70B in 4 bits, 32.6 GiB, fits a 48 GiB GPU (38.4 GiB for the weights) and not a 40 GiB one (32).
    """
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {', '.join(PROBLEMS)}, got {problem!r}")
    if not params_billion > 0 or not gpu_gib > 0:
        raise ValueError("params_billion and gpu_gib must be positive")
    row, room = PROBLEMS[problem], HEADROOM * gpu_gib
    size = f"{params_billion:g}B parameters"
    share = f"the {room:.1f} GiB ({HEADROOM:.0%}) of this {gpu_gib:g} GiB GPU that the weights may take"

    def advice(technique: str, why: str, changes: str = row.changes, chapter: str = row.chapters) -> Advice:
        return Advice(problem, technique, why, changes, chapter)

    if problem == "adapt":
        full, base16, base4 = (lora.finetune_memory_gib(params_billion * 1e9, m) for m in ("full", "lora", "qlora"))
        if first_done:
            return advice(
                "A higher rank, or adapters on more layers",
                "If the adapter falls short on held-out cases, give it more rank or more layers before anything "
                f"bigger; a full fine-tune of {size} needs about {full:.0f} GiB, a multi-GPU job.",
            )
        if base16 <= room:
            return advice(
                "LoRA",
                f"The frozen base takes {base16:.1f} GiB in 16 bits, within the {gpu_gib:g} GiB GPU; a full "
                f"fine-tune would need about {full:.0f} GiB. Only the small adapters train.",
            )
        if base4 <= room:
            return advice(
                "QLoRA",
                f"In 16 bits the base alone takes {base16:.1f} GiB, too much for {gpu_gib:g} GiB; stored in "
                f"4 bits (NF4) it takes {base4:.1f} GiB, and the adapters train on top in 16 bits.",
            )
        return advice(
            "Several GPUs, or a smaller base",
            f"Even in 4 bits the base takes {base4:.1f} GiB, more than {share}.",
            "Yes",
        )
    if problem == "serve":
        w16, w8, w4 = (weights_gib(params_billion, bits) for bits in (16, 8, 4))
        if not first_done and w8 <= room:
            fits16 = (
                f"It fits in 16 bits ({w16:.1f} GiB), but 8-bit weights ({w8:.1f} GiB) halve the bytes "
                "every decode step reads"
                if w16 <= room
                else f"In 16 bits the weights take {w16:.1f} GiB; in 8 bits {w8:.1f} GiB, which fit"
            )
            return advice("8-bit weights", f"{fits16}. 8-bit rounding barely changes the outputs; check it.")
        if w4 <= room and first_done and w8 > room:  # 4 bits were the first try, and not enough
            return advice(
                "Several GPUs, or distil",
                f"4-bit weights ({w4:.1f} GiB) were the first try; fewer bits cost quality fast (chapter 3). Split "
                "the model across GPUs (tensor parallelism), or distil it into a smaller one.",
                "Yes, if distilled",
            )
        if w4 <= room:
            return advice(
                "4-bit weights with GPTQ or AWQ (calibrated)",
                f"4 bits take {w4:.1f} GiB, within {share}. Rounding to nearest loses quality at 4 bits; "
                "GPTQ and AWQ calibrate on sample text to keep it. Evaluate before serving.",
            )
        return advice(
            "Several GPUs, or distil",
            f"Even in 4 bits the weights take {w4:.1f} GiB, more than {share} (the rest holds activations "
            "and the KV cache): split the model across GPUs (tensor parallelism), or distil it into a smaller one.",
            "Yes, if distilled",
        )
    if problem == "long":
        if first_done:
            return advice(
                "A smaller KV cache: grouped-query attention, a paged cache",
                "With attention tiled, what grows with the sequence is the KV cache (chapter 4): fewer key-value "
                "heads shrink it, and paging stops reserving memory that is never used.",
                "Paging: no. Fewer heads: yes (another model)",
                "chapter 4",
            )
        return advice(
            "A FlashAttention-style kernel",
            "Standard attention writes the T x T score matrix to memory; tiled attention never forms it, so "
            "memory grows linearly with T and far fewer bytes move. The result is exact.",
        )
    if problem == "decode":
        if first_done:
            return advice(
                "Speculative decoding, with a draft that agrees with the target",
                "A cheap draft proposes k tokens and the target checks them in one call; the output keeps the "
                "target's distribution. A draft distilled from the target is accepted more often (chapter 7). "
                "Fewer bytes per weight also speed up memory-bound decoding (chapter 1).",
                chapter="chapters 6 and 7",
            )
        return advice(
            "The KV cache",
            "Without it every step recomputes the whole prefix: the cost of a token grows with the text. "
            "Always on; the output does not change.",
            "No (exact)",
            "chapter 4",
        )
    if first_done:
        return advice(
            "Prune and fine-tune, or revisit the budget",
            "Structured pruning shrinks the matrices for real, at a cost in quality that fine-tuning or "
            "distillation afterwards partly recovers.",
        )
    return advice(
        "Distil into a smaller model",
        "A smaller student trained on the teacher's distributions is cheaper at every step. It changes "
        "behaviour: evaluate on rare cases, not only the average loss.",
    )


# --- 3. Weights stored in fewer bits ---------------------------------------------------------------

FORMAT_BITS = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4, "nf4": 4, "int2": 2}
GROUPED = ("int8", "int4", "nf4", "int2")  # formats with codes and scales
GROUP_SIZES = (None, 32, 64)  # every one divides the target's 256 and 704 columns
CALIBRATIONS = ("none", "gptq")  # round to nearest, or chapter 3's GPTQ on training text
CALIBRATED = ("int8", "int4", "int2")  # the absmax formats whose codes GPTQ can choose


@functools.cache
def _nf4_pairs(device: torch.device) -> torch.Tensor:
    """(256, 2): the NF4 levels of a packed byte's high and low nibble."""
    levels = quantization.nf4_levels()
    byte = torch.arange(256)
    return torch.stack([levels[byte >> 4], levels[byte & 15]], dim=-1).to(device)


class StoredLinear(nn.Module):
    """A bias-free linear layer kept in a stored format and rebuilt into float32 on every call,
    except int4 with ``fused``, which goes through torch's fused int4 product where it takes the layer.

    ``int8``: int8 codes; ``int4``, ``int2``: absmax codes offset to unsigned and packed; ``nf4``:
    indices of the 16 NF4 levels, packed; each with one fp16 scale per row or per ``group_size``
    columns (NF4 in groups of 64: 4.25 bits a weight; chapter 3's 4.5 counts QLoRA's fp32 scales).
    ``fp16``: the weights in half precision. With ``hessian`` (H = X^T X / n of the layer's
    calibration inputs), the absmax formats take GPTQ's codes and scales instead of rounding to nearest.
    """

    def __init__(
        self,
        linear: nn.Linear,
        weights: str,
        group_size: int | None = None,
        hessian: torch.Tensor | None = None,
        fused: bool = True,
    ):
        super().__init__()
        if linear.bias is not None:
            raise ValueError("StoredLinear handles bias-free layers only (the course model has no biases)")
        if weights not in FORMAT_BITS or weights == "fp32":
            raise ValueError(f"weights must be one of {', '.join(f for f in FORMAT_BITS if f != 'fp32')}")
        if hessian is not None and weights not in CALIBRATED:
            raise ValueError(f"GPTQ chooses absmax codes: calibrate {', '.join(CALIBRATED)}, not {weights}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weights, self.bits, self.fused = weights, FORMAT_BITS[weights], fused
        weight = linear.weight.detach().float()
        if weights == "fp16":
            self.register_buffer("weight16", weight.half())
            return
        if weights == "nf4":
            codes, scale = quantization.quantize_nf4(weight, group_size)  # (out, in) uint8 in 0..15
            stored = pack_codes(codes, 4)
        else:
            codes, scale = (  # (out, in) int32, symmetric
                quantization.quantize(weight, self.bits, group_size)
                if hessian is None
                else quantization.gptq_quantize(weight, hessian, self.bits, group_size)
            )
            offset = 2 ** (self.bits - 1)
            stored = codes.to(torch.int8) if self.bits == 8 else pack_codes(codes + offset, self.bits)
        self.register_buffer("codes", stored)
        self.register_buffer("scale", scale.half())  # (out, groups)

    def weight(self) -> torch.Tensor:
        """The float32 (out, in) matrix the stored tensors encode."""
        if self.weights == "fp16":
            return self.weight16.float()
        if self.weights == "nf4":  # one lookup per byte: the levels of its two nibbles
            pairs = torch.index_select(_nf4_pairs(self.codes.device), 0, self.codes.flatten().int())  # (bytes, 2)
            return quantization.dequantize(pairs.reshape(self.out_features, -1), self.scale.float())
        if self.bits == 8:
            codes = self.codes.float()
        else:
            codes = unpack_codes(self.codes, self.bits).float() - 2 ** (self.bits - 1)
        return quantization.dequantize(codes, self.scale.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weights == "int4" and self.fused:  # torch's fused int4 product where it takes the layer
            return int4.linear(x, self.codes, self.scale, int4.prepared_for(self, self.codes, self.scale))
        return F.linear(x, self.weight().to(x.dtype))

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.out_features}, {self.weights}"


def store_weights(
    model: LanguageModel,
    weights: str,
    group_size: int | None = None,
    hessians: dict[str, torch.Tensor] | None = None,
    fused: bool = True,
) -> LanguageModel:
    """A copy of ``model`` whose linear layers are :class:`StoredLinear` in ``weights``; the tied
    embedding (also the output layer) and the norms stay in float32. ``fp32``: a plain copy.
    ``hessians`` (layer name -> H, :func:`calibration_hessians`): GPTQ's codes instead of rounding."""
    if weights not in FORMAT_BITS:
        raise ValueError(f"weights must be one of {', '.join(FORMAT_BITS)}, got {weights!r}")
    if weights == "fp32":
        return replace_layers(model, nn.Linear, lambda layer: layer)
    return replace_layers(
        model,
        nn.Linear,
        lambda layer, path: StoredLinear(layer, weights, group_size, hessians[path] if hessians else None, fused),
    )


def replace_layers(model: nn.Module, kind, make) -> nn.Module:
    """A copy of ``model`` in which every module of type ``kind`` (or for which ``kind(module)`` is
    true) is ``make(module)``, or ``make(module, path)`` where ``make`` takes two arguments (the
    module's dotted name in ``model``)."""
    import copy
    import inspect

    matches = (lambda module: isinstance(module, kind)) if isinstance(kind, type) else kind
    named = len(inspect.signature(make).parameters) == 2
    replaced = copy.deepcopy(model)
    for path, module in list(replaced.named_modules()):
        if path and matches(module):
            parent, _, leaf = path.rpartition(".")
            setattr(replaced.get_submodule(parent), leaf, make(module, path) if named else make(module))
    return replaced


@functools.cache
def calibration_hessians() -> dict[str, torch.Tensor]:
    """H = X^T X / n of each of the target's linear layers, from the float32 target reading
    chapter 3's calibration windows of the training plays (never the held-out ones)."""
    with timing.threads(1):
        return quantization.calibration_hessians(_target(), corpus.tokens("train"), quantization.CALIBRATION_WINDOWS)


def gptq_codes(
    weight: torch.Tensor, hessian: torch.Tensor, group_size: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ's signed 4-bit codes (out, in) and float32 scales (out, groups) for ``weight``: what a
    calibrated int4 layer is given (chapter 3's ``gptq_quantize``)."""
    return quantization.gptq_quantize(weight.detach().float(), hessian, 4, group_size)


def weight_bytes(model: nn.Module | None) -> int:
    """Bytes of every tensor a checkpoint of ``model`` holds (weights, codes, scales, norms); 0 for None."""
    if model is None:
        return 0
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


# --- The server the learner builds ------------------------------------------------------------------


def int4_layer_buffers(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a stored int4 layer keeps for ``weight`` (out, in): codes packed two to a byte
    (:func:`pack_int4`, from chapter 3's symmetric absmax codes of the float32 scale) and the scales
    in float16, one per ``group_size`` columns: ``(out, in // 2)`` uint8 and ``(out, in // group_size)``."""
    codes, scale = quantization.quantize(weight.detach().float(), 4, group_size)
    return pack_int4(codes), scale.half()


@torch.no_grad()
def greedy_speculative(target, draft, prompt: torch.Tensor, k: int, new_tokens: int) -> list[int]:
    """Greedy speculative decoding with a KV cache in each model: the draft proposes ``k`` tokens
    one at a time from its cache, the target scores them all in one call from its cache, the
    longest prefix equal to the target's own greedy choices is kept, then the target's token after
    it. Both caches are rolled back to what was kept. Returns the prompt (1, T) and ``new_tokens``
    new tokens as a list: exactly the target's greedy decoding.

    ``target`` and ``draft`` have the course model's interface: ``model(tokens, cache)`` and
    ``model.new_cache(1, max_len)``, whose ``length`` counts the positions cached. Not handled:
    sampling (chapter 6's rule at temperature above 0), batches of several sequences.
    """
    tokens = prompt[0].tolist()
    goal = len(tokens) + new_tokens
    target_cache, draft_cache = target.new_cache(1, goal + k + 1), draft.new_cache(1, goal + k + 1)
    while len(tokens) < goal:
        n, proposed = len(tokens), []
        fresh = tokens[draft_cache.length :]  # what the draft has not seen (at least the last token)
        for _ in range(k):
            logits = draft(torch.tensor([fresh], device=prompt.device), draft_cache)[0, -1]
            proposed.append(int(logits.argmax()))
            fresh = proposed[-1:]
        feed = tokens[target_cache.length :] + proposed
        choices = target(torch.tensor([feed], device=prompt.device), target_cache)[0, -(k + 1) :].argmax(-1).tolist()
        accepted = 0
        while accepted < k and proposed[accepted] == choices[accepted]:
            accepted += 1
        tokens += proposed[:accepted] + [choices[accepted]]
        target_cache.length = n + accepted  # the target's token after them is fed next round
        draft_cache.length = min(draft_cache.length, n + accepted)
    return tokens[:goal]


def learner_layers(model: nn.Module, layer_class, group_size: int | None, calibration: str = "none") -> nn.Module:
    """A copy of ``model`` whose linear layers are the learner's ``layer_class(weight, group_size)``
    (``group_size`` None: one scale per row, given as the layer's input width), or with GPTQ's
    codes and scales given, ``layer_class(weight, group_size, codes=..., scale=...)``."""
    hessians = calibration_hessians() if calibration == "gptq" else None

    def make(layer: nn.Linear, path: str) -> nn.Module:
        weight, group = layer.weight.detach(), group_size or layer.in_features
        if hessians is None:
            return layer_class(weight, group)
        codes, scale = gptq_codes(weight, hessians[path], group)
        return layer_class(weight, group, codes=codes, scale=scale)

    return replace_layers(model, nn.Linear, make)


def course_int4_layer(weight: torch.Tensor, group_size: int, codes=None, scale=None) -> int4.Int4Linear:
    """The course's stored int4 layer for ``weight``, built as the learner's ``Int4Linear(weight,
    group_size)`` is: the same codes and scales (:func:`int4_layer_buffers`), or the ``codes`` and
    ``scale`` given (GPTQ's), through the fused product."""
    if codes is None:
        return int4.Int4Linear(*quantization.quantize(weight.detach().float(), 4, group_size))
    return int4.Int4Linear(codes, scale)


class SharedProduct(nn.Module):
    """One int4 product for the layers that read the same input (attention's q, k and v projections;
    SwiGLU's gate and up): their codes and scales stacked into one :class:`course.kernels.int4.Int4Linear`,
    computed once per input tensor; each layer becomes a :class:`ProductSlice` of it. Serving engines
    call this fused QKV: the outputs are the same numbers (the kernel computes each output from the
    same inputs), in one kernel call instead of three, which on small layers is mostly per-call
    overhead saved. Not handled: an input changed in place between the slices' calls."""

    def __init__(self, layers: list[int4.Int4Linear]):
        super().__init__()
        self.layer = int4.Int4Linear(
            unpack_int4(torch.cat([layer.codes for layer in layers])), torch.cat([layer.scale for layer in layers])
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
            if not all(isinstance(layer, int4.Int4Linear) for layer in layers):
                continue
            if len({(layer.in_features, layer.group_size) for layer in layers}) != 1:
                continue
            shared, start = SharedProduct(layers), 0
            for name, layer in zip(names, layers, strict=True):
                setattr(owner, name, ProductSlice(shared, start, start + layer.out_features))
                start += layer.out_features
    return model


class LearnerServer:
    """The learner's server, ready to time: the course's target with every linear layer an instance of
    the learner's ``layer_class(weight, group_size)`` (given GPTQ's codes with ``calibration``
    "gptq", :func:`learner_layers`) and the learner's greedy ``loop(target, draft, prompt, k,
    new_tokens)`` with ``draft``; the same codes and scales also through torch's fused int4 product
    (``course.kernels.int4``). On the CPU, the first held-out prompt. Not handled: other devices
    (the learner's loop makes its tensors on the CPU), other weight formats."""

    def __init__(
        self,
        layer_class,
        loop,
        group_size: int | None = 64,
        draft: str = "distilled",
        k: int = 4,
        calibration: str = "none",
    ):
        self.stand_ins = []  # what is not written yet, and the course's own version used instead
        try:
            layer_class(torch.zeros(16, 2 * (group_size or 64)), group_size or 128)
        except NotImplementedError:
            layer_class = course_int4_layer
            self.stand_ins.append("Int4Linear")
        self.loop, self.k, self.draft = loop, k, draft_model(draft)
        try:
            loop(_target(), self.draft, prompts()[0], k, 1)
        except NotImplementedError:
            self.loop = greedy_speculative
            self.stand_ins.append("speculative_greedy")
        self.stored = learner_layers(_target(), layer_class, group_size, calibration)
        self.fused = share_products(
            replace_layers(
                self.stored,
                lambda module: isinstance(getattr(module, "codes", None), torch.Tensor),
                lambda layer: int4.Int4Linear(unpack_int4(layer.codes), layer.scale),
            )
        )

    def baseline(self, new_tokens: int):
        """A call that generates ``new_tokens`` with the float32 target alone: the baseline."""
        return lambda: generate(_target(), prompts()[0], new_tokens)[0].tolist()

    def generations(self, new_tokens: int) -> dict:
        """name -> a call that generates ``new_tokens`` after the first prompt."""
        prompt = prompts()[0]
        return {
            "fp32 target alone": self.baseline(new_tokens),
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


SMOLLM2_PROMPT = "Name three rivers of Europe."


def smollm2_time(layer_class, group_size: int | None = 64, new_tokens: int = 16, repeats: int = 3) -> dict[str, dict]:
    """Chapter 8's SmolLM2-135M decoding ``new_tokens`` greedily after a chat prompt, float32 first,
    then with every linear layer of the decoder and the output layer (an int4 copy; the embedding
    stays float32) stored as the codes and scales the learner's ``layer_class(weight, group_size)``
    makes (``group_size`` None: one scale per row), through torch's fused int4 product (the learner's
    own forward rebuilds a float32 matrix per call, which on layers this large costs more than it
    saves). Each timed ``repeats`` times after one untimed call, at the thread count in force: name
    -> ``{"seconds": [...], "tokens": [...]}``, as :meth:`LearnerServer.time`. Needs chapter 8's
    model (the llm extra): raises ``course.pretrained.MissingPackage`` without it."""
    from course import in_practice, pretrained

    model, tokenizer = pretrained.load()
    prompt = in_practice.chat_prompt(tokenizer, SMOLLM2_PROMPT)

    def make(layer: nn.Linear) -> nn.Module:
        learner = layer_class(layer.weight.detach().float(), group_size or layer.in_features)
        return int4.Int4Linear(unpack_int4(learner.codes), learner.scale)

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


def server_reading(results: dict[str, dict], new_tokens: int, record: bool = True) -> str:
    """What :meth:`LearnerServer.time` measured, one line each: tokens per second, the spread of the
    repeats, the speed-up over the first (the baseline), and whether the tokens are its own; with
    ``record``, the line the class leaderboard reads (:func:`speedup_line`)."""
    import statistics

    names = list(results)
    base = statistics.median(results[names[0]]["seconds"])
    lines = []
    for name in names:
        times = results[name]["seconds"]
        seconds = statistics.median(times)
        lines.append(
            f"{name:32s} {new_tokens / seconds:7.0f} tokens/s (spread {100 * timing.spread(times):.0f}%), "
            f"{base / seconds:.2f}x {names[0]}"
        )
    if record:
        lines.append(speedup_line({name: base / statistics.median(results[name]["seconds"]) for name in names[1:]}))
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


# --- Drafts -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Draft:
    """A way to propose tokens for the target to verify: a course model from ``data/models``, or
    none. A new kind of draft (n-gram, prompt lookup) is a subclass that overrides :meth:`load`
    and :meth:`run`, added to :data:`DRAFTS`."""

    name: str
    short: str  # for a legend
    about: str
    checkpoint: str | None = None

    def load(self, device: torch.device | str = "cpu") -> nn.Module | None:
        return checkpoints.load(self.checkpoint, device) if self.checkpoint else None

    def run(self, target: LanguageModel, drafter, prompt: torch.Tensor, k: int, new_tokens: int) -> dict:
        """Greedy generation of ``new_tokens`` after ``prompt`` (1, T): ``{"tokens", "target_calls"}``."""
        if drafter is None:
            return {"tokens": generate(target, prompt, new_tokens), "target_calls": new_tokens}
        tokens, rounds = speculative_decoding.speculative_generate(
            target, drafter, prompt, k, new_tokens, temperature=0
        )
        return {"tokens": tokens, "target_calls": len(rounds)}


DRAFTS = {
    draft.name: draft
    for draft in (
        Draft("none", "no draft", "no draft: the target decodes alone"),
        Draft("draft", "draft trained on the text", "the small model trained on the text (chapter 6)", "draft"),
        Draft("distilled", "distilled draft", "the small model distilled from the target (chapter 7)", "distilled"),
    )
}


# --- The capstone -----------------------------------------------------------------------------------

DRAFT_COST = 0.25  # a draft call, counted as this share of a target call in the modelled speed-up
BUDGET = {"weight_bytes": 3_700_000, "loss_gap": 0.0025, "modelled_speedup": 1.9}
BUDGET_WORDS = {  # each part of the budget, as the chapter's checks and hints state it
    "weight_bytes": f"the weights served, target and draft as stored, take at most {BUDGET['weight_bytes'] / 1e6:g} MB",
    "loss_gap": f"the held-out loss stays within {BUDGET['loss_gap']:g} nats/byte of the fp32 target's",
    "modelled_speedup": f"tokens per target call / (1 + {DRAFT_COST:g} k), a round's k draft calls at "
    f"{DRAFT_COST:g} of a target call each, is at least "
    f"{BUDGET['modelled_speedup']:g}",
}
DRAFT_LENGTHS = range(1, 9)
EVAL_WINDOWS = 16  # 256-byte windows of the held-out plays for the loss
PROMPT_STARTS = (1000, 90_000, 200_000)  # held-out openings of the greedy runs
PROMPT_LENGTH, NEW_TOKENS = 32, 64


@dataclass(frozen=True)
class Configuration:
    """What the capstone serves: the target's weight format, group size and calibration (rounding to
    nearest, or GPTQ), a draft, and how many tokens the draft proposes per target call. The KV
    cache is always on."""

    weights: str = "fp32"
    group_size: int | None = None
    draft: str = "none"
    draft_length: int = 4
    calibration: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.weights, str) or self.weights not in FORMAT_BITS:
            raise ValueError(f"weights must be one of {', '.join(map(repr, FORMAT_BITS))}, got {self.weights!r}")
        if self.weights in GROUPED and self.group_size not in GROUP_SIZES:
            raise ValueError(
                f"group_size must be None (one scale per row), 32 or 64 (they divide every matrix), "
                f"got {self.group_size!r}"
            )
        if self.weights not in GROUPED and self.group_size is not None:
            raise ValueError(f"{self.weights} stores every weight itself, without scales: set group_size to None")
        if not isinstance(self.calibration, str) or self.calibration not in CALIBRATIONS:
            raise ValueError(
                f"calibration must be one of {', '.join(map(repr, CALIBRATIONS))}, got {self.calibration!r}"
            )
        if self.calibration == "gptq" and self.weights not in CALIBRATED:
            raise ValueError(
                f"GPTQ chooses absmax codes: calibrate {', '.join(CALIBRATED)}, not {self.weights} "
                "(set calibration to 'none')"
            )
        if not isinstance(self.draft, str) or self.draft not in DRAFTS:
            raise ValueError(f"draft must be one of {', '.join(map(repr, DRAFTS))}, got {self.draft!r}")
        if isinstance(self.draft_length, bool) or self.draft_length not in DRAFT_LENGTHS:
            raise ValueError(
                f"draft_length must be a whole number from {DRAFT_LENGTHS[0]} to {DRAFT_LENGTHS[-1]}, "
                f"got {self.draft_length!r}"
            )

    @classmethod
    def from_dict(cls, values) -> Configuration:
        """A configuration from a plain dict such as ``capstone_configuration()`` returns."""
        known = [f.name for f in fields(cls)]
        if not isinstance(values, dict):
            raise ValueError(f"the configuration must be a dict with the keys {', '.join(known)}")
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are {', '.join(known)}")
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def format(self) -> tuple[str, int | None, str]:
        """(weights, group_size, calibration): what the stored target depends on."""
        return self.weights, self.group_size, self.calibration

    def weights_label(self) -> str:
        """``int4 g64``, ``int8 per row``, ``int4 per row GPTQ``, ``fp32``."""
        return format_label(*self.format)

    def label(self) -> str:
        """``int4 g64 + distilled k=4``, or ``fp32, no draft``."""
        return self.weights_label() + (
            f" + {self.draft} k={self.draft_length}" if self.draft != "none" else ", no draft"
        )

    def parts(self) -> dict[str, Configuration]:
        """The configuration's parts taken one at a time, and the whole: what the wall clock compares."""
        parts = {}
        if self.weights != "fp32":
            parts[f"{self.weights_label()} weights alone"] = Configuration(
                self.weights, self.group_size, calibration=self.calibration
            )
        if self.draft != "none":
            parts[f"{self.draft} draft, fp32 weights"] = Configuration("fp32", None, self.draft, self.draft_length)
        if len(parts) != 1:
            parts["both" if parts else "fp32 alone"] = self
        return parts


def format_label(weights: str, group_size: int | None = None, calibration: str = "none") -> str:
    """``int4 g64``, ``int8 per row``, ``int4 per row GPTQ``, ``fp32``."""
    groups = f" g{group_size}" if group_size else " per row" * (weights in GROUPED)
    return weights + groups + " GPTQ" * (calibration == "gptq")


def configurations() -> list[Configuration]:
    """Every configuration the capstone serves (with no draft, one whatever its draft length)."""
    formats = [
        (weights, group, calibration)
        for weights in FORMAT_BITS
        for group in (GROUP_SIZES if weights in GROUPED else (None,))
        for calibration in (CALIBRATIONS if weights in CALIBRATED else ("none",))
    ]
    speculation = [("none", DRAFT_LENGTHS[0])] + [(name, k) for name in DRAFTS if name != "none" for k in DRAFT_LENGTHS]
    return [Configuration(w, g, d, k, c) for w, g, c in formats for d, k in speculation]


REFERENCE = Configuration("int4", None, "distilled", 4, "gptq")
OBVIOUS = Configuration("int4", 64, "distilled", 4)  # what chapters 3 and 6 alone suggest: it misses


@dataclass(frozen=True)
class Figures:
    """The capstone's deterministic figures for one configuration (computed on the CPU, in float32)."""

    target_bytes: int
    draft_bytes: int
    fp32_bytes: int  # the float32 target, the baseline
    loss: float  # held-out nats per byte (the draft does not change it)
    fp32_loss: float
    tokens_per_call: float  # all prompts' new tokens over all their target calls
    draft_length: int = 0  # draft calls per target call: k with a draft, 0 without

    @property
    def weight_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes

    @property
    def weights_share(self) -> float:
        return self.weight_bytes / self.fp32_bytes

    @property
    def loss_gap(self) -> float:
        return self.loss - self.fp32_loss

    @property
    def modelled_speedup(self) -> float:
        """Tokens per target call over (1 + DRAFT_COST x k): chapter 6's speed-up with the tokens per
        call counted instead of expected, each target call charged with the k draft calls before it."""
        return modelled_speedup(self.tokens_per_call, self.draft_length)

    def within(self) -> dict[str, bool]:
        """Each part of :data:`BUDGET`: met or not."""
        return within_budget(self.weight_bytes, self.loss_gap, self.modelled_speedup)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "weight_bytes": self.weight_bytes,
            "weights_share": self.weights_share,
            "loss_gap": self.loss_gap,
            "modelled_speedup": self.modelled_speedup,
            "within_budget": all(self.within().values()),
        }

    def summary(self) -> str:
        return (
            f"weights {self.weight_bytes / 1e6:.2f} MB ({100 * self.weights_share:.1f}% of fp32), held-out loss "
            f"{self.loss:.4f} nats/byte ({self.loss_gap:+.4f}), {self.tokens_per_call:.2f} tokens per target call, "
            f"modelled speed-up {self.modelled_speedup:.2f}x"
        )


def modelled_speedup(tokens_per_call: float, draft_length: int) -> float:
    """Tokens per target call over the cost of a round, 1 + DRAFT_COST x k (k = 0: no draft)."""
    return tokens_per_call / (1 + DRAFT_COST * draft_length)


def within_budget(weight_bytes: int, loss_gap: float, speedup: float) -> dict[str, bool]:
    """Each part of :data:`BUDGET`, met or not, for these figures."""
    return {
        "weight_bytes": weight_bytes <= BUDGET["weight_bytes"],
        "loss_gap": loss_gap <= BUDGET["loss_gap"],
        "modelled_speedup": speedup >= BUDGET["modelled_speedup"],
    }


def _on_one_thread(function):
    """``function`` run with torch on one CPU thread: the graded figures then come out the same
    whichever process computes them, and this small model gains nothing from more threads (on a
    busy machine, several threads cost several times over)."""

    @functools.wraps(function)
    def on_one_thread(*args, **kwargs):
        with timing.threads(1):
            return function(*args, **kwargs)

    return on_one_thread


@functools.cache
def _target() -> LanguageModel:
    return checkpoints.load("target")


@functools.cache
def _held_out() -> torch.Tensor:
    return corpus.tokens("validation")


def prompts() -> list[torch.Tensor]:
    """The greedy runs' prompts: (1, PROMPT_LENGTH) openings of held-out plays."""
    return [_held_out()[s : s + PROMPT_LENGTH][None] for s in PROMPT_STARTS]


@functools.cache
def stored_target(
    weights: str, group_size: int | None, calibration: str = "none", fused: bool = False
) -> LanguageModel:
    """The target stored in ``weights`` (GPTQ's codes with ``calibration == "gptq"``). ``fused``
    False: every product in float32, what the graded figures use (the same on every machine);
    True: int4 through torch's fused product where it takes a layer, what the clock times."""
    import copy

    if fused:
        model = copy.deepcopy(stored_target(weights, group_size, calibration))
        for module in model.modules():
            if isinstance(module, StoredLinear):
                module.fused = True
        return model
    hessians = calibration_hessians() if calibration == "gptq" else None
    return store_weights(_target(), weights, group_size, hessians, fused=False)


@functools.cache
def format_bytes(weights: str, group_size: int | None) -> int:
    """Bytes of the target stored in ``weights`` (calibration changes the codes, not how many)."""
    return weight_bytes(stored_target(weights, group_size))


@functools.cache
@_on_one_thread
def format_figures(weights: str, group_size: int | None, calibration: str = "none") -> tuple[int, float]:
    """Bytes and held-out loss of the target stored in ``weights`` (on the CPU, fixed windows)."""
    model = stored_target(weights, group_size, calibration)
    return weight_bytes(model), evaluation.text_loss(model, _held_out(), max_windows=EVAL_WINDOWS)


@functools.cache
def draft_model(name: str):
    return DRAFTS[name].load("cpu")


@functools.lru_cache(maxsize=64)
@_on_one_thread
def measure(config: Configuration) -> Figures:
    """The figures of ``config``: bytes from the stored tensors, loss on fixed held-out windows,
    tokens per target call from greedy runs of the real loop (all prompts' new tokens over all their
    target calls). Deterministic; cached."""
    target_bytes, loss = format_figures(*config.format)
    fp32_bytes, fp32_loss = format_figures("fp32", None)
    target, drafter = stored_target(*config.format), draft_model(config.draft)
    runs = [DRAFTS[config.draft].run(target, drafter, p, config.draft_length, NEW_TOKENS) for p in prompts()]
    per_call = len(runs) * NEW_TOKENS / sum(r["target_calls"] for r in runs)
    k = config.draft_length if drafter is not None else 0
    return Figures(target_bytes, weight_bytes(drafter), fp32_bytes, loss, fp32_loss, per_call, k)


def budget_passes(config: Configuration) -> bool:
    """Whether ``config`` is within :data:`BUDGET`, from the cheapest figure up: bytes, then the
    loss, then the modelled speed-up from :func:`draft_curves` (equal to the loop's, see the tests);
    a figure is computed only where the ones before it hold."""
    n_bytes = format_bytes(config.weights, config.group_size) + weight_bytes(draft_model(config.draft))
    if n_bytes > BUDGET["weight_bytes"]:
        return False
    if format_figures(*config.format)[1] - format_figures("fp32", None)[1] > BUDGET["loss_gap"]:
        return False
    if config.draft == "none":
        return modelled_speedup(1.0, 0) >= BUDGET["modelled_speedup"]
    per_call = draft_curves(*config.format)[config.draft][config.draft_length - 1]
    return modelled_speedup(per_call, config.draft_length) >= BUDGET["modelled_speedup"]


@functools.cache
def passing_configurations() -> tuple[Configuration, ...]:
    """The configurations of :func:`configurations` within the budget."""
    return tuple(config for config in configurations() if budget_passes(config))


def stored_count_reading() -> str:
    """How many configurations pass, out of how many: the stored reference numbers (counting them
    all takes a minute or more; ``make reference`` does, and a test re-derives them)."""
    from course import reference

    passing = int(reference.value("choosing_a_technique", "configurations_within_budget"))
    total = int(reference.value("choosing_a_technique", "configurations"))
    return f"{passing} of the {total} configurations the capstone serves are within the budget"


def calls_from_agreement(agree: list[bool], k: int) -> int:
    """Target calls of greedy speculation with ``k`` drafted tokens, from whether the draft's
    greedy choice equals the target's at each new position: each call keeps the run of agreeing
    positions (at most k) and adds the target's own token after it."""
    position, calls = 0, 0
    while position < len(agree):
        run = 0
        while run < k and position + run < len(agree) and agree[position + run]:
            run += 1
        position, calls = position + run + 1, calls + 1
    return calls


@functools.cache
@_on_one_thread
def greedy_tokens(weights: str, group_size: int | None, calibration: str = "none") -> tuple[torch.Tensor, ...]:
    """The target's greedy continuation of each of :func:`prompts`, (1, PROMPT_LENGTH + NEW_TOKENS)
    each, with the target as :func:`stored_target` stores it in ``weights``, ``group_size`` and
    ``calibration`` (every product in float32). Greedy speculation reproduces it token for token
    whatever the draft, so it is generated with the distilled draft and the longest k: the fewest
    calls of the stored target, each of which rebuilds its weights from the stored tensors (all but
    ``fp32``, a plain float32 copy)."""
    target, drafter = stored_target(weights, group_size, calibration), draft_model("distilled")
    return tuple(
        DRAFTS["distilled"].run(target, drafter, p, DRAFT_LENGTHS[-1], NEW_TOKENS)["tokens"] for p in prompts()
    )


@torch.no_grad()
def agreement(drafter: LanguageModel, tokens: torch.Tensor, prompt_length: int) -> list[bool]:
    """Whether ``drafter``'s greedy guess at each new position of the greedy output ``tokens``
    (1, T + new) equals the token there, its prefix given: one forward pass of the draft."""
    guesses = drafter(tokens[:, :-1]).argmax(dim=-1)[0, prompt_length - 1 :]  # (new,): the guess for each new position
    return (guesses == tokens[0, prompt_length:]).tolist()


@functools.cache
@_on_one_thread
def draft_curves(weights: str, group_size: int | None, calibration: str = "none") -> dict[str, list[float]]:
    """Tokens per target call at every draft length of :data:`DRAFT_LENGTHS`, for each model draft,
    with the target stored in ``weights``, ``group_size`` and ``calibration``: counted from where
    each draft agrees with the target's greedy output (:func:`greedy_tokens`,
    :func:`calls_from_agreement`), without running the loop for every k."""
    curves = {}
    for name, draft in DRAFTS.items():
        if draft.checkpoint is None:
            continue
        tokens = greedy_tokens(weights, group_size, calibration)
        agreements = [agreement(draft_model(name), t, PROMPT_LENGTH) for t in tokens]
        curves[name] = [
            len(agreements) * NEW_TOKENS / sum(calls_from_agreement(a, k) for a in agreements) for k in DRAFT_LENGTHS
        ]
    return curves


ALTERNATIVES = (("fp32", None), ("fp16", None), ("int8", None), ("int4", None), ("int4", 64), ("nf4", 64), ("int2", 32))


def format_table(formats=ALTERNATIVES) -> list[dict]:
    """Bytes, share of fp32, bits per linear weight and held-out loss of the target in each of ``formats``."""
    fp32_bytes, fp32_loss = format_figures("fp32", None)
    table = []
    for weights, group in formats:
        n_bytes, loss = format_figures(weights, group)
        table.append(
            {
                "weights": weights,
                "group_size": group,
                "bytes": n_bytes,
                "share": n_bytes / fp32_bytes,
                "bits": 8 * (n_bytes - _untouched_bytes()) / _linear_weights(),  # per linear weight, scales included
                "loss": loss,
                "loss_gap": loss - fp32_loss,
            }
        )
    return table


def generation(config: Configuration, device: torch.device | None = None, new_tokens: int = NEW_TOKENS):
    """A call that generates ``new_tokens`` greedily after the first prompt with ``config`` on
    ``device`` (the CPU by default): what the wall-clock measurements time."""
    import copy

    device = device or torch.device("cpu")
    target = stored_target(*config.format, fused=True)
    target = target if device.type == "cpu" else copy.deepcopy(target).to(device)
    draft, drafter, prompt = DRAFTS[config.draft], DRAFTS[config.draft].load(device), prompts()[0].to(device)
    return lambda: draft.run(target, drafter, prompt, config.draft_length, new_tokens)


def time_generation(
    configs, device: torch.device | None = None, new_tokens: int = NEW_TOKENS, repeats: int = 3
) -> dict[Configuration, float]:
    """Median seconds of :func:`generation` for each configuration, at the thread count in force."""
    return {
        config: timing.median_seconds(generation(config, device, new_tokens), device, warmup=1, repeats=repeats)
        for config in dict.fromkeys(configs)
    }


def reference_numbers() -> dict[str, tuple[float, float, str]]:
    """The reference configuration's graded figures: name -> (value, tolerance, how it was made)."""
    figures = measure(REFERENCE)
    how = f"{REFERENCE.label()}, on the CPU"
    return {
        "reference_weight_bytes": (figures.weight_bytes, 0.0, f"bytes of the stored target and draft, {how}"),
        "reference_weights_share": (figures.weights_share, 1e-9, f"share of the fp32 target's bytes, {how}"),
        "reference_loss_gap": (
            figures.loss_gap,
            2e-4,
            f"held-out loss minus fp32's, {EVAL_WINDOWS} windows of 256 bytes, {how}",
        ),
        "reference_tokens_per_call": (
            figures.tokens_per_call,
            0.05,
            f"greedy, {len(PROMPT_STARTS)} held-out prompts x {NEW_TOKENS} tokens, {how}",
        ),
        "reference_modelled_speedup": (
            figures.modelled_speedup,
            0.05,
            f"tokens per target call / (1 + {DRAFT_COST} k), the same runs, {how}",
        ),
        "configurations": (len(configurations()), 0.0, "configurations the capstone serves, enumerated"),
        "configurations_within_budget": (
            len(passing_configurations()),
            0.0,
            "configurations within the budget, each enumerated and its figures computed (passing_configurations)",
        ),
        "fp32_weight_bytes": (figures.fp32_bytes, 0.0, "bytes of the float32 target"),
        "int4_g64_bits_per_weight": (
            next(row["bits"] for row in format_table([("int4", 64)])),
            1e-9,
            "bits per linear weight of the stored int4 g64 target, its fp16 scales included (4 + 16/64)",
        ),
    }


def _linear_weights() -> int:
    return sum(m.weight.numel() for m in _target().modules() if isinstance(m, nn.Linear))


def _untouched_bytes() -> int:
    """Bytes of what every format keeps in float32: the embedding and the norms."""
    return weight_bytes(_target()) - 4 * _linear_weights()


def speedup_reading(speedups: dict[str, float]) -> str:
    """One sentence that reads measured speed-ups (name -> ratio against fp32 alone)."""
    parts = [f"{name} {ratio:.2f}x" for name, ratio in speedups.items()]
    slower = [name for name, ratio in speedups.items() if ratio < 1]
    tail = (
        f"; slower than fp32 alone here: {', '.join(slower)}"
        if slower
        else "; every part is faster than fp32 alone here"
    )
    return "speed-up over the fp32 target alone: " + ", ".join(parts) + tail
