"""The `loom` command: parse options, make one library call, render the result.

Data goes to stdout, everything else (errors, progress) to stderr. Heavy modules are
imported inside the commands that need them, so `loom --help` starts fast.
"""

from __future__ import annotations

import copy
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
    as_json: JsonOpt = False,
) -> None:
    """Rank files by relevance to the query (BM25, and meaning when embeddings are on).
    "a phrase" in quotes matches those words side by side."""
    raise typer.Exit(reading.search(State.config_override, query, limit, mode, path, glob,
                                    here, as_json))


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
    _out(f"index:  {st.index} ({data['index_bytes'] / 1e6:.1f} MB)")
    for r in data["roots"]:
        _out(f"root:   {r['name']} = {r['path']}")
    _out(f"files:  {data['files']} ({data['notes']} notes, {data['pdfs']} PDFs, "
         f"{data['documents']} other documents), "
               f"{data['failed']} failed, {data['skipped']} skipped (no text), "
         f"{data['text_bytes'] / 1e6:.1f} MB of text")
    _out("engines: " + ", ".join(f"{kind} {name}" for kind, name in st.engines.items()))
    v = data["vectors"]
    if v["enabled"] or v["files"] or v["stale"]:
        line = f"vectors: {v['files']} files by {v['model']}"
        if v["pending"]:
            line += f", {v['pending']} waiting (next scan)"
        if v["stale"]:
            line += f", {v['stale']} by another model (stale: the next scan replaces them)"
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
        rep = last["report"] or {}
        _out(f"last scan: {when}: added {rep.get('added', 0)}, updated "
                   f"{rep.get('updated', 0)}, moved {rep.get('moved', 0)}, removed "
                   f"{rep.get('removed', 0)}, skipped {rep.get('skipped', 0)}, failed "
                   f"{rep.get('failed', 0)}")
    elif not data["roots"]:
        _out("no index yet: run `loom scan DIR`")


@app.command()
def get(
    path: Annotated[str, typer.Argument(help="A path as `loom files` shows it, or the "
                                        "file's path on disk.")],
    offset: Annotated[int, typer.Option("--offset", help="Start byte.")] = 0,
    length: Annotated[int | None, typer.Option("--length", help="Bytes to read.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a file's extracted text, or a byte range of it."""
    raise typer.Exit(reading.get(State.config_override, path, offset, length, as_json))


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
    pattern: Annotated[str, typer.Argument(help="An RE2 regular expression (with -F, a "
                                           "plain string).")],
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
        "--line-number", "-n", help="Show line numbers (always on; for muscle memory).")
    ] = False,
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
    raise typer.Exit(reading.grep(
        State.config_override, pattern, path=path, glob=glob, case=ctx.meta.get("loom_case"),
        fixed=fixed, word=word, files_with_matches=files_with_matches, count=count,
        only_matching=only_matching, after=after, before=before, context=context,
        max_count=max_count, color_when=color, heading=heading, limit=limit, here=here,
        as_json=as_json))


AgentOpt = Annotated[bool | None, typer.Option(
    "--agent/--no-agent", help="Let the model search, grep and read with loom's tools "
    "(default [ask] agent).", show_default=False)]
ContinueOpt = Annotated[bool, typer.Option(
    "--continue", "-c", help="Continue the last conversation.")]
CidOpt = Annotated[str | None, typer.Option(
    "--cid", metavar="ID", help="Continue the conversation ID (`loom conversations`).",
    show_default=False)]
TopKOpt = Annotated[int | None, typer.Option(
    "--top-k", "-k", help="Files to send (default [ask] top_k, at most 50).",
    show_default=False)]


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
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Print the context line and each stage's time on stderr.")
    ] = False,
) -> None:
    """Answer a question from your notes with your LLM, citing the files it used."""
    corpus = _corpus()
    text = " ".join(question).strip()
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
    if not _ask_once(corpus, text, top_k, mode, agent, conversation, as_json, verbose,
                     model=model):
        raise typer.Exit(1)


def _show_step(step: Any) -> None:
    sys.stderr.write(step.line() + "\n")
    sys.stderr.flush()


