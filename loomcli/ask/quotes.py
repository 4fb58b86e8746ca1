"""Quotes in an answer, looked up in what was sent.

Every passage the answer quotes ("…", “…”, «…», „…“) of `QUOTE_MIN_CHARS` characters or
more is searched for in the sent excerpts, ignoring case, white space, line breaks and
typographic quotes. Found: its file, byte offset and length in `loom get` terms and its
page for PDFs. Found nowhere: `verified: false`, which the human output marks.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

QUOTE_MIN_CHARS = 20
QUOTE_MAX_CHARS = 2000  # a longer "quote" is not one sentence relied on
QUOTES_MAX = 50  # an answer quoting more is checked for its first 50

_N = f"{{{QUOTE_MIN_CHARS},{QUOTE_MAX_CHARS}}}"
_QUOTE = re.compile(f'"([^"]{_N})"|“([^“”]{_N})”|«([^«»]{_N})»|„([^„“”]{_N})[“”]')
_SAME = str.maketrans({"‘": "'", "’": "'", "‚": "'", "‛": "'", "`": "'", "“": '"', "”": '"',
                       "„": '"', "«": '"', "»": '"', "\u00a0": " ", "–": "-", "—": "-"})
_SPACE = re.compile(r"\s+")


@dataclass
class Piece:
    """One sent range of a file's text: where it starts (bytes) and its text."""

    byte_offset: int
    text: str


@dataclass
class Source:
    """What was sent of one file, for looking quotes up."""

    path: str
    pieces: list[Piece]
    page_starts: list[int] | None  # byte offsets where pages start (PDFs)

    def page(self, byte_offset: int) -> int | None:
        return bisect_right(self.page_starts, byte_offset) if self.page_starts else None


@dataclass
class Quote:
    text: str
    path: str | None = None
    offset: int | None = None
    length: int | None = None
    page: int | None = None
    verified: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "path": self.path, "offset": self.offset,
                "length": self.length, "page": self.page, "verified": self.verified}


def quoted(answer: str) -> list[str]:
    """The passages `answer` quotes, in order, without repeats."""
    out: list[str] = []
    for m in _QUOTE.finditer(answer):
        text = next(g for g in m.groups() if g is not None).strip()
        if len(text) >= QUOTE_MIN_CHARS and text not in out:
            out.append(text)
        if len(out) == QUOTES_MAX:
            break
    return out


def normalize(text: str) -> tuple[str, list[int]]:
    """`text` folded for comparison, and for each folded character its index in `text`."""
    folded: list[str] = []
    where: list[int] = []
    space = False
    for i, ch in enumerate(text.translate(_SAME)):
        if ch.isspace():
            if not space and folded:
                folded.append(" ")
                where.append(i)
            space = True
            continue
        space = False
        for low in ch.lower():  # "İ".lower() is two characters
            folded.append(low)
            where.append(i)
    return "".join(folded), where


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text.translate(_SAME)).strip().lower()


def check(answer: str, sources: list[Source]) -> list[Quote]:
    """Each quote of `answer`, located in the first sent piece that holds it."""
    folded = [(src, piece, *normalize(piece.text)) for src in sources for piece in src.pieces]
    out: list[Quote] = []
    for text in quoted(answer):
        needle = _fold(text).strip("\"' .,;:…")
        quote = Quote(text)
        for src, piece, hay, where in folded:
            at = hay.find(needle) if needle else -1
            if at < 0:
                continue
            start, end = where[at], where[at + len(needle) - 1] + 1
            offset = piece.byte_offset + len(piece.text[:start].encode("utf-8"))
            length = len(piece.text[start:end].encode("utf-8"))
            quote = Quote(text, src.path, offset, length, src.page(offset), True)
            break
        out.append(quote)
    return out
