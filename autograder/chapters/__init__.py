"""The chapters the grader knows: notebook name -> its exercises, in notebook order."""

from __future__ import annotations

from autograder.checks import Exercise
from autograder.chapters import arithmetic, attention, kv_cache, lora, quantization, speculative

CHAPTERS: dict[str, list[Exercise]] = {
    "01_prefill_decode": arithmetic.EXERCISES,
    "02_lora": lora.EXERCISES,
    "03_quantization": quantization.EXERCISES,
    "04_kv_cache": kv_cache.EXERCISES,
    "05_flash_attention": attention.EXERCISES,
    "06_speculative_decoding": speculative.SPECULATIVE,
    "07_distillation": speculative.DISTILLATION,
}


def exercise_by_id(grade_id: str) -> Exercise:
    """The exercise whose answer cell has ``grade_id``, in any chapter."""
    for exercises in CHAPTERS.values():
        for exercise in exercises:
            if exercise.grade_id == grade_id:
                return exercise
    known = ", ".join(e.grade_id for exercises in CHAPTERS.values() for e in exercises)
    raise KeyError(f"no exercise {grade_id!r}; known: {known}")
