"""What text any match of a pattern must contain: the literals it requires, pure.

The indexed grep (grep.py) asks the store's trigram index for the files that hold every
trigram of those literals (`candidates`; each backend writes its own query, SQLite's is
`store.sqlite.grams_match`), then verifies them with RE2, as Russ Cox's codesearch does.
So the requirement must never exclude a file that has a match: each step below only ever
*drops* a requirement when unsure (a superset of candidates is slower, never wrong), and a pattern
this module cannot read exactly as RE2 does gives no query at all (a linear scan).

The pattern is parsed with Python's own regex parser, which reads RE2's common syntax the
same way; where the two differ (POSIX classes, `\\p`, `\\Q…\\E`, `\\x{…}`, `(?U)` …) the
parser fails or the pattern is refused up front, and loom scans linearly.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

MAX_ALTERNATIVES = 16  # an OR of more branches than this says too little to be worth it
MAX_TRIGRAMS = 24  # per literal: more adds little selectivity and costs query time

# Where RE2 and Python's parser disagree: refuse rather than guess.
_UNSURE = re.compile(r"\[:|\\[pPQECzx]|\(\?[a-zA-Z]*U|\(\?P=|\\[0-9]")

if TYPE_CHECKING:
    # What a match requires: ("lit", text) | ("and", [Need...]) | ("or", [Need...]).
    Need = tuple[str, Any]
    Query = Need | None  # None: nothing known (any text may match)


def required(pattern: str) -> Need | None:
    """What every text with a match holds: ("lit", text) | ("and", [...]) | ("or",
    [...]) of literals of 3 characters or more; None when nothing is known (scan all)."""
    if _UNSURE.search(pattern):
        return None
    try:
        from loomcli.compat import regex_parser

        parsed = regex_parser()[0](pattern)
        tree = _simplify(_sequence(list(parsed)))
    except Exception:  # noqa: BLE001 - anything the parser dislikes: scan linearly
        return None
    return tree


def _sequence(items: list[tuple[Any, Any]]) -> Query:
    """Requirements of a concatenation: literal runs of 3+ characters, and what each
    sub-part requires on its own."""
    from loomcli.compat import regex_parser

    c = regex_parser()[1]

    required: list[Query] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) >= 3:
            required.append(("lit", "".join(run)))
        run.clear()

    for op, arg in items:
        if op is c.LITERAL:
            run.append(chr(arg))
        elif op in (c.AT,):  # ^ $ \b \B: zero width, they do not break a literal
            continue
        elif op is c.SUBPATTERN:
            flush()
            required.append(_sequence(list(arg[-1])))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            flush()
            low, _high, sub = arg
            if low >= 1:
                required.append(_sequence(list(sub)))
        elif op is c.BRANCH:
            flush()
            branches = [_sequence(list(b)) for b in arg[1]]
            required.append(None if any(b is None for b in branches)
                            or len(branches) > MAX_ALTERNATIVES else ("or", branches))
        else:  # ANY, IN (classes), CATEGORY, NOT_LITERAL …: a character we do not know
            flush()
    flush()
    kept = [q for q in required if q is not None]
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else ("and", kept)


def _simplify(q: Query) -> Query:
    if q is None or q[0] == "lit":
        return q
    parts = [_simplify(p) for p in q[1]]
    if q[0] == "or":
        return None if any(p is None for p in parts) else ("or", parts)
    kept = [p for p in parts if p is not None]
    return None if not kept else (kept[0] if len(kept) == 1 else ("and", kept))


def trigrams(literal: str) -> list[str]:
    """The literal's distinct trigrams (by character), spread over it, at most MAX_TRIGRAMS."""
    grams = list(dict.fromkeys(literal[i:i + 3] for i in range(len(literal) - 2)))
    if len(grams) > MAX_TRIGRAMS:
        step = len(grams) / MAX_TRIGRAMS
        grams = [grams[int(i * step)] for i in range(MAX_TRIGRAMS)]
    return grams
