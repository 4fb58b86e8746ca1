"""The `loom` command's entry: `search`, `grep`, `get` and `scan` start without typer.

Importing typer and building the command costs more than a selective grep itself, or a
rescan that finds nothing changed (docs/benchmarks.md, "Cold start"). A command line of
one of these commands that this module understands — every option of theirs, in any of
click's spellings — runs reading.py (scanning.py) straight away; anything else (help,
completion, `--version`, another command, an unknown or malformed option, a missing
argument) goes to cli.py's typer app, which prints the help, the completion and the
usage errors. So what is printed and the exit code are the same either way:
tests/test_fastpath.py runs every command line both ways and compares.

The parsing follows click's rules (typer's parser): options and arguments in any order,
`--` ends the options, `--opt=value`, `-xVALUE` and clusters of short flags (`-iw`), the
last value of an option given twice wins, and -i/-s/-S apply in the order of their
first appearance (click runs a parameter's callback at its first position).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from loomcli.process import one_blas_thread

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import NoReturn

FLAG, OFF, TEXT, NUMBER, COUNT, MANY = "flag", "off", "text", "number", "count", "many"
# COUNT: a number of at least 1 (grep --limit, an IntRange(min=1) in typer)

# Each command's options are declared in declare.py; these tables are what
# `declare.fast_options` and `declare.fast_defaults` make of it, written out because
# importing the declaration costs a cold command 0.3-0.7 ms (tests/test_declare.py checks
# they are equal, and prints them: `python -m loomcli.declare --fast`).

_GREP_OPTIONS = {
    "--path": ("path", TEXT),
    "--glob": ("glob", MANY), "-g": ("glob", MANY),
    "--ignore-case": ("ignore", FLAG), "-i": ("ignore", FLAG),
    "--case-sensitive": ("sensitive", FLAG), "-s": ("sensitive", FLAG),
    "--smart-case": ("smart", FLAG), "-S": ("smart", FLAG),
    "--fixed-strings": ("fixed", FLAG), "-F": ("fixed", FLAG),
    "--word-regexp": ("word", FLAG), "-w": ("word", FLAG),
    "--files-with-matches": ("files_with_matches", FLAG), "-l": ("files_with_matches", FLAG),
    "--count": ("count", FLAG), "-c": ("count", FLAG),
    "--only-matching": ("only_matching", FLAG), "-o": ("only_matching", FLAG),
    "--after-context": ("after", NUMBER), "-A": ("after", NUMBER),
    "--before-context": ("before", NUMBER), "-B": ("before", NUMBER),
    "--context": ("context", NUMBER), "-C": ("context", NUMBER),
    "--max-count": ("max_count", NUMBER), "-m": ("max_count", NUMBER),
    "--color": ("color_when", TEXT),
    "--heading": ("heading", FLAG), "--no-heading": ("heading", OFF),
    "--line-number": ("line_number", FLAG), "-n": ("line_number", FLAG),
    "--no-line-number": ("no_line_number", FLAG), "-N": ("no_line_number", FLAG),
    "--regexp": ("regexp", MANY), "-e": ("regexp", MANY),
    "--invert-match": ("invert", FLAG), "-v": ("invert", FLAG),
    "--quiet": ("quiet", FLAG), "-q": ("quiet", FLAG),
    "--type": ("types", MANY), "-t": ("types", MANY),
    "--type-not": ("types_not", MANY), "-T": ("types_not", MANY),
    "--files-without-match": ("files_without_match", FLAG),
    "--multiline": ("multiline", FLAG), "-U": ("multiline", FLAG),
    "--limit": ("limit", COUNT),
    "--here": ("here", FLAG),
    "--json": ("as_json", FLAG),
}
_GREP_DEFAULTS = {"path": None, "glob": None, "ignore": False, "sensitive": False,
                  "smart": False, "fixed": False, "word": False, "files_with_matches": False,
                  "count": False, "only_matching": False, "after": None, "before": None,
                  "context": None, "max_count": None, "color_when": "auto", "heading": None,
                  "line_number": False, "limit": None, "here": False, "as_json": False,
                  "no_line_number": False, "regexp": None, "invert": False, "quiet": False,
                  "types": None, "types_not": None, "files_without_match": False,
                  "multiline": False}
_CASES = {"ignore": "ignore", "sensitive": "sensitive", "smart": "smart"}

_SEARCH_OPTIONS = {
    "--limit": ("limit", NUMBER),
    "--mode": ("mode", TEXT),
    "--path": ("path", TEXT),
    "--glob": ("glob", MANY), "-g": ("glob", MANY),
    "--here": ("here", FLAG),
    "--tag": ("tag", MANY),
    "--json": ("as_json", FLAG),
}
_SEARCH_DEFAULTS = {"limit": None, "mode": None, "path": None, "glob": None, "here": False,
                    "as_json": False, "tag": None}

_GET_OPTIONS = {
    "--offset": ("offset", NUMBER),
    "--length": ("length", NUMBER),
    "--lines": ("lines", TEXT),
    "--json": ("as_json", FLAG),
}
_GET_DEFAULTS = {"offset": 0, "length": None, "as_json": False, "lines": None}

_SCAN_OPTIONS = {
    "--force": ("force", FLAG),
    "--rebuild": ("rebuild", FLAG),
    "--verbose": ("verbose", FLAG), "-v": ("verbose", FLAG),
    "--json": ("as_json", FLAG),
}
_SCAN_DEFAULTS = {"force": False, "rebuild": False, "verbose": False, "as_json": False}

Values = dict[str, object]


def _number(text: str) -> int | None:
    """click's int for the spellings whose value is sure: ASCII digits (anything else,
    "+5", " 5", "1_000", "-1", goes to typer, which converts or refuses it)."""
    return int(text) if text.isascii() and text.isdigit() else None


def _store(values: Values, dest: str, kind: str, value: str | None) -> bool:
    if kind == FLAG:
        values[dest] = True
    elif kind == OFF:
        values[dest] = False
    elif kind == MANY:
        values.setdefault(dest, [])
        values[dest].append(value)  # type: ignore[attr-defined]
    elif kind == TEXT:
        values[dest] = value
    else:
        number = _number(value or "")
        if number is None or (kind == COUNT and number < 1):
            return False
        values[dest] = number
    return True


def _options(args: list[str], options: dict[str, tuple[str, str]]
             ) -> tuple[Values, list[str], list[str]] | None:
    """(option values, arguments, option names in the order given), parsed as click
    parses a command's command line; None for anything it would refuse or that means
    more than running the command (help)."""
    values: Values = {}
    arguments: list[str] = []
    order: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            arguments += rest
            break
        if arg[:1] != "-" or len(arg) == 1:
            arguments.append(arg)
            continue
        if arg.startswith("--"):
            name, eq, attached = arg.partition("=")
            if name not in options:
                return None
            dest, kind = options[name]
            if kind in (FLAG, OFF):
                if eq:
                    return None  # "--json=1": click says the option takes no value
                value = None
            elif eq:
                value = attached
            elif rest:
                value = rest.pop(0)  # click takes the next word whatever it looks like
            else:
                return None
            if not _store(values, dest, kind, value):
                return None
            order.append(dest)
            continue
        for i, char in enumerate(arg[1:], 2):  # a cluster of short options: -iw, -C3
            if "-" + char not in options:
                return None
            dest, kind = options["-" + char]
            value = None
            if kind not in (FLAG, OFF):
                if i < len(arg):
                    value = arg[i:]
                elif rest:
                    value = rest.pop(0)
                else:
                    return None
            if not _store(values, dest, kind, value):
                return None
            order.append(dest)
            if value is not None:
                break
    return values, arguments, order


def parse(args: list[str]) -> Callable[[], int] | None:
    """The command line as a call of reading.py or scanning.py, or None for typer."""
    config: str | None = None
    while args and (args[0] == "--config" or args[0].startswith("--config=")):
        if args[0] == "--config":
            if len(args) < 2:
                return None
            config, args = args[1], args[2:]
        else:
            config, args = args[0][len("--config="):], args[1:]
    if not args:
        return None
    command, args = args[0], args[1:]
    if command == "--version" and not args:  # anything after it: typer's rules
        return _version
    if command == "grep":
        return _grep(config, args)
    if command == "search":
        return _search(config, args)
    if command == "get":
        return _get(config, args)
    if command == "scan":
        return _scan(config, args)
    return None


def _version() -> int:
    from loomcli import __version__

    sys.stdout.write(f"loom {__version__}\n")
    return 0


def _grep(config: str | None, args: list[str]) -> Callable[[], int] | None:
    parsed = _options(args, _GREP_OPTIONS)
    if parsed is None or len(parsed[1]) > 1 or not (parsed[1] or "regexp" in parsed[0]):
        return None  # typer says what is missing or too much
    given, arguments, order = parsed
    pattern = arguments[0] if arguments else None
    values = {**_GREP_DEFAULTS, **given}
    from loomcli.reading import COLORS, grep

    if values["color_when"] not in COLORS:
        return None  # typer's usage error names the choices
    firsts = [dest for i, dest in enumerate(order) if dest in _CASES and dest not in order[:i]]
    case = _CASES[firsts[-1]] if firsts else None
    values["line_number"] = not values.pop("no_line_number")  # -n is always on
    for dest in _CASES:
        del values[dest]
    return lambda: grep(config, pattern, case=case, **values)  # type: ignore[arg-type]


def _search(config: str | None, args: list[str]) -> Callable[[], int] | None:
    parsed = _options(args, _SEARCH_OPTIONS)
    if parsed is None or not parsed[1]:
        return None
    values = {**_SEARCH_DEFAULTS, **parsed[0]}
    from loomcli.reading import search

    return lambda: search(config, parsed[1], **values)  # type: ignore[arg-type]


def _get(config: str | None, args: list[str]) -> Callable[[], int] | None:
    parsed = _options(args, _GET_OPTIONS)
    if parsed is None or len(parsed[1]) != 1:
        return None
    values = {**_GET_DEFAULTS, **parsed[0]}
    from loomcli.reading import get

    return lambda: get(config, parsed[1][0], **values)  # type: ignore[arg-type]


def _scan(config: str | None, args: list[str]) -> Callable[[], int] | None:
    parsed = _options(args, _SCAN_OPTIONS)
    if parsed is None:
        return None
    values = {**_SCAN_DEFAULTS, **parsed[0]}
    from pathlib import Path

    from loomcli.scanning import scan

    dirs = [Path(d) for d in parsed[1]]
    return lambda: scan(config, dirs, **values)  # type: ignore[arg-type]


def main() -> NoReturn:
    """Run `loom`: search, grep, get and scan here when their command line is understood,
    every other command line through typer (cli.main)."""
    one_blas_thread()
    run = None if "_LOOM_COMPLETE" in os.environ else parse(sys.argv[1:])
    if run is None:
        from loomcli.cli import main as typer_main

        typer_main()
    try:
        code = run()
    except (Exception, KeyboardInterrupt) as exc:
        code = _failure(exc)
    _exit(code)


def _exit(code: int) -> NoReturn:
    """Exit without tearing the interpreter down: freeing every module and object costs a
    cold command ~20 M instructions (8% of a search) and a read command leaves nothing to
    finish (its index is closed, no thread, no atexit hook). Anything unusual — output
    that cannot be flushed, a hook registered after all — exits the ordinary way, which
    reports it as before."""
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        sys.exit(code)
    # _ncallbacks is CPython's; elsewhere assume a hook may be there
    if getattr(atexit, "_ncallbacks", lambda: 1)() or sys.flags.dev_mode:
        sys.exit(code)
    os._exit(code)


def _failure(exc: BaseException) -> int:
    """As cli.main ends a command typer ran: two cases typer itself handles first."""
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        # stderr closed (stdout's own closing is console.StdoutClosed): typer exits 1
        # silently, its wrappers keeping the final flush from failing again.
        from loomcli.compat import pacify_flush_wrapper

        PacifyFlushWrapper = pacify_flush_wrapper()  # noqa: N806 - a class
        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        return 1
    if isinstance(exc, EOFError):  # typer: a blank line, then "aborted" (130)
        sys.stderr.write("\n")
        return 130
    from loomcli.console import failure

    return failure(exc)
