"""Chapter 9's exercises and their visible checks, a module per exercise: fine_tuning_advice (the
rule for when to fine-tune, ``technique_guide.py``), pack_int4 (two 4-bit codes to a byte, ``packing.py``),
Int4Linear and speculative_greedy (the learner's server, run on the course's models in the sandbox:
``int4_layer.py``, ``speculative.py``, both through ``course_models.py``) and
capstone_configuration (a configuration within the budget, ``capstone.py``). The hidden checks are
``autograder/hidden/choosing_a_technique.py``'s, the known mistakes and what the judges compare
with beyond the solution's cells ``autograder/mistakes/choosing_a_technique.py``'s. What grading a
class writes beside the gradebook (the class leaderboard) and reads off a submission's outputs is
``autograder.leaderboard``'s."""

from autograder.chapters.choosing_a_technique.advice import ADVICE
from autograder.chapters.choosing_a_technique.capstone import CAPSTONE
from autograder.chapters.choosing_a_technique.int4_layer import INT4_LAYER
from autograder.chapters.choosing_a_technique.packing import PACK
from autograder.chapters.choosing_a_technique.speculative import SPECULATIVE
from autograder.leaderboard import reported, write_class_files  # noqa: F401 (what grading a class calls)

EXERCISES = [ADVICE, PACK, INT4_LAYER, SPECULATIVE, CAPSTONE]
