"""Each operation's parameters, declared once for every edge.

An operation (search, grep, get, ...) has parameters: a name (the JSON name MCP and HTTP
use), a type, a default, bounds, a one-line help, and the edges that offer it — the CLI
(its options, as typer and the fast path spell them), MCP (the tool's arguments), HTTP
(the route's JSON body) and the web page (what app.js sends). Where an edge does not
offer a parameter, `why` says why: which edge offers what is a choice written here, not
an accident of four hand-written signatures.

Made from this table: the MCP and agent tools' JSON schemas (tools.py) and the checks
of an MCP call's and an HTTP body's arguments (`check`: unknown names, required ones,
types, lower bounds, choices). Checked against it by tests/test_declare.py: typer's
options (names, defaults, help: typer needs real signatures), the fast path's option
tables (written out in fastpath.py: importing this module would cost every cold
`loom grep` 0.3-0.7 ms; `python -m loomcli.declare --fast` prints them), the MCP
server's tool list (from a real session), the HTTP server's checks and the parameter
tables of docs/reference.md (`python -m loomcli.declare` prints them).

Light to import all the same (plain classes and tuples, no typing, dataclasses or
pydantic): MCP and HTTP servers and the agent import it.
"""

from __future__ import annotations

from loomcli.limits import (
    EXCERPT_CHARS,
    EXCERPT_CHARS_MAX,
    GREP_CASE,
    GREP_CONTEXT_MAX,
    GREP_LIMIT,
    GREP_LIMIT_MAX,
    SEARCH_LIMIT,
    SEARCH_LIMIT_MAX,
    SEARCH_MODES,
    TOP_K_MAX,
)

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

CLI, MCP, HTTP, PAGE = "cli", "mcp", "http", "page"
EDGES = (CLI, MCP, HTTP, PAGE)

# A parameter's value, as JSON carries it.
STRING, INTEGER, BOOLEAN, STRINGS = "string", "integer", "boolean", "strings"

# How the command line spells an option's value (fastpath.py parses these kinds).
FLAG, OFF, TEXT, NUMBER, COUNT, MANY = "flag", "off", "text", "number", "count", "many"
ARGUMENT = "argument"  # a positional argument: typer's, never in the fast path's tables
# COUNT: a number of at least 1 (grep --limit, an IntRange(min=1) in typer)

CASES = ("smart", "ignore", "sensitive")  # grep's case rule (grep.CASES)
COLORS = ("auto", "always", "never")  # --color WHEN (reading.COLORS)

# Reasons shared by many parameters an edge leaves out.
TERMINAL = "how a terminal shows the result; MCP and HTTP answer JSON"
JSON_ALWAYS = "MCP and HTTP always answer JSON"
PAGE_NEEDS_NOT = "the page does not use it"
DISK = ("a folder on the disk of the machine running loom, relative to the current "
        "folder: a client has no current folder there (it gives `path`, a folder as "
        "loom_list_files shows it)")
SERVED = ("a server serves the folders it was configured with; a client choosing folders "
          "on the server's disk could read anything there")
STREAM = "MCP answers one result per call; the CLI streams to the terminal already"
PAGE_TYPING = ("the page's search as you type; an agent or a typed command sends whole "
               "queries")
PAGE_MARKS = ("the page highlights matches from these spans; the CLI colours them, MCP "
              "clients read `text`")


class Option:
    """One command-line spelling of a parameter: `names` as typer declares them
    ("--glob", "-g"), `param` the typer function's argument, `dest` what reading.py and
    the fast path call it (default: param), `kind` FLAG/OFF/TEXT/NUMBER/COUNT/MANY or
    ARGUMENT, `default` typer's default."""

    __slots__ = ("names", "param", "dest", "kind", "default", "help")

    def __init__(self, names: tuple[str, ...], param: str, kind: str, default: Any = None,
                 help: str = "", dest: str | None = None) -> None:  # noqa: A002
        self.names, self.param, self.kind = names, param, kind
        self.default, self.help, self.dest = default, help, dest or param


class Param:
    """One parameter of an operation. `name`: its JSON name (MCP, HTTP); `kind`: STRING,
    INTEGER, BOOLEAN or STRINGS (a string or a list of them); `default` for MCP and HTTP
    (None: left out, the operation's own default); `lo`: values below are refused, `hi`:
    values above are clamped (by the operation); `choices`: the values allowed; `cli`:
    the Options that spell it on the command line; `edges`: those that offer it beside
    the CLI; `why`: for each edge that does not offer it, the reason."""

    __slots__ = ("name", "kind", "default", "help", "lo", "hi", "choices", "required",
                 "cli", "edges", "why")

    def __init__(self, name: str, kind: str, help: str, *,  # noqa: A002
                 default: Any = None, lo: int | None = None, hi: int | None = None,
                 choices: tuple[str, ...] = (), required: bool = False,
                 cli: tuple[Option, ...] = (), edges: tuple[str, ...] = (MCP, HTTP),
                 why: dict[str, str] | None = None) -> None:
        self.name, self.kind, self.help, self.default = name, kind, help, default
        self.lo, self.hi, self.choices, self.required = lo, hi, choices, required
        self.cli = cli
        self.edges = ((CLI,) if cli else ()) + edges
        self.why = why or {}

    def offered(self, edge: str) -> bool:
        return edge in self.edges


