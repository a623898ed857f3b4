"""The class leaderboard of chapter 9's capstone, written beside the gradebook by ``grade_folder``:
each submission's configuration and its graded figures (bytes of weights, held-out loss, tokens
per target call), ranked, as ``leaderboard.csv`` and ``leaderboard.md``.

The ranking: configurations within the budget first; then the most tokens per target call (the
speed figure that does not depend on the machine), the fewest bytes, the lowest loss. The wall-clock
speed-up is not on it: each learner measured it on a different machine.
Not handled: several submissions of one learner (each is a row of its own).
"""

from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = (
    "rank",
    "learner",
    "configuration",
    "within_budget",
    "weight_bytes",
    "weights_share",
    "loss",
    "loss_gap",
    "tokens_per_call",
)


def entries(graded) -> list[dict]:
    """The ranked rows for ``graded``, pairs of (learner, report); submissions without capstone
    figures (other chapters, an unanswered or invalid configuration) have none."""
    rows = []
    for learner, report in graded:
        data = next((t.data for t in report.tests if t.data and "tokens_per_call" in t.data), None)
        if data is not None:
            rows.append({"learner": learner, **{key: data[key] for key in COLUMNS[2:]}})
    rows.sort(key=lambda r: (not r["within_budget"], -r["tokens_per_call"], r["weight_bytes"], r["loss"]))
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]


def markdown(rows: list[dict]) -> str:
    """The leaderboard as a Markdown table, figures rounded for reading."""
    lines = [
        "# Capstone leaderboard",
        "",
        "Within the budget first, then most tokens per target call, fewest bytes, lowest loss.",
        "",
        "| rank | learner | configuration | within budget | weights (MB) | share of fp32 | held-out loss "
        "| vs fp32 | tokens per call |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['rank']} | {r['learner']} | {r['configuration']} | {'yes' if r['within_budget'] else 'no'} "
            f"| {r['weight_bytes'] / 1e6:.2f} | {100 * r['weights_share']:.1f}% | {r['loss']:.4f} "
            f"| {r['loss_gap']:+.4f} | {r['tokens_per_call']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write(out: Path, graded) -> Path | None:
    """Write ``leaderboard.csv`` and ``leaderboard.md`` into ``out`` when any submission has capstone
    figures; return the CSV's path (None when there was nothing to rank)."""
    rows = entries(graded)
    if not rows:
        return None
    path = Path(out) / "leaderboard.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (Path(out) / "leaderboard.md").write_text(markdown(rows))
    return path
