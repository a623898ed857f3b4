"""Chapter 8: the course's own code run on a pretrained transformers model, and checked against
the libraries (transformers, peft, bitsandbytes) that do the same job.

:class:`AsCourseModel` gives a transformers causal LM the course model's interface (tokens in,
logits out, ``new_cache``, ``embed``), so the course's measurements (``course.evaluation``), its
fine-tuning loop (``course.lora.finetune``) and its speculative decoding
(``course.speculative_decoding.speculative_generate``) run on it unchanged. The rest are the
hooks that take the model apart (its linear layers, the inputs they see, and its attention's q,
k, v) and the chapter's experiments on it. The chapter's exercises (KV bytes and LoRA parameters
from a model's config, NF4 packing) are its solution cells: :func:`course_answer`.

Not handled: batches with padding (prompts of one length only), models whose layers are not
named like Llama's (``q_proj`` ... ``down_proj``), sliding-window caches.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterable
from types import SimpleNamespace

import torch
from torch import nn

from course import flash_attention, lora, quantization, readings, withheld
from course.model import repeat_kv

# --- the course model's interface over a transformers model ---------------------------------------


class CourseCache:
    """A transformers ``DynamicCache`` with the course cache's ``length``; setting a smaller
    length drops the newest positions (speculative decoding's rollback)."""

    def __init__(self, config):
        from transformers import DynamicCache

        self.dynamic = DynamicCache(config=config)

    @property
    def length(self) -> int:
        return self.dynamic.get_seq_length()

    @length.setter
    def length(self, value: int) -> None:
        if value > self.length:
            raise ValueError(f"a cache of {self.length} positions cannot grow to {value} by setting its length")
        if value < self.length:
            self.dynamic.crop(value - self.length)  # transformers 5: minus the number of positions to remove

    def nbytes(self) -> int:
        return cache_nbytes(self.dynamic)


class AsCourseModel(nn.Module):
    """A transformers causal LM seen as a course model: ``model(tokens, cache) -> logits``.

    ``tokens`` (B, T) of one length (no padding); the cache continues where it stopped, as the
    course model's does.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.config = SimpleNamespace(max_seq_len=model.config.max_position_embeddings)
        self.cache_keyword = cache_keyword(model)

    @property
    def embed(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def forward(self, tokens: torch.Tensor, cache: CourseCache | None = None) -> torch.Tensor:
        if cache is None:
            return self.model(input_ids=tokens, use_cache=False).logits  # (B, T, vocab)
        return self.model(input_ids=tokens, **{self.cache_keyword: cache.dynamic}, use_cache=True).logits

    def new_cache(self, batch: int = 1, max_len: int | None = None) -> CourseCache:
        return CourseCache(self.model.config)

    def num_parameters(self) -> int:
        return count_parameters(self.model)


def cache_keyword(model: nn.Module) -> str:
    """The name under which ``model`` (a transformers causal LM, or peft's model around one) takes
    its KV cache: ``cache`` in transformers 5.24, ``past_key_values`` in 5.15 (Colab's), which
    takes any other name silently and caches nothing."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def count_parameters(model: nn.Module) -> int:
    """Numbers in the model, each shared tensor (a tied embedding) counted once."""
    return sum(p.numel() for p in model.parameters())  # parameters() already skips shared ones


def storage_bytes(model: nn.Module) -> int:
    """Bytes the model's weights occupy: every parameter and buffer once, plus bitsandbytes'
    per-block scales (kept beside a 4-bit weight, not as a parameter)."""
    seen, total = set(), 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    for module in model.modules():
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            total += state.absmax.numel() * state.absmax.element_size()
            if state.nested:
                total += state.state2.absmax.numel() * state.state2.absmax.element_size()
    return total


def encode(tokenizer, text: str) -> torch.Tensor:
    """``text`` as a (T,) tensor of token ids."""
    return torch.tensor(tokenizer(text).input_ids, dtype=torch.long)


def chat_prompt(tokenizer, request: str) -> torch.Tensor:
    """A user turn in the model's chat template, ready for the answer: (1, T) token ids."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": request}], tokenize=False, add_generation_prompt=True
    )
    return encode(tokenizer, text)[None]


# --- the chapter's exercises: the course's answers are its solution cells --------------------------

CHAPTER = "08_in_practice"


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


def yours_or_the_course(namespace: dict, name: str, *args, **kwargs) -> tuple[object, str]:
    """The notebook's own ``name`` (``kv_cache_bytes_from_config`` or ``lora_trainable_parameters``)
    on ``args`` once it is written, else the course's, and the words that say whose it is ("your
    lora_trainable_parameters"). The course's is called either way, so that the learners' copy,
    which replays it, has it for the cells before the learner's is written."""
    course_value = course_answer(name)(*args, **kwargs)
    own = namespace.get(name)
    if callable(own):
        try:
            return own(*args, **kwargs), f"your {name}"
        except NotImplementedError:
            pass
    return course_value, f"the course's {name} (yours is not written yet)"


def lora_linear_from_peft(layer: nn.Module, adapter: str = "default") -> nn.Module:
    """The course's ``LoRALinear`` (chapter 2's solution) over a peft LoRA layer's frozen base, with
    that layer's rank, alpha, A and B for ``adapter`` (copied: training one leaves the other)."""
    ours = lora.course_answer("LoRALinear")(layer.base_layer, layer.r[adapter], alpha=layer.lora_alpha[adapter])
    with torch.no_grad():
        ours.lora_A.copy_(layer.lora_A[adapter].weight)  # (r, d_in)
        ours.lora_B.copy_(layer.lora_B[adapter].weight)  # (d_out, r)
    return ours


def config_dict(model: nn.Module) -> dict:
    """The numbers of a transformers config that the exercises use, as a plain dict."""
    keys = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "intermediate_size")
    return {key: getattr(model.config, key) for key in keys}


def generated_cache(generated):
    """The KV cache that ``generate(..., return_dict_in_generate=True)`` returns: its ``cache``, which
    transformers 5.15 (Colab's) still calls ``past_key_values``."""
    cache = getattr(generated, "cache", None)
    return cache if cache is not None else generated.past_key_values


def cache_nbytes(cache) -> int:
    """Bytes of keys and values held by a transformers cache (all layers)."""
    layers = getattr(cache, "layers", None)
    pairs = (
        [(layer.keys, layer.values) for layer in layers]
        if layers is not None
        else zip(cache.key_cache, cache.value_cache, strict=True)  # transformers 4
    )
    return sum(t.numel() * t.element_size() for pair in pairs for t in pair if t is not None)


# --- chapter 3: the course's quantizers and bitsandbytes' NF4 on the model's weights ----------------


def linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """The decoder's linear layers by path; the output layer (tied to the embedding) is left out,
    as weight-only schemes usually leave it."""
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not name.endswith("lm_head")
    }


def round_trip(weight: torch.Tensor, method: str, group_size: int | None = None) -> torch.Tensor:
    """``weight`` through one of the course's quantizers: ``int8``, ``int4`` (absmax per row or
    per ``group_size`` columns) or ``nf4`` (groups of ``group_size``, 64 by default)."""
    if method == "nf4":
        return quantization.nf4_quantize_dequantize(weight, group_size or 64)
    if method in ("int8", "int4"):
        return quantization.round_trip(weight, int(method[3:]), group_size)
    raise ValueError(f"method must be int8, int4 or nf4, got {method!r}")


@contextlib.contextmanager
def quantized_weights(model: nn.Module, method: str, group_size: int | None = None):
    """Within the block, every linear layer of the decoder holds its weights after the course's
    quantization round trip (``round_trip``); afterwards the original weights are back."""
    layers = linear_layers(model)
    originals = {name: layer.weight.detach().clone() for name, layer in layers.items()}
    try:
        with torch.no_grad():
            for layer in layers.values():
                layer.weight.copy_(round_trip(layer.weight, method, group_size))
        yield model
    finally:
        with torch.no_grad():
            for name, layer in layers.items():
                layer.weight.copy_(originals[name])


@contextlib.contextmanager
def int4_linears(model: nn.Module, group_size: int = 64, output_layer: bool = False, make=None):
    """Within the block, every linear layer of the decoder is the course's int4 layer
    (``course.stored_weights.course_int4_layer``: rounded to nearest, codes packed by chapter 9's
    ``pack_int4``, one fp16 scale per ``group_size`` columns: torch's fused int4 product where
    it takes the layer), or ``make(layer)`` when given; afterwards the float layers are back.
    ``output_layer``: the output layer too, as an int4 copy (it is tied to the embedding, which
    stays in float32 for looking tokens up). Not handled: layers with a bias."""
    from course.stored_weights import course_int4_layer

    make = make or (lambda layer: course_int4_layer(layer.weight, group_size))

    layers = linear_layers(model)
    if output_layer:
        layers["lm_head"] = model.get_output_embeddings()
    replaced = []
    try:
        for name, layer in layers.items():
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, make(layer))
            replaced.append(name)
        yield model
    finally:
        for name in replaced:
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, layers[name])


