"""Chapter 6: speculative sampling reproduces the target, tokens per call against the formula,
speculative generation against the target alone with each of the four drafts, the n-gram table
against a count done by hand, the readings of a measurement, the chapter's figures, and the
grader's hints for planted mistakes."""

from collections import Counter

import pytest
import torch

from autograder import quiz as autograder_quiz
from autograder.mistakes import judged, planted
from course import checkpoints, corpus, paths, quiz, speculative_decoding, timing, withheld
from course.answers import speculative_decoding as course_loop
from course.model import generate
from course.plots import speculative_decoding as plots
from course.plots._widgets import figure_png

from conftest import assert_named, check_cell, judged_in_process, verdicts

ANSWERS = withheld.answers("06_speculative_decoding")  # the solution cells


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: thousands of small forward passes, which more threads than free cores
    (a machine shared with other work) slow down many times over."""
    with timing.threads(1):
        yield


def test_speculative_sampling_reproduces_the_target():
    p = torch.tensor([0.05, 0.5, 0.2, 0.25, 0.0])
    q = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.3])
    g = torch.Generator().manual_seed(0)
    draws = [ANSWERS.speculative_token(p, q, g) for _ in range(40_000)]
    freq = torch.bincount(torch.tensor([t for t, _ in draws]), minlength=5).double() / len(draws)
    assert (freq - p.double()).abs().max() < 0.01
    assert abs(sum(a for _, a in draws) / len(draws) - ANSWERS.acceptance_rate(p, q)) < 0.01


def test_tokens_per_call_formula_matches_simulation():
    alphas = [0.5, 0.8, 0.95]
    for alpha, (simulated,) in zip(alphas, course_loop.simulated_tokens_per_call(alphas, [5], 4000), strict=True):
        assert simulated == pytest.approx(ANSWERS.expected_tokens_per_call(alpha, 5), rel=0.05)
    assert ANSWERS.expected_tokens_per_call(1.0, 5) == 6
    assert ANSWERS.speculative_speedup(0.8, 5, 0.05) == pytest.approx(2.95, abs=0.01)  # Leviathan et al.'s example
    speeds = speculative_decoding.speedups([0.8], [1, 5], [0.05, 0.3], ANSWERS.speculative_speedup)
    assert speeds[0][0][1] == pytest.approx(2.95, abs=0.01) and len(speeds) == 2 and len(speeds[1][0]) == 2


def test_speculative_generate_greedy_equals_the_target():
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    prompt = corpus.encode("ROMEO:\n")[None]
    alone = generate(target, prompt, 60)
    for k in (1, 3, 5):
        tokens, rounds = speculative_decoding.speculative_generate(target, draft, prompt, k, 60, temperature=0)
        assert torch.equal(tokens, alone), k
        assert len(rounds) < 60


@pytest.mark.parametrize(
    "planted_loop, variant",
    [
        ("loop_cache_not_rolled_back", "target_cache"),
        ("loop_off_by_one", "one_more"),
        ("loop_draft_cache_not_rolled_back", "draft_cache"),
    ],
)
def test_each_wrong_loop_variant_is_the_learners_wrong_loop(planted_loop, variant):
    """The course's loop with one part wrong (``of_speculative_greedy``, which chapter 9's judge names a
    learner's loop by) gives what chapter 9's solution cell with that line wrong gives, on the
    course's models: the same tokens, or the same exception."""
    from autograder.mistakes.speculative_decoding import of_speculative_greedy

    loops = planted("choosing_a_technique")

    def outcome(loop, *args):
        try:
            return loop(*args)
        except (IndexError, ValueError, RuntimeError) as error:
            return type(error).__name__

    namespace = {"torch": torch}
    exec(loops[planted_loop].source, namespace)
    target, draft = checkpoints.load("target"), checkpoints.load("draft")
    for text, k in (("ROMEO:\n", 4), ("KING HENRY:\nMy lord, ", 3), ("JULIET:\nO ", 7)):
        prompt = corpus.encode(text)[None]
        learners = outcome(namespace["speculative_greedy"], target, draft, prompt, k, 32)
        assert learners == outcome(of_speculative_greedy, variant, target, draft, prompt, k, 32), (text, k)
        assert learners != generate(target, prompt, 32)[0].tolist()


