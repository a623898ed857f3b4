"""Chapter 7: the distillation loss against a direct formula, the distilled draft against the plain
one, the chapter's figure, and the grader's hints for planted mistakes."""

import pytest
import torch
from torch.nn.utils import prune as torch_prune

from autograder.chapters import exercise_by_id
from autograder.mistakes import judged, planted
from autograder.mistakes.distillation import FLAT, FLATTENED, IN_PLACE, PRUNE, PRUNED_VALUES, kl_div
from course import checkpoints, corpus, distillation, withheld
from course.plots import distillation as plots
from course.plots._widgets import figure_png

from conftest import assert_named, judged_in_process, verdicts

ANSWERS = withheld.answers("07_distillation")  # the solution cells


def test_distillation_loss_against_a_direct_formula():
    g = torch.Generator().manual_seed(0)
    s, t = (
        torch.randn(3, 4, 7, generator=g, dtype=torch.float64),
        torch.randn(3, 4, 7, generator=g, dtype=torch.float64),
    )
    for temperature in (1.0, 2.0, 5.0):
        ps, pt = torch.softmax(s / temperature, -1), torch.softmax(t / temperature, -1)
        direct = (pt * (pt.log() - ps.log())).sum(-1).mean() * temperature**2
        assert ANSWERS.distillation_loss(s, t, temperature).item() == pytest.approx(direct.item(), rel=1e-6)
    assert ANSWERS.distillation_loss(t, t, 3.0).item() == pytest.approx(0.0, abs=1e-6)
    assert ANSWERS.distillation_loss(torch.zeros(1, 2), torch.tensor([[2.0, 0.0]]), 1.0).item() == pytest.approx(
        0.328, abs=1e-3
    )


def test_the_soft_target_mix_is_the_loss_given_and_the_cross_entropy_weighed():
    """soft_target_mix, which trains the distilled draft, uses the distillation loss it is given."""
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(2, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    labels = torch.randint(0, 5, (2, 3), generator=g)
    hard = torch.nn.functional.cross_entropy(s.reshape(-1, 5), labels.reshape(-1))
    soft = ANSWERS.distillation_loss(s, t, 2.0)
    mixed = distillation.soft_target_mix(s, t, labels, 2.0, 0.25, distillation_loss=ANSWERS.distillation_loss)
    assert mixed.item() == pytest.approx((0.25 * soft + 0.75 * hard).item(), rel=1e-6)
    zero = distillation.soft_target_mix(s, t, labels, 2.0, 0.0, distillation_loss=ANSWERS.distillation_loss)
    assert zero.item() == pytest.approx(hard.item())


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


def test_next_byte_reading_says_whether_the_weight_sits_on_one_byte_or_spreads():
    certain = torch.zeros(256, dtype=torch.float64)
    certain[ord("R")], certain[ord("L")] = 0.995, 0.005
    reading = distillation.next_byte_reading("KING HEN", certain)
    assert reading.startswith("after 'KING HEN': 'R' 99.5%, 'L' 0.5%") and "nearly all its weight on 'R'" in reading
    spread = torch.zeros(256, dtype=torch.float64)
    for byte, share in zip(b"atIwi", (0.21, 0.17, 0.08, 0.07, 0.06), strict=True):
        spread[byte] = share
    spread[ord("z")] = 1 - spread.sum()
    reading = distillation.next_byte_reading("my lord, ", spread)
    assert "its weight spread: the likeliest, 'z', has 41%" in reading and "nearly" not in reading


def test_acceptance_reading_compares_a_sampled_loop_with_the_overlap_and_says_what_a_greedy_one_counts():
    """The issue's numbers: overlap 0.854, greedy acceptance 0.89, which the text had called the same thing."""
    greedy = distillation.acceptance_reading(
        "the distilled draft", 0.854, {"alpha": 0.89, "verified": 400, "temperature": 0}
    )
    assert "acceptance 0.89 in the greedy loop, above its overlap 0.854" in greedy and "likeliest bytes agree" in greedy
    near = {"alpha": 0.86, "verified": 400, "temperature": 1.0}
    assert "within the noise of 400 proposals (+-0.04)" in distillation.acceptance_reading("x", 0.854, near)
    far = {"alpha": 0.75, "verified": 400, "temperature": 1.0}
    assert "beyond the noise of 400 proposals" in distillation.acceptance_reading("x", 0.854, far)


def test_plot_returns_a_figure_that_renders():
    figure = plots.plot_drafts_and_pruning({"draft": 0.7, "distilled": 0.75}, [0.25, 0.5], [1.5, 1.7], [1.6, 2.0], 1.45)
    assert figure_png(figure).startswith(b"\x89PNG")


def test_prune_smallest_zeroes_exactly_the_smallest_magnitudes_of_a_copy():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(16, 24, generator=g)
    for share in (0.0, 0.1, 0.5, 0.93, 1.0):
        pruned = ANSWERS.prune_smallest(weight, share)
        count = round(share * weight.numel())
        assert int((pruned == 0).sum()) == count
        kept = pruned != 0
        assert torch.equal(pruned[kept], weight[kept])  # what stays is unchanged
        if 0 < count < weight.numel():  # every pruned magnitude is at most every kept one
            assert weight.abs()[~kept].max() <= weight.abs()[kept].min()
    assert ANSWERS.prune_smallest(weight, 0.5) is not weight and int((weight == 0).sum()) == 0
    columns = weight.T  # not contiguous
    assert torch.equal(ANSWERS.prune_smallest(columns, 0.5), ANSWERS.prune_smallest(weight, 0.5).T)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ANSWERS.prune_smallest(weight, 1.5)


def test_the_prompts_count_rounds_as_torch_does_halves_to_even():
    """The prompt's count, round(share * numel), is torch.nn.utils.prune's: 0.75 of 25 is 19 (int()
    would give 18), halves go to the even number."""
    assert round(0.75 * 25) == 19
    assert [round(0.5 * n) for n in (5, 7, 9, 11)] == [2, 4, 4, 6]  # 2.5, 3.5, 4.5, 5.5
    for share in (0.0, 0.1, 0.25, 0.3, 0.45, 0.75, 0.93, 1.0):
        for numel in (1, 7, 10, 25, 96, 384):
            assert round(share * numel) == torch_prune._compute_nparams_toprune(share, numel)
            weight = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) + 10  # no zeros
            assert int((ANSWERS.prune_smallest(weight, share) == 0).sum()) == round(share * numel)


