"""`loom mcp`: loom's operations as MCP tools on stdio (official SDK, v2 API).

Every tool is a thin call into operations.Corpus, run in a worker thread so a long scan
or LLM answer does not block the protocol, and returns the operation's result as JSON.
A LoomError becomes a tool error (is_error with loom's one-line message), never a crash.
No match is an empty result (no hits, no matches, an empty answer with nothing used).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loomcli import __version__, declare, tools
from loomcli.errors import LoomError
from loomcli.extract import DOCUMENTS
from loomcli.limits import EXCERPT_CHARS, GREP_CASE, GREP_LIMIT, SEARCH_LIMIT
from loomcli.operations import Corpus

# Every kind loom_list_files can show: "note" (text formats), then each document kind.
KINDS = ", ".join(dict.fromkeys(["note", *DOCUMENTS.values()]))

INSTRUCTIONS = """\
loom is the user's local memory of notes and PDFs. Use loom_search to find which files \
are about something (ranked, with excerpts); use loom_grep for exact strings such as \
invoice numbers, error codes or names, then loom_get_file with the returned offset to read \
a few KB around the hit instead of the whole file; loom_ask when the user wants an answer \
written by their own LLM from their notes; loom_scan after files changed."""


@dataclass
class _Result:
    """A tool's JSON result where `call` expects an operation's result."""

    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


def build_server(corpus_factory: Callable[[], Corpus]) -> Any:
    import anyio
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="loom", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")

    async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            result: dict[str, Any] = fn(corpus_factory(), *args, **kwargs).to_dict()
            return result

        try:
            return await anyio.to_thread.run_sync(run)
        except LoomError as exc:
            raise ToolError(str(exc)) from None

    # The reading tools are defined once in loomcli.tools (the agent offers the same),
    # their arguments in loomcli.declare; the signatures here give the SDK the same
    # schema (tests/test_declare.py compares them) and each call is checked as the
    # agent's and HTTP's are.
    def reading(tool: tools.Tool, args: dict[str, Any]) -> Any:
        return call(lambda corpus: _Result(tool.call(corpus, args)))

    def checked(op: declare.Operation, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return declare.check(op, args, declare.MCP)
        except LoomError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(description=tools.SEARCH.description)
    async def loom_search(query: str, limit: int = SEARCH_LIMIT,
                          excerpt_chars: int = EXCERPT_CHARS,
                          mode: str = "auto", tag: list[str] | None = None,
                          path: str | None = None, glob: list[str] | None = None
                          ) -> dict[str, Any]:
        return await reading(tools.SEARCH, {"query": query, "limit": limit,
                                            "excerpt_chars": excerpt_chars, "mode": mode,
                                            "tag": tag, "path": path, "glob": glob})

    @server.tool(description=tools.GREP.description)
    async def loom_grep(pattern: str, path: str | None = None, glob: list[str] | None = None,
                        case: str = GREP_CASE, context: int = 0, limit: int = GREP_LIMIT,
                        type: list[str] | None = None,  # noqa: A002
                        case_sensitive: bool | None = None) -> dict[str, Any]:
        return await reading(tools.GREP, {"pattern": pattern, "path": path, "glob": glob,
                                          "context": context, "case": case, "limit": limit,
                                          "type": type, "case_sensitive": case_sensitive})

    @server.tool(description=tools.GET_FILE.description)
    async def loom_get_file(path: str, offset: int = 0,
                            length: int | None = None) -> dict[str, Any]:
        return await reading(tools.GET_FILE, {"path": path, "offset": offset,
                                              "length": length})

    @server.tool(description=(
        "Answer a question from the user's notes with the user's configured LLM, in one "
        "call: the top_k best files are sent as their head plus the passage that answers. "
        "The prompt fits the model's context window. Returns answer, citations (paths the "
        "answer cites), used (files sent), sources (cited files with the pages and byte "
        "spans sent), quotes (each quoted passage: path, offset, length, page, verified), "
        "context (window_tokens, prompt_tokens, answer_tokens, source, files_sent, "
        "files_left_out) and timings; when no file matches, nothing is sent and answer is "
        "empty. top_k defaults to the user's [ask] top_k. agent: let the LLM search, grep "
        "and read in a bounded loop (steps lists each tool it ran; default [ask] agent). "
        "Each answer is kept as a turn of a conversation: pass the returned "
        "conversation_id to ask a follow-up."))
    async def loom_ask(question: str, top_k: int | None = None, mode: str = "auto",
                       agent: bool | None = None,
                       conversation_id: str | None = None) -> dict[str, Any]:
        checked(declare.ASK, {"question": question, "top_k": top_k, "mode": mode,
                              "agent": agent, "conversation_id": conversation_id})
        return await call(Corpus.ask, question, top_k, mode=mode, agent=agent,
                          conversation_id=conversation_id)

    @server.tool(description=(
        "Bring the index up to date with the folders it covers (incremental: only changed "
        "files are read). Returns the scan report: added, updated, moved, removed, unchanged, "
        "skipped (counts unchanged files and those without text), failed, duration_ms, "
        "errors [{path, error}] and skips [{path, reason}]. force re-extracts everything."))
    async def loom_scan(force: bool = False) -> dict[str, Any]:
        checked(declare.SCAN, {"force": force})
        return await call(Corpus.scan, force=force)

    @server.tool(description=(
        "List every indexed file: path, title, kind (" + KINDS + "), content_len "
        "(bytes of extracted text) and indexed_at (Unix time)."))
    async def loom_list_files() -> dict[str, Any]:
        return await call(Corpus.files)

    return server


def run(config_override: str | None = None) -> None:
    from loomcli import config

    server = build_server(lambda: Corpus(config.load(config_override), keep_open=True))
    server.run("stdio")
