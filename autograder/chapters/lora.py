"""Chapter 2's exercises: lora_parameters, best_low_rank_error, LoRALinear (forward and merge),
finetune_memory_gib. Each check names the mistakes it can recognise in its hint."""

from __future__ import annotations

import math

import numpy as np
import torch

from autograder.checks import (
    Check,
    Exercise,
    Requirement,
    Verdict,
    compare_tensors,
    diagnose,
    judge_number,
    judges_value,
)
from course import lora
from course.withheld import withheld

# --- lora_parameters ------------------------------------------------------------------------------


@withheld
def _parameters_numbers(d_in, d_out, rank) -> tuple[int, list[tuple[str, int]]]:
    """The adapter's trainable numbers, and the common mistakes' numbers with their hints."""
    mistakes = [
        ("counted the full matrix: the adapter is A (r x d_in) plus B (d_out x r)", d_in * d_out),
        ("used d_in for both factors: B is (d_out x r), so the count is r (d_in + d_out)", 2 * rank * d_in),
        ("used d_out for both factors: A is (r x d_in), so the count is r (d_in + d_out)", 2 * rank * d_out),
        ("multiplied by the rank twice or squared it: r (d_in + d_out)", rank * rank * (d_in + d_out)),
        ("counted A only: B (d_out x r) trains too", rank * d_in),
        ("counted B only: A (r x d_in) trains too", rank * d_out),
        ("multiplied d_in by d_out: the two factors are added, r (d_in + d_out)", rank * d_in * d_out),
    ]
    return rank * (d_in + d_out), mistakes


@judges_value
def _judge_parameters(probe, got):
    return judge_number(got, *_parameters_numbers(*probe["args"]), "the number of trainable parameters")


def _sizes(fixed=None):
    def make(rng):
        args = fixed or [
            int(rng.integers(16, 5000)),
            int(rng.integers(16, 5000)),
            int(rng.choice([1, 2, 4, 8, 16, 64])),
        ]
        return {"call": "lora_parameters", "args": args}

    return make


LORA_PARAMETERS = Exercise(
    "lora_parameters",
    ("lora_parameters",),
    [
        Check(
            "mlp",
            1,
            "a 4096 -> 11008 layer (a 7B model's MLP) at rank 8",
            _sizes([4096, 11008, 8]),
            _judge_parameters,
            visible=True,
        ),
        Check("other", 1, "a rectangular layer", _sizes(), _judge_parameters),
    ],
    requirements=[
        Requirement("the trainable numbers of A (r x d_in) and B (d_out x r): r (d_in + d_out)", ("mlp", "other")),
        Requirement("d_in and d_out may differ", ("mlp", "other")),
    ],
)


# --- best_low_rank_error --------------------------------------------------------------------------


@withheld
def _error_numbers(delta: torch.Tensor, rank: int) -> tuple[float, list[tuple[str, float]]]:
    """The best rank-``rank`` relative error of ``delta``, and the common mistakes' numbers with their hints."""
    s = torch.linalg.svdvals(delta.double())
    total = s.square().sum()
    kept = lambda r: math.sqrt((s[r:].square().sum() / total).item())  # noqa: E731
    return lora.best_low_rank_error(delta, rank), [
        ("the singular values were not squared: ||.||_F^2 is the sum of sigma_i^2", (s[rank:].sum() / s.sum()).item()),
        ("returned the squared relative error: take the square root", kept(rank) ** 2),
        ("returned the absolute error: divide by ||delta||", math.sqrt(s[rank:].square().sum().item())),
        (f"kept {rank - 1} singular values, one too few: keep the largest `rank`", kept(rank - 1)),
        (f"kept {rank + 1} singular values, one too many", kept(rank + 1)),
        (
            "kept the smallest singular values: svdvals returns them largest first",
            math.sqrt((s[: len(s) - rank].square().sum() / total).item()),
        ),
        (
            "used the spectral norm (the largest singular value): the Frobenius norm sums all sigma_i^2",
            (s[rank] / s[0]).item() if rank < len(s) else 0.0,
        ),
        (
            "divided by the norm of the approximation, not of delta",
            kept(rank) * math.sqrt(total.item()) / max(math.sqrt(s[:rank].square().sum().item()), 1e-300),
        ),
    ]


