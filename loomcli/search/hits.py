"""Search hits as a person reads them: each ranked file with its path, title and a
snippet around the query's first word, for every backend alike (the store gives the
rows and byte ranges, text.py the snippet rule).

Snippets are cut from a bounded part of each hit, not by the database (SQLite's
snippet() reads and tokenizes the whole text: seconds for a long log); a note's from its
body, after its front matter, without Logseq's block properties and block references.
"""

from __future__ import annotations

from bisect import bisect_right

from loomcli.search.text import (
    SNIPPET_SCAN_BYTES,
    hide_metadata,
    query_words,
    snippet_at,
    utf8_len,
)
from loomcli.store.rows import Hit

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.store.seam import IndexStore

NEAR_SNIPPET_BYTES = 2000  # a passage found by meaning: its snippet is from the passage


def hits(store: IndexStore, ranked: list[tuple[int, float]], query: str,
         near: dict[int, int] | None = None) -> list[Hit]:
    """Hits for ranked file ids, each with a snippet: around the first query word, or
    at the byte offset `near` gives for it (a passage found by meaning). A file removed
    by a scan meanwhile is left out."""
    info = store.hits_for([fid for fid, _ in ranked])
    words = query_words(query)
    near = near or {}
    kept = [(fid, score) for fid, score in ranked if fid in info]
    starts = [near.get(fid, 0) or info[fid][3] for fid, _ in kept]
    texts = store.text_ranges([  # every hit's at once: one round trip on a server
        (fid, start, NEAR_SNIPPET_BYTES if near.get(fid) else SNIPPET_SCAN_BYTES)
        for (fid, _), start in zip(kept, starts, strict=True)])
    out = []
    for (fid, score), start, data in zip(kept, starts, texts, strict=True):
        path, title, content_len, _ = info[fid]
        passage = near.get(fid, 0)
        text = data.decode("utf-8", "ignore")
        snippet, at = snippet_at(hide_metadata(text, path), words)
        if passage and snippet and not snippet.startswith("…"):
            snippet = "…" + snippet
        offset = start + utf8_len(text[:at])
        pages = store.pages(fid)
        page = bisect_right(pages, offset) if pages else None
        out.append(Hit(path, title, score, snippet, fid, content_len, page, offset))
    return out
