"""Chapter 6's exercises: acceptance_rate, expected_tokens_per_call, speculative_token,
speculative_speedup and ngram_draft, with their visible checks. speculative_token is judged by
sampling: thousands of calls with one seeded generator, their token frequencies against the target's
probabilities. Each judge compares with the chapter's answer (``ANSWERS``, its solution cells) and
names the known mistake it matches (``MISTAKES``, ``autograder/mistakes/speculative_decoding.py``);
the hidden checks are ``autograder/hidden/speculative_decoding.py``'s."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import Check, Exercise, Verdict, fmt, judge_number, judges_value, number, outcome
from course import withheld

ANSWERS = withheld.answers("06_speculative_decoding")
MISTAKES = withheld.module("autograder.mistakes.speculative_decoding")

# --- distributions that disagree ----------------------------------------------------------------


def pair(rng, vocab=6):
    p = rng.dirichlet(np.ones(vocab))
    q = rng.dirichlet(np.ones(vocab) * 0.7)
    return torch.tensor(p, dtype=torch.float32), torch.tensor(q, dtype=torch.float32)


FIXED_P = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
FIXED_Q = torch.tensor([0.1, 0.1, 0.2, 0.2, 0.3, 0.1])


# --- acceptance_rate -----------------------------------------------------------------------------------


@judges_value
def judge_alpha(probe, got):
    p, q = (a.double() for a in probe["args"])
    expected = ANSWERS.acceptance_rate(p, q)
    return judge_number(  # abs_tol: float32 sums of a few numbers near 1 round at about 1e-7
        got,
        expected,
        MISTAKES.of_acceptance_rate(p, q),
        "the acceptance rate",
        rel=1e-5,
        abs_tol=1e-6,
        python_float=probe["python_float"],
    )


def alpha_probe(vocab=50, python_float=False):
    """A pair of distributions over ``vocab`` tokens drawn afresh (a graded notebook gets its own),
    whose overlap is not near 0.5: there 1 - sum |p - q| (= 2 alpha - 1) would be near 0, a
    function that returns 0 (the chapter's p and q have alpha 0.5 exactly)."""

    def make(rng):
        while True:
            p, q = pair(rng, vocab)
            if abs(torch.minimum(p, q).sum().item() - 0.5) > 0.05:
                return {"call": "acceptance_rate", "args": [p, q], "python_float": python_float}

    return make


ACCEPTANCE = Exercise(
    "acceptance_rate",
    ("acceptance_rate",),
    [Check("example", 1, "a pair over 6 tokens, drawn afresh", alpha_probe(6, True), judge_alpha, visible=True)],
)


# --- expected_tokens_per_call -------------------------------------------------------------------------


@judges_value
def judge_tokens(probe, got):
    alpha, k = probe["args"]
    expected = ANSWERS.expected_tokens_per_call(alpha, k)
    return judge_number(got, expected, MISTAKES.of_expected_tokens_per_call(alpha, k), "the expected tokens per call")


def tokens_at_one(function, draft_length, alpha) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): ``function`` at alpha = 1 and
    at ``alpha`` below it, with the same draft length."""
    return {"one": function(1.0, draft_length), "below": function(alpha, draft_length)}


def judge_tokens_at_one(probe, result):
    """k + 1 at alpha = 1, counted beside the formula at an alpha below 1 (a function that returns
    k + 1 whatever alpha is does no work)."""
    if result.get("raised") in ("ZeroDivisionError", "FloatingPointError"):
        return Verdict(
            False,
            f"raised {result['raised']} at alpha = 1: the formula divides by 1 - alpha = 0. Every proposal is "
            "accepted then, so return k + 1 when alpha is 1",
        )
    value, failed = outcome(result)
    if failed:
        return failed
    k, alpha = probe["args"]
    if not isinstance(value, dict) or "one" not in value:
        return Verdict(False, f"expected_tokens_per_call could not be tested: {value!r}"[:200])
    if isinstance(value["one"], float) and value["one"] != value["one"]:
        return Verdict(False, "returned NaN at alpha = 1 (0 / 0): every proposal is accepted then, return k + 1")
    at_one = judge_tokens.__wrapped__({"args": [1.0, k]}, value["one"])
    if not at_one.passed:
        return Verdict(False, f"at alpha = 1, k = {k}: {at_one.hint}")
    below = judge_tokens.__wrapped__({"args": [alpha, k]}, value["below"])
    if not below.passed:
        return Verdict(
            False,
            f"k + 1 at alpha = 1 counts beside the formula below it, which is wrong: at alpha = {alpha:g}, k = {k}, "
            f"{below.hint}",
        )
    return Verdict(True)


def tokens_probe(rng):
    """An alpha and a draft length drawn afresh (a graded notebook gets its own)."""
    return {
        "call": "expected_tokens_per_call",
        "args": [round(float(rng.uniform(0.3, 0.95)), 2), int(rng.integers(2, 12))],
    }


def at_one_probe(rng):
    """alpha = 1 and a draft length drawn afresh, and an alpha below 1 for the formula beside it."""
    args = [int(rng.integers(2, 12)), round(float(rng.uniform(0.3, 0.95)), 2)]
    return {"call": "expected_tokens_per_call", "scenario": tokens_at_one, "args": args}


TOKENS = Exercise(
    "expected_tokens_per_call",
    ("expected_tokens_per_call",),
    [
        Check("example", 1, "an alpha and a k drawn afresh", tokens_probe, judge_tokens, visible=True),
        Check(
            "alpha1",
            1,
            "alpha = 1 (no division by zero: k + 1), beside the formula below 1",
            at_one_probe,
            judge_tokens_at_one,
            visible=True,
        ),
    ],
)


# --- speculative_token -------------------------------------------------------------------------------


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
    (chapter 6's loop draws the proposal so, and gives the rule a generator seeded alike), how many
    of them kept the proposal and how many tokens they returned."""
    import torch

    state = torch.random.get_rng_state()
    first = function(target, draft, torch.Generator().manual_seed(int(seed)))
    touched = not torch.equal(state, torch.random.get_rng_state())
    runs = []
    for _ in range(2):
        generator = torch.Generator().manual_seed(int(seed))
        runs.append([int(function(target, draft, generator)[0]) for _ in range(n)])
    parts = [type(part).__name__ for part in first] if isinstance(first, tuple) else None
    order, kept_count, tokens = None, 0, set()
    for i in range(n):
        proposal = int(torch.multinomial(draft, 1, generator=torch.Generator().manual_seed(int(seed) + i)))
        token, kept = function(target, draft, torch.Generator().manual_seed(int(seed) + i))
        kept_count += bool(kept)
        tokens.add(int(token))
        if bool(kept) and int(token) != proposal and order is None:
            order = [int(token), proposal]
    return {
        "parts": parts,
        "returned": type(first).__name__,
        "global_state": touched,
        "same": runs[0] == runs[1],
        "order": order,
        "kept": kept_count,
        "tokens": len(tokens),
        "calls": n,
    }


