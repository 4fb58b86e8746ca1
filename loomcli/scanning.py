"""`loom scan` after its options are parsed: the scan with its progress bar, the report,
the exit code.

Typer-free, as reading.py: fastpath.py runs it straight from a command line it
understands (a rescan that finds nothing changed is mostly the process's start-up),
cli.py's typer command for everything else, with the same arguments.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from loomcli.console import corpus, err, out, print_json, shown
from loomcli.errors import Exit


class ProgressBar:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.clock = time.monotonic
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int, path: str) -> None:
        now = self.clock()
        if not self.enabled or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        width = 24
        filled = width * done // max(total, 1)
        line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {path}"[:100]
        sys.stderr.write(line.ljust(101))
        sys.stderr.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            sys.stderr.write("\r" + " " * 101 + "\r")
            sys.stderr.flush()


def scan(config: str | None, dirs: list[Path], force: bool, rebuild: bool, verbose: bool,
         as_json: bool) -> int:
    from loomcli.index import indexer

    bar = ProgressBar()
    try:
        report = corpus(config).scan(dirs, force=force, rebuild=rebuild, progress=bar,
                                     on_wait=err)
    except indexer.ScanInterrupted as stop:
        bar.clear()
        err(stop.summary())
        return int(Exit.INTERRUPTED)
    finally:
        bar.clear()
    if as_json:
        print_json(report.to_dict())
        return indexer.exit_code(report)
    known = [e for e in report.errors if e["path"] in report.known]
    for e in report.errors:
        if verbose or e["path"] not in report.known:
            err(f"failed: {shown(e['path'])}: {e['error']}")
    if known and not verbose:
        err(f"{len(known)} file{'s' if len(known) > 1 else ''} failed before and "
            f"{'are' if len(known) > 1 else 'is'} unchanged — `loom status --failed` "
            "lists them")
    new_skips = [e for e in report.skips if e["path"] not in report.known]
    for e in report.skips if verbose else ():
        err(f"skipped: {shown(e['path'])}: {e['reason']}")
    if new_skips and not verbose:
        first = new_skips[0]
        err(f"skipped {len(new_skips)} file{'s' if len(new_skips) > 1 else ''} with "
            f"no text to index (e.g. {shown(first['path'])}: "
            f"{first['reason'].split(' — ')[0]}) — `loom status --skipped` lists them")
    if report.vectors and report.vectors["error"]:
        err(f"warning: vectors not made ({report.vectors['error']}); the text is "
            "indexed and the next scan tries again")
    out(report.summary())
    return indexer.exit_code(report)