@judges_value
def _judge_error(probe, got):
    return judge_number(
        got,
        *_error_numbers(*probe["args"]),
        "the relative error",
        rel=1e-4,
        abs_tol=1e-5,
        python_float=probe["python_float"],
    )


def _change(rows, cols, true_rank, noise, rank, python_float=False):
    def make(rng):
        delta = lora.low_rank_change(rows, cols, true_rank, noise, seed=int(rng.integers(1000))).float()
        return {"call": "best_low_rank_error", "args": [delta, rank], "python_float": python_float}

    return make


BEST_ERROR = Exercise(
    "best_low_rank_error",
    ("best_low_rank_error",),
    [
        Check(
            "below",
            1,
            "a rank-4 change plus noise, at rank 2",
            _change(48, 32, 4, 0.05, 2, python_float=True),
            _judge_error,
            visible=True,
        ),
        Check(
            "at_rank",
            1,
            "the same kind of change at rank 4 and 6 (the noise)",
            _change(64, 40, 4, 0.1, 6),
            _judge_error,
        ),
        Check("exact", 1, "an exactly rank-3 change at rank 3 (zero)", _change(30, 50, 3, 0.0, 3), _judge_error),
    ],
    requirements=[
        Requirement(
            "sqrt(sum of sigma_i^2 beyond rank / sum of all sigma_i^2), the largest singular values kept",
            ("below", "at_rank"),
        ),
        Requirement("returned as a Python float", ("below",)),
        Requirement("an exactly low-rank change gives 0 (edge case)", ("exact",)),
    ],
)


# --- LoRALinear -------------------------------------------------------------------------------------


def lora_layer(cls, weight, bias, rank, alpha, x, lora_A, lora_B) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): wrap an ``nn.Linear`` of
    ``weight`` and ``bias`` in the learner's ``cls`` and report, step by step, the output before
    training, which parameters train, the output once A and B are set, the merged layer's output
    and type, and what two optimiser steps on a fresh adapter do (the gradient each factor gets,
    whether the output moves). A failing step is reported and the others still run. The global
    random generator is seeded inside (and restored after), so that a random initialisation, and
    a hint quoting its outputs, is the same in every run."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):  # the learner's random initialisation, the same in every run
        torch.manual_seed(0)

        def attempt(key: str, make) -> None:
            try:
                report[key] = make()
            except Exception as error:
                report[key] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}

        def linear():
            made = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
            with torch.no_grad():
                made.weight.copy_(weight)
                if bias is not None:
                    made.bias.copy_(bias)
            return made

        def adapter(wrapped):
            return cls(wrapped, rank) if alpha is None else cls(wrapped, rank, alpha)

        base = linear()
        original = base.weight.detach().clone()
        report: dict = {}
        layer = adapter(base)
        attempt("initial", lambda: layer(x).detach())
        attempt("trainable", lambda: sorted(n for n, p in layer.named_parameters() if p.requires_grad))
        attempt("base_kept", lambda: getattr(layer, "base", None) is base)
        attempt("shapes", lambda: [list(layer.lora_A.shape), list(layer.lora_B.shape)])

        def training():
            fresh = linear()
            trained = adapter(fresh)
            factors = {"lora_A": trained.lora_A, "lora_B": trained.lora_B}
            zero_at_start = {name: bool((f.detach() == 0).all()) for name, f in factors.items()}
            goal = fresh(x).detach() + 1.0  # an output the adapter must move towards
            before = trained(x).detach()
            trainable = [p for p in trained.parameters() if p.requires_grad]
            steps = []
            for _ in range(2):  # plain gradient descent (torch.optim's first optimiser takes seconds to set up)
                for parameter in trainable:
                    parameter.grad = None
                (trained(x) - goal).square().mean().backward()
                steps.append({n: None if f.grad is None else float(f.grad.abs().max()) for n, f in factors.items()})
                with torch.no_grad():
                    for parameter in trainable:
                        if parameter.grad is not None:
                            parameter -= 0.5 * parameter.grad
            return {
                "zero_at_start": zero_at_start,
                "gradients": steps,
                "moved": float((trained(x).detach() - before).abs().max()),
            }

        attempt("training", training)

        def set_factors():
            with torch.no_grad():
                layer.lora_A.copy_(lora_A)
                layer.lora_B.copy_(lora_B)
            return layer(x).detach()

        attempt("output", set_factors)

        def merged():
            plain = layer.merge()
            return {
                "type": type(plain).__name__,
                "output": plain(x).detach(),
                "base_unchanged": bool(torch.equal(base.weight.detach(), original)),
            }

        attempt("merged", merged)
        return report


