"""Chapter 6's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/speculative_decoding.py`` name a mistake by it), the course's loop with one
part wrong (chapter 9's judge names a learner's loop by it), and wrong answers written out."""

from __future__ import annotations

import torch

from autograder.mistakes import Planted, answer_cell

# --- acceptance_rate -----------------------------------------------------------------------------------


def of_acceptance_rate(p, q) -> list[tuple[str, float]]:
    """The common wrong acceptance rates of ``p`` and ``q``, with their hints."""
    p, q = p.double(), q.double()
    return [
        ("returned 0: alpha is the overlap of p and q, sum over tokens of min(p(x), q(x))", 0.0),
        ("returned 0.5, the overlap of the chapter's p and q: compute it from target and draft", 0.5),
        ("took the maximum: alpha sums min(p, q)", torch.maximum(p, q).sum().item()),
        ("summed p * q: alpha sums min(p, q)", (p * q).sum().item()),
        (
            "summed min(1, p / q): that is the acceptance probability of each token, not weighted by q",
            _kept_share(p, q).sum().item(),
        ),
        ("returned 1 - sum min(p, q): that is the rejection rate", 1 - torch.minimum(p, q).sum().item()),
        ("averaged min(p, q) over the tokens: sum it", torch.minimum(p, q).mean().item()),
        (
            "returned 1 - sum |p - q|: the total variation distance is half of sum |p - q|, so "
            "alpha = 1 - sum |p - q| / 2, which equals sum min(p, q)",
            1 - (p - q).abs().sum().item(),
        ),
    ]


def _kept_share(p, q):
    """min(1, p(x) / q(x)) for every token x: the chance that a drafted x is kept (0 where q is 0)."""
    return torch.clamp(p / q, max=1).nan_to_num(0.0)


def _leftover(p, q):
    """max(0, p - q), normalised."""
    leftover = (p - q).clamp(min=0)
    return leftover / leftover.sum()


# --- expected_tokens_per_call -----------------------------------------------------------------------------


def of_expected_tokens_per_call(alpha, k) -> list[tuple[str, float]]:
    """The common wrong tokens per call at ``alpha`` and ``k``, with their hints."""
    series = lambda n: sum(alpha**i for i in range(n))  # noqa: E731
    return [
        ("one term short: (1 - alpha^(k+1)) / (1 - alpha) counts the target's own token too", series(k)),
        ("one term too many: the sum runs over alpha^0 .. alpha^k", series(k + 2)),
        ("counted the accepted drafts only (k alpha): acceptance stops at the first rejection", k * alpha),
        (
            "counted 1 + k alpha, as if every proposal were verified on its own: a proposal counts only if all "
            "before it were accepted, so proposal i adds alpha^i: 1 + alpha + ... + alpha^k",
            1 + k * alpha,
        ),
        ("returned k + 1, which holds only at alpha = 1, when every proposal is accepted", float(k + 1)),
        ("returned 0: a target call always gives at least one token, its own (the sum starts at alpha^0 = 1)", 0.0),
    ]


# --- speculative_token -------------------------------------------------------------------------------


def _outcome(p, q, accept, resample):
    """Token distribution when x ~ q is accepted with probability accept(x) and otherwise replaced by resample."""
    kept = q * accept
    return kept + (1 - kept.sum()) * resample


def of_speculative_token(p, q) -> tuple[float, list[tuple[str, torch.Tensor, float]]]:
    """The acceptance rate of ``p`` and ``q``, and for each common mistake its hint, the token
    distribution it gives and the share of its calls that return accepted True (which tells apart
    two mistakes that both give the draft's q: always accepting, and the leftover reversed)."""
    p, q = p.double(), q.double()
    ratio, reversed_ratio = _kept_share(p, q), _kept_share(q, p)
    alpha = torch.minimum(p, q).sum().item()
    return alpha, [
        ("always accepted the draft's token: accept with probability min(1, p(x) / q(x))", q, 1.0),
        ("on rejection it resampled from p: resample from max(0, p - q), normalised", _outcome(p, q, ratio, p), alpha),
        ("on rejection it resampled from q: resample from max(0, p - q), normalised", _outcome(p, q, ratio, q), alpha),
        (
            "accepted with probability q(x) / p(x): it is min(1, p(x) / q(x))",
            _outcome(p, q, reversed_ratio, _leftover(p, q)),
            (q * reversed_ratio).sum().item(),
        ),
        (
            "on rejection it resampled from max(0, q - p), the draft's excess, which gives back the draft's q: "
            "resample from max(0, p - q), what the target lacks, normalised",
            _outcome(p, q, ratio, _leftover(q, p)),
            alpha,
        ),
    ]


