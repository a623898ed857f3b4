"""Chapter 9's capstone: the course's target made cheaper and faster within a budget by combining
weights stored in fewer bits (``course.stored_weights``), the KV cache and speculative decoding
(``course.drafts``). The configurations it serves, the budget, and each configuration's graded
figures: bytes counted from the stored tensors, held-out loss on fixed windows, tokens per target
call from greedy runs of the real loop, and the modelled speed-up; its reference numbers.

A worked example: ``budget_passes(OBVIOUS)`` is False (int4 in groups of 64 rounded to nearest:
too many bytes of scales, too much loss).

What names the capstone's answer stays the instructor's: :func:`reference` is never recorded, the
reference numbers of its figures (:data:`ANSWER_NUMBERS`) are left out of the learners' copy's
``data/reference``, and the loop's figures of a configuration within the budget are never
recorded for it (:func:`loop_figures`; the copy counts them, the same numbers).

Not handled: quantized drafts or embeddings (both stay in float32), activation quantization,
sampling in the graded runs (greedy only, so that the figures are deterministic), batches of more
than one sequence. The advice and the guide of the chapter's first half are ``course.technique_guide``;
the learner's server is ``course.learner_server``.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn

from course import checkpoints, corpus, quantization, timing
from course.drafts import DRAFTS, draft_model
from course.model import LanguageModel
from course.stored_weights import CALIBRATED, FORMAT_BITS, GROUPED, StoredLinear, store_weights, weight_bytes
from course.withheld import answers, is_recording, module, not_recorded

CHAPTER = "09_choosing_a_technique"
COURSE = module("course.answers.choosing_a_technique")  # what runs the chapter's answers: instructor-only
GROUP_SIZES = (None, 32, 64)  # every one divides the target's 256 and 704 columns
CALIBRATIONS = ("none", "gptq")  # round to nearest, or chapter 3's GPTQ on training text
DRAFT_COST = 0.25  # a draft call, counted as this share of a target call in the modelled speed-up
BUDGET = {"weight_bytes": 3_700_000, "loss_gap": 0.0025, "modelled_speedup": 1.9}
BUDGET_WORDS = {  # each part of the budget, as the chapter's checks and hints state it
    "weight_bytes": f"the weights served, target and draft as stored, take at most {BUDGET['weight_bytes'] / 1e6:g} MB",
    "loss_gap": f"the held-out loss stays within {BUDGET['loss_gap']:g} nats/byte of the fp32 target's",
    "modelled_speedup": f"tokens per target call / (1 + {DRAFT_COST:g} k), a round's k draft calls at "
    f"{DRAFT_COST:g} of a target call each, is at least "
    f"{BUDGET['modelled_speedup']:g}",
}
DRAFT_LENGTHS = range(1, 9)
EVAL_WINDOWS = 16  # 256-byte windows of the held-out plays for the loss
PROMPT_STARTS = (1000, 90_000, 200_000)  # held-out openings of the greedy runs
PROMPT_LENGTH, NEW_TOKENS = 32, 64


@dataclass(frozen=True)
class Configuration:
    """What the capstone serves: the target's weight format, group size and calibration (rounding to
    nearest, or GPTQ), a draft, and how many tokens the draft proposes per target call. The KV
    cache is always on."""

    weights: str = "fp32"
    group_size: int | None = None
    draft: str = "none"
    draft_length: int = 4
    calibration: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.weights, str) or self.weights not in FORMAT_BITS:
            raise ValueError(f"weights must be one of {', '.join(map(repr, FORMAT_BITS))}, got {self.weights!r}")
        if self.weights in GROUPED and self.group_size not in GROUP_SIZES:
            raise ValueError(
                f"group_size must be None (one scale per row), 32 or 64 (they divide every matrix), "
                f"got {self.group_size!r}"
            )
        if self.weights not in GROUPED and self.group_size is not None:
            raise ValueError(f"{self.weights} stores every weight itself, without scales: set group_size to None")
        if not isinstance(self.calibration, str) or self.calibration not in CALIBRATIONS:
            raise ValueError(
                f"calibration must be one of {', '.join(map(repr, CALIBRATIONS))}, got {self.calibration!r}"
            )
        if self.calibration == "gptq" and self.weights not in CALIBRATED:
            raise ValueError(
                f"GPTQ chooses absmax codes: calibrate {', '.join(CALIBRATED)}, not {self.weights} "
                "(set calibration to 'none')"
            )
        if not isinstance(self.draft, str) or self.draft not in DRAFTS:
            raise ValueError(f"draft must be one of {', '.join(map(repr, DRAFTS))}, got {self.draft!r}")
        if isinstance(self.draft_length, bool) or self.draft_length not in DRAFT_LENGTHS:
            raise ValueError(
                f"draft_length must be a whole number from {DRAFT_LENGTHS[0]} to {DRAFT_LENGTHS[-1]}, "
                f"got {self.draft_length!r}"
            )

    @classmethod
    def from_dict(cls, values) -> Configuration:
        """A configuration from a plain dict such as ``capstone_configuration()`` returns."""
        known = [f.name for f in fields(cls)]
        if not isinstance(values, dict):
            raise ValueError(f"the configuration must be a dict with the keys {', '.join(known)}")
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are {', '.join(known)}")
        return cls(**values)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def format(self) -> tuple[str, int | None, str]:
        """(weights, group_size, calibration): what the stored target depends on."""
        return self.weights, self.group_size, self.calibration

    def weights_label(self) -> str:
        """``int4 g64``, ``int8 per row``, ``int4 per row GPTQ``, ``fp32``."""
        return format_label(*self.format)

    def label(self) -> str:
        """``int4 g64 + distilled k=4``, or ``fp32, no draft``."""
        return self.weights_label() + (
            f" + {self.draft} k={self.draft_length}" if self.draft != "none" else ", no draft"
        )

    def parts(self) -> dict[str, Configuration]:
        """The configuration's parts taken one at a time, and the whole: what the wall clock compares."""
        parts = {}
        if self.weights != "fp32":
            parts[f"{self.weights_label()} weights alone"] = Configuration(
                self.weights, self.group_size, calibration=self.calibration
            )
        if self.draft != "none":
            parts[f"{self.draft} draft, fp32 weights"] = Configuration("fp32", None, self.draft, self.draft_length)
        if len(parts) != 1:
            parts["both" if parts else "fp32 alone"] = self
        return parts