def _layer_probe(d_in, d_out, rank, alpha, bias, batch=(5,)):
    def make(rng):
        g = lambda *shape, s=1.0: torch.from_numpy(rng.normal(0, s, size=shape).astype(np.float32))  # noqa: E731
        return {
            "call": "LoRALinear",
            "scenario": lora_layer,
            "args": [
                g(d_out, d_in, s=0.1),
                g(d_out, s=0.1) if bias else None,
                rank,
                alpha,
                g(*batch, d_in),
                g(rank, d_in, s=0.3),
                g(d_out, rank, s=0.3),
            ],
        }

    return make


@withheld
def _layer_outputs(weight, bias, rank, alpha, x, a, b) -> dict:
    """In float64, for the probe's layer and factors: the base layer's output (``base``), the
    adapted layer's (``adapted``), and the outputs of the common mistakes of forward and of merge
    (``forward``, ``merge``: lists of (hint, output))."""
    base = x.double() @ weight.double().T + (0 if bias is None else bias.double())
    scale = (rank if alpha is None else alpha) / rank
    update = x.double() @ a.double().T @ b.double().T
    adapted = base + scale * (x.double() @ a.double().T @ b.double().T)
    alpha_value = rank if alpha is None else alpha
    forward = [
        (
            "alpha defaults to the rank (scale 1): with alpha=None, use alpha = rank, not 1",
            base + update / rank if alpha is None else adapted,
        ),
        ("the update was not divided by the rank: scale it by alpha / rank", base + alpha_value * update),
        ("the update was not scaled: multiply it by alpha / rank", base + update),
        ("the scale is upside down: alpha / rank, not rank / alpha", base + rank / alpha_value * update),
        ("the base layer's output is missing: return base(x) plus the scaled update", adapted - base),
    ]
    merge = [
        ("the merged weight was not scaled: weight + (alpha / rank) * lora_B @ lora_A", base + update),
        (
            "the merged layer lost the base's bias: copy base.bias into it",
            adapted - (0 if bias is None else bias.double()),
        ),
        ("the merged layer is the base alone: add (alpha / rank) * lora_B @ lora_A to its weight", base),
    ]
    return {"base": base, "adapted": adapted, "forward": forward, "merge": merge}


def _known(mistakes: list[tuple[str, torch.Tensor]]) -> list[tuple[str, object]]:
    """Recorded mistakes' outputs as :func:`autograder.checks.diagnose` takes them."""
    return [(hint, lambda wrong=wrong: wrong) for hint, wrong in mistakes]


STEPS = {  # what the scenario was doing at each key of its report, as a hint names it
    "initial": "calling the new layer on x",
    "trainable": "listing the layer's parameters",
    "base_kept": "reading self.base",
    "shapes": "reading lora_A.shape and lora_B.shape",
    "training": "two training steps on a fresh layer (forward, backward, update)",
    "output": "forward once lora_A and lora_B are set",
    "merged": "merge() and the merged layer's output",
}
NO_GRAPH = "does not require grad"  # what torch's backward() says of a loss that depends on no trainable tensor


def _part(report, key: str):
    """The report's ``key``, or a failing verdict saying what went wrong in that step."""
    if not isinstance(report, dict):
        return None, Verdict(False, f"LoRALinear could not be tested: {report!r}"[:300])
    value = report.get(key)
    if isinstance(value, dict) and "error" in value:
        return None, Verdict(False, f"{STEPS[key]} raised {value['error']}")
    if value is None:
        return None, Verdict(False, f"{key} could not be checked")
    return value, None


def _tensor_verdict(got, expected, what) -> Verdict:
    if not isinstance(got, torch.Tensor):
        return Verdict(False, f"{what} is a {type(got).__name__}, not a torch.Tensor")
    same, difference = compare_tensors(got, expected, rtol=1e-4, atol=1e-5)
    return Verdict(same, "" if same else f"{what}: {difference}")


