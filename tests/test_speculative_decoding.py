"""Chapter 6: speculative sampling reproduces the target, tokens per call against the formula,
speculative generation against the target alone, the chapter's figure, and the grader's hints for
planted mistakes."""

import pytest
import torch

from course import checkpoints, corpus, speculative_decoding
from course.model import generate
from course.plots import speculative_decoding as plots
from course.plots._widgets import figure_png

from conftest import Planted, assert_named, judged_in_process


def test_speculative_sampling_reproduces_the_target():
    p = torch.tensor([0.05, 0.5, 0.2, 0.25, 0.0])
    q = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.3])
    g = torch.Generator().manual_seed(0)
    draws = [speculative_decoding.speculative_token(p, q, g) for _ in range(40_000)]
    freq = torch.bincount(torch.tensor([t for t, _ in draws]), minlength=5).double() / len(draws)
    assert (freq - p.double()).abs().max() < 0.01
    assert abs(sum(a for _, a in draws) / len(draws) - speculative_decoding.acceptance_rate(p, q)) < 0.01


@pytest.mark.parametrize("alpha", [0.5, 0.8, 0.95])
def test_tokens_per_call_formula_matches_simulation(alpha):
    p, q = torch.tensor([alpha, 1 - alpha, 0.0]), torch.tensor([alpha, 0.0, 1 - alpha])
    simulated = speculative_decoding.simulate_tokens_per_call(p, q, 5, 4000, seed=1)
    assert simulated == pytest.approx(speculative_decoding.expected_tokens_per_call(alpha, 5), rel=0.05)
    assert speculative_decoding.expected_tokens_per_call(1.0, 5) == 6
    assert speculative_decoding.speedup(0.8, 5, 0.05) == pytest.approx(2.95, abs=0.01)  # Leviathan et al.'s example


def test_speculative_generate_greedy_equals_the_target():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    prompt = corpus.encode("ROMEO:\n")[None]
    alone = generate(target, prompt, 60)
    for k in (1, 3, 5):
        run = speculative_decoding.speculative_generate(target, draft, prompt, k, 60, temperature=0)
        assert torch.equal(run["tokens"], alone), k
        assert run["target_calls"] < 60


def test_speculative_generate_samples_the_targets_first_token_distribution():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    prompt = corpus.encode("KING:\nI ")[None]
    with torch.no_grad():
        p = torch.softmax(target(prompt)[0, -1].double(), -1)
    counts = torch.zeros(256, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    n = 1500
    for _ in range(n):
        counts[
            speculative_decoding.speculative_generate(target, draft, prompt, 2, 1, temperature=1.0, generator=g)[
                "tokens"
            ][0, -1]
        ] += 1
    top = p.argsort(descending=True)[:5]
    spread = (p[top] * (1 - p[top]) / n).sqrt()
    assert ((counts[top] / n - p[top]).abs() <= 5 * spread + 1e-3).all()


def test_plot_returns_a_figure_that_renders():
    assert figure_png(plots.plot_speculative(alpha=0.6, k=8, cost=0.2)).startswith(b"\x89PNG")


SPECULATIVE_TOKEN = """
def speculative_token(target, draft, generator):
    x = int(torch.multinomial(draft, 1, generator=generator))
    if torch.rand(1, generator=generator).item() < min(1.0, (target[x] / draft[x]).item()):
        return x, True
    leftover = {leftover}
    return int(torch.multinomial(leftover / leftover.sum(), 1, generator=generator)), False
"""
PLANTED = {
    "resample_from_p": Planted(
        "speculative_token",
        SPECULATIVE_TOKEN.format(leftover="target"),
        {"speculative_token.distribution", "speculative_token.random"},
        "resampled from p",
    ),
    "series_off_by_one": Planted(
        "expected_tokens_per_call",  # speculative_speedup calls the learner's own formula
        "def expected_tokens_per_call(alpha, draft_length):\n    return (1 - alpha ** draft_length) / (1 - alpha)\n",
        {"expected_tokens_per_call.example", "expected_tokens_per_call.random"},
        "one term short",
        calls_it={"speculative_speedup"},
    ),
    "speedup_names_the_wrong_helper": Planted(  # the case: the speed-up is wrong because its helper is
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n    return (1 - alpha ** draft_length) / (1 - alpha)\n",
        {"speculative_speedup.paper", "speculative_speedup.random"},
        "calls your expected_tokens_per_call, which fails its own checks",
        calls_it={"speculative_speedup", "expected_tokens_per_call"},
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


RIGHT_TOKEN = SPECULATIVE_TOKEN.format(leftover="(target - draft).clamp(min=0)")

# More plausible mistakes, judged in this process (conftest.assert_caught).
MISTAKES = {
    "alpha_averaged": Planted(
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return torch.minimum(target, draft).mean().item()\n",
        {"acceptance_rate.example", "acceptance_rate.random"},
        "averaged min(p, q)",
    ),
    "alpha_as_tensor": Planted(
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return torch.minimum(target, draft).sum()\n",
        {"acceptance_rate.example"},
        "should be a Python float",
    ),
    "token_as_tensor": Planted(
        "speculative_token",
        RIGHT_TOKEN.replace("return x, True", "return torch.tensor(x), True").replace(
            "return int(torch.multinomial(leftover / leftover.sum(), 1, generator=generator)), False",
            "return torch.multinomial(leftover / leftover.sum(), 1, generator=generator)[0], False",
        ),
        {"speculative_token.contract"},
        "return it as an int",
    ),
    "draws_from_the_global_generator": Planted(
        "speculative_token",
        RIGHT_TOKEN.replace("torch.rand(1, generator=generator)", "torch.rand(1)"),
        {"speculative_token.contract"},
        "global random state",
    ),
    "draws_with_numpy": Planted(
        "speculative_token",
        RIGHT_TOKEN.replace("torch.rand(1, generator=generator).item()", "np.random.random()"),
        {"speculative_token.contract"},
        "seeded alike gave different tokens",
    ),
    "tokens_divide_by_zero_at_one": Planted(
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n"
        "    return (1 - alpha ** (draft_length + 1)) / (1 - alpha)\n",
        {"expected_tokens_per_call.alpha1"},
        "return k + 1 when alpha is 1",
    ),
    "speedup_upside_down": Planted(
        "speculative_speedup",
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    return (draft_length * cost + 1) * (1 - alpha) / (1 - alpha ** (draft_length + 1))\n",
        {"speculative_speedup.paper", "speculative_speedup.random"},
        "upside down",
    ),
}

# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "alpha_numpy": (
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return float(np.minimum(target.numpy(), draft.numpy()).sum())\n",
    ),
    "alpha_from_total_variation": (
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return 1 - 0.5 * (target - draft).abs().sum().item()\n",
    ),
    "token_with_a_residual_by_hand": (
        "speculative_token",
        """
def speculative_token(target, draft, generator):
    x = torch.multinomial(draft, 1, generator=generator).item()
    u = torch.rand(1, generator=generator).item()
    if draft[x] > 0 and u * draft[x].item() < target[x].item():
        return x, True
    residual = torch.where(target > draft, target - draft, torch.zeros_like(target))
    return torch.multinomial(residual, 1, generator=generator).item(), False
""",
    ),
    "tokens_as_a_loop": (
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n"
        "    return float(sum(alpha ** i for i in range(draft_length + 1)))\n",
    ),
    "speedup_by_its_own_formula": (
        "speculative_speedup",
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    tokens = draft_length + 1 if alpha == 1 else (1 - alpha ** (draft_length + 1)) / (1 - alpha)\n"
        "    return tokens / (1 + cost * draft_length)\n",
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)
