"""Chapter 2's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/lora.py`` name a mistake by it), and wrong answers written out (a
``LoRALinear`` with one of its pieces wrong: :func:`lora_class`)."""

from __future__ import annotations

import math

import torch

from autograder.mistakes import Planted

GiB = 2**30

# --- lora_parameters ------------------------------------------------------------------------------


def of_lora_parameters(d_in, d_out, rank) -> list[tuple[str, int]]:
    """The common mistakes' trainable numbers, with their hints."""
    return [
        ("counted the full matrix: the adapter is A (r x d_in) plus B (d_out x r)", d_in * d_out),
        ("used d_in for both factors: B is (d_out x r), so the count is r (d_in + d_out)", 2 * rank * d_in),
        ("used d_out for both factors: A is (r x d_in), so the count is r (d_in + d_out)", 2 * rank * d_out),
        ("multiplied by the rank twice or squared it: r (d_in + d_out)", rank * rank * (d_in + d_out)),
        ("counted A only: B (d_out x r) trains too", rank * d_in),
        ("counted B only: A (r x d_in) trains too", rank * d_out),
        ("multiplied d_in by d_out: the two factors are added, r (d_in + d_out)", rank * d_in * d_out),
    ]


# --- best_low_rank_error --------------------------------------------------------------------------


def of_best_low_rank_error(delta: torch.Tensor, rank: int) -> list[tuple[str, float]]:
    """The common mistakes' relative errors of the best rank-``rank`` approximation of ``delta``, with their hints."""
    s = torch.linalg.svdvals(delta.double())
    total = s.square().sum()
    kept = lambda r: math.sqrt((s[r:].square().sum() / total).item())  # noqa: E731
    return [
        ("the singular values were not squared: ||.||_F^2 is the sum of sigma_i^2", (s[rank:].sum() / s.sum()).item()),
        ("returned the squared relative error: take the square root", kept(rank) ** 2),
        ("returned the absolute error: divide by ||delta||", math.sqrt(s[rank:].square().sum().item())),
        (f"kept {rank - 1} singular values, one too few: keep the largest `rank`", kept(rank - 1)),
        (f"kept {rank + 1} singular values, one too many", kept(rank + 1)),
        (
            "kept the smallest singular values: svdvals returns them largest first",
            math.sqrt((s[: len(s) - rank].square().sum() / total).item()),
        ),
        (
            "used the spectral norm (the largest singular value): the Frobenius norm sums all sigma_i^2",
            (s[rank] / s[0]).item() if rank < len(s) else 0.0,
        ),
        (
            "divided by the norm of the approximation, not of delta",
            kept(rank) * math.sqrt(total.item()) / max(math.sqrt(s[:rank].square().sum().item()), 1e-300),
        ),
    ]


# --- LoRALinear -------------------------------------------------------------------------------------


def of_lora_linear(weight, bias, rank, alpha, x, a, b) -> dict:
    """In float64, for a check's layer and factors: the common mistakes of forward and of merge, as
    lists of (hint, output) (``forward``, ``merge``)."""
    base = x.double() @ weight.double().T + (0 if bias is None else bias.double())
    scale = (rank if alpha is None else alpha) / rank
    update = x.double() @ a.double().T @ b.double().T
    adapted = base + scale * update
    alpha_value = rank if alpha is None else alpha
    forward = [
        (
            "alpha defaults to the rank (scale 1): with alpha=None, use alpha = rank, not 1",
            base + update / rank if alpha is None else adapted,
        ),
        ("the update was not divided by the rank: scale it by alpha / rank", base + alpha_value * update),
        ("the update was not scaled: multiply it by alpha / rank", base + update),
        ("the scale is upside down: alpha / rank, not rank / alpha", base + rank / alpha_value * update),
        ("the base layer's output is missing: return base(x) plus the scaled update", adapted - base),
        ("the output is still the base layer's: forward must add (alpha / rank) x A^T B^T to base(x)", base),
    ]
    merge = [
        ("the merged weight was not scaled: weight + (alpha / rank) * lora_B @ lora_A", base + update),
        (
            "the merged layer lost the base's bias: copy base.bias into it",
            adapted - (0 if bias is None else bias.double()),
        ),
        ("the merged layer is the base alone: add (alpha / rank) * lora_B @ lora_A to its weight", base),
    ]
    return {"forward": forward, "merge": merge}


# --- finetune_memory_gib ----------------------------------------------------------------------------


