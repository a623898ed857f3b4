"""Chapter 1: the published figures, the roofline's two regimes, the batching simulator, the
chapter's figures, and the grader's hints for planted mistakes."""

from dataclasses import replace

import pytest

from autograder.mistakes import judged, planted
from autograder.mistakes import prefill_decode as known
from autograder.mistakes.prefill_decode import CRITICAL, MEMORY, ROOFLINE, STATIC, function_cell
from course import evaluation, paths, prefill_decode, withheld
from course.plots import prefill_decode as plots
from course.plots._widgets import figure_png

from conftest import assert_named, judged_in_process

A100 = prefill_decode.PRESETS["A100-80G"]
ANSWERS = withheld.answers("01_prefill_decode")  # the solution cells


def test_weight_memory_of_a_70b_model():
    assert [prefill_decode.weight_bytes(70e9, b) / 1e9 for b in (16, 8, 4)] == [140, 70, 35]


def test_critical_batch_sizes_match_the_published_ratios():
    expected = {"A100-80G": 153, "H100 SXM": 295, "H200": 206, "T4": 203, "RTX 4090": 164}
    for name, value in expected.items():
        assert prefill_decode.critical_batch(prefill_decode.PRESETS[name], 16) == pytest.approx(value, abs=1)
    assert prefill_decode.critical_batch(A100, 8) == pytest.approx(prefill_decode.critical_batch(A100, 16) / 2)


def test_decode_is_memory_bound_below_the_critical_batch_and_compute_bound_above():
    params = 8e9
    one = prefill_decode.decode_step_time(params, 16, 1, A100)
    assert one == pytest.approx(16e9 / A100.bandwidth)
    assert prefill_decode.decode_step_time(params, 16, 64, A100) == pytest.approx(one)  # same weights read, free batch
    big = prefill_decode.decode_step_time(params, 16, 1024, A100)
    assert big == pytest.approx(2 * params * 1024 / A100.peak_flops)


def test_prefill_is_compute_bound_and_grows_with_the_prompt():
    short, long = (prefill_decode.prefill_time(8e9, 16, t, A100) for t in (1000, 4000))
    assert short == pytest.approx(16e12 / A100.peak_flops)
    assert long == pytest.approx(4 * short)
    assert ANSWERS.prefill_flops(8e9, 1000) == 16e12


def test_a_70b_model_at_4_bits_decodes_faster_than_at_16():
    h100 = prefill_decode.PRESETS["H100 SXM"]
    assert prefill_decode.decode_step_time(70e9, 4, 1, h100) == pytest.approx(35e9 / 3.35e12)
    assert prefill_decode.decode_step_time(70e9, 16, 1, h100) == pytest.approx(
        4 * prefill_decode.decode_step_time(70e9, 4, 1, h100)
    )


def test_simulator_conserves_requests_and_tokens():
    trace = prefill_decode.make_trace(60, 10.0, seed=3)
    for continuous in (False, True):
        served = prefill_decode.simulate(trace, 8e9, 16, A100, 8, continuous)
        assert sorted(s.request for s in served) == sorted(trace)
        assert all(s.request.arrival <= s.first_token <= s.finished for s in served)


def test_static_batch_of_one_request_at_a_time_is_the_same_as_continuous():
    trace = prefill_decode.make_trace(30, 2.0, seed=4)
    static = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 1, False))
    continuous = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 1, True))
    assert static == pytest.approx(continuous)


def test_continuous_batching_answers_sooner_at_moderate_load():
    trace = prefill_decode.make_trace(200, 8.0, seed=0)
    static = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 16, False))
    continuous = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 16, True))
    assert continuous["median_ttft"] < static["median_ttft"] / 10
    assert continuous["median_latency"] < static["median_latency"] / 2


def test_continuous_batching_serves_more_when_overloaded():
    trace = prefill_decode.make_trace(200, 20.0, seed=0)
    static = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 16, False))
    continuous = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 16, True))
    assert continuous["throughput"] > 1.2 * static["throughput"]
    assert continuous["p90_latency"] < static["p90_latency"]


