"""RE2 over the stored text: one match per line, with line, byte offset and page.

RE2 runs in linear time (no catastrophic backtracking) within a memory cap. The text is
read from SQLite as UTF-8 bytes and searched as bytes, so offsets are byte offsets of the
extracted text and `loom get PATH --offset O` starts at the match. Like grep and
ripgrep, a match never spans lines: `^`/`$` anchor at line ends and a candidate that
would cross a newline is looked for again inside its own line.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence

from loomcli.errors import QueryError
from loomcli.records import Record
from loomcli.search.trigrams import required

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.store.seam import IndexStore as Store

RE2_MAX_MEM = 64 << 20  # the compiled program and the DFA's state cache
# A pattern is first compiled within this budget alone: RE2 stops compiling as soon as
# the program outgrows it, so a short pattern that expands hugely (`\w{1000}\w{1000}`:
# 4 million instructions, 8 s and 0.5 GB with the interpreter lock held) fails in
# milliseconds. About 100,000 instructions: `\w{80}` or 5,000 alternated words fit.
RE2_PROGRAM_MEM = 2 << 20
LONG_LINE = 1000  # bytes: longer lines are trimmed around the match
TRIM_BEFORE, TRIM_AFTER = 200, 400
ELLIPSIS = "…"


CASES = ("smart", "ignore", "sensitive")


class Match(Record):
    """A matching line, with its context. With `every`: `parts`, each match of the line
    as (byte offset, matched text), and `marks`, where they lie in `text` as character
    spans (for -o and colour; not part of the JSON)."""

    __slots__ = ("path", "line", "offset", "page", "text", "before", "after", "trimmed",
                 "parts", "marks", "continued")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, path: str, line: int, offset: int, page: int | None, text: str,
                 before: list[str] | None = None, after: list[str] | None = None,
                 trimmed: bool = False) -> None:
        self.path, self.line, self.offset, self.page, self.text = path, line, offset, page, text
        self.before = before if before is not None else []
        self.after = after if after is not None else []
        self.trimmed = trimmed
        self.parts: list[tuple[int, str]] = []
        self.marks: list[tuple[int, int]] = []
        self.continued = False  # -U: a later line of a match that spans lines

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "offset": self.offset,
                "page": self.page, "text": self.text, "before": self.before,
                "after": self.after, "trimmed": self.trimmed}

    def _values(self) -> tuple[object, ...]:  # compared by what it says, not where -o's
        return tuple(self.to_dict().values())  # parts lie


class GrepResult(Record):
    __slots__ = ("matches", "truncated")

    def __init__(self, matches: list[Match], truncated: bool) -> None:
        self.matches = matches
        self.truncated = truncated

    def to_dict(self) -> dict[str, Any]:
        return {"matches": [m.to_dict() for m in self.matches], "truncated": self.truncated}


# Unicode meanings of the Perl classes, as grep and ripgrep use them (RE2's are ASCII).
_WORD = r"\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}"
_SPACE = (r"\t\n\x0b\f\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
          r"\x{205f}\x{3000}")
_IN_CLASS = {"w": _WORD, "d": r"\p{Nd}", "D": r"\P{Nd}", "s": _SPACE}
_OUTSIDE = {"w": f"[{_WORD}]", "W": f"[^{_WORD}]", "d": r"\p{Nd}", "D": r"\P{Nd}",
            "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]"}


def unicode_classes(pattern: str) -> str:
    """Rewrite \\w \\W \\d \\D \\s \\S to Unicode classes (\\b stays ASCII: RE2 has no
    Unicode word boundary). Escapes, \\Q…\\E and POSIX [:classes:] are left alone."""
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            if d == "Q":
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end + 2
                out.append(pattern[i:end])
                i = end
                continue
            table = _IN_CLASS if in_class else _OUTSIDE
            out.append(table.get(d, c + d))
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end >= 0:
                    out.append(pattern[i:end + 2])
                    i = end + 2
                    continue
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):  # a leading ] is a literal member
                out.append("]")
                i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def compile_pattern(pattern: str, case_sensitive: bool = False) -> Any:
    """The RE2 regex of a pattern as written (line mode, Unicode classes)."""
    return _compile(pattern, "(?m)" + unicode_classes(pattern), case_sensitive)


def _compile(pattern: str, source: str, case_sensitive: bool) -> Any:
    import re2

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = case_sensitive
    try:
        encoded = source.encode("utf-8", "surrogatepass")
        options.max_mem = RE2_PROGRAM_MEM  # the size check first, then room for the DFA
        re2.compile(encoded, options)
        options.max_mem = RE2_MAX_MEM
        return re2.compile(encoded, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        if "pattern too large" in str(reason):
            raise QueryError(
                f"pattern {_shown(pattern)} is too large once compiled (its counted "
                f"repetitions or length expand past {RE2_PROGRAM_MEM >> 20} MB)",
                "use smaller counts or + and * (\\w+ rather than \\w{1000}), "
                "or a shorter pattern") from None
        reason = str(reason).replace(": (?m)", ": ", 1)  # RE2 quotes our line-mode prefix
        raise QueryError(f"invalid pattern {pattern!r}: {reason}",
                         "loom grep uses RE2 syntax (no backreferences or lookaround)"
                         ) from None
    except UnicodeEncodeError as exc:
        raise QueryError(f"invalid pattern {pattern!r}: {exc.reason}") from None


def _shown(pattern: str, limit: int = 60) -> str:
    """A pattern quoted for a one-line message, cut when long."""
    return repr(pattern) if len(pattern) <= limit else repr(pattern[:limit]) + "…"


_META = frozenset("\\.^$*+?()[]{}|")


def escape(text: str) -> str:
    """A fixed string as an RE2 pattern matching exactly it (grep -F)."""
    return "".join("\\" + ch if ch in _META else ch for ch in text)


def has_uppercase(pattern: str) -> bool:
    """Whether a pattern holds an upper-case literal letter, as ripgrep's smart case
    reads it: escapes (\\W, \\S, \\p{Lu}, \\x41, \\PN) are not literals."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            d = pattern[i + 1]
            if d == "Q":  # \\Q…\\E: all literal
                end = pattern.find("\\E", i + 2)
                end = n if end < 0 else end
                if any(ch.isupper() for ch in pattern[i + 2:end]):
                    return True
                i = end + 2
                continue
            if d in "pPx" and pattern.startswith("{", i + 2):
                close = pattern.find("}", i + 3)
                i = n if close < 0 else close + 1
                continue
            i += 3 if d in "pP" else 2
            continue
        if c == "[" and pattern.startswith("[:", i):  # [[:Upper:]]-style names
            close = pattern.find(":]", i + 2)
            if close >= 0:
                i = close + 2
                continue
        if c == "(" and pattern.startswith("(?P<", i):  # a group's name
            close = pattern.find(">", i)
            if close >= 0:
                i = close + 1
                continue
        if c.isupper():
            return True
        i += 1
    return False


