"""Chapter 3's known mistakes, by exercise: what each returns on a check's inputs (the judges of
``autograder/chapters/quantization/`` name a mistake by it: ``of_<exercise>``), and the wrong
answers written out (``PLANTED``, graded end to end; ``JUDGED``, judged in the tests' process)."""

from autograder.mistakes.quantization import absmax, awq, gptq
from autograder.mistakes.quantization.absmax import (
    of_dequantize_int8,
    of_effective_bits,
    of_quantize_dequantize,
    of_quantize_int8,
    of_relative_error,
)
from autograder.mistakes.quantization.awq import of_awq_quantize
from autograder.mistakes.quantization.gptq import of_gptq_quantize

__all__ = [
    "JUDGED",
    "PLANTED",
    "of_awq_quantize",
    "of_dequantize_int8",
    "of_effective_bits",
    "of_gptq_quantize",
    "of_quantize_dequantize",
    "of_quantize_int8",
    "of_relative_error",
]

PLANTED = {**absmax.PLANTED, **gptq.PLANTED}
JUDGED = {**absmax.JUDGED, **gptq.JUDGED, **awq.JUDGED}