def test_static_schedule_by_hand():
    # two requests of 3 and 1 tokens, batch 2: one prefill step that makes the first tokens, then
    # two more decode steps for the longer one; the short one is done after the prefill step
    hw = prefill_decode.Hardware("toy", peak_flops=1e30, bandwidth=1.0, memory_bytes=1e12)  # 1 s per step
    trace = [prefill_decode.Request(0.0, 4, 3), prefill_decode.Request(0.0, 4, 1)]
    served = prefill_decode.simulate(trace, params=0.5, bits=16, hardware=hw, max_batch=2, continuous=False)
    by_output = {s.request.output: s for s in served}
    step = prefill_decode.decode_step_time(0.5, 16, 2, hw) + prefill_decode.prefill_time(0.5, 16, 8, hw)
    assert by_output[1].finished == pytest.approx(step)
    assert by_output[3].finished == pytest.approx(step + 2 * prefill_decode.decode_step_time(0.5, 16, 2, hw))


@pytest.mark.parametrize(
    "call",
    [
        lambda: prefill_decode.decode_step_time(1e9, 16, 0, A100),
        lambda: prefill_decode.make_trace(10, 0.0),
        lambda: prefill_decode.simulate([], 1e9, 16, A100, 0, True),
    ],
)
def test_bad_arguments_say_what_to_do(call):
    with pytest.raises(ValueError, match="must be positive"):
        call()


def test_scaling_bend_finds_where_throughput_stops_growing_with_the_batch():
    from course import evaluation

    throughput = {1: 10.0, 2: 20.0, 4: 38.0, 8: 60.0, 16: 70.0}  # efficiency 1, 1, .95, .75, .44
    assert evaluation.scaling_efficiency(throughput)[8] == pytest.approx(0.75)
    assert evaluation.scaling_bend(throughput) == 16
    assert evaluation.scaling_bend({1: 10.0, 2: 20.0}) is None


@pytest.mark.parametrize(
    "draw",
    [
        lambda: plots.plot_roofline(70e9, 4, 64, 1024, "H100 SXM", measured=[("here", 1.0, 1e12)]),
        lambda: plots.plot_decode_batch(8e9, 16, "A100-80G", {1: 100.0, 8: 700.0}),
        lambda: plots.plot_batching(8.0, 16, n=60),
        lambda: plots.plot_roofline(9e7, 32, 1, 256, A100, measured=[("here", 1.0, 1e12)], formulas=None),
        lambda: plots.plot_decode_batch(9e7, 32, A100, {1: 100.0, 8: 700.0}, formulas=None),
    ],
)
def test_plot_returns_a_figure_that_renders(draw):
    assert figure_png(draw()).startswith(b"\x89PNG")


def _notebook_functions(**changes) -> dict:
    """The chapter's four exercises as a notebook defines them (the solution's formulas), ``changes`` replacing some."""
    found = {
        "weight_memory_gb": lambda params, bits: params * bits / 8 / 1e9,
        "prefill_flops": lambda params, tokens: 2 * params * tokens,
        "roofline_step_time": lambda flops, n_bytes, peak, bandwidth: max(flops / peak, n_bytes / bandwidth),
        "critical_batch_size": lambda peak, bandwidth, bytes_per_param: peak / bandwidth * bytes_per_param / 2,
    }
    return {**found, **changes}


def _blank(*args):
    raise NotImplementedError()