class Pattern(Record):
    """A compiled grep pattern: `group` is the part of a match that counts (1 for -w,
    whose regex also consumes the non-word characters around the word)."""

    __slots__ = ("text", "regex", "group")

    def __init__(self, text: str, regex: Any, group: int = 0) -> None:
        self.text = text  # the pattern as RE2 syntax, before -w wraps it (for the trigram query)
        self.regex = regex
        self.group = group


def build(pattern: str | Sequence[str], *, case: str = "ignore", fixed: bool = False,
          word: bool = False) -> Pattern:
    """grep's pattern with ripgrep's options: case `smart` (ignore case unless the
    pattern holds an upper-case letter), `ignore` or `sensitive`; -F; -w. Several
    patterns (-e, -e): a line matches any of them, as ripgrep joins them."""
    if case not in CASES:
        raise QueryError(f"case must be one of {', '.join(CASES)}, got {case!r}")
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    texts = [escape(p) if fixed else p for p in patterns]
    sensitive = case == "sensitive" or (case == "smart" and any(
        any(ch.isupper() for ch in p) if fixed else has_uppercase(p) for p in patterns))
    if len(texts) > 1:
        for p, t in zip(patterns, texts, strict=True):
            _compile(p, "(?m)" + unicode_classes(t), sensitive)  # each one's own error
        text = "|".join(f"(?:{t})" for t in texts)
        pattern = " | ".join(patterns)
    else:
        text, pattern = texts[0], patterns[0]
    body = unicode_classes(text)
    if word:  # ripgrep's -w: the match with a non-word character or a line end around it
        _compile(pattern, "(?m)" + body, sensitive)  # its errors as the user wrote it
        return Pattern(text, _compile(pattern, f"(?m)(?:^|{_OUTSIDE['W']})({body})"
                                               f"(?:{_OUTSIDE['W']}|$)", sensitive), 1)
    return Pattern(text, _compile(pattern, "(?m)" + body, sensitive))


