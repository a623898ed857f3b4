"""Chapter 6's planted mistakes: speculative sampling, the n-gram draft, tokens per call."""

from autograder.planted import Planted

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
PLANTED = {
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
