"""Chapter 7's exercise: distillation_loss, judged against the course's loss and the mistakes it
can name (no T^2, the KL reversed, no temperature, the cross-entropy, a sum over positions)."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import Check, Exercise, judge_number, judges_value
from course import distillation


def _logits_probe(temperature, positions=(4, 7), vocab=10, scale=3.0):
    def make(rng):
        shape = (*positions, vocab)
        student = torch.from_numpy((rng.normal(size=shape) * scale).astype(np.float32))
        teacher = torch.from_numpy((rng.normal(size=shape) * scale).astype(np.float32))
        return {"call": "distillation_loss", "args": [student, teacher, temperature]}

    return make


@judges_value
def _judge_distill(probe, got):
    student, teacher, t = probe["args"]
    s = torch.log_softmax(student.double() / t, -1)
    te = torch.log_softmax(teacher.double() / t, -1)
    kl = (te.exp() * (te - s)).sum(-1)
    expected = distillation.distillation_loss(student.double(), teacher.double(), t).item()
    mistakes = [
        ("the T^2 factor is missing: multiply by temperature**2 so gradients keep their size", kl.mean().item()),
        (
            "the KL is reversed: KL(teacher || student) sums p_teacher * (log p_teacher - log p_student)",
            ((s.exp() * (s - te)).sum(-1).mean() * t * t).item(),
        ),
        (
            "the temperature was not applied to the logits",
            distillation.distillation_loss(student.double(), teacher.double(), 1.0).item() * t * t,
        ),
        (
            "returned the cross-entropy: subtract the teacher's entropy (KL = CE - H)",
            (-(te.exp() * s).sum(-1).mean() * t * t).item(),
        ),
        ("summed over positions: average them", (kl.sum() * t * t).item()),
    ]
    return judge_number(got, expected, mistakes, "the distillation loss", rel=1e-4, abs_tol=1e-6)


EXERCISES = [
    Exercise(
        "distillation_loss",
        ("distillation_loss",),
        [
            Check(
                "distillation_loss.t1",
                "distillation_loss",
                1,
                "temperature 1",
                _logits_probe(1.0),
                _judge_distill,
                visible=True,
            ),
            Check("distillation_loss.t4", "distillation_loss", 2, "temperature 4", _logits_probe(4.0), _judge_distill),
            Check(
                "distillation_loss.3d",
                "distillation_loss",
                1,
                "a batch of sequences (B, T, vocab) at temperature 2",
                _logits_probe(2.0, positions=(3, 5, 2)),
                _judge_distill,
            ),
        ],
    )
]