def first_difference(tokens: torch.Tensor, other: torch.Tensor) -> int | None:
    """The index of the first token where two generated sequences (1, T) differ, or None when one
    is the start of the other."""
    n = min(tokens.shape[-1], other.shape[-1])
    differ = (tokens[..., :n] != other[..., :n]).flatten().nonzero()
    return int(differ[0]) if len(differ) else None


def distinct_per_block(weight: torch.Tensor, block: int = 32) -> torch.Tensor:
    """How many distinct values each run of ``block`` consecutive weights of a row holds: at most
    16 for weights that were 4-bit codes (GGUF's Q4_1 stores blocks of 32 as codes times a scale
    plus a minimum). Not handled: rows whose length ``block`` does not divide (ValueError)."""
    if weight.shape[-1] % block:
        raise ValueError(f"rows of {weight.shape[-1]} do not split into blocks of {block}")
    rows = weight.detach().reshape(-1, block).sort(dim=1).values
    return (rows.diff(dim=1) != 0).sum(dim=1) + 1


@torch.no_grad()
def linear_inputs(model: nn.Module, ids: torch.Tensor, names: Iterable[str] = ("q_proj", "down_proj")) -> dict:
    """What the linear layers named ``names`` receive for one prompt: {(layer, name): (T, features)}."""
    seen, hooks = {}, []
    for path, module in linear_layers(model).items():
        leaf = path.rsplit(".", 1)[-1]
        if leaf in names:
            index = int(path.split(".layers.")[1].split(".")[0])

            def keep(module, args, index=index, leaf=leaf):
                seen[(index, leaf)] = args[0].detach()[0]  # (T, features) of the only sequence

            hooks.append(module.register_forward_pre_hook(keep))
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def outlier_features(x: torch.Tensor, threshold: float = 6.0) -> torch.Tensor:
    """Indices of the feature columns of ``x`` (tokens, features) where some |value| reaches ``threshold``."""
    return (x.abs() >= threshold).any(dim=0).nonzero().flatten()


