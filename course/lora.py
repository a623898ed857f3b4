"""Low-rank adaptation: the course's code around chapter 2's exercises.

``W' = W + (alpha / r) B A`` with the base ``W`` frozen, ``A`` (r, d_in) and ``B`` (d_out, r)
trained, ``B`` starting at zero so that the adapted layer starts equal to the base. A worked
example: a 4096 x 4096 projection with a rank-8 adapter trains 8 * (4096 + 4096) = 65,536 numbers,
0.39% of its 16.8 million.

The chapter's exercises (``lora_parameters``, ``best_low_rank_error``, ``LoRALinear``,
``finetune_memory_gib``) are the learner's: what here needs one takes it as a parameter, and a
notebook cell passes the learner's once written, the course's answer before that (:func:`yours`,
the chapter's solution cells through ``course.withheld``). A class cannot be answered from
recordings, so the chapter's experiments with adapters (:data:`EXPERIMENTS`) take the
``LoRALinear`` class and return plain data: :func:`experiment` runs one with the notebook's class
once written, else the course's run with the solution's class (``course/answers/lora.py``; its
recorded results, in the learners' copy).

Not handled: dropout on the adapter's input, adapters on embeddings or convolutions, several
adapters inside one module (hot-swapping keeps one ``LoRALinear`` per adapter over a shared base).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import nn

from course import withheld

CHAPTER = "02_lora"
COURSE = withheld.module("course.answers.lora")  # the course's runs with the solution's answers
GiB = 2**30


def _positive_int(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")


# --- the best any rank can do: section 2 ---------------------------------------------------------------


def low_rank_change(d_out: int, d_in: int, true_rank: int, noise: float = 0.0, seed: int = 0) -> torch.Tensor:
    """A (d_out, d_in) weight change of rank ``true_rank`` plus Gaussian noise of relative size ``noise``."""
    _positive_int(d_out=d_out, d_in=d_in, true_rank=true_rank)
    generator = torch.Generator().manual_seed(seed)
    left = torch.randn(d_out, true_rank, generator=generator)
    right = torch.randn(true_rank, d_in, generator=generator)
    change = left @ right / math.sqrt(true_rank)
    spread = torch.randn(d_out, d_in, generator=generator)
    return change + noise * spread * change.norm() / spread.norm()


def noise_share(d_out: int, d_in: int, true_rank: int, noise: float, seed: int = 0) -> float:
    """The noise's share of ``low_rank_change(d_out, d_in, true_rank, noise, seed)`` (Frobenius):
    the error of an approximation that holds the change and none of the noise."""
    delta = low_rank_change(d_out, d_in, true_rank, noise, seed)
    return (delta - low_rank_change(d_out, d_in, true_rank, 0.0, seed)).norm().item() / delta.norm().item()


def rank_errors(
    d_out: int, d_in: int, true_rank: int, noise: float, seed: int, ranks: list[int], *, best_low_rank_error
) -> list[float]:
    """``best_low_rank_error`` (the chapter's exercise) of ``low_rank_change(d_out, d_in, true_rank,
    noise, seed)`` at each of ``ranks``."""
    delta = low_rank_change(d_out, d_in, true_rank, noise, seed)
    return [float(best_low_rank_error(delta, rank)) for rank in ranks]


def rank_reading(errors: dict[int, float], noise: float, near: float = 1.1) -> str:
    """What the best errors at several ranks (``errors``: rank -> relative error) say of a change
    whose noise is ``noise`` of it (:func:`noise_share`): the smallest rank that gets within ``near``
    times the noise, what the ranks below it leave and what the largest rank buys beyond it.
    ``rank_reading({2: 0.6, 4: 0.047, 32: 0.017}, 0.05)`` reads that rank 32 gets lower by
    fitting part of the noise."""
    ranks = sorted(errors)
    reached = [rank for rank in ranks if errors[rank] <= near * noise]
    if not reached:
        top = ranks[-1]
        return (
            f"No rank shown gets near the noise's own size ({noise:.1%}): rank {top} still leaves "
            f"{errors[top]:.1%}, so this change needs more than rank {top}."
        )
    knee = reached[0]
    said = [f"Rank {knee} gets down to about the noise's own size ({errors[knee]:.1%}, the noise {noise:.1%})"]
    if below := [rank for rank in ranks if rank < knee]:
        said.append(f"rank {below[-1]} leaves {errors[below[-1]]:.1%}: it misses part of the change itself")
    if (top := ranks[-1]) > knee:
        cost = f"{top / knee:g}x the parameters of rank {knee}"
        if errors[knee] - errors[top] <= 0.1 * errors[knee]:
            said.append(f"rank {top} buys almost nothing more ({errors[top]:.1%}), for {cost}")
        else:
            said.append(
                f"rank {top} gets lower ({errors[top]:.1%}) by fitting part of the noise too, which is no part "
                f"of the change, for {cost}"
            )
    return "; ".join(said) + "."


# --- the notebook's answers or the course's ----------------------------------------------------------

TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "lora_parameters": (8, 8, 2),
    "best_low_rank_error": (torch.eye(4), 2),
    "finetune_memory_gib": (7e9, "full"),
}


def yours(namespace: dict, name: str, what: str):
    """The notebook's own ``name`` (``lora_parameters``, ``best_low_rank_error`` or
    ``finetune_memory_gib``) once written, the course's answer before that, with the line saying
    whose numbers ``what`` shows (:func:`course.withheld.yours_or_course`)."""
    return withheld.yours_or_course(namespace, CHAPTER, name, TRIED_ON[name], what)


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the
    learners' copy; a class, ``LoRALinear``, only in the instructor's copy)."""
    return getattr(withheld.answers(CHAPTER), name)


