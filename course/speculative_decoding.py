"""Speculative decoding: a small draft proposes, the target verifies, the output is the target's.

The rule (Leviathan et al., 2211.17192; Chen et al., 2302.01318): draw x from the draft's q,
accept it with probability min(1, p(x) / q(x)), and on rejection draw from max(0, p - q),
normalised. Every token is then distributed exactly as the target's p. A worked example:
p = (0.6, 0.4), q = (0.9, 0.1): alpha = min(.6,.9) + min(.4,.1) = 0.7, and with k = 4 drafted
tokens each target call yields (1 - 0.7**5) / 0.3 = 2.77 tokens on average.

Four drafts plug into one loop, :func:`speculative_generate`: a small language model
(:class:`ModelDraft`), an n-gram table over bytes (:class:`NGramDraft`) and prompt lookup
(:class:`PromptLookupDraft`), which copies what followed the last few bytes earlier in the text.
The last two cost almost nothing next to a target step. Prompt lookup, and the n-gram table at
temperature 0, are deterministic: their q puts all its mass on the proposed token.

The loop and the model and n-gram drafts are withheld from the learners' copy (chapter 9's
``speculative_greedy`` is the loop's greedy form, chapter 6's ``ngram_draft`` the table's plain
form): chapters 6 and 7 run them through :func:`greedy_run`, :func:`table_proposals` and
:func:`drafts_measured`, which take the drafts by name (:data:`COURSE_DRAFTS`) and answer from the
release's recordings there.

Not handled: batches of more than one sequence in ``speculative_generate``, top-k or top-p
sampling (temperature only), tree-shaped drafts, vocabularies larger than 256 tokens in the two
lookup drafts (they work on bytes).
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np
import torch

from course import readings
from course.device import synchronize
from course.model import LanguageModel, generate
from course.withheld import withheld


@withheld
def acceptance_rate(target: torch.Tensor, draft: torch.Tensor) -> float:
    """alpha = sum_x min(p(x), q(x)): the chance that one drafted token is accepted."""
    return torch.minimum(target, draft).sum().item()


@withheld
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


@withheld
def speedup(alpha: float, draft_length: int, cost: float) -> float:
    """Wall-clock speed-up over the target alone when a draft step costs ``cost`` target steps:
    (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)). Assumes verifying k + 1 tokens costs one step."""
    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost + 1)


@withheld
def speedups(alphas: list[float], draft_lengths: list[int], costs: list[float]) -> list[list[list[float]]]:
    """:func:`speedup` at every cost, alpha and draft length, as nested lists ``[cost][alpha][k]``:
    what a curve or a map draws, in one call."""
    return [[[speedup(alpha, k, cost) for k in draft_lengths] for alpha in alphas] for cost in costs]


def best_draft_length(alpha: float, cost: float, longest: int = 32) -> int:
    """The draft length from 1 to ``longest`` with the largest :func:`speedup` (the shortest of equals)."""
    speeds = speedups([alpha], list(range(1, longest + 1)), [cost])[0][0]
    return 1 + speeds.index(max(speeds))


@withheld
def acceptance_probabilities(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for every token x: the chance that a drafted x is kept (0 where q is 0)."""
    return torch.clamp(target / draft, max=1).nan_to_num(0.0)


