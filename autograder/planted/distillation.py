"""Chapter 7's planted mistakes: the distillation loss and pruning (``PRUNE``, ``prune``)."""

from autograder.planted import Planted

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


PLANTED = {
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