def test_timed_counts_one_methods_calls_and_changes_no_token():
    target = checkpoints.load("target")
    prompt = corpus.encode("ROMEO:\nI ")[None]
    cpu = torch.device("cpu")
    draft = speculative_decoding.PromptLookupDraft()
    verifier = course_loop.Timed(target, "__call__", cpu)
    proposer = course_loop.Timed(course_loop.as_draft(draft), "propose", cpu)
    tokens, rounds = speculative_decoding.speculative_generate(verifier, proposer, prompt, 3, 20, temperature=0)
    assert torch.equal(tokens, speculative_decoding.speculative_generate(target, draft, prompt, 3, 20, 0)[0])
    assert verifier.calls == len(rounds) == proposer.calls
    assert verifier.seconds > 0 and proposer.seconds > 0


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
            speculative_decoding.speculative_generate(target, draft, prompt, 2, 1, temperature=1.0, generator=g)[0][
                0, -1
            ]
        ] += 1
    top = p.argsort(descending=True)[:5]
    spread = (p[top] * (1 - p[top]) / n).sqrt()
    assert ((counts[top] / n - p[top]).abs() <= 5 * spread + 1e-3).all()


def test_plot_returns_a_figure_that_renders():
    assert figure_png(plots.plot_speculative(alpha=0.6, k=8, cost=0.2)).startswith(b"\x89PNG")


# --- the drafts without a model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_ngram():
    """An n-gram draft over a slice of the training plays: the same code as the full table, faster."""
    return course_loop.NGramDraft(corpus.tokens("train")[:400_000], order=5)


def drafts(small_ngram):
    return {
        "model": checkpoints.load("draft"),
        "n-gram": small_ngram,
        "lookup": speculative_decoding.PromptLookupDraft(),
        "lookup, short matches": speculative_decoding.PromptLookupDraft(longest=4, shortest=1),
    }


def test_every_draft_gives_the_targets_greedy_output(small_ngram):
    target = checkpoints.load("target")
    for text in ("ROMEO:\n", "KING HENRY:\nMy lord, "):
        prompt = corpus.encode(text)[None]
        alone = generate(target, prompt, 80)
        for name, draft in drafts(small_ngram).items():
            for k in (1, 4, 7):
                tokens, rounds = speculative_decoding.speculative_generate(target, draft, prompt, k, 80, temperature=0)
                assert torch.equal(tokens, alone), (name, k, text)
                yielded = [a + 1 for _, a in rounds]  # a call keeps the accepted tokens and one of its own
                assert sum(yielded[:-1]) < 80 <= sum(yielded), (name, k, text)