@judges_value
def _judge_start(probe, report):
    initial, failed = _part(report, "initial")
    if failed:
        return failed
    verdict = _tensor_verdict(initial, _layer_outputs(*probe["args"])["base"], "before training, the output")
    if not verdict.passed:
        return Verdict(
            False,
            "before training the adapted layer must equal the base layer: initialise lora_B to "
            f"zeros so that B A = 0 ({verdict.hint})",
        )
    shapes, failed = _part(report, "shapes")
    weight, _, rank = probe["args"][:3]
    if failed:
        return Verdict(False, f"name the factors lora_A and lora_B ({failed.hint})")
    if shapes != [[rank, weight.shape[1]], [weight.shape[0], rank]]:
        return Verdict(
            False,
            f"lora_A and lora_B have shapes {shapes}; expected (rank, d_in) = "
            f"{[rank, weight.shape[1]]} and (d_out, rank) = {[weight.shape[0], rank]}",
        )
    return Verdict(True)


def _forward_verdict(report, expected: dict) -> Verdict:
    """The output of the report's layer once lora_A and lora_B are set, against ``expected``
    (:func:`_layer_outputs`), naming the forward mistake it matches."""
    output, failed = _part(report, "output")
    if failed:
        return failed
    if not isinstance(output, torch.Tensor):
        return Verdict(False, f"the output with A and B set is a {type(output).__name__}, not a torch.Tensor")
    return diagnose(
        output,
        expected["adapted"],
        _known(expected["forward"]),
        what="the output with A and B set",
        rtol=1e-4,
        atol=1e-5,
    )


@judges_value
def _judge_forward(probe, report):
    return _forward_verdict(report, _layer_outputs(*probe["args"]))


def _trainable_verdict(report) -> Verdict:
    """Whether lora_A and lora_B, and nothing else, train (the base's parameters frozen)."""
    trainable, failed = _part(report, "trainable")
    if failed:
        return failed
    if trainable == ["lora_A", "lora_B"]:
        return Verdict(True)
    missing = sorted({"lora_A", "lora_B"} - set(trainable))
    kind = "an nn.Parameter" if len(missing) == 1 else "nn.Parameters"
    return Verdict(
        False,
        (f"the parameters that train are {trainable}" if trainable else "no parameter of the layer trains")
        + "; only lora_A and lora_B should: "
        + (
            f"make {' and '.join(missing)} {kind} (registered on self, requires_grad left on)"
            if missing
            else "call requires_grad_(False) on the base layer's parameters"
        ),
    )


@judges_value
def _judge_frozen(probe, report):
    verdict = _trainable_verdict(report)
    if not verdict.passed:
        return verdict
    kept, failed = _part(report, "base_kept")
    if failed or not kept:
        return Verdict(False, "keep the base layer itself as self.base (wrap it, do not copy it)")
    return Verdict(True)


@judges_value
def _judge_trains(probe, report):
    """Two optimiser steps on a fresh adapter: only lora_A and lora_B train, B gets a gradient at
    the first (A x is not zero), A at the second (B is no longer zero), and the output moves."""
    verdict = _trainable_verdict(report)
    if not verdict.passed:
        return verdict
    training, failed = _part(report, "training")
    if failed:
        if NO_GRAPH in report["training"]["error"]:
            return Verdict(
                False,
                "the layer's output does not depend on lora_A or lora_B, so backward() had nothing to train "
                f"and raised ({report['training']['error']}): forward must use the nn.Parameters themselves, "
                "not .data, .detach() or a copy made under torch.no_grad()",
            )
        return failed
    zero, (first, second) = training["zero_at_start"], training["gradients"]
    if zero.get("lora_A") and zero.get("lora_B"):
        return Verdict(
            False,
            "lora_A starts at zeros: with lora_B at zeros too, neither factor ever gets a gradient and the "
            "adapter never trains. Start lora_A random, e.g. torch.randn(rank, in_features) / math.sqrt(in_features)",
        )
    if zero.get("lora_A"):
        return Verdict(
            False,
            "lora_A starts at zeros and lora_B random: the reverse of LoRA's initialisation. Start lora_A random "
            "(e.g. torch.randn(rank, in_features) / math.sqrt(in_features)) and lora_B at zeros",
        )
    for name in ("lora_A", "lora_B"):
        if first.get(name) is None:
            return Verdict(
                False,
                f"{name} gets no gradient: it must be an nn.Parameter that forward uses as it is "
                "(not .data, .detach() or a copy made under torch.no_grad())",
            )
    if not first["lora_B"] > 0:
        return Verdict(
            False,
            "lora_B got a gradient of zero at the first step although lora_A is not zero: forward's output must "
            "change with lora_B, through (alpha / rank) x A^T B^T with a scale that is not 0",
        )
    if not second["lora_A"] > 0:
        return Verdict(False, "lora_A got no gradient even once lora_B had moved: forward must use lora_A")
    if not training["moved"] > 1e-6:
        return Verdict(False, "the output did not move after two optimiser steps on lora_A and lora_B")
    return Verdict(True)


