"""Read-side library calls shared by the CLI, MCP and HTTP edges; JSON-ready results."""

from __future__ import annotations

from typing import Any

from loomcli.errors import QueryError
from loomcli.store import SNIPPET_END, SNIPPET_START, Hit, Store

MAX_SEARCH_LIMIT = 500


def plain(snippet: str) -> str:
    return snippet.replace(SNIPPET_START, "").replace(SNIPPET_END, "")


def hits_json(hits: list[Hit]) -> dict[str, Any]:
    return {"hits": [
        {"path": h.path, "title": h.title, "score": round(h.score, 4),
         "snippet": plain(h.snippet)} for h in hits
    ]}


def list_files(store: Store) -> dict[str, Any]:
    return {"files": [
        {"path": f.path, "title": f.title, "kind": f.kind, "content_len": f.content_len,
         "indexed_at": f.indexed_at} for f in store.list_files()
    ]}


def _is_continuation(b: int) -> bool:
    return (b & 0xC0) == 0x80


def get_range(store: Store, path: str, offset: int = 0, length: int | None = None
              ) -> dict[str, Any]:
    """A byte range of a file's extracted UTF-8 text, clamped to the text and shrunk to
    whole characters (never a broken one). Reports the range actually returned."""
    if offset < 0:
        raise QueryError(f"offset must be 0 or more, got {offset}")
    if length is not None and length < 0:
        raise QueryError(f"length must be 0 or more, got {length}")
    row = store.resolve(path)
    total = row.content_len
    start = min(offset, total)
    end = total if length is None else min(total, start + length)
    # Fetch three bytes on each side to find character boundaries.
    window_start = max(0, start - 3)
    data = store.text_bytes(row.id, window_start, end - window_start + 4)
    s, e = start - window_start, end - window_start
    while s < len(data) and s < e and _is_continuation(data[s]):
        s += 1
    while e > s and e < len(data) and _is_continuation(data[e]):
        e -= 1
    chunk = data[s:e]
    return {
        "path": store.display_path(row.root_id, row.relpath),
        "offset": window_start + s,
        "length": len(chunk),
        "content_len": total,
        "content": chunk.decode("utf-8", errors="replace"),
    }


def status(store: Store | None, config_path: str, db_path: str) -> dict[str, Any]:
    info: dict[str, Any] = {"config": config_path, "index": db_path}
    if store is None:
        info.update({"roots": [], "files": 0, "notes": 0, "pdfs": 0, "failed": 0,
                     "text_bytes": 0, "index_bytes": 0, "last_scan": None})
    else:
        info.update(store.status())
    return info