def your_rank_errors(namespace: dict, what: str) -> Callable[..., list[float]]:
    """:func:`rank_errors` by the notebook's ``best_low_rank_error`` once written, else the course's,
    after the line saying whose numbers ``what`` shows: a function of plain data, ``(d_out, d_in,
    true_rank, noise, seed, ranks)``, so that the learners' copy records the course's errors by
    change (its 64 x 64 changes, call by call, would not fit). While the learners' copy records, the
    course's is asked beside the notebook's on the same arguments, in the same form."""
    course = COURSE.rank_errors
    if yours(namespace, "best_low_rank_error", what) is course_answer("best_low_rank_error"):
        return course
    own = namespace["best_low_rank_error"]

    def errors(*args, **kwargs) -> list[float]:
        if withheld.is_recording():
            course(*args, **kwargs)
        return rank_errors(*args, **kwargs, best_low_rank_error=own)

    return errors


def gains_reading(gains: dict[int, float], full_gain: float, close: float = 0.8) -> str:
    """What the adapters' gains over the base model (``gains``: rank -> nats per byte) say, from the
    numbers: whether the ranks sit close together (the least gain at least ``close`` of the most)
    or which rank gains most and by how much, and the best gain against full fine-tuning's."""
    from course.readings import versus

    best, worst = max(gains, key=gains.get), min(gains, key=gains.get)
    if gains[best] <= 0:
        return f"no adapter gained over the base model in this run (the best, rank {best}: {gains[best]:+.3f})"
    if len(gains) == 1:
        said = f"rank {best} gains {gains[best]:+.3f}"
    elif gains[worst] >= close * gains[best]:
        said = (
            f"the ranks sit close together: the least gain (rank {worst}, {gains[worst]:+.3f}) is "
            f"{gains[worst] / gains[best]:.0%} of the most (rank {best}, {gains[best]:+.3f})"
        )
    else:
        which = "the smallest" if best == min(gains) else "the largest" if best == max(gains) else "a middle"
        than = f"{gains[best] / gains[worst]:.1f}x rank {worst}'s" if gains[worst] > 0 else f"while rank {worst} gains"
        said = (
            f"rank matters after this many steps: {which} rank gains most, rank {best} {gains[best]:+.3f}, "
            f"{than} {gains[worst]:+.3f}"
        )
    if full_gain == 0:
        return f"{said}; full fine-tuning gained nothing ({full_gain:+.3f})"
    return f"{said}; the best adapter's gain is {versus(gains[best], full_gain, 'full fine-tuning', within=0.1)}"


