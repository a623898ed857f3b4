"""Chapter 9's exercise capstone_configuration (a configuration within the budget, measured here by
the course's own code: the learner's function only names the configuration), its checks all
visible (one per part of the budget); its coverage table is
``autograder/hidden/choosing_a_technique.py``'s. The class leaderboard that grading a class writes
beside the gradebook is ``autograder.leaderboard``."""

from __future__ import annotations

import dataclasses

from autograder.checks import Check, Exercise, Verdict, judges_value
from course import choosing_a_technique as technique
from course import withheld

PART_HINTS = {
    "weight_bytes": "the bits of the codes, the number of scales and the draft are what can shrink",
    "loss_gap": "fewer bits cost quality, and codes rounded to nearest usually cost more than calibrated ones "
    "(chapter 3's GPTQ; in groups of 32 the two are within a few ten-thousandths)",
    "modelled_speedup": "that takes a draft the target agrees with, and a draft length k that pays for its draft "
    "calls (chapter 6's speed-up, from alpha and c)",
    "no_draft": "without a draft every target call yields one token: that takes speculation with a draft",
}


def _capstone(part: str):
    @judges_value
    def judge(probe, got) -> Verdict:
        try:
            config = technique.Configuration.from_dict(got)
        except (TypeError, ValueError) as error:
            return Verdict(False, f"not a configuration the capstone can serve: {error}")
        figures = technique.Figures(**_capstone_figures(config.as_dict()))
        data = {"configuration": config.label(), **config.as_dict(), **figures.as_dict()}
        if figures.within()[part]:
            return Verdict(True, data=data)
        return Verdict(
            False,
            f"{config.label()}: {figures.summary()}; the budget: {technique.BUDGET_WORDS[part]}; "
            + (
                f"the target takes {figures.target_bytes / 1e6:.2f} MB as stored and the draft "
                f"{figures.draft_bytes / 1e6:.2f} MB: "
                if part == "weight_bytes"
                else ""
            )
            + PART_HINTS["no_draft" if part == "modelled_speedup" and config.draft == "none" else part],
            data=data,
        )

    return judge


def _capstone_figures(configuration: dict) -> dict:
    """The capstone's figures (:class:`course.choosing_a_technique.Figures`' fields) for
    ``configuration``: the loop's; in the learners' copy, for a configuration whose loop it did not
    record, those counted from where the draft agrees with the target (the same numbers)."""
    try:
        return technique.loop_figures(configuration)
    except withheld.NotRecorded:
        return dataclasses.asdict(technique.counted_figures(technique.Configuration.from_dict(configuration)))


def _configuration_probe(rng):
    return {"call": "capstone_configuration"}


CAPSTONE = Exercise(
    "capstone_configuration",
    ("capstone_configuration",),
    [
        Check(part, 2, what, _configuration_probe, _capstone(part), visible=True)
        for part, what in technique.BUDGET_WORDS.items()
    ],
)