class Operation:
    """An operation and where it is offered: `command` (the CLI's), `tool` (MCP's),
    `route` (HTTP's, POST with a JSON body unless `method` says otherwise); `why`: for
    each edge without it, the reason; `aliases`: older boolean JSON names MCP and HTTP
    accept, each mapped to a parameter's value (`{"case_sensitive": ("case", {True:
    "sensitive", False: "ignore"})}`)."""

    __slots__ = ("name", "params", "command", "tool", "route", "method", "why", "aliases")

    def __init__(self, name: str, params: tuple[Param, ...], *, command: str | None = None,
                 tool: str | None = None, route: str | None = None, method: str = "POST",
                 why: dict[str, str] | None = None,
                 aliases: dict[str, tuple[str, dict[Any, Any]]] | None = None) -> None:
        self.name, self.params, self.command, self.tool = name, params, command, tool
        self.route, self.method, self.why = route, method, why or {}
        self.aliases = aliases or {}

    def offered(self, edge: str) -> bool:
        return {CLI: self.command, MCP: self.tool, HTTP: self.route,
                PAGE: self.route}[edge] is not None and edge not in self.why

    def on(self, edge: str) -> list[Param]:
        """The parameters this edge offers, in order."""
        return [p for p in self.params if p.offered(edge)]

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


def _json(*options: Option) -> Param:
    return Param("json", BOOLEAN, "Print JSON (stable keys).", default=False,
                 cli=(Option(("--json",), "as_json", FLAG, False, "Print JSON (stable keys)."),
                      *options), edges=(), why={MCP: JSON_ALWAYS, HTTP: JSON_ALWAYS,
                                                PAGE: JSON_ALWAYS})


def _terminal(name: str, kind: str, help: str, *options: Option,  # noqa: A002
              default: Any = None, why: str = TERMINAL) -> Param:
    """A CLI-only parameter about how the terminal shows things."""
    return Param(name, kind, help, default=default, cli=options, edges=(),
                 why={MCP: why, HTTP: why, PAGE: why})


_CORPUS = Param("corpus", STRING, "Which corpus of `loom serve --corpus-root` (required "
                "there, refused otherwise).", edges=(HTTP, PAGE),
                why={CLI: "a command's corpus is its config (--config, $LOOM_HOME)",
                     MCP: "`loom mcp` serves the corpus of its config; one server per "
                          "corpus"})

_MODE_HELP = ("auto (hybrid when embeddings are on, else bm25) | bm25 | semantic | "
              "hybrid.")
_GLOB = "Only files whose path matches (gitignore-style glob; !GLOB excludes). Repeatable."
_HERE = "Only files under the current folder (inside an indexed one)."
_COLOR = ("auto (on a terminal, unless NO_COLOR is set) | always | never.")