def qlora_reading(base: float, nf4_base: float, lora_loss: float, qlora_loss: float, within: float = 0.005) -> str:
    """What QLoRA's losses say (nats per byte): what NF4's rounding costs the base (``nf4_base``
    against ``base``), and how much of that cost the adapter on the NF4 base makes up, against
    LoRA's on the full-precision base. Differences within ``within`` are read as none: one run
    cannot tell them apart."""
    cost, gap = nf4_base - base, qlora_loss - lora_loss
    said = f"NF4's rounding costs the base {cost:+.3f} nats/byte, and QLoRA ends {gap:+.3f} from LoRA on the fp32 base"
    if cost <= within:
        return f"{said}: the rounding costs too little here (within {within}) to tell what the adapter makes up of it."
    if gap <= within:
        return f"{said}: the adapter made up the rounding's cost."
    if gap < cost - within:
        return f"{said}: the adapter made up {1 - gap / cost:.0%} of the rounding's cost."
    return f"{said}: the adapter made up none of the rounding's cost."


SECTION_ROWS = ((1000, 8), (4096, 8), (4096, 16), (8192, 64))  # section 1's layers: (d_in = d_out, rank)
SECTION_CHANGE = {"d_out": 64, "d_in": 64, "true_rank": 4, "noise": 0.05, "seed": 0}  # section 2's change
SECTION_RANKS = [1, 2, 4, 8, 32]  # the ranks section 2 shows


# --- adapters on a whole model -------------------------------------------------------------------------

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def is_adapter(module: nn.Module) -> bool:
    """Whether ``module`` is an adapter layer: a ``LoRALinear``, which keeps its frozen layer as
    ``base`` and its factors as ``lora_A`` and ``lora_B``."""
    return isinstance(getattr(module, "base", None), nn.Linear) and hasattr(module, "lora_A")


def _layers(model: nn.Module, targets) -> dict[str, nn.Linear]:
    """The base linear layers named in ``targets``, by path, whether or not an adapter is in place."""
    found = {}
    for path, module in model.named_modules():
        if path.rsplit(".", 1)[-1] in targets:  # an adapter's own base sits at "<path>.base": not a target
            if is_adapter(module):
                found[path] = module.base
            elif isinstance(module, nn.Linear):
                found[path] = module
    return found


def make_adapter(
    model: nn.Module, rank: int, alpha: float | None = None, targets=ATTENTION, seed: int = 0, *, layer: type
) -> dict[str, nn.Module]:
    """A new adapter for ``model``: one ``layer`` (the chapter's ``LoRALinear``: a notebook's own, or
    the course's) per target layer, wrapping the shared base, on the base's device.

    The model is not changed; :func:`use_adapter` puts the adapter in (and takes it out again).
    Every parameter of the model is frozen, so only adapters train.
    """
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    torch.manual_seed(seed)
    layers = _layers(model, targets)
    if not layers:
        raise ValueError(f"no nn.Linear named {', '.join(targets)} in the model")
    return {path: layer(base, rank, alpha).to(base.weight.device) for path, base in sorted(layers.items())}


def use_adapter(model: nn.Module, adapter: dict[str, nn.Module] | None) -> None:
    """Switch ``model`` to ``adapter`` (``None``: the plain base). Only module references move:
    no weight is copied or changed, so switching per request costs microseconds."""
    for path, module in list(model.named_modules()):
        if is_adapter(module):
            parent, _, leaf = path.rpartition(".")
            setattr(model.get_submodule(parent), leaf, module.base)
    for path, layer in (adapter or {}).items():
        parent, _, leaf = path.rpartition(".")
        current = getattr(model.get_submodule(parent), leaf)
        if current is not layer.base:
            raise ValueError(f"this adapter was made for another model: {path} is not its base layer")
        setattr(model.get_submodule(parent), leaf, layer)