@judges_value
def _judge_merge(probe, report):
    """The adapter's own output at this probe's alpha (merge() must give it), then the merged
    layer's output and the base left alone."""
    e = _layer_outputs(*probe["args"])
    forward = _forward_verdict(report, e)
    if not forward.passed:
        rank, alpha = probe["args"][2:4]
        return Verdict(False, f"forward at alpha = {alpha:g}, rank {rank}, before merging: {forward.hint}")
    merged, failed = _part(report, "merged")
    if failed:
        return failed
    if merged.get("type") != "Linear":
        return Verdict(False, f"merge() returned a {merged.get('type')}; it should return an nn.Linear")
    output = merged.get("output")
    if not isinstance(output, torch.Tensor):
        return Verdict(False, f"the merged layer's output is a {type(output).__name__}, not a torch.Tensor")
    verdict = diagnose(output, e["adapted"], _known(e["merge"]), what="the merged layer's output", rtol=1e-4, atol=1e-5)
    if not verdict.passed and verdict.hint.startswith("the merged layer's output"):
        return Verdict(
            False,
            f"the merged layer must give the adapted layer's outputs: weight + (alpha / rank) B A, "
            f"and the base's bias ({verdict.hint})",
        )
    if not verdict.passed:
        return verdict
    if not merged.get("base_unchanged"):
        return Verdict(
            False,
            "merge() changed the base layer's weight: build a new nn.Linear, so that other "
            "adapters sharing the base still work",
        )
    return Verdict(True)


LORA_LINEAR = Exercise(
    "lora_linear",
    ("LoRALinear",),
    [
        Check(
            "starts_at_base",
            1,
            "starts equal to the base layer (B = 0), factors of the right shapes",
            _layer_probe(12, 10, 3, None, False),
            _judge_start,
            visible=True,
        ),
        Check(
            "forward",
            1,
            "forward with A and B set, alpha = rank",
            _layer_probe(12, 10, 3, None, False),
            _judge_forward,
            visible=True,
        ),
        Check(
            "trains",
            1,
            "two optimiser steps: only lora_A and lora_B train, both get gradients, the output moves",
            _layer_probe(12, 10, 3, None, True),
            _judge_trains,
            visible=True,
        ),
        Check(
            "merge",
            1,
            "alpha = 8, rank 4: forward and merge() give the adapted outputs, the base is left alone",
            _layer_probe(16, 12, 4, 8.0, True),
            _judge_merge,
            visible=True,
        ),
        Check(
            "alpha",
            1,
            "forward with alpha = 16, rank 4, a bias, inputs (2, 3, d_in)",
            _layer_probe(20, 8, 4, 16.0, True, batch=(2, 3)),
            _judge_forward,
        ),
        Check(
            "frozen",
            1,
            "only lora_A and lora_B train; the base is kept as self.base",
            _layer_probe(12, 10, 2, None, True),
            _judge_frozen,
        ),
    ],
    requirements=[
        Requirement("the base's parameters frozen, the layer itself kept as self.base", ("frozen", "trains")),
        Requirement(
            "lora_A: a random nn.Parameter (rank, in_features); lora_B: a zero nn.Parameter (out_features, rank)",
            ("starts_at_base", "trains", "frozen"),
        ),
        Requirement("equals the base layer before training (B = 0)", ("starts_at_base",)),
        Requirement(
            "forward: base(x) + (alpha / rank) x A^T B^T, for x of shape (..., in_features)",
            ("forward", "alpha", "merge"),
        ),
        Requirement("alpha defaults to the rank (scale 1)", ("forward",)),
        Requirement("both factors can train (and only they): each gets a gradient, the output moves", ("trains",)),
        Requirement(
            "merge(): a new nn.Linear with weight + (alpha / rank) B A and the base's bias, same outputs", ("merge",)
        ),
        Requirement("merge() leaves the base layer unchanged", ("merge",)),
    ],
)