def test_the_notebooks_formulas_drive_the_figures():
    """Formulas.of takes a notebook's four exercises, in the chapter's units, and predicts what the
    course's formulas predict."""
    yours = prefill_decode.Formulas.of(_notebook_functions())
    assert yours.complete and yours.yours == tuple(prefill_decode.TRIED_ON)
    for batch in (1, 64, 512):
        assert prefill_decode.decode_step_time(70e9, 4, batch, A100, yours) == pytest.approx(
            prefill_decode.decode_step_time(70e9, 4, batch, A100)
        )
    assert prefill_decode.prefill_time(8e9, 16, 512, A100, yours) == pytest.approx(
        prefill_decode.prefill_time(8e9, 16, 512, A100)
    )
    assert prefill_decode.critical_batch(A100, 8, yours) == pytest.approx(prefill_decode.critical_batch(A100, 8))
    trace = prefill_decode.make_trace(30, 8.0)
    ours = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 8, True))
    theirs = prefill_decode.summarise(prefill_decode.simulate(trace, 8e9, 16, A100, 8, True, yours))
    assert theirs == pytest.approx(ours)
    wrong = prefill_decode.Formulas.of(_notebook_functions(prefill_flops=lambda params, tokens: params * tokens))
    assert prefill_decode.prefill_time(8e9, 16, 4096, A100, wrong) < prefill_decode.prefill_time(8e9, 16, 4096, A100)


def test_the_notebooks_formulas_that_are_written_are_used_while_others_are_not_yet():
    """A notebook with some of the four written: those are used, the others are None (the course's
    with or_course), and each cell's sentence names which are which. Before, one exercise not
    written made Formulas.of None, and a cell said "your roofline_step_time is not written yet"
    of a written one."""
    some = prefill_decode.Formulas.of(_notebook_functions(weight_memory_gb=_blank, critical_batch_size=_blank))
    assert some.yours == ("prefill_flops", "roofline_step_time") and not some.complete
    assert some.can("roofline_seconds") and not some.can(*prefill_decode.DECODE)
    assert some.missing() == ["weight_memory_gb", "critical_batch_size"]
    assert some.roofline_seconds(1e12, 1e9, 1e14, 1e12) == pytest.approx(0.01)
    filled = some.or_course()
    assert filled.can(*prefill_decode.NAMES) and filled.not_yours() == ["weight_memory_gb", "critical_batch_size"]
    assert prefill_decode.decode_step_time(8e9, 16, 1, A100, filled) == pytest.approx(
        prefill_decode.decode_step_time(8e9, 16, 1, A100)
    )
    assert prefill_decode.whose(some, "This figure", instead="the course's stand in") == (
        "This figure uses your prefill_flops and roofline_step_time; weight_memory_gb and critical_batch_size "
        "are not written yet: the course's stand in."
    )
    assert prefill_decode.whose(some, "The simulator", prefill_decode.PREFILL) == (
        "The simulator uses your prefill_flops and roofline_step_time; weight_memory_gb is not written yet."
    )
    none = prefill_decode.Formulas.of({})
    assert none.yours == () and none.missing() == list(prefill_decode.TRIED_ON)
    assert prefill_decode.whose(none, "This figure", ("critical_batch_of",), "left out") == (
        "Your critical_batch_size is not written yet: left out."
    )
    assert prefill_decode.whose(prefill_decode.Formulas.of(_notebook_functions()), "This figure") == (
        "This figure uses your weight_memory_gb, prefill_flops, roofline_step_time and critical_batch_size."
    )


def _legend(figure) -> tuple[list[str], str]:
    legend = figure.axes[0].get_legend()
    return [t.get_text() for t in legend.get_texts()], legend.get_title().get_text()


def test_a_figure_lists_only_what_it_draws_and_says_what_is_not_drawn():
    """The blank copy's roofline listed "decode" and "prefill" in its legend, drawn nowhere."""
    measured = [("measured decode, batch 1", 4.0, 1e10)]
    for formulas in (None, prefill_decode.Formulas.of({})):
        chart = plots.RooflineChart(measured, formulas).update(9e7, 32, 1, 256, A100)
        assert _legend(chart.figure)[0] == ["measured decode, batch 1"]
        assert len(chart.decode.get_xdata()) == len(chart.prefill.get_xdata()) == 0
        assert "not written yet, so left out:\n  weight_memory_gb" in chart.numbers.get_text()
    only_critical = prefill_decode.Formulas.of({"critical_batch_size": _notebook_functions()["critical_batch_size"]})
    chart = plots.RooflineChart(measured, only_critical).update(9e7, 32, 1, 256, A100)
    assert _legend(chart.figure)[0] == ["measured decode, batch 1"]
    assert "critical batch: 306" in chart.numbers.get_text() and "  roofline_step_time" in chart.numbers.get_text()
    chart = plots.RooflineChart(measured, prefill_decode.REFERENCE).update(9e7, 32, 4, 256, A100)
    assert _legend(chart.figure)[0] == ["decode, batch 4", "prefill, 256 tokens", "measured decode, batch 1"]
    assert "not written" not in chart.numbers.get_text()

    labels, title = _legend(plots.plot_decode_batch(9e7, 32, A100, {1: 100.0, 8: 700.0}, formulas=only_critical))
    assert labels == ["critical batch", "measured"]
    assert title == "not written yet, so not drawn:\nroofline prediction (weight_memory_gb and roofline_step_time)"
    labels, title = _legend(plots.plot_decode_batch(9e7, 32, A100, {1: 100.0, 8: 700.0}))
    assert labels == ["roofline prediction", "critical batch", "measured"] and title == ""