# (shape, share): counts that round up (18.75, 3.5), down (38.4), to even (4.5, 2.5) and exact ones
AGAINST_TORCH = [
    ((5, 5), 0.75),
    ((1, 7), 0.5),
    ((3, 3), 0.5),
    ((5,), 0.5),
    ((8, 12), 0.4),
    ((16, 24), 0.93),
    ((2, 3, 4), 0.3),
    ((6, 10), 0.0),
    ((6, 10), 1.0),
]


def l1_unstructured_mask(weight: torch.Tensor, share: float) -> torch.Tensor:
    """torch.nn.utils.prune.l1_unstructured's mask of ``weight`` at ``share`` (1 kept, 0 pruned)."""
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(weight.clone())
    torch_prune.l1_unstructured(holder, "weight", amount=share)
    return holder.weight_mask


@pytest.mark.parametrize("shape, share", AGAINST_TORCH)
def test_prune_smallest_prunes_what_torch_l1_unstructured_prunes(shape, share):
    g = torch.Generator().manual_seed(len(shape) * 100 + int(100 * share))
    weight = torch.randn(shape, generator=g)
    assert weight.abs().unique().numel() == weight.numel()  # no ties in magnitude: the masks must agree
    pruned = ANSWERS.prune_smallest(weight, share)
    mask = l1_unstructured_mask(weight, share)
    assert torch.equal(pruned != 0, mask.bool()), (shape, share)
    assert torch.equal(pruned, weight * mask)
    tied = torch.randint(1, 4, shape, generator=g).float() * (torch.rand(shape, generator=g) < 0.5).mul(2).sub(1)
    zeros = int((ANSWERS.prune_smallest(tied, share) == 0).sum())  # ties may pick other weights: count them
    assert zeros == int((l1_unstructured_mask(tied, share) == 0).sum()), (shape, share)


