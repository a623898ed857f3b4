"""Knowledge distillation: train a small student to match a teacher's whole next-token distribution.

The soft-target loss (Hinton et al., 1503.02531) is the KL divergence from the teacher's
distribution to the student's, both softened by a temperature T, times T**2 so that its gradients
keep their size as T changes. A worked example: for teacher logits (2, 0) and student logits (0, 0)
at T = 1, KL = 0.881 log(0.881 / 0.5) + 0.119 log(0.119 / 0.5) = 0.328 nats.

:func:`prune_smallest` is the other way to a smaller model that chapter 7 measures: unstructured
magnitude pruning, the smallest weights of a matrix set to zero, as many as
``torch.nn.utils.prune.l1_unstructured`` prunes (``round(share * numel)``).

Not handled: sequence-level or on-policy distillation, teachers and students with different
vocabularies.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course.withheld import withheld


@withheld
def kl_divergence(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dimension, from log-probabilities: (..., vocab) -> (...). Not
    handled: zeros in p given as -inf (0 * -inf is NaN); log_softmax never gives them."""
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


@withheld
def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """T**2 * KL(softmax(teacher / T) || softmax(student / T)), averaged over positions.

    Logits are (..., vocab); every leading position counts once.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} must have the same shape"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    vocab = student_logits.shape[-1]
    student = F.log_softmax(student_logits.float().reshape(-1, vocab) / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float().reshape(-1, vocab) / temperature, dim=-1)
    return kl_divergence(teacher, student).mean() * temperature**2


def soft_target_mix(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, temperature: float, weight: float
) -> torch.Tensor:
    """``weight`` x the soft-target loss + (1 - weight) x cross-entropy on the hard labels."""
    hard = F.cross_entropy(student_logits.float().reshape(-1, student_logits.shape[-1]), labels.reshape(-1))
    if weight == 0:
        return hard
    return weight * distillation_loss(student_logits, teacher_logits, temperature) + (1 - weight) * hard


@withheld
def pruned_count(share: float, numel: int) -> int:
    """How many of ``numel`` weights a share prunes, counted as ``torch.nn.utils.prune`` counts a
    float ``amount``: ``round(share * numel)``, Python's rounding of that float, so halves go to the
    even number. Example: 0.75 of 25 weights is round(18.75) = 19; 0.5 of 9 is round(4.5) = 4."""
    return round(share * numel)


@withheld
def prune_smallest(weight: torch.Tensor, share: float) -> torch.Tensor:
    """A copy of ``weight`` with its ``round(share * weight.numel())`` smallest weights by magnitude,
    ranked over the whole matrix, set to zero (unstructured magnitude pruning, counted like
    ``torch.nn.utils.prune.l1_unstructured``, see :func:`pruned_count`); ``weight`` itself is left
    as it was. Ties at the cutoff go to the earlier position (``torch.sort`` is stable; torch's
    ``topk`` may pick another of the tied weights).

    Not handled: per-row or structured pruning, shares outside [0, 1] (ValueError), a count of
    weights: an integer share is a fraction here too (1 prunes everything), where
    ``torch.nn.utils.prune`` reads an integer ``amount`` as the number of weights to prune.
    """
    if not 0 <= share <= 1:
        raise ValueError(f"share must be between 0 and 1 (the fraction of weights to zero), got {share!r}")
    flat = weight.flatten().clone()  # (numel,)
    flat[flat.abs().sort(stable=True).indices[: pruned_count(share, flat.numel())]] = 0
    return flat.reshape(weight.shape)
