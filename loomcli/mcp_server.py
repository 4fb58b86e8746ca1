"""`loom mcp`: loom's operations as MCP tools on stdio (official SDK, v2 API).

Every tool is a thin call into operations.Corpus, run in a worker thread so a long scan
or LLM answer does not block the protocol, and returns the operation's result as JSON.
A LoomError becomes a tool error (is_error with loom's one-line message), never a crash.
No match is an empty result (no hits, no matches, an empty answer with nothing used).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from loomcli import __version__
from loomcli.errors import LoomError
from loomcli.operations import EXCERPT_CHARS, GREP_LIMIT, SEARCH_LIMIT, Corpus

INSTRUCTIONS = """\
loom is the user's local memory of notes and PDFs. Use loom_search to find which files \
are about something (ranked, with excerpts); use loom_grep for exact strings such as \
invoice numbers, error codes or names, then loom_get_file with the returned offset to read \
a few KB around the hit instead of the whole file; loom_ask when the user wants an answer \
written by their own LLM from their notes; loom_scan after files changed."""


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

    @server.tool(description=(
        "Rank the user's notes and PDFs by relevance to a query: BM25, fused with meaning "
        "(passage embeddings, any language) when the user enabled embeddings. Returns hits "
        "with path, title, score, a snippet, content_len (bytes), match (bm25, semantic or "
        "both) and content: the whole text when short, else the head plus the passage best "
        "matching the query, about excerpt_chars long. mode: auto (default), bm25, semantic "
        "or hybrid. Any text is a valid query; questions in the user's own words work. For "
        "exact codes or strings use loom_grep instead."))
    async def loom_search(query: str, limit: int = SEARCH_LIMIT,
                          excerpt_chars: int = EXCERPT_CHARS,
                          mode: str = "auto") -> dict[str, Any]:
        return await call(Corpus.search, query, limit, excerpt_chars, mode)

    @server.tool(description=(
        "Find exact strings or RE2 regular expressions (case-insensitive unless "
        "case_sensitive) in every indexed file, or one (path), or those matching gitignore-"
        "style globs. One result per matching line: path, line, byte offset, PDF page, the "
        "line, and `context` lines around it; at most `limit` (50, max 500), `truncated` "
        "when cut. Then call loom_get_file(path, offset=offset - 500, length=2000) to read "
        "around a hit."))
    async def loom_grep(pattern: str, path: str | None = None, glob: list[str] | None = None,
                        context: int = 0, case_sensitive: bool = False,
                        limit: int = GREP_LIMIT) -> dict[str, Any]:
        return await call(Corpus.grep, pattern, path=path, globs=glob,
                          context=context, case_sensitive=case_sensitive, limit=limit)

    @server.tool(description=(
        "Read a file's extracted text, or a byte range of it (offset and length in bytes of "
        "the UTF-8 text; clamped to the text, never a broken character). Returns path, "
        "offset, length (what was returned), content_len and content. Paths are as "
        "loom_list_files, loom_search and loom_grep show them. Prefer a length of a few "
        "thousand bytes around a grep offset over reading a whole long PDF."))
    async def loom_get_file(path: str, offset: int = 0,
                            length: int | None = None) -> dict[str, Any]:
        return await call(Corpus.get, path, offset, length)

    @server.tool(description=(
        "Answer a question from the user's notes with the user's configured LLM, in one "
        "call: the top_k best files are sent as their head plus the passage that answers. "
        "The prompt fits the model's context window. Returns answer, citations (paths the "
        "answer cites), used (files sent), sources (cited files with the pages and byte "
        "spans sent), quotes (each quoted passage: path, offset, length, page, verified), "
        "context (window_tokens, prompt_tokens, answer_tokens, source, files_sent, "
        "files_left_out) and timings; when no file matches, nothing is sent and answer is "
        "empty. top_k defaults to the user's [ask] top_k."))
    async def loom_ask(question: str, top_k: int | None = None,
                       mode: str = "auto") -> dict[str, Any]:
        return await call(Corpus.ask, question, top_k, mode=mode)

    @server.tool(description=(
        "Bring the index up to date with the folders it covers (incremental: only changed "
        "files are read). Returns the scan report: added, updated, moved, removed, skipped, "
        "failed, duration_ms and errors [{path, error}]. force re-extracts everything."))
    async def loom_scan(force: bool = False) -> dict[str, Any]:
        return await call(Corpus.scan, force=force)

    @server.tool(description=(
        "List every indexed file: path, title, kind (note or pdf), content_len (bytes of "
        "extracted text) and indexed_at (Unix time)."))
    async def loom_list_files() -> dict[str, Any]:
        return await call(Corpus.files)

    return server


def run(config_override: str | None = None) -> None:
    server = build_server(lambda: replace(Corpus.default(config_override), keep_open=True))
    server.run("stdio")
