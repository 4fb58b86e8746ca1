"""BM25 as SQLite's FTS5 computes it, for the PostgreSQL store: the same tokens, the same
formula, the same column weights.

Tokens come from SQLite's own FTS5 tokenizer (migrations.TOKENIZER: Porter stemming over
unicode61 with diacritics removed), run on an in-memory table and read back through
`fts5vocab`: every rule of it — what a word is, case folding, diacritics, Porter's
exceptions, CJK runs and acronyms kept apart — is the very one the SQLite index uses, so
both backends see the same words. The postings (term, document, column, positions) are
stored in PostgreSQL; a query is the FTS5 expression `quote_fts` makes, read back by
`parse` and scored by `bm25` exactly as FTS5's bm25() does (k1 = 1.2, b = 0.75, IDF
floored at 1e-6, the length of a row the sum of its columns' tokens).
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from loomcli.migrations import TOKENIZER

K1 = 1.2  # FTS5's bm25() constants (fts5_aux.c)
B = 0.75
IDF_FLOOR = 1e-6
COLUMNS_MAX = 3


class Words:
    """SQLite's FTS5 tokenizer, in memory, one text (or query) at a time. The table is
    contentless and emptied with 'delete-all': a DELETE of a row would tokenize its text
    a second time (a third of a first scan's tokenizing)."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        cols = ", ".join(f"c{i}" for i in range(COLUMNS_MAX))
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5({cols}, content='', "
                        f"tokenize='{TOKENIZER}')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        self.lock = threading.Lock()

    def postings(self, texts: Sequence[str | None]
                 ) -> Iterator[tuple[str, int, int, str]]:
        """(term, column, count, positions as '1,5,9') of the texts, one per column,
        grouped in SQLite: Python holds one term's positions at a time."""
        with self.lock:
            self.db.execute("INSERT INTO t (rowid, c0, c1, c2) VALUES (1, ?, ?, ?)",
                            [*texts, *([None] * (COLUMNS_MAX - len(texts)))])
            try:
                for term, col, count, positions in self.db.execute(
                        "SELECT term, col, count(*), group_concat(offset) FROM v "
                        "GROUP BY term, col"):
                    yield term, int(col[1:]), int(count), positions
            finally:
                self.db.execute("INSERT INTO t (t) VALUES ('delete-all')")

    def tokens(self, text: str) -> list[str]:
        """A query phrase's tokens, in order."""
        with self.lock:
            self.db.execute("INSERT INTO t (rowid, c0) VALUES (1, ?)", (text,))
            try:
                return [r[0] for r in self.db.execute(
                    "SELECT term FROM v WHERE col = 'c0' ORDER BY offset")]
            finally:
                self.db.execute("INSERT INTO t (t) VALUES ('delete-all')")


_WORDS: Words | None = None


def words() -> Words:
    global _WORDS
    if _WORDS is None:
        _WORDS = Words()
    return _WORDS


# -- queries: the FTS5 expressions store.quote_fts writes ------------------------------

class Phrase:
    """One phrase of a query: its text, whether its last token is a prefix, and the
    column it is limited to (None: every column)."""

    __slots__ = ("text", "prefix", "column")

    def __init__(self, text: str, prefix: bool, column: str | None) -> None:
        self.text, self.prefix, self.column = text, prefix, column


Expr = tuple[str, object]  # ("phrase", Phrase) | ("and" | "or", list[Expr])

_TOKEN = re.compile(r'\s*(?:"((?:[^"]|"")*)"|(\*)|(AND|OR)\b|(\()|(\))|(\w+)\s*:)')


def parse(match: str) -> Expr | None:
    """The tree of a quote_fts expression: phrases joined by AND and OR (AND binds
    tighter, as in FTS5), groups in parentheses, `col : "phrase"` and `"phrase" *`."""
    items: list[tuple[str, str]] = []
    pos = 0
    while pos < len(match):
        if match[pos:].strip() == "":
            break
        m = _TOKEN.match(match, pos)
        if m is None:
            raise ValueError(f"cannot read the query {match!r} at {pos}")
        pos = m.end()
        phrase, star, op, opening, closing, column = m.groups()
        if phrase is not None:
            items.append(("phrase", phrase.replace('""', '"')))
        elif star:
            items.append(("star", ""))
        elif op:
            items.append(("op", op))
        elif opening:
            items.append(("(", ""))
        elif closing:
            items.append((")", ""))
        else:
            items.append(("column", column))
    tree, end = _or(items, 0)
    return tree


def _or(items: list[tuple[str, str]], i: int) -> tuple[Expr | None, int]:
    parts: list[Expr] = []
    part, i = _and(items, i)
    if part is not None:
        parts.append(part)
    while i < len(items) and items[i] == ("op", "OR"):
        part, i = _and(items, i + 1)
        if part is not None:
            parts.append(part)
    if not parts:
        return None, i
    return (parts[0] if len(parts) == 1 else ("or", parts)), i


def _and(items: list[tuple[str, str]], i: int) -> tuple[Expr | None, int]:
    parts: list[Expr] = []
    part, i = _primary(items, i)
    if part is not None:
        parts.append(part)
    while i < len(items) and items[i] == ("op", "AND"):
        part, i = _primary(items, i + 1)
        if part is not None:
            parts.append(part)
    if not parts:
        return None, i
    return (parts[0] if len(parts) == 1 else ("and", parts)), i


def _primary(items: list[tuple[str, str]], i: int) -> tuple[Expr | None, int]:
    kind, value = items[i]
    if kind == "(":
        inner, i = _or(items, i + 1)
        return inner, i + 1  # the ")"
    column = None
    if kind == "column":
        column, i = value, i + 1
        kind, value = items[i]
    prefix = i + 1 < len(items) and items[i + 1][0] == "star"
    return ("phrase", Phrase(value, prefix, column)), i + (2 if prefix else 1)


def phrases(tree: Expr) -> list[Phrase]:
    kind, arg = tree
    if kind == "phrase":
        assert isinstance(arg, Phrase)
        return [arg]
    assert isinstance(arg, list)
    return [p for sub in arg for p in phrases(sub)]


def matching(tree: Expr, found: dict[int, dict[int, float]], order: list[Phrase]
             ) -> set[int]:
    """The documents the expression matches, given each phrase's hits (by its place in
    `order`)."""
    kind, arg = tree
    if kind == "phrase":
        return set(found[order.index(arg)])  # type: ignore[arg-type]
    assert isinstance(arg, list)
    sets = [matching(sub, found, order) for sub in arg]
    if kind == "and":
        out = sets[0]
        for s in sets[1:]:
            out = out & s
        return out
    return set().union(*sets)


def phrase_hits(rows: Sequence[tuple[int, int, str, Sequence[int]]], tokens: list[str],
                prefix: bool) -> dict[tuple[int, int], int]:
    """Instances of a phrase of several tokens, by (document, column), from the postings
    of its tokens: (document, column, term, positions)."""
    last = len(tokens) - 1
    by_place: dict[tuple[int, int], list[set[int]]] = {}
    for doc, col, term, positions in rows:
        slots = by_place.setdefault((doc, col), [set() for _ in tokens])
        for i, token in enumerate(tokens):
            if term == token or (prefix and i == last and term.startswith(token)):
                slots[i].update(positions)
    out: dict[tuple[int, int], int] = {}
    for place, slots in by_place.items():
        if not all(slots):
            continue
        n = sum(1 for p in slots[0] if all(p + i in slots[i] for i in range(1, len(slots))))
        if n:
            out[place] = n
    return out


def bm25(freq: float, idf: float, length: int, avgdl: float) -> float:
    # In FTS5's order of operations (fts5_aux.c), so that equal scores stay equal.
    return idf * ((freq * (K1 + 1.0)) / (freq + K1 * (1 - B + B * length / avgdl)))


def idf(rows: int, hits: int) -> float:
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else IDF_FLOOR
