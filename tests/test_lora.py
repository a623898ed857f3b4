"""course.lora: the paper's arithmetic, the SVD floor, and the adapter's contract."""

import pytest
import torch
from torch import nn

from course import lora


def test_trainable_parameters():
    assert lora.lora_parameters(4096, 4096, 8) == 65_536
    assert lora.lora_parameters(4096, 4096, 8) / 4096**2 == pytest.approx(0.0039, abs=1e-4)
    assert lora.lora_parameters(1000, 1000, 8) == 16_000


def test_svd_floor_drops_to_the_noise_at_the_true_rank():
    delta = lora.low_rank_change(256, 256, true_rank=4, noise=0.03, seed=0)
    errors = [lora.best_low_rank_error(delta, r) for r in range(1, 9)]
    assert all(a >= b for a, b in zip(errors, errors[1:]))
    assert errors[2] > 0.2 and errors[3] < 0.05  # below rank 4 the change cannot be captured
    assert errors[7] == pytest.approx(errors[3], abs=0.01)  # beyond it, more rank buys nothing


def test_svd_floor_matches_an_explicit_truncated_svd_and_beats_other_factorisations():
    delta = torch.randn(40, 30, generator=torch.Generator().manual_seed(1))
    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    approx = (u[:, :5] * s[:5]) @ vh[:5]
    assert lora.best_low_rank_error(delta, 5) == pytest.approx(((delta - approx).norm() / delta.norm()).item())
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        b, a = torch.randn(40, 5, generator=g), torch.randn(5, 30, generator=g)
        coefficient = ((b @ a) * delta).sum() / (b @ a).square().sum()  # best scale of this rank-5 guess
        guess = coefficient * (b @ a)
        assert ((delta - guess).norm() / delta.norm()).item() >= lora.best_low_rank_error(delta, 5)


def test_adapter_starts_equal_to_the_base_and_trains_only_its_factors():
    torch.manual_seed(0)
    base = nn.Linear(32, 24)
    adapted = lora.LoRALinear(base, rank=4, alpha=8)
    x = torch.randn(5, 32)
    assert torch.equal(adapted(x), base(x))
    assert (adapted.lora_B == 0).all() and adapted.scale == 2.0
    trainable = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert trainable == {"lora_A", "lora_B"}
    assert lora.LoRALinear(nn.Linear(8, 8), rank=2).scale == 1.0  # alpha defaults to the rank


def test_merge_gives_identical_outputs_and_leaves_the_base_alone():
    torch.manual_seed(0)
    base = nn.Linear(16, 12)
    before = base.weight.detach().clone()
    adapted = lora.LoRALinear(base, rank=3, alpha=6)
    with torch.no_grad():
        adapted.lora_B.normal_()
    x = torch.randn(7, 16)
    merged = adapted.merge()
    assert torch.allclose(merged(x), adapted(x), atol=1e-5)
    assert torch.equal(base.weight, before)


def test_rank_one_adapter_learns_a_rank_one_change():
    torch.manual_seed(0)
    base = nn.Linear(20, 20, bias=False)
    target_change = torch.outer(torch.randn(20), torch.randn(20)) * 0.3
    adapted = lora.LoRALinear(base, rank=1)
    optimizer = torch.optim.Adam([adapted.lora_A, adapted.lora_B], lr=0.03)
    x = torch.randn(256, 20)
    wanted = x @ (base.weight + target_change).detach().T
    for _ in range(600):
        loss = (adapted(x) - wanted).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert (adapted.delta_weight() - target_change).norm() / target_change.norm() < 0.05


def test_fine_tuning_memory_for_7b():
    assert lora.finetune_memory_gib(7e9, "full") == pytest.approx(104.3, abs=0.1)
    assert lora.finetune_memory_gib(7e9, "lora") == pytest.approx(13.04, abs=0.01)
    assert lora.finetune_memory_gib(7e9, "qlora") == pytest.approx(3.26, abs=0.01)


@pytest.mark.parametrize("call, message", [
    (lambda: lora.lora_parameters(10, 10, 0), "rank must be a positive"),
    (lambda: lora.lora_parameters(10.5, 10, 2), "d_in must be a positive"),
    (lambda: lora.best_low_rank_error(torch.zeros(3), 1), "2-D"),
    (lambda: lora.best_low_rank_error(torch.zeros(3, 3), 1), "all-zero"),
    (lambda: lora.LoRALinear(nn.Linear(4, 6), rank=5), "exceeds"),
    (lambda: lora.LoRALinear(nn.Conv1d(4, 4, 1), rank=1), "wraps an nn.Linear"),
    (lambda: lora.finetune_memory_gib(7e9, "adam"), "method must be one of"),
])
def test_bad_arguments_say_what_to_do(call, message):
    with pytest.raises(ValueError, match=message):
        call()
