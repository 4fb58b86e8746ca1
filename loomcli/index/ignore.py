"""Gitignore patterns with git's exact semantics, compiled to byte regexes.

Patterns run on RE2, not Python's backtracking `re`: matching a name costs time linear in
its length whatever the pattern (`*?*?*?*?*?*?*?*?*?*?#` included), so no `.loomignore`
line and no `--glob` a client sends can stall a scan or the server.

This follows git's own code rather than a reading of its manual: pattern parsing is
`dir.c` (`parse_path_pattern`, `trim_trailing_spaces`, `match_basename`,
`match_pathname`) and globbing is `wildmatch.c`. Like git, matching is on bytes and
case-sensitive, `*`/`?`/`[...]` never cross `/` in a pattern that has a slash, `**` is
special only as a whole path component, and a pattern without a slash matches the
base name at any depth. Git's rule that a file inside an excluded folder cannot be
re-included is the walker's job: it never enters an excluded folder (see discover.py).

Where git silently treats a pattern as matching nothing (an unterminated `[`, an
unknown `[:class:]`, a trailing backslash), loom refuses it with the file and line,
because such a line is always a typo.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence

from loomcli.errors import IgnorePatternError
from loomcli.records import Record

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

_SPECIAL = b"*?[\\"
IGNORE_MAX_MEM = 8 << 20  # one pattern's compiled program: a glob grows with its length

# git's sane_ctype classes (ASCII only; `space` excludes \v and \f like git).
_CLASSES: dict[bytes, frozenset[int]] = {
    name.encode(): frozenset(chars.encode())
    for name, chars in {
        "alnum": string.ascii_letters + string.digits,
        "alpha": string.ascii_letters,
        "blank": " \t",
        "cntrl": "".join(map(chr, range(32))) + "\x7f",
        "digit": string.digits,
        "graph": "".join(map(chr, range(0x21, 0x7F))),
        "lower": string.ascii_lowercase,
        "print": "".join(map(chr, range(0x20, 0x7F))),
        "punct": string.punctuation,
        "space": " \t\n\r",
        "upper": string.ascii_uppercase,
        "xdigit": string.hexdigits,
    }.items()
}


class _Malformed(Exception):
    pass


class _TooLarge(Exception):
    pass


class Pattern(Record):
    """One compiled pattern line, remembering where it came from."""

    __slots__ = ("text", "regex", "negative", "dir_only", "basename_only", "base", "source", "line")

    def __init__(self, text: str, regex: Any, negative: bool, dir_only: bool, basename_only: bool,
                 base: bytes, source: str, line: int) -> None:
        self.text = text
        self.regex = regex  # an RE2 regex: linear time in the name, whatever the pattern
        self.negative = negative
        self.dir_only = dir_only
        # no slash in the pattern: matched against the last component
        self.basename_only = basename_only
        self.base = base  # folder (with trailing /) of the ignore file, b"" at the root
        self.source = source
        self.line = line

    def matches(self, relpath: bytes, basename: bytes, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.basename_only:
            return self.regex.fullmatch(basename) is not None
        if self.base:
            if not relpath.startswith(self.base):
                return False
            relpath = relpath[len(self.base):]
        return self.regex.fullmatch(relpath) is not None


def _trim_trailing_spaces(p: bytes) -> bytes:
    """git's trim_trailing_spaces: drop unescaped trailing spaces (not tabs)."""
    last_space = None
    i = 0
    while i < len(p):
        c = p[i]
        if c == 0x20:
            if last_space is None:
                last_space = i
        elif c == 0x5C:  # backslash: the next byte is literal
            i += 1
            if i >= len(p):
                return p
            last_space = None
        else:
            last_space = None
        i += 1
    return p[:last_space] if last_space is not None else p


def _simple_length(p: bytes) -> int:
    for i, c in enumerate(p):
        if c in _SPECIAL:
            return i
    return len(p)


def _class_regex(members: set[int]) -> bytes:
    if not members:
        return b"[^\\x00-\\xff]"  # an empty set: matches no byte
    return b"[" + b"".join(b"\\x%02x" % c for c in sorted(members)) + b"]"


def _bracket(p: bytes, i: int, pathname: bool) -> tuple[bytes, int]:
    """Translate the bracket expression at p[i] == '['; return (regex, index after ']')."""
    n = len(p)

    def at(k: int) -> int:
        return p[k] if k < n else 0

    i += 1
    p_ch = at(i)
    negated = p_ch in (0x21, 0x5E)  # ! or ^
    if negated:
        i += 1
        p_ch = at(i)
    members: set[int] = set()
    prev_ch = 0
    while True:
        if not p_ch:
            raise _Malformed("unterminated [ (add ] or escape it as \\[)")
        if p_ch == 0x5C:
            i += 1
            p_ch = at(i)
            if not p_ch:
                raise _Malformed("unterminated [ (add ] or escape it as \\[)")
            members.add(p_ch)
        elif p_ch == 0x2D and prev_ch and at(i + 1) and at(i + 1) != 0x5D:  # a range
            i += 1
            p_ch = at(i)
            if p_ch == 0x5C:
                i += 1
                p_ch = at(i)
                if not p_ch:
                    raise _Malformed("unterminated [ (add ] or escape it as \\[)")
            members.update(range(prev_ch, p_ch + 1))
            p_ch = 0
        elif p_ch == 0x5B and at(i + 1) == 0x3A:  # [:class:]
            s = i + 2
            j = s
            while j < n and p[j] != 0x5D:
                j += 1
            if j >= n:
                raise _Malformed("unterminated [ (add ] or escape it as \\[)")
            if j - s - 1 < 0 or p[j - 1] != 0x3A:
                # no ":]": a plain '[' member; continue just after it
                i = s - 2
                p_ch = 0x5B
                members.add(p_ch)
            else:
                name = p[s : j - 1]
                if name not in _CLASSES:
                    raise _Malformed(
                        f"unknown character class [:{name.decode(errors='replace')}:]"
                    )
                members.update(_CLASSES[name])
                i = j
                p_ch = 0
        else:
            members.add(p_ch)
        prev_ch = p_ch
        i += 1
        p_ch = at(i)
        if p_ch == 0x5D:
            break
    if negated:
        members = set(range(1, 256)) - members
    if pathname:
        members.discard(0x2F)
    members.discard(0)
    return _class_regex(members), i + 1


