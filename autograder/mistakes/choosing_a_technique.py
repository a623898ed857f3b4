"""Chapter 9's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/choosing_a_technique/`` name a mistake by it), what the judges compare with
beyond the solution's cells (the solution's int4 layer's buffers, the course's held-out losses,
GPTQ's codes for the calibrated check, the target's greedy tokens), and wrong answers written out
(the advice, packing, the int4 layer and the greedy loop, written from the solution's own cells,
and the capstone's configuration). The costly ones are cached: a grading process asks them again
for every submission."""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch import nn

from autograder.chapters.choosing_a_technique.int4_layer import FP32, loss_windows
from autograder.chapters.choosing_a_technique.speculative import LOOP_NEW_TOKENS
from autograder.mistakes import Planted, answer_cell
from autograder.mistakes import speculative_decoding as chapter_6
from course import choosing_a_technique as technique
from course import drafts, quantization, speculative_decoding, stored_weights, withheld
from course.model import generate

CHAPTER = "09_choosing_a_technique"
ANSWERS = withheld.answers(CHAPTER)

# --- fine_tuning_advice -------------------------------------------------------------------------------


def _variant(knowledge=None, instructions="prompting", changes=True, prompting_first=True, knowledge_moving=None):
    """A rule like the course's with one part changed: what plausible wrong answers compute."""

    def rule(need, changes_often, tried_prompting):
        if need == "knowledge":
            if changes_often and knowledge_moving:
                return knowledge_moving
            if knowledge:
                return knowledge if changes_often is False and tried_prompting else "prompting"
            return "retrieval"
        if need == "instructions":
            return instructions
        if (changes and changes_often) or (prompting_first and not tried_prompting):
            return "prompting"
        return "fine-tuning"

    return rule


def of_fine_tuning_advice(cases: list) -> list[tuple[str, list[str]]]:
    """Each plausible wrong rule's advice for ``cases``, with the hint that names it."""
    mistakes = [
        (
            "need 'knowledge' is retrieval's job whatever else holds: documents go into the prompt through retrieval, "
            "not into the weights",
            _variant(knowledge="fine-tuning"),
        ),
        (
            "knowledge that changes often is still retrieval's job: retrieval reads the current documents",
            _variant(knowledge_moving="prompting"),
        ),
        ("instructions belong in the prompt: need 'instructions' is 'prompting'", _variant(instructions="fine-tuning")),
        (
            "when what the model must learn changes often, every change would mean training again: that is "
            "'prompting', not 'fine-tuning'",
            _variant(changes=False),
        ),
        (
            "prompting comes first: until it has seriously been tried (tried_prompting False), the advice is "
            "'prompting'",
            _variant(prompting_first=False),
        ),
    ]
    return [(hint, [rule(*case) for case in cases]) for hint, rule in mistakes]


# --- pack_int4 ----------------------------------------------------------------------------------------------


