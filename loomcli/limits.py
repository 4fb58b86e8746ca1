"""The defaults and limits of every edge, named once: the operations (operations.py)
apply them, and the modules below the operations that describe them (the agent's and
MCP's tools) read them here, so that none of them imports the operations."""

from __future__ import annotations

SEARCH_LIMIT, SEARCH_LIMIT_MAX = 10, 500
GREP_LIMIT, GREP_LIMIT_MAX = 50, 500
FAILURES_SHOWN = 200  # failed files listed by `failures()` (the count in status is whole)
GREP_CONTEXT_MAX = 50
# The CLI's case rule when no flag is given: ignore case unless the pattern holds an
# upper-case letter (ripgrep's -S). A lower-case pattern finds what loom 0.1 found; a
# pattern typed with capitals (`TaskGroup`, `EINVAL`) means them, as in grep and ripgrep.
GREP_CASE = "smart"
EXCERPT_CHARS, EXCERPT_CHARS_MIN, EXCERPT_CHARS_MAX = 2000, 200, 200_000
EXCERPT_HEAD_CHARS = 1200  # at most a quarter of excerpt_chars, as in ask
TOP_K_MAX = 50
ASK_CANDIDATES = 3  # ask ranks top_k × this many files: near-copies and left-outs give way
SEARCH_MODES = ("auto", "bm25", "semantic", "hybrid")
QUERY_EMBED_CHARS = 2000  # what of a query is embedded (a passage's worth; bounded time)
QUERY_CHARS_MAX = 100_000  # a query, pattern or question longer than this is refused
GLOBS_MAX = 100
TERMS_MAX = 64  # words of a query the page highlights
# Agent mode and conversations (README: "Agent mode", "Conversations").
AGENT_MAX_CALLS = 10  # model calls of one agent ask, in all ([ask] max_steps counts tools)
TOOL_RESULT_CHARS = 6000  # one tool result's cap in agent mode (JSON characters)
HISTORY_SHARE = 4  # a follow-up's earlier turns take at most a quarter of the window's room
CONVERSATIONS_LIMIT, CONVERSATIONS_LIMIT_MAX = 20, 1000
