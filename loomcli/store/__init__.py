"""The store: where the index lives. `seam.py` is the interface the rest of loom uses
(`IndexStore`); `sqlite.py` the embedded implementation (one SQLite file, the default).
`open_store` picks the implementation from where the index is. Nothing here imports a
module above the store (tests/test_layers.py)."""

from __future__ import annotations

from pathlib import Path

from loomcli.store import sqlite
from loomcli.store.rows import FileInfo, FileRow, Hit, Root
from loomcli.store.sqlite import Store, explain, quote_fts

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from loomcli.store.seam import IndexStore

__all__ = ["FileInfo", "FileRow", "Hit", "Root", "Store", "explain", "open_store",
           "quote_fts", "set_aside"]

SERVER_SCHEMES = ("postgresql://", "postgres://")


def open_store(location: str | Path, *, create: bool = False,
               connect: Callable[[], Any] | None = None, replica: bool = False
               ) -> IndexStore:
    """The index at `location`: a `postgresql://` URL (store/postgres.py), else the path
    of an SQLite file. `create`: make it when missing (else a missing index is an
    IndexMissingError saying to scan first). A server's database only: `connect` makes
    its connection (store/pg_connect.py's router: a replica for reads, the primary for
    writes), `replica` says it may be a read-only standby."""
    if isinstance(location, str) and location.startswith(SERVER_SCHEMES):
        from importlib import import_module

        backend: Any = import_module("loomcli.store.postgres")  # its driver: only then
        return backend.Store.open(location, create=create, connect=connect, replica=replica)
    return Store.open(Path(location), create=create)


def set_aside(location: str | Path) -> None:
    """For `scan --rebuild`: move the index aside (kept, not deleted) so the scan starts a
    new one; a writer of the old index (grep's builder) is done first."""
    if isinstance(location, str) and location.startswith(SERVER_SCHEMES):
        from loomcli.errors import IndexStateError

        raise IndexStateError("scan --rebuild works on an SQLite index only",
                              "for PostgreSQL: drop and create the database, then scan")
    sqlite.set_aside(Path(location))