# --- speculative_speedup ---------------------------------------------------------------------------


def of_speculative_speedup(alpha, k, c, tokens: float) -> list[tuple[str, float]]:
    """The common wrong speed-ups at ``alpha``, ``k`` and ``c``, given the right ``tokens`` per call."""
    return [
        ("the draft's cost was left out: divide by (k c + 1)", tokens),
        ("the target's own call was left out of the cost: divide by (k c + 1), not k c", tokens / (k * c)),
        ("the draft's cost was counted once, not per drafted token: (k c + 1)", tokens / (c + 1)),
        ("divided the cost by the tokens, upside down: tokens per call / (k c + 1)", (k * c + 1) / tokens),
        (
            "counted k + 1 draft calls: the draft proposes k tokens, so a round costs k c + 1 target steps",
            tokens / ((k + 1) * c + 1),
        ),
        (  # the number the chapter prints, hard-coded
            "returned 2.95, the paper's example (alpha 0.8, k 5, c 0.05), whatever the inputs: compute the speed-up "
            "from alpha, draft_length and cost",
            2.95,
        ),
    ]


# --- ngram_draft ---------------------------------------------------------------------------------------


def _following(text, last, after=None):
    """The tokens ``after`` places from each occurrence of ``last`` in ``text`` (default: right after it)."""
    width, after = len(last), after or len(last)
    return [text[i + after] for i in range(len(text) - max(width, after)) if text[i : i + width] == last]


def ngram_variant(text, context, n, k, grow=True, width=None, after=None, pick="most", tie="smallest", back_off=False):
    """ngram_draft as written, or with one of the usual mistakes: the context not grown by the
    proposals, ``width`` tokens of context instead of n, the token ``after`` places from where the
    match starts instead of the one right after it, the first or last continuation instead of the
    most frequent, ties to the ``tie`` token ("largest", or "first" found in the text), backing
    off to shorter contexts instead of stopping."""
    text, context = [int(t) for t in text], [int(t) for t in context]
    width = width or n
    proposed = []
    for _ in range(k):
        last = (context + proposed if grow else context)[-width:]
        following = _following(text, last, after)
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
NOT_GROWN = "each proposal must join the context: look up the last n tokens of context + proposals so far"
NGRAM_MISTAKES = [
    (NOT_GROWN, {"grow": False}),
    ("looked up n - 1 tokens of context: use exactly the last n", {"width": -1}),
    ("looked up n + 1 tokens of context: use exactly the last n", {"width": +1}),
    (
        "matched the last n - 1 tokens of context and took the token n places from the match's start, one too far: "
        "match the last n tokens and take the token right after them",
        {"width": -1, "after": 0},
    ),
    ("took the first continuation found in the text: count them all and take the most frequent", {"pick": "first"}),
    ("took the last continuation found in the text: count them all and take the most frequent", {"pick": "last"}),
]


def of_ngram_draft(text, context, n, k) -> dict:
    """What the mistakes propose for these inputs: each wrong tie-break of :data:`TIES` by its words
    (``ties``), backing off (``back_off``), and each of :data:`NGRAM_MISTAKES` as (hint, proposals),
    in order (``mistakes``; those whose context would be empty left out)."""
    mistakes = []
    for hint, change in NGRAM_MISTAKES:
        if "width" in change:
            change = {**change, "width": n + change["width"]}
            if "after" in change:
                change["after"] = n + change["after"]
            if change["width"] < 1:
                continue
        mistakes.append((hint, ngram_variant(text, context, n, k, **change)))
    return {
        "ties": {words: ngram_variant(text, context, n, k, tie=rule) for rule, words in TIES.items()},
        "back_off": ngram_variant(text, context, n, k, back_off=True),
        "mistakes": mistakes,
    }


# --- chapter 9's speculative_greedy: the course's loop with one part wrong ------------------------------


class _Cache:
    """A target's KV cache as a wrong loop leaves it: where the loop sets ``length`` to at most what
    is cached (a rollback; the model's own forward pass only adds), ``kept(asked, cached)`` is kept."""

    def __init__(self, cache, kept):
        self.__dict__.update(inner=cache, kept=kept)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name == "length" and value <= self.inner.length:
            value = self.kept(value, self.inner.length)
        setattr(self.inner, name, value)


