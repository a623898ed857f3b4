"""Chapter 6's exercises: acceptance_rate, expected_tokens_per_call, speculative_token,
speculative_speedup and ngram_draft. speculative_token is judged by sampling: thousands of calls
with one seeded generator, their token frequencies against the target's probabilities."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    fmt,
    judge_number,
    judges_value,
    number,
    outcome,
)
from course import speculative_decoding
from course.withheld import withheld

# --- distributions that disagree ----------------------------------------------------------------


def _pair(rng, vocab=6):
    p = rng.dirichlet(np.ones(vocab))
    q = rng.dirichlet(np.ones(vocab) * 0.7)
    return torch.tensor(p, dtype=torch.float32), torch.tensor(q, dtype=torch.float32)


FIXED_P = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
FIXED_Q = torch.tensor([0.1, 0.1, 0.2, 0.2, 0.3, 0.1])


ALPHA_MISTAKES = [
    "took the maximum: alpha sums min(p, q)",
    "summed p * q: alpha sums min(p, q)",
    "summed min(1, p / q): that is the acceptance probability of each token, not weighted by q",
    "returned 1 - sum min(p, q): that is the rejection rate",
    "averaged min(p, q) over the tokens: sum it",
    "returned 1 - sum |p - q|: the total variation distance is half of sum |p - q|, so "
    "alpha = 1 - sum |p - q| / 2, which equals sum min(p, q)",
]


@withheld
def _alpha_values(p, q) -> tuple[float, list[float]]:
    """The acceptance rate of ``p`` and ``q``, and what each of :data:`ALPHA_MISTAKES` gives, in order."""
    wrong = [
        torch.maximum(p, q).sum().item(),
        (p * q).sum().item(),
        speculative_decoding.acceptance_probabilities(p, q).sum().item(),
        1 - torch.minimum(p, q).sum().item(),
        torch.minimum(p, q).mean().item(),
        1 - (p - q).abs().sum().item(),
    ]
    return torch.minimum(p, q).sum().item(), wrong


@judges_value
def _judge_alpha(probe, got):
    p, q = (a.double() for a in probe["args"])
    expected, wrong = _alpha_values(p, q)
    mistakes = list(zip(ALPHA_MISTAKES, wrong, strict=True))
    return judge_number(  # abs_tol: float32 sums of a few numbers near 1 round at about 1e-7
        got, expected, mistakes, "the acceptance rate", rel=1e-5, abs_tol=1e-6, python_float=probe["python_float"]
    )


def _alpha_probe(fixed=False):
    def make(rng):
        args = [FIXED_P, FIXED_Q] if fixed else list(_pair(rng, 50))
        return {"call": "acceptance_rate", "args": args, "python_float": fixed}

    return make


ACCEPTANCE = Exercise(
    "acceptance_rate",
    ("acceptance_rate",),
    [
        Check("example", 1, "the chapter's p and q (0.5)", _alpha_probe(True), _judge_alpha, visible=True),
        Check("random", 1, "a random pair over 50 tokens", _alpha_probe(), _judge_alpha),
    ],
    requirements=[
        Requirement("alpha = sum over tokens of min(p, q)", ("example", "random")),
        Requirement("returned as a Python float", ("example",)),
    ],
)


# --- expected_tokens_per_call -------------------------------------------------------------------------


TOKENS_MISTAKES = [
    "one term short: (1 - alpha^(k+1)) / (1 - alpha) counts the target's own token too",
    "one term too many: the sum runs over alpha^0 .. alpha^k",
    "counted the accepted drafts only (k alpha): acceptance stops at the first rejection",
]


@withheld
def _tokens_values(alpha, k) -> tuple[float, list[float]]:
    """The expected tokens per call at ``alpha`` and ``k``, and what each of :data:`TOKENS_MISTAKES` gives."""
    series = lambda n: sum(alpha**i for i in range(n))  # noqa: E731
    return speculative_decoding.expected_tokens_per_call(alpha, k), [series(k), series(k + 2), k * alpha]


@judges_value
def _judge_tokens(probe, got):
    alpha, k = probe["args"]
    expected, wrong = _tokens_values(alpha, k)
    mistakes = list(zip(TOKENS_MISTAKES, wrong, strict=True))
    return judge_number(got, expected, mistakes, "the expected tokens per call", rel=1e-6)


def _judge_tokens_at_one(probe, result):
    if result.get("raised") in ("ZeroDivisionError", "FloatingPointError"):
        return Verdict(
            False,
            f"raised {result['raised']} at alpha = 1: the formula divides by 1 - alpha = 0. Every proposal is "
            "accepted then, so return k + 1 when alpha is 1",
        )
    value, failed = outcome(result)
    if failed:
        return failed
    if isinstance(value, float) and value != value:
        return Verdict(False, "returned NaN at alpha = 1 (0 / 0): every proposal is accepted then, return k + 1")
    return _judge_tokens(probe, result)


def _tokens_probe(alpha=None, k=None):
    def make(rng):
        return {
            "call": "expected_tokens_per_call",
            "args": [
                float(rng.uniform(0.3, 0.95)) if alpha is None else alpha,
                int(rng.integers(1, 12)) if k is None else k,
            ],
        }

    return make


TOKENS = Exercise(
    "expected_tokens_per_call",
    ("expected_tokens_per_call",),
    [
        Check("example", 1, "alpha 0.8, k 4 (3.36)", _tokens_probe(0.8, 4), _judge_tokens, visible=True),
        Check("random", 1, "other alpha and k", _tokens_probe(), _judge_tokens),
        Check(
            "alpha1", 1, "alpha = 1 (no division by zero)", _tokens_probe(1.0, 5), _judge_tokens_at_one, visible=True
        ),
    ],
    requirements=[
        Requirement("(1 - alpha^(k+1)) / (1 - alpha)", ("example", "random")),
        Requirement("alpha = 1 allowed: k + 1 (edge case)", ("alpha1",)),
    ],
)


# --- speculative_token -------------------------------------------------------------------------------


SAMPLING_MISTAKES = [
    "always accepted the draft's token: accept with probability min(1, p(x) / q(x))",
    "on rejection it resampled from p: resample from max(0, p - q), normalised",
    "on rejection it resampled from q: resample from max(0, p - q), normalised",
    "accepted with probability q(x) / p(x): it is min(1, p(x) / q(x))",
    "on rejection it resampled from max(0, q - p), the draft's excess, which gives back the draft's q: resample "
    "from max(0, p - q), what the target lacks, normalised",
]


@withheld
def _sampling_values(p, q) -> tuple[float, list[torch.Tensor], list[float]]:
    """The acceptance rate of ``p`` and ``q``, the token distribution each of :data:`SAMPLING_MISTAKES`
    gives, in order, and the share of its calls that each returns accepted True (which tells apart
    two mistakes that both give the draft's q: always accepting, and the leftover reversed)."""
    ratio = speculative_decoding.acceptance_probabilities(p, q)
    reversed_ratio = speculative_decoding.acceptance_probabilities(q, p)
    alpha = torch.minimum(p, q).sum().item()
    wrong = [
        q,
        _outcome_distribution(p, q, ratio, p),
        _outcome_distribution(p, q, ratio, q),
        _outcome_distribution(p, q, reversed_ratio, speculative_decoding.residual_distribution(p, q)),
        _outcome_distribution(p, q, ratio, speculative_decoding.residual_distribution(q, p)),
    ]
    rates = [1.0, alpha, alpha, (q * reversed_ratio).sum().item(), alpha]
    return alpha, wrong, rates


def _outcome_distribution(p, q, accept, resample):
    """Token distribution when x ~ q is accepted with probability accept(x) and otherwise replaced by resample."""
    kept = q * accept
    return kept + (1 - kept.sum()) * resample


def sampled_tokens(function, target, draft, seed: int, n: int) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): call
    ``function(target, draft, generator)`` ``n`` times with one seeded generator; the tokens and
    acceptance flags it returned."""
    import torch

    generator = torch.Generator().manual_seed(int(seed))
    tokens, accepted = [], []
    for _ in range(n):
        token, ok = function(target, draft, generator)
        tokens.append(int(token))
        accepted.append(bool(ok))
    return {"tokens": torch.tensor(tokens), "accepted": torch.tensor(accepted)}


def draw_contract(function, target, draft, seed: int, n: int) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): what one call returns (the
    type names of its parts), whether it touched torch's global random state, whether two runs of
    ``n`` calls with generators seeded alike give the same tokens, and, over ``n`` calls each with
    a generator of its own seed, the first where a kept token is not the proposal that
    ``torch.multinomial(draft, 1, generator=generator)`` draws first from a generator seeded alike
    (chapter 6's loop draws the proposal so, and gives the rule a generator seeded alike)."""
    import torch

    state = torch.random.get_rng_state()
    first = function(target, draft, torch.Generator().manual_seed(int(seed)))
    touched = not torch.equal(state, torch.random.get_rng_state())
    runs = []
    for _ in range(2):
        generator = torch.Generator().manual_seed(int(seed))
        runs.append([int(function(target, draft, generator)[0]) for _ in range(n)])
    parts = [type(part).__name__ for part in first] if isinstance(first, tuple) else None
    order = None
    for i in range(n):
        proposal = int(torch.multinomial(draft, 1, generator=torch.Generator().manual_seed(int(seed) + i)))
        token, kept = function(target, draft, torch.Generator().manual_seed(int(seed) + i))
        if bool(kept) and int(token) != proposal:
            order = [int(token), proposal]
            break
    return {
        "parts": parts,
        "returned": type(first).__name__,
        "global_state": touched,
        "same": runs[0] == runs[1],
        "order": order,
    }


