"""The thread policy of the measurements: CPUs this process may use, and the faster thread count."""

from __future__ import annotations

import torch

from course import timing


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


def test_choose_threads_times_one_thread_and_all_and_restores_the_count():
    before = torch.get_num_threads()
    calls = []
    chosen, times = timing.choose_threads(lambda: calls.append(torch.get_num_threads()))
    assert set(times) == {1, timing.usable_cpus()} and chosen in times
    assert set(calls) == set(times)  # each count was really in force while timed
    assert torch.get_num_threads() == before
    line = timing.describe_threads(chosen, times)
    assert f"measuring with {chosen} of {timing.usable_cpus()}" in line


def test_describe_threads_says_why():
    assert "busy" in timing.describe_threads(1, {1: 0.05, 4: 0.2})
    assert "all usable CPUs help" in timing.describe_threads(4, {1: 0.2, 4: 0.05})
    assert "GPU" in timing.describe_threads(8, {})