class _Target:
    """``model`` behind the course model's interface, its caches :class:`_Cache` with ``kept``."""

    def __init__(self, model, kept):
        self.model, self.kept, self.config = model, kept, model.config

    def new_cache(self, batch, max_len=None):
        return _Cache(self.model.new_cache(batch, max_len), self.kept)

    def __call__(self, tokens, cache=None):
        return self.model(tokens, cache)


def _draft_not_rolled_back(model):
    """``model`` as a draft whose cache keeps the rejected guesses (it is never rolled back)."""
    from course.answers.speculative_decoding import ModelDraft

    draft = ModelDraft(model)
    draft.keep = lambda length: None
    return draft


LOOP_VARIANTS = {  # chapter 9's names: the course's loop with one part wrong
    "target_cache": lambda target, draft: (_Target(target, lambda asked, cached: cached), draft),
    "one_more": lambda target, draft: (_Target(target, lambda asked, cached: asked + 1), draft),
    "draft_cache": lambda target, draft: (target, _draft_not_rolled_back(draft)),
    "both_caches": lambda target, draft: (_Target(target, lambda asked, cached: cached), _draft_not_rolled_back(draft)),
}
# chapter 9's names: the solution's loop with one expression replaced (old, new)
SOLUTION_LOOP_VARIANTS = {
    "late": ("[0, -(k + 1) :]", "[0, -k:]"),  # the target's choices read one position late
}


def solution_loop(*replaced: tuple[str, str]):
    """Chapter 9's solution ``speculative_greedy`` with each (old, new) of ``replaced`` substituted in
    its cell (:func:`autograder.mistakes.answer_cell`): a wrong loop that cannot drift from the answer."""
    namespace = {"torch": torch}
    source = answer_cell("09_choosing_a_technique", "speculative_greedy", *replaced)
    exec(compile(source, "speculative_greedy", "exec"), namespace)
    return namespace["speculative_greedy"]


def of_speculative_greedy(mistake: str, target, draft, prompt, k: int, new_tokens: int) -> list[int]:
    """The tokens of the greedy loop with ``mistake`` on ``prompt``: the course's loop
    (:data:`LOOP_VARIANTS`: the target's cache not rolled back after a rejection; kept one position
    too far, the target's own token counted as cached before it is fed; the draft's cache not rolled
    back; neither) or the solution's (:data:`SOLUTION_LOOP_VARIANTS`: the target's choices read one
    position late); it raises where that loop does."""
    from course.answers.speculative_decoding import speculative_generate

    if mistake in SOLUTION_LOOP_VARIANTS:
        return solution_loop(SOLUTION_LOOP_VARIANTS[mistake])(target, draft, prompt, k, new_tokens)
    wrong_target, wrong_draft = LOOP_VARIANTS[mistake](target, draft)
    return speculative_generate(wrong_target, wrong_draft, prompt, k, new_tokens, temperature=0)[0][0].tolist()


# --- wrong answers written out -----------------------------------------------------------------------