@judges_value
def _judge_contract(probe, got):
    if not isinstance(got, dict):
        return Verdict(False, f"speculative_token could not be tested: {got!r}"[:200])
    parts = got.get("parts")
    if not parts or len(parts) != 2:
        return Verdict(False, f"return a tuple (token, accepted); got a {got.get('returned')}")
    if parts[0] != "int":
        return Verdict(False, f"the token is a {parts[0]}: return it as an int (int(x) or x.item())")
    if parts[1] != "bool":
        return Verdict(False, f"accepted is a {parts[1]}: return a bool, True when the draft's token was kept")
    if got.get("global_state"):
        return Verdict(
            False,
            "a draw used torch's global random state: pass generator=generator to every torch.multinomial "
            "and torch.rand, so that results can be reproduced",
        )
    if not got.get("same"):
        return Verdict(
            False,
            "two runs with generators seeded alike gave different tokens: draw every random number from "
            "`generator` (not numpy's or Python's random)",
        )
    if got.get("order"):
        kept, proposal = got["order"]
        return Verdict(
            False,
            f"kept token {kept}, but the first draw of a generator seeded alike, torch.multinomial(draft, 1, "
            f"generator=generator), proposes {proposal}: draw the proposal first, then torch.rand(1, "
            "generator=generator) to accept it (chapter 6's loop draws the proposal that way and relies on the order)",
        )
    return Verdict(True)