# ripgrep's type names (`rg --type-list`) for what loom indexes, by file name ending
# (ripgrep 13's globs; `docx` and the other document kinds are loom's own names).
TYPES: dict[str, tuple[str, ...]] = {
    "md": (".markdown", ".md", ".mdown", ".mkdn"),
    "markdown": (".markdown", ".md", ".mdown", ".mkdn"),
    "txt": (".txt",), "rst": (".rst",), "org": (".org", ".org_archive"),
    "asciidoc": (".adoc", ".asc", ".asciidoc"), "pdf": (".pdf",),
    "html": (".ejs", ".htm", ".html"), "docx": (".docx",), "odt": (".odt",),
    "pptx": (".pptx",), "epub": (".epub",),
}


def type_endings(names: Sequence[str]) -> tuple[str, ...]:
    """The file name endings of ripgrep type names (-t / -T)."""
    unknown = [n for n in names if n not in TYPES]
    if unknown:
        raise QueryError(f"unrecognized file type: {unknown[0]}",
                         f"loom grep knows {', '.join(TYPES)}")
    return tuple(end for n in names for end in TYPES[n])


def _typed(path: str, wanted: tuple[str, ...], unwanted: tuple[str, ...]) -> bool:
    name = path.rpartition("/")[2]
    return (not wanted or name.endswith(wanted)) and not (unwanted and name.endswith(unwanted))


def _selected(path: str, globs: list[Any]) -> bool:
    """ripgrep's --glob: include what a glob matches, exclude what a `!glob` matches;
    with only exclusions, everything else is included. The last matching glob wins."""
    if not globs:
        return True
    rel = path.encode("utf-8")
    base = rel.rpartition(b"/")[2]
    for pat in reversed(globs):
        if pat.matches(rel, base, False):
            return not pat.negative
    return all(p.negative for p in globs)


def _trim(buf: bytes, start: int, end: int, focus: int, focus_end: int
          ) -> tuple[str, bool, int]:
    """Decode buf[start:end]; a long line keeps a window around [focus, focus_end).
    Also returns the byte where the shown text begins (after a leading `…`)."""
    if end - start <= LONG_LINE:
        return buf[start:end].decode("utf-8", "replace"), False, start
    lo = max(start, focus - TRIM_BEFORE)
    hi = min(end, max(focus_end, focus) + TRIM_AFTER, lo + LONG_LINE)  # a long match too
    while lo > start and (buf[lo] & 0xC0) == 0x80:
        lo -= 1
    while hi < end and (buf[hi] & 0xC0) == 0x80:
        hi += 1
    text = buf[lo:hi].decode("utf-8", "replace")
    return (ELLIPSIS if lo > start else "") + text + (ELLIPSIS if hi < end else ""), True, lo


def _context(buf: bytes, line_start: int, line_end: int, n_before: int, n_after: int
             ) -> tuple[list[str], list[str]]:
    before: list[str] = []
    pos = line_start
    while len(before) < n_before and pos > 0:
        prev_start = buf.rfind(b"\n", 0, pos - 1) + 1
        before.append(_trim(buf, prev_start, pos - 1, prev_start, prev_start)[0])
        pos = prev_start
    before.reverse()
    after: list[str] = []
    pos = line_end + 1
    while len(after) < n_after and pos < len(buf):
        nxt = buf.find(b"\n", pos)
        nxt = len(buf) if nxt < 0 else nxt
        after.append(_trim(buf, pos, nxt, pos, pos)[0])
        pos = nxt + 1
    return before, after


