"""Chapter 2's exercises: lora_parameters, best_low_rank_error, LoRALinear (forward and merge),
finetune_memory_gib, with their visible checks. Each judge compares with the chapter's answer
(``ANSWERS``, its solution cells; for the class, the course's run of the solution's ``LoRALinear``
on the check's inputs, ``COURSE.layer_outputs``) and names the known mistake it matches
(``MISTAKES``, ``autograder/mistakes/lora.py``); the hidden checks are ``autograder/hidden/lora.py``'s."""

from __future__ import annotations

import numpy as np
import torch

from autograder.checks import Check, Exercise, Verdict, compare_tensors, diagnose, judge_number, judges_value
from course import withheld
from course.lora import low_rank_change

ANSWERS = withheld.answers("02_lora")
COURSE = withheld.module("course.answers.lora")
MISTAKES = withheld.module("autograder.mistakes.lora")

# --- lora_parameters ------------------------------------------------------------------------------


@judges_value
def judge_parameters(probe, got):
    expected = ANSWERS.lora_parameters(*probe["args"])
    return judge_number(
        got, expected, MISTAKES.of_lora_parameters(*probe["args"]), "the number of trainable parameters"
    )


def sizes_probe(fixed=None):
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
            sizes_probe([4096, 11008, 8]),
            judge_parameters,
            visible=True,
        ),
    ],
)


# --- best_low_rank_error --------------------------------------------------------------------------


@judges_value
def judge_error(probe, got):
    return judge_number(
        got,
        ANSWERS.best_low_rank_error(*probe["args"]),
        MISTAKES.of_best_low_rank_error(*probe["args"]),
        "the relative error",
        rel=1e-4,
        abs_tol=1e-5,
        python_float=probe["python_float"],
    )


def change_probe(rows, cols, true_rank, noise, rank, python_float=False):
    def make(rng):
        delta = low_rank_change(rows, cols, true_rank, noise, seed=int(rng.integers(1000))).float()
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
            change_probe(48, 32, 4, 0.05, 2, python_float=True),
            judge_error,
            visible=True,
        ),
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
        attempt("b_zero", lambda: bool((layer.lora_B.detach() == 0).all()))

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


def layer_probe(d_in, d_out, rank, alpha, bias, batch=(5,)):
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


def base_output(probe) -> torch.Tensor:
    """The probe's base layer's output on its x, in float64."""
    weight, bias, x = probe["args"][0], probe["args"][1], probe["args"][4]
    return x.double() @ weight.double().T + (0 if bias is None else bias.double())


def layer_outputs(probe) -> dict:
    """The adapted layer's and its merged layer's outputs on the probe's layer, factors and x, by the
    solution's ``LoRALinear`` (``adapted``, ``merged``: ``COURSE.layer_outputs``)."""
    return COURSE.layer_outputs(*probe["args"])


def forward_mistakes(probe):
    """The forward mistakes' outputs on the probe's inputs, asked only for an output that does not match."""
    return lambda: MISTAKES.of_lora_linear(*probe["args"])["forward"]