@judges_value
def judge_contract(probe, got):
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
    calls, kept = got.get("calls", 0), got.get("kept", 0)
    if kept in (0, calls) or got.get("tokens", 0) < 2:
        said = f"accepted was {kept == calls} in all {calls} calls" if kept in (0, calls) else "the token never changed"
        return Verdict(
            False,
            f"{said}, on p and q whose overlap alpha is {torch.minimum(FIXED_P, FIXED_Q).sum().item():.2f}: the rule "
            "keeps some proposals and rejects others (this check counts beside a rule that does both)",
        )
    return Verdict(True)


def contract_probe(rng):
    """The chapter's p and q, the generators' seeds drawn afresh (a graded notebook gets its own)."""
    return {
        "call": "speculative_token",
        "scenario": draw_contract,
        "args": [FIXED_P, FIXED_Q, int(rng.integers(1 << 30)), 200],
    }


def sampling_probe(n, fixed=True):
    def make(rng):
        p, q = (FIXED_P, FIXED_Q) if fixed else pair(rng)
        return {"call": "speculative_token", "scenario": sampled_tokens, "args": [p, q, int(rng.integers(1 << 30)), n]}

    return make


@judges_value
def judge_sampling(probe, got):
    p, q, _, n = probe["args"]
    p, q = p.double(), q.double()
    if not isinstance(got, dict) or not isinstance(got.get("tokens"), torch.Tensor):
        return Verdict(False, f"speculative_token must return (token, accepted): {got!r}"[:200])
    tokens, accepted = got["tokens"], got["accepted"]
    if tokens.min() < 0 or tokens.max() >= len(p):
        return Verdict(False, f"returned token {int(tokens.max())}, outside the vocabulary of {len(p)}")
    freq = torch.bincount(tokens, minlength=len(p)).double() / n
    alpha, mistakes = MISTAKES.of_speculative_token(p, q)

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
    for hint, dist, expected_rate in mistakes:
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
            "distribution", 2, "5,000 draws follow the target's p", sampling_probe(5000), judge_sampling, visible=True
        ),
        Check(
            "contract",
            1,
            "returns (int, bool); every draw from `generator`, the proposal first (reproducible); keeps some "
            "proposals, rejects others",
            contract_probe,
            judge_contract,
            visible=True,
        ),
    ],
)