SPECULATIVE_TOKEN = """
def speculative_token(target, draft, generator):
    x = int(torch.multinomial(draft, 1, generator=generator))
    if torch.rand(1, generator=generator).item() < min(1.0, (target[x] / draft[x]).item()):
        return x, True
    leftover = {leftover}
    return int(torch.multinomial(leftover / leftover.sum(), 1, generator=generator)), False
"""
NGRAM_DRAFT = """
def ngram_draft(text, context, n, k):
    text, proposed = text.tolist(), []
    for _ in range(k):
        last = {last}
        counts = {{}}
        for i in range(len(text) - n):
            if text[i : i + n] == last:
                counts[text[i + n]] = counts.get(text[i + n], 0) + 1
        if not counts:
            break
        proposed.append(max(counts, key=lambda t: (counts[t], -t))){grow}
    return proposed
"""
PLANTED = {  # graded end to end
    "resample_from_p": Planted(
        "speculative_token",
        SPECULATIVE_TOKEN.format(leftover="target"),
        {"speculative_token.distribution", "speculative_token.random"},
        "resampled from p",
    ),
    "ngram_context_not_grown": Planted(
        "ngram_draft",
        NGRAM_DRAFT.format(last="context[-n:]", grow=""),
        {"ngram_draft.example", "ngram_draft.random", "ngram_draft.tie"},
        "must join the context",
    ),
    "ngram_ties_to_largest": Planted(
        "ngram_draft",
        NGRAM_DRAFT.format(last="(context + proposed)[-n:]", grow="").replace("-t)", "t)"),
        {"ngram_draft.example", "ngram_draft.tie"},
        "ties go to the smallest",
    ),
    "ngram_backs_off": Planted(  # what the chapter's NGramDraft does, not what the prompt asks
        "ngram_draft",
        NGRAM_DRAFT.format(last="(context + proposed)[-n:]", grow="").replace(
            "        if not counts:\n            break\n",
            "        while not counts and len(last) > 1:\n"
            "            last = last[1:]\n"
            "            counts = {}\n"
            "            for i in range(len(text) - len(last)):\n"
            "                if text[i : i + len(last)] == last:\n"
            "                    counts[text[i + len(last)]] = counts.get(text[i + len(last)], 0) + 1\n"
            "        if not counts:\n            break\n",
        ),
        {"ngram_draft.stop"},
        "backed off to a shorter context",
    ),
    "ngram_ties_to_the_first_found": Planted(  # Counter.most_common keeps the first of equal counts
        "ngram_draft",
        NGRAM_DRAFT.format(last="(context + proposed)[-n:]", grow="").replace("(counts[t], -t)", "counts[t]"),
        {"ngram_draft.example", "ngram_draft.tie"},
        "the one found first in the text",
    ),
    "series_off_by_one": Planted(
        "expected_tokens_per_call",  # speculative_speedup calls the learner's own formula
        "def expected_tokens_per_call(alpha, draft_length):\n    return (1 - alpha ** draft_length) / (1 - alpha)\n",
        {"expected_tokens_per_call.example", "expected_tokens_per_call.random"},
        "one term short",  # speculative_speedup, which calls it, keeps its points: the mistake is graded once
    ),
    "speedup_names_the_wrong_helper": Planted(  # wrong, and calling a wrong helper: the helper is named first
        "speculative_speedup",
        "def expected_tokens_per_call(alpha, draft_length):\n    return (1 - alpha ** draft_length) / (1 - alpha)\n\n\n"
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost)\n",
        {"speculative_speedup.paper", "speculative_speedup.random"},
        "calls your expected_tokens_per_call, which fails its own checks",
        calls_it={"expected_tokens_per_call"},
    ),
}


RIGHT_TOKEN = SPECULATIVE_TOKEN.format(leftover="(target - draft).clamp(min=0)")

