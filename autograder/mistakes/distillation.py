"""Chapter 7's known mistakes: what each returns on a check's inputs (the judges of
``autograder/chapters/distillation.py`` name a mistake by it), and wrong answers written out."""

from __future__ import annotations

import math

import torch

from autograder.mistakes import Planted

# --- distillation_loss ---------------------------------------------------------------------------------

DISTILL_MISTAKES = [
    "the T^2 factor is missing: multiply by temperature**2 so gradients keep their size",
    "divided by T^2 instead of multiplying: multiply by temperature**2",
    "the KL is reversed: KL(teacher || student) sums p_teacher * (log p_teacher - log p_student)",
    "the temperature was not applied to the logits",
    "the temperature was applied to the student's logits only: soften both",
    "the temperature was applied to the teacher's logits only: soften both",
    "returned the cross-entropy: subtract the teacher's entropy (KL = CE - H)",
    "summed over positions: average them",
    'F.kl_div(..., reduction="batchmean") divides by the first dimension only (the batch), not by every '
    "position: reshape the logits to (-1, vocab) first, or sum over the vocabulary and take the mean",
    'F.kl_div(..., reduction="mean") averages over the vocabulary too: sum over the vocabulary, then '
    'average over positions (reduction="batchmean" on (-1, vocab) logits)',
    "averaged over the first two dimensions only, as for (B, T, vocab) logits (or summed over the last leading "
    "one): every leading position counts once, so average over all of them (reshape to (-1, vocab) first)",
]


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dimension, from log-probabilities: (..., vocab) -> (...)."""
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def _loss(student_logits, teacher_logits, student_t: float, teacher_t: float) -> float:
    """KL(teacher || student) of the logits softened by their own temperatures, mean over positions."""
    s = torch.log_softmax(student_logits / student_t, -1)
    te = torch.log_softmax(teacher_logits / teacher_t, -1)
    return _kl(te, s).mean().item()


def of_distillation_loss(student, teacher, t) -> list[tuple[str, float]]:
    """What each of :data:`DISTILL_MISTAKES` gives on these logits at temperature ``t``, with its
    hint, in float64; a mistake whose number another mistake shares is left out (the number cannot
    say which was made, and the judge then says only what it saw)."""
    student, teacher = student.double(), teacher.double()
    s = torch.log_softmax(student / t, -1)
    te = torch.log_softmax(teacher / t, -1)
    kl = _kl(te, s)
    wrong = [
        kl.mean().item(),
        kl.mean().item() / t**2,
        (_kl(s, te).mean() * t * t).item(),
        _loss(student, teacher, 1.0, 1.0) * t * t,
        _loss(student, teacher, t, 1.0) * t * t,
        _loss(student, teacher, 1.0, t) * t * t,
        (-(te.exp() * s).sum(-1).mean() * t * t).item(),
        (kl.sum() * t * t).item(),
        (kl.sum() / student.shape[0] * t * t).item(),
        (kl.mean() / student.shape[-1] * t * t).item(),
        (kl.sum() / (student.shape[0] * student.shape[1]) * t * t).item(),
    ]
    return _telling(list(zip(DISTILL_MISTAKES, wrong, strict=True)), rel=1e-4, abs_tol=1e-6)


def _telling(mistakes: list[tuple[str, float]], rel: float, abs_tol: float) -> list[tuple[str, float]]:
    """The mistakes whose value on these inputs no mistake of another hint shares: where two give the
    same number, the number cannot say which was made, and the hint says only what it saw."""
    return [
        (hint, value)
        for hint, value in mistakes
        if not any(
            other != hint and math.isclose(value, same, rel_tol=rel, abs_tol=abs_tol) for other, same in mistakes
        )
    ]


# --- prune_smallest ------------------------------------------------------------------------------------


def _zero_where(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return weight.masked_fill(mask, 0.0)


def of_prune_smallest(weight: torch.Tensor, share: float) -> list:
    """(kind, hint, the pruned matrix that mistake gives) for the usual wrong answers, in float64,
    the more specific first (a truncated count is also one weight too few). The judge tells the
    twins of :data:`autograder.chapters.distillation.TWINS` apart."""
    weight = weight.double()
    exact = share * weight.numel()
    count = round(exact)  # as torch.nn.utils.prune counts
    flat = weight.abs().flatten()
    order = flat.sort(stable=True).indices

    def ranked(values: torch.Tensor, n: int) -> torch.Tensor:
        mask = torch.zeros(weight.numel(), dtype=torch.bool)
        mask[values.flatten().sort(stable=True).indices[:n]] = True
        return _zero_where(weight, mask.reshape(weight.shape))

    def per_row(keep: int) -> torch.Tensor:
        rows = weight.abs().sort(dim=-1, stable=True).indices[:, :keep]
        return _zero_where(weight, torch.zeros_like(weight, dtype=torch.bool).scatter(1, rows, True))

    largest = torch.zeros(weight.numel(), dtype=torch.bool)
    largest[order[weight.numel() - count :]] = True
    row_by_row = (
        "pruned the same share of each row: the exercise ranks the whole matrix at once, so rows of small "
        "weights lose more of theirs"
    )
    return [
        (
            "largest",
            "pruned the largest weights: zero the ones of smallest magnitude |w|",
            _zero_where(weight, largest.reshape(weight.shape)),
        ),
        (
            "signed",
            "ranked the signed values (the most negative first): rank by magnitude, weight.abs()",
            ranked(weight, count),
        ),
        ("rows", row_by_row, per_row(round(share * weight.shape[-1]))),
        ("rows", row_by_row, per_row(int(share * weight.shape[-1]))),
        (
            "truncated",
            f"truncates instead of rounding: int({exact:g}) = {int(exact)} weights, but the count is "
            f"round(share * numel) = {count}, as torch.nn.utils.prune.l1_unstructured counts",
            ranked(flat, int(exact)),
        ),
        (
            "half_up",
            f"rounded {exact:g} half up to {int(exact + 0.5)}: torch.nn.utils.prune counts round(share * numel), "
            f"and Python's round takes halves to the even number (round({exact:g}) = {count})",
            ranked(flat, int(exact + 0.5)),
        ),
        ("one_more", "zeroed one weight too many: exactly round(share * numel) weights", ranked(flat, count + 1)),
        (
            "one_less",
            "zeroed one weight too few: exactly round(share * numel) weights",
            ranked(flat, max(count - 1, 0)),
        ),
    ]


# --- wrong answers written out -----------------------------------------------------------------------

PRUNE = """
def prune_smallest(weight, share):
    if not 0 <= share <= 1:
        raise ValueError("share")
    pruned = weight.clone()
    {body}
    return pruned