@withheld
def residual_distribution(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """What a rejection resamples from: max(0, p - q), normalised."""
    leftover = (target - draft).clamp(min=0)
    return leftover / leftover.sum()


@withheld
def verify(target: torch.Tensor, draft: torch.Tensor, x: int, generator: torch.Generator) -> tuple[int, bool]:
    """The rule: keep the drafted token ``x`` with probability min(1, p(x) / q(x)), otherwise draw
    its replacement from :func:`residual_distribution`; (token, whether ``x`` was kept)."""
    if torch.rand(1, generator=generator).item() * draft[x].item() < target[x].item():
        return x, True
    return int(torch.multinomial(residual_distribution(target, draft), 1, generator=generator)), False


@withheld
def speculative_token(target: torch.Tensor, draft: torch.Tensor, generator: torch.Generator) -> tuple[int, bool]:
    """One position: draw from the draft, verify against the target; (token, whether accepted)."""
    x = int(torch.multinomial(draft, 1, generator=generator))
    return verify(target, draft, x, generator)


@withheld
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


Round = tuple[int, int]  # one target call: (tokens the draft proposed, how many of them were accepted)


def as_draft(draft):
    """``draft`` as this module's drafts are (``start``, ``propose``, ``keep``, ``max_seq_len``): a
    model with the course model's interface is wrapped in :class:`ModelDraft`."""
    return draft if hasattr(draft, "propose") else ModelDraft(draft)


@withheld
@torch.no_grad()
def speculative_generate(
    target: LanguageModel,
    draft,
    prompt: torch.Tensor,
    k: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    rule=None,
) -> tuple[torch.Tensor, list[Round]]:
    """Generate with ``draft`` proposing up to ``k`` tokens per round and ``target`` verifying them in one call.

    ``draft`` is a draft of this module (:class:`ModelDraft`, :class:`NGramDraft`,
    :class:`PromptLookupDraft`) or a model with the course model's interface (``model(tokens,
    cache)``, ``new_cache``, ``config.max_seq_len``), which :class:`ModelDraft` wraps. Returns the
    tokens (1, T + new) and the rounds, one ``(proposed, accepted)`` per target call: what
    :func:`round_counts` and :func:`summarise` count. The loop keeps no clock: time it from outside
    (:class:`Timed`, as :func:`measure_drafts` does). At temperature 0 the tokens are exactly the
    target's greedy output; otherwise they are distributed exactly as the target's samples. The
    target and a model draft keep KV caches; rejected tokens are dropped from them by rolling the
    length back.

    At temperature 0 both distributions are one-hot, and the rule keeps a proposal exactly when it
    is the target's argmax, which replaces it otherwise: no draw is needed. Above it, ``rule``
    (default: the course's) is a function of chapter 6's ``speculative_token(target, draft,
    generator)``: the draft draws each proposal with a generator of its own, and ``rule`` gets one
    seeded alike, so that its own ``torch.multinomial(draft, 1, generator=generator)`` draws the
    same proposal again.
    """
    if prompt.dim() != 2 or prompt.shape[0] != 1:
        raise ValueError(f"prompt must be (1, tokens): one sequence; got {tuple(prompt.shape)}")
    if k < 1:
        raise ValueError(f"k (tokens drafted per round) must be at least 1, got {k}")
    draft = as_draft(draft)
    total = prompt.shape[1] + max_new_tokens + k + 1
    for limit in (target.config.max_seq_len, draft.max_seq_len):
        if total > limit:
            raise ValueError(f"prompt + new tokens + k ({total}) exceed a model's {limit} positions")
    generator = generator or torch.Generator().manual_seed(0)
    tokens = prompt[0].tolist()
    goal = len(tokens) + max_new_tokens
    t_cache = target.new_cache(1, total)
    draft.start(total)
    device = prompt.device
    rounds: list[Round] = []
    while len(tokens) < goal:
        n = len(tokens)
        seeds = torch.randint(2**62, (k,), generator=generator).tolist() if rule and temperature > 0 else None
        drawing = [torch.Generator().manual_seed(s) for s in seeds] if seeds else generator
        proposed, q = draft.propose(tokens, k, temperature, drawing)
        feed = tokens[t_cache.length :] + proposed
        logits = target(torch.tensor([feed], device=device), t_cache)[0, -(len(proposed) + 1) :]  # (m + 1, vocab)
        p = _distribution(logits, temperature).cpu()
        accepted = 0
        for i, x in enumerate(proposed):
            if temperature == 0:
                kept, token = bool(p[i, x] == 1), int(p[i].argmax())
            elif seeds:
                token, kept = _by_rule(rule, p[i], q[i], x, torch.Generator().manual_seed(seeds[i]))
            else:
                token, kept = verify(p[i], q[i], x, generator)
            if not kept:
                correction = token
                break
            accepted += 1
        else:
            correction = int(torch.multinomial(p[len(proposed)], 1, generator=generator))  # the bonus token
        rounds.append((len(proposed), accepted))
        tokens += proposed[:accepted] + [correction]
        t_cache.length = n + accepted  # keep what was verified; the correction is fed next round
        draft.keep(n + accepted)
    return torch.tensor([tokens[:goal]], device=device), rounds


def _by_rule(rule, p: torch.Tensor, q: torch.Tensor, x: int, generator: torch.Generator) -> tuple[int, bool]:
    """``rule(p, q, generator)`` at one drafted position, whose proposal was ``x``: (token, kept)."""
    token, kept = rule(p, q, generator)
    token, kept = int(token), bool(kept)
    if kept and token != x:
        raise ValueError(
            f"the rule kept token {token}, but the draft proposed {x} with the same generator: draw the proposal "
            "with torch.multinomial(draft, 1, generator=generator) before any other draw"
        )
    return token, kept


def round_counts(rounds: list[Round], k: int) -> dict:
    """What rounds of :func:`speculative_generate` add up to: ``target_calls``, ``draft_calls`` (tokens
    proposed), and for each drafted position how often a proposal there was ``proposed`` to the rule
    (verified: the positions up to the first rejection) and ``accepted``."""
    accepted, verified = [0] * k, [0] * k
    for m, a in rounds:
        for i in range(min(a + 1, m)):
            verified[i] += 1
            accepted[i] += i < a
    return {
        "target_calls": len(rounds),
        "draft_calls": sum(m for m, _ in rounds),
        "accepted": accepted,
        "proposed": verified,
    }


def summarise(rounds: list[Round], tokens_per_call=expected_tokens_per_call) -> dict:
    """Acceptance rate, tokens per target call, and the formula's tokens per call at that rate, over the
    rounds of runs of :func:`speculative_generate`.

    alpha is accepted / verified proposals. The formula (``tokens_per_call(alpha, k)``, chapter 6's
    ``expected_tokens_per_call``; None leaves it out) is averaged over the rounds, each with the
    number of tokens its draft proposed (a lookup draft sometimes proposes fewer than k, or none).
    """
    verified = sum(min(a + 1, m) for m, a in rounds)
    alpha = sum(a for _, a in rounds) / verified if verified else 0.0
    per_call = sum(a + 1 for _, a in rounds) / len(rounds)
    formula = sum(tokens_per_call(alpha, m) for m, _ in rounds) / len(rounds) if tokens_per_call else None
    drafted = sum(m for m, _ in rounds) / len(rounds)
    return {"alpha": alpha, "tokens_per_call": per_call, "formula": formula, "drafted_per_call": drafted}


class Timed:
    """``inner`` (a draft, a model) with the calls of its ``method`` timed from outside the loop that
    makes them, the device synchronised after each: ``seconds`` and ``calls`` add up. Everything else
    is ``inner``'s own. Not handled: time the device spends on work queued before the call."""

    def __init__(self, inner, method: str, device: torch.device):
        self.inner, self.method, self.device = inner, method, device
        self.seconds, self.calls = 0.0, 0

    def _timed(self, *args, **kwargs):
        started = time.perf_counter()
        result = getattr(self.inner, self.method)(*args, **kwargs)
        synchronize(self.device)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        return result

    def __getattr__(self, name: str):  # what Timed itself lacks
        return self._timed if name == self.method else getattr(self.inner, name)

    def __call__(self, *args, **kwargs):
        return self._timed(*args, **kwargs) if self.method == "__call__" else self.inner(*args, **kwargs)


def measure_drafts(
    target: LanguageModel,
    drafts: dict,
    prompts: list[torch.Tensor],
    k: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    repeats: int = 3,
    progress: bool = True,
    rule=None,
    tokens_per_call=expected_tokens_per_call,
) -> dict[str, dict]:
    """Speculative decoding with each of ``drafts`` (name -> draft) against the target alone, on the
    same prompts and seeds.

    Each repeat times the target alone on every prompt, then each draft on every prompt; a draft's
    speed-up is the median over repeats of the ratio of the two totals, so both sides of each ratio
    ran moments apart. For each draft: :func:`summarise`'s numbers and ``speedup`` (``speedups``:
    one per repeat, the spread a reading needs; ``costs`` likewise for c); ``step``, the
    seconds of one target step (the target alone, per token); ``cost``, c: the draft's seconds per
    proposed token over ``step``; ``verify``: a verifying call's seconds over ``step`` (the formula
    assumes 1); ``formula_speedup``: the formula at the measured alpha and c; ``positions``: the
    acceptance rate at each drafted position, ``verified``: the proposals alpha counts; ``drafted``:
    the tokens proposed in each round (what :func:`with_formula` needs). ``rule`` and ``tokens_per_call`` go to
    :func:`speculative_generate` and :func:`summarise` (None: the formula's numbers are None).
    """
    from tqdm.auto import tqdm

    device = prompts[0].device
    seen = {name: {"ratio": [], "cost": [], "verify": []} for name in drafts}
    steps, runs = [], {}
    for _ in tqdm(range(repeats), desc="speculative decoding, timed", disable=not progress, leave=False):
        started = time.perf_counter()
        for i, prompt in enumerate(prompts):
            generate(target, prompt, max_new_tokens, temperature, generator=torch.Generator().manual_seed(i))
        synchronize(device)
        alone = time.perf_counter() - started
        step = alone / (len(prompts) * max_new_tokens)
        steps.append(step)
        for name, draft in drafts.items():
            proposer, verifier = Timed(as_draft(draft), "propose", device), Timed(target, "__call__", device)
            started = time.perf_counter()
            runs[name] = [
                one
                for i, prompt in enumerate(prompts)
                for one in speculative_generate(
                    verifier, proposer, prompt, k, max_new_tokens, temperature, torch.Generator().manual_seed(i), rule
                )[1]
            ]
            synchronize(device)
            seen[name]["ratio"].append(alone / (time.perf_counter() - started))
            drafted = round_counts(runs[name], k)["draft_calls"]
            seen[name]["cost"].append(proposer.seconds / max(drafted, 1) / step)
            seen[name]["verify"].append(verifier.seconds / verifier.calls / step)
    results = {}
    for name in drafts:
        result = summarise(runs[name], tokens_per_call)
        cost = statistics.median(seen[name]["cost"])
        counts = round_counts(runs[name], k)
        accepted, verified = counts["accepted"], counts["proposed"]
        results[name] = {
            **result,
            "speedup": statistics.median(seen[name]["ratio"]),
            "speedups": seen[name]["ratio"],
            "costs": seen[name]["cost"],
            "step": statistics.median(steps),
            "cost": cost,
            "verify": statistics.median(seen[name]["verify"]),
            "formula_speedup": None
            if result["formula"] is None
            else result["formula"] / (1 + cost * result["drafted_per_call"]),
            "positions": [a / v if v else float("nan") for a, v in zip(accepted, verified, strict=True)],
            "verified": sum(verified),
            "drafted": [m for m, _ in runs[name]],
            "k": k,
            "temperature": temperature,
        }
    return results


def pair_reading(results: dict[str, dict], name: str, base_name: str, words: dict[str, str] | None = None) -> str:
    """Why draft ``name`` is faster or slower than ``base_name`` (keys of :func:`measure_drafts`'
    results), by chapter 6's formula at each draft's own alpha and c: its speed-up over the other's
    is the ratio of their tokens per call (what the acceptance buys) times the inverse ratio of a
    round's cost, 1 + c x drafted tokens (what the cost takes). The reading says which of the two
    counts for more, and whether the clock (the repeats' paired ratios) agrees. ``words``: how to
    name each draft."""
    words = words or {}
    a, b = results[name], results[base_name]
    said_a, said_b = words.get(name, name), words.get(base_name, base_name)
    tokens = a["formula"] / b["formula"]  # tokens per call at each alpha
    round_a, round_b = (1 + r["cost"] * r["drafted_per_call"] for r in (a, b))  # target steps per round
    cost = round_b / round_a
    if (tokens > 1) == (cost > 1):
        decided = f"both favour {said_a if tokens > 1 else said_b}"
    else:
        decided = f"the {'acceptance' if abs(np.log(tokens)) > abs(np.log(cost)) else 'cost'} counts for more"
    modelled = tokens * cost
    paired = [x / y for x, y in zip(a.get("speedups", [a["speedup"]]), b.get("speedups", [b["speedup"]]), strict=True)]
    if min(paired) > 1 or max(paired) < 1:
        agrees = (min(paired) > 1) == (modelled > 1)
        clock = (
            "the clock agrees"
            if agrees
            else "the clock says the other way round: what the formula leaves out (a verifying call dearer "
            "than one step, the clock's noise) decided it"
        )
    else:
        clock = "the clock cannot tell them apart"
    return (
        f"by chapter 6's formula, {said_a}'s acceptance ({a['alpha']:.2f} against {b['alpha']:.2f}) gives it "
        f"{tokens:.2f}x the tokens per call and its cost (c = {a['cost']:.2f} against {b['cost']:.2f}: a round of "
        f"1 + c k = {round_a:.2f} target steps against {round_b:.2f}) {cost:.2f}x the rounds per second, "
        f"{modelled:.2f}x in all, in which {decided}; measured {statistics.median(paired):.2f}x: {clock}"
    )


def drafts_reading(results: dict[str, dict], goal: float = 2.0) -> str:
    """What :func:`measure_drafts` shows: how each draft's tokens per call compare with the formula,
    which draft was fastest and whether it reached ``goal``, and what held the others back."""
    lines = []
    for name, r in results.items():
        if r["formula"] is not None:
            lines.append(
                f"{name}: {r['tokens_per_call']:.2f} tokens per call, "
                + readings.versus(r["tokens_per_call"], r["formula"], f"the formula's {r['formula']:.2f}")
            )
    best = max(results, key=lambda name: results[name]["speedup"])
    top = results[best]
    verdict = "reaching" if top["speedup"] >= goal else "short of"
    lines.append(f"fastest: the {best}, {top['speedup']:.2f}x the target alone, {verdict} {goal:g}x")
    for name, r in results.items():
        ratios = r.get("speedups", [r["speedup"]])
        if min(ratios) <= 1:  # not faster in every repeat: slower, or within the noise
            lines.append(readings.against_one(ratios, f"the {name}", "the target alone"))
        if r["cost"] * r["drafted_per_call"] > 0.5:
            lines.append(
                f"the {name} spends {r['cost'] * r['drafted_per_call']:.2f} target steps drafting per call "
                f"(c = {r['cost']:.2f}), which eats much of what its alpha {r['alpha']:.2f} wins"
            )
        if r["drafted_per_call"] < 0.5 * r["k"]:
            lines.append(
                f"the {name} found something to propose for only {r['drafted_per_call']:.1f} of the "
                f"{r['k']} positions per call on average"
            )
    slow = [name for name, r in results.items() if r["verify"] > 1.25]
    if slow:
        costs = readings.listing([f"{results[name]['verify']:.2f}" for name in slow])
        lines.append(
            f"a verifying call of the target costs {costs} one-token steps for the {readings.listing(slow)} "
            "(the formula assumes 1)"
        )
    return ";\n".join(lines)


# --- the drafts --------------------------------------------------------------------------------------


@withheld
class ModelDraft:
    """A small language model as the draft: it samples each proposal from its own distribution q,
    with a KV cache that is rolled back to what the target kept."""

    name = "draft model"

    def __init__(self, model: LanguageModel, name: str | None = None):
        self.model, self.cache = model, None
        self.name = name or self.name
        self.max_seq_len = model.config.max_seq_len

    def start(self, total: int) -> None:
        self.cache = self.model.new_cache(1, total)

    def propose(self, tokens: list[int], k: int, temperature: float, generator):
        """k proposals and the distribution each was drawn from (``generator``: one, or one per proposal)."""
        device = self.model.embed.weight.device
        proposed, q = [], []
        fresh = tokens[self.cache.length :]  # what the draft has not seen yet (at least the last token)
        for _ in range(k):
            logits = self.model(torch.tensor([fresh], device=device), self.cache)[0, -1]
            q.append(_distribution(logits, temperature).cpu())
            proposed.append(int(torch.multinomial(q[-1], 1, generator=_nth(generator, len(proposed)))))
            fresh = proposed[-1:]
        return proposed, q

    def keep(self, length: int) -> None:
        self.cache.length = min(self.cache.length, length)


class _ByteDraft:
    """What the two drafts without a model share: nothing to roll back, no position limit, bytes."""

    max_seq_len = float("inf")
    vocab_size = 256

    def start(self, total: int) -> None:
        pass

    def keep(self, length: int) -> None:
        pass


def _nth(generator, i: int) -> torch.Generator:
    """The generator of proposal ``i``: ``generator``, or its ``i``-th where a draft is given one per
    proposal (a list, as :func:`speculative_generate` gives its ``rule``'s drafts)."""
    return generator[i] if isinstance(generator, list) else generator


def _one_hot(token: int, vocab: int) -> torch.Tensor:
    """The q of a deterministic proposal: all the draft's mass on the proposed token."""
    q = torch.zeros(vocab, dtype=torch.float64)
    q[token] = 1.0
    return q


@withheld
class NGramDraft(_ByteDraft):
    """An n-gram table over bytes: what followed the last ``order`` bytes in a training text, backing
    off to shorter contexts when that one never occurred.

    At temperature 0 it proposes the most frequent next byte (ties go to the smallest byte), a
    deterministic draft whose q is one-hot. At temperature T > 0 it samples from the counts raised
    to the power 1/T, as the target samples from its probabilities: q is that distribution. With
    order 4 and ``tokens = encode("to be or not to be")``, the context "o be" is followed by " ".
    The table is a sorted array of (context, next byte, count), searched by bisection.
    """

    name = "n-gram table"

    def __init__(self, tokens: torch.Tensor, order: int = 6, progress: bool = False):
        if not 1 <= order <= 6:
            raise ValueError(f"order must be 1 to 6 bytes of context, got {order}")
        data = tokens.cpu().numpy().astype(np.int64)
        if data.ndim != 1 or len(data) <= order or data.min() < 0 or data.max() > 255:
            raise ValueError(
                f"need a 1-D text of more than {order} bytes (values 0-255), got shape {tuple(tokens.shape)}"
            )
        from tqdm.auto import tqdm

        self.order = order
        orders = tqdm(range(1, order + 1), desc="counting n-grams", disable=not progress, leave=False)
        self.tables = {n: self._counts(data, n) for n in orders}

    @staticmethod
    def _counts(data: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (n-byte context, next byte) pair of ``data`` with its count, sorted by context then
        next byte; a context is its bytes read as one base-256 number."""
        keys = np.zeros(len(data) - n, dtype=np.int64)
        for i in range(n):
            keys = keys * 256 + data[i : len(data) - n + i]  # (positions,)
        pairs, counts = np.unique(keys * 256 + data[n:], return_counts=True)  # 6 + 1 bytes fit in 63 bits
        return pairs // 256, (pairs % 256).astype(np.int64), counts.astype(np.float64)

    def counts(self, context: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """The bytes that followed the longest seen suffix of ``context`` and how often, or None."""
        for n in range(min(self.order, len(context)), 0, -1):
            key = 0
            for byte in context[-n:]:
                key = key * 256 + byte
            contexts, following, counts = self.tables[n]
            first, last = np.searchsorted(contexts, key, "left"), np.searchsorted(contexts, key, "right")
            if last > first:
                return following[first:last], counts[first:last]
        return None

    def propose(self, tokens: list[int], k: int, temperature: float, generator):
        """Up to k proposals (fewer when a byte never seen in training comes up) and their q
        (``generator``: one, or one per proposal)."""
        context, proposed, q = list(tokens[-self.order :]), [], []
        for _ in range(k):
            found = self.counts(context)
            if found is None:
                break
            following, counts = found
            if temperature == 0:
                proposed.append(int(following[np.argmax(counts)]))  # the first maximum: the smallest byte
                q.append(_one_hot(proposed[-1], self.vocab_size))
            else:
                weights = torch.zeros(self.vocab_size, dtype=torch.float64)
                weights[torch.from_numpy(following.astype(np.int64))] = torch.from_numpy(
                    (counts / counts.max()) ** (1 / temperature)
                )
                q.append(weights / weights.sum())
                proposed.append(int(torch.multinomial(q[-1], 1, generator=_nth(generator, len(proposed)))))
            context = context[-(self.order - 1) :] + proposed[-1:] if self.order > 1 else proposed[-1:]
        return proposed, q


@functools.cache
def training_ngram_draft(order: int = 6) -> NGramDraft:
    """The n-gram draft over the course's training plays (the target's own training text), built
    once per process: a few seconds of counting."""
    from course import corpus

    return NGramDraft(corpus.tokens("train"), order, progress=True)


@withheld
def ngram_draft(text: torch.Tensor, context: list[int], n: int, k: int) -> list[int]:
    """Up to k proposals, each the most frequent token after the last ``n`` tokens of ``context`` in
    ``text`` (ties: the smallest token); each proposal joins the context for the next one. Stops early
    when the last n tokens never occur in ``text`` with a token after them. The plain version of
    :class:`NGramDraft` at temperature 0, without its back-off to shorter contexts.

    ``ngram_draft(encode("abcabd"), encode("xab").tolist(), 2, 3)``: "ab" is followed by "c" and by
    "d" once each, so "c" (the smaller); then "bc" -> "a", then "ca" -> "b": [99, 97, 98].
    """
    if n < 1 or k < 0:
        raise ValueError(f"need n >= 1 and k >= 0, got n {n}, k {k}")
    if len(context) < n:
        raise ValueError(f"the context has {len(context)} tokens, fewer than n = {n}")
    text = torch.as_tensor(text).reshape(-1)
    windows = text.unfold(0, n + 1, 1)  # (len - n, n + 1): each context with the token after it
    context, proposed = list(context), []
    for _ in range(k):
        matches = (windows[:, :n] == torch.tensor(context[-n:])).all(dim=1)  # (len - n,)
        if not matches.any():
            break
        counts = torch.bincount(windows[matches, n])
        proposed.append(int(counts.argmax()))  # the first maximum: the smallest token
        context.append(proposed[-1])
    return proposed


class PromptLookupDraft(_ByteDraft):
    """Prompt lookup: find the last ``longest`` tokens (then fewer, down to ``shortest``) earlier in
    the text so far, and propose what followed their most recent occurrence; q is one-hot.

    No table and no model: it pays when the text repeats itself (code, quotations, a summary of a
    given document, a model that loops). With "to be or not to be" so far, the last five bytes
    "to be" occurred at the start, followed by " or ", which it proposes for k = 4. It proposes
    nothing when no match is found, and the round is then an ordinary target step. Tokens are
    bytes by default; give ``vocab_size`` for another tokenizer's ids (transformers' prompt lookup
    is ``longest=2, shortest=1``).
    """

    name = "prompt lookup"

    def __init__(self, longest: int = 8, shortest: int = 3, vocab_size: int = 256):
        if not 1 <= shortest <= longest:
            raise ValueError(f"need 1 <= shortest <= longest, got shortest {shortest}, longest {longest}")
        self.longest, self.shortest, self.vocab_size = longest, shortest, vocab_size

    def continuation(self, tokens: list[int], k: int) -> list[int]:
        """What followed the most recent earlier occurrence of the longest suffix found, up to k tokens."""
        text = bytes(tokens) if max(tokens, default=0) < 256 else tokens  # bytes: their own fast search
        for n in range(min(self.longest, len(text) - 1), self.shortest - 1, -1):
            at = _last_occurrence(text, n, len(text) - 1)  # an earlier occurrence, not the end itself
            if at >= 0:
                return list(text[at + n : at + n + k])
        return []

    def propose(self, tokens: list[int], k: int, temperature: float, generator: torch.Generator):
        proposed = self.continuation(tokens, k)
        return proposed, [_one_hot(x, self.vocab_size) for x in proposed]


def _last_occurrence(text: bytes | list[int], n: int, end: int) -> int:
    """Where the last occurrence of ``text``'s last ``n`` tokens within ``text[:end]`` starts, or -1
    (bytes' own search for bytes, a scan from the end for a list of ids)."""
    pattern = text[-n:]
    if isinstance(text, bytes):
        return text.rfind(pattern, 0, end)
    return next((start for start in range(end - n, -1, -1) if text[start : start + n] == pattern), -1)


# --- the chapters' runs, drafts named: what the learners' copy answers from its recordings --------

COURSE_DRAFTS = ("draft model", "distilled draft", "n-gram table", "prompt lookup")


def course_draft(name: str, device: torch.device):
    """The course's draft ``name`` (one of :data:`COURSE_DRAFTS`) on ``device``: the small model
    trained on the text, the one distilled from the target (chapter 7), the n-gram table over the
    training plays, or prompt lookup."""
    from course import checkpoints

    if name not in COURSE_DRAFTS:
        raise ValueError(f"no course draft {name!r}: the drafts are {readings.listing(COURSE_DRAFTS)}")
    if name == "n-gram table":
        return training_ngram_draft()
    if name == "prompt lookup":
        return PromptLookupDraft()
    return checkpoints.load("draft" if name == "draft model" else "distilled").to(device)


def _course_target(device: torch.device) -> LanguageModel:
    from course import checkpoints

    return checkpoints.load("target").to(device)


@withheld
def greedy_run(draft: str, prompt: list[int], k: int, new_tokens: int) -> tuple[list[int], list[list[int]]]:
    """:func:`speculative_generate` at temperature 0 with the course's target and its draft ``draft``
    (:data:`COURSE_DRAFTS`), on the fastest device, from the tokens ``prompt``: the tokens (the
    prompt and ``new_tokens`` more) and the rounds, each ``[proposed, accepted]``."""
    from course.device import best_device

    device = best_device()
    tokens, rounds = speculative_generate(
        _course_target(device),
        course_draft(draft, device),
        torch.tensor([prompt], device=device),
        k,
        new_tokens,
        temperature=0,
    )
    return tokens[0].tolist(), [list(r) for r in rounds]


@withheld
def table_proposals(context: list[int], k: int) -> list[int]:
    """What the n-gram table over the training plays proposes after ``context`` at temperature 0:
    up to ``k`` tokens."""
    return training_ngram_draft().propose(list(context), k, 0.0, None)[0]


def _measured_by_name(
    names, starts, prompt_length: int, k: int, new_tokens: int, temperature: float, repeats: int, rule, formula
) -> dict[str, dict]:
    """:func:`measure_drafts` with the course's target and the drafts ``names`` on the fastest
    device, from the held-out prompts of ``prompt_length`` tokens at ``starts``; the machine it ran
    on in each result's ``machine``."""
    from course import corpus
    from course.device import best_device, describe

    device = best_device()
    held_out = corpus.tokens("validation")
    prompts = [held_out[s : s + prompt_length][None].to(device) for s in starts]
    drafts = {name: course_draft(name, device) for name in names}
    tokens_per_call = expected_tokens_per_call if formula else None
    results = measure_drafts(
        _course_target(device),
        drafts,
        prompts,
        k,
        new_tokens,
        temperature,
        repeats,
        rule=rule,
        tokens_per_call=tokens_per_call,
    )
    return {name: {**r, "machine": describe(device)} for name, r in results.items()}


@withheld
def drafts_measurement(
    names: list[str],
    starts: list[int],
    prompt_length: int,
    k: int,
    new_tokens: int,
    temperature: float,
    repeats: int,
    formula: bool,
) -> dict[str, dict]:
    """:func:`measure_drafts` of the course's drafts ``names`` (:data:`COURSE_DRAFTS`) against its
    target, with the course's rule, and chapter 6's formula where ``formula``: plain data, one dict
    per draft (see :func:`drafts_measured`)."""
    return _measured_by_name(names, starts, prompt_length, k, new_tokens, temperature, repeats, None, formula)


def drafts_measured(
    names,
    starts,
    prompt_length: int,
    k: int,
    new_tokens: int,
    temperature: float,
    repeats: int = 3,
    rule=None,
    tokens_per_call=None,
    formula: bool = False,
) -> dict[str, dict]:
    """What chapters 6 and 7 measure: :func:`measure_drafts` of the course's drafts ``names``
    (:data:`COURSE_DRAFTS`) against its target, from the held-out prompts of ``prompt_length``
    tokens at ``starts``, on this machine, with ``rule`` verifying the sampled runs (chapter 6's
    ``speculative_token``; None: the course's) and ``tokens_per_call`` (chapter 6's
    ``expected_tokens_per_call``) or, with ``formula``, the course's formula giving the formula's
    numbers (:func:`with_formula`; neither: None).

    In the learners' copy, which holds neither the loop nor these drafts, and while its release
    records, the numbers are :func:`drafts_measurement`'s, with the course's rule: there, those the
    release measured on its own machine (each result's ``machine``); ``rule`` is then not used."""
    from course import withheld as held

    args = (list(names), list(starts), prompt_length, k, new_tokens, float(temperature), repeats)
    if held.LEARNERS_COPY or held.is_recording():
        try:
            results = drafts_measurement(*args, formula)
        except held.NotRecorded:
            raise ValueError(
                "this copy of the course holds the drafts' measurements at the chapter's own sizes only (the loop "
                "that makes them is withheld): run the chapter with its default parameters"
            ) from None
    else:
        results = _measured_by_name(*args, rule, formula)
    return with_formula(results, tokens_per_call) if tokens_per_call else results


def with_formula(results: dict[str, dict], tokens_per_call) -> dict[str, dict]:
    """``results`` of :func:`measure_drafts` with the formula's numbers by ``tokens_per_call(alpha,
    k)`` (chapter 6's ``expected_tokens_per_call``): ``formula``, averaged over the rounds with the
    tokens each proposed (as :func:`summarise`), and ``formula_speedup``."""
    out = {}
    for name, r in results.items():
        formula = sum(tokens_per_call(r["alpha"], m) for m in r["drafted"]) / len(r["drafted"])
        out[name] = {**r, "formula": formula, "formula_speedup": formula / (1 + r["cost"] * r["drafted_per_call"])}
    return out


def copy_note() -> str:
    """What a cell of chapter 6 or 7 says where its loop's numbers are recorded (the learners' copy),
    or "" where the loop runs."""
    from course import withheld as held

    if not held.LEARNERS_COPY:
        return ""
    return (
        "The course's loop and its model and n-gram drafts are held back in this copy of the course (chapter 9 asks "
        "you to write the loop, and this chapter the n-gram draft): these numbers are the ones they gave when the "
        "copy was made."
    )
