"""The measurements' shared helpers: the thread policy (CPUs this process may use, and the faster
thread count) and the sentences computed from measured numbers (``course.readings``)."""

from __future__ import annotations

import threading

import pytest
import torch

from course import readings, timing


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_is_the_tightest_along_the_path(tmp_path):
    _write(tmp_path / "a" / "cpu.max", "max 100000\n")
    _write(tmp_path / "a" / "b" / "cpu.max", "150000 100000\n")
    assert timing._cgroup_cpu_quota(tmp_path, "0::/a/b\n") == 1.5
    _write(tmp_path / "cpu.max", "50000 100000\n")
    assert timing._cgroup_cpu_quota(tmp_path, "0::/a/b\n") == 0.5


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    folder = tmp_path / "cpu,cpuacct" / "job"
    _write(folder / "cpu.cfs_quota_us", "200000\n")
    _write(folder / "cpu.cfs_period_us", "100000\n")
    assert timing._cgroup_cpu_quota(tmp_path, "4:cpu,cpuacct:/job\n3:memory:/job\n") == 2.0
    _write(folder / "cpu.cfs_quota_us", "-1\n")
    assert timing._cgroup_cpu_quota(tmp_path, "4:cpu,cpuacct:/job\n") is None
    assert timing._cgroup_cpu_quota(tmp_path / "missing", "0::/\n") is None


def test_usable_cpus_never_exceeds_the_affinity_mask():
    import os

    assert 1 <= timing.usable_cpus() <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value, cap", [("1", 1), ("3", 3), ("0", None), ("many", None), ("", None)])
def test_usable_cpus_keeps_to_omp_num_threads(monkeypatch, value, cap):
    """A process given OMP_NUM_THREADS (a test worker's share of the cores, a batch job's) times
    and chooses among that many threads: a chapter's choice of thread count, and with it the last
    bits of its figures, is then the same however busy the machine is."""
    monkeypatch.setattr(timing, "_cgroup_cpu_quota", lambda: None)
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert timing.usable_cpus() == (cap or 4)


def test_choose_threads_times_one_thread_and_all_and_restores_the_count():
    before = torch.get_num_threads()
    calls = []
    chosen, times = timing.choose_threads(lambda: calls.append(torch.get_num_threads()))
    assert set(times) == {1, timing.usable_cpus()} and chosen in times
    assert set(calls) == set(times)  # each count was really in force while timed
    assert torch.get_num_threads() == before
    line = timing.describe_threads(chosen, times)
    assert f"measuring with {chosen} of {timing.usable_cpus()}" in line


def test_a_block_pinned_to_one_thread_is_not_changed_by_another_python_thread():
    # the grader judges several notebooks in Python threads of one process, and torch's thread
    # count is the process's: a block pinned to 1 must keep 1 while another thread asks for 2
    inside, seen, other_done = threading.Event(), [], threading.Event()

    def other():
        inside.wait()
        with timing.threads(2):
            seen.append(("other", torch.get_num_threads()))
        other_done.set()

    worker = threading.Thread(target=other)
    worker.start()
    with timing.threads(1):
        inside.set()
        other_done.wait(0.5)  # without the lock, the other thread's block runs now and sets 2
        seen.append(("pinned", torch.get_num_threads()))
    worker.join(10)
    assert seen == [("pinned", 1), ("other", 2)]


def test_describe_threads_says_why():
    assert "busy" in timing.describe_threads(1, {1: 0.05, 4: 0.2})
    tie = timing.describe_threads(1, {1: 0.1041, 2: 0.1034})
    assert "all 2 were only 1.01x as fast" in tie and "busy" not in tie and "help" not in tie
    assert "all usable CPUs help: 4.0x one thread's speed" in timing.describe_threads(4, {1: 0.2, 4: 0.05})
    assert "GPU" in timing.describe_threads(8, {})


@pytest.mark.parametrize("four, chosen", [(0.05, 4), (0.09, 1), (0.2, 1)])
def test_all_cpus_are_chosen_only_when_clearly_faster(four, chosen, monkeypatch):
    """One thread takes 0.1 s a call; all four 0.05 s (2x: chosen), 0.09 s (1.1x: a tie on a shared
    machine keeps one thread) or 0.2 s (busy cores)."""
    monkeypatch.setattr(timing, "usable_cpus", lambda: 4)
    monkeypatch.setattr(timing, "repeat_seconds", lambda fn, **_: [0.1 if torch.get_num_threads() == 1 else four])
    assert timing.choose_threads(lambda: None)[0] == chosen