def requantization_reading(losses: dict[str, float], reference: str = "float32") -> str:
    """What each scheme of ``losses`` (label -> nats per token, labelled as chapter 8 labels them:
    "int4, per row", "int4, groups of 64", ...) cost over ``reference``, and the share of the
    per-row int4 cost that each group size repaired: "most of it" only above half. Not handled:
    noise in the losses (they are deterministic for one text; a few thousandths apart is a tie)."""
    base = losses[reference]
    cost = {label: loss - base for label, loss in losses.items() if label != reference}
    lines = [f"{label}: {extra:+.3f} nats per token over {reference}" for label, extra in cost.items()]
    per_row = cost.get("int4, per row")
    grouped = {label: extra for label, extra in cost.items() if label.startswith("int4, groups")}
    if per_row and per_row > 0 and grouped:
        shares = {label: 1 - extra / per_row for label, extra in grouped.items()}
        said = readings.listing(
            [f"{label.removeprefix('int4, ')} {taken_back(share, plural=True)}" for label, share in shares.items()]
        )
        best = round(100 * max(shares.values()))
        how = "most of it" if best > 50 else "less than half of it" if best > 0 else "none of it"
        lines.append(f"groups repair {how}: of int4's per-row {per_row:+.3f}, {said}")
    return ";\n".join(lines)


def taken_back(share: float, plural: bool = False) -> str:
    """How a share of a loss's rise that a method undid reads, in words that fit its sign: "takes
    back 41% of it", "takes back none of it" (0%), "adds 46% to it" (a negative share: the method
    made it worse), "takes back all of it and 20% more" (beyond 100%: below the baseline). With
    ``plural``, the verbs agree with a plural subject ("groups of 64 take back ...")."""
    percent = round(100 * share)
    take, add = ("take", "add") if plural else ("takes", "adds")
    if percent < 0:
        return f"{add} {-percent}% to it"
    if percent == 0:
        return f"{take} back none of it"
    if percent > 100:
        return f"{take} back all of it and {percent - 100}% more"
    return f"{take} back {percent}% of it"


