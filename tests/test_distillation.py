"""Chapter 7: the distillation loss against a direct formula, the distilled draft against the plain
one, the chapter's figure, and the grader's hints for planted mistakes."""

import pytest
import torch

from course import checkpoints, corpus, distillation
from course.plots import distillation as plots
from course.plots._widgets import figure_png

from conftest import Planted, assert_named, judged_in_process


def test_distillation_loss_against_a_direct_formula():
    g = torch.Generator().manual_seed(0)
    s, t = (
        torch.randn(3, 4, 7, generator=g, dtype=torch.float64),
        torch.randn(3, 4, 7, generator=g, dtype=torch.float64),
    )
    for temperature in (1.0, 2.0, 5.0):
        ps, pt = torch.softmax(s / temperature, -1), torch.softmax(t / temperature, -1)
        direct = (pt * (pt.log() - ps.log())).sum(-1).mean() * temperature**2
        assert distillation.distillation_loss(s, t, temperature).item() == pytest.approx(direct.item(), rel=1e-6)
    assert distillation.distillation_loss(t, t, 3.0).item() == pytest.approx(0.0, abs=1e-6)
    assert distillation.distillation_loss(torch.zeros(1, 2), torch.tensor([[2.0, 0.0]])).item() == pytest.approx(
        0.328, abs=1e-3
    )
    with pytest.raises(ValueError, match="same shape"):
        distillation.distillation_loss(s, t[:, :2])


def test_distilled_draft_agrees_with_the_target_more_than_the_plain_draft():
    target = checkpoints.load("target")
    text = corpus.tokens("validation")
    windows = torch.stack([text[s : s + 128] for s in torch.linspace(0, len(text) - 129, 12).long().tolist()])
    with torch.no_grad():
        p = torch.softmax(target(windows).double(), -1)
        overlap = {
            name: torch.minimum(p, torch.softmax(checkpoints.load(name)(windows).double(), -1)).sum(-1).mean().item()
            for name in ("draft", "distilled")
        }
    assert overlap["distilled"] > overlap["draft"] + 0.02, overlap
    assert checkpoints.card("distilled")["training"]["teacher"] == "target"


def test_plot_returns_a_figure_that_renders():
    figure = plots.plot_drafts_and_pruning({"draft": 0.7, "distilled": 0.75}, [0.25, 0.5], [1.5, 1.7], [1.6, 2.0], 1.45)
    assert figure_png(figure).startswith(b"\x89PNG")


PLANTED = {
    "distill_no_t_squared": Planted(
        "distillation_loss",
        "def distillation_loss(student_logits, teacher_logits, temperature):\n"
        "    s = torch.log_softmax(student_logits / temperature, -1)\n"
        "    t = torch.log_softmax(teacher_logits / temperature, -1)\n"
        "    return (t.exp() * (t - s)).sum(-1).mean()\n",
        {"distillation_loss.batch_t2", "distillation_loss.t4", "distillation_loss.4d"},
        "T^2 factor",
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


KL_DIV = """
import torch.nn.functional as F

def distillation_loss(student_logits, teacher_logits, temperature):
    vocab = student_logits.shape[-1]
    student = F.log_softmax({student} / temperature, dim=-1)
    teacher = F.{teacher_fn}({teacher} / temperature, dim=-1)
    return F.kl_div(student, teacher, reduction="{reduction}") * temperature**2
"""


def kl_div(student="student_logits", teacher="teacher_logits", teacher_fn="softmax", reduction="batchmean") -> str:
    return KL_DIV.format(student=student, teacher=teacher, teacher_fn=teacher_fn, reduction=reduction)


FLAT = {"student": "student_logits.reshape(-1, vocab)", "teacher": "teacher_logits.reshape(-1, vocab)"}
EVERY = {"distillation_loss.batch_t2", "distillation_loss.t1", "distillation_loss.t4", "distillation_loss.4d"}

# More plausible mistakes, judged in this process (conftest.assert_caught).
MISTAKES = {
    "kl_div_batchmean_on_sequences": Planted(  # the case
        "distillation_loss", kl_div(), EVERY, 'reduction="batchmean") divides by the first dimension only'
    ),
    "kl_div_mean": Planted("distillation_loss", kl_div(reduction="mean", **FLAT), EVERY, 'reduction="mean"'),
    "kl_div_log_target": Planted(
        "distillation_loss", kl_div(teacher_fn="log_softmax", **FLAT), EVERY, "log_target=True"
    ),
    "temperature_on_the_student_only": Planted(
        "distillation_loss",
        "def distillation_loss(student_logits, teacher_logits, temperature):\n"
        "    s = torch.log_softmax(student_logits / temperature, -1)\n"
        "    t = torch.log_softmax(teacher_logits, -1)\n"
        "    return (t.exp() * (t - s)).sum(-1).mean() * temperature**2\n",
        {"distillation_loss.batch_t2", "distillation_loss.t4", "distillation_loss.4d"},
        "student's logits only",
    ),
}

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "kl_div_flattened": ("distillation_loss", kl_div(**FLAT)),
    "kl_div_log_target_flattened": (
        "distillation_loss",
        kl_div(teacher_fn="log_softmax", **FLAT).replace(
            'reduction="batchmean"', 'reduction="batchmean", log_target=True'
        ),
    ),
    "numpy_float": (
        "distillation_loss",
        """
def distillation_loss(student_logits, teacher_logits, temperature):
    s = student_logits.numpy().astype(np.float64) / temperature
    t = teacher_logits.numpy().astype(np.float64) / temperature
    log_s = s - s.max(-1, keepdims=True)
    log_s -= np.log(np.exp(log_s).sum(-1, keepdims=True))
    log_t = t - t.max(-1, keepdims=True)
    log_t -= np.log(np.exp(log_t).sum(-1, keepdims=True))
    return float((np.exp(log_t) * (log_t - log_s)).sum(-1).mean() * temperature**2)
""",
    ),
    "cross_entropy_minus_entropy": (
        "distillation_loss",
        """
def distillation_loss(student_logits, teacher_logits, temperature):
    p = torch.softmax(teacher_logits.double() / temperature, -1)
    cross = -(p * torch.log_softmax(student_logits.double() / temperature, -1)).sum(-1)
    entropy = -(p * torch.log_softmax(teacher_logits.double() / temperature, -1)).sum(-1)
    return (cross - entropy).mean() * temperature**2
""",
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_drafts_and_pruning": lambda: plots.plot_drafts_and_pruning(
        {"trained draft": 0.62, "distilled draft": 0.97}, [0.0, 0.3], [1.40, 1.45], [1.40, 1.70], 1.40
    ),
}


PROSE_WARNINGS = {  # mistakes the chapter's prose or prompt warns about: its visible checks must catch each
    "no_t_squared": "def distillation_loss(student_logits, teacher_logits, temperature):\n"
    "    s = torch.log_softmax(student_logits / temperature, -1)\n"
    "    t = torch.log_softmax(teacher_logits / temperature, -1)\n"
    "    return (t.exp() * (t - s)).sum(-1).mean()\n",
}
