"""The `loom` command: parse options, make one library call, render the result.

Data goes to stdout, everything else (errors, progress) to stderr. Heavy modules are
imported inside the commands that need them, so `loom --help` starts fast.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from loomcli import __version__, console, reading
from loomcli.console import err as _err
from loomcli.console import out as _out
from loomcli.console import print_json as _print_json
from loomcli.console import shown as _shown
from loomcli.errors import Exit, LoomError

if TYPE_CHECKING:
    from loomcli.operations import Corpus

app = typer.Typer(
    name="loom",
    help="Turn a folder of notes and PDFs into a local, searchable memory.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,  # never print locals: they can hold API keys
    rich_markup_mode=None,  # plain help: rendering it with rich costs ~80 ms of start-up
    context_settings={"help_option_names": ["-h", "--help"]},
)
config_app = typer.Typer(help="Show or change config.toml.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(config_app, name="config")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (stable keys).")]
ModeOpt = Annotated[str | None, typer.Option(
    "--mode", help="auto (hybrid when embeddings are on, else bm25) | bm25 | semantic | "
    "hybrid.", show_default=False)]


class State:
    config_override: str | None = None


def _version(value: bool) -> None:
    if value:
        _out(f"loom {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    config: Annotated[str | None, typer.Option(
        "--config", metavar="PATH", help="Config file (default: $LOOM_CONFIG or "
        "$LOOM_HOME/config.toml).")] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    State.config_override = config


# -- helpers ---------------------------------------------------------------------------

def _corpus() -> Corpus:
    """The configured corpus; the config's warnings (unknown keys) go to stderr once."""
    return console.corpus(State.config_override)


# -- commands --------------------------------------------------------------------------

@app.command()
def init(
    force: Annotated[bool, typer.Option(
        "--force", help="Add the starter keys missing from an existing config (keeps "
        "every key, value and comment you have).")] = False,
) -> None:
    """Write a starting config.toml (not needed for `loom scan DIR`)."""
    from loomcli import config

    path, added = config.init(State.config_override, force=force)
    if added is None:
        _out(f"wrote {path}")
    else:
        _out(f"{path}: added {', '.join(added) if added else 'nothing (complete)'}")


@config_app.command("path")
def config_path() -> None:
    """Print where the config file is (or would be)."""
    from loomcli import paths

    _out(str(paths.config_path(State.config_override)))


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@config_app.command("get")
def config_get(key: Annotated[str, typer.Argument(help="Dotted key, e.g. ask.top_k")]) -> None:
    """Print one key's value (its default when unset)."""
    from loomcli.operations import setting

    got = setting(_corpus().config, key)
    if got.value is None:
        raise LoomError(f"{key} is not set and has no default",
                        f"set it: loom config set {key} VALUE")
    _out(_value(got.value))


@config_app.command("list")
def config_list(as_json: JsonOpt = False) -> None:
    """Every key with its value and where it comes from (the file, or loom's default)."""
    corpus = _corpus()
    items = corpus.settings()
    if as_json:
        _print_json({"path": str(corpus.config.path), "exists": corpus.config.exists,
                     "settings": [i.to_dict() for i in items]})
        return
    for i in items:
        shown = "" if i.value is None else json.dumps(i.value, ensure_ascii=False)
        _out(f"{i.key} = {shown}".ljust(44) + f"  ({i.origin})" if shown
             else f"{i.key}".ljust(44) + "  (unset)")


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="Dotted key, e.g. llm.model")],
    value: Annotated[str, typer.Argument(help="A TOML value (5, true, [\"a\"]) or text")],
) -> None:
    """Set one key, keeping every other key and comment of the file as it was."""
    from loomcli import config

    config.check_key(key)
    cfg = _corpus().config
    parsed = config.coerce(key, config.parse_value(value))
    cfg.set(key, parsed)
    _out(f"{key} = {json.dumps(parsed, ensure_ascii=False)}  ({cfg.path})")


@config_app.command("unset")
def config_unset(
    key: Annotated[str, typer.Argument(help="Dotted key, e.g. llm.endpoint")],
) -> None:
    """Remove one key from the file (it takes its default), keeping every other key and
    comment as it was."""
    from loomcli import config

    config.check_key(key)
    cfg = _corpus().config
    old = cfg.unset(key)
    if old is None:
        _out(f"{key} was not set in {cfg.path}; nothing changed")
        return
    _out(f"unset {key} (was {json.dumps(old, ensure_ascii=False)})  ({cfg.path})")


