"""Chapter 2's runs with the solution's answers (``solutions/02_lora.py``), of plain data in and out:
the course's experiments of ``course/lora.py`` with the solution's ``LoRALinear`` (a class cannot
cross the line between the copies; its runs' numbers can), its best errors by change, and what the
solution's class outputs on a check's inputs. Shipped code reaches them through
``withheld.module("course.answers.lora")`` (``lora.experiment``, ``lora.COURSE``); the learners'
copy answers them from its recordings."""

from __future__ import annotations

import torch
from torch import nn

from course import lora, withheld

SOLUTION = withheld.answers(lora.CHAPTER)


def rank_errors(d_out: int, d_in: int, true_rank: int, noise: float, seed: int, ranks: list[int]) -> list[float]:
    """The solution's best errors of ``low_rank_change(d_out, d_in, true_rank, noise, seed)`` at ``ranks``."""
    return lora.rank_errors(
        d_out, d_in, true_rank, noise, seed, ranks, best_low_rank_error=SOLUTION.best_low_rank_error
    )


def learned_change() -> dict:
    return lora.learned_change(SOLUTION.LoRALinear)


def comedy_adapter(rank: int, steps: int, windows: int) -> dict:
    return lora.comedy_adapter(SOLUTION.LoRALinear, rank, steps, windows)


def swapped_adapters(steps: int, windows: int) -> dict:
    return lora.swapped_adapters(SOLUTION.LoRALinear, steps, windows)


def merge_difference(steps: int) -> float:
    return lora.merge_difference(SOLUTION.LoRALinear, steps)


def qlora_loss(steps: int, windows: int) -> float:
    return lora.qlora_loss(SOLUTION.LoRALinear, steps, windows)


def layer_outputs(weight, bias, rank: int, alpha: float | None, x, lora_A, lora_B) -> dict:
    """The solution's ``LoRALinear`` over an ``nn.Linear`` of ``weight`` and ``bias``, with its factors
    set to ``lora_A`` and ``lora_B``: its output on ``x`` (``adapted``) and its merged layer's
    (``merged``). The global random streams are left as they were."""
    with withheld.streams_kept(), torch.no_grad():
        base = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        base.weight.copy_(weight)
        if bias is not None:
            base.bias.copy_(bias)
        layer = SOLUTION.LoRALinear(base, rank) if alpha is None else SOLUTION.LoRALinear(base, rank, alpha)
        layer.lora_A.copy_(lora_A)
        layer.lora_B.copy_(lora_B)
        return {"adapted": layer(x), "merged": layer.merge()(x)}