def of_pack_int4(codes: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The bytes each known packing mistake makes of ``codes``, with the hint that names it."""
    c = codes.to(torch.int64)
    high, low = c[:, 0::2], c[:, 1::2]
    no_offset = (
        "the codes were packed without their +8 offset, so a negative code wraps around the byte (-7 * 16 + 7 = "
        "-105 is stored as 151): store code + 8, so that -8..7 become 0..15"
    )
    return [
        (
            "the pair's order is swapped: the first code of each pair goes into the high nibble, (first + 8) << 4",
            ((low + 8) << 4) | (high + 8),
        ),
        (
            "negative codes were stored as two's complement (code & 15): store code + 8, so -8..7 become 0..15",
            ((high & 15) << 4) | (low & 15),
        ),
        (no_offset, (high * 16 + low) % 256),
        (no_offset, ((high << 4) | low) & 255),
        ("the offset is 8, not 7: -8 must become 0 and 7 must become 15", ((high + 7) << 4) | (low + 7)),
        ("the two codes were added, not packed: shift the first left by 4 bits", (high + 8) + (low + 8)),
    ]


# --- Int4Linear -----------------------------------------------------------------------------------------


def int4_linear_buffers(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The packed codes and float16 scales the solution's ``Int4Linear(weight, group)`` keeps: what a
    learner's layer must keep (a class is not answered across the line between the copies: its buffers are)."""
    layer = ANSWERS.Int4Linear(weight, group)
    return layer.codes, layer.scale


def of_int4_linear(weight: torch.Tensor, group: int) -> list[tuple[str, torch.Tensor, torch.Tensor | None]]:
    """The codes (packed) and scales each known mistake keeps for ``weight``, with the hint that names
    it; a scale of None: any scale."""
    codes, scale = quantization.quantize(weight.float(), 4, group)
    packed = ANSWERS.pack_int4(codes)
    rows = quantization.quantize(weight.float(), 4, None)
    wide = (
        torch.round(
            weight.float()
            / (weight.float().reshape(len(weight), -1, group).abs().amax(-1) / 8).repeat_interleave(group, dim=1)
        )
        .clamp(-8, 7)
        .to(torch.int32)
    )
    return [
        (
            "wrong nibble order: the first code of each pair goes into the high four bits, (c0 + 8) * 16 + (c1 + 8)",
            ANSWERS.pack_int4(torch.stack([codes[:, 1::2], codes[:, 0::2]], -1).reshape(codes.shape)),
            None,
        ),
        (
            "scales per row instead of per group: keep one scale per group_size columns, shape "
            "(out_features, in_features // group_size)",
            ANSWERS.pack_int4(rows[0]),
            rows[1].half(),
        ),
        (
            "the scale is absmax / 7 (the largest symmetric 4-bit code), not absmax / 8",
            ANSWERS.pack_int4(wide),
            None,
        ),
        ("the scales are stored in float32: keep them in float16 (two bytes each)", packed, scale.float()),
    ]


def codes_of_scale(weight: torch.Tensor, scale: torch.Tensor, group: int) -> torch.Tensor:
    """The packed codes of ``weight`` rounded against ``scale`` (the layer's float16 scales): as
    good an answer as the codes of the float32 scale."""
    return ANSWERS.pack_int4(
        torch.round(weight / scale.float().repeat_interleave(group, dim=1)).clamp(-8, 7).to(torch.int32)
    )


@functools.cache
@torch.no_grad()
def course_loss(group: int | None | str, mistake: str = "", calibration: str = "none") -> float:
    """The held-out loss on the checks' windows (``int4_layer.loss_windows``) of the target with int4
    weights in groups of ``group`` (None: one scale per row; ``FP32``: float32 weights), rounded to
    nearest or with GPTQ's codes (``calibration``); ``mistake`` "rows": one scale per row, "swapped":
    each byte's two codes unpacked in the other order. The course's model computes it."""
    model = copy.deepcopy(technique.target())
    if group != FP32:
        codes = gptq_inputs(group) if calibration == "gptq" else {}
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                if name + ".weight" in codes:
                    signed, scale = codes[name + ".weight"]
                else:  # the codes of the solution's layer, before packing (which changes none)
                    signed, scale = quantization.quantize(
                        module.weight.detach().float(), 4, None if mistake == "rows" else group
                    )
                if mistake == "swapped":  # each pair's two codes unpacked in the other order
                    signed = signed.reshape(len(signed), -1, 2).flip(-1).reshape(signed.shape)
                module.weight.data = quantization.dequantize(signed, scale.half().float())
    windows = loss_windows()
    logits = model(windows[:, :-1])
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)))


CALIBRATION_PROBE_WINDOWS = 8  # of chapter 3's 32: GPTQ's codes still differ from rounding's, at a quarter the time


@functools.cache
def probe_hessians() -> dict[str, torch.Tensor]:
    """H = X^T X / n of the target's linear layers on evenly spaced windows of the training plays:
    the calibrated check needs codes that GPTQ chose, not the capstone's own (32 windows)."""
    return technique.calibration_hessians(CALIBRATION_PROBE_WINDOWS)


