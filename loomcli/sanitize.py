"""Text that came from elsewhere (a model, a server, a file name, the command line) made
safe to print: the rules every layer uses, the edges (console.py) and the ask package
alike, so that none of them needs the other."""

from __future__ import annotations

import re
from functools import cache

# Bidi embeddings, overrides and isolates: they reorder what follows on the terminal
# ("Trojan Source"); the marks (U+200E, U+200F) only nudge and are left alone.
_BIDI = "\u202a-\u202e\u2066-\u2069"
# Compiled when first used (compiling them all took 2 ms of every command's start-up).
_SOURCES = {
    "unsafe": f'[\\x00-\\x1f\\x7f-\\x9f{_BIDI}"\\\\]',
    "surrogate": "[\\ud800-\\udfff]",
    "control": f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}\\ud800-\\udfff]",
    "control_but_lines": f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}\\ud800-\\udfff]",
}
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


@cache
def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(_SOURCES[name])


def has_surrogates(text: str) -> bool:
    """Whether `text` holds lone surrogates: bytes that were not UTF-8 (argv, a JSON
    "\\udcff"). UTF-8's own encoder finds them, without a pattern."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str, *, lines: bool = False) -> str:
    """Text that came from a model, a server or a file, as a terminal may show it: control
    characters (escape sequences: clear screen, window titles, C1 controls), bidi overrides
    and lone surrogates are written out (`\\x1b`, `\\u202e`), so the terminal shows them
    instead of obeying them. `lines`: keep line breaks and tabs (an answer, a message)."""
    if text.isascii() and text.isprintable():
        return text
    pattern = _pattern("control_but_lines" if lines else "control")
    return pattern.sub(lambda m: _escaped(m[0]), text) if pattern.search(text) else text


def utf8(text: str) -> str:
    """An argument as text: bytes of it that were not UTF-8 (Python hands them over as lone
    surrogates) become U+FFFD, the replacement character (a question, a chat line)."""
    return _pattern("surrogate").sub("\ufffd", text) if has_surrogates(text) else text


def shown(path: str) -> str:
    """A path as a terminal or a line-based reader can trust: a name holding a newline,
    an escape sequence or another control character is quoted C-style, as git quotes
    paths ("a\\nb.md", "\\x1b[31m.md"). Plain names print as they are; --json is exact."""
    unsafe = _pattern("unsafe")
    if not unsafe.search(path):
        return path
    return '"' + unsafe.sub(lambda m: _escaped(m[0]), path) + '"'
