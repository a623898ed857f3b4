"""The course's speculative decoding loop and its drafts: chapter 9's ``speculative_greedy`` and
chapter 6's rule generalised (any draft, sampling at any temperature), and chapter 6's
``ngram_draft`` as a table that backs off to shorter contexts. Instructor-only: shipped code
reaches them through ``course.speculative_decoding``, which calls across the line between the
copies (``course.withheld.module``: their recorded calls, in the learners' copy).

The loop is written as gpt-fast writes it (``generate.py``: ``prefill``, ``decode_one_token``,
``speculative_decode``, ``generate``), with one change: the target's first verifying call is its
prefill too (the prompt and the first k proposals in one call), so that a run of n rounds calls the
target n times.

- :func:`decode_one_token`: one forward pass over the tokens a cache has not seen (the whole
  prompt on the first call of a run: the prefill), and the next token drawn from its last position;
- :func:`speculative_decode`: one round: the draft proposes up to k tokens, the target scores them
  all in one call, the rule keeps the proposals up to the first rejection and adds one token of the
  target's own (the replacement, or the bonus after k acceptances); both caches roll back to the
  tokens kept;
- :func:`speculative_generate`: rounds until the new tokens are there.

The rule at a drafted position is chapter 6's ``speculative_token(target, draft, generator)``: the
solution's, or a notebook's own (``rule``). At temperature 0 both distributions are one-hot and the
rule keeps a proposal exactly when it is the target's argmax: no draw is needed.

Not handled: batches of more than one sequence, top-k or top-p sampling (temperature only),
tree-shaped drafts, vocabularies larger than 256 tokens in the n-gram table (it works on bytes).
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np
import torch

from course import withheld
from course.device import synchronize
from course.model import generate
from course.speculative_decoding import (
    COURSE_DRAFTS,
    ByteDraft,
    PromptLookupDraft,
    Round,
    one_hot,
    round_counts,
    summarise,
)

SOLUTION = withheld.answers("06_speculative_decoding")


# --- the loop ----------------------------------------------------------------------------------------


def logits_to_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Probabilities from (..., vocab) logits, in float64; temperature 0 is greedy: all mass on the argmax."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(torch.float64)
    return torch.softmax(logits.double() / temperature, dim=-1)


def decode_one_token(model, cache, fresh: list[int], temperature: float, generator, device) -> tuple[int, torch.Tensor]:
    """Feed ``model`` the tokens ``fresh`` that ``cache`` has not seen (the prompt, on the first call of
    a run: the prefill) and draw the next token from its last position: (token, the distribution it
    was drawn from, on the CPU)."""
    logits = model(torch.tensor([fresh], device=device), cache)[0, -1]
    probs = logits_to_probs(logits, temperature).cpu()
    return int(torch.multinomial(probs, 1, generator=generator)), probs


@torch.no_grad()
def speculative_generate(
    target,
    draft,
    prompt: torch.Tensor,
    k: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    rule=None,
) -> tuple[torch.Tensor, list[Round]]:
    """Generate with ``draft`` proposing up to ``k`` tokens per round and ``target`` verifying them in one call.

    ``target`` has the course model's interface (``model(tokens, cache)``, ``model.new_cache(1,
    max_len)``; its ``config.max_seq_len`` is checked where it has one). ``draft`` is a draft of this
    module (:class:`ModelDraft`, :class:`NGramDraft`, ``PromptLookupDraft``) or a model with that
    interface, which :class:`ModelDraft` wraps. Returns the tokens (1, T + new) and the rounds, one
    ``(proposed, accepted)`` per target call: what ``round_counts`` and ``summarise`` count. At
    temperature 0 the tokens are exactly the target's greedy output; otherwise they are distributed
    exactly as the target's samples. ``rule`` (default: chapter 6's solution) is a function of
    ``speculative_token``'s signature: the draft draws each proposal with a generator of its own, and
    the rule gets one seeded alike, so that its own first draw, ``torch.multinomial(draft, 1,
    generator=generator)``, is the same proposal. The loop keeps no clock: time it from outside
    (:class:`Timed`, as :func:`measure_drafts` does).
    """
    if prompt.dim() != 2 or prompt.shape[0] != 1:
        raise ValueError(f"prompt must be (1, tokens): one sequence; got {tuple(prompt.shape)}")
    if k < 1:
        raise ValueError(f"k (tokens drafted per round) must be at least 1, got {k}")
    draft = as_draft(draft)
    total = prompt.shape[1] + max_new_tokens + k + 1
    for limit in (getattr(getattr(target, "config", None), "max_seq_len", float("inf")), draft.max_seq_len):
        if total > limit:
            raise ValueError(f"prompt + new tokens + k ({total}) exceed a model's {limit} positions")
    generator = generator or torch.Generator().manual_seed(0)
    tokens, goal = prompt[0].tolist(), prompt.shape[1] + max_new_tokens
    cache = target.new_cache(1, total)
    draft.start(total, prompt.device)
    rounds: list[Round] = []
    while len(tokens) < goal:
        kept, done = speculative_decode(target, cache, draft, tokens, k, temperature, generator, rule, prompt.device)
        tokens += kept
        rounds.append(done)
    return torch.tensor([tokens[:goal]], device=prompt.device), rounds


def speculative_decode(
    target, cache, draft, tokens: list[int], k: int, temperature: float, generator: torch.Generator, rule, device
) -> tuple[list[int], Round]:
    """One round after ``tokens``: the draft proposes up to ``k`` tokens, the target scores what
    ``cache`` has not seen and every proposal in one call, the rule keeps the proposals up to the
    first rejection, then one token of the target's own; the target's cache and the draft are rolled
    back to the tokens kept (the target's own token is fed next round). ``rule``: as
    :func:`speculative_generate`'s; ``device``: the target's. Returns the tokens to add and the round,
    ``(proposed, accepted)``."""
    n = len(tokens)
    seeds = torch.randint(2**62, (k,), generator=generator).tolist() if temperature > 0 else None
    drawing = [torch.Generator().manual_seed(s) for s in seeds] if seeds else generator
    proposed, q = draft.propose(tokens, k, temperature, drawing)
    feed = tokens[cache.length :] + proposed
    logits = target(torch.tensor([feed], device=device), cache)[0, -(len(proposed) + 1) :]
    p = logits_to_probs(logits, temperature).cpu()  # (proposed + 1, vocab)
    accepted, token = len(proposed), None
    for i, x in enumerate(proposed):
        if temperature == 0:
            kept, replacement = bool(p[i, x] == 1), int(p[i].argmax())
        else:
            replacement, kept = by_rule(rule or SOLUTION.speculative_token, p[i], q[i], x, seeds[i])
        if not kept:
            accepted, token = i, replacement
            break
    if token is None:
        token = int(torch.multinomial(p[accepted], 1, generator=generator))  # the bonus token
    cache.length = n + accepted  # keep what was verified; the target's token is fed next round
    draft.keep(n + accepted)
    return proposed[:accepted] + [token], (len(proposed), accepted)


def by_rule(rule, p: torch.Tensor, q: torch.Tensor, x: int, seed: int) -> tuple[int, bool]:
    """``rule(p, q, generator)`` at one drafted position whose proposal ``x`` was drawn with a generator
    seeded with ``seed``: (token, kept); a rule that keeps another token than the proposal raises."""
    token, kept = rule(p, q, torch.Generator().manual_seed(seed))
    token, kept = int(token), bool(kept)
    if kept and token != x:
        raise ValueError(
            f"the rule kept token {token}, but the draft proposed {x} with the same generator: draw the proposal "
            "with torch.multinomial(draft, 1, generator=generator) before any other draw"
        )
    return token, kept


def simulated_tokens_per_call(alphas: list[float], draft_lengths: list[int], calls: int = 5000) -> list[list[float]]:
    """Average tokens per target call from ``calls`` simulated calls of chapter 6's rule at each alpha
    and draft length, ``[alpha][k]``, with a pair of distributions sharing alpha of their mass (the
    target p = (alpha, 1 - alpha, 0), the draft q = (alpha, 0, 1 - alpha)) at every position.

    Vectorised over calls: proposals x ~ q, each accepted with probability min(1, p(x) / q(x)); a
    call yields its run of accepted proposals plus one token of its own (the replacement at the first
    rejection, or the bonus after k acceptances). Seeded by k: the same draws at every alpha. On one
    torch thread: tensors this small gain nothing from more, and lose much on a busy machine."""
    from course import timing

    with timing.threads(1):
        return [_simulated_row(alpha, draft_lengths, calls) for alpha in alphas]


def _simulated_row(alpha: float, draft_lengths: list[int], calls: int) -> list[float]:
    """:func:`simulated_tokens_per_call` at one alpha."""
    p = torch.tensor([alpha, 1 - alpha, 0.0], dtype=torch.float64)
    q = torch.tensor([alpha, 0.0, 1 - alpha], dtype=torch.float64)
    keep = torch.clamp(p / q, max=1).nan_to_num(0.0)  # min(1, p(x) / q(x)); q is 0 where nothing is drawn
    row = []
    for k in draft_lengths:
        generator = torch.Generator().manual_seed(k)
        uniform = torch.rand(2, calls * k, generator=generator, dtype=torch.float64)
        proposals = torch.searchsorted(q.cumsum(0), uniform[0], right=True).clamp(max=2)  # x ~ q
        accepted = uniform[1] < keep[proposals]
        run = accepted.reshape(calls, k).long().cumprod(dim=1).sum(dim=1)  # accepted before a rejection
        row.append((run + 1).double().mean().item())
    return row


# --- the drafts ----------------------------------------------------------------------------------------


def as_draft(draft):
    """``draft`` as this module's drafts are (``start``, ``propose``, ``keep``, ``max_seq_len``): a
    model with the course model's interface is wrapped in :class:`ModelDraft`."""
    return draft if hasattr(draft, "propose") else ModelDraft(draft)


def _nth(generator, i: int) -> torch.Generator:
    """The generator of proposal ``i``: ``generator``, or its ``i``-th where a draft is given one per
    proposal (a list, as :func:`speculative_decode` gives it above temperature 0)."""
    return generator[i] if isinstance(generator, list) else generator


class ModelDraft:
    """A small language model as the draft: it draws each proposal from its own distribution q,
    with a KV cache that is rolled back to what the target kept."""

    name = "draft model"

    def __init__(self, model, name: str | None = None):
        self.model, self.cache, self.device = model, None, None
        self.name = name or self.name
        self.max_seq_len = getattr(getattr(model, "config", None), "max_seq_len", float("inf"))

    def start(self, total: int, device=None) -> None:
        self.cache, self.device = self.model.new_cache(1, total), device

    def propose(self, tokens: list[int], k: int, temperature: float, generator):
        """k proposals and the distribution each was drawn from (``generator``: one, or one per proposal)."""
        proposed, q = [], []
        fresh = tokens[self.cache.length :]  # what the draft has not seen yet (at least the last token)
        for _ in range(k):
            token, probs = decode_one_token(
                self.model, self.cache, fresh, temperature, _nth(generator, len(proposed)), self.device
            )
            proposed.append(token)
            q.append(probs)
            fresh = proposed[-1:]
        return proposed, q

    def keep(self, length: int) -> None:
        self.cache.length = min(self.cache.length, length)


class NGramDraft(ByteDraft):
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
                q.append(one_hot(proposed[-1], self.vocab_size))
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


# --- timing the loop ------------------------------------------------------------------------------------


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
    target,
    drafts: dict,
    prompts: list[torch.Tensor],
    k: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    repeats: int = 3,
    progress: bool = True,
    rule=None,
    tokens_per_call=None,
) -> dict[str, dict]:
    """Speculative decoding with each of ``drafts`` (name -> draft) against the target alone, on the
    same prompts and seeds.

    Each repeat times the target alone on every prompt, then each draft on every prompt; a draft's
    speed-up is the median over repeats of the ratio of the two totals, so both sides of each ratio
    ran moments apart. For each draft: ``summarise``'s numbers and ``speedup`` (``speedups``:
    one per repeat, the spread a reading needs; ``costs`` likewise for c); ``step``, the
    seconds of one target step (the target alone, per token); ``cost``, c: the draft's seconds per
    proposed token over ``step``; ``verify``: a verifying call's seconds over ``step`` (the formula
    assumes 1); ``formula_speedup``: the formula at the measured alpha and c; ``positions``: the
    acceptance rate at each drafted position, ``verified``: the proposals alpha counts; ``drafted``:
    the tokens proposed in each round (what ``with_formula`` needs). ``rule`` goes to
    :func:`speculative_generate`, ``tokens_per_call`` (chapter 6's ``expected_tokens_per_call``) to
    ``summarise`` (None: the formula's numbers are None).
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


# --- the chapters' runs, drafts named: what the learners' copy answers from its recordings --------


def course_draft(name: str, device: torch.device):
    """The course's draft ``name`` (one of ``COURSE_DRAFTS``) on ``device``: the small model trained
    on the text, the one distilled from the target (chapter 7), the n-gram table over the training
    plays, or prompt lookup."""
    from course import checkpoints, readings

    if name not in COURSE_DRAFTS:
        raise ValueError(f"no course draft {name!r}: the drafts are {readings.listing(COURSE_DRAFTS)}")
    if name == "n-gram table":
        return training_ngram_draft()
    if name == "prompt lookup":
        return PromptLookupDraft()
    return checkpoints.load("draft" if name == "draft model" else "distilled").to(device)


def _course_target(device: torch.device):
    from course import checkpoints

    return checkpoints.load("target").to(device)


def greedy_run(draft: str, prompt: list[int], k: int, new_tokens: int) -> tuple[list[int], list[list[int]]]:
    """:func:`speculative_generate` at temperature 0 with the course's target and its draft ``draft``
    (``COURSE_DRAFTS``), on the fastest device, from the tokens ``prompt``: the tokens (the prompt
    and ``new_tokens`` more) and the rounds, each ``[proposed, accepted]``."""
    from course.device import best_device

    device = best_device()
    tokens, rounds = speculative_generate(
        _course_target(device), course_draft(draft, device), torch.tensor([prompt], device=device), k, new_tokens, 0
    )
    return tokens[0].tolist(), [list(r) for r in rounds]


def table_proposals(context: list[int], k: int) -> list[int]:
    """What the n-gram table over the training plays proposes after ``context`` at temperature 0:
    up to ``k`` tokens."""
    return training_ngram_draft().propose(list(context), k, 0.0, None)[0]


def drafts_measurement(
    names: list[str],
    starts: list[int],
    prompt_length: int,
    k: int,
    new_tokens: int,
    temperature: float,
    repeats: int,
    formula: bool,
    rule=None,
) -> dict[str, dict]:
    """:func:`measure_drafts` of the course's drafts ``names`` (``COURSE_DRAFTS``) against its target
    on the fastest device, from the held-out prompts of ``prompt_length`` tokens at ``starts``, with
    ``rule`` (None: chapter 6's solution) and, where ``formula``, chapter 6's formula: plain data, one
    dict per draft, the machine it ran on in each result's ``machine``."""
    from course import corpus
    from course.device import best_device, describe

    device = best_device()
    held_out = corpus.tokens("validation")
    prompts = [held_out[s : s + prompt_length][None].to(device) for s in starts]
    drafts = {name: course_draft(name, device) for name in names}
    tokens_per_call = SOLUTION.expected_tokens_per_call if formula else None
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