def test_a_chart_whose_stand_ins_were_not_recorded_says_so_instead_of_raising():
    """In the learners' copy the course's formulas answer the calls they were recorded with: beside
    a notebook's answer that gives other numbers, the chart says why it cannot draw the view."""
    from course.withheld import NotRecorded

    def unrecorded(*args):
        raise NotRecorded("not recorded")

    def mix(**formulas):
        return replace(prefill_decode.Formulas.of(_notebook_functions(roofline_step_time=_blank)), **formulas)

    chart = plots.RooflineChart(formulas=mix(roofline_seconds=unrecorded)).update()
    assert chart.numbers.get_text().startswith("the course's formulas for\n  roofline_step_time\nare recorded on")
    assert len(chart.decode.get_xdata()) == 0 and not chart.legend.get_visible()
    assert chart.update(batch=4).legend.get_visible() is False
    batching = plots.BatchingChart(n=20, formulas=mix(roofline_seconds=unrecorded)).update()
    assert batching.numbers.get_text().startswith(
        "the course's formulas for\n  roofline_step_time\nare recorded at the default\nsliders"
    )


def test_the_roofline_chart_asks_every_preset_view_when_built():
    """Built, the chart asks the course's formulas everything its sliders can show on the presets
    (recorded in the instructor's notebook, it answers every view of the learners' copy's chart)."""
    with withheld.recording() as recorded:
        plots.RooflineChart()
    views = [(8e9, 16, 1, 256, "A100-80G"), (405e9, 4, 1024, 16384, "T4"), (1e9, 8, 32, 64, "H200")]
    chart = plots.RooflineChart()
    for view in views:
        with withheld.recording() as wanted:
            chart.update(*view)
        assert wanted, view
        for name, calls in wanted.items():
            assert all(call in recorded[name] for call in calls), (view, name)


def test_the_notebooks_formulas_record_the_course_s_beside_them():
    """While the learners' copy is recorded, the instructor's notebook (whose functions are the
    solution's) calls the course's answer beside each of its own: a blank notebook's calls are recorded."""
    with withheld.recording() as recorded:
        yours = prefill_decode.Formulas.of(_notebook_functions())
        assert prefill_decode.decode_step_time(8e9, 16, 4, A100, yours) == pytest.approx(
            prefill_decode.decode_step_time(8e9, 16, 4, A100)
        )
    assert sorted(recorded) == [
        "solutions.01_prefill_decode.roofline_step_time",
        "solutions.01_prefill_decode.weight_memory_gb",
    ]


PLANTED = planted("prefill_decode")


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_loses_points_with_a_hint(planted_reports, name):
    assert_named(planted_reports[name], PLANTED[name])


MISTAKES = judged("prefill_decode")  # more plausible mistakes, judged in this process (conftest.assert_caught)

# The MISTAKES above that a new learner found passing every visible check, or hinted there as a
# mistake they did not make: the check cell (visible checks only) must fail each and name it.
SEEN_BEFORE_GRADING = [
    "memory_integer_division",
    "memory_bits_floored",
    "roofline_memory_only",
    "critical_two_bytes_always",
    "critical_no_half",
    "critical_divided_without_half",
    "critical_divided",
    "critical_integer_division",
    "static_padding_counted",
    "static_last_batch_dropped",
    "static_every_slot_a_token",
]


