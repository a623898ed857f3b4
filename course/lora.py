"""Low-rank adaptation: the reference implementations behind chapter 2.

``W' = W + (alpha / r) B A`` with the base ``W`` frozen, ``A`` (r, d_in) and ``B`` (d_out, r)
trained, ``B`` starting at zero so that the adapted layer starts equal to the base. A worked
example: a 4096 x 4096 projection with a rank-8 adapter trains 8 * (4096 + 4096) = 65,536 numbers,
0.39% of its 16.8 million.

Not handled: dropout on the adapter's input, adapters on embeddings or convolutions, several
adapters inside one module (hot-swapping keeps one ``LoRALinear`` per adapter over a shared base).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course.withheld import streams_kept, withheld, yours

GiB = 2**30


def _positive_int(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")


@withheld
def lora_parameters(d_in: int, d_out: int, rank: int) -> int:
    """Trainable numbers of a rank-``rank`` adapter on a ``d_in`` -> ``d_out`` layer."""
    _positive_int(d_in=d_in, d_out=d_out, rank=rank)
    return rank * (d_in + d_out)


@withheld
def best_low_rank_error(delta: torch.Tensor, rank: int) -> float:
    """Relative error ||delta - best rank-r approximation|| / ||delta|| (Frobenius): no adapter of
    this rank can do better on this change."""
    if not isinstance(delta, torch.Tensor) or delta.dim() != 2:
        raise ValueError(f"delta must be a 2-D torch.Tensor, got {getattr(delta, 'shape', type(delta).__name__)}")
    _positive_int(rank=rank)
    singular = torch.linalg.svdvals(delta.double())  # descending
    total = singular.square().sum()
    if total == 0:
        raise ValueError("the relative error is undefined for an all-zero change")
    return math.sqrt((singular[rank:].square().sum() / total).item())


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


@withheld
def rank_errors(d_out: int, d_in: int, true_rank: int, noise: float, seed: int, ranks: list[int]) -> list[float]:
    """:func:`best_low_rank_error` of ``low_rank_change(d_out, d_in, true_rank, noise, seed)`` at each
    of ``ranks``: plain numbers in and out, so the learners' copy records it."""
    delta = low_rank_change(d_out, d_in, true_rank, noise, seed)
    return [best_low_rank_error(delta, rank) for rank in ranks]


@withheld
class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update scaled by ``alpha / rank``.

    Wraps the base layer rather than copying it, so several adapters can share one base.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float | None = None):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise ValueError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        _positive_int(rank=rank)
        if rank > min(base.in_features, base.out_features):
            raise ValueError(
                f"rank {rank} exceeds min(in_features, out_features) = "
                f"{min(base.in_features, base.out_features)}; a smaller rank is already full"
            )
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.rank = rank
        self.alpha = float(rank if alpha is None else alpha)
        self.scale = self.alpha / rank
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, **factory))  # (r, d_in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, **factory))  # (d_out, r): starts at 0
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale  # (..., d_out)

    def delta_weight(self) -> torch.Tensor:
        """The update the adapter adds to the base weight: (alpha / r) B A, (d_out, d_in)."""
        return self.scale * (self.lora_B @ self.lora_A)

    def merge(self) -> nn.Linear:
        """A new plain layer with the update folded in; the shared base is left untouched."""
        merged = nn.Linear(
            self.base.in_features,
            self.base.out_features,
            bias=self.base.bias is not None,
            device=self.base.weight.device,
            dtype=self.base.weight.dtype,
        )
        with torch.no_grad():
            merged.weight.copy_(self.base.weight + self.delta_weight())
            if self.base.bias is not None:
                merged.bias.copy_(self.base.bias)
        return merged


@withheld
def finetune_memory_gib(params: float, method: str) -> float:
    """GiB for the weights and training state of a fine-tune (activations and overheads extra).

    ``full``: bf16 weights and gradients, fp32 Adam moments and fp32 master copy, 16 bytes a
    parameter (7B: 104 GiB). ``lora``: the frozen bf16 weights, 2 bytes (7B: 13 GiB).
    ``qlora``: the frozen weights in 4 bits, 0.5 bytes (7B: 3.3 GiB). The adapters' own state
    is left out: well under 1% of the parameters.
    """
    per_parameter = {"full": 2 + 2 + 4 + 4 + 4, "lora": 2, "qlora": 0.5}
    if method not in per_parameter:
        raise ValueError(f"method must be one of {', '.join(per_parameter)}, got {method!r}")
    if not params > 0:
        raise ValueError(f"params must be positive, got {params!r}")
    return params * per_parameter[method] / GiB


# --- adapters on a whole model ---------------------------------------------------------------------

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


def is_adapter(module: nn.Module) -> bool:
    """Whether ``module`` is an adapter layer: :class:`LoRALinear`, or a notebook's own, which keeps
    its frozen layer as ``base`` and its factors as ``lora_A`` and ``lora_B``."""
    return isinstance(getattr(module, "base", None), nn.Linear) and hasattr(module, "lora_A")


def written_layer(namespace: dict) -> type | None:
    """The notebook's ``LoRALinear`` once written: it builds, runs and merges on a small layer (the
    random streams are left as they were). None while it raises NotImplementedError; any other error is
    the learner's to see, and raises, as does a layer whose output no parameter of it can train."""
    own = namespace.get("LoRALinear")
    if not isinstance(own, type):
        return None
    try:
        with streams_kept():
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


TRIED_ON = {  # the inputs a notebook's function is tried on, to tell whether it is written yet
    "lora_parameters": (8, 8, 2),
    "best_low_rank_error": (torch.eye(4), 2),
    "finetune_memory_gib": (7e9, "full"),
}


def your_functions(namespace: dict, what: str, *names: str) -> dict:
    """The notebook's own ``names`` (chapter 2's exercises) that are written, by name, with the line
    saying whose numbers ``what`` shows (:func:`course.withheld.yours`)."""
    return yours(namespace, TRIED_ON, names, what)


SECTION_ROWS = ((1000, 8), (4096, 8), (4096, 16), (8192, 64))  # section 1's layers: (d_in = d_out, rank)
SECTION_CHANGE = {"d_out": 64, "d_in": 64, "true_rank": 4, "noise": 0.05, "seed": 0}  # section 2's change
SECTION_RANKS = [1, 2, 4, 8, 32]  # the ranks section 2 shows


def chapter_recordings() -> None:
    """Call the recorded functions as chapter 2's cells call them before the learner's functions are
    written, so that the learners' copy records them (the instructor's notebook, whose functions are
    written, does not call them)."""
    for width, rank in SECTION_ROWS:
        lora_parameters(width, width, rank)
    rank_errors(**SECTION_CHANGE, ranks=SECTION_RANKS)


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
    model: nn.Module, rank: int, alpha: float | None = None, targets=ATTENTION, seed: int = 0, layer: type = LoRALinear
) -> dict[str, LoRALinear]:
    """A new adapter for ``model``: one ``layer`` (:class:`LoRALinear`, or a notebook's own of its
    signature) per target layer, wrapping the shared base, on the base's device.

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


def use_adapter(model: nn.Module, adapter: dict[str, LoRALinear] | None) -> None:
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


def adapter_parameters(adapter: dict[str, LoRALinear]) -> list[nn.Parameter]:
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