"""


def prune(ranks="weight.abs().flatten().argsort()", extra="", count="round(share * weight.numel())") -> str:
    """A prune_smallest that zeroes the first ``count`` (+ ``extra``) weights of ``ranks``."""
    return PRUNE.format(body=f"pruned.view(-1)[{ranks}[: {count}{extra}]] = 0")


KL_DIV = """
import torch.nn.functional as F

def distillation_loss(student_logits, teacher_logits, temperature):
    vocab = student_logits.shape[-1]
    student = F.log_softmax({student} / temperature, dim=-1)
    teacher = F.{teacher_fn}({teacher} / temperature, dim=-1)
    return F.kl_div(student, teacher, reduction="{reduction}") * temperature**2
"""


def kl_div(student="student_logits", teacher="teacher_logits", teacher_fn="softmax", reduction="batchmean") -> str:
    """A distillation_loss through ``F.kl_div`` (its arguments as given)."""
    return KL_DIV.format(student=student, teacher=teacher, teacher_fn=teacher_fn, reduction=reduction)


IN_PLACE = prune().replace("pruned = weight.clone()", "pruned = weight")  # the caller's weight zeroed
FLATTENED = prune().replace("return pruned", "return pruned.flatten()")
FLAT = {"student": "student_logits.reshape(-1, vocab)", "teacher": "teacher_logits.reshape(-1, vocab)"}
EVERY_LOSS = {"distillation_loss.batch_t2", "distillation_loss.t1", "distillation_loss.t4", "distillation_loss.4d"}
PRUNED_VALUES = {
    "prune_smallest.example",
    "prune_smallest.whole_matrix",
    "prune_smallest.rounding",
    "prune_smallest.copy",
    "prune_smallest.half",
    "prune_smallest.bad_share",
}

PLANTED = {  # graded end to end
    "distill_no_t_squared": Planted(
        "distillation_loss",
        "def distillation_loss(student_logits, teacher_logits, temperature):\n"
        "    s = torch.log_softmax(student_logits / temperature, -1)\n"
        "    t = torch.log_softmax(teacher_logits / temperature, -1)\n"
        "    return (t.exp() * (t - s)).sum(-1).mean()\n",
        {"distillation_loss.batch_t2", "distillation_loss.t4", "distillation_loss.4d"},
        "T^2 factor",
    ),
    "prune_row_by_row": Planted(
        "prune_smallest",
        PRUNE.format(
            body="keep = int(share * weight.shape[1])\n"
            "    rows = weight.abs().argsort(dim=1)[:, :keep]\n"
            "    pruned.scatter_(1, rows, 0.0)"
        ),
        {"prune_smallest.whole_matrix"},
        "the same share of each row",
    ),
    "prune_with_kthvalue_at_least_one": Planted(  # the chapter's own first version: max(1, ...) prunes at share 0
        "prune_smallest",
        PRUNE.format(
            body="cutoff = weight.abs().flatten().kthvalue(max(1, int(share * weight.numel()))).values\n"
            "    pruned[weight.abs() <= cutoff] = 0"
        ),
        {"prune_smallest.edges"},
        "share 0 zeroed 1 weight(s)",
    ),
    "prune_truncates": Planted(  # what the chapter asked for before it counted like torch.nn.utils.prune
        "prune_smallest",
        prune(count="int(share * weight.numel())"),
        {"prune_smallest.rounding"},
        "truncates instead of rounding: int(18.75) = 18 weights",
    ),
}

JUDGED = {  # judged in the tests' process
    "kl_div_batchmean_on_sequences": Planted(
        "distillation_loss", kl_div(), EVERY_LOSS, 'reduction="batchmean") divides by the first dimension only'
    ),
    "kl_div_mean": Planted("distillation_loss", kl_div(reduction="mean", **FLAT), EVERY_LOSS, 'reduction="mean"'),
    "kl_div_log_target": Planted(
        "distillation_loss", kl_div(teacher_fn="log_softmax", **FLAT), EVERY_LOSS, "log_target=True"
    ),
    "prune_the_largest": Planted(
        "prune_smallest",
        prune(ranks="weight.abs().flatten().argsort(descending=True)"),
        PRUNED_VALUES,
        "pruned the largest weights",
    ),
    "prune_signed_values": Planted(
        "prune_smallest", prune(ranks="weight.flatten().argsort()"), PRUNED_VALUES, "ranked the signed values"
    ),
    "prune_in_place": Planted("prune_smallest", IN_PLACE, {"prune_smallest.copy"}, "work on a copy"),
    "prune_flattened": Planted(
        "prune_smallest", FLATTENED, PRUNED_VALUES | {"prune_smallest.edges"}, "the output has the wrong shape"
    ),
    "prune_one_too_many": Planted(
        "prune_smallest",
        prune(extra=" + 1"),
        PRUNED_VALUES - {"prune_smallest.half"},  # round(4.5) + 1 = 5 is also 4.5 rounded half up
        "one weight too many",
    ),
    "prune_rounds_halves_up": Planted(
        "prune_smallest",
        prune(count="math.floor(share * weight.numel() + 0.5)"),
        {"prune_smallest.half"},
        "rounded 4.5 half up to 5",
    ),
    "prune_without_a_share_check": Planted(
        "prune_smallest",
        prune().replace('    if not 0 <= share <= 1:\n        raise ValueError("share")\n', ""),
        {"prune_smallest.bad_share"},
        "expected ValueError",
    ),
    "averaged_over_the_first_two_dimensions": Planted(  # right on (B, T, vocab); T^2 x 4 = 1 once hid it
        "distillation_loss",
        "def distillation_loss(student_logits, teacher_logits, temperature):\n"
        "    s = torch.log_softmax(student_logits / temperature, -1)\n"
        "    t = torch.log_softmax(teacher_logits / temperature, -1)\n"
        "    kl = (t.exp() * (t - s)).sum(-1)\n"
        "    return kl.sum() / (kl.shape[0] * kl.shape[1]) * temperature**2\n",
        {"distillation_loss.4d"},
        "averaged over the first two dimensions only",
    ),
    "prune_with_a_strict_cutoff": Planted(  # one weight short at every share: not a truncated count
        "prune_smallest",
        """
def prune_smallest(weight, share):
    if not 0 <= share <= 1:
        raise ValueError("share")
    count = round(share * weight.numel())
    pruned = weight.clone()
    if count:
        cutoff = weight.abs().flatten().kthvalue(count).values
        pruned[weight.abs() < cutoff] = 0
    return pruned
""",
        PRUNED_VALUES,
        "zeroed one weight too few",
    ),
    "temperature_on_the_student_only": Planted(
        "distillation_loss",
        "def distillation_loss(student_logits, teacher_logits, temperature):\n"
        "    s = torch.log_softmax(student_logits / temperature, -1)\n"
        "    t = torch.log_softmax(teacher_logits, -1)\n"
        "    return (t.exp() * (t - s)).sum(-1).mean() * temperature**2\n",
        {"distillation_loss.batch_t2", "distillation_loss.t4", "distillation_loss.4d"},
        "student's logits only",
    ),
}