@pytest.mark.parametrize("name", SEEN_BEFORE_GRADING)
def test_the_check_cell_fails_the_mistake_and_names_it(name, capsys):
    from conftest import check_cell

    mistake = MISTAKES[name]
    printed = check_cell(mistake.grade_id, mistake.source, capsys)
    assert "FAIL" in printed and mistake.words in printed, printed


def test_every_hint_of_a_number_carries_its_unit(capsys):
    """A step time of 12.26 read "expected 0.0122609, got 12.2609": seconds or milliseconds?"""
    from conftest import check_cell

    printed = check_cell(ROOFLINE[0], function_cell(*ROOFLINE, "return 7.0"), capsys)
    assert "expected 0.0122609 s, got 7 s" in printed, printed
    printed = check_cell(STATIC[0], function_cell(*STATIC, "return 7.0"), capsys)
    assert "expected 76.3158 tokens/s, got 7 tokens/s" in printed, printed
    for name, unit in (("weight_memory_gb", "GB"), ("prefill_flops", "FLOPs"), ("critical_batch_size", "sequences")):
        arguments = next(m.source for m in MISTAKES.values() if m.grade_id == name).split("(")[1].split(")")[0]
        printed = check_cell(name, function_cell(name, arguments, "return 7.0"), capsys)
        assert f", got 7 {unit})" in printed or f"got 7 {unit}\n" in printed, printed


def test_the_chapter_names_no_command_the_learners_copy_lacks():
    """The learners' copy has no `python -m autograder grade`, `make reference` or `make bench`."""
    text = (paths.SOLUTIONS / "01_prefill_decode.py").read_text()
    assert [c for c in ("python -m autograder grade", "make reference", "make bench") if c in text] == []


def test_the_prompts_example_is_the_check_cells_and_has_a_shorter_last_batch():
    """On full batches, three mistakes give batch_size / step_seconds (the idle-slot one was hinted as
    "mean length"); the example's last batch of one tells them apart."""
    from autograder.chapters import prefill_decode as chapter

    example = next(c for c in chapter.STATIC.checks if c.name == "example").probe(None)["args"]
    outputs, batch, step = example
    assert len(outputs) % batch
    expected, mistakes = ANSWERS.static_batch_throughput(*example), known.of_static_batch_throughput(*example)
    text = (paths.SOLUTIONS / "01_prefill_decode.py").read_text()
    assert f"`{outputs}`, batches\n# of {batch} and {step} s per step" in text
    assert f"about {expected:.1f} tokens/s" in text
    assert len({round(value, 6) for _, value in mistakes}) == len(mistakes)


def test_batch_1s_decode_rate_is_the_decode_step_printed_above_it():
    """The chapter printed a decode step of 30.5 ms and, a cell below, batch 1 at 18 tokens/s: two
    measurements of one thing. Batch 1's rate is now that step's."""
    text = (paths.SOLUTIONS / "01_prefill_decode.py").read_text()
    assert "measured = {1: 1 / decode_per_token} | evaluation.decode_throughput(big, batches[1:])" in text
    assert text.count("evaluation.decode_step_seconds(big, batch=1)") == 1


def test_two_mistakes_that_give_the_same_number_share_a_hint_that_names_each():
    """70B at 4 bits: params * 8 / bits and 2 bytes per weight are both 140 GB; the hint names both
    (it once named neither), and a mistake that gives a number of its own is named alone."""
    from autograder.chapters import prefill_decode as chapter

    assert known.told_apart([("seen", 1.0)], [("a", 2.0), ("b", 2.0), ("c", 3.0), ("c", 4.0)]) == [
        ("seen", 1.0),
        (known.JOINED + "a; or b", 2.0),
        ("c", 3.0),
        ("c", 4.0),
    ]
    verdict = chapter.judge_memory({"args": [70e9, 4]}, {"returned": 140.0})
    assert verdict.hint.startswith(known.JOINED) and "multiplied by bits / 8 the wrong way" in verdict.hint
    assert "counted 2 bytes per weight" in verdict.hint and verdict.hint.endswith("(expected 35 GB, got 140 GB)")