def _contract_probe(rng):
    return {"call": "speculative_token", "scenario": draw_contract, "args": [FIXED_P, FIXED_Q, 12345, 200]}


def _sampling_probe(n, fixed=True):
    def make(rng):
        p, q = (FIXED_P, FIXED_Q) if fixed else _pair(rng)
        return {"call": "speculative_token", "scenario": sampled_tokens, "args": [p, q, int(rng.integers(1 << 30)), n]}

    return make


@judges_value
def _judge_sampling(probe, got):
    p, q, _, n = probe["args"]
    p, q = p.double(), q.double()
    if not isinstance(got, dict) or not isinstance(got.get("tokens"), torch.Tensor):
        return Verdict(False, f"speculative_token must return (token, accepted): {got!r}"[:200])
    tokens, accepted = got["tokens"], got["accepted"]
    if tokens.min() < 0 or tokens.max() >= len(p):
        return Verdict(False, f"returned token {int(tokens.max())}, outside the vocabulary of {len(p)}")
    freq = torch.bincount(tokens, minlength=len(p)).double() / n
    alpha, wrong, rates = _sampling_values(p, q)

    def fits(dist):
        spread = (dist * (1 - dist) / n).sqrt()
        return bool(((freq - dist).abs() <= 5 * spread + 2e-3).all())

    def rate_fits(expected):
        return abs(rate - expected) <= 5 * math.sqrt(expected * (1 - expected) / n) + 2e-3

    rate = accepted.double().mean().item()
    if fits(p):
        if not rate_fits(alpha):
            return Verdict(
                False,
                f"the tokens follow p, but the accepted flag is True {rate:.3f} of the time; "
                f"it should be True when the draft's token was kept (alpha = {alpha:.3f})",
            )
        return Verdict(True)
    worst = int((freq - p).abs().argmax())
    seen = f"token {worst}: frequency {freq[worst]:.3f}, target probability {p[worst]:.3f}"
    for hint, dist, expected_rate in zip(SAMPLING_MISTAKES, wrong, rates, strict=True):
        if not torch.allclose(dist, p, atol=1e-3) and fits(dist) and rate_fits(expected_rate):
            return Verdict(False, f"{hint} ({seen}; accepted {rate:.3f} of the time)")
    if fits(q):
        return Verdict(
            False,
            f"the tokens follow the draft's q, not the target's p ({seen}; accepted {rate:.3f} of the time, "
            f"alpha = {alpha:.3f})",
        )
    return Verdict(
        False,
        f"the tokens are not distributed as the target's p: token {worst} came "
        f"{freq[worst]:.3f} of the time, p = {p[worst]:.3f}",
    )