def of_finetune_memory_gib(params, method) -> list[tuple[str, float]]:
    """The common mistakes' GiB for ``method``, with their hints."""
    gib = lambda per: params * per / GiB  # noqa: E731
    per = {"full": 16, "lora": 2, "qlora": 0.5}[method]
    mistakes = {
        "full": [
            (
                "12 bytes per parameter instead of 16: a 4-byte part is missing, the fp32 master copy or one of "
                "Adam's two fp32 moments (2 + 2 + 8 + 4)",
                gib(12),
            ),
            ("left out the gradients: full fine-tuning keeps one per weight, in bf16 (2 + 2 + 8 + 4)", gib(14)),
            ("counted the gradients in fp32: they are bf16, 2 bytes (2 + 2 + 8 + 4)", gib(18)),
            ("counted the weights alone: full fine-tuning adds gradients, Adam's moments and a master copy", gib(2)),
        ],
        "lora": [
            ("counted the frozen weights in fp32, 4 bytes: LoRA keeps them in bf16, 2 bytes", gib(4)),
            ("counted full fine-tuning's 16 bytes: LoRA's frozen weights have no gradients or moments", gib(16)),
            ("counted the weights in 4 bits, as QLoRA does: LoRA keeps them in bf16, 2 bytes", gib(0.5)),
        ],
        "qlora": [
            ("counted the NF4 weights as 1 byte: 4 bits is half a byte", gib(1)),
            ("counted 4 bytes per weight: NF4 stores 4 bits, half a byte", gib(4)),
            ("counted the frozen weights in bf16, 2 bytes, as LoRA does: QLoRA keeps them in 4 bits", gib(2)),
            ("counted full fine-tuning's 16 bytes: QLoRA's frozen weights have no gradients or moments", gib(16)),
        ],
    }[method]
    return [("divided by 1e9: the answer is in GiB, 2**30 bytes", params * per / 1e9), *mistakes]


# --- wrong answers written out -----------------------------------------------------------------------

LORA_CLASS = """
import copy


class LoRALinear(nn.Module):
    def __init__(self, base, rank, alpha=None):
        super().__init__()
        self.base = base
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        self.scale = {scale}
        self.lora_A = nn.Parameter({a_init}(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter({b_init}(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B{b_use}.T)

    def merge(self):
{merge}
"""
MERGE = """        merged = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        with torch.no_grad():
            merged.weight.copy_(self.base.weight + self.scale * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                merged.bias.copy_(self.base.bias)
        return merged"""


def lora_class(**changes) -> str:
    """The solution's LoRALinear with the pieces named in ``changes`` replaced."""
    pieces = {
        "scale": "(rank if alpha is None else alpha) / rank",
        "a_init": "torch.randn",
        "b_init": "torch.zeros",
        "b_use": "",
        "merge": MERGE,
    }
    return LORA_CLASS.format(**{**pieces, **changes})


PLANTED = {  # graded end to end
    "lora_b_not_zero": Planted(
        "lora_linear", lora_class(b_init="torch.randn"), {"lora_linear.starts_at_base"}, "initialise lora_B to zeros"
    ),
    "lora_scale_not_divided": Planted(
        "lora_linear",
        lora_class(scale="(rank if alpha is None else alpha)"),
        {"lora_linear.forward", "lora_linear.alpha"},
        "not divided by the rank",
    ),
    "lora_a_zero": Planted(  # the case: an adapter that can never train
        "lora_linear", lora_class(a_init="torch.zeros"), {"lora_linear.trains"}, "lora_A starts at zeros"
    ),
}

