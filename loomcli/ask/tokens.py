"""A conservative token estimate, without a tokenizer's vocabulary.

It counts what a BPE pre-tokenizer splits text into: a word of Latin letters is one
token per `LATIN_CHARS` letters (at least one), a word mixing letters and digits (hex,
identifiers) one per two characters, a common CJK, kana or Hangul character one,
a Cyrillic or Greek letter 0.8, letters of other scripts, symbols and emoji
by their UTF-8 bytes, digits in threes, a run of one repeated mark (an rST underline)
or of spaces one per 16, other punctuation (and underscores) one per two marks, a line
break (or other blank but a space) one.

Measured against cl100k_base, a real BPE vocabulary (`tests/bench/bench_window.py`), on
4,000-character pieces of English prose, reStructuredText, code and tables, Italian,
Chinese and Japanese: on the whole it over-counts (English prose by about a fifth,
Chinese and Japanese by 1-2%), and its worst under-count of one piece was 21% (a CSV
table of hex ids). `MARGIN` reserves that: the estimate times MARGIN was never below
the real count. Not covered: rare Han characters (outside the common set a vocabulary
holds, up to 3 tokens each); a text made mostly of them is under-counted.
"""

from __future__ import annotations

import math
import re

LATIN_CHARS = 6  # letters per token in a Latin-script word
MIXED_CHARS = 2  # characters per token in a word of letters and digits (0c45, sn9c102)
PUNCT_CHARS = 2  # marks per token in a run of mixed punctuation
RUN_CHARS = 16  # marks per token in a run of one repeated mark (=====, -----)
# Other scripts, symbols and emoji: tokens per UTF-8 byte. A byte-level BPE vocabulary
# covers them thinly (Georgian: 2 tokens a letter, an emoji 3): measured 0.67 at worst.
OTHER_PER_BYTE = 0.75
CYRILLIC_GREEK = 0.8  # tokens per Cyrillic or Greek letter (Greek: 0.77 measured)
MARGIN = 1.28  # 1 / 0.785, the worst measured ratio of raw estimate to real count
# No piece holds more than RUN_CHARS characters a token, and a piece is followed by at most
# one uncounted space: a text of n characters is estimated at n / TOKEN_CHARS_MAX tokens or
# more, so what fits T tokens is within its first (T + 1) * TOKEN_CHARS_MAX characters.
TOKEN_CHARS_MAX = RUN_CHARS + 1

_PIECE = re.compile(
    r"(?P<mixed>(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z\d]{2,})"
    r"|(?P<latin>[A-Za-z\u00c0-\u024f]+)"
    r"|(?P<cjk>[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])"
    r"|(?P<cyrgreek>[\u0370-\u03ff\u0400-\u052f]+)"
    r"|(?P<other>[^\W\d_]+)"
    r"|(?P<digits>\d+)"
    r"|(?P<spaces>[ \t]{2,})"
    r"|(?P<blank>[^\S \t])"  # a line break, a \r, a no-break space: one each
    r"|(?P<punct>[^\w\s]+|_+)")


def raw_estimate(text: str) -> int:
    """The count before the margin (what the benchmark compares with the tokenizer)."""
    n = 0.0
    for m in _PIECE.finditer(text):
        kind, size = m.lastgroup, m.end() - m.start()
        if kind == "latin":
            n += math.ceil(size / LATIN_CHARS)
        elif kind == "mixed":
            n += math.ceil(size / MIXED_CHARS)
        elif kind == "cjk":
            n += 1
        elif kind == "cyrgreek":
            n += math.ceil(size * CYRILLIC_GREEK)
        elif kind == "other":
            n += math.ceil(len(m.group().encode("utf-8")) * OTHER_PER_BYTE)
        elif kind == "digits":
            n += math.ceil(size / 3)
        elif kind == "punct":
            piece = m.group()
            if piece.isascii() and piece.isprintable():
                n += math.ceil(size / (RUN_CHARS if piece == piece[0] * size
                                       else PUNCT_CHARS))
            else:  # symbols, emoji, control characters: by their bytes
                n += sum(max(1, math.ceil(len(c.encode("utf-8")) * OTHER_PER_BYTE))
                         for c in piece)
        elif kind == "spaces":
            n += math.ceil(size / RUN_CHARS)
        else:
            n += 1
    return math.ceil(n)


def estimate(text: str) -> int:
    """Tokens `text` takes at most in a BPE vocabulary, by measurement (see MARGIN)."""
    return math.ceil(raw_estimate(text) * MARGIN) + 1

