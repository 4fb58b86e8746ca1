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

from loomcli import __version__
from loomcli.errors import Exit, LoomError

if TYPE_CHECKING:
    from loomcli.config import Config
    from loomcli.store import Store

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


class State:
    config_override: str | None = None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"loom {__version__}")
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

def _config() -> Config:
    from loomcli import config

    return config.load(State.config_override)


def _store(cfg: Config, *, create: bool = False) -> Store:
    from loomcli.store import Store

    return Store.open(cfg.db_path, create=create)


def _existing_store(cfg: Config) -> Store | None:
    return _store(cfg) if cfg.db_path.exists() else None


def _roots_and_store(dirs: list[Path] | None) -> tuple[Config, list[Path], Store]:
    """The folders to scan or watch (checked before anything is written), and the index."""
    from loomcli import indexer

    cfg = _config()
    roots = indexer.resolve_roots(cfg, None if dirs else _existing_store(cfg), dirs or [])
    return cfg, roots, _store(cfg, create=True)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def _err(message: str) -> None:
    sys.stderr.write(f"loom: {message}\n")


def _highlight(snippet: str) -> str:
    from loomcli.store import SNIPPET_END, SNIPPET_START

    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return snippet.replace(SNIPPET_START, "\x1b[1m").replace(SNIPPET_END, "\x1b[0m")
    return snippet.replace(SNIPPET_START, "").replace(SNIPPET_END, "")


class _ProgressBar:
    """A one-line progress bar on stderr, only when stderr is a terminal."""

    def __init__(self) -> None:
        import time

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


# -- commands --------------------------------------------------------------------------

@app.command()
def init(
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing config.")
                     ] = False,
) -> None:
    """Write a starting config.toml (not needed for `loom scan DIR`)."""
    from loomcli import config, paths

    path = paths.config_path(State.config_override)
    if path.exists() and not force:
        cfg = config.load(State.config_override)  # validates it
        typer.echo(f"config already exists: {cfg.path} (use --force to start over)")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.STARTER, encoding="utf-8")
    typer.echo(f"wrote {path}")


@config_app.command("path")
def config_path() -> None:
    """Print where the config file is (or would be)."""
    from loomcli import paths

    typer.echo(str(paths.config_path(State.config_override)))


@config_app.command("get")
def config_get(key: Annotated[str, typer.Argument(help="Dotted key, e.g. ask.top_k")]) -> None:
    """Print one key's value (its default when unset)."""
    value = _config().get(key)
    if value is None:
        raise LoomError(f"{key} is not set")
    typer.echo(json.dumps(value) if not isinstance(value, str) else value)


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="Dotted key, e.g. llm.model")],
    value: Annotated[str, typer.Argument(help="A TOML value (5, true, [\"a\"]) or text")],
) -> None:
    """Set one key, keeping every other key of the file as it was."""
    import tomllib

    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    cfg = _config()
    cfg.set(key, parsed)
    cfg.save()
    typer.echo(f"{key} = {json.dumps(parsed, ensure_ascii=False)}  ({cfg.path})")


