"""The class leaderboard of chapter 9's capstone, written beside the gradebook when a class is
graded: each submission's configuration and its graded figures (bytes of weights, held-out loss,
tokens per target call, modelled speed-up), and beside them the speed-up the learner's own machine
measured, read from the saved notebook's outputs (reported, never graded: the file can say
anything). Ranked: configurations within the budget first; then the measured speed-up (the fastest
first, none last), then the modelled speed-up, the fewest bytes, the lowest loss.

Not handled: several submissions of one learner (each is a row of its own), machines of different
speeds (a measured speed-up is a ratio against the float32 target on the same machine, nothing more).
"""

from __future__ import annotations

import csv
from pathlib import Path

from course.learner_server import read_speedups

LEADERBOARD_COLUMNS = (
    "rank",
    "learner",
    "configuration",
    "within_budget",
    "measured_speedup",
    "weight_bytes",
    "weights_share",
    "loss",
    "loss_gap",
    "tokens_per_call",
    "modelled_speedup",
)


def _output_text(cell: dict) -> str:
    """The printed text of a code cell's saved outputs (streams and plain-text results)."""
    texts = []
    for output in cell.get("outputs") or []:
        if not isinstance(output, dict):
            continue
        text = output.get("text") or (output.get("data") or {}).get("text/plain") or ""
        texts.append("".join(text) if isinstance(text, list) else str(text))
    return "".join(t for t in texts if isinstance(t, str))


def reported(submitted: dict) -> dict:
    """The speed-ups the submitted notebook's outputs show (``course.learner_server.speedup_line``, printed by the
    cell that times the learner's server): ``{"measured_speedups": {name: ratio}}``, or {}."""
    cells = [c for c in submitted.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]
    speedups = read_speedups("\n".join(_output_text(c)[-20_000:] for c in cells))
    return {"measured_speedups": speedups} if speedups else {}


def leaderboard_entries(graded) -> list[dict]:
    """The ranked rows for ``graded``, pairs of (learner, report); submissions without capstone
    figures (other chapters, an unanswered or invalid configuration) have none. The measured
    speed-up is the best of those the notebook reports (the learner's layer, or its codes through
    the fused product), None where it reports none."""
    rows = []
    for learner, report in graded:
        data = next((t.data for t in report.tests if t.data and "modelled_speedup" in t.data), None)
        if data is not None:
            measured = (getattr(report, "reported", None) or {}).get("measured_speedups") or {}
            best = max(measured.values()) if measured else None
            rows.append(
                {"learner": learner, "measured_speedup": best}
                | {key: data[key] for key in LEADERBOARD_COLUMNS[2:] if key != "measured_speedup"}
            )
    rows.sort(
        key=lambda r: (
            not r["within_budget"],
            r["measured_speedup"] is None,
            -(r["measured_speedup"] or 0.0),
            -r["modelled_speedup"],
            r["weight_bytes"],
            r["loss"],
        )
    )
    return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]


def leaderboard_markdown(rows: list[dict]) -> str:
    """The leaderboard as a Markdown table, figures rounded for reading."""
    lines = [
        "# Capstone leaderboard",
        "",
        "Within the budget first, then the speed-up each learner's machine measured (reported by the notebook, "
        "never graded; none last), then the modelled speed-up, fewest bytes, lowest loss.",
        "",
        "| rank | learner | configuration | within budget | measured speed-up | weights (MB) | share of fp32 "
        "| held-out loss | vs fp32 | tokens per call | modelled speed-up |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        measured = f"{r['measured_speedup']:.2f}x" if r["measured_speedup"] is not None else "none reported"
        lines.append(
            f"| {r['rank']} | {r['learner']} | {r['configuration']} | {'yes' if r['within_budget'] else 'no'} "
            f"| {measured} | {r['weight_bytes'] / 1e6:.2f} | {100 * r['weights_share']:.1f}% | {r['loss']:.4f} "
            f"| {r['loss_gap']:+.4f} | {r['tokens_per_call']:.2f} | {r['modelled_speedup']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def write_class_files(out: Path, graded) -> Path | None:
    """The class leaderboard, written beside the gradebook (``grade.write_class_files`` calls this
    for the chapter's submissions): ``leaderboard.csv`` and ``leaderboard.md`` in ``out`` when any
    submission has capstone figures; return the CSV's path (None when there was nothing to rank)."""
    rows = leaderboard_entries(graded)
    if not rows:
        return None
    path = Path(out) / "leaderboard.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LEADERBOARD_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (Path(out) / "leaderboard.md").write_text(leaderboard_markdown(rows))
    return path