# `\A`, `\z` or a flag turned off (`(?-m)`): where the text starts and ends matters, so
# such a pattern reads whole texts, never blocks of them.
_WHOLE_TEXT = re.compile(r"\\[Az]|\(\?[a-zA-Z]*-")


def search_text(regex: Any, buf: bytes, group: int = 0, multiline: bool = False
                ) -> Iterable[tuple[int, int, int, int, int]]:
    """Yield (line number, match start, match end, line start, line end) per matching line.
    `group`: the part of the regex's match that is the match (1 for -w). `multiline`
    (-U): a match may span lines; its line end is the end of its last line (a match
    ending with a newline ends on that newline's line), and the next match may start on
    the line where it ended."""
    pos = 0
    line_no = 1
    counted_to = 0
    size = len(buf)
    while pos <= size:
        m = regex.search(buf, pos)
        if m is None:
            return
        start, end = m.span(group)
        if start == size and (size == 0 or buf.endswith(b"\n")):
            return  # nothing follows the last newline: not a line
        line_start = buf.rfind(b"\n", 0, start) + 1
        line_end = buf.find(b"\n", max(start, end - 1) if multiline else start)
        if line_end < 0:
            line_end = size
        if end > line_end and not multiline:  # crossed a newline: look inside this line
            m = regex.search(buf, line_start, line_end)
            if m is None:
                pos = line_end + 1
                continue
            start, end = m.span(group)
        line_no += buf.count(b"\n", counted_to, line_start)
        counted_to = line_start
        yield line_no, start, end, line_start, line_end
        pos = (end if end > start else end + 1) if multiline else line_end + 1


def other_lines(found: Iterable[tuple[int, int, int, int, int]], buf: bytes
                ) -> Iterator[tuple[int, int, int, int, int]]:
    """The lines none of `found` (search_text's, -U or not) touches, in the
    same shape: grep -v. The match of such a line is empty, at its start."""
    pos, line_no, size = 0, 1, len(buf)

    def lines_before(stop: int) -> Iterator[tuple[int, int, int, int, int]]:
        nonlocal pos, line_no
        while pos < stop:
            end = buf.find(b"\n", pos)
            end = size if end < 0 else end
            yield line_no, pos, pos, pos, end
            line_no, pos = line_no + 1, end + 1

    for first, _start, _end, line_start, line_end in found:
        if line_end < pos:  # inside lines already passed (-U)
            continue
        if line_start < pos:  # a match starting on a line already passed (-U)
            line_start = pos
            first = line_no
        yield from lines_before(line_start)
        line_no = first + buf.count(b"\n", line_start, line_end) + 1
        pos = line_end + 1
    yield from lines_before(size)


def line_matches(pattern: Pattern, buf: bytes, start: int, end: int, line_end: int
                 ) -> list[tuple[int, int]]:
    """Every non-empty match of the line, from its first one [start, end), as byte spans
    (what grep -o prints and a terminal colours)."""
    spans = [(start, end)] if end > start else []
    pos = end if end > start else end + 1
    while pos <= line_end:
        m = pattern.regex.search(buf, pos, line_end)
        if m is None:
            break
        s, e = m.span(pattern.group)
        if e > s:
            spans.append((s, e))
        pos = e if e > s else e + 1
    return spans


