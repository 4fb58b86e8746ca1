"""What the `loom` command writes, and how a failure becomes its one line and exit code.

Typer-free on purpose: the read commands (reading.py) run through here without typer
when fastpath.py parses their command line, and through cli.py's typer app otherwise;
both print with these helpers and end through `failure`, so they cannot drift apart.
"""

from __future__ import annotations

import os
import sys

from loomcli.sanitize import safe, shown, utf8  # noqa: F401 - the edges print with these

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.operations import Corpus


class StdoutClosed(Exception):
    """The reader of stdout went away (`loom files | head -1`)."""


def out(text: str, end: str = "\n") -> None:
    """Data to stdout. A closed pipe stops the command quietly, as it stops grep."""
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()
    except BrokenPipeError:
        raise StdoutClosed from None


def err(message: str) -> None:
    sys.stderr.write(f"loom: {safe(message, lines=True)}\n")


def print_json(data: Any) -> None:
    import json

    out(json.dumps(data, ensure_ascii=False, indent=2))


def size(n: int) -> str:
    """A size in decimal units (1 MB = 1,000,000 bytes), as the web page shows it."""
    if n < 1000:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            break
    return f"{value:.1f} {unit}"


def count(n: int, word: str) -> str:
    """`1 turn`, `2 turns`: a count with its noun in the number it needs."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def highlight(snippet: str) -> str:
    from loomcli.search.text import SNIPPET_END, SNIPPET_START, plain_snippet

    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return snippet.replace(SNIPPET_START, "\x1b[1m").replace(SNIPPET_END, "\x1b[0m")
    return plain_snippet(snippet)


def color(when: str, stream: Any = None) -> bool:
    """Colour for `stream` (stdout by default): --color always / never, else (auto) on a
    terminal unless NO_COLOR is set or TERM is dumb."""
    if when == "always":
        return True
    if when == "never":
        return False
    return ((stream or sys.stdout).isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


WARNING, SOURCE, STEP = "33", "35", "36"  # yellow, magenta (grep's paths), cyan


def paint(text: str, code: str, on: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if on else text


class Status:
    """One line on stderr, rewritten in place while loom works ("sending 5 files, …"),
    cleared before anything else is written. Only on a terminal: a pipe or a file gets
    nothing of it."""

    def __init__(self) -> None:
        self.on = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self.text = ""

    def show(self, text: str) -> None:
        self.text = text
        if self.on:
            import shutil

            width = max(10, shutil.get_terminal_size().columns - 1)
            shown = text if len(text) <= width else text[:width - 1] + "…"
            sys.stderr.write(f"\r\x1b[K\x1b[2m{shown}\x1b[0m")
            sys.stderr.flush()

    def clear(self) -> None:
        """Remove the line (it is shown again by `show`)."""
        if self.on and self.text:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
        self.text = ""

    def above(self, line: str) -> None:
        """Write a line of its own on stderr, the status (if any) kept below it."""
        text = self.text
        self.clear()
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if text:
            self.show(text)


class Lines:
    """stdout for many lines: buffered (a line per write call costs a system call each),
    flushed at the end and on a terminal as it goes; a closed pipe stops the command."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()

    def __call__(self, line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            if self.tty:
                sys.stdout.flush()
        except BrokenPipeError:
            raise StdoutClosed from None

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            raise StdoutClosed from None


def corpus(config_override: str | None) -> Corpus:
    """The configured corpus; the config's warnings (unknown keys) go to stderr once."""
    from loomcli import config
    from loomcli.operations import Corpus

    cfg = config.load(config_override)
    for warning in cfg.warnings:
        err(f"warning: {warning}")
    return Corpus(cfg)


def failure(exc: BaseException) -> int:
    """The exit code for an exception that ended a command, after its one `loom: …` line
    (none for Ctrl-C and a closed stdout). Called inside the `except` that caught it:
    with LOOM_DEBUG=1 a bug is re-raised with its traceback."""
    from loomcli.errors import Exit, LoomError

    if isinstance(exc, LoomError):
        if os.environ.get("LOOM_DEBUG"):
            import traceback

            traceback.print_exc()
        err(str(exc))
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return int(Exit.INTERRUPTED)
    if isinstance(exc, StdoutClosed):
        # `loom files | head -1`: the reader has what it wanted. Like grep: silent, 0.
        # Point stdout at /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(Exit.OK)
    if not isinstance(exc, Exception):
        raise exc
    if os.environ.get("LOOM_DEBUG"):
        raise exc
    import errno

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        err(f"no space left on the device ({exc.filename or 'writing'}) — free some "
            "space and run the command again")
        return int(Exit.ERROR)
    err(f"internal error: {type(exc).__name__}: {exc} — rerun with LOOM_DEBUG=1 for "
        "the traceback and report it")
    return int(Exit.ERROR)


HISTORY_FILE, HISTORY_LINES = "chat_history", 1000


def history_path() -> Any:
    from loomcli import paths

    return paths.home() / HISTORY_FILE


class Prompt:
    """Lines typed at a terminal for `loom chat`: line editing and a history kept in the
    loom home (readline, where Python has it). Ctrl-C at the prompt gives a fresh one,
    Ctrl-D ends."""

    def __init__(self, prompt: str, history: Any) -> None:
        self.prompt, self.history = prompt, history
        try:
            import readline
        except ImportError:  # Windows without pyreadline: plain input() still works
            readline = None  # type: ignore[assignment]
        self.readline = readline
        if readline is not None:
            readline.set_history_length(HISTORY_LINES)
            import contextlib

            with contextlib.suppress(OSError, UnicodeDecodeError):  # none yet: a new one
                readline.read_history_file(str(history))

    def read(self) -> str | None:
        """The next line, None at Ctrl-D."""
        while True:
            try:
                if sys.stdout.isatty():
                    return input(self.prompt)
                sys.stderr.write(self.prompt)  # `loom chat > answers.txt`: data only there
                sys.stderr.flush()
                return input()
            except EOFError:
                (sys.stdout if sys.stdout.isatty() else sys.stderr).write("\n")
                return None
            except KeyboardInterrupt:
                (sys.stdout if sys.stdout.isatty() else sys.stderr).write("\n")

    def close(self) -> None:
        if self.readline is None:
            return
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(str(self.history))
            os.chmod(self.history, 0o600)  # questions can be private
        except OSError:
            pass  # a read-only home: the history is simply not kept
