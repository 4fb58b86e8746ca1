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

# Han (with extensions and compatibility forms), kana (half-width too), Hangul, Thai,
# Lao, Khmer and Myanmar.
RANGES = ("\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
           "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\u0e00-\u0eff"
           "\u1000-\u109f\u1780-\u17ff\U00020000-\U0002fa1f")
RUN = re.compile(f"[{RANGES}]+")
CHAR = re.compile(f"[{RANGES}]")
PAIRS_MAX_CHARS = 4 << 20  # a text's first this many characters of such runs get pairs


def has_runs(text: str) -> bool:
    return not text.isascii() and RUN.search(text) is not None


# The combining marks (category Mn) inside RANGES: Thai, Lao, Myanmar and Khmer vowel and
# tone marks, and kana's voicing marks (tests/test_scripts.py checks the list against
# unicodedata). One regex instead of a category lookup per character: the kernel docs'
# translations (81,000 runs) 1.0 -> 0.1 s.
MARKS = re.compile("[\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd"
                   "\u102d-\u1030\u1032-\u1037\u1039-\u103a\u103d-\u103e\u1058-\u1059"
                   "\u105e-\u1060\u1071-\u1074\u1082\u1085-\u1086\u108d\u109d"
                   "\u17b4-\u17b5\u17b7-\u17bd\u17c6\u17c9-\u17d3\u17dd\u3099-\u309a]")


def _letters(run: str) -> str:
    """The run without combining marks (Thai vowel and tone marks): unicode61 treats
    them as separators, which would cut a pair in two."""
    return MARKS.sub("", run) if MARKS.search(run) else run


def pairs(run: str) -> list[str]:
    """A run's overlapping character pairs (a lone character stays itself)."""
    letters = _letters(run)
    if len(letters) < 2:
        return [letters] if letters else []
    return [letters[i:i + 2] for i in range(len(letters) - 1)]


def bigram_text(text: str) -> str | None:
    """Every run of `text` as its pairs, one run per line; None when it has no run (most
    texts: nothing is stored for them). An ASCII text has none, and saying so costs
    almost nothing: RUN, a class of many ranges, reads 40 ns a character (kernel docs,
    27 M characters, 90% of the files ASCII: 1.16 -> 0.11 s)."""
    if text.isascii():
        return None
    out: list[str] = []
    size = 0
    for m in RUN.finditer(text):
        out.append(" ".join(pairs(m.group())))
        size += len(m.group())
        if size > PAIRS_MAX_CHARS:
            break
    return "\n".join(out) if out else None


def runs(text: str) -> list[str]:
    """The runs of such characters in `text`, as typed."""
    return RUN.findall(text)


def split_word(word: str) -> tuple[str, list[str]]:
    """A query word as (what is left outside runs, the runs' pair phrases)."""
    phrases = [" ".join(pairs(m.group())) for m in RUN.finditer(word)]
    rest = RUN.sub(" ", word).strip()
    return rest, [p for p in phrases if p]
