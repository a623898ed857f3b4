"""Feedback a learner can read: one submission's report as text, JSON and a self-contained HTML page.

The page shows the score, every check (what it tests, its points, its hint, and the expected and
received values where the hint states them) and the learner's answer cells. Everything that comes
from a submission (code, messages, values it returned, file and folder names) is escaped, and the
page forbids scripts outright (a Content-Security-Policy that allows no script, and only the page's
own style sheet by its hash), so nothing a submission contains can run when the page is opened.

Not handled: the figures and printed output of the learner's notebook (grading never runs them).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from pathlib import Path

from autograder.chapters import CHAPTERS

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.score { font-size: 1.2rem; } meter { width: 100%; height: 1rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem; }
tr { border-bottom: 1px solid #ddd; } .ok { color: #186; font-weight: 600; } .fail { color: #b22; font-weight: 600; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; font-size: 13px; white-space: pre-wrap; }
code { font-size: 13px; } .note { color: #555; } .pair { display: grid; grid-template-columns: 1fr 1fr; gap: .6rem; }
""".strip()
CSP = (
    "default-src 'none'; style-src 'sha256-"
    + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
    + "'; base-uri 'none'; form-action 'none'"
)
TEXT = {"encoding": "utf-8", "errors": "replace"}  # how files are written: a lone surrogate must not stop a run
SHOWN_CHARACTERS = 20_000  # of one answer on a page
EXPECTED_GOT = re.compile(r"expected (?P<expected>[^;()]+?), got (?P<got>[^;()]+?)(?=\)|;|$)")


def escape(text) -> str:
    """Any text as HTML that shows it literally (quotes included, for attributes)."""
    return html.escape(str(text), quote=True)


def code(source: str) -> str:
    """A learner's code as escaped HTML, cut after ``SHOWN_CHARACTERS``."""
    more = len(source) - SHOWN_CHARACTERS
    shown = source if more <= 0 else f"{source[:SHOWN_CHARACTERS]}\n... ({more} more characters not shown)"
    return f"<pre><code>{escape(shown)}</code></pre>"


def page(title: str, body: str) -> str:
    """A complete HTML page around ``body`` (already escaped HTML): no script can run in it."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def expected_and_got(hint: str) -> tuple[str, str]:
    """The expected and received values a hint states ("... expected 4.25, got 4"), or empty strings."""
    match = EXPECTED_GOT.search(hint or "")
    return (match["expected"].strip(), match["got"].strip()) if match else ("", "")


def _descriptions(chapter: str) -> dict[str, str]:
    return {c.id: c.what for e in CHAPTERS.get(chapter, []) for c in e.checks}


def html_report(report, learner: str) -> str:
    """One learner's report of one chapter (a ``grade.Report``) as an HTML page."""
    chapter = report.chapter or "unknown chapter"
    share = report.score / report.max_score if report.max_score else 0.0
    parts = [
        f"<h1>{escape(chapter)}: feedback for {escape(learner)}</h1>",
        f'<p class="score">{report.score:g} / {report.max_score:g} points ({share:.0%})</p>',
        f'<meter min="0" max="{report.max_score:g}" value="{report.score:g}">{share:.0%}</meter>',
        f'<p class="note">File {escape(report.notebook)}; hidden inputs from seed {report.seed}'
        + (f"; sandbox: {escape(report.isolation)}" if report.isolation else "")
        + ".</p>",
    ]
    if report.messages:
        parts.append("<h2>Notes</h2>\n<ul>" + "".join(f"<li>{escape(m)}</li>" for m in report.messages) + "</ul>")
    if report.tests:
        what = _descriptions(report.chapter)
        rows = []
        for test in report.tests:
            expected, got = ("", "") if test.passed else expected_and_got(test.hint)
            mark = '<span class="ok">ok</span>' if test.passed else '<span class="fail">FAIL</span>'
            rows.append(
                f"<tr><td>{mark}</td><td><code>{escape(test.id)}</code><br>{escape(what.get(test.id, ''))}</td>"
                f"<td>{test.points:g} / {test.max_points:g}</td><td>{escape('' if test.passed else test.hint)}</td>"
                f"<td>{escape(expected)}</td><td>{escape(got)}</td></tr>"
            )
        parts.append(
            "<h2>Checks</h2>\n<table>\n<tr><th></th><th>check</th><th>points</th><th>hint</th>"
            "<th>expected</th><th>got</th></tr>\n" + "\n".join(rows) + "\n</table>"
        )
    if report.answers:
        parts.append("<h2>Your answers, as graded</h2>")
        for grade_id, source in report.answers.items():
            parts.append(f"<h3><code>{escape(grade_id)}</code></h3>\n{code(source)}")
    return page(f"{chapter}: {report.score:g} / {report.max_score:g}", "\n".join(parts))


def write(out: Path, graded) -> None:
    """Write one submission's feedback (a ``shards.Graded``) as ``STEM.txt``, ``STEM.json`` and ``STEM.html``."""
    out = Path(out)
    (out / f"{graded.stem}.txt").write_text(graded.report.text() + "\n", **TEXT)
    (out / f"{graded.stem}.json").write_text(json.dumps(graded.report.as_json(), indent=1) + "\n", **TEXT)
    (out / f"{graded.stem}.html").write_text(html_report(graded.report, graded.learner), **TEXT)
