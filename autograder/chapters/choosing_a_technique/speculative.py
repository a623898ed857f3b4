"""Chapter 9's exercise speculative_greedy (the learner's greedy speculative loop, run on the
course's models in the sandbox: :func:`course_models.on_course_model`) with its visible check. The
judge compares with the target's greedy tokens and chapter 6's loop's calls, and names a planted
mistake by the tokens (or the error) of the course's loop with that mistake (``MISTAKES``,
``autograder/mistakes/choosing_a_technique.py``); the hidden checks are
``autograder/hidden/choosing_a_technique.py``'s."""

from __future__ import annotations

from autograder.chapters.choosing_a_technique.course_models import model_source, model_spec, on_course_model
from autograder.checks import Check, Exercise, Verdict, outcome
from course import choosing_a_technique as technique
from course import withheld

MISTAKES = withheld.module("autograder.mistakes.choosing_a_technique")

LOOP_NEW_TOKENS = 32


LOOP_MISTAKES = {  # each planted mistake's hint (the loop with it: autograder/mistakes/speculative_decoding.py)
    "target_cache": "the target's KV cache was not rolled back after a rejection: set its length to the positions "
    "kept (the tokens so far plus the accepted guesses)",
    "one_more": "off by one in the positions kept: the target's cache keeps the tokens so far plus the accepted "
    "guesses; the target's own token after them has not been fed yet",
    "draft_cache": "the draft's KV cache was not rolled back after a rejection, so it holds rejected guesses and is "
    "fed nothing: set its length to at most the positions kept",
    "both_caches": "neither KV cache was rolled back after a rejection: set the target's length to the positions kept "
    "(the tokens so far plus the accepted guesses) and the draft's to at most that",
    "late": "the target's choices were read one position late: the logits at a position choose the token after it, "
    "so the choice to compare with the first guess is at the position before that guess (the last of the tokens "
    "fed before the guesses): take the last k + 1 positions",
}


def loop_probe(draft, start, k):
    def make(rng):
        inputs = {"prompt": technique.prompts()[start], "k": k, "new_tokens": LOOP_NEW_TOKENS}
        return {
            "call": "speculative_greedy",
            "scenario": on_course_model,
            "args": ["speculate", model_source(), model_spec("target"), model_spec(draft), inputs],
            "expected": (draft, start, k),
        }

    return make


# what the scenario's models say when a cache was not rolled back (on_course_model's Served), by mistake
RAISED_BY = {  # the first whose sign is in the message names it
    "target_cache": ("the target's KV cache holds",),
    "both_caches": ("the target's was not rolled back either",),
    "draft_cache": ("the draft's KV cache holds", "the draft was fed no tokens"),
}


def _raised_hint(draft: str, start: int, k: int, raised: dict) -> str:
    """The hint of a loop that raised: the mistake first, then what it raised; the mistake is named
    when the scenario's models said what went wrong (:data:`RAISED_BY`), or when the course's loop
    with that mistake raises the same exception on this prompt; otherwise what was raised alone."""
    message = raised.get("message", "")
    said = f"{raised['raised']}: {message}"[:160]
    for mistake, signs in RAISED_BY.items():
        if any(sign in message for sign in signs):
            return f"{LOOP_MISTAKES[mistake]} (your loop raised {said})"
    for mistake, hint in LOOP_MISTAKES.items():
        if mistake not in RAISED_BY and MISTAKES.of_speculative_greedy(draft, start, k, mistake) == raised["raised"]:
            return f"{hint} (your loop raised {said}, as the loop with that mistake does)"
    return outcome(raised)[1].hint


def _loop_verdict(probe, got, parts) -> Verdict:
    draft, start, k = probe["expected"]
    if withheld.is_recording():  # every mistake's outcome, so that the learners' copy can name any of them
        for mistake in LOOP_MISTAKES:
            MISTAKES.of_speculative_greedy(draft, start, k, mistake)
    if isinstance(got, dict) and "raised" in got:  # the learner's loop raised: a mistake that ends this way?
        return Verdict(False, _raised_hint(draft, start, k, got))
    if not isinstance(got, dict) or "tokens" not in got:
        return Verdict(False, f"speculative_greedy did not run on the course's models: {got!r}"[:200])
    expected = MISTAKES.loop_expected(draft, start, k)
    prompt_length = expected["prompt"].shape[1]
    if got["tokens"] != expected["greedy"]:
        for mistake, hint in LOOP_MISTAKES.items():
            if got["tokens"] == MISTAKES.of_speculative_greedy(draft, start, k, mistake):
                return Verdict(False, hint)
        if got["tokens"][:prompt_length] != expected["greedy"][:prompt_length]:
            return Verdict(False, "return the prompt's tokens followed by the new ones, as one list")
        if len(got["tokens"]) != len(expected["greedy"]):
            return Verdict(False, f"{len(got['tokens'])} tokens returned, expected the prompt + {LOOP_NEW_TOKENS}")
        first = next(i for i, (a, b) in enumerate(zip(got["tokens"], expected["greedy"], strict=True)) if a != b)
        return Verdict(False, f"token {first} differs from the target's greedy decoding ({draft}, k={k})")
    if "calls" in parts and got["target_calls"] != expected["calls"]:
        return Verdict(
            False,
            f"{got['target_calls']} target calls, expected {expected['calls']}: one target call per round verifies "
            "its k guesses (the prefill is part of the first round), and after k accepted guesses the same call "
            "gives the target's next token too",
        )
    if "caches" in parts:
        bound = prompt_length + LOOP_NEW_TOKENS + got["target_calls"] * (k + 1)
        for who in ("target", "draft"):
            if got[f"{who}_fed"] > bound:
                return Verdict(
                    False,
                    f"the {who} was fed {got[f'{who}_fed']} positions in all, more than {bound}: keep a KV cache and "
                    "feed only the positions it has not seen",
                )
    return Verdict(True, data={"target_calls": got["target_calls"]} if "calls" in parts else None)


def loop_judge(*parts):
    """The judge of a loop's tokens and ``parts``: ``"calls"`` (the target's calls counted),
    ``"caches"`` (the positions each model was fed)."""

    def judge(probe, result):
        if "raised" in result and result["raised"] not in ("NotImplementedError", "MemoryError"):
            return _loop_verdict(probe, result, parts)
        value, failed = outcome(result)
        return failed or _loop_verdict(probe, value, parts)

    return judge


SPECULATIVE = Exercise(
    "speculative_greedy",
    ("speculative_greedy",),
    [
        Check(
            "greedy",
            2,
            "the distilled draft, k = 4: the target's greedy tokens, one target call per round, each model given "
            "only the positions missing from its KV cache",
            loop_probe("distilled", 0, 4),
            loop_judge("calls", "caches"),
            visible=True,
        ),
    ],
)