def outliers_reading(features: dict[str, tuple[int, int]], errors: dict[str, tuple[float, float]]) -> str:
    """What the outlier measurements of chapter 8 show: per layer type, ``features`` (how many of the
    input features reach the threshold, of how many) and ``errors`` (relative error of the product
    all in int8, and with those features in float), the first two types compared. A share above
    5% is read as many large features, not LLM.int8()'s few outlier dimensions; two int8 errors
    within 10% of each other as the same. Not handled: fewer than two layer types."""
    lines = []
    for name, (reaching, total) in features.items():
        share = reaching / total
        kind = "a few outlier dimensions" if share <= 0.05 else "not a few outlier dimensions but many large features"
        int8, mixed = errors[name]
        lines.append(
            f"{name}: {reaching} of {total} features ({share:.1%}) reach the threshold: {kind}; float for them takes "
            f"int8's relative error from {int8:.4f} to {mixed:.4f}"
        )
    (a, (ea, _)), (b, (eb, _)) = list(errors.items())[:2]
    same = abs(ea / eb - 1) <= 0.10
    lines.append(
        f"int8 alone errs {'about as much' if same else 'differently'} on {a} ({ea:.4f}) and {b} ({eb:.4f})"
        + (": the large features do not make int8 worse here" if same else "")
    )
    return ";\n".join(lines)


# --- chapter 5: the model's own attention --------------------------------------------------------


def _attention_function(name: str, function) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(name, function)


@contextlib.contextmanager
def attention_implementation(model: nn.Module, name: str, function):
    """Within the block, every attention layer of ``model`` runs ``function`` (transformers'
    attention interface: q (B, H, T, D), k and v (B, K, T, D) after the rotary embedding)."""
    _attention_function(name, function)
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


def _check_mask(attention_mask) -> None:
    if attention_mask is not None:
        raise ValueError("padded batches are not handled: pass prompts of one length without an attention_mask")


def blockwise_attention_function(block: int):
    """A transformers attention function that computes causal attention with the course's
    :func:`course.flash_attention.batched_blockwise_attention`, ``block`` keys at a time."""

    def course_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        _check_mask(attention_mask)
        n_rep = query.shape[1] // key.shape[1]
        out = flash_attention.batched_blockwise_attention(
            query, repeat_kv(key, n_rep), repeat_kv(value, n_rep), block, causal=True
        )
        return out.transpose(1, 2).contiguous(), None  # (B, T, H, D), as transformers expects

    return course_attention