def _wildmatch_regex(p: bytes, pathname: bool, start: int = 0) -> bytes:
    """Translate git wildmatch syntax to a regex; `start` is where wildmatch's pattern
    begins (git compares a literal prefix itself and hands only the rest to wildmatch,
    which matters for whether a `**` counts as 'at the start')."""
    out = [re.escape(p[:start])]
    i = start
    n = len(p)
    while i < n:
        c = p[i]
        if c == 0x5C:  # backslash
            i += 1
            if i >= n:
                raise _Malformed("trailing backslash escapes nothing (git never matches it)")
            out.append(re.escape(p[i : i + 1]))
            i += 1
        elif c == 0x3F:  # ?
            out.append(b"[^/]" if pathname else b".")
            i += 1
        elif c == 0x2A:  # *
            j = i
            while j < n and p[j] == 0x2A:
                j += 1
            if not pathname:
                out.append(b".*")
            elif j - i >= 2 and (i == start or p[i - 1] == 0x2F):
                if j == n:
                    out.append(b".*")  # trailing ** matches everything
                elif p[j] == 0x2F:
                    out.append(b"(?:.*/)?")  # **/ matches zero or more folders
                    j += 1
                elif p[j] == 0x5C and j + 1 < n and p[j + 1] == 0x2F:
                    out.append(b".*")  # **\/ : no zero-folder shortcut in git
                else:
                    out.append(b"[^/]*")
            else:
                out.append(b"[^/]*")
            i = j
        elif c == 0x5B:  # [
            regex, i = _bracket(p, i, pathname)
            out.append(regex)
        else:
            out.append(re.escape(p[i : i + 1]))
            i += 1
    return b"".join(out)


def _compile(regex: bytes) -> Any:
    """RE2 on bytes (Latin-1 mode: one byte, one character), `.` matching newlines too."""
    import re2

    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.dot_nl = True
    options.log_errors = False
    options.max_mem = IGNORE_MAX_MEM
    try:
        return re2.compile(regex, options)
    except re2.error:  # a glob cannot be malformed here: only too large
        raise _TooLarge from None


def compile_line(raw: bytes, *, source: str, line: int, base: bytes = b"") -> Pattern | None:
    """Compile one line of an ignore file; None for blanks and comments."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw or raw.startswith(b"#"):
        return None
    text = raw.decode("utf-8", errors="replace")
    p = _trim_trailing_spaces(raw)
    negative = p.startswith(b"!")
    if negative:
        p = p[1:]
    dir_only = p.endswith(b"/")
    if dir_only:
        p = p[:-1]
    basename_only = b"/" not in p
    if not p:
        return None  # "/", "!" and friends match nothing in git either
    try:
        if basename_only:
            regex = _wildmatch_regex(p, pathname=False)
        else:
            if p.startswith(b"/"):
                p = p[1:]
            regex = _wildmatch_regex(p, pathname=True, start=_simple_length(p))
        compiled = _compile(regex)
    except _Malformed as exc:
        raise IgnorePatternError(
            f"{source}:{line}: invalid pattern {text!r}: {exc}",
            f"fix line {line} of {source} (a literal [ is written \\[)",
        ) from None
    except _TooLarge:
        shown = repr(text) if len(text) <= 60 else repr(text[:60]) + "…"
        raise IgnorePatternError(
            f"{source}:{line}: pattern {shown} is too large once compiled "
            f"(over {IGNORE_MAX_MEM >> 20} MB)",
            f"shorten line {line} of {source} or split it into several patterns",
        ) from None
    return Pattern(
        text=text,
        regex=compiled,
        negative=negative,
        dir_only=dir_only,
        basename_only=basename_only,
        base=base,
        source=source,
        line=line,
    )


def parse_file_bytes(data: bytes, *, source: str, base: bytes = b"") -> list[Pattern]:
    """Parse a whole ignore file (git skips a UTF-8 BOM and strips CR before LF)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    patterns = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        pat = compile_line(raw, source=source, line=number, base=base)
        if pat is not None:
            patterns.append(pat)
    return patterns


def parse_lines(lines: Iterable[str], *, source: str) -> list[Pattern]:
    """Parse patterns given one per item (config `ignore`), numbered from 1."""
    patterns = []
    for number, text in enumerate(lines, start=1):
        pat = compile_line(text.encode("utf-8"), source=source, line=number)
        if pat is not None:
            patterns.append(pat)
    return patterns


def is_ignored(patterns: Sequence[Pattern], relpath: bytes, is_dir: bool) -> bool:
    """git's rule: the last matching pattern decides; no match means not ignored.

    `patterns` is ordered lowest priority first: config patterns, then each
    .loomignore from the root down to the folder that holds `relpath`.
    """
    basename = relpath.rpartition(b"/")[2]
    for pat in reversed(patterns):
        if pat.matches(relpath, basename, is_dir):
            return not pat.negative
    return False