@app.command()
def scan(
    dirs: Annotated[list[Path] | None, typer.Argument(
        help="Folders to index (default: config notes_dirs, else the indexed roots).",
        show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Re-extract every file.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Index folders of notes and PDFs (incremental)."""
    from loomcli import indexer

    cfg, roots, store = _roots_and_store(dirs)
    bar = _ProgressBar()
    try:
        report = indexer.Indexer(store, cfg, progress=bar, on_wait=_err).scan(roots, force=force)
    finally:
        bar.clear()
    if as_json:
        _print_json(report.to_dict())
    else:
        for e in report.errors:
            _err(f"failed: {e['path']}: {e['error']}")
        typer.echo(report.summary())
    raise typer.Exit(indexer.exit_code(report))




@app.command()
def forget(
    folder: Annotated[str, typer.Argument(help="An indexed folder (path or root name).")],
) -> None:
    """Drop a folder and everything indexed under it from the index (files stay on disk)."""
    from loomcli import indexer

    removed = indexer.forget(_store(_config()), folder)
    typer.echo(f"forgot {folder}: removed {removed} files from the index")


@app.command()
def search(
    query: Annotated[list[str], typer.Argument(help="Words to look for (any text).")],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=500,
                                       help="Most hits to show.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Rank files by relevance (BM25) to the query."""
    from loomcli import reading

    hits = _store(_config()).search(" ".join(query), limit)
    if as_json:
        _print_json(reading.hits_json(hits))
    else:
        for h in hits:
            typer.echo(f"{h.path}  [{h.score:.2f}]  {h.title}")
            if h.snippet:
                typer.echo(f"    {_highlight(h.snippet)}")
        if not hits:
            _err("no matches")
    raise typer.Exit(0 if hits else 1)


@app.command("files")
def files_cmd(
    long: Annotated[bool, typer.Option("--long", "-l", help="Show kind, size and title.")
                    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the indexed files."""
    from loomcli import reading

    data = reading.list_files(_store(_config()))
    if as_json:
        _print_json(data)
        return
    for f in data["files"]:
        if long:
            typer.echo(f"{f['kind']:<4} {f['content_len']:>9}  {f['path']}  {f['title']}")
        else:
            typer.echo(f["path"])


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Show where config and index live, the roots, counts and the last scan."""
    from loomcli import reading

    cfg = _config()
    data = reading.status(_existing_store(cfg), str(cfg.path), str(cfg.db_path))
    if as_json:
        _print_json(data)
        return
    typer.echo(f"config: {data['config']}{'' if cfg.exists else ' (none; defaults in use)'}")
    typer.echo(f"index:  {data['index']} ({data['index_bytes'] / 1e6:.1f} MB)")
    for r in data["roots"]:
        typer.echo(f"root:   {r['name']} = {r['path']}")
    typer.echo(f"files:  {data['files']} ({data['notes']} notes, {data['pdfs']} PDFs), "
               f"{data['failed']} failed, {data['text_bytes'] / 1e6:.1f} MB of text")
    last = data["last_scan"]
    if last:
        import datetime as dt

        when = dt.datetime.fromtimestamp(last["finished_at"]).isoformat(" ", "seconds")
        rep = last["report"] or {}
        typer.echo(f"last scan: {when}: added {rep.get('added', 0)}, updated "
                   f"{rep.get('updated', 0)}, moved {rep.get('moved', 0)}, removed "
                   f"{rep.get('removed', 0)}, failed {rep.get('failed', 0)}")
    elif not data["roots"]:
        typer.echo("no index yet: run `loom scan DIR`")


@app.command()
def get(
    path: Annotated[str, typer.Argument(help="A path as `loom files` shows it.")],
    offset: Annotated[int, typer.Option("--offset", min=0, help="Start byte.")] = 0,
    length: Annotated[int | None, typer.Option("--length", min=0, help="Bytes to read.")
                      ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a file's extracted text, or a byte range of it."""
    from loomcli import reading

    data = reading.get_range(_store(_config()), path, offset, length)
    if as_json:
        _print_json(data)
    else:
        sys.stdout.write(data["content"])
        if data["content"] and not data["content"].endswith("\n") and sys.stdout.isatty():
            sys.stdout.write("\n")


@app.command()
def grep(
    pattern: Annotated[str, typer.Argument(help="An RE2 regular expression.")],
    path: Annotated[str | None, typer.Option("--path", help="Search only this file.")
                    ] = None,
    glob: Annotated[list[str] | None, typer.Option(
        "--glob", "-g", help="Only files whose path matches (gitignore-style glob; "
        "!GLOB excludes). Repeatable.")] = None,
    context: Annotated[int, typer.Option("--context", "-C", min=0, max=50,
                                         help="Lines of context around each match.")] = 0,
    case_sensitive: Annotated[bool, typer.Option(
        "--case-sensitive", "-s", help="Match case exactly (default: ignore case).")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1,
                                       help="Most matching lines (at most 500).")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Find exact strings and patterns (RE2): path, line, byte offset, page."""
    from loomcli import grep as grep_mod

    result = grep_mod.grep(_store(_config()), pattern, path=path, globs=glob or [],
                           context=context, case_sensitive=case_sensitive, limit=limit)
    if as_json:
        _print_json(result.to_dict())
    else:
        out = []
        for m in result.matches:
            first = m.line - len(m.before)
            out += [f"{m.path}-{first + i}-{line}" for i, line in enumerate(m.before)]
            out.append(f"{m.path}:{m.line}:{m.offset}:{m.text}")
            out += [f"{m.path}-{m.line + 1 + i}-{line}" for i, line in enumerate(m.after)]
            if context:
                out.append("--")
        if out:
            sys.stdout.write("\n".join(out[:-1] if context else out) + "\n")
        if result.truncated:
            _err(f"stopped after {len(result.matches)} matching lines; use --limit "
                 "(at most 500) or narrow with --path/--glob")
    raise typer.Exit(0 if result.matches else 1)


@app.command()
def ask(
    question: Annotated[list[str], typer.Argument(help="The question, in any language.")],
    top_k: Annotated[int | None, typer.Option("--top-k", "-k", min=1, max=50,
                                              help="Files to send (default [ask] top_k).")
                     ] = None,
    show_context: Annotated[bool, typer.Option(
        "--show-context", help="Print exactly what would be sent; call nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from your notes with your LLM, citing the files it used."""
    from loomcli import ask as ask_mod
    from loomcli import providers

    cfg = _config()
    store = _store(cfg)
    text = " ".join(question).strip()
    if not text:
        raise LoomError("the question is empty", 'ask something: loom ask "…"')
    if show_context:
        prompt = ask_mod.build_prompt(store, text, top_k=top_k or cfg.get("ask.top_k"),
                                      budget=cfg.get("ask.file_budget_chars"),
                                      head_chars=cfg.get("ask.head_chars"))
        if prompt is None:
            _err("no indexed file matches the question; nothing would be sent")
            raise typer.Exit(1)
        sys.stdout.write(prompt.render())
        return
    provider = providers.from_config(cfg)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    result = ask_mod.ask(store, cfg, text, provider, top_k=top_k,
                         on_text=None if as_json else stream)
    if result is None:
        _err("no indexed file matches the question; nothing was sent to the LLM")
        raise typer.Exit(1)
    if as_json:
        _print_json(result.to_dict())
        return
    titles = {u.path: u.title for u in result.used}
    lines = ["", "", "Sources:"]
    if result.citations:
        lines += [f"  [{p}] {titles[p]}" for p in result.citations]
    else:
        lines.append("  (none cited) sent: " + ", ".join(u.path for u in result.used))
    sys.stdout.write("\n".join(lines) + "\n")


@app.command()
def mcp() -> None:
    """Serve loom's tools to an agent over MCP on stdio (Claude Desktop, Claude Code, Codex)."""
    from loomcli import mcp_server

    _config()  # a broken config fails here, in the terminal, not inside the agent
    mcp_server.run(State.config_override)


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port (0: any free port).")] = 8080,
    corpus_root: Annotated[Path | None, typer.Option(
        "--corpus-root", help="Serve several corpora: DIR/<name>/notes, each its own index.")
    ] = None,
) -> None:
    """Serve loom's operations as JSON over HTTP."""
    from loomcli import http_server

    http_server.serve(_config, host, port, corpus_root)


@app.command()
def watch(
    dirs: Annotated[list[Path] | None, typer.Argument(
        help="Folders to keep indexed (default: config notes_dirs, else the indexed roots).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines on stdout.")] = False,
) -> None:
    """Scan, then keep the index current as files change (Ctrl-C to stop)."""
    from loomcli import watch as watch_mod

    _, roots, store = _roots_and_store(dirs)

    def emit(event: dict[str, Any]) -> None:
        if event["change"] == "failed":
            _err(f"failed: {event['path']}: {event['error']}")
        if as_json:
            line = json.dumps(event, ensure_ascii=False)
        elif event["change"] == "scanned":
            r = event["report"]
            line = (f"scanned: added {r['added']}, updated {r['updated']}, moved "
                    f"{r['moved']}, removed {r['removed']}, skipped {r['skipped']}, failed "
                    f"{r['failed']}; watching {len(roots)} folder(s), Ctrl-C to stop")
        elif event["change"] == "moved":
            line = f"moved {event['from']} -> {event['path']}"
        elif event["change"] == "failed":
            return
        else:
            line = f"{event['change']} {event['path']}"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    watch_mod.watch(store, lambda: _config(), roots, emit, _err)


# -- entry point -----------------------------------------------------------------------

def main() -> NoReturn:
    """Run the app; translate a LoomError into one `loom: …` line and its exit code."""
    try:
        app()  # typer exits by itself: usage errors 2, Ctrl-C 130
    except LoomError as exc:
        if os.environ.get("LOOM_DEBUG"):
            import traceback

            traceback.print_exc()
        _err(str(exc))
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        sys.exit(int(Exit.INTERRUPTED))
    except Exception as exc:  # a bug or the system (disk full…): one line, not a traceback
        if os.environ.get("LOOM_DEBUG"):
            raise
        _err(f"internal error: {type(exc).__name__}: {exc} — rerun with LOOM_DEBUG=1 for "
             "the traceback and report it")
        sys.exit(int(Exit.ERROR))
    sys.exit(0)


if __name__ == "__main__":
    main()
