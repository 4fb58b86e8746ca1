"""grep's human output, as ripgrep prints it: lines, -o, -l, -c, context, colour, headings.

Pure rendering of `grep.Match`es as they arrive (nothing is held but the previous match's
after-context, so a pipe gets lines at once): `path:line:offset:text`, a PDF's page
before the line (`path:p12:5064:253065:text`), context lines `path-line-text` merged
where they overlap and `--` between groups, as ripgrep does.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.search.grep import Match

# ripgrep's default colours: path magenta, line number green, match bold red.
PATH, NUMBER, MATCH, RESET = "\x1b[35m", "\x1b[32m", "\x1b[1m\x1b[31m", "\x1b[0m"
MODES = ("lines", "only", "files", "count")


class Printer:
    """Feed it matches in path order (`add`), then call `finish`."""

    def __init__(self, write: Callable[[str], None], *, mode: str = "lines",
                 color: bool = False, heading: bool = False, context: bool = False,
                 shown: Callable[[str], str] = str, line_number: bool = True) -> None:
        self.write, self.mode, self.color, self.heading = write, mode, color, heading
        self.context, self.shown, self.line_number = context, shown, line_number
        self.path: str | None = None
        self.last = 0  # the last line printed of the current file
        self.pending: list[tuple[int, str]] = []  # the previous match's after-context
        self.count = 0
        self.groups = 0  # groups of lines printed so far (for `--` and blank lines)

    def _paint(self, text: str, color: str) -> str:
        return f"{color}{text}{RESET}" if self.color and text else text

    def _path(self) -> str:
        return self._paint(self.shown(self.path or ""), PATH)

    def _prefix(self, m: Match | None, line: int, offset: int | None, sep: str) -> str:
        fields = [] if self.heading else [self._path()]
        if m is not None and m.page is not None:
            fields.append(self._paint(f"p{m.page}", NUMBER))
        if self.line_number:  # -N leaves it out
            fields.append(self._paint(str(line), NUMBER))
        if offset is not None:
            fields.append(str(offset))
        return sep.join(fields) + sep if fields else ""

    def _marked(self, m: Match) -> str:
        if not self.color or not m.marks:
            return m.text
        out, prev = [], 0
        for a, b in m.marks:
            out += [m.text[prev:a], self._paint(m.text[a:b], MATCH)]
            prev = b
        return "".join(out) + m.text[prev:]

    def add(self, m: Match) -> None:
        if m.path != self.path:
            self._end_file()
            self.path = m.path
            if self.mode in ("lines", "only") and self.heading:
                if self.groups:
                    self.write("")
                self.write(self._path())
        if self.mode == "files":
            return
        if not m.continued:  # -U: a match spanning lines counts once
            self.count += 1
        if self.mode == "count":
            return
        if self.mode == "only":
            for offset, text in m.parts:
                self.write(self._prefix(m, m.line, offset, ":") + self._paint(text, MATCH))
            self.groups += 1
            return
        first = m.line - len(m.before)
        if self.context:
            self._flush(m.line)
            if self.groups and (first > self.last + 1 if self.last else not self.heading):
                self.write("--")
        for i, text in enumerate(m.before):
            if first + i > self.last:
                self.write(self._prefix(None, first + i, None, "-") + text)
        self.write(self._prefix(m, m.line, m.offset, ":") + self._marked(m))
        if self.last == 0 or not self.context or first > self.last + 1:
            self.groups += 1
        self.last = m.line
        self.pending = [(m.line + 1 + i, text) for i, text in enumerate(m.after)]

    def _flush(self, below: int | None = None) -> None:
        """Print the pending after-context lines (those before line `below`)."""
        for number, text in self.pending:
            if number > self.last and (below is None or number < below):
                self.write(self._prefix(None, number, None, "-") + text)
                self.last = number
        self.pending = []

    def _end_file(self) -> None:
        if self.path is None:
            return
        self._flush()
        if self.mode == "files":
            self.write(self._path())
        elif self.mode == "count":
            self.write(f"{self._path()}:{self.count}")
        self.path, self.last, self.count = None, 0, 0

    def finish(self) -> None:
        self._end_file()