JUDGED = {  # judged in the tests' process
    "lora_alpha_defaults_to_one": Planted(
        "lora_linear",
        lora_class(scale="(1 if alpha is None else alpha) / rank"),
        {"lora_linear.forward"},
        "alpha defaults to the rank",
    ),
    "lora_b_detached": Planted(
        "lora_linear", lora_class(b_use=".detach()"), {"lora_linear.trains"}, "lora_B gets no gradient"
    ),
    "lora_merge_in_place": Planted(
        "lora_linear",
        lora_class(
            merge="        with torch.no_grad():\n"
            "            self.base.weight += self.scale * self.lora_B @ self.lora_A\n"
            "        return self.base"
        ),
        {"lora_linear.merge"},
        "merge() changed the base layer's weight",
    ),
    "lora_merge_loses_bias": Planted(
        "lora_linear",
        lora_class(
            merge=MERGE.replace("bias=self.base.bias is not None", "bias=False").replace(
                "if self.base.bias is not None:", "if False:"
            )
        ),
        {"lora_linear.merge"},
        "lost the base's bias",
    ),
    "lora_merge_unscaled": Planted(
        "lora_linear",
        lora_class(merge=MERGE.replace("self.scale * ", "")),
        {"lora_linear.merge"},
        "merged weight was not scaled",
    ),
    "lora_base_not_frozen": Planted(
        "lora_linear",
        lora_class().replace("parameter.requires_grad_(False)", "pass"),
        {"lora_linear.frozen", "lora_linear.trains"},
        "requires_grad_(False)",
    ),
    "lora_copies_the_base": Planted(
        "lora_linear",
        lora_class()
        .replace("self.base = base\n", "self.base = copy.deepcopy(base)\n")
        .replace("for parameter in base.parameters()", "for parameter in self.base.parameters()"),
        {"lora_linear.frozen"},
        "keep the base layer itself as self.base",
    ),
    # a forward without the base, or a layer that is only its base: named, and no point for starting at the base
    "lora_forward_without_base": Planted(
        "lora_linear",
        lora_class().replace("return self.base(x) + self.scale", "return self.scale"),
        {"lora_linear.starts_at_base"},
        "forward leaves out base(x)",
    ),
    "lora_forward_returns_input": Planted(
        "lora_linear",
        lora_class().replace("return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)", "return x"),
        {"lora_linear.starts_at_base", "lora_linear.trains"},  # trains: named, not torch's shape error
        "forward returns its input x",
    ),
    "lora_only_the_base": Planted(
        "lora_linear",
        lora_class(merge="        return copy.deepcopy(self.base)").replace(
            "return self.base(x) + self.scale * (x @ self.lora_A.T @ self.lora_B.T)", "return self.base(x)"
        ),
        {"lora_linear.starts_at_base", "lora_linear.frozen", "lora_linear.forward"},
        "still the base layer's",
    ),
    "error_spectral_norm": Planted(
        "best_low_rank_error",
        "def best_low_rank_error(delta, rank):\n    s = torch.linalg.svdvals(delta)\n"
        "    return (s[rank] / s[0]).item()\n",
        {"best_low_rank_error.below", "best_low_rank_error.at_rank"},
        "spectral norm",
    ),
    "error_as_tensor": Planted(
        "best_low_rank_error",
        "def best_low_rank_error(delta, rank):\n    s = torch.linalg.svdvals(delta.double())\n"
        "    return (s[rank:].square().sum() / s.square().sum()).sqrt()\n",
        {"best_low_rank_error.below"},
        "should be a Python float",
    ),
    "parameters_a_only": Planted(
        "lora_parameters",
        "def lora_parameters(d_in, d_out, rank):\n    return rank * d_in\n",
        {"lora_parameters.mlp", "lora_parameters.other"},
        "counted A only",
    ),
    # what new learners found passing the visible checks, or hinted at wrongly
    "parameters_d_in_twice": Planted(
        "lora_parameters",
        "def lora_parameters(d_in, d_out, rank):\n    return 2 * rank * d_in\n",
        {"lora_parameters.mlp", "lora_parameters.other"},
        "used d_in for both factors",
    ),
    "lora_forward_unscaled": Planted(
        "lora_linear",
        lora_class().replace("self.scale * (x @", "(x @"),
        {"lora_linear.merge", "lora_linear.alpha"},
        "the update was not scaled",
    ),
    "lora_init_reversed": Planted(
        "lora_linear",
        lora_class(a_init="torch.zeros", b_init="torch.randn"),
        {"lora_linear.trains"},
        "the reverse of LoRA's initialisation",
    ),
    "lora_forward_through_data": Planted(
        "lora_linear",
        lora_class().replace("self.lora_A.T @ self.lora_B.T", "self.lora_A.data.T @ self.lora_B.data.T"),
        {"lora_linear.trains"},
        "does not depend on lora_A or lora_B",
    ),
    "lora_factors_kept_as_data": Planted(
        "lora_linear",
        lora_class()
        .replace("math.sqrt(base.in_features))\n", "math.sqrt(base.in_features)).data\n")
        .replace("(base.out_features, rank))\n", "(base.out_features, rank)).data\n"),
        {"lora_linear.trains", "lora_linear.frozen"},
        "make lora_A and lora_B nn.Parameters",
    ),
    "memory_qlora_4_bytes": Planted(
        "finetune_memory",
        "def finetune_memory_gib(params, method):\n"
        "    return params * {'full': 16, 'lora': 2, 'qlora': 4}[method] / 2**30\n",
        {"finetune_memory.7b", "finetune_memory.qlora"},
        "counted 4 bytes per weight: NF4 stores 4 bits",
    ),
    "memory_qlora_base_at_16_bits": Planted(
        "finetune_memory",
        "def finetune_memory_gib(params, method):\n"
        "    return params * {'full': 16, 'lora': 2, 'qlora': 16 / 8}[method] / 2**30\n",
        {"finetune_memory.7b", "finetune_memory.qlora"},
        "counted the frozen weights in bf16, 2 bytes, as LoRA does",
    ),
    "memory_lora_fp32": Planted(
        "finetune_memory",
        "def finetune_memory_gib(params, method):\n"
        "    return params * {'full': 16, 'lora': 4, 'qlora': 0.5}[method] / 2**30\n",
        {"finetune_memory.7b", "finetune_memory.lora"},
        "LoRA keeps them in bf16",
    ),
    "memory_full_one_moment": Planted(
        "finetune_memory",
        "def finetune_memory_gib(params, method):\n"
        "    return params * {'full': 2 + 2 + 4 + 4, 'lora': 2, 'qlora': 0.5}[method] / 2**30\n",
        {"finetune_memory.7b"},
        "the fp32 master copy or one of Adam's two fp32 moments",
    ),
}