def adapter_parameters(adapter: dict[str, nn.Module]) -> list[nn.Parameter]:
    return [p for layer in adapter.values() for p in (layer.lora_A, layer.lora_B)]


def finetune(
    model: nn.Module,
    parameters: list[torch.Tensor],
    data: torch.Tensor,
    steps: int,
    lr: float,
    batch: int = 8,
    seq_len: int = 128,
    seed: int = 0,
    progress: bool = True,
    description: str = "fine-tuning",
) -> list[float]:
    """Train ``parameters`` of ``model`` (an adapter's, or all of them) on random windows of ``data``.

    AdamW at a constant ``lr``; returns the training loss of every step.
    """
    from tqdm.auto import tqdm

    from course.train import batches

    if not parameters:
        raise ValueError("nothing to train: pass the adapter's parameters or the model's")
    for parameter in parameters:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0)
    stream = batches(data, batch, seq_len, torch.Generator().manual_seed(seed))
    losses = []
    model.train()
    for _ in tqdm(range(steps), desc=description, disable=not progress, mininterval=1, leave=False):
        window = next(stream).to(parameters[0].device)  # (B, T + 1), where the model is
        logits = model(window[:, :-1])  # (B, T, vocab)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def weights_fingerprint(model: nn.Module) -> str:
    """A checksum of every base weight (adapters excluded): equal before and after means untouched."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if "lora_" not in name:
            digest.update(name.replace(".base.", ".").encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


# --- the notebook's LoRALinear or the course's -------------------------------------------------------------


def written_layer(namespace: dict) -> type | None:
    """The notebook's ``LoRALinear`` once written: it builds, runs and merges on a small layer (the
    random streams are left as they were). None while it raises NotImplementedError; any other error is
    the learner's to see, and raises, as does a layer whose output no parameter of it can train."""
    own = namespace.get("LoRALinear")
    if not isinstance(own, type):
        return None
    try:
        with withheld.streams_kept():
            layer = own(nn.Linear(4, 3), 2)
            output = layer(torch.zeros(1, 4))
            layer.merge()
    except NotImplementedError:
        return None
    if isinstance(output, torch.Tensor) and not output.requires_grad:
        raise ValueError(
            "your LoRALinear's output does not depend on any parameter that trains, so its adapters cannot "
            "train here: make lora_A and lora_B nn.Parameters and use them as they are in forward (not .data, "
            ".detach() or a copy made under torch.no_grad()); its check cell says more"
        )
    return own


def your_layer(namespace: dict, what: str) -> type | None:
    """The notebook's ``LoRALinear`` once written (:func:`written_layer`), else None (then
    :func:`experiment` runs the course's), after the line saying whose adapters ``what`` shows."""
    own = written_layer(namespace)
    if own is not None:
        print(f"Your `LoRALinear` trains {what}.")
    else:
        print(
            "Your `LoRALinear` is not written yet: the course's numbers, recorded with its own LoRALinear on the "
            f"same settings, stand in for {what} (write it, then run this cell again)."
        )
    return own


def experiment(name: str, layer: type | None, *args):
    """The chapter's experiment ``name`` (:data:`EXPERIMENTS`) with ``layer``, the notebook's
    ``LoRALinear`` (:func:`your_layer`); with None, the course's run with the solution's class
    (``course/answers/lora.py``), which the learners' copy answers from its recordings, made at the
    sizes of the chapter's parameters cell. While the learners' copy records (the instructor's
    notebook, whose class is the solution's) the course's run stands for the notebook's: the same
    code on the same inputs, trained once rather than twice."""
    if layer is not None and not withheld.is_recording():
        return EXPERIMENTS[name](layer, *args)
    try:
        return getattr(COURSE, name)(*args)
    except withheld.NotRecorded:
        raise withheld.NotRecorded(
            f"the course's adapters were recorded at the sizes the chapter's parameters cell sets, not at these "
            f"({', '.join(map(repr, args))}): write your LoRALinear to train them at any size"
        ) from None


