"""The torch build chosen for a machine (tools/install_torch.py), without installing anything."""

from __future__ import annotations

import sys

import pytest

from conftest import load_tool


@pytest.fixture(scope="module")
def chooser():
    return load_tool("install_torch")


def test_the_cpu_wheel_is_asked_for_by_its_local_version(chooser):
    assert chooser.cpu_spec("torch==2.13.0") == "torch==2.13.0+cpu"
    assert chooser.cpu_spec("torch==2.13.0+cpu") == "torch==2.13.0+cpu"
    assert chooser.cpu_spec("torch>=2.2") == "torch>=2.2"  # a range cannot name a local version


@pytest.mark.parametrize(
    "platform, machine, gpu, expected",
    [
        ("linux", "x86_64", False, "cpu"),
        ("linux", "x86_64", True, "cuda"),
        ("linux", "aarch64", False, "default"),
        ("darwin", "arm64", False, "default"),
        ("win32", "AMD64", True, "default"),
    ],
)
def test_build_follows_the_machine(chooser, monkeypatch, platform, machine, gpu, expected):
    monkeypatch.delenv("TORCH_BUILD", raising=False)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(chooser.platform, "machine", lambda: machine)
    monkeypatch.setattr(chooser, "has_nvidia_gpu", lambda: gpu)
    assert chooser.wanted_build() == expected


def test_the_build_can_be_forced_and_a_typo_is_refused(chooser, monkeypatch):
    monkeypatch.setattr(chooser, "has_nvidia_gpu", lambda: True)
    monkeypatch.setenv("TORCH_BUILD", "CPU")
    assert chooser.wanted_build() == "cpu"
    monkeypatch.setenv("TORCH_BUILD", "rocm")
    with pytest.raises(SystemExit, match="use cpu or cuda"):
        chooser.wanted_build()


def test_an_unreachable_index_is_reported_unreachable(chooser):
    assert chooser.reachable("http://index.invalid/whl/cpu/torch/", seconds=2) is False


def test_without_a_wheel_cache_or_the_cpu_index_pypi_is_used_with_a_warning(chooser, monkeypatch, capsys):
    calls = []

    def fake_pip(*args, quiet=False):
        calls.append(args)
        return "--no-index" not in args  # no local wheel cache

    monkeypatch.delenv("TORCH_INDEX", raising=False)
    monkeypatch.setenv("TORCH_BUILD", "cpu")
    monkeypatch.setattr(chooser, "pip", fake_pip)
    monkeypatch.setattr(chooser, "reachable", lambda url, seconds=5: False)
    line = chooser.install("torch==2.13.0")
    assert calls == [("--no-index", "--no-deps", "torch==2.13.0+cpu"), ("torch==2.13.0",)]
    assert "CUDA build" in line and "cannot be reached" in capsys.readouterr().err


def test_the_local_cache_comes_first_then_the_requirements(chooser, monkeypatch):
    calls = []
    monkeypatch.delenv("TORCH_INDEX", raising=False)
    monkeypatch.setenv("TORCH_BUILD", "cpu")
    monkeypatch.setattr(chooser, "pip", lambda *args, quiet=False: calls.append(args) or True)
    monkeypatch.setattr(chooser, "reachable", lambda url, seconds=5: pytest.fail("no network when the cache has it"))
    assert "local wheel cache" in chooser.install("torch==2.13.0")
    assert calls == [("--no-index", "--no-deps", "torch==2.13.0+cpu"), ("torch==2.13.0+cpu",)]
