"""The store: where the index lives. `seam.py` is the interface the rest of loom uses
(`IndexStore`); `sqlite.py` the embedded implementation (one SQLite file, the default).
`open_store` picks the implementation from where the index is. Nothing here imports a
module above the store (tests/test_layers.py)."""

from __future__ import annotations

from pathlib import Path

from loomcli.store.rows import FileInfo, FileRow, Hit, Root
from loomcli.store.sqlite import Store, explain, quote_fts

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.store.seam import IndexStore

__all__ = ["FileInfo", "FileRow", "Hit", "Root", "Store", "explain", "open_store",
           "quote_fts"]

SERVER_SCHEMES = ("postgresql://", "postgres://")


def open_store(location: str | Path, *, create: bool = False) -> IndexStore:
    """The index at `location`: a `postgresql://` URL (store/postgres.py), else the path
    of an SQLite file. `create`: make it when missing (else a missing index is an
    IndexMissingError saying to scan first)."""
    if isinstance(location, str) and location.startswith(SERVER_SCHEMES):
        from importlib import import_module

        backend: Any = import_module("loomcli.store.postgres")  # its driver: only then
        return backend.Store.open(location, create=create)
    return Store.open(Path(location), create=create)