# --- the chapter's experiments: a LoRALinear class and plain data in, plain data out ---------------------

_models: dict = {}  # device -> (the course model, its weights' fingerprint when loaded)
_adapters: dict = {}  # (layer, rank, steps, domain, seed) -> an adapter trained on it, kept for the session
ADAPT_LR = 3e-3  # the adapters' learning rate (full fine-tuning needs a smaller one)


def course_model() -> tuple[nn.Module, str]:
    """The course's target model (chapter 1) on the best device, loaded once, and its weights'
    fingerprint as loaded: the base every adapter of the chapter wraps."""
    from course import checkpoints
    from course.device import best_device

    device = best_device()
    if device not in _models:
        model = checkpoints.load("target").to(device)
        _models[device] = (model, weights_fingerprint(model))
    return _models[device]


def domain(part: str, capitals: bool = False) -> torch.Tensor:
    """The comedies to adapt on (``part`` "adapt") or to measure on ("eval"), in capitals if asked."""
    from course import corpus

    tokens = corpus.domain_tokens(part)
    return corpus.encode(corpus.decode(tokens).upper()) if capitals else tokens


def trained_adapter(layer: type, rank: int, steps: int, capitals: bool = False, seed: int = 0) -> dict:
    """A rank-``rank`` adapter of ``layer`` on each attention projection of :func:`course_model`,
    trained ``steps`` AdamW steps on the six comedies (in capitals with ``capitals``); trained once
    per session and kept, the global random streams left as they were."""
    key = (layer, rank, steps, capitals, seed)
    if key not in _adapters:
        model, _ = course_model()
        with withheld.streams_kept():
            adapter = make_adapter(model, rank, seed=seed, layer=layer)
            use_adapter(model, adapter)
            try:
                finetune(
                    model,
                    adapter_parameters(adapter),
                    domain("adapt", capitals),
                    steps,
                    lr=ADAPT_LR,
                    description=f"LoRA rank {rank}{', capitals' if capitals else ''}",
                )
            finally:
                use_adapter(model, None)
        _adapters[key] = adapter
    return _adapters[key]


def _loss(model: nn.Module, tokens: torch.Tensor, windows: int) -> float:
    from course import evaluation

    return evaluation.text_loss(model, tokens, max_windows=windows)


def learned_change(layer: type) -> dict:
    """Section 3: a rank-4 ``layer`` over a 64 x 64 layer, trained (Adam, 400 steps) to match the
    outputs of the base plus a rank-4 change; the relative error of the change its merged weight
    holds, and whether the base weight is untouched."""
    with withheld.streams_kept():
        torch.manual_seed(0)
        base = nn.Linear(64, 64, bias=False)
        before = base.weight.detach().clone()
        goal = before + low_rank_change(64, 64, true_rank=4, noise=0.0) * 0.05
        adapter = layer(base, rank=4)
        optimizer = torch.optim.Adam([adapter.lora_A, adapter.lora_B], lr=1e-2)
        inputs = torch.randn(512, 64)
        for _ in range(400):
            loss = (adapter(inputs) - inputs @ goal.T).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        learned = adapter.merge().weight.detach()
    return {
        "error": ((learned - goal).norm() / (goal - before).norm()).item(),
        "untouched": torch.equal(base.weight.detach(), before),
    }


def comedy_adapter(layer: type, rank: int, steps: int, windows: int) -> dict:
    """Section 5: the rank-``rank`` comedy adapter (:func:`trained_adapter`): its loss on the two
    held-out comedies (``windows`` windows of 256 bytes), its trainable numbers, and whether the
    base weights are as loaded."""
    model, loaded = course_model()
    adapter = trained_adapter(layer, rank, steps)
    use_adapter(model, adapter)
    try:
        loss = _loss(model, domain("eval"), windows)
    finally:
        use_adapter(model, None)
    return {
        "loss": loss,
        "trainable": sum(p.numel() for p in adapter_parameters(adapter)),
        "untouched": weights_fingerprint(model) == loaded,
    }