def test_a_number_copied_from_a_printed_hint_reads_apart_from_the_expected_one():
    """A hard-coded 104.308 against 104.3077 read "expected 104.308, got 104.308": the hint now
    gives the digits where they differ."""
    from autograder.chapters import prefill_decode as chapter

    params = 104.3077e9 * 8 / 3
    verdict = chapter.judge_memory({"args": [params, 3]}, {"returned": 104.308})
    assert not verdict.passed and verdict.hint == "expected 104.3077 GB, got 104.308 GB", verdict.hint


# Answers that return the values the visible checks print for their inputs (the prompts' examples)
# and 0.0 for any other: each must earn at most a third of its exercise's points.
HARD_CODED = {
    MEMORY[0]: function_cell(
        *MEMORY,
        "return {(70e9, 16): 140.0, (70e9, 8): 70.0, (70e9, 4): 35.0, (7e9, 3): 2.625}.get((params, bits), 0.0)",
    ),
    "prefill_flops": function_cell(
        "prefill_flops", "params, tokens", "return 1.6e13 if (params, tokens) == (8e9, 1000) else 0.0"
    ),
    ROOFLINE[0]: function_cell(
        *ROOFLINE,
        "return 16e9 * 1000 / 312e12 if (flops, n_bytes, peak_flops) == (16e12, 16e9, 312e12) else 0.0",
    ),
    CRITICAL[0]: function_cell(
        *CRITICAL,
        "if (peak_flops, bandwidth) == (312e12, 2.039e12):\n"
        "    return 312e12 / 2.039e12 * bytes_per_param / 2\n"
        "return 0.0",
    ),
    STATIC[0]: function_cell(*STATIC, "return 145 / 1.9 if output_lengths == [10, 40, 20, 30, 5, 15, 25] else 0.0"),
}


@pytest.mark.parametrize("name", sorted(HARD_CODED))
def test_copying_the_visible_checks_values_earns_at_most_a_third(name):
    """The visible checks run the prompts' fixed examples: their points are at most a third of an
    exercise's (the hard-coded answer does pass them), the rest are earned on fresh inputs."""
    from autograder.chapters import exercise_by_id

    from conftest import verdicts

    exercise = exercise_by_id(name)
    found = verdicts(name, HARD_CODED[name])
    passed = [c for c in exercise.checks if found[c.id].passed]
    assert any(c.visible for c in passed), found  # the answer does copy a visible check's value
    assert 3 * sum(c.points for c in passed) <= exercise.points, [c.id for c in passed]


def test_the_reading_of_decode_against_the_memory_roof_follows_the_numbers():
    """ "What holds everywhere: decode at batch 1 stays under the sloped roof" stood beside a reading
    of 123% of that roof: the sentence is now computed from the numbers measured."""
    under = prefill_decode.decode_against_the_memory_roof(90e6, 10e9, 0.0225)
    assert under.startswith("decode at batch 1 ran at 40% of the memory roof") and ": under it" in under
    above = prefill_decode.decode_against_the_memory_roof(90e6, 10e9, 0.009 / 1.23)
    assert "123% of the memory roof" in above and ": above it" in above and "measured low" in above
    text = (paths.SOLUTIONS / "01_prefill_decode.py").read_text()
    assert "What holds everywhere" not in text
    assert "prefill_decode.decode_against_the_memory_roof(n_bytes, bandwidth, decode_per_token)" in text


def test_the_decode_throughput_chart_labels_its_log_axis_where_the_values_are():
    """Measured rates from 40 to 700 tokens/s had one tick label on the log axis, "100"."""
    fig = plots.plot_decode_batch(
        9e7, 32, A100, {1: 50.0, 2: 40.0, 4: 120.0, 8: 300.0, 16: 700.0}, (1, 2, 4, 8, 16), None
    )
    ax = fig.axes[0]
    fig.canvas.draw()
    low, high = ax.get_ylim()
    labels = [t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high and t.get_text()]
    assert len(labels) >= 3, labels
    assert {"50", "700"} <= {t.get_text() for t in ax.texts}  # each measured point carries its value


