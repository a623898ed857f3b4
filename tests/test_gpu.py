"""The CUDA path, on a machine that has one (``make gpu-check`` runs the tests marked ``gpu``;
elsewhere they are skipped, and say so): the device choice, the Triton kernel against the reference
at the tolerance its device and dtype allow (``course.kernels.TOLERANCE``), the dispatcher, the
course model on the GPU against the CPU, cached decoding, quantization, timing, and grading on a
machine with a GPU. And ``make gpu-check`` itself, on the CPU: it says there is no CUDA and exits 0,
and each of its steps works here on small sizes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from course import checkpoints, corpus, device, evaluation, flash_attention, kernels, paths, quantization, timing
from course.model import generate, sample

CUDA = torch.device("cuda")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check runs it)")


def on_the_gpu(test):
    return pytest.mark.gpu(needs_cuda(test))


@on_the_gpu
def test_the_course_picks_the_gpu_and_can_be_told_not_to():
    assert device.best_device().type == "cuda"
    assert torch.cuda.get_device_name(CUDA) in device.describe(CUDA)
    forced = subprocess.run(
        [sys.executable, "-c", "from course import device; print(device.best_device())"],
        env={**os.environ, "COURSE_DEVICE": "cpu"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert forced.stdout.strip() == "cpu"


CASES = [  # (shape of q, keys, causal, block): ragged lengths, fewer queries than keys, every head dim
    ((2, 3, 100, 32), 100, False, 16),
    ((1, 2, 77, 16), 77, True, 32),
    ((1, 4, 64, 64), 200, True, 64),
    ((2, 2, 333, 128), 333, False, 128),
    ((1, 1, 1024, 64), 1024, True, 64),
    ((1, 2, 50, 256), 90, False, 32),
]


@on_the_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape, n_k, causal, block", CASES)
def test_the_triton_kernel_matches_the_reference_on_the_gpu(shape, n_k, causal, block, dtype):
    pytest.importorskip("triton")
    from course.kernels import flash_attention as kernel

    g = torch.Generator(device=CUDA).manual_seed(block)
    q = torch.randn(*shape, device=CUDA, generator=g).to(dtype)
    k, v = (torch.randn(*shape[:-2], n_k, shape[-1], device=CUDA, generator=g).to(dtype) for _ in range(2))
    expected = flash_attention.naive_attention(q.double(), k.double(), v.double(), causal)
    got = kernel.blockwise_attention(q, k, v, block, causal)
    assert got.dtype == dtype and got.shape == q.shape
    error = (got.double() - expected).abs().max().item()
    assert error < kernels.TOLERANCE[("cuda", dtype)], f"{error:.2e} at {shape}, causal={causal}, block={block}"


@on_the_gpu
def test_the_dispatcher_takes_the_triton_path_for_cuda_tensors(monkeypatch):
    pytest.importorskip("triton")
    from course.kernels import flash_attention as kernel

    calls = []
    real = kernel.blockwise_attention
    monkeypatch.setattr(kernel, "blockwise_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v = (torch.randn(1, 2, 130, 64, device=CUDA) for _ in range(3))
    out = kernels.attention(q, k, v, 64, causal=True)
    assert calls == [1]
    expected = flash_attention.batched_blockwise_attention(q.cpu(), k.cpu(), v.cpu(), 64, causal=True)
    assert (out.cpu() - expected).abs().max().item() < kernels.TOLERANCE[("cuda", torch.float32)]


@on_the_gpu
def test_the_course_model_on_the_gpu_scores_as_on_the_cpu():
    """fp32: cuBLAS without TF32 (torch's default for matmuls) agrees to rounding; bf16 to 0.02 nats."""
    text = corpus.tokens("validation")[:20_000]
    on_cpu = evaluation.text_loss(checkpoints.load("target", "cpu"), text)
    model = checkpoints.load("target", CUDA)
    assert abs(evaluation.text_loss(model, text) - on_cpu) < 1e-3
    assert abs(evaluation.text_loss(model.to(torch.bfloat16), text) - on_cpu) < 0.02


@on_the_gpu
@torch.no_grad()
def test_cached_decoding_on_the_gpu_equals_recomputation():
    """Each cached step's logits against one full forward pass over the same tokens (on a GPU the
    two take different attention kernels, so they agree to rounding, not bit for bit)."""
    model = checkpoints.load("target", CUDA)
    prompt = corpus.tokens("validation")[1000:1032][None].to(CUDA)
    tokens, steps = generate(model, prompt, 64, use_cache=True, return_logits=True)  # steps: (1, 64, vocab)
    full = model(tokens[:, :-1])[:, prompt.shape[1] - 1 :]  # (1, 64, vocab): the same positions at once
    assert (steps - full).abs().max().item() < 1e-3


@on_the_gpu
@torch.no_grad()
def test_sampling_on_the_gpu_with_a_cpu_generator_draws_the_cpus_tokens():
    """Chapters 6 and 7 time sampled generation with CPU generators, whatever the model's device
    (their figures then come from the same draws everywhere): on a GPU this raised."""
    logits = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    on_cpu = sample(logits, 0.8, generator=torch.Generator().manual_seed(1))
    on_gpu = sample(logits.to(CUDA), 0.8, generator=torch.Generator().manual_seed(1))
    assert on_gpu.is_cuda and torch.equal(on_gpu.cpu(), on_cpu)


@on_the_gpu
def test_fine_tuning_a_model_on_the_gpu():
    """Chapter 2 fine-tunes the course model where it is: the training windows go to its device."""
    from course import lora

    model = checkpoints.load("target", CUDA)
    adapter = lora.make_adapter(model, 2)
    lora.use_adapter(model, adapter)
    losses = lora.finetune(
        model, lora.adapter_parameters(adapter), corpus.domain_tokens("adapt"), 2, 3e-3, progress=False
    )
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)


