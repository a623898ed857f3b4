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

import math

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


# --- what chapter 7's cells print ------------------------------------------------------------------


def next_byte_reading(context: str, probabilities: torch.Tensor, top: int = 5) -> str:
    """What a model's next-byte ``probabilities`` (vocab,) after ``context`` say: the ``top`` most
    likely bytes with their shares, and whether the weight sits on one byte (over 90%) or is
    spread over several. Example: ``next_byte_reading("KING HEN", p)`` with p(R) = 0.995 reads
    "after 'KING HEN': 'R' 99.5%, ... nearly all its weight on 'R'"."""
    shares, tokens = probabilities.double().topk(top)
    named = ", ".join(
        f"{bytes([int(t)]).decode('latin-1')!r} {100 * s:.1f}%" for s, t in zip(shares, tokens, strict=True)
    )
    first = bytes([int(tokens[0])]).decode("latin-1")
    if shares[0] > 0.9:
        how = f"nearly all its weight on {first!r}"
    else:
        how = f"its weight spread: the likeliest, {first!r}, has {100 * shares[0]:.0f}%"
        how += f", the top {top} together {100 * shares.sum():.0f}%"
    return f"after {context!r}: {named}; {how}"


def acceptance_reading(name: str, overlap: float, result: dict) -> str:
    """How ``name``'s acceptance rate in the loop (``result``, one draft of
    ``course.speculative_decoding.measure_drafts``: ``alpha``, ``verified`` proposals,
    ``temperature``) compares with its ``overlap`` sum min(p, q) on held-out text. Sampling at
    temperature 1, the overlap is the expected acceptance rate, and the two differ by the loop's
    noise: the reading says whether they are within two standard errors of the proposals verified.
    A greedy loop accepts a proposal where it is the target's most likely byte: another quantity,
    which the reading says rather than compare them."""
    alpha, verified = result["alpha"], result["verified"]
    if result["temperature"] == 0:
        side = "above" if alpha > overlap else "below"
        return (
            f"{name}: acceptance {alpha:.2f} in the greedy loop, {side} its overlap {overlap:.3f}: a greedy loop keeps "
            "a proposal where it is the target's most likely byte, so its acceptance is how often the two models' "
            "likeliest bytes agree; the overlap is the acceptance of sampling at temperature 1"
        )
    noise = 2 * math.sqrt(max(overlap * (1 - overlap), 1e-12) / max(verified, 1))
    near = abs(alpha - overlap) <= noise
    return (
        f"{name}: acceptance {alpha:.2f} in the loop sampling at temperature {result['temperature']:g}, against its "
        f"overlap {overlap:.3f}: {'within' if near else 'beyond'} the noise of {verified} proposals (+-{noise:.2f})"
    )
