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


def get(config: str | None, path: str, offset: int, length: int | None, as_json: bool
        ) -> int:
    found = corpus(config)
    got = found.get(found.index_path_of(path), offset, length)
    if as_json:
        print_json(got.to_dict())
    else:
        newline = got.content and not got.content.endswith("\n") and sys.stdout.isatty()
        out(got.content, end="\n" if newline else "")
    return 0


def grep(config: str | None, pattern: str, *, path: str | None, glob: list[str] | None,
         case: str | None, fixed: bool, word: bool, files_with_matches: bool, count: bool,
         only_matching: bool, after: int | None, before: int | None, context: int | None,
         max_count: int | None, color_when: str, heading: bool | None, limit: int | None,
         here: bool, as_json: bool) -> int:
    """`color_when` is one of COLORS (the caller refuses others as a usage error);
    `case` the last of -i/-s/-S given (None: the default, smart)."""
    from loomcli.grep_printer import Printer

    shapes = [flag for flag, on in (("-l", files_with_matches), ("-c", count),
                                    ("-o", only_matching)) if on]
    if len(shapes) > 1 or (shapes and as_json):
        both = " and ".join(shapes + (["--json"] if as_json else []))
        raise LoomError(f"{both} cannot be used together", "choose one")
    mode = ("files" if files_with_matches else "count" if count
            else "only" if only_matching else "lines")
    painted = color(color_when)
    if mode != "lines":
        before = after = context = None  # ripgrep prints no context with -l, -c, -o
    found_in = corpus(config)
    lines = found_in.grep_lines(
        pattern, path=None if path is None else found_in.index_path_of(path), globs=glob,
        context=context, case=case,
        fixed=fixed, word=word, before=before, after=after,
        max_count=1 if files_with_matches else max_count,
        every=only_matching or (painted and mode == "lines"),
        within=Path.cwd() if here else None)
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
                      context=bool(before or after or context), shown=shown)
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
