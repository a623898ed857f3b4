"""Chapter 7: the distillation loss against a direct formula, the distilled draft against the plain
one, the chapter's figure, and the grader's hints for planted mistakes."""

import pytest
import torch

from course import checkpoints, corpus, distillation
from course.plots import distillation as plots
from course.plots._widgets import figure_png

from conftest import Planted, assert_named


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
        {"distillation_loss.t4", "distillation_loss.3d"},
        "T^2 factor",
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])
