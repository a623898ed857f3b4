"""Chapter 2's planted mistakes: LoRALinear with one of its pieces wrong (``lora_class``)."""

from autograder.planted import Planted

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


PLANTED = {
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
