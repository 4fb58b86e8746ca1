"""loom's reading tools, defined once: the MCP server and `loom ask --agent` offer the same
names, descriptions, arguments, limits and JSON results.

Each tool is a JSON-schema description plus a call into `operations.Corpus`; what a call
returns is the operation's `to_dict()`, exactly what MCP returns. The agent loop also caps
a result's size (`fit`) so one grep cannot fill a model's window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomcli import declare
from loomcli.limits import EXCERPT_CHARS, GREP_CASE

if TYPE_CHECKING:
    from loomcli.operations import Corpus


@dataclass(frozen=True)
class Tool:
    operation: declare.Operation  # its arguments: name, type, default, bounds
    description: str
    run: Callable[[Corpus, dict[str, Any]], dict[str, Any]]  # with checked arguments
    summary: Callable[[dict[str, Any]], str]  # "2 matches", for the step line

    @property
    def name(self) -> str:
        return str(self.operation.tool)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments, made from the operation's declaration."""
        return declare.schema(self.operation)

    def call(self, corpus: Corpus, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run with arguments a client sent, checked against the declaration: unknown
        names, missing required ones, a wrong type or a value below its bound are a
        QueryError naming them; null is the default."""
        return self.run(corpus, declare.check(self.operation, arguments, declare.MCP))


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("ch") else f"{n} {word}s"


SEARCH = Tool(
    declare.SEARCH,
    "Rank the user's notes and PDFs by relevance to a query: BM25, fused with meaning "
    "(passage embeddings, any language) when the user enabled embeddings. Returns hits "
    "with path, title, score, a snippet, content_len (bytes), match (bm25, semantic or "
    "both) and content: the whole text when short, else the head plus the passage best "
    "matching the query, about excerpt_chars long. mode: auto (default), bm25, semantic "
    "or hybrid. Any text is a valid query; questions in the user's own words work. For "
    "exact codes or strings use loom_grep instead. tag: only notes with every one of "
    "these tags (#tag in a note or its front matter; `#tag` in the query does the same); "
    "backlinks: how many notes link to a hit. path (a file or folder, as loom_list_files "
    "shows it) and glob (gitignore-style, `!` excludes) narrow the files, as in loom_grep.",
    lambda c, a: c.search(a["query"], a.get("limit"), a.get("excerpt_chars", EXCERPT_CHARS),
                          a.get("mode"), tags=a.get("tag"), path=a.get("path"),
                          globs=a.get("glob")).to_dict(),
    lambda r: _count(len(r.get("hits", [])), "hit"),
)

GREP = Tool(
    declare.GREP,
    "Find exact strings or RE2 regular expressions in every indexed file, or one (path), "
    "or those matching gitignore-style globs. case: smart (default: ignore case unless "
    "the pattern has an upper-case letter), ignore or sensitive; case_sensitive true or "
    "false is the older spelling of sensitive or ignore. "
    "One result per matching line: path, line, byte offset, PDF page, the "
    "line, and `context` lines around it; at most `limit` (50, max 500), `truncated` "
    "when cut. `type`: only files of these kinds (ripgrep's names: md, txt, pdf, html, "
    "docx…). Then call loom_get_file(path, offset=offset - 500, length=2000) to read "
    "around a hit.",
    lambda c, a: c.grep(a["pattern"], path=a.get("path"), globs=a.get("glob"),
                        context=a.get("context"), case=a.get("case", GREP_CASE),
                        limit=a.get("limit"), types=a.get("type")).to_dict(),
    lambda r: (_count(len(r.get("matches", [])), "match")
               + (" (truncated)" if r.get("truncated") else "")),
)

GET_FILE = Tool(
    declare.GET,
    "Read a file's extracted text, or a byte range of it (offset and length in bytes of "
    "the UTF-8 text; clamped to the text, never a broken character). Returns path, "
    "offset, length (what was returned), content_len and content. Paths are as "
    "loom_list_files, loom_search and loom_grep show them. Prefer a length of a few "
    "thousand bytes around a grep offset over reading a whole long PDF.",
    lambda c, a: c.get(a["path"], a.get("offset", 0), a.get("length")).to_dict(),
    lambda r: f"{r.get('length', 0):,} of {r.get('content_len', 0):,} bytes",
)

READING = {t.name: t for t in (SEARCH, GREP, GET_FILE)}


# -- a result's size ----------------------------------------------------------------------

def size(result: dict[str, Any]) -> int:
    return len(dumps(result))


def dumps(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(0, chars - 5)] + "[...]"


def fit(name: str, result: dict[str, Any], chars: int) -> dict[str, Any]:
    """The result made to fit `chars` characters of JSON, keeping its shape: a grep's last
    matches go first (`truncated` says so), a search's excerpts shrink then its last hits go,
    a file's range is cut to fewer bytes (`length` is what is left, so `loom get PATH
    --offset O --length L` still returns exactly that content)."""
    out = json.loads(dumps(result))
    if size(out) <= chars:
        return out
    if name == GET_FILE.name:
        room = max(0, chars - size({**out, "content": ""}) - 16)
        content = out["content"]
        # JSON escapes can make the text longer than its characters: shrink until it fits.
        while content and size({**out, "content": content}) > chars:
            content = content[: min(room, len(content) * 9 // 10)]
            room = len(content)
        out["content"], out["length"] = content, len(content.encode("utf-8"))
        return out
    if name == GREP.name:
        for m in out.get("matches", []):
            m["text"] = _cut(m.get("text", ""), 300)
            m["before"] = [_cut(t, 200) for t in m.get("before", [])]
            m["after"] = [_cut(t, 200) for t in m.get("after", [])]
        while out.get("matches") and size(out) > chars:
            out["matches"].pop()
            out["truncated"] = True
        return out
    if name == SEARCH.name:
        hits = out.get("hits", [])
        while hits and size(out) > chars:
            over = size(out) - chars
            longest = max(hits, key=lambda h: len(h.get("content") or ""))
            have = len(longest.get("content") or "")
            if have > 200:
                longest["content"] = _cut(longest["content"], max(200, have - over - 10))
                longest["truncated"] = True
            else:
                hits.pop()
        return out
    return {"error": f"the result was longer than {chars} characters"}
