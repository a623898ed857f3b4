"""Speculative decoding: a small draft proposes, the target verifies, the output is the target's.

The rule (Leviathan et al., 2211.17192; Chen et al., 2302.01318): draw x from the draft's q,
accept it with probability min(1, p(x) / q(x)), and on rejection draw from max(0, p - q),
normalised. Every token is then distributed exactly as the target's p. A worked example:
p = (0.6, 0.4), q = (0.9, 0.1): alpha = min(.6,.9) + min(.4,.1) = 0.7, and with k = 4 drafted
tokens each target call yields (1 - 0.7**5) / 0.3 = 2.77 tokens on average.

Not handled: batches of more than one sequence in ``speculative_generate``, top-k or top-p
sampling (temperature only), tree-shaped drafts.
"""

from __future__ import annotations

import torch

from course.model import LanguageModel


def acceptance_rate(target: torch.Tensor, draft: torch.Tensor) -> float:
    """alpha = sum_x min(p(x), q(x)): the chance that one drafted token is accepted."""
    return torch.minimum(target, draft).sum().item()


def expected_tokens_per_call(alpha: float, draft_length: int) -> float:
    """Mean tokens per target call with ``draft_length`` drafted tokens: (1 - alpha^(k+1)) / (1 - alpha).

    Accepted drafts run until the first rejection; the call always adds one token of its own (the
    correction, or a bonus token when all k were accepted). At alpha = 1 that is k + 1.
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha is a probability, got {alpha!r}")
    if alpha == 1:
        return float(draft_length + 1)
    return (1 - alpha ** (draft_length + 1)) / (1 - alpha)


def speedup(alpha: float, draft_length: int, cost: float) -> float:
    """Wall-clock speed-up over the target alone when a draft step costs ``cost`` target steps:
    (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)). Assumes verifying k + 1 tokens costs one step."""
    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost + 1)


def best_draft_length(alpha: float, cost: float, longest: int = 32) -> int:
    return max(range(1, longest + 1), key=lambda k: speedup(alpha, k, cost))


def acceptance_probabilities(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for every token x: the chance that a drafted x is kept (0 where q is 0)."""
    return torch.clamp(target / draft, max=1).nan_to_num(0.0)


def residual_distribution(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """What a rejection resamples from: max(0, p - q), normalised."""
    leftover = (target - draft).clamp(min=0)
    return leftover / leftover.sum()


def verify(target: torch.Tensor, draft: torch.Tensor, x: int, generator: torch.Generator) -> tuple[int, bool]:
    """The rule: keep the drafted token ``x`` with probability min(1, p(x) / q(x)), otherwise draw
    its replacement from :func:`residual_distribution`; (token, whether ``x`` was kept)."""
    if torch.rand(1, generator=generator).item() * draft[x].item() < target[x].item():
        return x, True
    return int(torch.multinomial(residual_distribution(target, draft), 1, generator=generator)), False


def speculative_token(target: torch.Tensor, draft: torch.Tensor, generator: torch.Generator) -> tuple[int, bool]:
    """One position: draw from the draft, verify against the target; (token, whether accepted)."""
    x = int(torch.multinomial(draft, 1, generator=generator))
    return verify(target, draft, x, generator)


def simulate_tokens_per_call(
    target: torch.Tensor, draft: torch.Tensor, draft_length: int, calls: int, seed: int = 0
) -> float:
    """Average tokens per target call when every position has the same p and q.

    The rule of :func:`verify`, vectorised over calls: proposals x ~ q, each accepted with
    probability min(1, p(x) / q(x)); a call yields its run of accepted proposals plus one token of
    its own (the replacement at the first rejection, or the bonus after k acceptances).
    """
    generator = torch.Generator().manual_seed(seed)
    q = draft.double()
    proposals = torch.multinomial(q, calls * draft_length, replacement=True, generator=generator)
    keep = acceptance_probabilities(target.double(), q)
    accepted = torch.rand(calls * draft_length, generator=generator, dtype=torch.float64) < keep[proposals]
    run = accepted.reshape(calls, draft_length).long().cumprod(dim=1).sum(dim=1)  # accepted before a rejection
    return (run + 1).double().mean().item()


def _distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities from (..., vocab) logits; temperature 0 is greedy: all mass on the argmax."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(torch.float64)
    return torch.softmax(logits.double() / temperature, dim=-1)


@torch.no_grad()
def speculative_generate(
    target: LanguageModel,
    draft: LanguageModel,
    prompt: torch.Tensor,
    k: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict:
    """Generate with ``draft`` proposing ``k`` tokens per round and ``target`` verifying them in one call.

    Returns ``{"tokens": (1, T + new), "target_calls", "draft_calls", "accepted": per-position
    acceptance counts, "proposed": per-position proposal counts}``. At temperature 0 the tokens are
    exactly the target's greedy output; otherwise they are distributed exactly as the target's samples.
    Both models keep KV caches; rejected tokens are dropped from them by rolling the length back.
    """
    if prompt.dim() != 2 or prompt.shape[0] != 1:
        raise ValueError(f"prompt must be (1, tokens): one sequence; got {tuple(prompt.shape)}")
    if k < 1:
        raise ValueError(f"k (tokens drafted per round) must be at least 1, got {k}")
    total = prompt.shape[1] + max_new_tokens + k + 1
    for model in (target, draft):
        if total > model.config.max_seq_len:
            raise ValueError(f"prompt + new tokens + k ({total}) exceed a model's {model.config.max_seq_len} positions")
    generator = generator or torch.Generator().manual_seed(0)
    tokens = prompt[0].tolist()
    goal = len(tokens) + max_new_tokens
    t_cache, d_cache = target.new_cache(1, total), draft.new_cache(1, total)
    device = prompt.device
    stats = {"target_calls": 0, "draft_calls": 0, "accepted": [0] * k, "proposed": [0] * k}
    while len(tokens) < goal:
        n = len(tokens)
        proposed, q = [], []
        fresh = tokens[d_cache.length :]  # what the draft has not seen yet (at least the last token)
        for _ in range(k):
            logits = draft(torch.tensor([fresh], device=device), d_cache)[0, -1]
            stats["draft_calls"] += 1
            q.append(_distribution(logits, temperature).cpu())
            proposed.append(int(torch.multinomial(q[-1], 1, generator=generator)))
            fresh = proposed[-1:]
        feed = tokens[t_cache.length :] + proposed
        logits = target(torch.tensor([feed], device=device), t_cache)[0, -(k + 1) :]  # (k + 1, vocab)
        stats["target_calls"] += 1
        p = _distribution(logits, temperature).cpu()
        accepted = 0
        for i, x in enumerate(proposed):
            stats["proposed"][i] += 1
            token, kept = verify(p[i], q[i], x, generator)
            if not kept:
                correction = token
                break
            accepted += 1
            stats["accepted"][i] += 1
        else:
            correction = int(torch.multinomial(p[k], 1, generator=generator))  # the bonus token
        tokens += proposed[:accepted] + [correction]
        t_cache.length = n + accepted  # keep what was verified; the correction is fed next round
        d_cache.length = min(d_cache.length, n + accepted)
    return {"tokens": torch.tensor([tokens[:goal]], device=device), **stats}