JUDGED = {  # judged in the tests' process
    "tokens_returns_zero": Planted(
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n    return 0.0\n",
        {"expected_tokens_per_call.example"},
        "returned 0: a target call always gives at least one token",
    ),
    "speedup_hard_coded_from_the_paper": Planted(
        "speculative_speedup",
        "def speculative_speedup(alpha, draft_length, cost):\n    return 2.95\n",
        {"speculative_speedup.paper"},
        "the paper's example",
    ),
    "speedup_k_plus_one_draft_calls": Planted(
        "speculative_speedup",
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    tokens = (1 - alpha ** (draft_length + 1)) / (1 - alpha)\n"
        "    return tokens / ((draft_length + 1) * cost + 1)\n",
        {"speculative_speedup.paper"},
        "counted k + 1 draft calls",
    ),
    "ngram_returns_the_context": Planted(
        "ngram_draft",
        "def ngram_draft(text, context, n, k):\n    return list(context)\n",
        {"ngram_draft.example", "ngram_draft.stop"},
        "returned the context itself",
    ),
    "alpha_averaged": Planted(
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return torch.minimum(target, draft).mean().item()\n",
        {"acceptance_rate.example", "acceptance_rate.random"},
        "averaged min(p, q)",
    ),
    "alpha_total_variation_without_the_half": Planted(
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return 1 - (target - draft).abs().sum().item()\n",
        {"acceptance_rate.example", "acceptance_rate.random"},
        "half of sum |p - q|",
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
    "leftover_reversed": Planted(  # the reversed leftover gives back q exactly, as accepting always does
        "speculative_token",
        SPECULATIVE_TOKEN.format(leftover="(draft - target).clamp(min=0)"),
        {"speculative_token.distribution", "speculative_token.random"},
        "resampled from max(0, q - p)",
    ),
    "uniform_drawn_before_the_proposal": Planted(  # passes the distribution; section 5's loop needs the order
        "speculative_token",
        RIGHT_TOKEN.replace(
            "    x = int(torch.multinomial(draft, 1, generator=generator))\n"
            "    if torch.rand(1, generator=generator).item() < ",
            "    u = torch.rand(1, generator=generator).item()\n"
            "    x = int(torch.multinomial(draft, 1, generator=generator))\n"
            "    if u < ",
        ),
        {"speculative_token.contract"},
        "draw the proposal first",
    ),
    "speedup_own_mistake_beside_a_helper_failing_at_alpha_one": Planted(  # the helper is right at alpha 0.8
        "speculative_speedup",
        "def expected_tokens_per_call(alpha, draft_length):\n"
        "    return (1 - alpha ** (draft_length + 1)) / (1 - alpha)\n\n\n"
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost)\n",
        {"speculative_speedup.paper", "speculative_speedup.random"},
        "the target's own call was left out of the cost",
    ),
    # answers that do no work, or hard-code the chapter's numbers (issue 55): each fails a visible check,
    # and the hints name what was returned
    "alpha_returns_zero": Planted(
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return 0.0\n",
        {"acceptance_rate.example", "acceptance_rate.random"},
        "returned 0: alpha is the overlap",
    ),
    "alpha_hard_coded_to_the_chapters_pair": Planted(  # the chapter's p and q have alpha 0.5
        "acceptance_rate",
        "def acceptance_rate(target, draft):\n    return 0.5\n",
        {"acceptance_rate.example", "acceptance_rate.random"},
        "the overlap of the chapter's p and q",
    ),
    "token_returns_zero_rejected": Planted(
        "speculative_token",
        "def speculative_token(target, draft, generator):\n    return 0, False\n",
        {"speculative_token.contract"},  # and the distribution, whose hint says token 0 came every time
        "accepted was False in all 200 calls",
    ),
    "token_always_the_proposal_rejected": Planted(  # the types and the order are right; no rule runs
        "speculative_token",
        "def speculative_token(target, draft, generator):\n"
        "    return int(torch.multinomial(draft, 1, generator=generator)), False\n",
        {"speculative_token.contract"},
        "accepted was False in all 200 calls",
    ),
    "tokens_k_plus_one_always": Planted(
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n    return float(draft_length + 1)\n",
        {"expected_tokens_per_call.example", "expected_tokens_per_call.alpha1", "expected_tokens_per_call.random"},
        "which holds only at alpha = 1",
    ),
    "tokens_one_plus_k_alpha": Planted(
        "expected_tokens_per_call",
        "def expected_tokens_per_call(alpha, draft_length):\n    return 1 + draft_length * alpha\n",
        {"expected_tokens_per_call.example", "expected_tokens_per_call.random"},
        "counted 1 + k alpha",
    ),
    "ngram_matches_n_minus_one_takes_the_nth": Planted(  # the context's last n - 1 tokens, then text[i + n]
        "ngram_draft",
        NGRAM_DRAFT.format(last="(context + proposed)[-(n - 1):]", grow="").replace(
            "if text[i : i + n] == last:", "if text[i : i + n - 1] == last:"
        ),
        {"ngram_draft.example"},  # the stop case: "proposed nothing, but ... are followed by"
        "matched the last n - 1 tokens",
    ),
    "ngram_n_minus_one_tokens_of_context": Planted(
        "ngram_draft",
        NGRAM_DRAFT.format(last="(context + proposed)[-(n - 1):]", grow="")
        .replace("range(len(text) - n)", "range(len(text) - n + 1)")
        .replace("if text[i : i + n] == last:", "if text[i : i + n - 1] == last:")
        .replace(
            "counts[text[i + n]] = counts.get(text[i + n], 0) + 1",
            "counts[text[i + n - 1]] = counts.get(text[i + n - 1], 0) + 1",
        ),
        {"ngram_draft.example", "ngram_draft.stop"},  # n = 2 in both: one token of context
        "looked up n - 1 tokens",
    ),
    "speedup_upside_down": Planted(
        "speculative_speedup",
        "def speculative_speedup(alpha, draft_length, cost):\n"
        "    return (draft_length * cost + 1) * (1 - alpha) / (1 - alpha ** (draft_length + 1))\n",
        {"speculative_speedup.paper", "speculative_speedup.random"},
        "upside down",
    ),
}