# --- speculative_speedup ---------------------------------------------------------------------------


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
def judge_speedup(probe, got):
    """The speed-up. Where the notebook's expected_tokens_per_call, which it calls, is wrong on the same
    alpha and k, a speed-up right for what that helper gives passes (the helper's mistake costs the
    helper's points only: graded once), and a speed-up wrong even so names the helper first."""
    alpha, k, c = probe["args"]
    if not isinstance(got, dict) or "speedup" not in got:
        return Verdict(False, f"speculative_speedup could not be tested: {got!r}"[:200])
    tokens = got.get("tokens") or {}
    if tokens.get("raised") == "NotImplementedError":
        return Verdict(False, f"{HELPER}, which is not written yet: write it first")
    if "raised" in tokens:
        return Verdict(False, f"{HELPER}, which raised {tokens['raised']} at alpha = {alpha:g}, k = {k}: fix it first")
    expected, right = ANSWERS.speculative_speedup(alpha, k, c), ANSWERS.expected_tokens_per_call(alpha, k)
    verdict = judge_number(
        got["speedup"], expected, MISTAKES.of_speculative_speedup(alpha, k, c, right), "the speed-up", rel=1e-6
    )
    if verdict.passed or "returned" not in tokens:
        return verdict
    helper, _ = number(tokens["returned"], "the tokens per call")
    if helper is not None and math.isclose(helper, right, rel_tol=1e-6):
        return verdict  # its own helper is right here: the speed-up's own mistake
    speedup, _ = number(got["speedup"], "the speed-up")
    if helper is not None and speedup is not None and math.isclose(speedup, expected * helper / right, rel_tol=1e-6):
        return Verdict(True)  # the formula is right for the helper's tokens per call (the speed-up is linear in them)
    shown = "no number" if helper is None else fmt(helper)
    return Verdict(
        False,
        f"{HELPER}, which fails its own checks: at alpha = {alpha:g}, k = {k} it gives {shown}, expected "
        f"{fmt(right)}; fix expected_tokens_per_call first ({verdict.hint})",
    )


def speedup_probe(fixed=None):
    def make(rng):
        args = fixed or [
            round(float(rng.uniform(0.4, 0.95)), 2),
            int(rng.integers(1, 10)),
            round(float(rng.uniform(0.01, 0.3)), 3),
        ]
        return {"call": "speculative_speedup", "scenario": speedup_and_its_helper, "args": args}

    return make


SPEEDUP = Exercise(
    "speculative_speedup",
    ("speculative_speedup",),
    [
        Check(
            "paper",
            1,
            "the paper's formula at an alpha, k and c drawn afresh",
            speedup_probe(),
            judge_speedup,
            visible=True,
        ),
    ],
    # no builds_on: its judge runs the notebook's expected_tokens_per_call on the check's own alpha and k,
    # and names it only where it is wrong there (a helper failing at alpha = 1 alone is not this check's cause)
)