def test_pin_threads_keeps_the_faster_count_and_says_so():
    before = torch.get_num_threads()
    try:
        line = timing.pin_threads(lambda: sum(range(1000)))
        assert torch.get_num_threads() in {1, timing.usable_cpus()}
        assert line.startswith(f"measuring with {torch.get_num_threads()} of {timing.usable_cpus()}")
    finally:
        torch.set_num_threads(before)


def test_faster_reads_the_ratio_both_ways_and_calls_near_ties_even():
    assert readings.faster(2.0, 0.5, "the cache", "no cache") == "the cache is 4.00x faster than no cache"
    assert readings.faster(1.0, 1.3, "bfloat16", "float32") == "bfloat16 is 1.30x slower than float32"
    assert "as fast as float32 (within 5%: 1.03x)" in readings.faster(1.03, 1.0, "bfloat16", "float32")
    with pytest.raises(ValueError, match="positive"):
        readings.faster(0.0, 1.0, "a", "b")


def test_repeats_are_read_as_within_the_noise_unless_every_one_agrees():
    assert readings.spread([1.2, 1.41, 1.34]) == "1.34x (1.20 to 1.41x over 3 repeats)"
    assert readings.spread([1.0, 2.0]) == "1.50x (1.00 to 2.00x over 2 repeats)"
    assert "within the noise" in readings.against_one([0.88, 1.34, 0.97], "a", "b")
    assert readings.against_one([1.1, 1.2, 1.05], "a", "b").startswith("a was faster than b in every repeat: 1.10x")
    assert readings.against_one([0.8, 0.9], "a", "b").startswith("a was slower than b in every repeat")
    assert readings.paired([1.2, 0.9], [1.0, 1.0], "a", "b").startswith("a and b are within the noise")
    assert readings.paired([1.2, 1.8], [1.0, 1.5], "a", "b").startswith("a was faster than b in every repeat: 1.20x")
    with pytest.raises(ValueError, match="same repeats"):
        readings.paired([1.0], [1.0, 2.0], "a", "b")


@pytest.mark.parametrize(
    "float32, bfloat16, words",
    [
        (3.97, 1.0, "3.97x faster than float32: more than the 2.0x that 50% of the bytes can explain, so a cache"),
        (1.9, 1.0, "1.90x faster than float32: 50% of the bytes paid off here"),
        (1.23, 1.0, "1.23x faster than float32: 50% of the bytes paid off only in part (1.23x of the 2.0x they"),
        (1.02, 1.0, "as fast as float32 (within 5%: 1.02x): 50% of the bytes did not pay off here"),
        (1.0, 1.3, "1.30x slower than float32: 50% of the bytes did not pay off here"),
    ],
)
def test_fewer_bytes_never_credits_the_bytes_with_more_than_their_ratio(float32, bfloat16, words):
    assert words in readings.fewer_bytes(float32, bfloat16, 0.5, "bfloat16", "float32")
    with pytest.raises(ValueError, match="between 0 and 1"):
        readings.fewer_bytes(1.0, 1.0, 2.0, "a", "b")


@pytest.mark.parametrize(
    "measured, expected, words",
    [(2.40, 2.38, "within 5% of the formula (+0.8%)"), (3.14, 3.32, "5% below the formula"), (3.0, 2.0, "50% above")],
)
def test_versus_says_above_below_or_within(measured, expected, words):
    assert words in readings.versus(measured, expected)


@pytest.mark.parametrize(
    "share, words",
    [
        (0.1, "far under it"),
        (0.27, "well under it"),
        (0.73, "close under it"),
        (0.95, "at the roof"),
        (1.05, "at the roof"),
        (1.3, "above it"),
    ],
)
def test_share_of_roof_words_follow_the_number(share, words):
    assert readings.share_of_roof(share).startswith(f"{share:.0%} of the memory roofline: {words}")


def test_holds_from_is_the_start_of_the_last_unbroken_run():
    assert readings.holds_from([64, 128, 256, 512], [False, True, True, True]) == 128
    assert readings.holds_from([64, 128, 256], [True, False, True]) == 256  # a dip at 128 breaks the run
    assert readings.holds_from([64, 128], [True, False]) is None
    assert readings.holds_from([256, 64, 128], [True, False, True]) == 128  # order of the lists does not matter


def test_listing_joins_like_a_sentence():
    assert [readings.listing(x) for x in ([], [2], [2, 4], [2, 4, 8])] == ["", "2", "2 and 4", "2, 4 and 8"]
