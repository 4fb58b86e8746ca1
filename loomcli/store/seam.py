"""The store seam: everything the rest of loom asks of an index, and nothing more.

`IndexStore` is what the operations, the indexer, grep, retrieve, the ask assembly and
the embeddings call. `store/sqlite.py` is its first implementation (one SQLite file, the
embedded default); `store/postgres.py` the second. `open_store` (store/__init__.py) picks
one from where the index is. A backend implements data access only: the text rules
(words, stems, acronyms, snippets, query parsing) live in `loomcli/search/text.py`, and the
composition of a search (the `auto` and `fill` operators, snippets, hits) in
`loomcli/search/retrieve.py` and `loomcli/search/hits.py`, the same for every backend.

Users import this module only under `TYPE_CHECKING` (start-up does not pay for
`typing`); the records it speaks of (Root, FileRow, FileInfo, Hit) are in
`store/rows.py`, the parsed query (`Query`) in `loomcli/search/text.py`, grep's required
literals (`Need`) in `loomcli/search/trigrams.py`.

What changed from the old `Store` (store.py of 0.x, before this seam):
- `rank(query, limit, among)`, `rank_passages(query, limit, among)` and
  `frequency(query, cap)` take a parsed `text.Query` (words, operator AND | OR, prefix,
  exact), not a query string and an operator: each backend builds its own query syntax
  from it (SQLite: `sqlite.match_of`, FTS5's). The `auto` operator (every word, else
  any) and `fill` (every word first, then any) are composed by `retrieve.rank_files`.
- `search()` and `hits()` left the store: `hits.hits(store, ranked, query, near)` makes
  Hits with snippets from `hits_for`, `text_bytes` and `pages`.
- `candidates(need)` takes grep's required literals (`trigrams.required(pattern)`: a
  tree of ("lit", text) | ("and", [...]) | ("or", [...])), not an FTS5 MATCH string.
- Transactions: `begin()`, `commit()`, `rollback()`, `in_transaction` beside
  `transaction()`; nobody outside the store package touches `store.conn`.
- Locks are the store's: `write_lock(on_wait)`, `building()`, `take_builder_lock()`,
  `builder_turns()` (SQLite: the lock files of locks.py; a server database: its own
  locks, released when a session dies).
- `location` (str): what `open_store` takes to open the same index again (a child
  process, a cache's key); SQLite's `path` stays an attribute of SQLite's store only.
- `guard()`: the backend's own database errors raised inside become one
  `IndexStateError` line (was: `except sqlite3.DatabaseError: explain(...)` in
  operations.py).
- Module names moved out of the store: `query_words`, `acronym`, `snippet_of`,
  `snippet_at`, `plain_snippet`, `utf8_len`, `SNIPPET_START/END` -> `loomcli/search/text.py`
  (still re-exported by `loomcli.store` for old imports); `quote_fts(query, operator,
  prefix)` stays SQLite's (`store/sqlite.py`), built from `text.parse`.
- `open_store(location, create=)` in `store/__init__.py` picks the backend from the
  location (`postgresql://`: `store/postgres.py`'s `Store.open`); `set_aside(location)`
  beside it moves an SQLite index aside for `scan --rebuild` (a database: refused).
Every other method keeps its name and signature.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loomcli.extract import Extracted
from loomcli.search.text import Query
from loomcli.store.rows import FileInfo, FileRow, Root

if TYPE_CHECKING:
    from loomcli.search.trigrams import Need  # a type alias, for the type checker only


class BuilderTurns(Protocol):
    """grep's index builder's side of the write lock: taken batch by batch, never
    waited for (it gives way to any other writer)."""

    def take(self) -> bool:
        """The write lock, if no other writer holds it or waits for it."""

    def give_back(self) -> None: ...

    def close(self) -> None: ...


class IndexStore(Protocol):
    """One index. Reads may run beside one writer (searches never wait for a scan);
    writes happen inside a transaction and under the write lock."""

    # -- opening, closing, transactions, errors --------------------------------------
    # Opening is `open_store(location, create=...)`; it applies the numbered migrations
    # once (a read-only index that needs one is an IndexStateError).

    @property
    def location(self) -> str:
        """The path or URL `open_store` opens this index with (a child process, a
        cache's key)."""

    def close(self) -> None: ...

    def __enter__(self) -> IndexStore: ...

    def __exit__(self, *exc: object) -> None: ...

    def transaction(self) -> AbstractContextManager[None]:
        """A write transaction: committed at the end, rolled back on any exception."""

    def begin(self) -> None:
        """Start a write transaction (SQLite: BEGIN IMMEDIATE, so it waits for the
        file's write lock now rather than failing at its first write)."""

    def commit(self) -> None: ...

    def rollback(self) -> None:
        """Roll back the open transaction, if any (an interrupt may land after COMMIT)."""

    @property
    def in_transaction(self) -> bool: ...

    def guard(self) -> AbstractContextManager[None]:
        """Inside: the backend's database errors (damaged, full, read-only, gone)
        become one IndexStateError saying what to do."""

    # -- locks ---------------------------------------------------------------------------

    def write_lock(self, on_wait: Callable[[str], None] | None = None
                   ) -> AbstractContextManager[None]:
        """One writer at a time (a scan, forget, grep's index builder). Without
        `on_wait` a busy index is a BusyError, unless the builder holds it (it gives way
        within one batch); with it, told once, then waits."""

    def building(self) -> bool:
        """Whether a process is filling grep's trigram index now (`loom status`)."""

    def take_builder_lock(self) -> int | None:
        """The builder's lock, taken by a scan under the write lock for the builder it
        starts (grep_index.start hands it on); None where there are no such locks (the
        scan then fills grep's index itself)."""

    def builder_turns(self) -> BuilderTurns: ...

    # -- roots and files -----------------------------------------------------------------

    def roots(self) -> list[Root]: ...

    def forget_roots(self) -> None:
        """Drop the cached roots (a scan elsewhere may have added one)."""

    def still_open(self) -> bool:
        """Whether a kept store can serve the next request: a server database closes an
        idle connection when it restarts or fails over (a server keeps then opens anew)."""

    def ensure_root(self, path: Path) -> Root: ...

    def display_path(self, root_id: int, relpath: str) -> str: ...

    def on_disk(self, path: str | Path) -> tuple[Root, str] | None: ...

    def ids_under(self, root: Root, folder: str) -> list[int]: ...

    def resolve(self, path: str) -> FileRow:
        """A file by the path loom shows or its path on disk (IndexMissingError)."""

    def file(self, file_id: int) -> FileRow: ...

    def files_under(self, root_id: int) -> dict[str, FileRow]: ...

    def list_files(self) -> list[FileInfo]: ...

    def paths(self) -> list[tuple[int, str]]:
        """(file id, display path) of every indexed file, in path order."""

    def hits_for(self, file_ids: list[int]) -> dict[int, tuple[str, str, int, int]]:
        """(display path, title, content_len, byte where the body starts) by file id."""

    def file_count(self) -> int: ...

    def files_with_text(self) -> int: ...

    # -- writing files (the indexer; inside a transaction, under the write lock) -------

    def add_file(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                 digest: bytes, doc: Extracted, ocr: str | None = None) -> int:
        """Store a new file's text and index it for BM25; grep's index gets it later
        (grams_pending / index_grams). Takes the text out of `doc`."""

    def replace_content(self, file_id: int, size: int, mtime_ns: int, digest: bytes,
                        doc: Extracted, ocr: str | None = None) -> None: ...

    def set_stat(self, file_id: int, size: int, mtime_ns: int) -> None: ...

    def move(self, file_id: int, root_id: int, relpath: str, size: int,
             mtime_ns: int) -> None: ...

    def remove(self, file_id: int) -> None: ...

    def remove_root(self, root_id: int) -> int: ...

    def record_failure(self, root_id: int, relpath: str, kind: str, size: int,
                       mtime_ns: int, digest: bytes | None, error: str,
                       file_id: int | None, ocr: str | None = None) -> None: ...

    def record_skip(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                    digest: bytes | None, reason: str, file_id: int | None,
                    ocr: str | None = None) -> None: ...

    def optimize(self) -> None:
        """After a large change: merge the text indexes (or nothing, if not needed)."""

    def check(self) -> None:
        """Raise if the text indexes disagree with the stored text."""

    # -- texts and pages -----------------------------------------------------------------

    def text_bytes(self, file_id: int, offset: int = 0, length: int | None = None
                   ) -> bytes:
        """A byte range of a file's UTF-8 text, at the cost of the range (b"" when the
        file is gone)."""

    def text_ranges(self, ranges: Sequence[tuple[int, int, int]]) -> list[bytes]:
        """text_bytes of each (file id, offset, length): a page of hits' snippets or
        excerpts at once (one round trip on a server)."""

    def pages(self, file_id: int) -> list[int] | None:
        """Where each page of a PDF starts (byte offsets), else None."""

    def body_start(self, file_id: int) -> tuple[int, int]:
        """(byte, character) where a note's body starts, after its front matter."""

    def iter_texts(self, file_ids: list[int] | None = None,
                   wanted: dict[int, set[int] | None] | None = None,
                   by_blocks: bool = False
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """For grep, in path order: (file id, display path, pieces, pages JSON); pieces
        are (first byte, first line, UTF-8 text); with `by_blocks` only the blocks
        `wanted` names (see candidates)."""

    # -- BM25 ----------------------------------------------------------------------------

    def rank(self, query: Query, limit: int, among: Sequence[int] | None = None
             ) -> list[tuple[int, float]]:
        """(file id, BM25 score, higher better) best first, for a parsed query (its
        operator AND or OR). `among`: only these files."""

    def rank_passages(self, query: Query, limit: int, among: Sequence[int] | None = None
                      ) -> list[tuple[int, int, float]]:
        """(file id, passage number, BM25 score) of the passages that have vectors."""

    def frequency(self, query: Query, cap: int) -> int:
        """In how many files the query matches, counted up to `cap` (bounded cost)."""

    # -- grep's trigram index ------------------------------------------------------------

    def candidates(self, need: Need) -> dict[int, set[int] | None]:
        """The files (and their blocks) whose text holds what `need` requires: a
        superset of where the pattern can match; a text not in the trigram index yet is
        a candidate whole (None: every block). One snapshot."""

    def grep_texts(self, need: Need, file_ids: list[int] | None, by_blocks: bool
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """iter_texts of the candidates of `need` among `file_ids` (None: all), in path
        order, as they are read: a reader that stops (grep's limit, -l, -q) stops the
        reading. With `by_blocks` only the candidate blocks of a text."""

    def grams_pending(self) -> tuple[int, int]:
        """(files, bytes of text) not in grep's trigram index yet."""

    def grams_batch(self, max_bytes: int) -> list[int]: ...

    def index_grams(self, file_ids: Iterable[int]) -> None: ...

    def optimize_grams(self) -> None: ...

    # -- vectors -------------------------------------------------------------------------

    def needing_vectors(self, model: str, dim: int | None = None) -> list[int]: ...

    def vector_dims(self, model: str) -> dict[int, int]: ...

    def put_vectors(self, file_id: int, model: str, dim: int, spans: bytes, vecs: bytes,
                    scales: bytes) -> None: ...

    def vector_counts(self) -> dict[str, int]: ...

    def vector_engine(self) -> str:
        """Who ranks the vectors: "loom" (semantic.VectorIndex, every vector in memory)
        or "pgvector" (the server, through `nearest`)."""

    def nearest(self, model: str, dim: int, query: Any, limit: int,
                among: Sequence[int] | None = None
                ) -> list[tuple[int, int, int, int, float]] | None:
        """(file id, passage number, start byte, end byte, similarity) of the `limit`
        passages closest to `query`, best first, ranked by the database; None where the
        database does not rank vectors (loom does: vector_engine)."""

    def passage_counts(self, model: str, dim: int) -> dict[int, int]:
        """How many passages each file has vectors for (of this model and size)."""

    def vector_generation(self) -> tuple[float, int]:
        """(the index's birth, vector writes since): a cached matrix is current while
        both are the same."""

    def iter_vectors(self, model: str, dim: int | None = None
                     ) -> Iterator[tuple[int, int, bytes, bytes, bytes]]: ...

    def vectors_of(self, file_id: int, model: str
                   ) -> tuple[int, bytes, bytes, bytes] | None: ...

    # -- notes: tags, links, backlinks ---------------------------------------------------

    def tagged(self, tags: Sequence[str]) -> list[int]: ...

    def tags_of(self, file_id: int) -> list[str]: ...

    def tags_for(self, file_ids: Sequence[int]) -> dict[int, list[str]]: ...

    def resolve_links(self, targets: Sequence[str], source: int) -> list[int | None]: ...

    def links_of(self, file_id: int) -> list[tuple[str, str | None, str | None, int]]: ...

    def backlinks(self, file_ids: Sequence[int]) -> dict[int, dict[int, int]]: ...

    # -- conversations -------------------------------------------------------------------

    def conversation_rows(self, owner: str) -> Any:
        """`owner`'s conversations kept in this database (postgres_conversations.py's
        ConversationRows), or None where they are kept in a file of their own (SQLite:
        loomcli/conversations.py)."""

    # -- scans, status, failures ---------------------------------------------------------

    def begin_scan(self, roots: list[str]) -> int: ...

    def finish_scan(self, scan_id: int, report: dict[str, object]) -> None: ...

    def failures(self, limit: int) -> list[dict[str, str]]: ...

    def problems(self, kind: str) -> list[tuple[str, str]]: ...

    def status(self) -> dict[str, Any]:
        """roots, files, notes, pdfs, documents, failed, skipped, text_bytes,
        index_bytes, last_scan (`loom status --json`'s counts)."""