def course_answer(name: str):
    """The course's answer to the chapter's exercise ``name``: its solution cell (recorded, in the learners' copy)."""
    return getattr(answers(CHAPTER), name)


def format_label(weights: str, group_size: int | None = None, calibration: str = "none") -> str:
    """``int4 g64``, ``int8 per row``, ``int4 per row GPTQ``, ``fp32``."""
    groups = f" g{group_size}" if group_size else " per row" * (weights in GROUPED)
    return weights + groups + " GPTQ" * (calibration == "gptq")


def configurations() -> list[Configuration]:
    """Every configuration the capstone serves (with no draft, one whatever its draft length)."""
    formats = [
        (weights, group, calibration)
        for weights in FORMAT_BITS
        for group in (GROUP_SIZES if weights in GROUPED else (None,))
        for calibration in (CALIBRATIONS if weights in CALIBRATED else ("none",))
    ]
    speculation = [("none", DRAFT_LENGTHS[0])] + [(name, k) for name in DRAFTS if name != "none" for k in DRAFT_LENGTHS]
    return [Configuration(w, g, d, k, c) for w, g, c in formats for d, k in speculation]


def reference() -> Configuration:
    """The course's answer to the capstone (its solution cell): the configuration the chapter's
    closing note shows once the learner's is within the budget. Never recorded, so the learners'
    copy cannot show it: there it raises :class:`course.withheld.NotRecorded`."""
    with not_recorded():
        return Configuration.from_dict(COURSE.course_configuration())


OBVIOUS = Configuration("int4", 64, "distilled", 4)  # what chapters 3 and 6 alone suggest: it misses


