"""Chapter 3's exercises and their visible checks, a module per exercise: the round trip, the
relative error, int8 codes and the scales' bits (``absmax.py``), GPTQ (``gptq.py``), AWQ
(``awq.py``). The hidden checks are ``autograder/hidden/quantization.py``'s, the known mistakes
``autograder/mistakes/quantization/``'s."""

from autograder.chapters.quantization.absmax import EFFECTIVE_BITS, INT8, QUANTIZE_DEQUANTIZE, RELATIVE_ERROR
from autograder.chapters.quantization.awq import AWQ
from autograder.chapters.quantization.gptq import GPTQ

EXERCISES = [QUANTIZE_DEQUANTIZE, RELATIVE_ERROR, INT8, EFFECTIVE_BITS, GPTQ, AWQ]