@pytest.mark.parametrize("which", ["n-gram", "lookup, short matches"])
def test_lookup_drafts_sample_the_targets_distribution(small_ngram, which):
    """At temperature 1 the n-gram draft proposes from its counts and prompt lookup from a one-hot q;
    either way the second generated token is distributed as the target's (the first is seen in the
    prompt "the the the th", so the lookup draft proposes for it)."""
    target = checkpoints.load("target")
    draft = drafts(small_ngram)[which]
    prompt = corpus.encode("the the the th")[None]
    with torch.no_grad():
        p = torch.softmax(target(prompt)[0, -1].double(), -1)
    counts = torch.zeros(256, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    n, proposed = 1000, 0
    for _ in range(n):
        tokens, rounds = speculative_decoding.speculative_generate(target, draft, prompt, 3, 1, 1.0, generator=g)
        counts[tokens[0, -1]] += 1
        proposed += sum(m for m, _ in rounds)
    assert proposed >= n  # the draft really proposed at every call
    top = p.argsort(descending=True)[:5]
    spread = (p[top] * (1 - p[top]) / n).sqrt()
    assert ((counts[top] / n - p[top]).abs() <= 5 * spread + 1e-3).all()


def test_ngram_table_holds_the_most_frequent_follower_of_every_context():
    text = corpus.tokens("validation")[:20_000]
    table = course_loop.NGramDraft(text, order=3)
    data = text.tolist()
    for n in (1, 2, 3):
        by_hand = {}
        for i in range(len(data) - n):
            by_hand.setdefault(tuple(data[i : i + n]), Counter())[data[i + n]] += 1
        contexts, following, counts = table.tables[n]
        assert len(set(contexts.tolist())) == len(by_hand)
        for context in list(by_hand)[::97]:
            found_following, found_counts = table.counts(list(context))
            assert dict(zip(found_following.tolist(), found_counts.tolist(), strict=True)) == by_hand[context]


def test_ngram_draft_reference_agrees_with_the_table_and_its_example():
    assert ANSWERS.ngram_draft(corpus.encode("abcabd"), list(b"xab"), 2, 3) == list(b"cab")
    assert ANSWERS.ngram_draft(torch.tensor([1, 2, 3]), [1], 1, 5) == [2, 3]  # 3 is never followed
    text = corpus.tokens("validation")[:30_000]
    table = course_loop.NGramDraft(text, order=4)
    for start in range(0, 25_000, 1_250):
        context = text[start : start + 4].tolist()
        reference = ANSWERS.ngram_draft(text, context, 4, 6)
        proposed, q = table.propose(context, len(reference), 0.0, None)
        assert proposed == reference  # every context of the reference's run was seen: no back-off
        assert all(row.sum() == 1 and row[x] == 1 for row, x in zip(q, proposed, strict=True))  # one-hot


def test_prompt_lookup_copies_what_followed_the_longest_earlier_match():
    lookup = speculative_decoding.PromptLookupDraft(longest=8, shortest=3)
    assert bytes(lookup.continuation(list(b"to be or not to be"), 4)) == b" or "
    assert lookup.continuation(list(b"abcdefgh"), 4) == []  # nothing repeats: nothing to propose
    assert bytes(lookup.continuation(list(b"xyzxyz"), 10)) == b"xyz"  # only what is there
    with pytest.raises(ValueError, match="shortest"):
        speculative_decoding.PromptLookupDraft(longest=2, shortest=3)


def test_summarise_averages_the_formula_over_the_rounds_as_proposed():
    rounds = [(4, 4), (4, 1), (0, 0), (2, 0)]
    assert speculative_decoding.round_counts(rounds, 4) == {
        "target_calls": 4,
        "draft_calls": 10,
        "accepted": [2, 1, 1, 1],  # (4, 4) at every position, (4, 1) at the first
        "proposed": [3, 2, 1, 1],  # verified up to the first rejection: 4, 2, 0 and 1 positions
    }
    summary = speculative_decoding.summarise(rounds, ANSWERS.expected_tokens_per_call)
    assert summary["alpha"] == pytest.approx(5 / 7)  # 5 accepted of 7 verified proposals
    assert summary["tokens_per_call"] == pytest.approx((5 + 2 + 1 + 1) / 4)
    assert speculative_decoding.summarise(rounds)["formula"] is None
    expected = [ANSWERS.expected_tokens_per_call(5 / 7, m) for m in (4, 4, 0, 2)]
    assert summary["formula"] == pytest.approx(sum(expected) / 4)
    assert summary["drafted_per_call"] == pytest.approx(10 / 4)


def test_measure_drafts_reports_what_the_chapter_prints(small_ngram):
    target = checkpoints.load("target")
    prompts = [corpus.tokens("validation")[s : s + 16][None] for s in (0, 5000)]
    chosen = {"n-gram": small_ngram, "lookup": speculative_decoding.PromptLookupDraft()}
    formula = ANSWERS.expected_tokens_per_call
    results = course_loop.measure_drafts(
        target, chosen, prompts, 3, 24, 0.0, repeats=1, progress=False, tokens_per_call=formula
    )
    for name, draft in chosen.items():
        r = results[name]
        rounds = [
            one for p in prompts for one in speculative_decoding.speculative_generate(target, draft, p, 3, 24, 0.0)[1]
        ]
        assert {k: r[k] for k in ("alpha", "tokens_per_call", "formula")} == {
            k: speculative_decoding.summarise(rounds, formula)[k] for k in ("alpha", "tokens_per_call", "formula")
        }
        assert r["speedup"] > 0 and r["cost"] >= 0 and r["verify"] > 0 and r["step"] > 0
        assert r["formula_speedup"] == pytest.approx(r["formula"] / (1 + r["cost"] * r["drafted_per_call"]))
    reading = speculative_decoding.drafts_reading(results)
    assert "fastest: the" in reading
    assert all(len(r["speedups"]) == len(r["costs"]) == 1 for r in results.values())


def test_the_chapters_runs_by_draft_name_are_the_loops():
    """greedy_run, table_proposals and drafts_measured (what chapters 6 and 7 call, and what the
    learners' copy answers from its recordings) give what the loop and the drafts give."""
    target = checkpoints.load("target")
    prompt = corpus.encode("ROMEO:\n")[None]
    tokens, rounds = speculative_decoding.greedy_run("prompt lookup", prompt[0].tolist(), 3, 30)
    loop = course_loop.speculative_generate(target, speculative_decoding.PromptLookupDraft(), prompt, 3, 30, 0)
    assert tokens == loop[0][0].tolist() and rounds == [list(r) for r in loop[1]]
    assert tokens == generate(target, prompt, 30)[0].tolist()
    context = corpus.encode("my lo").tolist()
    assert (
        speculative_decoding.table_proposals(context, 4)
        == (course_loop.training_ngram_draft().propose(context, 4, 0.0, None)[0])
    )
    assert speculative_decoding.copy_note() == ""  # the instructor's copy runs the loop
    with pytest.raises(ValueError, match="no course draft"):
        course_loop.course_draft("draft", torch.device("cpu"))
    measured = speculative_decoding.drafts_measured(["prompt lookup"], [1000], 16, 3, 12, 0.0, repeats=1)
    result = measured["prompt lookup"]
    assert result["formula"] is None and result["machine"]
    assert sum(result["drafted"]) / len(result["drafted"]) == pytest.approx(result["drafted_per_call"])
    tokens_per_call = ANSWERS.expected_tokens_per_call
    with_formula = speculative_decoding.with_formula(measured, tokens_per_call)["prompt lookup"]
    rounds = [(m, 0) for m in result["drafted"]]
    assert with_formula["formula"] == pytest.approx(speculative_decoding.summarise(rounds, tokens_per_call)["formula"])
    assert with_formula["formula_speedup"] == pytest.approx(
        with_formula["formula"] / (1 + result["cost"] * result["drafted_per_call"])
    )


def test_drafts_reading_says_what_the_numbers_say():
    base = {"k": 4, "verify": 1.0, "drafted_per_call": 4.0, "formula": 3.0, "alpha": 0.8}
    results = {
        "n-gram table": {**base, "tokens_per_call": 3.05, "speedup": 2.4, "cost": 0.003},
        "draft model": {**base, "tokens_per_call": 2.70, "speedup": 0.9, "cost": 0.3, "verify": 1.5},
        "prompt lookup": {
            **base,
            "tokens_per_call": 1.2,
            "formula": 1.2,
            "speedup": 1.1,
            "cost": 0.01,
            "drafted_per_call": 0.5,
        },
    }
    reading = speculative_decoding.drafts_reading(results)
    assert "n-gram table: 3.05 tokens per call, within 5% of the formula's 3.00 (+1.7%)" in reading
    assert "draft model: 2.70 tokens per call, 10% below the formula's 3.00" in reading
    assert "fastest: the n-gram table, 2.40x the target alone, reaching 2x" in reading
    assert "the draft model was slower than the target alone in every repeat: 0.90x (one repeat" in reading
    assert "c = 0.30" in reading and "only 0.5 of the 4 positions" in reading
    assert "1.50 one-token steps for the draft model" in reading
    assert "short of 2x" in speculative_decoding.drafts_reading({"x": results["draft model"]})
    # the case: one draft measured 0.88x in one chapter and 1.34x in another; the repeats say why
    noisy = {**results["draft model"], "speedup": 0.97, "speedups": [0.88, 0.97, 1.34]}
    tie = speculative_decoding.drafts_reading({"x": noisy})
    assert "the x and the target alone are within the noise of each other: 0.97x (0.88 to 1.34x over 3" in tie
    assert "slower" not in tie
    slow = speculative_decoding.drafts_reading({"x": {**noisy, "speedups": [0.88, 0.9, 0.97]}})
    assert "the x was slower than the target alone in every repeat: 0.90x (0.88 to 0.97x over 3 repeats)" in slow


def test_pair_reading_splits_the_gap_into_acceptance_and_cost():
    """Chapter 7's two drafts: the issue's case, the higher acceptance the slower."""
    k = 4

    def draft(alpha, cost, speedups):
        tokens = ANSWERS.expected_tokens_per_call(alpha, k)
        return {"alpha": alpha, "formula": tokens, "cost": cost, "drafted_per_call": float(k), "speedups": speedups}

    def read(distilled):
        hard = {**draft(0.55, 0.30, [1.29, 1.25, 1.3]), "speedup": 1.29}
        words = {"distilled": "the distilled draft", "draft": "the hard-label draft"}
        results = {"draft": hard, "distilled": {**distilled, "speedup": sorted(distilled["speedups"])[1]}}
        return speculative_decoding.pair_reading(results, "distilled", "draft", words)

    reading = read(draft(0.62, 0.45, [1.12, 1.1, 1.15]))
    tokens = ANSWERS.expected_tokens_per_call
    buys, keeps = tokens(0.62, k) / tokens(0.55, k), 2.2 / 2.8
    assert f"the distilled draft's acceptance (0.62 against 0.55) gives it {buys:.2f}x the tokens per call" in reading
    assert f"(c = 0.45 against 0.30: a round of 1 + c k = 2.80 target steps against 2.20) {keeps:.2f}x" in reading
    assert f"{buys * keeps:.2f}x in all, in which the cost counts for more; measured 0.88x: the clock agrees" in reading
    reading = read(draft(0.62, 0.25, [1.5, 1.4, 1.6]))
    assert "both favour the distilled draft" in reading and "the clock agrees" in reading
    reading = read(draft(0.62, 0.37, [1.12, 1.1, 1.15]))  # the formula favours the acceptance, every repeat the cost
    assert "the acceptance counts for more" in reading and "the clock says the other way round" in reading
    assert read(draft(0.62, 0.37, [1.12, 1.3, 1.0])).endswith("the clock cannot tell them apart")


def test_drafts_chart_renders_greedy_and_sampled_points():
    measured = {
        "n-gram table, greedy": {"alpha": 0.81, "cost": 0.003, "speedup": 2.4, "temperature": 0.0},
        "n-gram table, sampled": {"alpha": 0.66, "cost": 0.0, "speedup": 1.6, "temperature": 1.0},
        "draft model, greedy": {"alpha": 0.8, "cost": 0.3, "speedup": 1.2, "temperature": 0.0},
    }
    fig = plots.plot_drafts(measured, k=4)
    labels = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert labels == [f"{name}: measured {r['speedup']:.2f}x" for name, r in measured.items()]
    assert figure_png(fig).startswith(b"\x89PNG")


def test_the_drafts_map_keeps_its_labels_off_the_markers():
    """No contour label and no measured label covers a marker (a new learner found "1.5x" on a
    draft's dot and one speed-up label over another draft's square), on drafts placed as the chapter's
    four land: prompt lookup near c = 0, the model drafts between 0.1 and 0.5."""
    measured = {
        "prompt lookup, greedy": {"alpha": 0.76, "cost": 0.002, "speedup": 1.11, "temperature": 0.0},
        "prompt lookup, sampled": {"alpha": 0.31, "cost": 0.002, "speedup": 1.02, "temperature": 1.0},
        "n-gram table, greedy": {"alpha": 0.81, "cost": 0.004, "speedup": 1.95, "temperature": 0.0},
        "n-gram table, sampled": {"alpha": 0.62, "cost": 0.004, "speedup": 1.5, "temperature": 1.0},
        "draft model, greedy": {"alpha": 0.83, "cost": 0.28, "speedup": 1.32, "temperature": 0.0},
        "draft model, sampled": {"alpha": 0.66, "cost": 0.29, "speedup": 1.15, "temperature": 1.0},
        "distilled draft, greedy": {"alpha": 0.88, "cost": 0.27, "speedup": 1.22, "temperature": 0.0},
        "distilled draft, sampled": {"alpha": 0.7, "cost": 0.28, "speedup": 1.1, "temperature": 1.0},
    }
    fig = plots.plot_drafts(measured, k=4)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    markers = [line.get_window_extent(renderer) for line in ax.get_lines() if line.get_label().endswith("x")]
    assert len(markers) == len(measured)
    labels = [text for text in ax.texts if text.get_text().endswith("x")]  # contours' and the measured ones
    assert len(labels) > len(measured)
    covering = [
        text.get_text()
        for text in labels
        for marker in markers
        if text.get_window_extent(renderer).overlaps(marker.expanded(0.6, 0.6))  # its middle, 60% wide
    ]
    assert covering == []


def test_the_measurements_words_hold_in_both_copies(monkeypatch):
    """Section 5's numbers are this machine's where the course's loop runs and recorded ones in the
    learners' copy: the heading, the chapter's plan and the chart's title claim neither, the prose
    says which rule verifies the sampled runs in each copy, and the copy's note says so too (issue
    55: "Measured on this machine" and "with your speculative_token" stood over recorded runs)."""
    source = (paths.SOLUTIONS / "06_speculative_decoding.py").read_text()
    section = source.split("# ## 5.", 1)[1].split("# %%", 1)[0]
    plan = source.split("# You will:", 1)[1].split("# %%", 1)[0]
    assert "this machine" not in section.splitlines()[0] and "this machine" not in plan
    assert "Where the loop is held back from you" in section and "does not change them there" in section
    measured = {"prompt lookup, greedy": {"alpha": 0.3, "cost": 0.001, "speedup": 1.1, "temperature": 0.0}}
    title = plots.plot_drafts(measured, k=4).axes[0].get_title()
    assert "measured speed-ups" in title and "here" not in title
    monkeypatch.setattr(withheld, "in_learners_copy", lambda: True)
    note = speculative_decoding.copy_note()
    assert "when the copy was made" in note and "verified by the course's rule" in note


PLANTED = planted("speculative_decoding")  # autograder/mistakes/speculative_decoding.py


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("speculative_decoding")  # more plausible mistakes, judged in this process (conftest.assert_caught)

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


def test_a_speedup_names_its_helper_only_where_the_helper_is_wrong_on_the_same_inputs(capsys):
    """The speed-up's check runs the notebook's expected_tokens_per_call at its own alpha and k: a
    helper that fails at alpha = 1 alone is not named for a speed-up wrong of its own, and a helper
    not written yet is named as such (the speed-up itself is answered)."""
    own = MISTAKES["speedup_own_mistake_beside_a_helper_failing_at_alpha_one"].source
    printed = check_cell("speculative_speedup", own, capsys)
    assert "left out of the cost" in printed and "expected_tokens_per_call" not in printed, printed
    blank = "def expected_tokens_per_call(alpha, draft_length):\n    raise NotImplementedError()\n\n\n"
    right = "def speculative_speedup(alpha, draft_length, cost):\n"
    right += "    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost + 1)\n"
    printed = check_cell("speculative_speedup", blank + right, capsys)
    assert "calls your expected_tokens_per_call, which is not written yet" in printed, printed
    assert "not answered yet" not in printed, printed
    printed = check_cell("speculative_speedup", WRONG_HELPER + right.replace(" + 1)", ")"), capsys)
    assert "which fails its own checks: at alpha = " in printed, printed  # the check's own alpha and k
    assert "fix expected_tokens_per_call first" in printed, printed


WRONG_HELPER = "def expected_tokens_per_call(alpha, draft_length):\n"
WRONG_HELPER += "    return (1 - alpha ** draft_length) / (1 - alpha)\n\n\n"


def test_a_speedup_right_for_its_wrong_helper_keeps_its_points():
    """A wrong expected_tokens_per_call is graded once, by its own checks: the speed-up that calls it
    with the right formula passes every check, visible and hidden (a learner's trial lost 5 points for
    one mistake), while the helper's own checks fail."""
    right = "def speculative_speedup(alpha, draft_length, cost):\n"
    right += "    return expected_tokens_per_call(alpha, draft_length) / (draft_length * cost + 1)\n"
    speedup = verdicts("speculative_speedup", WRONG_HELPER + right)
    assert speedup and all(v.passed for v in speedup.values()), speedup
    helper = verdicts("expected_tokens_per_call", WRONG_HELPER)
    assert not any(v.passed for v in helper.values()), helper


def test_a_wrong_quiz_choice_is_told_at_grading_with_its_note(capsys):
    """The quiz's check cell tells nothing of the key (every question has a letter: ok); the graded
    checks, run with the key, name the mistake behind the choice (the key's note on it), the right
    letter and why: what the feedback on a graded notebook shows."""
    from autograder.selfcheck import check

    questions = quiz.questions("speculative_decoding")
    answers = {**autograder_quiz.key("speculative_decoding"), 4: "b"}
    namespace = {"quiz_answers": lambda: answers}
    check("quiz_speculative_decoding", namespace=namespace)
    visible = capsys.readouterr().out
    assert visible.startswith("ok ") and "FAIL" not in visible and questions[3].notes["b"] not in visible
    with pytest.raises(AssertionError, match="1 of 7 checks of quiz_speculative_decoding failed"):
        check("quiz_speculative_decoding", hidden=True, namespace=namespace)
    graded = capsys.readouterr().out
    assert questions[3].notes["b"] in graded and f"The answer is {questions[3].answer}: {questions[3].why}" in graded


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.SpeculativeChart: ({}, {"alpha": 0.6, "k": 7, "cost": 0.2}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_drafts": lambda: plots.plot_drafts(
        {
            "n-gram table, greedy": {"alpha": 0.45, "cost": 0.002, "speedup": 1.3, "temperature": 0},
            "distilled draft, sampled": {"alpha": 0.99, "cost": 0.4, "speedup": 0.9, "temperature": 1},
        }
    ),
}