# --- finetune_memory_gib ----------------------------------------------------------------------------


@withheld
def _memory_numbers(params, method) -> tuple[float, list[tuple[str, float]]]:
    """The fine-tune's GiB by ``method``, and that method's common mistakes' numbers with their hints."""
    gib = lambda per: params * per / lora.GiB  # noqa: E731
    per = {"full": 16, "lora": 2, "qlora": 0.5}[method]
    mistakes = {
        "full": [
            (
                "12 bytes per parameter instead of 16: a 4-byte part is missing, the fp32 master copy or one of "
                "Adam's two fp32 moments (2 + 2 + 8 + 4)",
                gib(12),
            ),
            ("left out the gradients: full fine-tuning keeps one per weight, in bf16 (2 + 2 + 8 + 4)", gib(14)),
            ("counted the gradients in fp32: they are bf16, 2 bytes (2 + 2 + 8 + 4)", gib(18)),
            ("counted the weights alone: full fine-tuning adds gradients, Adam's moments and a master copy", gib(2)),
        ],
        "lora": [
            ("counted the frozen weights in fp32, 4 bytes: LoRA keeps them in bf16, 2 bytes", gib(4)),
            ("counted full fine-tuning's 16 bytes: LoRA's frozen weights have no gradients or moments", gib(16)),
            ("counted the weights in 4 bits, as QLoRA does: LoRA keeps them in bf16, 2 bytes", gib(0.5)),
        ],
        "qlora": [
            ("counted the NF4 weights as 1 byte: 4 bits is half a byte", gib(1)),
            ("counted 4 bytes per weight: NF4 stores 4 bits, half a byte", gib(4)),
            ("counted the frozen weights in bf16, 2 bytes, as LoRA does: QLoRA keeps them in 4 bits", gib(2)),
            ("counted full fine-tuning's 16 bytes: QLoRA's frozen weights have no gradients or moments", gib(16)),
        ],
    }[method]
    return lora.finetune_memory_gib(params, method), [
        ("divided by 1e9: the answer is in GiB, 2**30 bytes", params * per / 1e9),
        *mistakes,
    ]


@judges_value
def _judge_memory(probe, got):
    method = probe["args"][1]
    return judge_number(got, *_memory_numbers(*probe["args"]), f"the memory of {method}", rel=1e-6)


def memory_of_each(function, params) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's function at
    ``params`` for each method, by method."""
    return {method: function(params, method) for method in ("full", "lora", "qlora")}


@judges_value
def _judge_memory_of_each(probe, got):
    params = probe["args"][0]
    wrong = [
        f"{method}: {verdict.hint}"
        for method, value in got.items()
        if not (verdict := judge_number(value, *_memory_numbers(params, method), f"the memory of {method}")).passed
    ]
    return Verdict(not wrong, "; ".join(wrong))


def _memory(method, params=None):
    def make(rng):
        return {"call": "finetune_memory_gib", "args": [params or float(rng.integers(1, 80)) * 1e9, method]}

    return make


FINETUNE_MEMORY = Exercise(
    "finetune_memory",
    ("finetune_memory_gib",),
    [
        Check(
            "7b",
            1,
            "7B: full fine-tune (about 104 GiB), LoRA (13 GiB), QLoRA (3.3 GiB)",
            lambda rng: {"call": "finetune_memory_gib", "scenario": memory_of_each, "args": [7e9]},
            _judge_memory_of_each,
            visible=True,
        ),
        Check("lora", 1, "LoRA, another size", _memory("lora"), _judge_memory),
        Check("qlora", 1, "QLoRA, another size", _memory("qlora"), _judge_memory),
    ],
    requirements=[
        Requirement("full: 16 bytes per parameter (2 + 2 + 8 + 4)", ("7b",)),
        Requirement("lora: 2 bytes per parameter", ("7b", "lora")),
        Requirement("qlora: 0.5 bytes per parameter", ("7b", "qlora")),
        Requirement("in GiB (2**30 bytes)", ("7b", "lora", "qlora")),
    ],
)

EXERCISES = [LORA_PARAMETERS, BEST_ERROR, LORA_LINEAR, FINETUNE_MEMORY]