@on_the_gpu
def test_quantization_on_the_gpu_equals_the_cpu():
    weight = quantization.gaussian_matrix(256, 512)
    for bits, group in ((8, None), (4, 64), (3, 32)):
        on_gpu = quantization.round_trip(weight.to(CUDA), bits, group)
        assert on_gpu.is_cuda
        torch.testing.assert_close(on_gpu.cpu(), quantization.round_trip(weight, bits, group))
    codes, scale = quantization.quantize_nf4(weight.to(CUDA), 64)
    expected_codes, expected_scale = quantization.quantize_nf4(weight, 64)
    assert torch.equal(codes.cpu(), expected_codes) and torch.allclose(scale.cpu(), expected_scale)


@on_the_gpu
@pytest.mark.parametrize("out_features, in_features, group", [(256, 256, 64), (576, 1536, 64), (4096, 4096, 128)])
def test_the_fused_int4_product_on_the_gpu_matches_the_reference(out_features, in_features, group):
    from course.kernels import int4
    from course.stored_weights import course_int4_layer

    weight = quantization.gaussian_matrix(out_features, in_features)
    layer = course_int4_layer(weight, group).to(CUDA)
    assert layer.path == "fused cuda", layer.why_reference()
    x = torch.randn(3, in_features, generator=torch.Generator().manual_seed(1))
    expected = int4.reference_linear(x, layer.codes.cpu(), layer.scale.cpu())  # the CPU reference
    got = layer(x.to(CUDA)).cpu()
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert ((got - expected).norm() / expected.norm()).item() < int4.TOLERANCE


@on_the_gpu
def test_timing_waits_for_the_gpu():
    a = torch.randn(2048, 2048, device=CUDA)
    seconds = timing.median_seconds(lambda: a @ a, CUDA, repeats=3)
    assert seconds > 0
    assert timing.matmul_flops(1024, torch.bfloat16, CUDA) > 1e11  # far below any CUDA GPU of the last decade


@on_the_gpu
def test_grading_on_a_machine_with_a_gpu_gives_the_solution_full_marks(instructor_notebooks, tmp_path):
    """The grader's own process sees the GPU; the sandbox is given none. A solution that ran on a
    GPU is graded on its answers alone."""
    from autograder import grade

    from conftest import GENEROUS

    report = grade.grade(instructor_notebooks["03_quantization"], GENEROUS, seed=3)
    assert report.score == report.max_score, report.text()


# --- make gpu-check on a machine without CUDA ---------------------------------------------------------

TOOLS = paths.ROOT / "tools"


def _gpu_check():
    sys.path.insert(0, str(TOOLS))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(TOOLS))
    return gpu_check


def test_gpu_check_without_cuda_says_so_runs_nothing_and_exits_0():
    before = _gpu_check().REPORT.read_text() if _gpu_check().REPORT.exists() else None
    run = subprocess.run(
        [sys.executable, str(TOOLS / "gpu_check.py")],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and run.stdout.startswith("no CUDA device: torch "), run.stdout + run.stderr
    assert "nothing was run" in run.stdout
    assert (_gpu_check().REPORT.read_text() if _gpu_check().REPORT.exists() else None) == before
    dry = subprocess.run(["make", "-n", "gpu-check"], cwd=paths.ROOT, capture_output=True, text=True, check=True)
    assert "tools/gpu_check.py" in dry.stdout


def test_gpu_check_counts_the_gpu_tests():
    """Here every GPU test is skipped: none passed, so the step fails, and the counts say why."""
    row = _gpu_check().gpu_tests(targets=["tests/test_gpu.py"])
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "gpu", "tests/test_gpu.py"],
        cwd=paths.ROOT,
        capture_output=True,
        text=True,
    )
    gpu_tests = len([line for line in collected.stdout.splitlines() if "::" in line])
    assert gpu_tests > 20
    assert row["result"] == "FAILED" and row["detail"] == f"0 passed, 0 failed, {gpu_tests} skipped"


def test_gpu_check_times_a_kernel_against_sdpa_and_judges_it_by_its_tolerance():
    rows = _gpu_check().attention_against_sdpa(
        torch.device("cpu"),
        (64, 96),
        dtype=torch.float32,
        heads=2,
        kernel=flash_attention.batched_blockwise_attention,
        repeats=1,
    )
    assert [r["result"] for r in rows] == ["passed", "passed"]
    assert rows[0]["check"] == "Triton vs SDPA, N=64, float32" and rows[0]["ratio"] > 0
    assert "tolerance 1e-05" in rows[0]["detail"]


def test_gpu_check_runs_notebooks_and_reads_their_checks(tmp_path, kernel):
    import nbformat

    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    for path, last in ((good, "print('ok   one check')"), (bad, "raise ValueError('broken')")):
        cells = ["from course.device import best_device, describe\nprint(describe(best_device()))", last]
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        notebook.metadata["kernelspec"] = {"name": kernel, "display_name": "course", "language": "python"}
        nbformat.write(notebook, path)
    rows = _gpu_check().chapters_on_the_gpu([good, bad], device="cpu")
    assert [(r["check"], r["result"]) for r in rows] == [("good on the GPU", "passed"), ("bad on the GPU", "FAILED")]
    assert rows[0]["detail"] == "1 checks ok, 0 failed; ran on cpu"
    assert "ValueError" in rows[1]["detail"]
    check = _gpu_check()
    check.write(rows, "a machine", 1.0, tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["passed"] is False and len(report["rows"]) == 2
    assert check.table(rows).splitlines()[-1] == "1 of 2 passed"
