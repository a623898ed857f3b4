"""Write a new chapter's files from ``tools/chapter_template/``: ``make chapter SLUG=pruning N=10``.

The template is a small chapter that works as written (one exercise with its visible and hidden
checks, its known mistakes, a figure, a four-question quiz and its key, and the tests), for the
author to replace with the chapter's own. The exercise's answer is written once, in the solution
cell; what the learners' copy leaves out is in files of its own (``autograder/hidden/``,
``autograder/mistakes/``). It writes only the chapter's files, each named by its slug (the table
below); `make release` then writes the grade cells' points, the learners' notebook and its row in
the README's chapter table.

Not handled: a slug or a number that a chapter already has (refused), renaming a chapter.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().parent / "chapter_template"
FILES = {  # template -> where the chapter's copy goes
    "solution.py.tmpl": "solutions/{chapter}.py",
    "course.py.tmpl": "course/{slug}.py",
    "plots.py.tmpl": "course/plots/{slug}.py",
    "benchmarks.py.tmpl": "course/benchmarks/{slug}.py",
    "checks.py.tmpl": "autograder/chapters/{slug}.py",
    "hidden.py.tmpl": "autograder/hidden/{slug}.py",
    "mistakes.py.tmpl": "autograder/mistakes/{slug}.py",
    "test.py.tmpl": "tests/test_{slug}.py",
    "quiz.toml.tmpl": "data/quizzes/{slug}.toml",
    "quiz_key.toml.tmpl": "solutions/quizzes/{slug}.toml",
}


def chapter_files(slug: str, number: int) -> list[str]:
    """The files of chapter ``number`` named ``slug``, relative to the repository, as the template writes them."""
    chapter = f"{number:02d}_{slug}"
    return [target.format(chapter=chapter, slug=slug) for target in FILES.values()]


def write(slug: str, number: int, title: str | None = None, root: Path = ROOT) -> list[Path]:
    """Write chapter ``number`` named ``slug`` under ``root`` from the template; return the files written."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", slug) or slug.startswith("test"):
        raise ValueError(f"slug {slug!r}: use lower-case letters, digits and _, starting with a letter (like kv_cache)")
    if not 1 <= number <= 99:
        raise ValueError(f"number {number}: chapters are numbered 1 to 99")
    taken = sorted((root / "solutions").glob(f"{number:02d}_*.py"))
    if taken:
        raise FileExistsError(f"number {number} is taken by solutions/{taken[0].name}: choose another")
    targets = [root / name for name in chapter_files(slug, number)]
    existing = [str(p.relative_to(root)) for p in targets if p.exists()]
    if existing:
        raise FileExistsError(f"chapter {number} ({slug}) would overwrite {', '.join(existing)}: choose another slug")
    words = {
        "{{chapter}}": f"{number:02d}_{slug}",
        "{{slug}}": slug,
        "{{number}}": str(number),
        "{{title}}": title or slug.replace("_", " ").capitalize(),
    }
    for template, target in zip(FILES, targets, strict=True):
        text = (TEMPLATE / template).read_text()
        for placeholder, value in words.items():
            text = text.replace(placeholder, value)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a new chapter's files from the template.")
    parser.add_argument("--slug", required=True, help="the chapter's name in every file, like kv_cache")
    parser.add_argument("--number", type=int, required=True, help="its place in the course, like 10")
    parser.add_argument("--title", help="its title (default: from the slug)")
    args = parser.parse_args(argv)
    try:
        written = write(args.slug, args.number, args.title)
    except (ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    print("next: `make release` writes its points, its student copy and its README row; then make it your chapter")
    return 0


if __name__ == "__main__":
    sys.exit(main())
