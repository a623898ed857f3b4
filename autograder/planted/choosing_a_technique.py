"""Chapter 9's planted mistakes: the advice, packing, the int4 layer and the greedy loop (written
from the solution's own cells), and the capstone's configuration."""

from autograder.mistakes.speculative_decoding import SOLUTION_LOOP_VARIANTS
from autograder.planted import Planted
from course.benchmarks import choosing_a_technique as bench
from course.choosing_a_technique import BUDGET


def solution_answer(grade_id: str) -> str:
    """The solution's answer cell ``grade_id``, its solution markers dropped: the base of a planted mistake."""
    return "\n".join(line for line in bench.answer_cells()[grade_id].splitlines() if "### " not in line) + "\n"


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
        LOOP_SOLUTION.replace(*SOLUTION_LOOP_VARIANTS["late"]),
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
        {f"capstone_configuration.{part}" for part in BUDGET},
        "GPTQ chooses absmax codes",
    ),
    "capstone_misspelt": Planted(
        "capstone_configuration",
        CONFIG_HEAD + "{'weights': 'int4', 'groupsize': 64, 'draft': 'distilled', 'draft_length': 4}\n",
        {f"capstone_configuration.{part}" for part in BUDGET},
        "unknown key(s) 'groupsize'",
    ),
}