SPECULATIVE_TOKEN = Exercise(
    "speculative_token",
    ("speculative_token",),
    [
        Check(
            "distribution", 2, "5,000 draws follow the target's p", _sampling_probe(5000), _judge_sampling, visible=True
        ),
        Check(
            "contract",
            1,
            "returns (int, bool); every draw from `generator`, the proposal first (reproducible)",
            _contract_probe,
            _judge_contract,
            visible=True,
        ),
        Check(
            "random",
            2,
            "20,000 draws, another pair of distributions",
            _sampling_probe(20000, fixed=False),
            _judge_sampling,
        ),
    ],
    requirements=[
        Requirement("accept the draft's token with probability min(1, p(x) / q(x))", ("distribution", "random")),
        Requirement(
            "on rejection, draw from max(0, p - q) normalised: the tokens follow p", ("distribution", "random")
        ),
        Requirement("accepted is True exactly when the draft's token was kept", ("distribution",)),
        Requirement("returns (token, accepted): an int and a bool", ("contract",)),
        Requirement("every random draw uses `generator` (reproducible)", ("contract",)),
        Requirement(
            "the proposal is the first draw, torch.multinomial(draft, 1, generator=generator), before torch.rand",
            ("contract",),
        ),
    ],
)


# --- speculative_speedup ---------------------------------------------------------------------------


SPEEDUP_MISTAKES = [
    "the draft's cost was left out: divide by (k c + 1)",
    "the target's own call was left out of the cost: divide by (k c + 1), not k c",
    "the draft's cost was counted once, not per drafted token: (k c + 1)",
    "divided the cost by the tokens, upside down: tokens per call / (k c + 1)",
]


@withheld
def _speedup_values(alpha, k, c) -> tuple[float, list[float]]:
    """The speed-up at ``alpha``, ``k`` and ``c``, and what each of :data:`SPEEDUP_MISTAKES` gives, in order."""
    tokens = speculative_decoding.expected_tokens_per_call(alpha, k)
    wrong = [tokens, tokens / (k * c), tokens / (c + 1), (k * c + 1) / tokens]
    return speculative_decoding.speedup(alpha, k, c), wrong


