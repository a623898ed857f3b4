"""Chapter 9's advice: when to fine-tune at all (the needs, the advice's words and eight scenarios;
the rule itself is the chapter's exercise, ``fine_tuning_advice``, whose answer is its solution cell:
``course.choosing_a_technique.course_answer``), and a guide from a problem to the first technique to
try, with chapter 1's and chapter 2's memory arithmetic.

A worked example: ``recommend("serve", 70, 48)`` answers 4-bit weights with GPTQ or AWQ, since 70B
in 4 bits takes 32.6 GiB and the weights may take 38.4 GiB (80%) of a 48 GiB GPU.

Not handled: the KV cache's and activations' memory (a fixed share, :data:`HEADROOM`, is left to
them), several GPUs (the guide says when they are needed, not how to split a model over them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from course import lora

GiB = 2**30

# --- when to fine-tune ---------------------------------------------------------------------------

NEEDS = {
    "knowledge": "the model should know our documents or facts",
    "instructions": "the model should follow our instructions",
    "format": "every answer in one consistent format",
    "tone": "one consistent tone or style",
    "narrow_task": "one narrow task at high volume",
}
ADVICE = ("retrieval", "prompting", "fine-tuning")
_SYNONYMS = {"rag": "retrieval", "prompt": "prompting", "finetuning": "fine-tuning", "fine-tune": "fine-tuning"}


def advice_label(value) -> str | None:
    """``value`` as one of :data:`ADVICE` (case, spaces and common variants forgiven), else None."""
    if not isinstance(value, str):
        return None
    word = re.sub(r"[\s_]+", "-", value.strip().lower())
    word = _SYNONYMS.get(word, word)
    return word if word in ADVICE else None


@dataclass(frozen=True)
class Scenario:
    text: str
    need: str
    changes_often: bool
    tried_prompting: bool


SCENARIOS = (
    Scenario("A support team wants answers drawn from its 3,000 help-centre articles.", "knowledge", False, True),
    Scenario(
        "A legal team wants answers from contracts that are added and amended every day.", "knowledge", True, True
    ),
    Scenario(
        "Every reply must be JSON in one schema; a careful prompt with examples still breaks it one time in twenty.",
        "format",
        False,
        True,
    ),
    Scenario("A brand wants its own voice in every post; nobody has tried a system prompt yet.", "tone", False, False),
    Scenario(
        "A bank sorts two million transaction descriptions a day into 40 fixed categories; a long few-shot "
        "prompt works but is slow and costly at that volume.",
        "narrow_task",
        False,
        True,
    ),
    Scenario("An analyst wants summaries that follow a new five-step checklist.", "instructions", False, True),
    Scenario("A shop wants descriptions in a style guide its editors rewrite every week.", "tone", True, True),
    Scenario(
        "A clinic extracts the same 12 fields from thousands of referral letters a day; prompting was tried "
        "and keeps missing fields.",
        "narrow_task",
        False,
        True,
    ),
)


# --- from a problem to a technique --------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One row of the table: a problem, the first thing to try, whether it changes behaviour."""

    problem: str
    label: str
    first: str
    changes: str
    chapters: str


TABLE = (
    Row(
        "adapt",
        "Adapting a large model on one GPU",
        "LoRA; QLoRA if the base does not fit in 16 bits",
        "Yes (that is the point)",
        "chapter 2",
    ),
    Row(
        "serve",
        "Model too large to serve",
        "8-bit weights; then 4-bit with GPTQ or AWQ and calibration",
        "Slightly; evaluate",
        "chapters 1 and 3",
    ),
    Row(
        "long",
        "Long sequences slow or out of memory",
        "FlashAttention-style kernels",
        "No (exact)",
        "chapter 5",
    ),
    Row(
        "decode",
        "Decoding too slow",
        "KV cache (always), then speculative decoding",
        "No (exact distribution)",
        "chapters 4, 6 and 7",
    ),
    Row(
        "still",
        "Still too slow or too large",
        "Distil into a smaller model",
        "Yes; evaluate on rare cases",
        "chapter 7",
    ),
)
PROBLEMS = {row.problem: row for row in TABLE}
HEADROOM = 0.8  # share of a GPU's memory the weights may take; the rest is activations and the KV cache


@dataclass(frozen=True)
class Advice:
    problem: str
    technique: str
    why: str
    changes_behaviour: str
    chapter: str


def weights_gib(params_billion: float, bits: float) -> float:
    """GiB of weights: 7B in 16 bits is 13.0 GiB."""
    return params_billion * 1e9 * bits / 8 / GiB


def recommend(problem: str, params_billion: float = 7.0, gpu_gib: float = 24.0, first_done: bool = False) -> Advice:
    """The first technique to try for ``problem`` (a key of :data:`PROBLEMS`) with a model of
    ``params_billion`` on a GPU of ``gpu_gib``; with ``first_done``, what to try after that.

    Memory counts the weights only (chapter 1: 4 bits a weight, the scales left out) and the
    fine-tuning state (chapter 2); a model fits when it takes at most :data:`HEADROOM` of the GPU:
    70B in 4 bits, 32.6 GiB, fits a 48 GiB GPU (38.4 GiB for the weights) and not a 40 GiB one (32).
    The answers that no size changes are the table :data:`FIXED`; adapting and serving depend on
    the memory (:func:`_adapt`, :func:`_serve`).
    """
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {', '.join(PROBLEMS)}, got {problem!r}")
    if not params_billion > 0 or not gpu_gib > 0:
        raise ValueError("params_billion and gpu_gib must be positive")
    row = PROBLEMS[problem]
    if (problem, first_done) in FIXED:
        technique, why, changes, chapter = FIXED[problem, first_done]
    else:
        rule = {"adapt": _adapt, "serve": _serve}[problem]
        technique, why, changes, chapter = rule(Memory(params_billion, gpu_gib), first_done)
    return Advice(problem, technique, why, changes or row.changes, chapter or row.chapters)