# --- ngram_draft ---------------------------------------------------------------------------------------


def _tie_hint(ties: dict[str, list[int]], tokens) -> str:
    """The hint for a wrong tie-break, naming each rule (by its words) whose proposals (``ties``) are
    ``tokens`` (or "")."""
    rules = [words for words, proposed in ties.items() if proposed == tokens]
    if not rules:
        return ""
    took = rules[0] if len(rules) == 1 else f"{rules[0]} (here also {rules[1]})"
    return f"on a tie it took {took}: ties go to the smallest token"


def _as_token_list(value):
    if isinstance(value, torch.Tensor) and value.dim() <= 1 and not value.is_floating_point():
        return [int(t) for t in value.reshape(-1).tolist()], ""
    if isinstance(value, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value), ""
    return None, f"returned {str(value)[:80]}; ngram_draft should return a list of int tokens"


@judges_value
def judge_ngram(probe, got):
    text, context, n, k = probe["args"]
    tokens, problem = _as_token_list(got)
    if problem:
        return Verdict(False, problem)
    expected = ANSWERS.ngram_draft(text, context, n, k)
    if tokens == expected:
        return Verdict(True)
    known = MISTAKES.of_ngram_draft(text, context, n, k)
    difference = f"expected {expected}, got {tokens}"
    tie = _tie_hint(known["ties"], tokens)  # first: it differs from the right answer only where counts tie
    if tie:
        return Verdict(False, f"{tie} ({difference})")
    if known["back_off"] == tokens:
        return Verdict(
            False,
            f"backed off to a shorter context when the last {n} tokens never occur in the text (as the chapter's "
            f"NGramDraft table does): this exercise stops there and returns the proposals so far ({difference})",
        )
    named = {hint for hint, wrong in known["mistakes"] if wrong == tokens}
    kept_going = len(tokens) > len(expected) and tokens[: len(expected)] == expected
    if len(named) == 1:  # a mistake named only where no other known one gives the same proposals here
        # past the stop, a shorter context and backing off to one propose the same
        also = (
            f"; or it backed off to a shorter context where the last {n} never occur: stop there" if kept_going else ""
        )
        return Verdict(False, f"{named.pop()}{also} ({difference})")
    if tokens == [int(t) for t in context]:
        return Verdict(False, f"returned the context itself: return only the new proposals, at most k ({difference})")
    if kept_going:
        return Verdict(
            False,
            f"kept proposing after a context that never occurs in the text: stop there and return what you have "
            f"({difference})",
        )
    if not tokens:
        return Verdict(
            False,
            f"proposed nothing, but the context's last {n} tokens {list(context)[-n:]} are followed by {expected[0]} "
            f"in the text ({difference})",
        )
    return Verdict(False, difference)


def ngram_probe(kind):
    def make(rng):
        if kind == "example":
            text = torch.tensor(list(b"the cat sat on the mat; the cat ran; the hat"), dtype=torch.long)
            return {"call": "ngram_draft", "args": [text, list(b"a cat"), 2, 5]}
        # "stop": "8 9" occurs only at the end of the text; "9" alone is followed by 5 earlier
        text = torch.tensor([*rng.integers(0, 4, 100).tolist(), 9, 5, *rng.integers(0, 4, 100).tolist(), 7, 8, 9])
        return {"call": "ngram_draft", "args": [text, [1, 7, 8], 2, 6]}

    return make


NGRAM = Exercise(
    "ngram_draft",
    ("ngram_draft",),
    [
        Check(
            "example",
            1,
            'the chapter\'s example ("a cat", n = 2, k = 5)',
            ngram_probe("example"),
            judge_ngram,
            visible=True,
        ),
        Check(
            "stop",
            1,
            "a context never followed by anything (a shorter one is: no back-off)",
            ngram_probe("stop"),
            judge_ngram,
            visible=True,
        ),
    ],
)

EXERCISES = [ACCEPTANCE, TOKENS, SPECULATIVE_TOKEN, SPEEDUP, NGRAM]