@torch.no_grad()
def attention_inputs(
    model: nn.Module, ids: torch.Tensor, layer: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The q (B, H, T, D), k and v (B, K, T, D) that attention layer ``layer`` receives for ``ids``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    captured = {}

    def capture(module, query, key, value, attention_mask, **kwargs):
        if module.layer_idx == layer:
            captured["qkv"] = (query.detach(), key.detach(), value.detach())
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    with attention_implementation(model, "course_capture", capture):
        model(input_ids=ids, use_cache=False)
    return captured["qkv"]


# --- chapter 6: drafts for speculative decoding ------------------------------------------------------


def int8_draft(model: nn.Module) -> nn.Module:
    """A copy of ``model`` for drafting, whose linear layers run on torch's int8 kernels
    (``quantize_dynamic``): weights in int8 with one scale per output row (chapter 3's per-row
    int8, with torch's scale absmax / 127.5), and each call's activations in int8 with one scale
    for the whole tensor, which outlier features (LLM.int8()) make coarse. Cheaper per token on a
    CPU; how often it agrees with the model is for speculative decoding to measure."""
    import warnings

    quantization_api = getattr(getattr(torch, "ao", None), "quantization", None)
    if quantization_api is None or not hasattr(quantization_api, "quantize_dynamic"):
        raise RuntimeError(f"this torch ({torch.__version__}) has no torch.ao.quantization.quantize_dynamic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice points to torchao, which the course does not need
        per_row = {nn.Linear: quantization_api.per_channel_dynamic_qconfig}
        return quantization_api.quantize_dynamic(copy.deepcopy(model), per_row, dtype=torch.qint8).eval()


# --- experiments on the pretrained model, of plain data (the learners' copy replays them) ------------
#
# Each cross-check that runs another chapter's answer on the model (LoRALinear, quantize_dequantize,
# int8 products, blockwise attention, speculative decoding) is one function of token ids, names and
# numbers in course/answers/in_practice.py (instructor-only), called across the line between the
# copies (EXPERIMENTS): it runs on the model as loaded (:func:`pristine`, left as it was found), so
# the learners' copy answers it from the release's recordings instead of the model's tensors.

LOSS_SEQ_LEN, LOSS_BATCH = 128, 4  # the chapter's held-out loss: windows of 128 tokens, 4 a batch

_loaded: tuple | None = None


def own_random(function):
    """``function`` run with torch's global random stream saved and restored: an experiment the
    learners' copy replays must leave the notebook's later draws (peft's adapters) as they are."""
    import functools

    @functools.wraps(function)
    def run(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return function(*args, **kwargs)

    return run


def pristine() -> tuple[nn.Module, object]:
    """(model, tokenizer) as :func:`course.pretrained.load` gives them, loaded once; every experiment
    below leaves the model's weights and attention as it found them."""
    global _loaded
    if _loaded is None:
        from course import pretrained

        _loaded = pretrained.load()
    return _loaded


def held_out_loss(model: nn.Module, ids: torch.Tensor) -> float:
    """Nats per token on ``ids`` (T,), the chapter's estimate; ``model`` a transformers model or its course view."""
    from course import evaluation

    view = model if isinstance(model, AsCourseModel) else AsCourseModel(model)
    return evaluation.text_loss(view, ids, seq_len=LOSS_SEQ_LEN, batch=LOSS_BATCH)


def seeded_adapter(d_in: int, d_out: int, r: int, tokens: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Factors A (r, d_in) and B (d_out, r), both away from zero (std 0.02), and inputs x (tokens,
    d_in), drawn from ``seed``: what the LoRA cross-check gives peft's layer and the course's alike."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(r, d_in, generator=generator) * 0.02
    b = torch.randn(d_out, r, generator=generator) * 0.02
    return a, b, torch.randn(tokens, d_in, generator=generator)


EXPERIMENTS = withheld.module("course.answers.in_practice")
DRAFTS = ("prompt lookup", "int8 draft")  # the drafts speculative_on_model runs


def lora_linear_output(path: str, r: int, alpha: float, tokens: int, seed: int = 0) -> torch.Tensor:
    """The course's LoRALinear over the model's linear layer ``path``, with :func:`seeded_adapter`'s
    A and B, on its x: (tokens, d_out)."""
    return EXPERIMENTS.lora_linear_output(path, r, alpha, tokens, seed)


def requantized_loss(ids: torch.Tensor, method: str, group_size: int | None = None) -> float:
    """:func:`held_out_loss` on ``ids`` with every decoder linear layer through :func:`round_trip`."""
    return EXPERIMENTS.requantized_loss(ids, method, group_size)


def outlier_product_errors(ids: torch.Tensor, layer: int, name: str, threshold: float = 6.0) -> tuple[float, float]:
    """Relative error of ``x @ W.T`` for the inputs x that layer ``layer``'s ``name`` sees on
    ``ids`` (T,): all in int8, and with the features reaching ``threshold`` in float (LLM.int8())."""
    return EXPERIMENTS.outlier_product_errors(ids, layer, name, threshold)


def blockwise_differences(ids: torch.Tensor, layer: int, blocks: list[int]) -> list[float]:
    """Largest |blockwise_attention - SDPA| (causal) on the q, k, v attention layer ``layer`` sees for
    ``ids`` (T,), for each block size of ``blocks``."""
    return EXPERIMENTS.blockwise_differences(ids, layer, blocks)


def blockwise_logits(ids: torch.Tensor, block: int) -> tuple[float, float]:
    """The model on ``ids`` (T,) with the course's blockwise attention in every layer against torch's:
    (largest logit difference, share of positions with the same argmax)."""
    return EXPERIMENTS.blockwise_logits(ids, block)


def speculative_on_model(prompt: torch.Tensor, draft: str, k: int, new: int) -> tuple[torch.Tensor, list]:
    """The course's ``speculative_generate`` at temperature 0 with the model as target and ``draft``
    (one of :data:`DRAFTS`: prompt lookup of 2 tokens down to 1, or :func:`int8_draft`): (tokens, rounds)."""
    return EXPERIMENTS.speculative_on_model(prompt, draft, k, new)
