"""Knowledge distillation: train a small student to match a teacher's whole next-token distribution.

The soft-target loss (Hinton et al., 1503.02531) is the KL divergence from the teacher's
distribution to the student's, both softened by a temperature T, times T**2 so that its gradients
keep their size as T changes. A worked example: for teacher logits (2, 0) and student logits (0, 0)
at T = 1, KL = 0.881 log(0.881 / 0.5) + 0.119 log(0.119 / 0.5) = 0.328 nats.

The chapter's exercises (``distillation_loss``, and ``prune_smallest``: unstructured magnitude
pruning, the other way to a smaller model that chapter 7 measures) are the learner's: what here
needs one takes it as a parameter, and the course's answer is the chapter's solution cell
(:func:`course_answer`, through ``course.withheld``).

Not handled: sequence-level or on-policy distillation, teachers and students with different
vocabularies.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course import withheld

CHAPTER = "07_distillation"


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(withheld.answers(CHAPTER), name)


def soft_target_mix(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float,
    weight: float,
    *,
    distillation_loss,
) -> torch.Tensor:
    """``weight`` x the soft-target loss (``distillation_loss``, the chapter's exercise) + (1 - weight)
    x cross-entropy on the hard labels, in float32."""
    student_logits = student_logits.float()
    hard = F.cross_entropy(student_logits.reshape(-1, student_logits.shape[-1]), labels.reshape(-1))
    if weight == 0:
        return hard
    soft = distillation_loss(student_logits, teacher_logits.float(), temperature)
    return weight * soft + (1 - weight) * hard


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
