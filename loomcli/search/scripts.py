"""Scripts written without spaces between words, made searchable by the words people type.

FTS5's unicode61 tokenizer keeps a run of Chinese, Japanese or Korean characters as one
token (`日本語のメモリ管理` is one "word"), and cuts Thai at its vowel and tone marks, so a
query for `メモリ` found nothing in a Japanese text. Such runs are indexed a second time
as overlapping character pairs (bigrams, as CJK search engines have done since the
1990s): `メモリ管理` → `メモ モリ リ管 管理`. A query's run becomes the phrase of its own
pairs, which matches exactly where the run occurs, inside a longer one too. Pure: the
same function makes the indexed pairs and the query's, so the two always agree.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from operator import add

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

# Han (with extensions and compatibility forms), kana (half-width too), Hangul, Thai,
# Lao, Khmer and Myanmar.
RANGES = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
           "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\u0e00-\u0eff"
           "\u1000-\u109f\u1780-\u17ff\U00020000-\U0002fa1f")
FIRST = "\u0e00"  # the lowest character of RANGES
PAIRS_MAX_CHARS = 4 << 20  # a text's first this many characters of such runs get pairs


class Lazy:
    """A regular expression compiled at its first use. Compiling a class of these ranges
    takes Python's `re` 1-2 ms (it marks each of their 40,000 characters), a cost a cold
    `loom search` or `grep` of text without such characters need not pay."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern, self.flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:  # search, sub, finditer, findall, match
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        method = getattr(self._compiled, name)
        setattr(self, name, method)  # asked of the instance from now on, not of this
        return method


RUN = Lazy(f"[{RANGES}]+")
CHAR = Lazy(f"[{RANGES}]")


# RANGES as (first, last) code points, for telling a character without a pattern.
_SPANS = sorted((ord(RANGES[i]), ord(RANGES[i + 2])) for i in range(0, len(RANGES), 3))
_STARTS = [first for first, _ in _SPANS]


def outside(text: str) -> bool:
    """Whether `text` holds none of these characters, told without compiling a pattern:
    ASCII at once, other text by its distinct characters (for short texts: a query, a
    snippet's window). Typography (dashes, bullets, ligatures) is not in the ranges."""
    if text.isascii():
        return True
    for char in set(text):
        if char >= FIRST:
            code = ord(char)
            i = bisect_right(_STARTS, code) - 1
            if i >= 0 and code <= _SPANS[i][1]:
                return False
    return True


def has_runs(text: str) -> bool:
    return not outside(text)


# The combining marks (category Mn) inside RANGES: Thai, Lao, Myanmar and Khmer vowel and
# tone marks, and kana's voicing marks (tests/test_scripts.py checks the list against
# unicodedata). One regex instead of a category lookup per character: the kernel docs'
# translations (81,000 runs) 1.0 -> 0.1 s.
MARKS = Lazy("[\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd"
                   "\u102d-\u1030\u1032-\u1037\u1039-\u103a\u103d-\u103e\u1058-\u1059"
                   "\u105e-\u1060\u1071-\u1074\u1082\u1085-\u1086\u108d\u109d"
                   "\u17b4-\u17b5\u17b7-\u17bd\u17c6\u17c9-\u17d3\u17dd\u3099-\u309a]")


def _letters(run: str) -> str:
    """The run without combining marks (Thai vowel and tone marks): unicode61 treats
    them as separators, which would cut a pair in two."""
    return MARKS.sub("", run) if MARKS.search(run) else run


def pairs(run: str) -> list[str]:
    """A run's overlapping character pairs (a lone character stays itself)."""
    return _pairs_of(_letters(run))


def _pairs_of(letters: str) -> list[str]:
    if len(letters) < 2:
        return [letters] if letters else []
    return list(map(add, letters, letters[1:]))  # 3x a list of slices


def bigram_text(text: str) -> str | None:
    """Every run of `text` as its pairs, one run per line; None when it has no run (most
    texts: nothing is stored for them). An ASCII text has none, and saying so costs
    almost nothing: RUN, a class of many ranges, reads 40 ns a character (kernel docs,
    27 M characters, 90% of the files ASCII: 1.16 -> 0.11 s). The runs are found in one
    call, and marks looked for once in all of them (the kernel docs' 81,000 runs: 0.47
    -> 0.2 s)."""
    if text.isascii():
        return None
    found = RUN.findall(text) if len(text) <= PAIRS_MAX_CHARS else _first_runs(text)
    if not found:
        return None
    if MARKS.search("".join(found)):
        found = [_letters(run) for run in found]
    return "\n".join(" ".join(_pairs_of(run)) for run in found)


def _first_runs(text: str) -> list[str]:
    """The runs of a long text up to the first that brings them past PAIRS_MAX_CHARS."""
    found: list[str] = []
    size = 0
    for m in RUN.finditer(text):
        found.append(m.group())
        size += len(found[-1])
        if size > PAIRS_MAX_CHARS:
            break
    return found


def runs(text: str) -> list[str]:
    """The runs of such characters in `text`, as typed."""
    return [] if outside(text) else RUN.findall(text)


def split_word(word: str) -> tuple[str, list[str]]:
    """A query word as (what is left outside runs, the runs' pair phrases)."""
    phrases = [" ".join(pairs(m.group())) for m in RUN.finditer(word)]
    rest = RUN.sub(" ", word).strip()
    return rest, [p for p in phrases if p]