PROSE_WARNINGS = {  # mistakes the chapter's prose or prompt warns about: its visible checks must catch each
    "alpha_one_divides_by_zero": "def expected_tokens_per_call(alpha, draft_length):\n"
    "    return (1 - alpha ** (draft_length + 1)) / (1 - alpha)\n",
    "ngram_backs_off": "def ngram_draft(text, context, n, k):\n"
    "    text, context, proposed = text.tolist(), list(context), []\n"
    "    for _ in range(k):\n        for width in range(n, 0, -1):\n"
    "            last = context[-width:]\n"
    "            found = [text[i + width] for i in range(len(text) - width) if text[i:i + width] == last]\n"
    "            if found:\n                break\n        if not found:\n            break\n"
    "        token = max(set(found), key=lambda t: (found.count(t), -t))\n"
    "        proposed.append(token)\n        context.append(token)\n    return proposed\n",
}

# the course's answers to the exercises its checks drive with a scenario
SCENARIO_ANSWERS = {
    "speculative_token": ANSWERS.speculative_token,
    "speculative_speedup": ANSWERS.speculative_speedup,
    "expected_tokens_per_call": ANSWERS.expected_tokens_per_call,
}

SEED_QUESTIONS = [  # the tutorial's questions that sit in this chapter's quiz, by the words that identify them
    "What does speculative decoding preserve",
    "drafting more tokens per call stop helping",
]


@pytest.mark.parametrize("case", ["random", "tie"])
def test_every_random_ngram_case_names_a_context_that_was_not_grown(case):
    """Grading draws the random and the tie n-gram cases afresh for each submission: each draw must
    tell the context not grown by the proposals from the right answer, and name it (before, one
    random draw in five did not, and 2 of 1,000 graded submissions kept that point; then 1 of 1,000
    had the tie case not name it)."""
    import numpy as np

    from autograder.chapters import exercise_by_id
    from autograder.chapters.speculative_decoding import judge_ngram
    from autograder.mistakes.speculative_decoding import NOT_GROWN, ngram_variant

    check = next(c for c in exercise_by_id("ngram_draft").checks if c.id == f"ngram_draft.{case}")
    for seed in range(200):
        probe = check.probe(np.random.default_rng(seed))
        text, context, n, k = probe["args"]
        verdict = judge_ngram.__wrapped__(probe, ngram_variant(text, context, n, k, grow=False))
        assert not verdict.passed and NOT_GROWN in verdict.hint, (seed, verdict.hint)