SEARCH = Operation("search", (
    Param("query", STRING, "Words to look for (any text).", required=True,
          cli=(Option((), "query", ARGUMENT, help="Words to look for (any text)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("limit", INTEGER, "Most hits to return (at most 500).", default=SEARCH_LIMIT,
          lo=1, hi=SEARCH_LIMIT_MAX,
          cli=(Option(("--limit",), "limit", NUMBER, None,
                      "Most hits to show (default 10, at most 500)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("excerpt_chars", INTEGER, "Each hit's `content`: its whole text when short, "
          "else its head and best passage, about this long (0: no content).",
          default=EXCERPT_CHARS, lo=0, hi=EXCERPT_CHARS_MAX, edges=(MCP, HTTP, PAGE),
          why={CLI: "the CLI prints a snippet per hit; `loom get PATH --offset N` reads "
                    "one"}),
    Param("mode", STRING, _MODE_HELP, default="auto", choices=SEARCH_MODES,
          cli=(Option(("--mode",), "mode", TEXT, None, _MODE_HELP),),
          why={PAGE: "the page searches with the server's default (auto)"}),
    Param("prefix", BOOLEAN, "The query is being typed: its last word matches the words "
          "it starts.", default=False, edges=(HTTP, PAGE),
          why={CLI: PAGE_TYPING, MCP: PAGE_TYPING}),
    Param("tag", STRINGS, "Only notes with this tag (#tag in a note or its front matter; "
          "nested tags count; repeatable: every one).",
          cli=(Option(("--tag",), "tag", MANY, None,
                      "Only notes with this tag (#tag in a note or its front matter; "
                      "nested tags count; repeatable: every one)."),),
          why={PAGE: "the page's query takes #tag words"}),
    Param("path", STRING, "Search only this file, or the files of this folder.",
          cli=(Option(("--path",), "path", TEXT, None,
                      "Search only this file, or the files of this folder."),),
          why={PAGE: PAGE_NEEDS_NOT}),
    Param("glob", STRINGS, "Only files whose path matches (gitignore-style glob; "
          "repeatable; !GLOB excludes), as grep.",
          cli=(Option(("--glob", "-g"), "glob", MANY, None,
                      "Only files whose path matches (gitignore-style glob; repeatable; "
                      "!GLOB excludes), as grep."),),
          why={PAGE: PAGE_NEEDS_NOT}),
    Param("here", BOOLEAN, _HERE, default=False,
          cli=(Option(("--here",), "here", FLAG, False, _HERE),), edges=(),
          why={MCP: DISK, HTTP: DISK, PAGE: DISK}),
    _json(),
    _CORPUS,
), command="search", tool="loom_search", route="/search")


GREP = Operation("grep", (
    Param("pattern", STRING, "An RE2 regular expression (with -F, a plain string); or "
          "give -e.", required=True,
          cli=(Option((), "pattern", ARGUMENT, help="An RE2 regular expression (with -F, "
                      "a plain string); or give -e."),),
          edges=(MCP, HTTP, PAGE)),
    Param("regexp", STRINGS, "A pattern (repeatable: lines matching any of them); "
          "instead of PATTERN.",
          cli=(Option(("--regexp", "-e"), "regexp", MANY, None, "A pattern (repeatable: "
                      "lines matching any of them); instead of PATTERN."),), edges=(),
          why={MCP: "a client writes one RE2 alternation (a|b) instead",
               HTTP: "a client writes one RE2 alternation (a|b) instead",
               PAGE: "the page greps one pattern"}),
    Param("path", STRING, "Search only this file (as `loom files` shows it, or its path "
          "on disk).",
          cli=(Option(("--path",), "path", TEXT, None, "Search only this file (as `loom "
                      "files` shows it, or its path on disk)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("glob", STRINGS, _GLOB, cli=(Option(("--glob", "-g"), "glob", MANY, None,
                                              _GLOB),),
          edges=(MCP, HTTP, PAGE)),
    Param("case", STRING, "smart: ignore case unless the pattern has an upper-case "
          "letter (the default); ignore; sensitive.", default=GREP_CASE, choices=CASES,
          cli=(Option(("--ignore-case", "-i"), "ignore_case", FLAG, False, "Ignore case.",
                      dest="ignore"),
               Option(("--case-sensitive", "-s"), "case_sensitive", FLAG, False,
                      "Match case exactly.", dest="sensitive"),
               Option(("--smart-case", "-S"), "smart_case", FLAG, False,
                      "Ignore case unless the pattern has an upper-case letter (the "
                      "default).", dest="smart")),
          edges=(MCP, HTTP, PAGE)),
    Param("fixed", BOOLEAN, "The pattern is a plain string, not a regex.", default=False,
          cli=(Option(("--fixed-strings", "-F"), "fixed", FLAG, False,
                      "The pattern is a plain string, not a regex."),), edges=(),
          why={MCP: "not offered yet: a client escapes the pattern (RE2 syntax)",
               HTTP: "not offered yet: a client escapes the pattern (RE2 syntax)",
               PAGE: "the page greps a regular expression"}),
    Param("word", BOOLEAN, "Only matches that are whole words.", default=False,
          cli=(Option(("--word-regexp", "-w"), "word", FLAG, False,
                      "Only matches that are whole words."),), edges=(),
          why={MCP: "not offered yet: a client writes \\b in the pattern",
               HTTP: "not offered yet: a client writes \\b in the pattern",
               PAGE: "the page greps a regular expression"}),
    Param("context", INTEGER, "Lines before and after each match (at most 50).", default=0,
          lo=0, hi=GREP_CONTEXT_MAX,
          cli=(Option(("--context", "-C"), "context", NUMBER, None,
                      "Lines before and after each match (at most 50)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("after", INTEGER, "Lines after each match (at most 50).", lo=0,
          hi=GREP_CONTEXT_MAX,
          cli=(Option(("--after-context", "-A"), "after", NUMBER, None,
                      "Lines after each match (at most 50)."),), edges=(),
          why={MCP: "not offered yet: context gives both sides",
               HTTP: "not offered yet: context gives both sides",
               PAGE: "the page shows context on both sides"}),
    Param("before", INTEGER, "Lines before each match (at most 50).", lo=0,
          hi=GREP_CONTEXT_MAX,
          cli=(Option(("--before-context", "-B"), "before", NUMBER, None,
                      "Lines before each match (at most 50)."),), edges=(),
          why={MCP: "not offered yet: context gives both sides",
               HTTP: "not offered yet: context gives both sides",
               PAGE: "the page shows context on both sides"}),
    Param("max_count", INTEGER, "At most N matching lines per file.", lo=1,
          cli=(Option(("--max-count", "-m"), "max_count", NUMBER, None,
                      "At most N matching lines per file."),), edges=(),
          why={MCP: "limit bounds the whole answer", HTTP: "limit bounds the whole answer",
               PAGE: "limit bounds the whole answer"}),
    Param("limit", INTEGER, "Most matching lines in all (MCP and HTTP: 50 by default, "
          "at most 500; the CLI: no limit by default).", default=GREP_LIMIT, lo=1,
          hi=GREP_LIMIT_MAX,
          cli=(Option(("--limit",), "limit", COUNT, None, "Stop after N matching lines in "
                      "all (default: no limit)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("type", STRINGS, "Only files of these kinds (ripgrep's names: md, txt, pdf, "
          "html, docx…).",
          cli=(Option(("--type", "-t"), "types", MANY, None, "Only files of this ripgrep "
                      "type: md, txt, rst, org, asciidoc, pdf, html, docx, odt, pptx, "
                      "epub. Repeatable."),),
          why={PAGE: "the page narrows with globs"}),
    Param("type_not", STRINGS, "No files of this type. Repeatable.",
          cli=(Option(("--type-not", "-T"), "types_not", MANY, None,
                      "No files of this type. Repeatable."),), edges=(),
          why={MCP: "not offered yet: a glob with ! excludes",
               HTTP: "not offered yet: a glob with ! excludes",
               PAGE: "the page narrows with globs"}),
    Param("invert", BOOLEAN, "Print the lines that do not match.", default=False,
          cli=(Option(("--invert-match", "-v"), "invert", FLAG, False, "Print the lines "
                      "that do not match (their offset is the line's)."),), edges=(),
          why={MCP: "not offered: every line of every other file would be an answer",
               HTTP: "not offered: every line of every other file would be an answer",
               PAGE: "not offered: every line of every other file would be an answer"}),
    Param("multiline", BOOLEAN, "Let a match span lines.", default=False,
          cli=(Option(("--multiline", "-U"), "multiline", FLAG, False, "Let a match span "
                      "lines (\\n in the pattern); each of its lines is printed."),),
          edges=(),
          why={MCP: "not offered yet", HTTP: "not offered yet", PAGE: "not offered yet"}),
    Param("spans", BOOLEAN, "Each match also lists `marks` and `spans`, where each match "
          "of the line lies.", default=False, edges=(HTTP, PAGE),
          why={CLI: PAGE_MARKS, MCP: PAGE_MARKS}),
    _terminal("files_with_matches", BOOLEAN, "Print only the paths of files with a match.",
              Option(("--files-with-matches", "-l"), "files_with_matches", FLAG, False,
                     "Print only the paths of files with a match."), default=False),
    _terminal("files_without_match", BOOLEAN, "Print only the paths of files without a "
              "match.", Option(("--files-without-match",), "files_without_match", FLAG,
                               False, "Print only the paths of files without a match."),
              default=False),
    _terminal("count", BOOLEAN, "Print path:N, the matching lines of each file.",
              Option(("--count", "-c"), "count", FLAG, False,
                     "Print path:N, the matching lines of each file."), default=False),
    _terminal("only_matching", BOOLEAN, "Print each match on its own line.",
              Option(("--only-matching", "-o"), "only_matching", FLAG, False,
                     "Print each match on its own line (its own offset)."), default=False),
    _terminal("quiet", BOOLEAN, "Print nothing; exit 0 at the first match, else 1.",
              Option(("--quiet", "-q"), "quiet", FLAG, False,
                     "Print nothing; exit 0 at the first match, else 1."), default=False),
    _terminal("color", STRING, _COLOR,
              Option(("--color",), "color", TEXT, "auto", _COLOR, dest="color_when"),
              default="auto"),
    _terminal("heading", BOOLEAN, "Each file's path on a line above its matches.",
              Option(("--heading",), "heading", FLAG, None, "Each file's path on a line "
                     "above its matches (default: on a terminal)."),
              Option(("--no-heading",), "heading", OFF, None)),
    _terminal("line_number", BOOLEAN, "Line numbers (on by default).",
              Option(("--line-number", "-n"), "line_number", FLAG, False,
                     "Show line numbers (the default)."),
              Option(("--no-line-number", "-N"), "no_line_number", FLAG, False,
                     "Leave line numbers out (path:offset:text)."), default=True),
    Param("here", BOOLEAN, _HERE, default=False,
          cli=(Option(("--here",), "here", FLAG, False, _HERE),), edges=(),
          why={MCP: DISK, HTTP: DISK, PAGE: DISK}),
    _json(),
    _CORPUS,
), command="grep", tool="loom_grep", route="/grep",
   aliases={"case_sensitive": ("case", {True: "sensitive", False: "ignore"})})


GET = Operation("get", (
    Param("path", STRING, "A path as `loom files` shows it, or the file's path on disk; "
          "PATH:LINE or PATH:A-B as grep prints it.", required=True,
          cli=(Option((), "path", ARGUMENT, help="A path as `loom files` shows it, or the "
                      "file's path on disk; PATH:LINE or PATH:A-B as grep prints it."),),
          edges=(MCP, HTTP, PAGE)),
    Param("offset", INTEGER, "Start byte.", default=0, lo=0,
          cli=(Option(("--offset",), "offset", NUMBER, 0, "Start byte."),),
          edges=(MCP, HTTP, PAGE)),
    Param("length", INTEGER, "Bytes to read.", lo=0,
          cli=(Option(("--length",), "length", NUMBER, None, "Bytes to read."),),
          edges=(MCP, HTTP, PAGE)),
    Param("lines", STRING, "Lines A to B (A: to the end, :B from the start), numbered as "
          "grep numbers them; PATH:LINE and PATH:A-B work too.",
          cli=(Option(("--lines",), "lines", TEXT, None, "Lines A to B (A: to the end, :B "
                      "from the start), numbered as grep numbers them; PATH:LINE and "
                      "PATH:A-B work too."),), edges=(),
          why={MCP: "not offered yet: grep and search return byte offsets, which "
                    "offset reads from",
               HTTP: "not offered yet: grep and search return byte offsets, which "
                     "offset reads from",
               PAGE: "the page opens a file at a byte offset"}),
    _json(),
    _CORPUS,
), command="get", tool="loom_get_file", route="/file")


FILES = Operation("files", (
    _terminal("long", BOOLEAN, "Show kind, size and title.",
              Option(("--long", "-l"), "long", FLAG, False, "Show kind, size and title."),
              default=False, why="MCP and HTTP always answer every field"),
    _json(),
    _CORPUS,
), command="files", tool="loom_list_files", route="/files", method="GET")


STATUS = Operation("status", (
    Param("failed", BOOLEAN, "List the files that failed, with the reason.", default=False,
          cli=(Option(("--failed",), "failed", FLAG, False,
                      "List the files that failed, with the reason."),), edges=(),
          why={HTTP: "GET /status holds `failures` already",
               PAGE: "GET /status holds `failures` already", MCP: "no status tool"}),
    Param("skipped", BOOLEAN, "List the files skipped for holding no text, with the reason.",
          default=False,
          cli=(Option(("--skipped",), "skipped", FLAG, False, "List the files skipped for "
                      "holding no text, with the reason."),), edges=(),
          why={HTTP: "not offered yet", PAGE: "not offered yet", MCP: "no status tool"}),
    _json(),
    _CORPUS,
), command="status", route="/status", method="GET",
   why={MCP: "an agent needs the notes, not the index's housekeeping; loom_scan reports "
             "what changed"})


_TOP_K = "Files to send (default [ask] top_k, at most 50)."
_AGENT = "Let the model search, grep and read with loom's tools (default [ask] agent)."
ASK = Operation("ask", (
    Param("question", STRING, "The question, in any language.", required=True,
          cli=(Option((), "question", ARGUMENT, help="The question, in any language."),),
          edges=(MCP, HTTP, PAGE)),
    Param("top_k", INTEGER, _TOP_K, lo=1, hi=TOP_K_MAX,
          cli=(Option(("--top-k", "-k"), "top_k", NUMBER, None, _TOP_K),),
          why={PAGE: "the page asks with [ask] top_k"}),
    Param("mode", STRING, _MODE_HELP, default="auto", choices=SEARCH_MODES,
          cli=(Option(("--mode",), "mode", TEXT, None, _MODE_HELP),),
          why={PAGE: "the page asks with the server's default (auto)"}),
    Param("agent", BOOLEAN, _AGENT,
          cli=(Option(("--agent",), "agent", FLAG, None, _AGENT),
               Option(("--no-agent",), "agent", OFF, None)),
          edges=(MCP, HTTP, PAGE)),
    Param("conversation_id", STRING, "Continue the conversation ID (`loom conversations`).",
          cli=(Option(("--cid",), "cid", TEXT, None, "Continue the conversation ID (`loom "
                      "conversations`)."),),
          edges=(MCP, HTTP, PAGE)),
    Param("continue", BOOLEAN, "Continue the last conversation.", default=False,
          cli=(Option(("--continue", "-c"), "cont", FLAG, False,
                      "Continue the last conversation."),), edges=(),
          why={MCP: "a client holds the conversation_id it was given",
               HTTP: "a client holds the conversation_id it was given",
               PAGE: "the page holds the conversation_id it was given"}),
    Param("keep", BOOLEAN, "Keep this turn in the conversations file (default [ask] keep).",
          cli=(Option(("--keep",), "keep", FLAG, None, "Keep this turn in the "
                      "conversations file (default [ask] keep, true); --no-keep stores "
                      "nothing."), Option(("--no-keep",), "keep", OFF, None)), edges=(),
          why={MCP: "not offered yet: [ask] keep decides",
               HTTP: "not offered yet: [ask] keep decides",
               PAGE: "not offered yet: [ask] keep decides"}),
    Param("model", STRING, "The model for this question (default: [llm] model).",
          cli=(Option(("--model", "-m"), "model", TEXT, None,
                      "The model for this question (default: [llm] model)."),), edges=(),
          why={MCP: "not offered yet: the server's [llm] model answers",
               HTTP: "not offered yet: the server's [llm] model answers",
               PAGE: "not offered yet: the server's [llm] model answers"}),
    _terminal("show_context", BOOLEAN, "Print the context line and exactly what would be "
              "sent; call nothing.",
              Option(("--show-context",), "show_context", FLAG, False, "Print the context "
                     "line and exactly what would be sent; call nothing."), default=False,
              why="not offered yet: a debugging aid of the terminal"),
    _terminal("color", STRING, "Colour warnings, sources and agent steps: " + _COLOR,
              Option(("--color",), "color", TEXT, "auto", "Colour warnings, sources and "
                     "agent steps: " + _COLOR), default="auto"),
    _terminal("verbose", BOOLEAN, "Print the context line and each stage's time on stderr.",
              Option(("--verbose", "-v"), "verbose", FLAG, False, "Print the context line "
                     "and each stage's time on stderr."), default=False,
              why="MCP and HTTP answers always hold `context` and `timings`"),
    Param("stream", BOOLEAN, "Answer NDJSON lines as the LLM writes.", default=False,
          edges=(HTTP, PAGE), why={CLI: STREAM, MCP: STREAM}),
    _json(),
    _CORPUS,
), command="ask", tool="loom_ask", route="/ask")


SCAN = Operation("scan", (
    Param("dirs", STRINGS, "Folders to index (default: config notes_dirs, else the indexed "
          "roots).",
          cli=(Option((), "dirs", ARGUMENT, help="Folders to index (default: config "
                      "notes_dirs, else the indexed roots)."),), edges=(),
          why={MCP: SERVED, HTTP: SERVED, PAGE: SERVED}),
    Param("force", BOOLEAN, "Re-extract every file.", default=False,
          cli=(Option(("--force",), "force", FLAG, False, "Re-extract every file."),),
          edges=(MCP, HTTP, PAGE)),
    Param("rebuild", BOOLEAN, "Start a new index (the old one is kept as <index>.damaged).",
          default=False,
          cli=(Option(("--rebuild",), "rebuild", FLAG, False, "Start a new index (the old "
                      "one is kept as <index>.damaged)."),), edges=(),
          why={MCP: "replaces the index under a running server's readers: run it in a "
                    "terminal", HTTP: "replaces the index under a running server's "
                                      "readers: run it in a terminal",
               PAGE: "replaces the index under a running server's readers: run it in a "
                     "terminal"}),
    _terminal("verbose", BOOLEAN, "List every failed and skipped file, known ones too.",
              Option(("--verbose", "-v"), "verbose", FLAG, False,
                     "List every failed and skipped file, known ones too."), default=False,
              why="MCP and HTTP answers list every error and skip"),
    Param("stream", BOOLEAN, "Answer NDJSON progress lines, then the report.",
          default=False, edges=(HTTP, PAGE), why={CLI: STREAM, MCP: STREAM}),
    _json(),
    _CORPUS,
), command="scan", tool="loom_scan", route="/scan")


FORGET = Operation("forget", (
    Param("folder", STRING, "An indexed folder (path or root name).", required=True,
          cli=(Option((), "folder", ARGUMENT, help="An indexed folder (path or root "
                      "name)."),), edges=()),
), command="forget",
   why={MCP: "changes which folders are indexed: the user's choice, in a terminal",
        HTTP: "changes which folders are indexed: the user's choice, in a terminal",
        PAGE: "changes which folders are indexed: the user's choice, in a terminal"})

_TO = ("Where to copy the index: a postgresql:// url of an empty database, or the path "
       "of a new .db file.")
_MIGRATE_WHY = "moves the whole index to another backend: the user's choice, in a terminal"
MIGRATE = Operation("migrate", (
    Param("to", STRING, _TO, required=True,
          cli=(Option(("--to",), "to", TEXT, None, _TO),), edges=()),
    _json(),
), command="migrate", why={MCP: _MIGRATE_WHY, HTTP: _MIGRATE_WHY, PAGE: _MIGRATE_WHY})

_LINKS_MCP = ("not offered yet: an agent finds what a note names with loom_search and "
              "loom_grep")
LINKS = Operation("links", (
    Param("path", STRING, "A note's path as `loom files` shows it, or its path on disk.",
          required=True,
          cli=(Option((), "note", ARGUMENT, help="A note's path as `loom files` shows it, "
                      "or its path on disk."),), edges=(HTTP, PAGE)),
    _json(),
    _CORPUS,
), command="links", route="/links", why={MCP: _LINKS_MCP})

_EVAL_MODE = ("Measure only this mode: bm25 | semantic | hybrid | auto (default: every "
              "mode the index allows).")
_EVAL_ANSWERS = ("Also ask the configured LLM each question (plain and --agent) and check "
                 "each answer for the phrase and a citation.")
EVAL = Operation("eval", (
    Param("questions", STRING, "A TOML file of [[q]] entries: q (the question), targets "
          "(the files that answer it), answer (a phrase it holds, optional).",
          required=True,
          cli=(Option((), "questions", ARGUMENT, help="A TOML file of [[q]] entries: q "
                      "(the question), targets (the files that answer it), answer (a "
                      "phrase it holds, optional)."),), edges=()),
    Param("mode", STRING, _EVAL_MODE, choices=SEARCH_MODES,
          cli=(Option(("--mode",), "mode", TEXT, None, _EVAL_MODE),), edges=()),
    Param("answers", BOOLEAN, _EVAL_ANSWERS, default=False,
          cli=(Option(("--answers",), "answers", FLAG, False, _EVAL_ANSWERS),), edges=()),
    _json(),
), command="eval", why={MCP: "a measurement run by the user, on a file of the user's disk",
                        HTTP: "a measurement run by the user, on a file of the user's disk",
                        PAGE: "a measurement run by the user, on a file of the user's disk"})

PAGES = Operation("pages", (
    Param("path", STRING, "A path as loom_list_files shows it.", required=True,
          edges=(HTTP, PAGE), why={CLI: "no command: `loom get --json` holds the text",
                                   MCP: "no tool"}),
    _CORPUS,
), route="/pages", why={CLI: "the page's view of a document (where each page starts)",
                        MCP: "the page's view of a document (where each page starts)"})

TERMS = Operation("terms", (
    Param("text", STRING, "A query: its words as loom matches them, for highlighting.",
          default="", edges=(HTTP, PAGE), why={CLI: "no command", MCP: "no tool"}),
), route="/terms", why={CLI: "the page's highlighting", MCP: "the page's highlighting"})


OPERATIONS = {op.name: op for op in (SEARCH, GREP, GET, FILES, STATUS, ASK, SCAN, FORGET,
                                     MIGRATE, LINKS, EVAL, PAGES, TERMS)}


# -- made from the declaration ------------------------------------------------------------

def fast_options(op: Operation) -> dict[str, tuple[str, str]]:
    """The fast path's option table: each spelling -> (dest, kind)."""
    return {name: (o.dest, o.kind) for p in op.params for o in p.cli for name in o.names}


def fast_defaults(op: Operation) -> dict[str, Any]:
    """The fast path's defaults: each dest -> typer's default."""
    return {o.dest: o.default for p in op.params for o in p.cli
            if o.kind not in (ARGUMENT, OFF)}


def schema(op: Operation) -> dict[str, Any]:
    """The JSON schema of an MCP tool's arguments, as the MCP SDK writes it from the
    tool's signature (the arguments an agent's tool takes too)."""
    properties: dict[str, Any] = {}
    for p in op.on(MCP):
        properties[p.name] = _property(p)
    for alias in op.aliases:  # a boolean, null when not given
        properties[alias] = {"anyOf": [{"type": BOOLEAN}, {"type": "null"}], "default": None}
    return {"type": "object", "properties": properties,
            "required": [p.name for p in op.on(MCP) if p.required]}


def _property(p: Param) -> dict[str, Any]:
    single = {"type": "array", "items": {"type": "string"}} if p.kind == STRINGS else \
        {"type": p.kind}
    if p.required:
        return single
    if p.default is None:
        return {"anyOf": [single, {"type": "null"}], "default": None}
    out = {**single, "default": p.default}
    if p.choices:
        out["enum"] = list(p.choices)
    return out


def check(op: Operation, args: dict[str, Any], edge: str) -> dict[str, Any]:
    """A client's arguments for `op` on MCP or HTTP, checked against the declaration:
    names the edge does not offer, missing required ones, values of the wrong type or
    below their bound and values outside their choices are a QueryError naming the
    argument (the wording the operations use). Null is left out (the default). An alias
    (grep's case_sensitive) gives its parameter's value when the parameter itself is
    left out or at its default (MCP's SDK fills defaults in); both given and different
    is refused. Returns the arguments by their names; values past a parameter's `hi`
    are clamped by the operation."""
    from loomcli.errors import QueryError

    offered = {p.name: p for p in op.on(edge)}
    what, field = (op.tool, "argument") if edge == MCP else (op.name, "field")
    for name in args:
        if name not in offered and name not in op.aliases:
            raise QueryError(f"{what}: unknown {field} {_show(name)}",
                             f"{field}s are {', '.join([*offered, *op.aliases])}")
    out = {k: v for k, v in args.items() if v is not None and k in offered}
    for alias, (target, values) in op.aliases.items():
        value = args.get(alias)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise QueryError(f"{alias} must be true or false, got {_show(value)}")
        if out.get(target, offered[target].default) not in (offered[target].default,
                                                             values[value]):
            raise QueryError(f"{target} {out[target]!r} and {alias} {value} disagree",
                             f"give only {target} ({alias} is its older spelling)")
        out[target] = values[value]
    for p in offered.values():
        if p.required and out.get(p.name) in (None, ""):  # "" is missing on every edge
            raise QueryError(f"{what}: {p.name} is required")
        if p.name in out:
            _check_value(p, out[p.name])
    return out


def _check_value(p: Param, value: Any) -> None:
    from loomcli.errors import QueryError

    if p.kind == INTEGER:
        if isinstance(value, bool) or not isinstance(value, int):
            raise QueryError(f"{p.name} must be a whole number, got {_show(value)}")
        if p.lo is not None and value < p.lo:
            raise QueryError(f"{p.name} must be {p.lo} or more, got {value}",
                             f"give {p.lo} or more" + (f" (left out, it is {p.default})"
                                                       if p.default is not None else ""))
    elif p.kind == BOOLEAN:
        if not isinstance(value, bool):
            raise QueryError(f"{p.name} must be true or false, got {_show(value)}")
    elif p.kind == STRING:
        if not isinstance(value, str):
            raise QueryError(f"{p.name} must be a string")
        if p.choices and value not in p.choices:
            raise QueryError(f"{p.name} must be one of {', '.join(p.choices)}, got "
                             f"{_show(value)}")
    elif p.kind == STRINGS and not (isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value))):
        raise QueryError(f"{p.name} must be a string or a list of strings")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- docs/reference.md's tables -------------------------------------------------------------

def _cli_spelling(p: Param) -> str:
    if not p.cli:
        return ""
    if p.cli[0].kind == ARGUMENT:
        return p.cli[0].param.upper()
    return " ".join("/".join(f"`{n}`" for n in o.names) for o in p.cli)


def _default_shown(p: Param) -> str:
    if p.required:
        return "required"
    if p.default is None:
        return "—"
    if p.default == "":
        return '`""`'
    return f"`{str(p.default).lower() if isinstance(p.default, bool) else p.default}`"


_EDGE_NAMES = {CLI: "CLI", MCP: "MCP", HTTP: "HTTP", PAGE: "page"}


def table(op: Operation) -> str:
    """The parameter table of `op` for docs/reference.md: each parameter's JSON name,
    type, default, bounds, its CLI spelling, which of MCP, HTTP and the page offer it, and
    why an edge does not."""
    lines = ["| parameter | what | type | default | CLI | MCP | HTTP | page | not offered: why |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in op.params:
        kind = ("list of strings" if p.kind == STRINGS else
                " \\| ".join(p.choices) if p.choices else p.kind)
        bounds = (f" {p.lo}–{p.hi}" if p.hi is not None else
                  f" ≥ {p.lo}" if p.lo is not None else "")
        marks = ["yes" if p.offered(e) and op.offered(e) else "" for e in (MCP, HTTP, PAGE)]
        grouped: dict[str, list[str]] = {}
        for e, r in p.why.items():
            if op.offered(e):
                grouped.setdefault(r.replace("|", "\\|"), []).append(_EDGE_NAMES[e])
        why = "; ".join(f"{', '.join(es)}: {r}" for r, es in grouped.items())
        what = p.help.replace("|", "\\|")
        lines.append(f"| `{p.name}` | {what} | {kind}{bounds} | {_default_shown(p)} | "
                     f"{_cli_spelling(p)} | {' | '.join(marks)} | {why} |")
    where = [f"CLI `loom {op.command}`" if op.command else "",
             f"MCP `{op.tool}`" if op.tool else "",
             f"HTTP `{op.method} {op.route}`" if op.route else ""]
    head = f"**{op.name}** — " + ", ".join(w for w in where if w)
    absent = "; ".join(f"no {_EDGE_NAMES[e]}: {r}" for e, r in op.why.items() if e != PAGE)
    aliases = "".join(f"\n`{alias}` (MCP, HTTP): the older spelling of `{target}`, "
                      + ", ".join(f"`{str(k).lower()}` is `{v}`" for k, v in values.items())
                      + f"; used when `{target}` is left out.\n"
                      for alias, (target, values) in op.aliases.items())
    return (head + (f" ({absent})" if absent else "") + "\n\n" + "\n".join(lines) + "\n"
            + aliases)


def tables() -> str:
    """Every operation's table, as docs/reference.md holds them."""
    return "\n".join(table(op) for op in OPERATIONS.values())


def fast_source() -> str:
    """The fast path's tables as fastpath.py writes them out (`--fast`)."""
    kinds = {FLAG: "FLAG", OFF: "OFF", TEXT: "TEXT", NUMBER: "NUMBER", COUNT: "COUNT",
             MANY: "MANY"}
    out = []
    for op in (GREP, SEARCH, GET, SCAN):
        name = op.name.upper()
        out.append(f"_{name}_OPTIONS = {{")
        out += [f"    {n!r}: ({d!r}, {kinds[k]})," for n, (d, k) in fast_options(op).items()]
        out.append("}")
        out.append(f"_{name}_DEFAULTS = {fast_defaults(op)!r}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # the tables for docs/reference.md; --fast: fastpath.py's
    import sys

    sys.stdout.write(fast_source() if sys.argv[1:] == ["--fast"] else tables())