def _ask_once(corpus: Corpus, text: str, top_k: int | None, mode: str | None,
              agent: bool | None, conversation: str | None, as_json: bool,
              verbose: bool = False, model: str | None = None) -> str | None:
    """Ask, stream the answer, list its sources; the conversation's id (None: no match).
    `model`: this question's model (`-m`) instead of [llm] model."""

    def stream(piece: str) -> None:
        _out(piece, end="")

    result = corpus.ask(text, top_k, on_text=None if as_json else stream, mode=mode,
                        on_warning=lambda w: _err(f"warning: {w}"), agent=agent,
                        conversation_id=conversation,
                        on_step=_show_step, model=model)
    if not result.used and not result.steps and not result.answer:
        _err("no indexed file matches the question; nothing was sent to the LLM")
        return None
    if verbose:
        _verbose_ask(result)
    if as_json:
        _print_json(result.to_dict())
        return result.conversation_id
    from loomcli.ask import page_label

    by_path = {u.path: u for u in result.used}
    lines = [""]
    lines += [f"unverified quote: \"{_shorten(q.text)}\"" for q in result.quotes
              if not q.verified]
    lines += ["", "Sources:"]
    if result.citations:
        for p in result.citations:
            pages = page_label(by_path[p].pages)
            lines.append(f"  [{_shown(p)}{' ' + pages if pages else ''}] {by_path[p].title}")
    elif result.used:
        lines.append("  (none cited) sent: " + ", ".join(_shown(u.path) for u in result.used))
    else:
        lines.append("  (none cited)")
    _out("\n".join(lines))
    return result.conversation_id


@app.command()
def chat(
    top_k: TopKOpt = None,
    mode: ModeOpt = None,
    agent: AgentOpt = None,
    cont: ContinueOpt = False,
    cid: CidOpt = None,
) -> None:
    """Ask in a loop, each question a follow-up of the last (`exit` or Ctrl-D ends)."""
    corpus = _corpus()
    conversation = corpus.conversation_for(cid, cont)
    prompt = "> " if sys.stdin.isatty() else ""
    if prompt:
        _err("chatting with your notes; type exit or press Ctrl-D to end")
    while True:
        if prompt:
            sys.stderr.write(prompt)
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:  # Ctrl-D, or the end of piped questions
            break
        text = line.strip()
        if text in ("exit", "quit"):
            break
        if not text:
            continue
        conversation = _ask_once(corpus, text, top_k, mode, agent, conversation,
                                 False) or conversation
        _out("")


@app.command("conversations")
def conversations_cmd(
    limit: Annotated[int | None, typer.Option(
        "--limit", help="How many to list (default 20, at most 1000).",
        show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the kept conversations, newest first (continue one with `loom ask --cid ID`)."""
    import time

    found = _corpus().conversations(limit)
    if as_json:
        _print_json({"conversations": [c.to_dict() for c in found]})
        return
    for c in found:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        _out(f"{c.id}  {when}  {len(c.turns):>3} turns  {_shown(c.title)}")


def _shorten(text: str, chars: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[:chars - 1] + "…"


def _verbose_ask(result: Any) -> None:
    c = result.context
    if c:
        sys.stderr.write(f"loom: context: window {c['window_tokens']:,} tokens "
                         f"({c['source']}), prompt ~{c['prompt_tokens']:,}, answer "
                         f"{c['answer_tokens']:,} reserved; {c['files_sent']} files sent, "
                         f"{c['files_left_out']} left out\n")
    t = result.timings
    sys.stderr.write("loom: timings: " + ", ".join(
        f"{k.removesuffix('_ms')} {v:,.0f} ms" for k, v in t.items()) + "\n")


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
            line = (f"scanned: added {r['added']}, updated {r['updated']}, moved "
                    f"{r['moved']}, removed {r['removed']}, skipped {r['skipped']}, failed "
                    f"{r['failed']}; watching {event['roots']} folder(s), Ctrl-C to stop")
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
    from typer.main import get_command_name

    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands, narrowed.registered_groups = commands, groups
    return narrowed


def main() -> NoReturn:
    """Run the app; every error becomes one `loom: …` line on stderr and an exit code."""
    from loomcli.fastpath import one_blas_thread

    one_blas_thread()  # also when called directly, not through fastpath.main
    try:
        from typer._click import exceptions as click_errors
    except ImportError:  # a typer that uses the click package itself
        from click import exceptions as click_errors  # type: ignore[no-redef]
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
