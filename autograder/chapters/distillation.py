"""Chapter 7's exercise: distillation_loss, judged against the course's loss and the mistakes it
can name (no T^2, the KL reversed, no temperature, the cross-entropy, a sum over positions, and
torch.nn.functional.kl_div's reductions, which average over the wrong things on (B, T, vocab))."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import Check, Exercise, Requirement, Verdict, judge_number, judges_value, number
from course import distillation


def _logits_probe(temperature, positions=(4, 7), vocab=10, scale=3.0, dtype=np.float32):
    def make(rng):
        shape = (*positions, vocab)
        student = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        teacher = torch.from_numpy((rng.normal(size=shape) * scale).astype(dtype))
        return {"call": "distillation_loss", "args": [student, teacher, temperature]}

    return make


@judges_value
def _judge_distill(probe, got):
    student, teacher, t = probe["args"]
    s = torch.log_softmax(student.double() / t, -1)
    te = torch.log_softmax(teacher.double() / t, -1)
    kl = distillation.kl_divergence(te, s)
    expected = distillation.distillation_loss(student.double(), teacher.double(), t).item()
    value, _ = number(got, "the loss")
    if value is not None and value != value:
        return Verdict(
            False,
            "the loss is NaN: a log of a probability that is zero or negative. If you use F.kl_div, its target "
            "must be probabilities (softmax), or pass log_target=True with log-probabilities",
        )
    mistakes = [
        ("the T^2 factor is missing: multiply by temperature**2 so gradients keep their size", kl.mean().item()),
        ("divided by T^2 instead of multiplying: multiply by temperature**2", kl.mean().item() / t**2),
        (
            "the KL is reversed: KL(teacher || student) sums p_teacher * (log p_teacher - log p_student)",
            (distillation.kl_divergence(s, te).mean() * t * t).item(),
        ),
        (
            "the temperature was not applied to the logits",
            distillation.distillation_loss(student.double(), teacher.double(), 1.0).item() * t * t,
        ),
        (
            "the temperature was applied to the student's logits only: soften both",
            _kl(student.double() / t, teacher.double()) * t * t,
        ),
        (
            "the temperature was applied to the teacher's logits only: soften both",
            _kl(student.double(), teacher.double() / t) * t * t,
        ),
        (
            "returned the cross-entropy: subtract the teacher's entropy (KL = CE - H)",
            (-(te.exp() * s).sum(-1).mean() * t * t).item(),
        ),
        ("summed over positions: average them", (kl.sum() * t * t).item()),
        (
            'F.kl_div(..., reduction="batchmean") divides by the first dimension only (the batch), not by every '
            "position: reshape the logits to (-1, vocab) first, or sum over the vocabulary and take the mean",
            (kl.sum() / student.shape[0] * t * t).item(),
        ),
        (
            'F.kl_div(..., reduction="mean") averages over the vocabulary too: sum over the vocabulary, then '
            'average over positions (reduction="batchmean" on (-1, vocab) logits)',
            (kl.mean() / student.shape[-1] * t * t).item(),
        ),
    ]
    return judge_number(got, expected, mistakes, "the distillation loss", rel=1e-4, abs_tol=1e-6)


def _kl(student_logits, teacher_logits) -> float:
    """KL(teacher || student) of the given logits, mean over positions."""
    s, te = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    return distillation.kl_divergence(te, s).mean().item()


EXERCISES = [
    Exercise(
        "distillation_loss",
        ("distillation_loss",),
        [
            Check(
                "batch_t2",
                1,
                "a batch of sequences (B, T, vocab) at temperature 2",
                _logits_probe(2.0, positions=(3, 5)),
                _judge_distill,
                visible=True,
            ),
            Check("t1", 1, "temperature 1", _logits_probe(1.0), _judge_distill),
            Check("t4", 1, "temperature 4", _logits_probe(4.0), _judge_distill),
            Check(
                "4d",
                1,
                "(B, H, T, vocab) at temperature 0.5, float64 logits",
                _logits_probe(0.5, positions=(2, 3, 4), dtype=np.float64),
                _judge_distill,
            ),
        ],
        requirements=[
            Requirement(
                "T^2 * KL(teacher || student) of the temperature-softened distributions", ("batch_t2", "t1", "t4")
            ),
            Requirement("averaged over all leading positions of (..., vocab) logits", ("batch_t2", "4d")),
            Requirement("any temperature (1, above and below 1)", ("t1", "4d")),
            Requirement("a 0-d tensor or a float", ("batch_t2",)),
        ],
    )
]
