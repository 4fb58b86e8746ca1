"""The store: where the index lives. `seam.py` is the interface the operations use;
`sqlite.py` is the embedded implementation (one SQLite file, the default)."""

from loomcli.store.sqlite import (
    SNIPPET_END,
    SNIPPET_START,
    FileInfo,
    FileRow,
    Hit,
    Root,
    Store,
    explain,
    plain_snippet,
    query_words,
    quote_fts,
    snippet_of,
)

__all__ = ["SNIPPET_END", "SNIPPET_START", "FileInfo", "FileRow", "Hit", "Root", "Store",
           "explain", "plain_snippet", "query_words", "quote_fts", "snippet_of"]