def swapped_adapters(layer: type, steps: int, windows: int) -> dict:
    """Section 6: the rank-4 comedy adapter and a rank-4 capitals adapter on one base. The held-out
    comedies in capitals without and with the capitals adapter (nats per byte), 100 sampled bytes
    after "VIOLA:" from the base, then each adapter, switched in turn (the text, how many of its
    words occur in the comedies, in capitals for the capitals adapter), the switches made, and
    whether the base weights are as loaded."""
    from course import corpus
    from course.model import generate

    model, loaded = course_model()
    comedies, capitals = trained_adapter(layer, 4, steps), trained_adapter(layer, 4, steps, capitals=True, seed=1)
    shouting = domain("eval", capitals=True)
    before = _loss(model, shouting, windows)
    use_adapter(model, capitals)
    after = _loss(model, shouting, windows)
    known = set(corpus.decode(domain("adapt")).split())
    known |= {word.upper() for word in known}
    prompt = corpus.encode("VIOLA:\n")[None].to(next(model.parameters()).device)
    texts, switches = [], 1
    for name, adapter in (("base", None), ("comedies, rank 4", comedies), ("capitals", capitals)):
        use_adapter(model, adapter)
        switches += 1
        with withheld.streams_kept():
            out = generate(model, prompt, 100, temperature=0.8, top_k=40, generator=torch.Generator().manual_seed(0))
        text = corpus.decode(out[0].cpu())
        words = text.split()[1:]  # after the prompt's name
        texts.append({"adapter": name, "text": text, "real": sum(w in known for w in words), "words": len(words)})
    use_adapter(model, None)
    switches += 1
    return {
        "capitals_before": before,
        "capitals_after": after,
        "texts": texts,
        "switches": switches,
        "untouched": weights_fingerprint(model) == loaded,
    }


def merge_difference(layer: type, steps: int) -> float:
    """Section 6: the largest logit difference on four windows of the comedies between the model with
    the rank-4 comedy adapter in place and a copy with each adapter merged (``merge()``)."""
    from course import corpus

    model, _ = course_model()
    windows = corpus.domain_tokens("adapt")[: 4 * 129].reshape(4, 129)[:, :-1].to(next(model.parameters()).device)
    use_adapter(model, trained_adapter(layer, 4, steps))
    try:
        with torch.no_grad():
            adapted = model(windows)
        merged = copy.deepcopy(model)
    finally:
        use_adapter(model, None)
    for path, module in list(merged.named_modules()):
        if isinstance(module, layer):
            parent, _, leaf = path.rpartition(".")
            setattr(merged.get_submodule(parent), leaf, module.merge().to(windows.device))
    with torch.no_grad():
        return (merged(windows) - adapted).abs().max().item()


def qlora_loss(layer: type, steps: int, windows: int) -> float:
    """Section 7: a rank-4 adapter trained ``steps`` steps on the comedies over the course model with
    every linear weight through NF4 (groups of 64, simulated); its loss on the held-out comedies."""
    from course import quantization

    model, _ = course_model()
    nf4_base = quantization.quantize_model(model, "nf4", 64)
    with withheld.streams_kept():
        adapter = make_adapter(nf4_base, 4, layer=layer)
        use_adapter(nf4_base, adapter)
        finetune(nf4_base, adapter_parameters(adapter), domain("adapt"), steps, lr=ADAPT_LR, description="QLoRA rank 4")
    return _loss(nf4_base, domain("eval"), windows)


EXPERIMENTS = {  # each takes the LoRALinear class first, then plain data
    "learned_change": learned_change,
    "comedy_adapter": comedy_adapter,
    "swapped_adapters": swapped_adapters,
    "merge_difference": merge_difference,
    "qlora_loss": qlora_loss,
}