# (problem, first_done) -> (technique, why, changes behaviour, chapter); None: the table row's
FIXED = {
    ("long", False): (
        "A FlashAttention-style kernel",
        "Standard attention writes the T x T score matrix to memory; tiled attention never forms it, so "
        "memory grows linearly with T and far fewer bytes move. The result is exact.",
        None,
        None,
    ),
    ("long", True): (
        "A smaller KV cache: grouped-query attention, a paged cache",
        "With attention tiled, what grows with the sequence is the KV cache (chapter 4): fewer key-value "
        "heads shrink it, and paging stops reserving memory that is never used.",
        "Paging: no. Fewer heads: yes (another model)",
        "chapter 4",
    ),
    ("decode", False): (
        "The KV cache",
        "Without it every step recomputes the whole prefix: the cost of a token grows with the text. "
        "Always on; the output does not change.",
        "No (exact)",
        "chapter 4",
    ),
    ("decode", True): (
        "Speculative decoding, with a draft that agrees with the target",
        "A cheap draft proposes k tokens and the target checks them in one call; the output keeps the "
        "target's distribution. A draft distilled from the target is accepted more often (chapter 7). "
        "Fewer bytes per weight also speed up memory-bound decoding (chapter 1).",
        None,
        "chapters 6 and 7",
    ),
    ("still", False): (
        "Distil into a smaller model",
        "A smaller student trained on the teacher's distributions is cheaper at every step. It changes "
        "behaviour: evaluate on rare cases, not only the average loss.",
        None,
        None,
    ),
    ("still", True): (
        "Prune and fine-tune, or revisit the budget",
        "Structured pruning shrinks the matrices for real, at a cost in quality that fine-tuning or "
        "distillation afterwards partly recovers.",
        None,
        None,
    ),
}


@dataclass(frozen=True)
class Memory:
    """A model of ``params_billion`` on a GPU of ``gpu_gib``, and the share the weights may take."""

    params_billion: float
    gpu_gib: float

    @property
    def room(self) -> float:
        return HEADROOM * self.gpu_gib

    @property
    def size(self) -> str:
        return f"{self.params_billion:g}B parameters"

    @property
    def share(self) -> str:
        return f"the {self.room:.1f} GiB ({HEADROOM:.0%}) of this {self.gpu_gib:g} GiB GPU that the weights may take"


def _adapt(memory: Memory, first_done: bool) -> tuple:
    """LoRA where the 16-bit base fits, QLoRA where only its 4 bits do, else several GPUs."""
    full, base16, base4 = (
        lora.course_answer("finetune_memory_gib")(memory.params_billion * 1e9, method)
        for method in ("full", "lora", "qlora")
    )
    if first_done:
        return (
            "A higher rank, or adapters on more layers",
            "If the adapter falls short on held-out cases, give it more rank or more layers before anything "
            f"bigger; a full fine-tune of {memory.size} needs about {full:.0f} GiB, a multi-GPU job.",
            None,
            None,
        )
    if base16 <= memory.room:
        return (
            "LoRA",
            f"The frozen base takes {base16:.1f} GiB in 16 bits, within {memory.share}; a full "
            f"fine-tune would need about {full:.0f} GiB. Only the small adapters train.",
            None,
            None,
        )
    if base4 <= memory.room:
        return (
            "QLoRA",
            f"In 16 bits the base alone takes {base16:.1f} GiB, more than {memory.share}; stored in "
            f"4 bits (NF4) it takes {base4:.1f} GiB, and the adapters train on top in 16 bits.",
            None,
            None,
        )
    return (
        "Several GPUs, or a smaller base",
        f"Even in 4 bits the base takes {base4:.1f} GiB, more than {memory.share}.",
        "Yes",
        None,
    )


def _serve(memory: Memory, first_done: bool) -> tuple:
    """8 bits where they fit (first), then 4 bits with calibration, then several GPUs or distillation;
    4 bits tried first (8 do not fit) and not enough: several GPUs or distillation."""
    w16, w8, w4 = (weights_gib(memory.params_billion, bits) for bits in (16, 8, 4))
    room = memory.room
    if not first_done and w8 <= room:
        fits16 = (
            f"It fits in 16 bits ({w16:.1f} GiB), but 8-bit weights ({w8:.1f} GiB) halve the bytes "
            "every decode step reads"
            if w16 <= room
            else f"In 16 bits the weights take {w16:.1f} GiB, more than {memory.share}; in 8 bits {w8:.1f} GiB, "
            "which fit"
        )
        return "8-bit weights", f"{fits16}. 8-bit rounding barely changes the outputs; check it.", None, None
    if w4 <= room and not (first_done and w8 > room):
        return (
            "4-bit weights with GPTQ or AWQ (calibrated)",
            f"4 bits take {w4:.1f} GiB, within {memory.share}. Rounding to nearest loses quality at 4 bits; "
            "GPTQ and AWQ calibrate on sample text to keep it. Evaluate before serving.",
            None,
            None,
        )
    first_try = (
        f"4-bit weights ({w4:.1f} GiB) were the first try; fewer bits cost quality fast (chapter 3). Split "
        if w4 <= room
        else f"Even in 4 bits the weights take {w4:.1f} GiB, more than {memory.share} (the rest holds activations "
        "and the KV cache): split "
    )
    return (
        "Several GPUs, or distil",
        first_try + "the model across GPUs (tensor parallelism), or distil it into a smaller one.",
        "Yes, if distilled",
        None,
    )