@app.command()
def scan(
    dirs: Annotated[list[Path] | None, typer.Argument(
        help="Folders to index (default: config notes_dirs, else the indexed roots).",
        show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-extract every file.")] = False,
    rebuild: Annotated[bool, typer.Option(
        "--rebuild", help="Start a new index (the old one is kept as <index>.damaged).")
    ] = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="List every failed and skipped file, known ones too.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Index folders of notes and PDFs (incremental)."""
    from loomcli import scanning

    raise typer.Exit(scanning.scan(State.config_override, dirs or [], force, rebuild, verbose,
                                   as_json))


@app.command()
def forget(
    folder: Annotated[str, typer.Argument(help="An indexed folder (path or root name).")],
) -> None:
    """Drop a folder and everything indexed under it from the index (files stay on disk)."""
    removed = _corpus().forget(folder)
    _out(f"forgot {folder}: removed {removed} files from the index")


@app.command()
def migrate(
    to: Annotated[str, typer.Option(
        "--to", help="Where to copy the index: a postgresql:// url of an empty database, "
        "or the path of a new .db file.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Copy the index into PostgreSQL or a new SQLite file, without reading a file again
    (this index is left as it is; into PostgreSQL, the conversations go along)."""
    done = _corpus().migrate(to, lambda line: _err(f"migrate: {line}"))
    if as_json:
        _print_json(done.to_dict())
        return
    _out(f"copied {done.files} files ({done.failed} failed, {done.skipped} skipped, "
         f"{done.vectors} with vectors) from {done.roots} folders into {_shown(done.to)}"
         + (f", and {done.conversations} conversations" if done.conversations else ""))


@app.command()
def search(
    query: Annotated[list[str], typer.Argument(help="Words to look for (any text).")],
    limit: Annotated[int | None, typer.Option(
        "--limit", help="Most hits to show (default 10, at most 500).",
        show_default=False)] = None,
    mode: ModeOpt = None,
    path: Annotated[str | None, typer.Option(
        "--path", help="Search only this file, or the files of this folder.")] = None,
    glob: Annotated[list[str] | None, typer.Option(
        "--glob", "-g", help="Only files whose path matches (gitignore-style glob; "
        "repeatable; !GLOB excludes), as grep.")] = None,
    here: Annotated[bool, typer.Option(
        "--here", help="Only files under the current folder (inside an indexed one).")
                    ] = False,
    tag: Annotated[list[str] | None, typer.Option(
        "--tag", help="Only notes with this tag (#tag in a note or its front matter; "
        "nested tags count; repeatable: every one).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Rank files by relevance to the query (BM25, and meaning when embeddings are on).
    "a phrase" in quotes matches those words side by side; #tag keeps notes so tagged."""
    raise typer.Exit(reading.search(State.config_override, query, limit, mode, path, glob,
                                    here, as_json, tag))


@app.command("files")
def files_cmd(
    long: Annotated[bool, typer.Option("--long", "-l", help="Show kind, size and title.")
                    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the indexed files."""
    result = _corpus().files()
    if as_json:
        _print_json(result.to_dict())
        return
    for f in result.files:
        if long:
            _out(f"{f.kind:<4} {f.content_len:>9}  {_shown(f.path)}  {f.title}")
        else:
            _out(_shown(f.path))


@app.command()
def status(
    failed: Annotated[bool, typer.Option(
        "--failed", help="List the files that failed, with the reason.")] = False,
    skipped: Annotated[bool, typer.Option(
        "--skipped", help="List the files skipped for holding no text, with the reason.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show where config and index live, the roots, counts and the last scan."""
    if failed or skipped:
        corpus = _corpus()
        key, field = ("errors", "error") if failed else ("skips", "reason")
        rows = corpus.problems("failed" if failed else "skipped")
        if as_json:
            _print_json({key: [{"path": p, field: why} for p, why in rows]})
        for p, why in rows if not as_json else ():
            _out(f"{_shown(p)}: {why}")
        return
    st = _corpus().status()
    data = st.to_dict()
    if as_json:
        _print_json(data)
        return
    _out(f"config: {st.config}{'' if st.config_exists else ' (none; defaults in use)'}")
    index_size = console.size(data["index_bytes"]) if st.index_exists else "none yet"
    _out(f"index:  {st.store} ({index_size})")
    for r in st.replicas:
        _out(f"replica: {r['url']}: " + (f"down ({r['error']})" if not r["up"] else
                                          "up, not a standby" if not r["in_recovery"] else
                                          f"lag {_lag(r)}"))
    for r in data["roots"]:
        _out(f"root:   {r['name']} = {r['path']}")
    _out(f"files:  {data['files']} ({console.count(data['notes'], 'note')}, "
         f"{console.count(data['pdfs'], 'PDF')}, "
         f"{console.count(data['documents'], 'other document')}), "
         f"{data['failed']} failed, {data['skipped']} skipped (no text), "
         f"{console.size(data['text_bytes'])} of text")
    _out("engines: " + ", ".join(f"{kind} {name}" for kind, name in st.engines.items()))
    v = data["vectors"]
    if v["enabled"] or v["files"] or v["stale"]:
        line = f"vectors: {v['files']} files by {v['model']}"
        if v["pending"]:
            line += f", {v['pending']} waiting (next scan)"
        if v["stale"]:
            line += f", {v['stale']} by another model (stale: the next scan replaces them)"
        if v.get("ranked_by") == "pgvector":
            line += ", ranked by pgvector in the database"
        _out(line + ("" if v["enabled"] else " — embeddings are off"))
    g = data["grep_index"]
    if g["pending"]:
        _out(f"grep index: {g['pending']} files to add "
             + ("(being built now)" if g["building"] else "(by the next scan)")
             + "; grep reads them directly meanwhile")
    last = data["last_scan"]
    if last:
        import datetime as dt

        when = dt.datetime.fromtimestamp(last["finished_at"]).isoformat(" ", "seconds")
        from loomcli.index.indexer import counts

        _out(f"last scan: {when}: {counts(last['report'] or {})}")
    elif not data["roots"]:
        _out("no index yet: run `loom scan DIR`")


def _lag(replica: dict[str, Any]) -> str:
    """A replica's lag as people read it: `0 s`, `2.4 s (1.2 MB of WAL to replay)`."""
    seconds = "unknown" if replica["lag_s"] is None else f"{replica['lag_s']:g} s"
    if replica["lag_bytes"]:
        return f"{seconds} ({console.size(replica['lag_bytes'])} of WAL to replay)"
    return seconds


@app.command()
def get(
    path: Annotated[str, typer.Argument(help="A path as `loom files` shows it, or the "
                                        "file's path on disk; PATH:LINE or PATH:A-B as "
                                        "grep prints it.")],
    offset: Annotated[int, typer.Option("--offset", help="Start byte.")] = 0,
    length: Annotated[int | None, typer.Option("--length", help="Bytes to read.")] = None,
    lines: Annotated[str | None, typer.Option(
        "--lines", metavar="A:B", help="Lines A to B (A: to the end, :B from the start), "
        "numbered as grep numbers them; PATH:LINE and PATH:A-B work too.",
        show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a file's extracted text, a byte range of it, or some of its lines."""
    raise typer.Exit(reading.get(State.config_override, path, offset, length, as_json,
                                 lines))


@app.command()
def links(
    note: Annotated[str, typer.Argument(help="A note's path as `loom files` shows it, or "
                                        "its path on disk.")],
    as_json: JsonOpt = False,
) -> None:
    """List a note's [[wikilinks]] (resolved to files, or not found) and its backlinks."""
    corpus = _corpus()
    found = corpus.links(corpus.index_path_of(note))
    if as_json:
        _print_json(found.to_dict())
        return
    _out(f"{_shown(found.path)}  {found.title}")
    if found.tags:
        _out("tags: " + " ".join(f"#{t}" for t in found.tags))
    _out(f"links ({len(found.links)}):")
    for link in found.links:
        shown = link["target"] + (f"#{link['heading']}" if link["heading"] else "")
        where = _shown(link["path"]) if link["path"] else "(no such note)"
        if link["target"].startswith((".", "/")):  # a Markdown link, as written
            shown = f"[{link['alias'] or ''}]({shown})"
        else:
            shown = f"[[{shown}]]"
        _out(f"  {link['line']}: {shown} -> {where}")
    _out(f"backlinks ({len(found.backlinks)}):")
    for back in found.backlinks:
        _out(f"  {_shown(back['path'])}:{back['line']}  {back['title']}")


def _case_flag(case: str) -> Any:
    """-i, -s and -S: the last one given wins, as in ripgrep (click runs the callbacks of
    the options given in command-line order)."""
    def record(ctx: typer.Context, value: bool) -> bool:
        if value:
            ctx.meta["loom_case"] = case
        return value
    return record


@app.command()
def grep(
    ctx: typer.Context,
    pattern: Annotated[str | None, typer.Argument(
        help="An RE2 regular expression (with -F, a plain string); or give -e.",
        show_default=False)] = None,
    regexp: Annotated[list[str] | None, typer.Option(
        "--regexp", "-e", metavar="PATTERN", help="A pattern (repeatable: lines matching "
        "any of them); instead of PATTERN.", show_default=False)] = None,
    path: Annotated[str | None, typer.Option(
        "--path", help="Search only this file (as `loom files` shows it, or its path on "
        "disk).")] = None,
    glob: Annotated[list[str] | None, typer.Option(
        "--glob", "-g", help="Only files whose path matches (gitignore-style glob; "
        "!GLOB excludes). Repeatable.")] = None,
    ignore_case: Annotated[bool, typer.Option(
        "--ignore-case", "-i", callback=_case_flag("ignore"),
        help="Ignore case.")] = False,
    case_sensitive: Annotated[bool, typer.Option(
        "--case-sensitive", "-s", callback=_case_flag("sensitive"),
        help="Match case exactly.")] = False,
    smart_case: Annotated[bool, typer.Option(
        "--smart-case", "-S", callback=_case_flag("smart"),
        help="Ignore case unless the pattern has an upper-case letter (the default).")
    ] = False,
    fixed: Annotated[bool, typer.Option(
        "--fixed-strings", "-F", help="The pattern is a plain string, not a regex.")
    ] = False,
    word: Annotated[bool, typer.Option(
        "--word-regexp", "-w", help="Only matches that are whole words.")] = False,
    files_with_matches: Annotated[bool, typer.Option(
        "--files-with-matches", "-l", help="Print only the paths of files with a match.")
    ] = False,
    count: Annotated[bool, typer.Option(
        "--count", "-c", help="Print path:N, the matching lines of each file.")] = False,
    only_matching: Annotated[bool, typer.Option(
        "--only-matching", "-o", help="Print each match on its own line (its own offset).")
    ] = False,
    after: Annotated[int | None, typer.Option(
        "--after-context", "-A", metavar="N", help="Lines after each match (at most 50).",
        show_default=False)] = None,
    before: Annotated[int | None, typer.Option(
        "--before-context", "-B", metavar="N", help="Lines before each match (at most 50).",
        show_default=False)] = None,
    context: Annotated[int | None, typer.Option(
        "--context", "-C", metavar="N", help="Lines before and after each match (at most "
        "50).", show_default=False)] = None,
    max_count: Annotated[int | None, typer.Option(
        "--max-count", "-m", metavar="N", help="At most N matching lines per file.",
        show_default=False)] = None,
    color: Annotated[str, typer.Option(
        "--color", metavar="WHEN", help="auto (on a terminal, unless NO_COLOR is set) | "
        "always | never.")] = "auto",
    heading: Annotated[bool | None, typer.Option(
        "--heading/--no-heading", help="Each file's path on a line above its matches "
        "(default: on a terminal).", show_default=False)] = None,
    line_number: Annotated[bool, typer.Option(
        "--line-number", "-n", help="Show line numbers (the default).")] = False,
    no_line_number: Annotated[bool, typer.Option(
        "--no-line-number", "-N", help="Leave line numbers out (path:offset:text).")
    ] = False,
    invert: Annotated[bool, typer.Option(
        "--invert-match", "-v", help="Print the lines that do not match (their offset is "
        "the line's).")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print nothing; exit 0 at the first match, else 1.")] = False,
    types: Annotated[list[str] | None, typer.Option(
        "--type", "-t", metavar="TYPE", help="Only files of this ripgrep type: md, txt, "
        "rst, org, asciidoc, pdf, html, docx, odt, pptx, epub. Repeatable.",
        show_default=False)] = None,
    types_not: Annotated[list[str] | None, typer.Option(
        "--type-not", "-T", metavar="TYPE", help="No files of this type. Repeatable.",
        show_default=False)] = None,
    files_without_match: Annotated[bool, typer.Option(
        "--files-without-match", help="Print only the paths of files without a match.")
    ] = False,
    multiline: Annotated[bool, typer.Option(
        "--multiline", "-U", help="Let a match span lines (\\n in the pattern); each of its "
        "lines is printed.")] = False,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Stop after N matching lines in all (default: no limit).",
        show_default=False)] = None,
    here: Annotated[bool, typer.Option(
        "--here", help="Only files under the current folder (inside an indexed one).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find exact strings and patterns (RE2), ripgrep's flags: path, line, byte offset of
    the match, page."""
    if color not in reading.COLORS:
        raise typer.BadParameter(f"{color!r} is not one of auto, always, never",
                                 param_hint="'--color'")
    if pattern is None and not regexp:
        from loomcli.compat import click_exceptions

        # as click says it of any missing argument (-e makes PATTERN optional to click)
        raise click_exceptions().MissingParameter(param_hint="'pattern'", param_type="argument")
    raise typer.Exit(reading.grep(
        State.config_override, pattern, path=path, glob=glob, case=ctx.meta.get("loom_case"),
        fixed=fixed, word=word, files_with_matches=files_with_matches, count=count,
        only_matching=only_matching, after=after, before=before, context=context,
        max_count=max_count, color_when=color, heading=heading, limit=limit, here=here,
        as_json=as_json, regexp=regexp, invert=invert, quiet=quiet,
        line_number=not no_line_number, types=types, types_not=types_not,
        files_without_match=files_without_match, multiline=multiline))


AgentOpt = Annotated[bool | None, typer.Option(
    "--agent/--no-agent", help="Let the model search, grep and read with loom's tools "
    "(default [ask] agent).", show_default=False)]
ContinueOpt = Annotated[bool, typer.Option(
    "--continue", "-c", help="Continue the last conversation.")]
CidOpt = Annotated[str | None, typer.Option(
    "--cid", metavar="ID", help="Continue the conversation ID (`loom conversations`).",
    show_default=False)]
KeepOpt = Annotated[bool | None, typer.Option(
    "--keep/--no-keep", help="Keep this turn in the conversations file (default [ask] "
    "keep, true); --no-keep stores nothing.", show_default=False)]
TopKOpt = Annotated[int | None, typer.Option(
    "--top-k", "-k", help="Files to send (default [ask] top_k, at most 50).",
    show_default=False)]


ColorOpt = Annotated[str, typer.Option(
    "--color", metavar="WHEN", help="Colour warnings, sources and agent steps: auto (on a "
    "terminal, unless NO_COLOR is set) | always | never.")]


def _color_when(color: str) -> str:
    if color not in reading.COLORS:
        raise typer.BadParameter(f"{color!r} is not one of auto, always, never",
                                 param_hint="'--color'")
    return color


@app.command()
def ask(
    question: Annotated[list[str], typer.Argument(help="The question, in any language.")],
    top_k: TopKOpt = None,
    show_context: Annotated[bool, typer.Option(
        "--show-context", help="Print the context line and exactly what would be sent; "
        "call nothing.")] = False,
    mode: ModeOpt = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="The model for this question (default: [llm] model).",
        show_default=False)] = None,
    agent: AgentOpt = None,
    cont: ContinueOpt = False,
    cid: CidOpt = None,
    keep: KeepOpt = None,
    color: ColorOpt = "auto",
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Print the context line and each stage's time on stderr.")
    ] = False,
) -> None:
    """Answer a question from your notes with your LLM, citing the files it used."""
    when = _color_when(color)
    corpus = _corpus()
    text = console.utf8(" ".join(question)).strip()
    if not text:
        raise LoomError("the question is empty", 'ask something: loom ask "…"')
    conversation = corpus.conversation_for(cid, cont)
    if show_context:
        if corpus.agent_on(agent):
            _out(corpus.agent_request(text, conversation_id=conversation), end="")
            return
        prompt = corpus.prompt(text, top_k, mode, conversation_id=conversation)
        for warning in prompt.warnings if prompt else ():
            _err(f"warning: {warning}")
        if prompt is None:
            _err("no indexed file matches the question; nothing would be sent")
            raise typer.Exit(1)
        _out(prompt.header_line())
        _out(prompt.render(), end="")
        return
    asked = Asking(corpus, top_k, mode, agent, keep, when, verbose, model)
    result = asked(text, conversation, as_json)
    if result is None or result.not_kept:
        raise typer.Exit(1)


class Asking:
    """One `loom ask` (or one question of `loom chat`) on a terminal or a pipe: a status
    line on stderr until the first token (a terminal only), `-v` details on lines of their
    own before the answer, the answer streamed, then its sources as `path@offset` that
    `loom get` opens; warnings, sources and agent steps coloured per --color."""

    def __init__(self, corpus: Corpus, top_k: int | None, mode: str | None,
                 agent: bool | None, keep: bool | None, color: str, verbose: bool,
                 model: str | None = None) -> None:
        self.corpus, self.top_k, self.mode, self.agent = corpus, top_k, mode, agent
        self.keep, self.verbose, self.model = keep, verbose, model
        self.tint_err = console.color(color, sys.stderr)
        self.tint_out = console.color(color, sys.stdout)
        self.status = console.Status()

    def warn(self, message: str) -> None:
        line = console.paint(f"warning: {console.safe(message)}", console.WARNING,
                             self.tint_err)
        self.status.above("loom: " + line)

    def progress(self, line: str) -> None:
        self.status.above(console.safe(line))

    def step(self, step: Any) -> None:
        self.status.above(console.paint(step.line(), console.STEP, self.tint_err))
        self.status.show(f"{self.model_name}: thinking…")

    def sending(self, prompt: Any, model: str) -> None:
        self.model_name = model
        if prompt is None:
            self.status.show(f"asking {model} with loom's tools…")
            return
        if self.verbose:
            context = prompt.header_line().removeprefix("[context] ")
            self.status.above(f"loom: context: {context}")
            if prompt.timings:
                self.status.above("loom: timings: " + _timings(prompt.timings))
        files = len(prompt.used)
        self.status.show(f"sending {files} file{'s' if files != 1 else ''}, "
                         f"{prompt.prompt_tokens:,} tokens, to {model}…")

    def __call__(self, text: str, conversation: str | None, as_json: bool) -> Any:
        """Ask; the Answer (None: nothing matched, said on stderr)."""
        self.model_name = self.model or "the model"
        streamed: list[str] = []

        def stream(piece: str) -> None:
            if not streamed:
                self.status.clear()
            streamed.append(piece)
            _out(console.safe(piece, lines=True), end="")  # the model's: no escape sequences

        self.status.show("searching your notes…")
        try:
            result = self.corpus.ask(
                text, self.top_k, on_text=None if as_json else stream, mode=self.mode,
                on_warning=self.warn, agent=self.agent, conversation_id=conversation,
                on_step=self.step, model=self.model, keep=self.keep,
                on_sending=self.sending, on_progress=self.progress)
        finally:
            self.status.clear()
        if not result.used and not result.steps and not result.answer:
            _err("no indexed file matches the question; nothing was sent to the LLM")
            return None
        if self.verbose:
            late = {k: v for k, v in result.timings.items()
                    if k not in ("retrieve_ms", "excerpts_ms")}
            if streamed and not streamed[-1].endswith("\n"):
                _out("")
                streamed.append("\n")
            if late:
                sys.stderr.write("loom: timings: " + _timings(late) + "\n")
        if as_json:
            _print_json(result.to_dict())
        else:
            self.sources(result)
        if result.not_kept:
            sys.stderr.write("loom: " + console.paint(result.not_kept, console.WARNING,
                                                      self.tint_err) + "\n")
        return result

    def sources(self, result: Any) -> None:
        by_path = {u.path: u for u in result.used}
        lines = [""]
        lines += [console.paint(f"unverified quote: \"{console.safe(_shorten(q.text))}\"",
                                console.WARNING,
                                self.tint_out) for q in result.quotes if not q.verified]
        lines += ["", "Sources:"]
        if result.citations:
            for p in result.citations:
                sent = by_path.get(p)  # None: cited from an earlier turn of the conversation
                lines.append("  " + console.paint(_where(sent, result.quotes) if sent
                                                  else _shown(p),
                                                  console.SOURCE, self.tint_out)
                             + (f"  {console.safe(sent.title)}" if sent
                                else "  (earlier in the conversation)"))
        elif result.used:
            lines.append("  (none cited) sent: " + ", ".join(_where(u) for u in result.used))
        else:
            lines.append("  (none cited)")
        _out("\n".join(lines))


def _where(used: Any, quotes: list[Any] | None = None) -> str:
    """A sent file as `loom get` opens it at its passage, `path@offset`, with the pages
    that were sent of a paged file (`manual.pdf@48213 pp. 40-41`)."""
    from loomcli.ask import page_label

    where = _shown(used.path)
    offset = passage_offset(used, quotes or [])
    pages = page_label(used.pages)
    return (where if offset is None else f"{where}@{offset}") + (f" {pages}" if pages else "")


def passage_offset(used: Any, quotes: list[Any]) -> int | None:
    """Where a source's passage starts: the first quote of it the answer made that was
    verified, else the window sent after the file's head, else its first span."""
    for q in quotes:
        if q.verified and q.path == used.path and q.offset is not None:
            return int(q.offset)
    spans = used.byte_spans
    if not spans:
        return None
    return int(spans[1][0] if len(spans) > 1 else spans[0][0])


def _timings(timings: dict[str, float]) -> str:
    return ", ".join(f"{k.removesuffix('_ms')} {v:,.0f} ms" for k, v in timings.items())


@app.command()
def chat(
    top_k: TopKOpt = None,
    mode: ModeOpt = None,
    agent: AgentOpt = None,
    cont: ContinueOpt = False,
    cid: CidOpt = None,
    keep: KeepOpt = None,
    color: ColorOpt = "auto",
) -> None:
    """Ask in a loop, each question a follow-up of the last (`exit` or Ctrl-D ends; Ctrl-C
    stops the answer being written). On a terminal, lines can be edited and the history
    (Up, Ctrl-R) is kept in the loom home."""
    when = _color_when(color)
    corpus = _corpus()
    conversation = corpus.conversation_for(cid, cont)
    asked = Asking(corpus, top_k, mode, agent, keep, when, False)
    lines = console.Prompt("> ", console.history_path()) if sys.stdin.isatty() else None
    if lines is not None:
        _err("chatting with your notes; type exit or press Ctrl-D to end, Ctrl-C stops "
             "an answer")
    try:
        while True:
            if lines is not None:
                line = lines.read()
            else:  # piped questions: bytes that are not UTF-8 become U+FFFD
                line = sys.stdin.buffer.readline().decode("utf-8", "replace")
            if line is None or line == "":  # Ctrl-D, or the end of piped questions
                break
            text = console.utf8(line).strip()
            if text in ("exit", "quit"):
                break
            if not text:
                continue
            try:
                result = asked(text, conversation, False)
            except KeyboardInterrupt:
                if lines is None:
                    raise
                # The turn is written only once its answer is complete: a stopped
                # answer is not kept, and the conversation goes on from its last turn.
                _out("")
                _err("answer stopped (not kept)")
                continue
            if result is not None and result.conversation_id:
                conversation = result.conversation_id
            _out("")
    finally:
        if lines is not None:
            lines.close()


conversations_app = typer.Typer(rich_markup_mode=None)
app.add_typer(conversations_app, name="conversations")


@conversations_app.callback(invoke_without_command=True)
def conversations_cmd(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Option(
        "--limit", help="How many to list (default 20, at most 1000).",
        show_default=False)] = None,
    clear: Annotated[bool, typer.Option(
        "--clear", help="Delete every kept conversation of this corpus.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the kept conversations, newest first (continue one with `loom ask --cid ID`;
    `loom conversations rm ID` deletes one, `--clear` all)."""
    import time

    if ctx.invoked_subcommand is not None:
        return
    corpus = _corpus()
    if clear:
        n = corpus.clear_conversations()
        if as_json:
            _print_json({"removed": n})
        else:
            _out(f"removed {n} conversation{'s' if n != 1 else ''} "
                 f"({corpus.conversations_where})")
        return
    found = corpus.conversations(limit)
    if as_json:
        _print_json({"conversations": [c.to_dict() for c in found]})
        return
    for c in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        _out(f"{c.id}  {when}  {console.count(len(c.turns), 'turn'):>9}  {_shown(c.title)}")


@conversations_app.command("rm")
def conversations_rm(
    ids: Annotated[list[str], typer.Argument(help="Conversation ids (`loom conversations`).",
                                             metavar="ID...")],
) -> None:
    """Delete kept conversations and every turn of them."""
    corpus = _corpus()
    for cid in ids:
        corpus.remove_conversation(cid)
        _out(f"removed {cid}")


def _shorten(text: str, chars: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[:chars - 1] + "…"


@app.command("eval")
def eval_cmd(
    questions: Annotated[Path, typer.Argument(
        help="A TOML file of [[q]] entries: q (the question), targets (the files that "
        "answer it), answer (a phrase it holds, optional).")],
    mode: Annotated[str | None, typer.Option(
        "--mode", help="Measure only this mode: bm25 | semantic | hybrid | auto (default: "
        "every mode the index allows).", show_default=False)] = None,
    answers: Annotated[bool, typer.Option(
        "--answers", help="Also ask the configured LLM each question (plain and --agent) "
        "and check each answer for the phrase and a citation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure search and ask on your own questions: recall@1/5/10, MRR, what ask sends."""
    from loomcli import evaluate

    def progress(stage: str, i: int) -> None:
        sys.stderr.write(f"\rloom eval: {stage} {i + 1}\x1b[K")
        sys.stderr.flush()

    report = evaluate.evaluate(_corpus(), questions, mode, answers,
                               on_question=progress if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
    for warning in report.warnings:
        _err(f"warning: {warning}")
    if as_json:
        _print_json(report.to_dict())
    else:
        _out(evaluate.render(report))


@app.command()
def mcp() -> None:
    """Serve loom's tools to an agent over MCP on stdio (Claude Desktop, Claude Code, Codex)."""
    from loomcli import mcp_server

    _corpus()  # a broken config fails here, in the terminal, not inside the agent
    mcp_server.run(State.config_override)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port (0: any free port).")] = 8080,
    corpus_root: Annotated[Path | None, typer.Option(
        "--corpus-root", help="Serve several corpora: DIR/<name>/notes, each its own index.")
    ] = None,
    processes: Annotated[int | None, typer.Option(
        "--processes", min=1, max=64, help="Server processes sharing the port (default: "
        "one per core, at most 4).", show_default=False)] = None,
    open_page: Annotated[bool, typer.Option(
        "--open", help="Open the web page in the default browser.")] = False,
) -> None:
    """Serve loom's operations as JSON over HTTP, and a web page at /."""
    from loomcli import config, http_server

    _corpus()  # a broken config fails here, at start; its warnings are shown once
    http_server.serve(lambda: config.load(State.config_override), host, port, corpus_root,
                      processes, open_page=open_page)


@app.command()
def watch(
    dirs: Annotated[list[Path] | None, typer.Argument(
        help="Folders to keep indexed (default: config notes_dirs, else the indexed roots).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines on stdout.")] = False,
) -> None:
    """Scan, then keep the index current as files change (Ctrl-C to stop)."""
    from loomcli import config
    from loomcli import watch as watch_mod

    def emit(event: dict[str, Any]) -> None:
        if event["change"] == "failed":
            _err(f"failed: {_shown(event['path'])}: {event['error']}")
        if as_json:
            line = json.dumps(event, ensure_ascii=False)
        elif event["change"] == "scanned":
            r = event["report"]
            from loomcli.index.indexer import counts

            n = event["roots"]
            line = (f"scanned: {counts(r)}; watching {console.count(n, 'folder')}, "
                    "Ctrl-C to stop")
        elif event["change"] == "moved":
            line = f"moved {_shown(event['from'])} -> {_shown(event['path'])}"
        elif event["change"] == "failed":
            return
        else:
            line = f"{event['change']} {_shown(event['path'])}"
        _out(line)

    _corpus()  # a broken config fails here; its warnings are shown once
    watch_mod.watch(lambda: config.load(State.config_override), dirs or [], emit, _err)


# -- entry point -----------------------------------------------------------------------

def _usage_line(exc: Any) -> str:
    """click's usage error as loom's one line: what is wrong — where to look."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    command = exc.ctx.command_path if exc.ctx is not None else "loom"
    return f"{message} — try {command} --help"


def _invoked(argv: list[str]) -> typer.Typer:
    """The app with only the command being run: typer inspects every command's signature
    before it parses the command line, a third of a short command's own start-up for
    fifteen commands. `loom`, `loom --help`, an unknown command and shell completion get
    the whole app (its help and errors list every command)."""
    args = iter(argv)
    name = None
    for arg in args:
        if arg == "--config":
            next(args, None)
        elif not arg.startswith("-"):
            name = arg
            break
    if name is None or "_LOOM_COMPLETE" in os.environ:
        return app
    from loomcli.compat import narrowed_app

    return narrowed_app(app, name)


def main() -> NoReturn:
    """Run the app; every error becomes one `loom: …` line on stderr and an exit code."""
    from loomcli.process import one_blas_thread

    one_blas_thread()  # also when called directly, not through fastpath.main
    from loomcli.compat import click_exceptions

    click_errors = click_exceptions()
    code: Any = 0
    try:
        code = _invoked(sys.argv[1:])(prog_name="loom", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.format_message() + "\n")
        code = Exit.ERROR
    except click_errors.UsageError as exc:
        _err(_usage_line(exc))
        code = Exit.ERROR
    except click_errors.ClickException as exc:
        _err(exc.format_message())
        code = exc.exit_code
    except typer.Abort:
        code = Exit.INTERRUPTED
    except (Exception, KeyboardInterrupt) as exc:  # LoomError, a closed stdout, a bug
        code = console.failure(exc)
    sys.exit(int(code) if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