STEPS = {  # what the scenario was doing at each key of its report, as a hint names it
    "initial": "calling the new layer on x",
    "trainable": "listing the layer's parameters",
    "base_kept": "reading self.base",
    "shapes": "reading lora_A.shape and lora_B.shape",
    "b_zero": "reading lora_B",
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


def _start_mistake(report, probe, initial, hint: str) -> Verdict:
    """Why the new layer's output is not the base layer's: lora_B not at zeros, or (lora_B at zeros)
    a forward that returns its input or leaves out ``base(x)``."""
    x = probe["args"][4]
    b_zero = report.get("b_zero")
    if b_zero is False:
        return Verdict(
            False,
            f"before training the adapted layer must equal the base layer: initialise lora_B to zeros so that B A = 0 "
            f"({hint})",
        )
    if isinstance(initial, torch.Tensor) and initial.shape == x.shape and torch.equal(initial, x):
        return Verdict(
            False, f"forward returns its input x: it must return self.base(x) + (alpha / rank) x A^T B^T ({hint})"
        )
    start = "lora_B starts at zeros, yet before training the output is not the base layer's"
    if isinstance(initial, torch.Tensor) and bool((initial == 0).all()):
        return Verdict(
            False,
            f"{start}: it is all zeros, so forward leaves out base(x): return self.base(x) + (alpha / rank) x A^T B^T "
            f"({hint})",
        )
    return Verdict(False, f"{start}: forward must start from self.base(x) and add (alpha / rank) x A^T B^T ({hint})")


def _adapter_used(report, probe) -> Verdict:
    """Once lora_A and lora_B are set (B not zero), the output must differ from the base layer's: a
    layer that is only its base (forward ``base(x)``) earns nothing for starting at it or for
    freezing it."""
    output, failed = _part(report, "output")
    if failed:
        return failed
    if isinstance(output, torch.Tensor) and _tensor_verdict(output, base_output(probe), "").passed:
        return Verdict(
            False,
            "with lora_A and lora_B set (lora_B not zero) the output is still the base layer's: forward must add "
            "(alpha / rank) x A^T B^T to self.base(x)",
        )
    return Verdict(True)


@judges_value
def judge_start(probe, report):
    initial, failed = _part(report, "initial")
    if failed:
        return failed
    verdict = _tensor_verdict(initial, base_output(probe), "before training, the output")
    if not verdict.passed:
        return _start_mistake(report, probe, initial, verdict.hint)
    used = _adapter_used(report, probe)
    if not used.passed:
        return used
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


def _forward_verdict(report, probe) -> Verdict:
    """The output of the report's layer once lora_A and lora_B are set, against the solution's
    (:func:`layer_outputs`), naming the forward mistake it matches."""
    output, failed = _part(report, "output")
    if failed:
        return failed
    if not isinstance(output, torch.Tensor):
        return Verdict(False, f"the output with A and B set is a {type(output).__name__}, not a torch.Tensor")
    return diagnose(
        output,
        layer_outputs(probe)["adapted"],
        forward_mistakes(probe),
        what="the output with A and B set",
        rtol=1e-4,
        atol=1e-5,
    )


@judges_value
def judge_forward(probe, report):
    return _forward_verdict(report, probe)


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
def judge_frozen(probe, report):
    verdict = _trainable_verdict(report)
    if not verdict.passed:
        return verdict
    kept, failed = _part(report, "base_kept")
    if failed or not kept:
        return Verdict(False, "keep the base layer itself as self.base (wrap it, do not copy it)")
    return _adapter_used(report, probe)


@judges_value
def judge_trains(probe, report):
    """Two optimiser steps on a fresh adapter: only lora_A and lora_B train, B gets a gradient at
    the first (A x is not zero), A at the second (B is no longer zero), and the output moves."""
    verdict = _trainable_verdict(report)
    if not verdict.passed:
        return verdict
    training, failed = _part(report, "training")
    if failed:
        initial, expected = report.get("initial"), base_output(probe)
        if isinstance(initial, torch.Tensor) and initial.shape != expected.shape:
            return _start_mistake(
                report,
                probe,
                initial,
                f"the output's shape is {list(initial.shape)}, "
                f"the base layer's {list(expected.shape)}, so training could not start",
            )
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
def judge_merge(probe, report):
    """The adapter's own output at this probe's alpha (merge() must give it), then the merged
    layer's output and the base left alone."""
    forward = _forward_verdict(report, probe)
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
    verdict = diagnose(
        output,
        layer_outputs(probe)["adapted"],
        lambda: MISTAKES.of_lora_linear(*probe["args"])["merge"],
        what="the merged layer's output",
        rtol=1e-4,
        atol=1e-5,
    )
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
            layer_probe(12, 10, 3, None, False),
            judge_start,
            visible=True,
        ),
        Check(
            "forward",
            1,
            "forward with A and B set, alpha = rank",
            layer_probe(12, 10, 3, None, False),
            judge_forward,
            visible=True,
        ),
        Check(
            "trains",
            1,
            "two optimiser steps: only lora_A and lora_B train, both get gradients, the output moves",
            layer_probe(12, 10, 3, None, True),
            judge_trains,
            visible=True,
        ),
        Check(
            "merge",
            1,
            "alpha = 8, rank 4: forward and merge() give the adapted outputs, the base is left alone",
            layer_probe(16, 12, 4, 8.0, True),
            judge_merge,
            visible=True,
        ),
    ],
)


# --- finetune_memory_gib ----------------------------------------------------------------------------


def memory_numbers(params, method) -> tuple[float, list[tuple[str, float]]]:
    """The fine-tune's GiB by ``method``, and that method's common mistakes' numbers with their hints."""
    return ANSWERS.finetune_memory_gib(params, method), MISTAKES.of_finetune_memory_gib(params, method)


@judges_value
def judge_memory(probe, got):
    method = probe["args"][1]
    return judge_number(got, *memory_numbers(*probe["args"]), f"the memory of {method}", rel=1e-6)


def memory_of_each(function, params) -> dict:
    """The scenario (run in the sandbox, see checks.scenario_source): the learner's function at
    ``params`` for each method, by method."""
    return {method: function(params, method) for method in ("full", "lora", "qlora")}


@judges_value
def judge_memory_of_each(probe, got):
    params = probe["args"][0]
    wrong = [
        f"{method}: {verdict.hint}"
        for method, value in got.items()
        if not (verdict := judge_number(value, *memory_numbers(params, method), f"the memory of {method}")).passed
    ]
    return Verdict(not wrong, "; ".join(wrong))


FINETUNE_MEMORY = Exercise(
    "finetune_memory",
    ("finetune_memory_gib",),
    [
        Check(
            "7b",
            1,
            "7B: full fine-tune (about 104 GiB), LoRA (13 GiB), QLoRA (3.3 GiB)",
            lambda rng: {"call": "finetune_memory_gib", "scenario": memory_of_each, "args": [7e9]},
            judge_memory_of_each,
            visible=True,
        ),
    ],
)

EXERCISES = [LORA_PARAMETERS, BEST_ERROR, LORA_LINEAR, FINETUNE_MEMORY]