@dataclass(frozen=True)
class Figures:
    """The capstone's deterministic figures for one configuration (computed on the CPU, in float32)."""

    target_bytes: int
    draft_bytes: int
    fp32_bytes: int  # the float32 target, the baseline
    loss: float  # held-out nats per byte (the draft does not change it)
    fp32_loss: float
    tokens_per_call: float  # all prompts' new tokens over all their target calls
    draft_length: int = 0  # draft calls per target call: k with a draft, 0 without

    @property
    def weight_bytes(self) -> int:
        return self.target_bytes + self.draft_bytes

    @property
    def weights_share(self) -> float:
        return self.weight_bytes / self.fp32_bytes

    @property
    def loss_gap(self) -> float:
        return self.loss - self.fp32_loss

    @property
    def modelled_speedup(self) -> float:
        """Tokens per target call over (1 + DRAFT_COST x k): chapter 6's speed-up with the tokens per
        call counted instead of expected, each target call charged with the k draft calls before it."""
        return modelled_speedup(self.tokens_per_call, self.draft_length)

    def within(self) -> dict[str, bool]:
        """Each part of :data:`BUDGET`: met or not."""
        return within_budget(self.weight_bytes, self.loss_gap, self.modelled_speedup)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "weight_bytes": self.weight_bytes,
            "weights_share": self.weights_share,
            "loss_gap": self.loss_gap,
            "modelled_speedup": self.modelled_speedup,
            "within_budget": all(self.within().values()),
        }

    def summary(self) -> str:
        return (
            f"weights {self.weight_bytes / 1e6:.2f} MB ({100 * self.weights_share:.1f}% of fp32), held-out loss "
            f"{self.loss:.4f} nats/byte ({self.loss_gap:+.4f}), {self.tokens_per_call:.2f} tokens per target call, "
            f"modelled speed-up {self.modelled_speedup:.2f}x"
        )


def modelled_speedup(tokens_per_call: float, draft_length: int) -> float:
    """Tokens per target call over the cost of a round, 1 + DRAFT_COST x k (k = 0: no draft)."""
    return tokens_per_call / (1 + DRAFT_COST * draft_length)


def within_budget(weight_bytes: int, loss_gap: float, speedup: float) -> dict[str, bool]:
    """Each part of :data:`BUDGET`, met or not, for these figures."""
    return {
        "weight_bytes": weight_bytes <= BUDGET["weight_bytes"],
        "loss_gap": loss_gap <= BUDGET["loss_gap"],
        "modelled_speedup": speedup >= BUDGET["modelled_speedup"],
    }


def _on_one_thread(function):
    """``function`` run with torch on one CPU thread: the graded figures then come out the same
    whichever process computes them, and this small model gains nothing from more threads (on a
    busy machine, several threads cost several times over)."""

    @functools.wraps(function)
    def on_one_thread(*args, **kwargs):
        with timing.threads(1):
            return function(*args, **kwargs)

    return on_one_thread


@functools.cache
def target() -> LanguageModel:
    """The course's float32 target, loaded once."""
    return checkpoints.load("target")


@functools.cache
def held_out() -> torch.Tensor:
    """The held-out plays' tokens (the loss's windows and the prompts come from them)."""
    return corpus.tokens("validation")


def prompts() -> list[torch.Tensor]:
    """The greedy runs' prompts: (1, PROMPT_LENGTH) openings of held-out plays."""
    return [held_out()[s : s + PROMPT_LENGTH][None] for s in PROMPT_STARTS]


@functools.cache
def calibration_hessians(windows: int = quantization.CALIBRATION_WINDOWS) -> dict[str, torch.Tensor]:
    """H = X^T X / n of each of the target's linear layers, from the float32 target reading
    ``windows`` windows of the training plays (chapter 3's by default; never the held-out ones).
    A copy of the target reads them: the hooks that collect X would also see the passes other
    threads make through the one loaded target meanwhile (the grader judges notebooks in threads),
    and copies taken of it meanwhile would keep them."""
    with timing.threads(1):
        return quantization.calibration_hessians(copy.deepcopy(target()), corpus.tokens("train"), windows)


@functools.cache
@_on_one_thread  # GPTQ's codes depend on the thread count: the same codes whoever asks first
def stored_target(
    weights: str, group_size: int | None, calibration: str = "none", fused: bool = False
) -> LanguageModel:
    """The target stored in ``weights`` (GPTQ's codes with ``calibration == "gptq"``). ``fused``
    False: every product in float32, what the graded figures use (the same on every machine);
    True: int4 through torch's fused product where it takes a layer, what the clock times."""
    if fused:
        model = copy.deepcopy(stored_target(weights, group_size, calibration))
        for module in model.modules():
            if isinstance(module, StoredLinear):
                module.fused = True
        return model
    hessians = calibration_hessians() if calibration == "gptq" else None
    return store_weights(target(), weights, group_size, hessians, fused=False)