def speedup_and_its_helper(function, alpha, draft_length, cost) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function(alpha,
    draft_length, cost)`` as ``speedup`` and, where it calls the notebook's own
    ``expected_tokens_per_call``, what that gives on the same alpha and draft length as ``tokens``
    (``{"returned": value}`` or ``{"raised": name}``; None where it is not called)."""
    code = getattr(function, "__code__", None)
    helper = getattr(function, "__globals__", {}).get("expected_tokens_per_call")
    tokens = None
    if code is not None and "expected_tokens_per_call" in code.co_names and callable(helper):
        try:
            tokens = {"returned": helper(alpha, draft_length)}
        except Exception as error:
            tokens = {"raised": type(error).__name__}
    try:
        return {"speedup": function(alpha, draft_length, cost), "tokens": tokens}
    except Exception as error:
        if tokens and tokens.get("raised") == type(error).__name__:  # the helper's error, not its own
            return {"speedup": None, "tokens": tokens}
        raise


HELPER = "speculative_speedup calls your expected_tokens_per_call"


@judges_value
def _judge_speedup(probe, got):
    """The speed-up, and where it is wrong and the notebook's expected_tokens_per_call (which it
    calls) is wrong on the same alpha and k, that one named instead: fixing it comes first."""
    alpha, k, c = probe["args"]
    if not isinstance(got, dict) or "speedup" not in got:
        return Verdict(False, f"speculative_speedup could not be tested: {got!r}"[:200])
    tokens = got.get("tokens") or {}
    if tokens.get("raised") == "NotImplementedError":
        return Verdict(False, f"{HELPER}, which is not written yet: write it first")
    if "raised" in tokens:
        return Verdict(False, f"{HELPER}, which raised {tokens['raised']} at alpha = {alpha:g}, k = {k}: fix it first")
    expected, wrong = _speedup_values(alpha, k, c)
    right = _tokens_values(alpha, k)[0] if "returned" in tokens else None  # the copy records it on the solution
    verdict = judge_number(
        got["speedup"], expected, list(zip(SPEEDUP_MISTAKES, wrong, strict=True)), "the speed-up", rel=1e-6
    )
    if verdict.passed or right is None:
        return verdict
    helper, _ = number(tokens["returned"], "the tokens per call")
    if helper is not None and math.isclose(helper, right, rel_tol=1e-6):
        return verdict  # its own helper is right here: the speed-up's own mistake
    shown = "no number" if helper is None else fmt(helper)
    return Verdict(
        False,
        f"{HELPER}, which fails its own checks: at alpha = {alpha:g}, k = {k} it gives {shown}, expected "
        f"{fmt(right)}; fix expected_tokens_per_call first ({verdict.hint})",
    )


def _speedup_probe(fixed=None):
    def make(rng):
        args = fixed or [float(rng.uniform(0.4, 0.95)), int(rng.integers(1, 10)), float(rng.uniform(0.01, 0.3))]
        return {"call": "speculative_speedup", "scenario": speedup_and_its_helper, "args": args}

    return make


SPEEDUP = Exercise(
    "speculative_speedup",
    ("speculative_speedup",),
    [
        Check(
            "paper", 1, "alpha 0.8, k 5, c 0.05 (2.95x)", _speedup_probe([0.8, 5, 0.05]), _judge_speedup, visible=True
        ),
        Check("random", 1, "other values", _speedup_probe(), _judge_speedup),
    ],
    requirements=[
        Requirement("(1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))", ("paper", "random")),
    ],
    # no builds_on: its judge runs the notebook's expected_tokens_per_call on the check's own alpha and k,
    # and names it only where it is wrong there (a helper failing at alpha = 1 alone is not this check's cause)
)

# --- ngram_draft ---------------------------------------------------------------------------------------


def _following(text, last):
    width = len(last)
    return [text[i + width] for i in range(len(text) - width) if text[i : i + width] == last]


@withheld
def _ngram_variant(text, context, n, k, grow=True, width=None, pick="most", tie="smallest", back_off=False):
    """ngram_draft as written, or with one of the usual mistakes: the context not grown by the
    proposals, ``width`` tokens of context instead of n, the first or last continuation instead of
    the most frequent, ties to the ``tie`` token ("largest", or "first" found in the text), backing
    off to shorter contexts instead of stopping."""
    text, context = [int(t) for t in text], [int(t) for t in context]
    width = width or n
    proposed = []
    for _ in range(k):
        last = (context + proposed if grow else context)[-width:]
        following = _following(text, last)
        while back_off and not following and len(last) > 1:
            last = last[1:]
            following = _following(text, last)
        if not following:
            break
        if pick == "first":
            token = following[0]
        elif pick == "last":
            token = following[-1]
        else:
            counts = {t: following.count(t) for t in following}  # in the order first found
            order = {"smallest": lambda t: -t, "largest": lambda t: t, "first": lambda t: 0}[tie]
            token = max(counts, key=lambda t: (counts[t], order(t)))  # max keeps the first of equals
        proposed.append(token)
    return proposed


TIES = {"largest": "the largest token", "first": "the one found first in the text"}


def _tie_hint(ties: dict[str, list[int]], tokens) -> str:
    """The hint for a wrong tie-break, naming each rule whose proposals (``ties``) are ``tokens`` (or "")."""
    rules = [TIES[rule] for rule in TIES if ties[rule] == tokens]
    if not rules:
        return ""
    took = rules[0] if len(rules) == 1 else f"{rules[0]} (here also {rules[1]})"
    return f"on a tie it took {took}: ties go to the smallest token"


NGRAM_MISTAKES = [
    ("each proposal must join the context: look up the last n tokens of context + proposals so far", {"grow": False}),
    ("looked up n - 1 tokens of context: use exactly the last n", {"width": -1}),
    ("looked up n + 1 tokens of context: use exactly the last n", {"width": +1}),
    ("took the first continuation found in the text: count them all and take the most frequent", {"pick": "first"}),
    ("took the last continuation found in the text: count them all and take the most frequent", {"pick": "last"}),
]


@withheld
def _ngram_values(text, context, n, k) -> dict:
    """What ``ngram_draft`` proposes for these inputs (``expected``), and what the mistakes do:
    each wrong tie-break of :data:`TIES` (``ties``), backing off (``back_off``), and each of
    :data:`NGRAM_MISTAKES` in order (``mistakes``; None where its context would be empty)."""
    mistakes = []
    for _, change in NGRAM_MISTAKES:
        if "width" in change:
            change = {"width": n + change["width"]}
            if change["width"] < 1:
                mistakes.append(None)
                continue
        mistakes.append(_ngram_variant(text, context, n, k, **change))
    return {
        "expected": speculative_decoding.ngram_draft(text, context, n, k),
        "ties": {rule: _ngram_variant(text, context, n, k, tie=rule) for rule in TIES},
        "back_off": _ngram_variant(text, context, n, k, back_off=True),
        "mistakes": mistakes,
    }


def _as_token_list(value):
    if isinstance(value, torch.Tensor) and value.dim() <= 1 and not value.is_floating_point():
        return [int(t) for t in value.reshape(-1).tolist()], ""
    if isinstance(value, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value), ""
    return None, f"returned {str(value)[:80]}; ngram_draft should return a list of int tokens"


@judges_value
def _judge_ngram(probe, got):
    text, context, n, k = probe["args"]
    tokens, problem = _as_token_list(got)
    if problem:
        return Verdict(False, problem)
    values = _ngram_values(text, context, n, k)
    expected = values["expected"]
    if tokens == expected:
        return Verdict(True)
    difference = f"expected {expected}, got {tokens}"
    tie = _tie_hint(values["ties"], tokens)  # first: it differs from the right answer only where counts tie
    if tie:
        return Verdict(False, f"{tie} ({difference})")
    if values["back_off"] == tokens:
        return Verdict(
            False,
            f"backed off to a shorter context when the last {n} tokens never occur in the text (as the chapter's "
            f"NGramDraft table does): this exercise stops there and returns the proposals so far ({difference})",
        )
    if len(tokens) > len(expected) and tokens[: len(expected)] == expected:
        return Verdict(
            False,
            f"kept proposing after a context that never occurs in the text: stop there and return what you have "
            f"({difference})",
        )
    for (hint, _), wrong in zip(NGRAM_MISTAKES, values["mistakes"], strict=True):
        if wrong is not None and wrong == tokens:
            return Verdict(False, f"{hint} ({difference})")
    return Verdict(False, difference)


def _ngram_case(rng, alphabet=4, length=300):
    text = torch.tensor(rng.integers(0, alphabet, length), dtype=torch.long)
    n = int(rng.integers(1, 4))
    start = int(rng.integers(0, length - n - 3))
    context = [int(t) for t in rng.integers(0, alphabet, 3)] + text[start : start + n].tolist()
    return text, context, n


def _ngram_probe(kind):
    def make(rng):
        if kind == "example":
            text = torch.tensor(list(b"the cat sat on the mat; the cat ran; the hat"), dtype=torch.long)
            return {"call": "ngram_draft", "args": [text, list(b"a cat"), 2, 5]}
        if kind == "stop":  # "8 9" occurs only at the end of the text; "9" alone is followed by 5 earlier
            text = torch.tensor([*rng.integers(0, 4, 100).tolist(), 9, 5, *rng.integers(0, 4, 100).tolist(), 7, 8, 9])
            return {"call": "ngram_draft", "args": [text, [1, 7, 8], 2, 6]}
        for _ in range(200):  # a random case where the context not grown shows, and is named; for "tie",
            # one where each wrong tie-break shows, differently, and so does the context not grown
            text, context, n = _ngram_case(rng, alphabet=3 if kind == "tie" else 4, length=60 if kind == "tie" else 300)
            probe = {"call": "ngram_draft", "args": [text, context, n, 6]}
            not_grown = _ngram_variant(text, context, n, 6, grow=False)
            named = NGRAM_MISTAKES[0][0] in _judge_ngram.__wrapped__(probe, not_grown).hint
            if kind == "tie":
                outputs = [_ngram_variant(text, context, n, 6, tie=rule) for rule in ("smallest", *TIES)]
                named = named and len({tuple(o) for o in outputs}) == len(outputs)
            if named:
                break
        return probe

    return make


NGRAM = Exercise(
    "ngram_draft",
    ("ngram_draft",),
    [
        Check(
            "example",
            1,
            'the chapter\'s example ("a cat", n = 2, k = 5)',
            _ngram_probe("example"),
            _judge_ngram,
            visible=True,
        ),
        Check("random", 1, "a random text over 4 tokens", _ngram_probe("random"), _judge_ngram),
        Check("tie", 1, "continuations that tie", _ngram_probe("tie"), _judge_ngram),
        Check(
            "stop",
            1,
            "a context never followed by anything (a shorter one is: no back-off)",
            _ngram_probe("stop"),
            _judge_ngram,
            visible=True,
        ),
    ],
    requirements=[
        Requirement(
            "each proposal: the token that most often follows the context's last n tokens in text",
            ("example", "random"),
        ),
        Requirement("on a tie, the smallest token", ("tie",)),
        Requirement("each proposal joins the context before the next lookup", ("example", "random")),
        Requirement(
            "stops when the last n tokens are never followed by a token, returning the proposals so far (maybe none); "
            "no back-off to a shorter context",
            ("stop",),
        ),
        Requirement("a list of at most k ints", ("example", "random", "tie", "stop")),
    ],
)

EXERCISES = [ACCEPTANCE, TOKENS, SPECULATIVE_TOKEN, SPEEDUP, NGRAM]
