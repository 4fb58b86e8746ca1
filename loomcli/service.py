"""The operations MCP and HTTP expose, as JSON-ready library calls over one corpus.

Each call opens its own connection (cheap, and safe across the server's threads) and
goes through the same functions as the CLI: indexer.scan, Store.search, grep.grep,
reading.get_range, ask.ask. Paths from clients are index paths only: anything with a
`..` component or an absolute path is refused, and no call reads a file from disk
except a scan of the configured roots.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from loomcli import config as config_mod
from loomcli.config import Config
from loomcli.errors import IndexMissingError, QueryError
from loomcli.store import Store

CORPUS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DEFAULT_EXCERPT_CHARS = 2000
MAX_EXCERPT_CHARS = 200_000


def check_index_path(path: str) -> str:
    """Refuse anything that is not a plain index path (no `..`, not absolute)."""
    if not isinstance(path, str) or not path.strip():
        raise QueryError("path must be a non-empty string")
    clean = path.replace("\\", "/")
    if clean.startswith("/") or ".." in PurePosixPath(clean).parts or re.match(r"^[A-Za-z]:",
                                                                               clean):
        raise QueryError(f"{path!r} escapes the index",
                         "use a path as loom_list_files / GET /files shows it")
    return clean


@dataclass
class Corpus:
    """One index with its config: the default one, or DIR/<name>/ of `serve --corpus-root`."""

    config: Config
    roots: list[Path] | None = None  # scan these instead of the config's notes_dirs
    db_path: Path | None = None

    @classmethod
    def default(cls, config_override: str | None = None) -> Corpus:
        return cls(config_mod.load(config_override))

    @classmethod
    def named(cls, corpus_root: Path, name: str, base: Config) -> Corpus:
        if not isinstance(name, str) or not CORPUS_NAME.match(name):
            raise QueryError(f"invalid corpus name {name!r}",
                             "names are 1-64 letters, digits, '_' or '-'")
        folder = corpus_root / name
        if not (folder / "notes").is_dir():
            raise IndexMissingError(f"no corpus named {name!r}",
                                    f"create {folder / 'notes'} and scan it")
        return cls(base, roots=[folder / "notes"], db_path=folder / "index.db")

    # -- plumbing ------------------------------------------------------------------------

    def _db(self) -> Path:
        return self.db_path or self.config.db_path

    def store(self, create: bool = False) -> Store:
        return Store.open(self._db(), create=create)

    # -- operations ----------------------------------------------------------------------

    def search(self, query: str, limit: int = 10,
               excerpt_chars: int | None = DEFAULT_EXCERPT_CHARS) -> dict[str, Any]:
        from loomcli.excerpt import excerpt
        from loomcli.reading import MAX_SEARCH_LIMIT, hits_json

        if not isinstance(query, str):
            raise QueryError("query must be a string")
        limit = max(1, min(int(limit), MAX_SEARCH_LIMIT))
        store = self.store()
        try:
            hits = store.search(query, limit)
            out = hits_json(hits)["hits"]
            for h, item in zip(hits, out, strict=True):
                item["content_len"] = h.content_len
                if excerpt_chars:
                    chars = max(200, min(int(excerpt_chars), MAX_EXCERPT_CHARS))
                    text = store.text_bytes(h.file_id).decode("utf-8", "replace")
                    part = excerpt(text, query, chars, min(1200, chars // 4))
                    item["content"] = part.text
                    item["truncated"] = part.cut
            return {"hits": out}
        finally:
            store.close()

    def list_files(self) -> dict[str, Any]:
        from loomcli.reading import list_files

        store = self.store()
        try:
            return list_files(store)
        finally:
            store.close()

    def get_file(self, path: str, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        from loomcli.reading import get_range

        store = self.store()
        try:
            return get_range(store, check_index_path(path), int(offset),
                             None if length is None else int(length))
        finally:
            store.close()

    def grep(self, pattern: str, path: str | None = None, globs: Sequence[str] = (),
             context: int = 0, case_sensitive: bool = False, limit: int = 50
             ) -> dict[str, Any]:
        from loomcli.grep import grep

        if not isinstance(pattern, str):
            raise QueryError("pattern must be a string")
        store = self.store()
        try:
            return grep(store, pattern, path=check_index_path(path) if path else None,
                        globs=list(globs or []), context=int(context),
                        case_sensitive=bool(case_sensitive), limit=int(limit)).to_dict()
        finally:
            store.close()

    def scan(self, force: bool = False) -> dict[str, Any]:
        from loomcli import indexer

        store = self.store(create=True)
        try:
            return indexer.scan(store, self.config, self.roots or [], force=bool(force)).to_dict()
        finally:
            store.close()

    def ask(self, question: str, top_k: int | None = None) -> dict[str, Any]:
        from loomcli import ask, providers

        if not isinstance(question, str) or not question.strip():
            raise QueryError("question must be a non-empty string")
        provider = providers.from_config(self.config)
        store = self.store()
        try:
            result = ask.ask(store, self.config, question, provider,
                             top_k=None if top_k is None else int(top_k))
        finally:
            store.close()
        if result is None:
            return {"answer": "", "citations": [], "used": [],
                    "note": "no indexed file matches the question; nothing was sent"}
        return result.to_dict()