# Correct answers written their own way: each must keep every point.
VARIANTS = {
    "memory_integers": (
        "weight_memory_gb",
        function_cell("weight_memory_gb", "params, bits", "return params * bits // 8 / 10**9"),
    ),
    "prefill_numpy_imported_in_the_answer": (
        "prefill_flops",
        "import numpy as np\n\n"
        + function_cell("prefill_flops", "params, tokens", "return np.float64(2) * params * tokens"),
    ),
    "roofline_branches": (
        "roofline_step_time",
        function_cell(
            "roofline_step_time",
            "flops, n_bytes, peak_flops, bandwidth",
            "compute, memory = flops / peak_flops, n_bytes / bandwidth\n"
            "if compute > memory:\n    return compute\nreturn memory",
        ),
    ),
    "critical_from_intensity": (
        "critical_batch_size",
        function_cell(
            "critical_batch_size",
            "peak_flops, bandwidth, bytes_per_param",
            "intensity_per_sequence = 2 / bytes_per_param\nreturn (peak_flops / bandwidth) / intensity_per_sequence",
        ),
    ),
    "static_loop": (
        STATIC[0],
        function_cell(
            *STATIC,
            "seconds, tokens = 0.0, 0\nfor start in range(0, len(output_lengths), batch_size):\n"
            "    batch = output_lengths[start:start + batch_size]\n    seconds += max(batch) * step_seconds\n"
            "    tokens += sum(batch)\nreturn tokens / seconds",
        ),
    ),
}


test_mistake_is_named, test_correct_answer_written_its_own_way_keeps_every_point = judged_in_process(MISTAKES, VARIANTS)


def test_decode_batch_reading_names_the_slower_batches_and_why():
    throughput = {1: 12.0, 2: 9.0, 4: 5.0, 8: 14.0}
    why = evaluation.decode_batch_reading(throughput, {1: 1.0, 2: 2.1, 4: 4.0})
    assert "the most tokens per second came at batch 8: 1.2x batch 1" in why
    assert "batch 2 and 4 decoded fewer tokens per second than batch 1" in why
    assert "2 rows of activations takes 2.1x as long as with 1 row" in why
    busy = evaluation.decode_batch_reading(throughput, {1: 1.0, 2: 1.1})
    assert "only 1.1x" in busy and "other work on the machine" in busy
    fine = evaluation.decode_batch_reading({1: 10.0, 2: 19.0}, {1: 1.0, 2: 1.0})
    assert "every batch decoded at least as many tokens per second as batch 1" in fine


def test_linear_row_cost_is_relative_to_one_row():
    from course.model import LanguageModel, ModelConfig

    model = LanguageModel(ModelConfig(d_model=64, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=128, max_seq_len=16))
    cost = evaluation.linear_row_cost(model, rows=(1, 2, 4), repeats=3)
    assert list(cost) == [1, 2, 4] and cost[1] == 1.0 and all(c > 0 for c in cost.values())
    line = evaluation.describe_row_cost({1: 1.0, 2: 2.1})
    assert line.endswith("1 row 1.00x, 2 rows 2.10x the time of 1 row")


# --- the cases tests/test_widgets.py draws this chapter's figures with ------------------------------

CHARTS = {  # each chart class: a view to draw first, one to move to
    plots.RooflineChart: ({"batch": 4}, {"batch": 256, "hardware": "H200"}),
    plots.BatchingChart: ({"rate": 8.0}, {"rate": 30.0, "max_batch": 4}),
}
FIGURES = {  # each plot of measurements, with numbers shaped like the chapter's
    "plot_decode_batch": lambda: plots.plot_decode_batch(9e7, 32, "A100-80G", {1: 50.0, 8: 300.0}),
}
