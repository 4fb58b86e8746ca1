"""The read commands of the CLI — search, grep, get — after their options are parsed:
one library call, the rendering, the exit code.

Typer-free: fastpath.py runs them straight from a command line it understands, cli.py's
typer commands run them for everything else, with the same arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

from loomcli.console import Lines, color, corpus, err, highlight, out, print_json, shown
from loomcli.errors import LoomError

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

COLORS = ("auto", "always", "never")  # --color WHEN


def search(config: str | None, query: list[str], limit: int | None, mode: str | None,
           path: str | None, glob: list[str] | None, here: bool, as_json: bool,
           tag: list[str] | None = None) -> int:
    found = corpus(config)
    result = found.search(" ".join(query), limit, mode=mode,
                          path=None if path is None else found.index_path_of(path),
                          globs=glob, within=Path.cwd() if here else None, tags=tag)
    for warning in result.warnings:
        err(f"warning: {warning}")
    if as_json:
        print_json(result.to_dict())
    else:
        for h in result.hits:
            out(f"{shown(h.path)}  [{h.score:.2f}]  {h.title}")
            if h.snippet:
                page = f"p{h.page}: " if h.page is not None else ""  # where in the PDF
                out(f"    {page}{highlight(h.snippet)}")
        if not result.hits:
            err("no matches")
    return 0 if result.hits else 1


def _line_range(text: str, sep: str) -> tuple[int, int | None] | None:
    """"12" -> (12, 12); "12<sep>20" -> (12, 20); "12<sep>" -> (12, None); else None."""
    first, has_sep, last = text.partition(sep)
    if not (first.isascii() and first.isdigit()) or (last and not (last.isascii()
                                                                   and last.isdigit())):
        return None
    return int(first), (int(last) if last else None) if has_sep else int(first)


def get(config: str | None, path: str, offset: int, length: int | None, as_json: bool,
        lines: str | None = None) -> int:
    """`lines`: --lines A:B (A, A:, :B); or PATH:LINE / PATH:LINE-LINE, as grep prints
    them, when PATH itself is not an indexed file."""
    from loomcli.errors import IndexMissingError

    found = corpus(config)
    if lines is not None:
        if offset or length is not None:
            raise LoomError("--lines and --offset/--length cannot be used together",
                            "choose one")
        span = _line_range("1" + lines if lines.startswith(":") else lines, ":")
        if span is None:
            raise LoomError(f"--lines takes A:B, A: or :B (line numbers), got {lines!r}",
                            "e.g. --lines 12:20")
        got = found.get_lines(found.index_path_of(path), *span)
    else:
        try:
            got = found.get(found.index_path_of(path), offset, length)
        except IndexMissingError:
            name, at = _at_offset(path, offset)
            if name != path:  # PATH@OFFSET, as ask prints its sources
                got = found.get(found.index_path_of(name), at, length)
                return _print_got(got, as_json)
            name, colon, where = path.rpartition(":")
            span = _line_range(where, "-") if colon and name else None
            if span is None or offset or length is not None:
                raise
            page = name.rpartition(":")  # a PDF's hit: PATH:pPAGE:LINE
            if page[1] and page[2][:1] == "p" and page[2][1:].isdigit():
                name = page[0]
            got = found.get_lines(found.index_path_of(name), *span)
    return _print_got(got, as_json)


def _print_got(got: Any, as_json: bool) -> int:
    if as_json:
        print_json(got.to_dict())
    else:
        newline = got.content and not got.content.endswith("\n") and sys.stdout.isatty()
        out(got.content, end="\n" if newline else "")
    return 0


def _at_offset(path: str, offset: int) -> tuple[str, int]:
    """`PATH@OFFSET`, as `loom ask` prints its sources: the file from that byte (tried
    when PATH itself is not an indexed file)."""
    import re

    at = re.fullmatch(r"(.+)@(\d{1,15})", path, re.DOTALL)
    if at is None:
        return path, offset
    if offset:
        raise LoomError(f"{path} gives an offset and so does --offset", "give one of them")
    return at[1], int(at[2])


def grep(config: str | None, pattern: str | None, *, path: str | None,
         glob: list[str] | None, case: str | None, fixed: bool, word: bool,
         files_with_matches: bool, count: bool, only_matching: bool, after: int | None,
         before: int | None, context: int | None, max_count: int | None, color_when: str,
         heading: bool | None, limit: int | None, here: bool, as_json: bool,
         regexp: list[str] | None = None, invert: bool = False, quiet: bool = False,
         line_number: bool = True, types: list[str] | None = None,
         types_not: list[str] | None = None, files_without_match: bool = False,
         multiline: bool = False) -> int:
    """`color_when` is one of COLORS (the caller refuses others as a usage error);
    `case` the last of -i/-s/-S given (None: the default, smart); `regexp`: the -e
    patterns (then no `pattern`)."""
    from loomcli.grep_printer import PATH, RESET, Printer

    if regexp and pattern is not None:
        raise LoomError("-e and a PATTERN argument cannot be used together",
                        "give every pattern with -e (loom grep reads the whole index; "
                        "--path picks one file)")
    patterns: str | list[str] = regexp if regexp else pattern or ""
    shapes = [flag for flag, on in (("-l", files_with_matches), ("-c", count),
                                    ("-o", only_matching),
                                    ("--files-without-match", files_without_match)) if on]
    if not quiet and (len(shapes) > 1 or (shapes and as_json)):
        both = " and ".join(shapes + (["--json"] if as_json else []))
        raise LoomError(f"{both} cannot be used together", "choose one")
    mode = ("files" if files_with_matches else "count" if count
            else "only" if only_matching else "lines")
    painted = color(color_when)
    if mode != "lines" or quiet or files_without_match:
        before = after = context = None  # ripgrep prints no context with -l, -c, -o
    found_in = corpus(config)
    options: dict[str, Any] = dict(
        path=None if path is None else found_in.index_path_of(path), globs=glob,
        case=case, fixed=fixed, word=word, within=Path.cwd() if here else None,
        invert=invert, multiline=multiline, types=types, types_not=types_not)
    if files_without_match and not quiet:
        write = Lines()
        n = 0
        for shown_path in found_in.grep_files_without_match(patterns, **options):
            write(f"{PATH}{shown(shown_path)}{RESET}" if painted else shown(shown_path))
            n += 1
        write.flush()
        return 0 if n else 1
    lines = found_in.grep_lines(
        patterns, context=context, before=before, after=after,
        max_count=1 if files_with_matches or quiet else max_count,
        every=(only_matching or (painted and mode == "lines")) and not quiet, **options)
    if quiet:  # -q: the exit code says it all; the first match ends the search
        if files_without_match:
            return 0 if next(iter(found_in.grep_files_without_match(patterns, **options)),
                             None) is not None else 1
        return 0 if next(iter(lines), None) is not None else 1
    found = 0
    if as_json:
        matches, truncated = [], False
        for m in lines:
            if found == limit:
                truncated = True
                break
            matches.append(m.to_dict())
            found += 1
        print_json({"matches": matches, "truncated": truncated})
        return 0 if found else 1
    write = Lines()
    printer = Printer(write, mode=mode, color=painted,
                      heading=sys.stdout.isatty() if heading is None else heading,
                      context=bool(before or after or context), shown=shown,
                      line_number=line_number)
    truncated = False
    for m in lines:
        if found == limit:
            truncated = True
            break
        printer.add(m)
        found += 1
    printer.finish()
    write.flush()
    if truncated:
        err(f"stopped after {found} matching lines (--limit {limit})")
    return 0 if found else 1