PLANTED = planted("distillation")  # autograder/mistakes/distillation.py


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("distillation")  # more plausible mistakes, judged in this process (conftest.assert_caught)

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
    "prune_with_a_mask_of_the_cutoff": (
        "prune_smallest",
        """
def prune_smallest(weight, share):
    if share < 0 or share > 1:
        raise ValueError(f"share {share} is not in [0, 1]")
    count = round(share * weight.numel())
    if count == 0:
        return weight.clone()
    cutoff = weight.abs().flatten().kthvalue(count).values
    return torch.where(weight.abs() <= cutoff, torch.zeros_like(weight), weight)
""",
    ),
    "prune_with_numpy": (
        "prune_smallest",
        """
def prune_smallest(weight, share):
    if not 0 <= share <= 1:
        raise ValueError("share must be in [0, 1]")
    w = weight.numpy().copy()
    flat = w.reshape(-1)
    flat[np.argsort(np.abs(flat), kind="stable")[: round(share * flat.size)]] = 0
    return torch.from_numpy(w)
""",
    ),
    "prune_with_torch_l1_unstructured": (
        "prune_smallest",
        """
from torch.nn.utils import prune


def prune_smallest(weight, share):
    return prune.L1Unstructured(amount=share).prune(weight)
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


def test_visible_checks_catch_a_loss_averaged_over_two_dimensions_only():
    """The (B, H, T, vocab) check is visible: the mistake right on three dimensions is seen before grading."""
    source = MISTAKES["averaged_over_the_first_two_dimensions"].source
    visible = {c.id for c in exercise_by_id("distillation_loss").checks if c.visible}
    failed = {i for i, v in verdicts("distillation_loss", source).items() if not v.passed}
    assert failed & visible == {"distillation_loss.4d"}


def test_an_off_by_one_count_and_a_rounding_are_told_apart_or_not_named():
    """Where truncating 18.75 and zeroing one weight too few give the same matrix, the call at a whole
    share tells them apart; without it the hint says what it saw, naming neither."""
    from autograder.chapters import distillation as checks
    from autograder.mistakes import distillation as known

    weight = torch.randn(5, 5, generator=torch.Generator().manual_seed(3))
    mistakes = known.of_prune_smallest(weight, 0.75)
    hints = {kind: hint for kind, hint, _ in checks.told_apart(mistakes, weight, 0.75, None, None)}
    assert hints["truncated"] == hints["one_less"] and "truncat" not in hints["one_less"]
    assert "zeroed 18 weights, one too few: the count is round(share * numel) = round(18.75) = 19" in hints["truncated"]
    kinds = [kind for kind, _, _ in checks.told_apart(mistakes, weight, 0.75, 0.76, 19)]
    assert "truncated" in kinds and "one_less" not in kinds  # a whole share counted right: the rounding
    kinds = [kind for kind, _, _ in checks.told_apart(mistakes, weight, 0.75, 0.76, 18)]
    assert "one_less" in kinds and "truncated" not in kinds  # one short there too: the off-by-one


def test_a_copy_pruned_in_place_or_flattened_fails_only_the_checks_of_its_mistake():
    """Each check's probe works on its own copy: a prune_smallest that zeroes the caller's weight
    fails the copy check alone (not share 0, through a later call's zeros), and a flattened result
    is told its shape, not blamed on share 0."""
    in_place = verdicts("prune_smallest", IN_PLACE)
    assert {i for i, v in in_place.items() if not v.passed} == {"prune_smallest.copy"}, in_place
    flattened = {i: v for i, v in verdicts("prune_smallest", FLATTENED).items() if not v.passed}
    assert set(flattened) == PRUNED_VALUES | {"prune_smallest.edges"}, flattened
    assert all("wrong shape" in v.hint and "share 0" not in v.hint for v in flattened.values()), flattened


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
    "prune_row_by_row": "def prune_smallest(weight, share):\n"
    "    if not 0 <= share <= 1:\n        raise ValueError('share')\n"
    "    rows = weight.abs().argsort(dim=1)[:, : int(share * weight.shape[1])]\n"
    "    return weight.clone().scatter_(1, rows, 0.0)\n",
    "prune_truncated": PLANTED["prune_truncates"].source,  # the prompt: round, not int
}

# the course's answers to the exercises its checks drive with a scenario
SCENARIO_ANSWERS = {"prune_smallest": ANSWERS.prune_smallest}


@pytest.mark.parametrize(
    "body",
    ["return weight", "return torch.zeros_like(weight)", "return weight.clone()"],
)
def test_an_answer_that_prunes_nothing_earns_no_point_for_leaving_the_input_as_it_was(body):
    """The copy check once passed the input returned unchanged, or zeros: it now judges the pruned
    values first, as does the check that a share outside [0, 1] raises."""
    source = PRUNE.format(body=body).replace("    return pruned\n", "")
    found = verdicts("prune_smallest", source)
    assert not any(v.passed for v in found.values()), found
    assert not found["prune_smallest.copy"].passed and "the pruned matrix" in found["prune_smallest.copy"].hint