def _marks(buf: bytes, shown_from: int, text: str, lead: bool,
           spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte spans of matches as character spans of the line's shown text, which starts
    at byte `shown_from` (after a leading `…` when `lead`)."""
    out = []
    shift = 1 if lead else 0
    for s, e in spans:
        if s < shown_from:
            continue
        a = len(buf[shown_from:s].decode("utf-8", "replace")) + shift
        b = a + len(buf[s:e].decode("utf-8", "replace"))
        if b > len(text):
            break
        out.append((a, b))
    return out


def grep(store: Store, pattern: str, *, path: str | None = None,
         globs: Sequence[str] = (), context: int = 0, case_sensitive: bool = False,
         limit: int | None = None, indexed: bool = True, **options: Any) -> GrepResult:
    """Matching lines of every indexed file (or one, or those the globs select), at most
    `limit` (None: all); operations.Corpus.grep checks the arguments first. `options`
    are those of `matches`."""
    found: list[Match] = []
    for m in matches(store, pattern, path=path, globs=globs, context=context,
                     case_sensitive=case_sensitive, indexed=indexed, **options):
        if len(found) == limit:
            return GrepResult(found, truncated=True)
        found.append(m)
    return GrepResult(found, truncated=False)


def matches(store: Store, pattern: str | Sequence[str], *, path: str | None = None,
            globs: Sequence[str] = (), context: int = 0, case_sensitive: bool = False,
            case: str | None = None, fixed: bool = False, word: bool = False,
            before: int | None = None, after: int | None = None,
            max_count: int | None = None, every: bool = False, indexed: bool = True,
            within: list[int] | None = None, invert: bool = False,
            multiline: bool = False, types: Sequence[str] = (),
            types_not: Sequence[str] = ()) -> Iterator[Match]:
    """Matching lines in path order, as they are found (a reader that stops early stops
    the search). `pattern`: one, or several (-e: any of them); `case` (smart | ignore |
    sensitive) wins over `case_sensitive`; `fixed`, `word`: grep's -F, -w; `before`/
    `after` lines of context (default `context`); `max_count`: at most this many lines
    per file (-m); `every`: fill each match's `parts` and `marks` with all the matches
    of its line (-o, colour); `within`: only these file ids (a folder: --here);
    `invert`: the lines that do not match (-v; the offset is the line's); `multiline`:
    a match may span lines, each of its lines is a Match (-U; the first's offset is the
    match's, the others' their line's); `types`/`types_not`: ripgrep's -t/-T names.

    With `indexed`, the trigram index narrows the files first to those holding every
    trigram a match needs (trigrams.required); RE2 verifies them, so the answer is the
    linear scan's, only faster. A pattern without a usable literal scans every file."""
    compiled = build(pattern, case=case or ("sensitive" if case_sensitive else "ignore"),
                     fixed=fixed, word=word)
    n_before = context if before is None else before
    n_after = context if after is None else after
    file_ids = selected(store, path=path, globs=globs, within=within, types=types,
                        types_not=types_not)
    # -v needs every file; -U matches across lines, which the trigrams of lines miss
    need = (required(compiled.text) if indexed and path is None and not invert
            and not multiline else None)
    # A long text is read block by block (only its candidate blocks, with a prefilter):
    # a match lies inside one line, so inside one block. Not with context lines (they
    # may lie in the next block), nor for a pattern that sees where the text starts or
    # ends, nor for -v and -U (every line, matches across lines).
    by_blocks = not (n_before or n_after or invert or multiline
                     or _WHOLE_TEXT.search(compiled.text))
    texts = (store.grep_texts(need, file_ids, by_blocks) if need
             else store.iter_texts(file_ids, None, by_blocks))
    for _fid, shown, pieces, pages_json in texts:
        pages = json.loads(pages_json) if pages_json else None
        count = 0
        window_end: int | None = None  # -m reached: the last match's after-context ends
        for first_byte, first_line, buf in pieces:
            found_lines = search_text(compiled.regex, buf, compiled.group, multiline)
            if invert:
                found_lines = other_lines(found_lines, buf)
            printed_to = -1  # -U: the last byte of the lines given so far
            for line_no, start, end, line_start, line_end in found_lines:
                if window_end is not None and first_line + line_no - 1 > window_end:
                    break
                if multiline:
                    spans = _lines_of(buf, max(line_start, printed_to + 1), line_end)
                    if not spans:
                        continue
                    printed_to = line_end
                    line_no += buf.count(b"\n", line_start, spans[0][0])
                else:
                    spans = [(line_start, line_end)]
                last = len(spans) - 1
                for k, (ls, le) in enumerate(spans):
                    at = max(start, ls) if k == 0 else ls
                    to = min(end, le) if k == last else le
                    text, trimmed, shown_from = _trim(buf, ls, le, at, to)
                    before_lines, after_lines = (
                        _context(buf, ls, le, n_before if k == 0 else 0,
                                 n_after if k == last else 0)
                        if n_before or n_after else ([], []))
                    offset = first_byte + at
                    page = bisect_right(pages, offset) if pages else None
                    found = Match(shown, first_line + line_no - 1 + k, offset, page, text,
                                  before_lines, after_lines, trimmed)
                    found.continued = k > 0
                    if every and invert:  # -v -o: ripgrep prints the whole line
                        found.parts = [(first_byte + ls, buf[ls:le].decode("utf-8",
                                                                            "replace"))]
                    elif every:
                        line_spans = (line_matches(compiled, buf, at, to, le) if k == 0
                                      else [(at, to)] if to > at else [])
                        found.parts = [(first_byte + a, buf[a:b].decode("utf-8", "replace"))
                                       for a, b in line_spans]
                        found.marks = _marks(buf, shown_from, text, shown_from > ls,
                                             line_spans)
                    if window_end is not None:
                        # A matching line inside the last match's after-context shows as
                        # a match, as ripgrep shows it; its own context ends where that
                        # one does.
                        found.after = found.after[:max(0, window_end - found.line)]
                        yield found
                        continue
                    yield found
                if window_end is not None:
                    continue
                count += 1
                if count == max_count:
                    if not n_after:
                        break
                    window_end = first_line + line_no - 1 + last + n_after
            if count == max_count:  # (with context lines a text is one piece)
                break


def _lines_of(buf: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """The lines of buf[start:end] as (start, end) spans (end: the newline's offset)."""
    spans = []
    while start <= end:
        nl = buf.find(b"\n", start, end)
        stop = end if nl < 0 else nl
        spans.append((start, stop))
        start = stop + 1
    return spans


def selected(store: Store, *, path: str | None = None, globs: Sequence[str] = (),
             within: list[int] | None = None, types: Sequence[str] = (),
             types_not: Sequence[str] = ()) -> list[int] | None:
    """The ids of the files a grep reads (None: every file): one path, those the globs
    and types select, those `within`."""
    glob_patterns: list[Any] = []
    if globs:
        from loomcli.index import ignore  # only with --glob

        glob_patterns = ignore.parse_lines(globs, source="--glob")
    wanted, unwanted = type_endings(types), type_endings(types_not)
    file_ids: list[int] | None = None
    if path is not None:
        file_ids = [store.resolve(path).id]
    elif glob_patterns or wanted or unwanted:
        file_ids = [fid for fid, shown in store.paths()
                    if _selected(shown, glob_patterns) and _typed(shown, wanted, unwanted)]
    if within is not None:
        inside = set(within)
        file_ids = [fid for fid in (within if file_ids is None else file_ids) if fid in inside]
    return file_ids


def files_without_match(store: Store, pattern: str | Sequence[str], *,
                        path: str | None = None, globs: Sequence[str] = (),
                        within: list[int] | None = None, types: Sequence[str] = (),
                        types_not: Sequence[str] = (), **options: Any) -> Iterator[str]:
    """The paths of the selected files with no match (--files-without-match), in path
    order; `options` are those of `matches`."""
    ids = selected(store, path=path, globs=globs, within=within, types=types,
                   types_not=types_not)
    chosen = None if ids is None else set(ids)
    found = {m.path for m in matches(store, pattern, path=path, globs=globs, within=within,
                                     types=types, types_not=types_not,
                                     **{**options, "max_count": 1, "context": 0,
                                        "before": None, "after": None, "every": False})}
    for fid, shown in store.paths():
        if (chosen is None or fid in chosen) and shown not in found:
            yield shown