def gptq_int4_codes(group_size: int | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """GPTQ's int4 codes of the target, as :func:`stored_target` stores them (its Hessians from
    :func:`calibration_hessians`): layer path -> (packed codes, uint8 (out, in // 2); float16
    scales (out, groups)), ``group_size`` None for one scale per row. Chapter 3's GPTQ chooses them:
    the learners' copy has those of the configurations it was released with."""
    return COURSE.gptq_int4_codes(group_size)


def format_bytes(weights: str, group_size: int | None) -> int:
    """Bytes of the target stored in ``weights`` (calibration changes the codes, not how many)."""
    return COURSE.format_bytes(weights, group_size)


def format_figures(weights: str, group_size: int | None, calibration: str = "none") -> tuple[int, float]:
    """Bytes and held-out loss of the target stored in ``weights`` (on the CPU, fixed windows). It
    stores the target through chapter 3's and 9's answers: the learners' copy has every format's."""
    n_bytes, loss = COURSE.format_figures(weights, group_size, calibration)
    return n_bytes, loss


def measure(config: Configuration) -> Figures:
    """The figures of ``config``: bytes from the stored tensors, loss on fixed held-out windows,
    tokens per target call from greedy runs of the real loop (all prompts' new tokens over all their
    target calls). Deterministic; cached (:func:`configuration_figures`)."""
    return Figures(**loop_figures(config.as_dict()))


def loop_figures(configuration: dict) -> dict:
    """:func:`configuration_figures`, except that while the learners' copy records its calls, a
    configuration within the budget is measured without being recorded: its key would name the
    capstone's answer in the copy, which counts that configuration's figures instead
    (:func:`counted_figures`, the same numbers) where :class:`NotRecorded` says so."""
    if is_recording() and budget_passes(Configuration.from_dict(configuration)):
        with not_recorded():
            return configuration_figures(configuration)
    return configuration_figures(configuration)


def configuration_figures(configuration: dict) -> dict:
    """:func:`measure`'s figures of ``configuration`` (a :meth:`Configuration.as_dict`), as plain
    data: :class:`Figures`' fields. It runs the stored target and chapter 9's loop: the learners'
    copy has the released configurations'."""
    return COURSE.configuration_figures(configuration)


def counted_figures(config: Configuration) -> Figures:
    """The figures of ``config`` without running the loop: bytes and loss of its format
    (:func:`format_figures`), tokens per target call counted from where its draft agrees with the
    target (:func:`draft_curves`, equal to the loop's count: see the tests). Every configuration's,
    in the learners' copy too."""
    target_bytes, loss = format_figures(*config.format)
    fp32_bytes, fp32_loss = format_figures("fp32", None)
    if config.draft == "none":
        return Figures(target_bytes, 0, fp32_bytes, loss, fp32_loss, 1.0, 0)
    per_call = draft_curves(*config.format)[config.draft][config.draft_length - 1]
    drafted = weight_bytes(draft_model(config.draft))
    return Figures(target_bytes, drafted, fp32_bytes, loss, fp32_loss, per_call, config.draft_length)


def budget_passes(config: Configuration) -> bool:
    """Whether ``config`` is within :data:`BUDGET`, from the cheapest figure up: bytes, then the
    loss, then the modelled speed-up from :func:`draft_curves` (equal to the loop's, see the tests);
    a figure is computed only where the ones before it hold."""
    n_bytes = format_bytes(config.weights, config.group_size) + weight_bytes(draft_model(config.draft))
    if n_bytes > BUDGET["weight_bytes"]:
        return False
    if format_figures(*config.format)[1] - format_figures("fp32", None)[1] > BUDGET["loss_gap"]:
        return False
    if config.draft == "none":
        return modelled_speedup(1.0, 0) >= BUDGET["modelled_speedup"]
    per_call = draft_curves(*config.format)[config.draft][config.draft_length - 1]
    return modelled_speedup(per_call, config.draft_length) >= BUDGET["modelled_speedup"]


@functools.cache
def passing_configurations() -> tuple[Configuration, ...]:
    """The configurations of :func:`configurations` within the budget."""
    return tuple(config for config in configurations() if budget_passes(config))


def stored_count_reading() -> str:
    """How many configurations pass, out of how many: the stored reference numbers (counting them
    all takes a minute or more; ``make reference`` does, and a test re-derives them)."""
    from course import reference

    passing = int(reference.value("choosing_a_technique", "configurations_within_budget"))
    total = int(reference.value("choosing_a_technique", "configurations"))
    return f"{passing} of the {total} configurations the capstone serves are within the budget"


ANSWER_NUMBERS = tuple(  # reference numbers that name the course's configuration: the learners' copy leaves them out
    f"reference_{name}" for name in ("weight_bytes", "weights_share", "loss_gap", "tokens_per_call", "modelled_speedup")
)
NOT_IN_THIS_COPY = (
    "your instructor's copy shows its figures: this copy holds no number that would name the course's configuration"
)


def stored_reference_reading() -> str:
    """The figures of the course's own configuration, from the stored reference numbers (which
    configuration it is stays the instructor's); in the learners' copy, which holds none of
    :data:`ANSWER_NUMBERS`, a sentence that says so."""
    from course import reference

    if not set(ANSWER_NUMBERS) <= set(reference.load("choosing_a_technique")):
        return NOT_IN_THIS_COPY

    def value(name: str) -> float:
        return reference.value("choosing_a_technique", f"reference_{name}")

    return (
        f"weights {value('weight_bytes') / 1e6:.2f} MB ({100 * value('weights_share'):.1f}% of fp32), held-out loss "
        f"{value('loss_gap'):+.4f} nats/byte from fp32's, {value('tokens_per_call'):.2f} tokens per target call, "
        f"modelled speed-up {value('modelled_speedup'):.2f}x"
    )


def calls_from_agreement(agree: list[bool], k: int) -> int:
    """Target calls of greedy speculation with ``k`` drafted tokens, from whether the draft's
    greedy choice equals the target's at each new position: each call keeps the run of agreeing
    positions (at most k) and adds the target's own token after it."""
    position, calls = 0, 0
    while position < len(agree):
        run = 0
        while run < k and position + run < len(agree) and agree[position + run]:
            run += 1
        position, calls = position + run + 1, calls + 1
    return calls


@functools.cache
@_on_one_thread
def greedy_tokens(weights: str, group_size: int | None, calibration: str = "none") -> tuple[torch.Tensor, ...]:
    """The target's greedy continuation of each of :func:`prompts`, (1, PROMPT_LENGTH + NEW_TOKENS)
    each, with the target as :func:`stored_target` stores it in ``weights``, ``group_size`` and
    ``calibration`` (every product in float32). Greedy speculation reproduces it token for token
    whatever the draft, so it is generated with the distilled draft and the longest k: the fewest
    calls of the stored target, each of which rebuilds its weights from the stored tensors (all but
    ``fp32``, a plain float32 copy)."""
    target, drafter = stored_target(weights, group_size, calibration), draft_model("distilled")
    return tuple(
        DRAFTS["distilled"].run(target, drafter, p, DRAFT_LENGTHS[-1], NEW_TOKENS)["tokens"] for p in prompts()
    )


@torch.no_grad()
def agreement(drafter: LanguageModel, tokens: torch.Tensor, prompt_length: int) -> list[bool]:
    """Whether ``drafter``'s greedy guess at each new position of the greedy output ``tokens``
    (1, T + new) equals the token there, its prefix given: one forward pass of the draft."""
    guesses = drafter(tokens[:, :-1]).argmax(dim=-1)[0, prompt_length - 1 :]  # (new,): the guess for each new position
    return (guesses == tokens[0, prompt_length:]).tolist()


def draft_curves(weights: str, group_size: int | None, calibration: str = "none") -> dict[str, list[float]]:
    """Tokens per target call at every draft length of :data:`DRAFT_LENGTHS`, for each model draft,
    with the target stored in ``weights``, ``group_size`` and ``calibration``: counted from where
    each draft agrees with the target's greedy output (:func:`greedy_tokens`,
    :func:`calls_from_agreement`), without running the loop for every k. As :func:`format_figures`,
    the learners' copy has every format's."""
    return COURSE.draft_curves(weights, group_size, calibration)


ALTERNATIVES = (("fp32", None), ("fp16", None), ("int8", None), ("int4", None), ("int4", 64), ("nf4", 64), ("int2", 32))


def format_table(formats=ALTERNATIVES) -> list[dict]:
    """Bytes, share of fp32, bits per linear weight and held-out loss of the target in each of ``formats``."""
    fp32_bytes, fp32_loss = format_figures("fp32", None)
    table = []
    for weights, group in formats:
        n_bytes, loss = format_figures(weights, group)
        table.append(
            {
                "weights": weights,
                "group_size": group,
                "bytes": n_bytes,
                "share": n_bytes / fp32_bytes,
                "bits": 8 * (n_bytes - _untouched_bytes()) / _linear_weights(),  # per linear weight, scales included
                "loss": loss,
                "loss_gap": loss - fp32_loss,
            }
        )
    return table


def generation(config: Configuration, device: torch.device | None = None, new_tokens: int = NEW_TOKENS):
    """A call that generates ``new_tokens`` greedily after the first prompt with ``config`` on
    ``device`` (the CPU by default): what the wall-clock measurements time."""
    device = device or torch.device("cpu")
    target = stored_target(*config.format, fused=True)
    target = target if device.type == "cpu" else copy.deepcopy(target).to(device)
    draft, drafter, prompt = DRAFTS[config.draft], DRAFTS[config.draft].load(device), prompts()[0].to(device)
    return lambda: draft.run(target, drafter, prompt, config.draft_length, new_tokens)


def time_generation(
    configs, device: torch.device | None = None, new_tokens: int = NEW_TOKENS, repeats: int = 3
) -> dict[Configuration, float]:
    """Median seconds of :func:`generation` for each configuration, at the thread count in force."""
    return {
        config: timing.median_seconds(generation(config, device, new_tokens), device, warmup=1, repeats=repeats)
        for config in dict.fromkeys(configs)
    }


def reference_numbers() -> dict[str, tuple[float, float, str]]:
    """The reference configuration's graded figures: name -> (value, tolerance, how it was made)."""
    figures = measure(reference())
    how = f"{reference().label()}, on the CPU"
    return {
        "reference_weight_bytes": (figures.weight_bytes, 0.0, f"bytes of the stored target and draft, {how}"),
        "reference_weights_share": (figures.weights_share, 1e-9, f"share of the fp32 target's bytes, {how}"),
        "reference_loss_gap": (
            figures.loss_gap,
            2e-4,
            f"held-out loss minus fp32's, {EVAL_WINDOWS} windows of 256 bytes, {how}",
        ),
        "reference_tokens_per_call": (
            figures.tokens_per_call,
            0.05,
            f"greedy, {len(PROMPT_STARTS)} held-out prompts x {NEW_TOKENS} tokens, {how}",
        ),
        "reference_modelled_speedup": (
            figures.modelled_speedup,
            0.05,
            f"tokens per target call / (1 + {DRAFT_COST} k), the same runs, {how}",
        ),
        "configurations": (len(configurations()), 0.0, "configurations the capstone serves, enumerated"),
        "configurations_within_budget": (
            len(passing_configurations()),
            0.0,
            "configurations within the budget, each enumerated and its figures computed (passing_configurations)",
        ),
        "fp32_weight_bytes": (figures.fp32_bytes, 0.0, "bytes of the float32 target"),
        "int4_g64_bits_per_weight": (
            next(row["bits"] for row in format_table([("int4", 64)])),
            1e-9,
            "bits per linear weight of the stored int4 g64 target, its fp16 scales included (4 + 16/64)",
        ),
    }


def _linear_weights() -> int:
    return sum(m.weight.numel() for m in target().modules() if isinstance(m, nn.Linear))


def _untouched_bytes() -> int:
    """Bytes of what every format keeps in float32: the embedding and the norms."""
    return weight_bytes(target()) - 4 * _linear_weights()


def speedup_reading(speedups: dict[str, float]) -> str:
    """One sentence that reads measured speed-ups (name -> ratio against fp32 alone)."""
    parts = [f"{name} {ratio:.2f}x" for name, ratio in speedups.items()]
    slower = [name for name, ratio in speedups.items() if ratio < 1]
    tail = (
        f"; slower than fp32 alone here: {', '.join(slower)}"
        if slower
        else "; every part is faster than fp32 alone here"
    )
    return "speed-up over the fp32 target alone: " + ", ".join(parts) + tail