@functools.cache
def gptq_inputs(group: int | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """GPTQ's signed codes and float32 scales for each of the target's linear layers, by state-dict
    name: what a calibrated int4 layer is given (``course.stored_weights.gptq_codes``)."""
    target, hessians = technique.target(), probe_hessians()
    return {
        name + ".weight": stored_weights.gptq_codes(module.weight, hessians[name], group or module.in_features)
        for name, module in target.named_modules()
        if isinstance(module, nn.Linear)
    }


# --- speculative_greedy --------------------------------------------------------------------------------


@functools.cache
def loop_expected(draft: str, start: int, k: int) -> dict:
    """The target's greedy tokens (course.model.generate), chapter 6's loop's target calls at
    temperature 0, and the prompt, for one of the course's prompts."""
    target, drafter = technique.target(), drafts.draft_model(draft)
    prompt = technique.prompts()[start]
    greedy = generate(target, prompt, LOOP_NEW_TOKENS)[0].tolist()
    calls = len(speculative_decoding.speculative_generate(target, drafter, prompt, k, LOOP_NEW_TOKENS, 0)[1])
    return {"greedy": greedy, "calls": calls, "prompt": prompt}


@functools.cache
def of_speculative_greedy(draft: str, start: int, k: int, mistake: str) -> list[int] | str:
    """The tokens of the course's loop with ``mistake`` planted (the judge's ``LOOP_MISTAKES``:
    ``autograder.mistakes.speculative_decoding.of_speculative_greedy``) on one of the course's
    prompts, or the name of the exception it raises."""
    target, drafter = technique.target(), drafts.draft_model(draft)
    try:
        return chapter_6.of_speculative_greedy(mistake, target, drafter, technique.prompts()[start], k, LOOP_NEW_TOKENS)
    except (IndexError, ValueError, RuntimeError) as error:
        return type(error).__name__


# --- wrong answers written out ---------------------------------------------------------------------------


def solution_answer(grade_id: str) -> str:
    """The solution's answer cell ``grade_id``, its solution markers dropped: the base of a planted mistake."""
    return answer_cell(CHAPTER, grade_id)


LAYER_SOLUTION = solution_answer("int4_linear")
LOOP_SOLUTION = solution_answer("speculative_greedy")
SWAPPED_PACK = 'self.register_buffer("codes", ((codes[:, 1::2] + 8) * 16 + (codes[:, 0::2] + 8)).to(torch.uint8))'
ADVICE_HEAD = "def fine_tuning_advice(need, changes_often, tried_prompting):\n"
CONFIG_HEAD = "def capstone_configuration():\n    return "
PLANTED = {
    "advice_fine_tunes_knowledge": Planted(
        "fine_tuning_advice",
        ADVICE_HEAD + "    if need == 'instructions' or changes_often or not tried_prompting:\n"
        "        return 'prompting'\n    return 'fine-tuning'\n",
        {"fine_tuning_advice.notes", "fine_tuning_advice.all"},
        "retrieval's job",
    ),
    "advice_ignores_change": Planted(
        "fine_tuning_advice",
        ADVICE_HEAD + "    if need == 'knowledge':\n        return 'retrieval'\n"
        "    if need == 'instructions' or not tried_prompting:\n        return 'prompting'\n    return 'fine-tuning'\n",
        {"fine_tuning_advice.notes", "fine_tuning_advice.all"},
        "changes often",
    ),
    "advice_spelt_with_an_underscore": Planted(  # the right rule, not the strings the prompt lists
        "fine_tuning_advice",
        ADVICE_HEAD + "    if need == 'knowledge':\n        return 'retrieval'\n"
        "    if need == 'instructions' or changes_often or not tried_prompting:\n"
        "        return 'prompting'\n    return 'fine_tuning'\n",
        {"fine_tuning_advice.notes", "fine_tuning_advice.all"},
        "which means 'fine-tuning': return exactly",
    ),
    "pack_low_nibble_first": Planted(
        "pack_int4",
        "def pack_int4(codes):\n    if codes.shape[1] % 2:\n        raise ValueError('odd')\n"
        "    c = codes.to(torch.int32) + 8\n    return (c[:, 1::2] * 16 + c[:, 0::2]).to(torch.uint8)\n",
        {"pack_int4.example", "pack_int4.random"},
        "high nibble",
        calls_it={"int4_linear"},
    ),
    "pack_twos_complement": Planted(
        "pack_int4",
        "def pack_int4(codes):\n    if codes.shape[1] % 2:\n        raise ValueError('odd')\n"
        "    c = codes.to(torch.int32) & 15\n    return (c[:, 0::2] * 16 + c[:, 1::2]).to(torch.uint8)\n",
        {"pack_int4.example", "pack_int4.random"},
        "two's complement",
        calls_it={"int4_linear"},
    ),
    "pack_without_the_offset": Planted(  # "expected 31, got 151" named: the +8 offset
        "pack_int4",
        "def pack_int4(codes):\n    if codes.shape[1] % 2:\n        raise ValueError('odd')\n"
        "    c = codes.to(torch.int32)\n    return (c[:, 0::2] * 16 + c[:, 1::2]).to(torch.uint8)\n",
        {"pack_int4.example", "pack_int4.random"},
        "without their +8 offset",
        calls_it={"int4_linear"},
    ),
    "pack_without_value_error": Planted(  # passed every visible check once, then lost the point in grading
        "pack_int4",
        "def pack_int4(codes):\n    c = codes.to(torch.int32) + 8\n"
        "    return (c[:, 0::2] * 16 + c[:, 1::2]).to(torch.uint8)\n",
        {"pack_int4.odd"},
        "raise ValueError when the number of columns is odd",
    ),
    "layer_low_nibble_first": Planted(
        "int4_linear",
        LAYER_SOLUTION.replace('self.register_buffer("codes", pack_int4(codes))', SWAPPED_PACK).replace(
            "torch.stack([high, low]", "torch.stack([low, high]"
        ),
        {"int4_linear.codes", "int4_linear.random", "int4_linear.forward"},
        "nibble order",
    ),
    "layer_scales_per_row": Planted(
        "int4_linear",
        LAYER_SOLUTION.replace(
            "grouped = weight.detach().float().reshape(rows, cols // group_size, group_size)",
            "grouped = weight.detach().float().reshape(rows, 1, cols)",
        ),
        {"int4_linear.codes", "int4_linear.random", "int4_linear.bytes", "int4_linear.model"},
        "per row",
    ),
    "loop_cache_not_rolled_back": Planted(
        "speculative_greedy",
        LOOP_SOLUTION.replace("        target_cache.length = n + accepted\n", ""),
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "caches", "k7")},  # k = 1 never overflows
        "rolled back",
    ),
    "loop_off_by_one": Planted(
        "speculative_greedy",
        LOOP_SOLUTION.replace("target_cache.length = n + accepted", "target_cache.length = n + accepted + 1"),
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "caches", "k1", "k7")},
        "off by one",
    ),
    "loop_without_target_cache": Planted(
        "speculative_greedy",
        LOOP_SOLUTION.replace(
            "choices = target(torch.tensor([feed]), target_cache)",
            "choices = target(torch.tensor([tokens + proposed]))",
        ),
        {"speculative_greedy.greedy", "speculative_greedy.caches"},  # the visible check counts what each was fed
        "keep a KV cache",
    ),
    "loop_without_draft_cache": Planted(  # every position fed to the draft again for each guess: the right tokens
        "speculative_greedy",
        LOOP_SOLUTION.replace(
            "logits = draft(torch.tensor([fresh]), draft_cache)[0, -1]",
            "logits = draft(torch.tensor([tokens + proposed]))[0, -1]",
        ),
        {"speculative_greedy.greedy", "speculative_greedy.caches"},
        "the draft was fed",
    ),
    "loop_reads_choices_late": Planted(  # the target's choice for guess i read at guess i's own position
        "speculative_greedy",
        LOOP_SOLUTION.replace(*chapter_6.SOLUTION_LOOP_VARIANTS["late"]),
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "caches", "k1", "k7")},
        "read one position late",
    ),
    "loop_neither_cache_rolled_back": Planted(  # the draft is fed nothing first; the target's cache holds more
        "speculative_greedy",
        LOOP_SOLUTION.replace("        target_cache.length = n + accepted\n", "").replace(
            "        draft_cache.length = min(draft_cache.length, n + accepted)\n", ""
        ),
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "caches", "k7")},  # k = 1 keeps no extra
        "neither KV cache was rolled back",
    ),
    "layer_unpacks_low_nibble_first": Planted(  # codes packed right, unpacked in the other order
        "int4_linear",
        LAYER_SOLUTION.replace("torch.stack([high, low]", "torch.stack([low, high]"),
        {"int4_linear.forward", "int4_linear.model", "int4_linear.calibrated"},
        "nibble order in forward",
    ),
    "loop_one_target_call_per_token": Planted(  # the target's greedy tokens, without the draft's guesses
        "speculative_greedy",
        "@torch.no_grad()\ndef speculative_greedy(target, draft, prompt, k, new_tokens):\n"
        "    tokens = prompt[0].tolist()\n    goal = len(tokens) + new_tokens\n"
        "    cache = target.new_cache(1, goal + 1)\n    while len(tokens) < goal:\n"
        "        logits = target(torch.tensor([tokens[cache.length :]]), cache)[0, -1]\n"
        "        tokens.append(int(logits.argmax()))\n    return tokens\n",
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "k1", "k7")},
        "one target call per round verifies its k guesses",
    ),
    "loop_draft_cache_not_rolled_back": Planted(  # relayed as "cannot reshape tensor of 0 elements" alone
        "speculative_greedy",
        LOOP_SOLUTION.replace("        draft_cache.length = min(draft_cache.length, n + accepted)\n", ""),
        {f"speculative_greedy.{name}" for name in ("greedy", "calls", "caches", "k7")},  # k = 1 keeps no extra
        "the draft's KV cache was not rolled back",
    ),
    "layer_ignores_given_codes": Planted(  # rounds the weight even when GPTQ's codes are given
        "int4_linear",
        LAYER_SOLUTION.replace("if codes is None:", "if True:"),
        {"int4_linear.calibrated"},
        "were ignored",
    ),
    "layer_rerounds_given_codes": Planted(  # GPTQ's codes and scales made a weight again, then rounded to nearest
        "int4_linear",
        LAYER_SOLUTION.replace(
            "        if codes is None:",
            "        if codes is not None:  # the weight GPTQ's codes stand for\n"
            "            grouped = codes.float().reshape(scale.shape[0], scale.shape[1], -1)\n"
            "            weight = (grouped * scale.float()[..., None]).reshape(codes.shape)\n"
            "        if True:",
        ),
        {"int4_linear.calibrated"},
        "of the weights your layers serve are not the code given times its scale",
    ),
    "layer_without_codes_argument": Planted(  # the layer of rounding alone: Int4Linear(weight, group_size)
        "int4_linear",
        LAYER_SOLUTION.replace("group_size=64, codes=None, scale=None", "group_size=64").replace(
            "if codes is None:", "if True:"
        ),
        {"int4_linear.calibrated"},
        "keyword arguments",
    ),
    "capstone_obvious": Planted(  # int4 g64 rounded to nearest, distilled k = 4: over on bytes and loss
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': 64, 'draft': 'distilled', 'draft_length': 4}\n",
        {"capstone_configuration.weight_bytes", "capstone_configuration.loss_gap"},
        "int4 g64 + distilled k=4",
    ),
    "capstone_groups_of_64": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': 64, 'calibration': 'gptq', 'draft': 'distilled', "
        "'draft_length': 4}\n",
        {"capstone_configuration.weight_bytes"},
        "the number of scales",
    ),
    "capstone_rounded_to_nearest": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': None, 'draft': 'distilled', 'draft_length': 4}\n",
        {"capstone_configuration.loss_gap"},
        "GPTQ",
    ),
    "capstone_int2": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int2', 'group_size': 32, 'calibration': 'gptq', 'draft': 'distilled', "
        "'draft_length': 4}\n",
        {"capstone_configuration.loss_gap", "capstone_configuration.modelled_speedup"},  # the draft agrees less too
        "int2 g32 GPTQ + distilled k=4",
    ),
    "capstone_no_draft": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': None, 'calibration': 'gptq', 'draft': 'none', "
        "'draft_length': 4}\n",
        {"capstone_configuration.modelled_speedup"},
        "speculation with a draft",
    ),
    "capstone_text_draft": Planted(  # chapter 6's draft: the target agrees with it too rarely
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': None, 'calibration': 'gptq', 'draft': 'draft', "
        "'draft_length': 4}\n",
        {"capstone_configuration.modelled_speedup"},
        "a draft the target agrees with",
    ),
    "capstone_longest_k": Planted(  # more tokens per call, but six draft calls each: modelled 1.79x, under
        # 1.9 by more than one round's worth (k = 8 gives 1.88x, where one round fewer would pass)
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'group_size': None, 'calibration': 'gptq', 'draft': 'distilled', "
        "'draft_length': 6}\n",
        {"capstone_configuration.modelled_speedup"},
        "pays for its draft calls",
    ),
    "capstone_calibrated_nf4": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'nf4', 'group_size': None, 'calibration': 'gptq', 'draft': 'distilled', "
        "'draft_length': 4}\n",
        {f"capstone_configuration.{part}" for part in technique.BUDGET},
        "GPTQ chooses absmax codes",
    ),
    "capstone_misspelt": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'groupsize': 64, 'draft': 'distilled', 'draft_length': 4}\n",
        {f"capstone_configuration.{part}" for part in technique.BUDGET},
        "unknown key(s) 'groupsize'",
    ),
}
