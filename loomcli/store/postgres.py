"""The index on a PostgreSQL server: the SQLite store's interface, through psycopg 3.

What differs from the embedded store, and why:
- A text is stored once, as grep's blocks (`blocks`: about GREP_BLOCK_CHARS characters
  each, cut after a newline, with the byte offset and line where each starts). A byte
  range (`loom get`) reads only the blocks it spans; grep reads only candidate blocks.
- grep's candidates: a `pg_trgm` GIN index on the blocks, asked with `~*` for each
  literal the pattern requires (trigrams.required); RE2 in loom decides, as on SQLite.
  A common literal is read in path order a group of files at a time (grep_texts).
  Without the extension the same query reads every block (correct, slower).
- BM25 is FTS5's (postgres_words.py): SQLite's own tokenizer makes the postings
  (term, document, column, positions), PostgreSQL stores them, loom scores them with
  FTS5's formula and weights. PostgreSQL's ts_rank is not BM25.
- Vectors: bytes, as on SQLite; where the server has pgvector, also one `vector` row per
  passage with an HNSW index, and a search asks the server for the closest passages
  (postgres_vectors.py); without it, ranked in loom as on SQLite.
- A NUL character of a text (rare: a UTF-16 file may hold one) is stored as a space,
  which PostgreSQL's text type can hold; offsets and lines stay the same.
- Locks: advisory locks (held by a session, released when its process dies), where the
  SQLite store takes lock files beside the index.
- Migrations: numbered, applied once, under an advisory lock (several processes may
  open a new database at once).
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from loomcli.errors import BusyError, IndexMissingError, IndexStateError
from loomcli.extract import Extracted
from loomcli.migrations import (
    BODY_WEIGHT,
    CHUNK_SHIFT,
    GRAMS_WEIGHT,
    TITLE_WEIGHT,
    chunk_texts,
    words_apart,
)
from loomcli.search.text import utf8_len
from loomcli.store import postgres_conversations as pc
from loomcli.store import postgres_vectors as pv
from loomcli.store import postgres_words as bm
from loomcli.store import sqlite as lite
from loomcli.store.common import FILE_COLUMNS, Common
from loomcli.store.rows import FileRow, Root
from loomcli.store.sqlite import FILE_MASK, GREP_BLOCK_CHARS, RUN_BYTES

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.search.text import Query
    from loomcli.search.trigrams import Need

URL_SCHEMES = ("postgresql://", "postgres://")
FILE_WEIGHTS = (TITLE_WEIGHT, BODY_WEIGHT, GRAMS_WEIGHT)  # title, body, grams
PASSAGE_WEIGHTS = (1.0, 1.0)  # body, grams: FTS5's bm25() without weights
# Advisory lock keys: (lock, the index's schema), so corpora in one database (a schema
# each: pg_connect.in_schema) never wait for each other.
MIGRATE_LOCK = 7_206_001
WRITE_LOCK = 7_206_002
BUILDER_LOCK = 7_206_003  # held by the process filling grep's index (grep_index.py)
CONNECT_TIMEOUT = 10  # seconds
UNDEFINED_TABLE, INVALID_SCHEMA_NAME = "42P01", "3F000"  # SQLSTATEs
READ_BYTES = 8 << 20  # text grep reads in one statement (iter_texts)
READ_FILES = 500
# grep_texts: candidate blocks asked for before going in path order. Past it a literal is
# common and the trigram check runs again for its candidates: 64 made `spin_lock\(` on
# the archive (78 blocks of 686 candidates) pay that check twice, 149 -> 101 ms at 256,
# for 4-10 ms more on a limited grep of a literal in every file (`the`, `kernel`).
PROBE_BLOCKS = 256
PROBE_FILES = 32  # grep_texts: the files of its first group in path order
DENSE = 0.5  # grep_texts: a group in path order with fewer files holding the literal
# ends the reading in path order (each group's statement checks every block of its files)
FLUSH_ROWS = 100_000  # rows buffered before they are sent (about 20 MB)
FLUSH_BYTES = 16 << 20  # characters of text buffered before they are sent
ID_BLOCK = 256  # file ids a scan takes from the sequence at once (add_file)
POSTINGS_INDEXES = {"fts_terms_term": "fts_terms (term)",  # as migration 003 leaves them
                    "fts_terms_doc": "fts_terms (doc)"}


def is_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(URL_SCHEMES)


def shown_url(url: str) -> str:
    """The url without a password, for messages."""
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1@", url)


@functools.lru_cache(maxsize=64)
def namespace(url: str) -> int:
    """The second key of the index's advisory locks: its schema's (0: the database's
    default search path), as PostgreSQL's int4."""
    import zlib

    from loomcli.store.pg_connect import schema_of

    schema = schema_of(url)
    return 0 if schema is None else zlib.crc32(schema.encode()) - (1 << 31)


@functools.lru_cache(maxsize=64)
def _percent(sql: str) -> str:
    """A statement of store/common.py's, written with SQLite's `?`, in psycopg's `%s`."""
    return sql.replace("?", "%s")


SCHEMA = """
CREATE TABLE roots (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                    path text NOT NULL UNIQUE, name text NOT NULL UNIQUE,
                    prefix text NOT NULL DEFAULT '');
CREATE TABLE files (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                    root_id bigint NOT NULL REFERENCES roots(id),
                    relpath text COLLATE "C" NOT NULL, kind text NOT NULL,
                    size bigint NOT NULL, mtime_ns bigint NOT NULL, hash bytea,
                    title text NOT NULL DEFAULT '', content_len bigint NOT NULL DEFAULT 0,
                    indexed_at double precision, error text, skip text, ocr text,
                    UNIQUE (root_id, relpath));
CREATE INDEX files_hash ON files(hash);
CREATE TABLE docs (id bigint PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
                   pages text, blocks integer NOT NULL);
CREATE TABLE blocks (file_id bigint NOT NULL REFERENCES docs(id) ON DELETE CASCADE,
                     n integer NOT NULL, start bigint NOT NULL, line bigint NOT NULL,
                     body text NOT NULL, indexed boolean NOT NULL DEFAULT false,
                     PRIMARY KEY (file_id, n));
CREATE INDEX blocks_todo ON blocks (file_id) WHERE NOT indexed;
CREATE TABLE fts_len (doc bigint PRIMARY KEY, file_id bigint NOT NULL, lens integer[] NOT NULL,
                      total integer NOT NULL);
CREATE TABLE fts_terms (term text COLLATE "C" NOT NULL, doc bigint NOT NULL,
                        col smallint NOT NULL, tf integer NOT NULL, pos integer[] NOT NULL);
CREATE INDEX fts_terms_term ON fts_terms (term, doc);
CREATE INDEX fts_len_file ON fts_len (file_id);
CREATE INDEX fts_terms_doc ON fts_terms (doc);
CREATE TABLE chunk_len (doc bigint PRIMARY KEY, file_id bigint NOT NULL,
                        lens integer[] NOT NULL, total integer NOT NULL);
CREATE INDEX chunk_len_file ON chunk_len (file_id);
CREATE TABLE chunk_terms (term text COLLATE "C" NOT NULL, doc bigint NOT NULL,
                          col smallint NOT NULL, tf integer NOT NULL, pos integer[] NOT NULL);
CREATE INDEX chunk_terms_term ON chunk_terms (term, doc);
CREATE INDEX chunk_terms_doc ON chunk_terms (doc);
CREATE TABLE notes (file_id bigint PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
                    name text COLLATE "C" NOT NULL, body_at bigint NOT NULL DEFAULT 0,
                    body_chars bigint NOT NULL DEFAULT 0, fields text NOT NULL DEFAULT '');
CREATE INDEX notes_name ON notes(name);
CREATE TABLE tags (file_id bigint NOT NULL REFERENCES files(id) ON DELETE CASCADE,
                   tag text COLLATE "C" NOT NULL, PRIMARY KEY (file_id, tag));
CREATE INDEX tags_tag ON tags(tag);
CREATE TABLE links (file_id bigint NOT NULL REFERENCES files(id) ON DELETE CASCADE,
                    n integer NOT NULL, target text NOT NULL, name text COLLATE "C" NOT NULL,
                    heading text, alias text, line integer NOT NULL,
                    PRIMARY KEY (file_id, n));
CREATE INDEX links_name ON links(name);
CREATE TABLE vectors (file_id bigint PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
                      model text NOT NULL, dim integer NOT NULL, spans bytea NOT NULL,
                      vecs bytea NOT NULL, scales bytea NOT NULL);
CREATE INDEX vectors_model ON vectors(model);
CREATE TABLE vector_state (id integer PRIMARY KEY CHECK (id = 1), generation bigint NOT NULL);
INSERT INTO vector_state VALUES (1, 0);
CREATE FUNCTION loom_vectors_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN UPDATE vector_state SET generation = generation + 1; RETURN NULL; END $$;
CREATE TRIGGER vectors_changed AFTER INSERT OR UPDATE OR DELETE ON vectors
    FOR EACH STATEMENT EXECUTE FUNCTION loom_vectors_changed();
CREATE TABLE scans (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                    started_at double precision NOT NULL, finished_at double precision,
                    roots text NOT NULL, report text);
"""


def _trigram_index(conn: Any) -> None:
    """grep's candidate filter, where the server has pg_trgm (without it grep reads every
    block: the same answers). Partial: a block joins it when grep's index gets its text
    (index_grams, after the scan, as on SQLite: the GIN index's upkeep was two thirds of
    a first scan's time)."""
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"
                             ).fetchone()
    if available:
        from loomcli.store.pg_connect import create_extension

        create_extension(conn, "pg_trgm")
        conn.execute("CREATE INDEX blocks_trgm ON blocks USING gin (body gin_trgm_ops) "
                     "WHERE indexed")


# Smaller postings. A posting's positions as text ('1,5,9'): an integer[] spent 24 bytes
# of header on each row (most hold one or two positions). The term index on the term
# alone (no query asks for a term and a document): B-tree deduplication keeps each term
# once with its rows, a third of the size of (term, doc).
COMPACT_POSTINGS = """
ALTER TABLE fts_terms ALTER COLUMN pos TYPE text USING array_to_string(pos, ',');
ALTER TABLE chunk_terms ALTER COLUMN pos TYPE text USING array_to_string(pos, ',');
DROP INDEX IF EXISTS fts_terms_term;
CREATE INDEX fts_terms_term ON fts_terms (term);
DROP INDEX chunk_terms_term;
CREATE INDEX chunk_terms_term ON chunk_terms (term);
"""

def _fill_aliases(conn: Any) -> None:
    """The other names a note answers `[[wikilinks]]` by (migrations.ALIASES_SCHEMA),
    read from the head of the notes that may have one (front matter, fields, or a date
    for a name). A daily note indexed before keeps its title and words until it is
    scanned again (`loom scan --force`): its postings are not rewritten here."""
    from loomcli.extract import markdown  # notes only: not on start-up

    conn.execute("CREATE TABLE aliases (file_id bigint NOT NULL REFERENCES files(id) "
                 "ON DELETE CASCADE, name text COLLATE \"C\" NOT NULL, "
                 "PRIMARY KEY (file_id, name))")
    conn.execute("CREATE INDEX aliases_name ON aliases(name)")
    rows = conn.execute("SELECT f.id, f.relpath, n.body_at, n.fields FROM files f JOIN notes "
                        "n ON n.file_id = f.id WHERE f.kind = 'note'").fetchall()
    for file_id, relpath, body_at, fields in rows:
        if not (body_at or fields or markdown.day_of(relpath)):
            continue
        (head,) = conn.execute("SELECT coalesce(string_agg(body, '' ORDER BY n), '') FROM "
                               "blocks WHERE file_id = %s AND start <= %s",
                               (file_id, 4 * markdown.FRONT_MAX_CHARS)).fetchone()
        names = markdown.parse(head, relpath).names()
        if names:
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO aliases (file_id, name) VALUES (%s, %s)",
                                [(file_id, name) for name in names])


def _lz4_blocks(conn: Any) -> None:
    """The texts' blocks compressed with lz4 where the server has it (PostgreSQL 14+
    built with it, as Debian's): a grep that reads every block spent most of its server
    time undoing pglz (kernel docs, 28.5 MB of text: 59 -> 24 ms), and a scan compresses
    three times faster, for 17 MB of blocks instead of 15. Blocks written before keep
    pglz until their file is scanned again."""
    found = conn.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = "
                         "'default_toast_compression'").fetchone()
    if found and found[0]:
        conn.execute("ALTER TABLE blocks ALTER COLUMN body SET COMPRESSION lz4")


MIGRATIONS: list[tuple[str, Any]] = [
    ("001_initial", SCHEMA),
    ("002_trigrams", _trigram_index),
    ("003_compact_postings", COMPACT_POSTINGS),
    ("004_pgvector", pv.migration),
    ("005_conversations", pc.SCHEMA),
    ("006_aliases", _fill_aliases),
    ("007_lz4_blocks", _lz4_blocks),
]


def migrate(conn: Any, url: str) -> None:
    """Apply the migrations this database has not seen, each once: under an advisory
    lock, so two processes opening a new database never both run one. A corpus's schema
    (the URL's search path) is made first."""
    from loomcli.store.pg_connect import schema_of

    key = (MIGRATE_LOCK, namespace(url))
    conn.execute("SELECT pg_advisory_lock(%s, %s)", key)
    try:
        schema = schema_of(url)
        if schema is not None and conn.execute("SELECT to_regnamespace(%s) IS NULL",
                                               (schema,)).fetchone()[0]:
            conn.execute(f"CREATE SCHEMA {schema}")  # a plain name (schema_of)
        conn.execute("CREATE TABLE IF NOT EXISTS migrations (name text PRIMARY KEY, "
                     "applied_at double precision NOT NULL)")
        done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
        for name, step in MIGRATIONS:
            if name in done:
                continue
            with conn.transaction():
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
                conn.execute("INSERT INTO migrations VALUES (%s, %s)", (name, time.time()))
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def _check_owner(conn: Any, url: str) -> set[str] | None:
    """The migrations this database has (None: an empty database, loom's to fill); a
    database holding tables loom did not make, or that a newer loom migrated further, is
    refused. One statement for an index that exists (every cold command asks)."""
    from loomcli.store.pg_connect import schema_of
    from loomcli.store.pgwire import errors, sqlstate

    # A corpus's schema by name: until it exists, public's tables are not its index.
    schema = schema_of(url)
    table = "migrations" if schema is None else f"{schema}.migrations"
    try:
        done = {r[0] for r in conn.execute(f"SELECT name FROM {table}")}
    except errors() as exc:
        if sqlstate(exc) not in (UNDEFINED_TABLE, INVALID_SCHEMA_NAME):
            raise
        # Looked at again under the migrations' lock: another process may be making
        # the index right now (its tables appear, `migrations` first).
        key = (MIGRATE_LOCK, namespace(url))
        conn.execute("SELECT pg_advisory_lock(%s, %s)", key)
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = "
                "coalesce(%s, current_schema())", (schema,))}
            if "migrations" in tables:
                done = {r[0] for r in conn.execute(f"SELECT name FROM {table}")}
            elif tables:
                raise IndexStateError(f"the database {shown_url(url)} holds tables, but "
                                      "not a loom index",
                                      "point [store] url at an empty database") from None
            else:
                return None
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)
    known = {name for name, _ in MIGRATIONS}
    if done - known:
        raise IndexStateError(
            f"the index in {shown_url(url)} was made by a newer loom (it has migration "
            f"{max(done - known)})", "upgrade loom")
    return done


def explain(exc: BaseException, url: str) -> IndexStateError:
    """A PostgreSQL error as the one line a user can act on."""
    reason = " ".join(str(exc).split())[:300]
    return IndexStateError(f"the index in {shown_url(url)} cannot be used ({reason})",
                           "check that the server runs and the url, user and password "
                           "are right ([store] url, LOOM_DATABASE_URL)")


class PostgresStore(Common):
    """The index in one PostgreSQL database (its url: `[store] url`)."""

    def __init__(self, conn: Any, url: str) -> None:
        self.pg = conn
        self.url = url
        self.shown = shown_url(url)  # what messages call the index
        self._roots: list[Root] | None = None
        self._stats: dict[str, tuple[int, int]] = {}
        self._pending: dict[str, list[tuple[Any, ...]]] = {}  # rows not sent yet
        self._pending_bytes = 0  # characters of text among them
        self._bulk = False  # this scan dropped the postings' indexes (begin_scan)
        self._ids: list[int] = []  # file ids taken from the sequence, not used yet
        self._locked = False  # this store holds the write lock (write_lock)
        self._pgvector: tuple[int, ...] | None = None  # pv.version, once asked
        self._pgvector_asked = False
        self._hnsw_set = False  # this session's hnsw.ef_search (pv.settings)
        # What one request (a guard() scope) has read, so that it asks once: postings by
        # term, the file count, each hit's pages and note row. None outside a scope.
        self._read: dict[Any, Any] | None = None

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, *, create: bool = False,
             connect: Callable[[], Any] | None = None, replica: bool = False
             ) -> PostgresStore:
        """The index in the database at `url`. `connect`: how to reach it (the replica
        router's reader or primary, which know the password and the replicas); `replica`:
        the connection may be a read-only standby, which is never migrated."""
        from importlib.util import find_spec

        from loomcli.store import pgwire

        if find_spec("psycopg") is None:  # (not imported: a read may not need it)
            raise IndexStateError("the index is on PostgreSQL, and psycopg is not "
                                  "installed", "pip install 'loom-index[postgres]'")
        try:
            if connect is not None:
                conn = connect()
            else:
                import psycopg

                conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT)
        except pgwire.errors() as exc:
            raise explain(exc, url) from None
        try:
            done = _check_owner(conn, url)
            if done is None and not create:
                raise IndexMissingError(f"no index in {shown_url(url)} yet",
                                        "run `loom scan DIR` to index a folder first")
            if done is None or {name for name, _ in MIGRATIONS} - done:
                if replica:
                    raise IndexStateError(
                        f"the index in {shown_url(url)} needs an upgrade a replica "
                        "cannot take", "run `loom scan` once against the primary")
                if pgwire.is_light(conn) and conn.reopen is not None:
                    light, conn = conn, conn.reopen()  # migrations: psycopg's transactions
                    light.close()
                migrate(conn, url)
        except pgwire.errors() as exc:
            conn.close()
            raise explain(exc, url) from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, url)

    def close(self) -> None:
        self.pg.close()

    def __enter__(self) -> PostgresStore:
        return self

    def _q(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        if self._pending:  # every statement sees the rows buffered before it
            self._flush()
        return self.pg.execute(sql, params)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._q(_percent(sql), params)

    @property
    def location(self) -> str:
        return self.url

    def begin(self) -> None:
        self._q("BEGIN")

    def commit(self) -> None:
        self._flush()
        self._q("COMMIT")

    def rollback(self) -> None:
        self._pending, self._pending_bytes = {}, 0
        if self.in_transaction:
            self._q("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        from loomcli.store.pgwire import in_transaction

        return in_transaction(self.pg)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """PostgreSQL's errors inside (the server gone, a full disk, a lost connection)
        as one line saying what to do."""
        from loomcli.store.pgwire import errors

        outer = self._read is None
        if outer:  # a request: the BM25 totals asked again with its first ranking
            self._read, self._stats = {}, {}
        try:
            yield
        except errors() as exc:
            raise explain(exc, self.url) from None
        finally:
            if outer:
                self._read = None

    def _memo(self) -> dict[Any, Any] | None:
        """This request's reads (guard), None while writing: a scan's reads see its own
        rows."""
        if self._read is None or self._locked or self._pending or self.in_transaction:
            return None
        return self._read

    # -- locks (locks.py's, as advisory locks) --------------------------------------------

    def lock(self, key: int) -> tuple[int, int]:
        """An advisory lock of this index: `key` within its schema (namespace)."""
        return key, namespace(self.url)

    @contextmanager
    def write_lock(self, on_wait: Any = None) -> Iterator[None]:
        """One writer at a time, on any machine: a session-level advisory lock, given
        back by the server when the process dies. Held by grep's index builder, it is
        waited for (the builder gives way within one batch: a waiting writer makes its
        next try fail, PostgreSQL queues lock requests fairly)."""
        if not self._q("SELECT pg_try_advisory_lock(%s, %s)", self.lock(WRITE_LOCK)
                       ).fetchone()[0]:
            if not self.building():
                if on_wait is None:
                    raise BusyError(f"another loom scan is writing to {self.shown}",
                                    "wait for it to finish and try again")
                on_wait(f"another loom scan is writing to {self.shown}; waiting for it "
                        "to finish…")
            self._q("SELECT pg_advisory_lock(%s, %s)", self.lock(WRITE_LOCK))
        self._locked = True
        try:
            yield
        finally:
            self._locked = False
            self._q("SELECT pg_advisory_unlock(%s, %s)", self.lock(WRITE_LOCK))

    def building(self) -> bool:
        """Whether a process fills grep's index now: it holds the builder's lock."""
        key = self.lock(BUILDER_LOCK)
        if self._q("SELECT pg_try_advisory_lock_shared(%s, %s)", key).fetchone()[0]:
            self._q("SELECT pg_advisory_unlock_shared(%s, %s)", key)
            return False
        return True

    def take_builder_lock(self) -> int | None:
        """A token for grep_index.start to hand on (the builder takes the lock itself,
        on its own session, in builder_turns)."""
        import os

        return os.open(os.devnull, os.O_RDONLY)

    def builder_turns(self) -> _Turns:
        return _Turns(self)

    # -- roots and display paths ---------------------------------------------------------

    # What needs no SQL is the SQLite store's own code (a path, snippets).
    def still_open(self) -> bool:
        """False when the server closed this idle connection (a restart, a failover,
        idle_session_timeout): its socket then holds the server's goodbye or its end.
        Asked without a round trip: a select on the socket, nothing sent."""
        import select

        if self.pg.closed or self.pg.broken or self.in_transaction:
            return not (self.pg.closed or self.pg.broken)
        try:
            readable, _, _ = select.select([self.pg.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable  # an idle connection is sent nothing unasked

    def ensure_root(self, path: Path) -> Root:
        for root in self.roots():
            if root.path == str(path):
                return root
        taken = {r.name for r in self.roots()} | {r.prefix for r in self.roots()}
        for root in self.roots():
            if not root.prefix:
                taken.update(r[0] for r in self._q(
                    "SELECT DISTINCT split_part(relpath, '/', 1) FROM files "
                    "WHERE root_id = %s AND strpos(relpath, '/') > 0", (root.id,)))
        name = base = path.name or "root"
        n = 2
        while name in taken:
            name = f"{base}-{n}"
            n += 1
        prefix = name if self.roots() else ""
        row = self._q("INSERT INTO roots (path, name, prefix) VALUES (%s, %s, %s) "
                      "ON CONFLICT (path) DO UPDATE SET path = EXCLUDED.path "
                      "RETURNING id, path, name, prefix", (str(path), name, prefix)).fetchone()
        self._roots = None
        return Root(*row)

    def ids_under(self, root: Root, folder: str) -> list[int]:
        if not folder:
            return [r[0] for r in self._q(
                "SELECT id FROM files WHERE root_id = %s AND indexed_at IS NOT NULL "
                "ORDER BY relpath", (root.id,))]
        prefix = folder.rstrip("/") + "/"
        return [r[0] for r in self._q(
            "SELECT id FROM files WHERE root_id = %s AND indexed_at IS NOT NULL AND "
            "left(relpath, %s) = %s ORDER BY relpath", (root.id, len(prefix), prefix))]

    def _file_at(self, root_id: int, rel: str) -> FileRow | None:
        row = self._q(f"SELECT {FILE_COLUMNS} FROM files WHERE root_id = %s AND "
                      "relpath = %s AND indexed_at IS NOT NULL", (root_id, rel)).fetchone()
        return FileRow(*row) if row else None

    def resolve(self, path: str) -> FileRow:
        from contextlib import suppress
        from pathlib import PurePosixPath

        roots = self.roots()
        candidates: list[tuple[int, str]] = []
        for shown in dict.fromkeys([path, path.replace("\\", "/").strip()]):
            if shown.startswith("./"):
                shown = shown[2:]
            head, _, rest = shown.partition("/")
            candidates += [(r.id, shown) for r in roots if not r.prefix]
            candidates += [(r.id, rest) for r in roots if r.prefix and r.prefix == head]
        try:
            disk: Path | None = Path(path).expanduser().resolve()
        except (OSError, RuntimeError):
            disk = None
        if disk is not None:
            for r in roots:
                with suppress(ValueError):
                    candidates.append((r.id, disk.relative_to(r.path).as_posix()))
        for root_id, rel in candidates:
            if ".." in PurePosixPath(rel).parts:
                continue
            found = self._file_at(root_id, rel)
            if found:
                return found
        raise IndexMissingError(f"{path}: not in the index",
                                "see `loom files` for the indexed paths")

    # -- files -----------------------------------------------------------------------------

    def add_file(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                 digest: bytes, doc: Extracted, ocr: str | None = None) -> int:
        """A new file's row and text. Two scanners adding the same file: the second
        takes over the row (one row per path, never two). Under the write lock (a scan)
        no other writer adds one: the row is sent with the text's, in a COPY (an INSERT
        per file was a round trip each), its id taken from the sequence beforehand."""
        if self._locked:
            if not self._ids:
                self._ids = [r[0] for r in self._q(
                    "SELECT nextval(pg_get_serial_sequence('files', 'id')) "
                    "FROM generate_series(1, %s)", (ID_BLOCK,))][::-1]
            file_id = self._ids.pop()
            self._pending.setdefault("files", []).append(
                (file_id, root_id, relpath, kind, size, mtime_ns, digest, doc.title,
                 utf8_len(doc.text), time.time(), ocr))
            self._insert_doc(file_id, doc, relpath)
            return file_id
        row = self._q(
            "INSERT INTO files (root_id, relpath, kind, size, mtime_ns, hash, title, "
            "content_len, indexed_at, ocr) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (root_id, relpath) DO UPDATE SET kind = EXCLUDED.kind "
            "RETURNING id, (xmax <> 0)",
            (root_id, relpath, kind, size, mtime_ns, digest, doc.title, utf8_len(doc.text),
             time.time(), ocr)).fetchone()
        file_id, existed = int(row[0]), bool(row[1])
        if existed:
            self.replace_content(file_id, size, mtime_ns, digest, doc, ocr)
        else:
            self._insert_doc(file_id, doc, relpath)
        return file_id

    def _insert_doc(self, file_id: int, doc: Extracted, relpath: str | None = None) -> None:
        # PostgreSQL's text holds no NUL (the SQLite store's may): a space, of the same
        # byte length, keeps every offset and line.
        text = doc.text.replace("\x00", " ") if "\x00" in doc.text else doc.text
        pages = json.dumps(doc.pages, separators=(",", ":")) if doc.pages is not None else None
        blocks = _blocks(file_id, text)
        # Sent with the postings (_flush: docs first, its blocks refer to it).
        self._pending.setdefault("docs", []).append((file_id, pages, len(blocks)))
        self._pending.setdefault("blocks", []).extend(blocks)
        self._pending_bytes += len(text)
        del blocks
        if relpath is None:
            relpath = self._q("SELECT relpath FROM files WHERE id = %s",
                              (file_id,)).fetchone()[0]
        self._put_note(file_id, relpath, doc.note, text)
        fields = doc.note.fields() if doc.note is not None else ""
        title = f"{doc.title}\n{fields}" if fields else doc.title
        skip = doc.note.body_start if doc.note is not None else 0
        apart = [g for g in (words_apart(doc.title), words_apart(text)) if g is not None]
        self._index("fts", file_id, file_id,
                    [title, text[skip:] if skip else text, "\n".join(apart) if apart else None])
        doc.text = ""

    def _index(self, table: str, doc: int, file_id: int, columns: list[str | None]) -> None:
        """A document's postings and column lengths in `table`_terms / `table`_len:
        buffered, and sent in one COPY per table when the transaction commits, a read
        needs them, or FLUSH_ROWS are waiting (a COPY per file spent most of a first
        scan waiting for the server's answers)."""
        lens = [0] * len(columns)
        rows = self._pending.setdefault(f"{table}_terms", [])
        for term, col, count, positions in bm.words().postings(columns):
            lens[col] += count
            rows.append((term, doc, col, count, positions))
        self._pending.setdefault(f"{table}_len", []).append(
            (doc, file_id, "{" + ",".join(map(str, lens)) + "}", sum(lens)))
        self._stats.pop(table, None)
        if self._pending_bytes >= FLUSH_BYTES or \
                sum(map(len, self._pending.values())) >= FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Send the buffered rows (see _index): texts, their blocks, postings."""
        columns = {"files": "id, root_id, relpath, kind, size, mtime_ns, hash, title, "
                            "content_len, indexed_at, ocr",  # first: the others refer to it
                   "fts_terms": "term, doc, col, tf, pos", "chunk_terms": "term, doc, col, tf, pos",
                   "fts_len": "doc, file_id, lens, total", "chunk_len": "doc, file_id, lens, total",
                   "docs": "id, pages, blocks", "blocks": "file_id, n, start, line, body",
                   "notes": "file_id, name, body_at, body_chars, fields",
                   "tags": "file_id, tag",
                   "links": "file_id, n, target, name, heading, alias, line",
                   "aliases": "file_id, name"}
        if not self._pending:
            return
        pending, self._pending, self._pending_bytes = self._pending, {}, 0
        if "files" in pending:
            pending = {"files": pending.pop("files"), **pending}
        for table, rows in pending.items():
            with self.pg.cursor() as cur, cur.copy(
                    f"COPY {table} ({columns[table]}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

    def _unindex(self, table: str, file_id: int) -> None:
        self._make_indexes()  # a DELETE by document needs them (rare in a first scan)
        self._flush()
        self._q(f"DELETE FROM {table}_terms WHERE doc IN (SELECT doc FROM {table}_len "
                "WHERE file_id = %s)", (file_id,))
        self._q(f"DELETE FROM {table}_len WHERE file_id = %s", (file_id,))
        self._stats.pop(table, None)

    def _put_note(self, file_id: int, relpath: str, meta: Any, body: str | None) -> None:
        from loomcli.extract import markdown

        at = chars = 0
        if meta is not None and meta.body_start and body is not None:
            chars = meta.body_start
            at = len(body[:chars].encode("utf-8"))
        # Sent with the postings (_flush): a statement per file was a round trip each.
        self._pending.setdefault("notes", []).append(
            (file_id, markdown.name_key(relpath), at, chars, meta.fields() if meta else ""))
        if meta is None:
            return
        self._pending.setdefault("tags", []).extend(
            (file_id, tag) for tag in dict.fromkeys(meta.tags))
        self._pending.setdefault("links", []).extend(
            (file_id, n, link.target, markdown.name_key(link.target), link.heading,
             link.alias, link.line) for n, link in enumerate(meta.links))
        self._pending.setdefault("aliases", []).extend(
            (file_id, name) for name in meta.names())

    def _drop_text(self, file_id: int) -> None:
        self._flush()
        self._unindex("chunk", file_id)
        self._unindex("fts", file_id)
        for table in ("notes", "tags", "links", "aliases", "vectors"):
            self._q(f"DELETE FROM {table} WHERE file_id = %s", (file_id,))
        self._q("DELETE FROM docs WHERE id = %s", (file_id,))  # its blocks with it

    def replace_content(self, file_id: int, size: int, mtime_ns: int, digest: bytes,
                        doc: Extracted, ocr: str | None = None) -> None:
        self._drop_text(file_id)
        self._q("UPDATE files SET size = %s, mtime_ns = %s, hash = %s, title = %s, "
                "content_len = %s, indexed_at = %s, error = NULL, skip = NULL, ocr = %s "
                "WHERE id = %s", (size, mtime_ns, digest, doc.title, utf8_len(doc.text),
                                  time.time(), ocr, file_id))
        self._insert_doc(file_id, doc)

    def _record(self, column: str, root_id: int, relpath: str, kind: str, size: int,
                mtime_ns: int, digest: bytes | None, reason: str, file_id: int | None,
                ocr: str | None) -> None:
        if file_id is None:
            self._q(f"INSERT INTO files (root_id, relpath, kind, size, mtime_ns, hash, "
                    f"{column}, ocr) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                    f"ON CONFLICT (root_id, relpath) DO UPDATE SET {column} = EXCLUDED."
                    f"{column}", (root_id, relpath, kind, size, mtime_ns, digest, reason, ocr))
        elif column == "error":
            self._q("UPDATE files SET size = %s, mtime_ns = %s, error = %s, skip = NULL, "
                    "ocr = %s WHERE id = %s", (size, mtime_ns, reason, ocr, file_id))
        else:
            self._q("UPDATE files SET size = %s, mtime_ns = %s, hash = %s, error = NULL, "
                    "skip = %s, ocr = %s WHERE id = %s",
                    (size, mtime_ns, digest, reason, ocr, file_id))

    def record_failure(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                       digest: bytes | None, error: str, file_id: int | None,
                       ocr: str | None = None) -> None:
        self._record("error", root_id, relpath, kind, size, mtime_ns, digest, error, file_id,
                     ocr)

    def record_skip(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                    digest: bytes | None, reason: str, file_id: int | None,
                    ocr: str | None = None) -> None:
        self._record("skip", root_id, relpath, kind, size, mtime_ns, digest, reason, file_id,
                     ocr)

    def move(self, file_id: int, root_id: int, relpath: str, size: int, mtime_ns: int) -> None:
        from loomcli.extract import markdown

        self._q("UPDATE files SET root_id = %s, relpath = %s, size = %s, mtime_ns = %s "
                "WHERE id = %s", (root_id, relpath, size, mtime_ns, file_id))
        self._q("UPDATE notes SET name = %s WHERE file_id = %s",
                (markdown.name_key(relpath), file_id))

    def remove(self, file_id: int) -> None:
        self._drop_text(file_id)
        self._q("DELETE FROM files WHERE id = %s", (file_id,))

    def begin_scan(self, roots: list[str]) -> int:
        """A first scan (no postings yet) writes its postings without their indexes, which
        are made once at its end (_make_indexes): kept up row by row they were two thirds
        of the server's time. A scan that died before the end left them missing: made now."""
        have, empty, schema = self._q(
            "SELECT (SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname = ANY(%s)), NOT EXISTS (SELECT 1 FROM fts_len), "
            "quote_ident(current_schema())", (list(POSTINGS_INDEXES),)).fetchone()
        if empty:
            for name in POSTINGS_INDEXES:  # this schema's: never one further along the path
                self._q(f"DROP INDEX IF EXISTS {schema}.{name}")
            self._bulk = True
        elif have < len(POSTINGS_INDEXES):
            self._bulk = True
            self._make_indexes()
        return int(self._q("INSERT INTO scans (started_at, roots) VALUES (%s, %s) "
                           "RETURNING id", (time.time(), json.dumps(roots))).fetchone()[0])

    def _make_indexes(self) -> None:
        """The postings' indexes that begin_scan dropped, made in one pass each (inside the
        caller's transaction; readers go on meanwhile, writers wait)."""
        if not self._bulk:
            return
        self._flush()
        for name, columns in POSTINGS_INDEXES.items():
            self._q(f"CREATE INDEX IF NOT EXISTS {name} ON {columns}")
        self._q("ANALYZE fts_terms, fts_len")  # the planner's figures for the first searches
        self._bulk = False

    def finish_scan(self, scan_id: int, report: dict[str, object]) -> None:
        self._make_indexes()
        super().finish_scan(scan_id, report)
        self._index_vectors()

    def _index_vectors(self) -> None:
        """pgvector's HNSW index of each vector size the scan (or migration) stored
        first: built once, over all of them (postgres_vectors.put)."""
        if self.pgvector() is not None:
            pv.index_sizes(self.pg, self.pgvector() or ())

    def check(self) -> None:
        self._q("SELECT count(*) FROM docs").fetchone()

    def optimize(self) -> None:
        self._make_indexes()
        self._index_vectors()
        if not self.in_transaction:
            self._q("ANALYZE")

    # -- grep's trigram index: the server keeps it as blocks are written -----------------

    def grams_pending(self) -> tuple[int, int]:
        """(files, bytes of text) not in grep's trigram index yet."""
        self._flush()
        files, size = self._q(
            "SELECT count(*), coalesce(sum(f.content_len), 0) FROM files f WHERE f.id IN "
            "(SELECT file_id FROM blocks WHERE NOT indexed)").fetchone()
        return int(files), int(size)

    def grams_batch(self, max_bytes: int) -> list[int]:
        self._flush()
        ids: list[int] = []
        total = 0
        for fid, size in self._q(
                "SELECT f.id, f.content_len FROM files f WHERE f.id IN "
                "(SELECT file_id FROM blocks WHERE NOT indexed) ORDER BY f.id"):
            if ids and total + size > max_bytes:
                break
            ids.append(int(fid))
            total += int(size)
        return ids

    def index_grams(self, file_ids: Iterable[int]) -> None:
        """Put these texts' blocks into the trigram index (inside the caller's
        transaction)."""
        self._flush()
        self._q("UPDATE blocks SET indexed = true WHERE file_id = ANY(%s) AND NOT indexed",
                (list(file_ids),))

    def optimize_grams(self) -> None:
        return None  # GIN merges its pending list itself (VACUUM, or when it is full)

    def block_starts(self, file_id: int) -> list[tuple[int, int]] | None:
        self._flush()
        rows = [(int(a), int(b)) for a, b in self._q(
            "SELECT start, line FROM blocks WHERE file_id = %s ORDER BY n", (file_id,))]
        return rows if len(rows) > 1 else None

    def candidates(self, need: Need) -> dict[int, set[int] | None]:
        """The blocks that may hold a match: those holding each literal `need` requires
        (trigrams.required), asked of the pg_trgm GIN index (_condition). One statement."""
        self._flush()
        where, params = _condition(need)
        found: dict[int, set[int] | None] = {}
        for fid, n in self._q(f"SELECT file_id, n FROM blocks WHERE indexed AND ({where}) "
                              "UNION ALL SELECT DISTINCT file_id, -1 FROM blocks "
                              "WHERE NOT indexed", params):
            if n < 0:
                found[int(fid)] = None  # not in grep's index yet: read whole
                continue
            blocks = found.setdefault(int(fid), set())
            if blocks is not None:
                blocks.add(int(n))
        return found

    def iter_texts(self, file_ids: list[int] | None = None,
                   wanted: dict[int, set[int] | None] | None = None,
                   by_blocks: bool = False
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """As the SQLite store's: (file id, display path, pieces, pages JSON) in path
        order; with `by_blocks` only the blocks `wanted` names, adjacent ones joined. The
        texts are read a group of files at a time (about READ_BYTES), one statement each:
        a statement per file cost a cold grep of the kernel docs 0.8 s."""
        for group in self._groups(file_ids, READ_FILES):
            yield from self._texts(group, wanted if by_blocks else None, by_blocks)

    def _groups(self, file_ids: list[int] | None, first: int) -> Iterator[list[int]]:
        """The files (those of `file_ids`, None: all) in path order, in groups of about
        READ_BYTES of text or READ_FILES files; the first of at most `first` files, each
        next one four times as many. Every file: asked a group at a time along the
        (root, path) index, so a reader that stops early never lists them all."""
        self._flush()
        self.roots()  # display paths need them: asked now, not between a group's rows
        most = min(first, READ_FILES)
        if file_ids is not None:
            order = self._q("SELECT f.id, f.content_len FROM files f JOIN docs d ON "
                            "d.id = f.id WHERE f.id = ANY(%s) ORDER BY f.root_id, f.relpath",
                            (list(file_ids),)).fetchall()
            pages: Iterable[list[Any]] = [order]
        else:
            pages = self._pages_in_path_order(most)
        group: list[int] = []
        size = 0
        for page in pages:
            for fid, length, *_ in page:
                group.append(fid)
                size += length
                if size >= READ_BYTES or len(group) >= most:
                    yield group
                    group, size, most = [], 0, min(most * 4, READ_FILES)
        if group:
            yield group

    def _pages_in_path_order(self, first: int) -> Iterator[list[Any]]:
        """Every file with a text, in path order: pages of (id, length, root, path),
        the first of `first` files, each next one four times as many (READ_FILES at
        most), each after the last one's path."""
        size, after = first, None
        while True:
            page = self._q(
                "SELECT f.id, f.content_len, f.root_id, f.relpath FROM files f JOIN docs d "
                "ON d.id = f.id" + ("" if after is None else
                                    " WHERE (f.root_id, f.relpath) > (%s, %s)") +
                " ORDER BY f.root_id, f.relpath LIMIT %s",
                [*(after or ()), size]).fetchall()
            yield page
            if len(page) < size:
                return
            after, size = page[-1][2:], min(size * 4, READ_FILES)

    def grep_texts(self, need: Need, file_ids: list[int] | None, by_blocks: bool
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """The seam's. First the trigram index is asked for at most PROBE_BLOCKS + 1
        candidate blocks: fewer, and they are all of them (a rare literal: one indexed
        lookup, then their texts). Else the literal is common, and the server's check
        of every candidate costs more than the reading (ILIKE over all the kernel docs'
        blocks: 0.6 s for `the`): the files are asked for in path order, a group at a
        time (PROBE_FILES first, then four times as many), each group's candidate
        blocks with their text in one statement — a grep that stops at its limit reads
        the first groups only. A group where fewer than half the files hold the literal
        (`MODULE_LICENSE`: common, but in few files) ends that: the rest is asked of the
        index at once, as candidates() does, and read in path order."""
        where, params = _condition(need)
        found: dict[int, set[int] | None] = {}
        indexed = 0
        for fid, n in self._q(f"(SELECT file_id, n FROM blocks WHERE indexed AND ({where}) "
                              f"LIMIT {PROBE_BLOCKS + 1}) UNION ALL (SELECT DISTINCT "
                              "file_id, -1 FROM blocks WHERE NOT indexed)", params):
            if n < 0:
                found[int(fid)] = None  # not in grep's index yet: read whole
                continue
            indexed += 1
            blocks = found.setdefault(int(fid), set())
            if blocks is not None:
                blocks.add(int(n))
        if indexed <= PROBE_BLOCKS:
            ids = [fid for fid in (found if file_ids is None else file_ids) if fid in found]
            yield from self.iter_texts(ids, found, by_blocks)
            return
        done: set[int] = set()
        for group in self._groups(file_ids, PROBE_FILES):
            texts = self._texts(group, None, by_blocks, (where, params))
            yield from texts
            done.update(group)
            if len(texts) < len(group) * DENSE:
                break  # sparse here: the server checks only the index's candidates
        else:
            return
        found = self.candidates(need)
        ids = [fid for fid in (found if file_ids is None else file_ids)
               if fid in found and fid not in done]
        yield from self.iter_texts(ids, found, by_blocks)


    def _texts(self, group: list[int], wanted: dict[int, set[int] | None] | None,
               by_blocks: bool, condition: tuple[str, list[str]] | None = None
               ) -> list[tuple[int, str, list[tuple[int, int, bytes]], str | None]]:
        """The texts of a group of files (iter_texts); with `condition` (grep's
        required literals as SQL: _condition), only the files, or with `by_blocks` the
        blocks, that hold them (or are not in grep's index yet)."""
        sql = ("SELECT f.id, f.root_id, f.relpath, d.pages, d.blocks, b.n, b.start, b.line, "
               "convert_to(b.body, 'UTF8') FROM files f JOIN docs d ON d.id = f.id "
               "JOIN blocks b ON b.file_id = f.id WHERE f.id = ANY(%s)")
        params: list[Any] = [group]
        if condition is not None:
            where, literals = condition
            if by_blocks:
                sql += f" AND (NOT b.indexed OR ({where}))"
            else:
                sql += (" AND b.file_id IN (SELECT file_id FROM blocks WHERE file_id = "
                        f"ANY(%s) AND (NOT indexed OR ({where})))")
                params.append(group)
            params += literals
        chosen = [fid for fid in group if wanted and wanted.get(fid) is not None]
        if chosen and wanted:
            pairs = [(fid, n) for fid in chosen for n in wanted[fid] or ()]
            sql += (" AND (d.blocks = 1 OR NOT b.file_id = ANY(%s) OR (b.file_id, b.n) IN "
                    "(SELECT * FROM unnest(%s::bigint[], %s::integer[])))")
            params += [chosen, [fid for fid, _ in pairs], [n for _, n in pairs]]
        with self.pg.cursor(binary=True) as cur:
            rows = cur.execute(sql + " ORDER BY f.root_id, f.relpath, b.n", params).fetchall()
        out = []
        start = 0
        for i in range(1, len(rows) + 1):
            if i == len(rows) or rows[i][0] != rows[start][0]:
                out.append(self._text_of(rows[start:i], by_blocks))
                start = i
        return out

    def _text_of(self, rows: list[Any], by_blocks: bool
                 ) -> tuple[int, str, list[tuple[int, int, bytes]], str | None]:
        """One file of iter_texts from its rows: whole, or its blocks in runs."""
        fid, root_id, rel, pages, count = rows[0][:5]
        shown = self.display_path(root_id, rel)
        if not (by_blocks and count > 1):
            return fid, shown, [(0, 1, b"".join(bytes(r[8]) for r in rows))], pages
        runs: list[Any] = []  # [start, line, next n, [bytes]]
        for *_, n, start, line, body in rows:
            if runs and runs[-1][2] == n and sum(map(len, runs[-1][3])) < RUN_BYTES:
                runs[-1][3].append(bytes(body))
                runs[-1][2] = n + 1
            else:
                runs.append([int(start), int(line), n + 1, [bytes(body)]])
        return fid, shown, [(a, b, b"".join(parts)) for a, b, _, parts in runs], pages

    def text_bytes(self, file_id: int, offset: int = 0, length: int | None = None) -> bytes:
        """A byte range of a file's UTF-8 text: only the blocks it spans are read."""
        self._flush()
        offset = max(offset, 0)
        end = offset if length is None else offset + max(length, 0)
        sql = ("SELECT start, convert_to(body, 'UTF8') FROM blocks WHERE file_id = %s "
               "AND n >= (SELECT coalesce(max(n), 0) FROM blocks WHERE file_id = %s AND "
               "start <= %s)" + ("" if length is None else " AND start <= %s") +
               " ORDER BY n")
        params = [file_id, file_id, offset] + ([] if length is None else [end])
        with self.pg.cursor(binary=True) as cur:
            rows = cur.execute(sql, params).fetchall()
        if not rows:
            return b""
        first = int(rows[0][0])
        data = b"".join(bytes(r[1]) for r in rows)
        start = offset - first
        return data[start:] if length is None else data[start:start + length]

    def pages(self, file_id: int) -> list[int] | None:
        memo = self._memo()
        if memo is not None and ("file", file_id) in memo:  # read with the hits
            pages = memo[("file", file_id)][0]
            return json.loads(pages) if pages else None
        self._flush()
        row = self._q("SELECT pages FROM docs WHERE id = %s", (file_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    # -- notes -------------------------------------------------------------------------------

    def tagged(self, tags: Sequence[str]) -> list[int]:
        ids: set[int] | None = None
        for tag in tags:
            t = tag.strip().lstrip("#").strip("/").lower()
            found = {r[0] for r in self._q(
                "SELECT file_id FROM tags WHERE tag = %s OR (tag > %s AND tag < %s)",
                (t, t + "/", t + "0"))}
            ids = found if ids is None else ids & found
        return sorted(ids or ())

    def tags_of(self, file_id: int) -> list[str]:
        return [r[0] for r in self._q(
            "SELECT tag FROM tags WHERE file_id = %s ORDER BY tag", (file_id,))]

    def tags_for(self, file_ids: Sequence[int]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {fid: [] for fid in file_ids}
        for fid, tag in self._q("SELECT file_id, tag FROM tags WHERE file_id = ANY(%s) "
                                "ORDER BY file_id, tag", (list(file_ids),)):
            out[fid].append(tag)
        return out

    def _notes_named(self, names: Sequence[str]) -> Iterable[tuple[int, int, str]]:
        return self._q(
            "SELECT f.id, f.root_id, f.relpath FROM notes n JOIN files f "
            "ON f.id = n.file_id WHERE n.name = ANY(%s) AND f.indexed_at IS NOT NULL",
            (list(names),)).fetchall()

    def _notes_aliased(self, keys: Sequence[str]) -> Iterable[tuple[int, int, str]]:
        return self._q(
            "SELECT f.id, f.root_id, f.relpath FROM aliases a JOIN files f "
            "ON f.id = a.file_id WHERE a.name = ANY(%s) AND f.indexed_at IS NOT NULL",
            (list(keys),)).fetchall()

    def links_of(self, file_id: int) -> list[tuple[str, str | None, str | None, int]]:
        return [(r[0], r[1], r[2], r[3]) for r in self._q(
            "SELECT target, heading, alias, line FROM links WHERE file_id = %s ORDER BY n",
            (file_id,))]

    def _link_names(self, file_ids: Sequence[int]) -> Iterable[tuple[str, bool]]:
        """The names these notes are linked by, (name, whether an alias): one statement,
        none after hits_for (it reads them with the hits)."""
        ids = list(file_ids)
        memo = self._memo()
        if memo is not None and all(("file", f) in memo for f in ids):
            return [(memo[("file", f)][1], False) for f in ids
                    if memo[("file", f)][1] is not None] + [
                (alias, True) for f in ids for alias in memo[("file", f)][3]]
        return self._q("SELECT name, false FROM notes WHERE file_id = ANY(%s) "
                       "UNION ALL SELECT name, true FROM aliases WHERE file_id = ANY(%s)",
                       (ids, ids)).fetchall()

    def _links_named(self, names: Sequence[str]) -> Iterable[tuple[int, int, str, str, int]]:
        return self._q(
            "SELECT l.file_id, f.root_id, f.relpath, l.target, min(l.line) FROM links l "
            "JOIN files f ON f.id = l.file_id WHERE l.name = ANY(%s) "
            "AND f.indexed_at IS NOT NULL GROUP BY l.file_id, f.root_id, f.relpath, l.target",
            (list(names),)).fetchall()

    # -- BM25 (postgres_words.py) ------------------------------------------------------------

    def _totals(self, table: str) -> tuple[int, int]:
        self._flush()
        """(documents, tokens) of a BM25 table, as FTS5 keeps them."""
        if table not in self._stats or self.in_transaction:
            n, total = self._q(f"SELECT count(*), coalesce(sum(total), 0) FROM {table}_len"
                               ).fetchone()
            self._stats[table] = (int(n), int(total))
        return self._stats[table]

    def _hits(self, table: str, order: list[bm.Phrase], columns: tuple[str, ...],
              weights: tuple[float, ...], lengths: bool = True
              ) -> tuple[dict[int, dict[int, float]], dict[int, int]]:
        """Each phrase's weighted frequency in each document that holds it (by its place
        in `order`), and those documents' lengths: one statement for every phrase of a
        query, their lengths and, once, the table's totals (a statement each was a round
        trip each: a dozen for a cold search)."""
        tokens = [bm.words().tokens(p.text) for p in order]
        exact = sorted({t for p, ts in zip(order, tokens, strict=True)
                        for i, t in enumerate(ts) if not (p.prefix and i == len(ts) - 1)})
        starts = sorted({ts[-1] for p, ts in zip(order, tokens, strict=True)
                         if p.prefix and ts})
        found: dict[int, dict[int, float]] = {i: {} for i in range(len(order))}
        if not exact and not starts:
            return found, {}
        with_pos = any(len(ts) > 1 for ts in tokens)
        memo = self._memo()
        keys = [("=", t) for t in exact] + [(">", t) for t in starts]
        known = {} if memo is None else {k: memo[("post", table, k)] for k in keys
                                         if ("post", table, k) in memo}
        missing = [k for k in keys if k not in known or known[k][0] < with_pos
                   or known[k][1] < lengths]
        rows: list[Any] = []
        if missing:
            rows = self._postings(table, missing, with_pos, lengths)
            if memo is not None:
                for key in missing:
                    memo[("post", table, key)] = (with_pos, lengths,
                                                  [r for r in rows if _holds(key, r[0])])
        reused = [kept for key, (_, _, kept) in known.items() if key not in missing]
        if starts and reused:  # a term may answer a prefix and itself: each row once
            seen = {(r[0], r[1], r[2]) for r in rows}
            for kept in reused:
                rows += [r for r in kept if (r[0], r[1], r[2]) not in seen]
                seen.update((r[0], r[1], r[2]) for r in kept)
        else:  # each term's rows are its own
            for kept in reused:
                rows = rows + kept
        size = {doc: int(total) for _, doc, _, _, _, total in rows if total is not None}
        for i, (phrase, toks) in enumerate(zip(order, tokens, strict=True)):
            if not toks:
                continue
            cols = set(range(len(columns))) if phrase.column is None else \
                {columns.index(phrase.column)} if phrase.column in columns else set()
            last = toks[-1] if phrase.prefix else None
            wanted = set(toks) if last is None else set(toks[:-1])

            def ours(term: str, wanted: set[str] = wanted, last: str | None = last) -> bool:
                return term in wanted or (last is not None
                                          and last <= term < last + "\U0010ffff")

            mine = [r for r in rows if r[2] in cols and ours(r[0])]
            out = found[i]
            if len(toks) == 1:
                for _, doc, col, tf, _, _ in mine:
                    out[doc] = out.get(doc, 0.0) + weights[col] * tf
                continue
            hits = bm.phrase_hits([(doc, col, term, [int(p) for p in pos.split(",")])
                                   for term, doc, col, _, pos, _ in mine], toks, phrase.prefix)
            for (doc, col), n in hits.items():
                out[doc] = out.get(doc, 0.0) + weights[col] * n
        return found, size

    def _postings(self, table: str, keys: list[tuple[str, str]], with_pos: bool,
                  lengths: bool) -> list[Any]:
        """The postings rows (term, doc, col, tf, positions, doc length) of these terms
        (`=`) and term prefixes (`>`), in one statement; with the table's totals, and the
        file count, when this request has not asked for them yet."""
        exact = [t for kind, t in keys if kind == "="]
        conds: list[str] = ["t.term = ANY(%s)"]
        params: list[Any] = [exact]
        for kind, token in keys:
            if kind == ">":
                conds.append("(t.term >= %s AND t.term < %s)")
                params += [token, token + "\U0010ffff"]
        positions = "t.pos" if with_pos else "NULL"
        totals = lengths and (table not in self._stats or self.in_transaction)
        sql = ("SELECT " + ("n.docs, n.tokens, n.files, " if totals else "")
               + f"t.term, t.doc, t.col, t.tf, {positions}, "
               + (f"l.total FROM {table}_terms t LEFT JOIN {table}_len l ON l.doc = t.doc"
                  if lengths else f"NULL FROM {table}_terms t")
               + (" CROSS JOIN (SELECT count(*) AS docs, coalesce(sum(total), 0) AS tokens, "
                  f"(SELECT count(*) FROM docs) AS files FROM {table}_len) n"
                  if totals else "")
               + f" WHERE {' OR '.join(conds)}")
        rows = self._q(sql, params).fetchall()
        if totals and rows:
            self._stats[table] = (int(rows[0][0]), int(rows[0][1]))
            memo = self._memo()
            if memo is not None:
                memo["files"] = int(rows[0][2])
        return [r[3:] for r in rows] if totals else rows

    def _bm25(self, table: str, match: str, columns: tuple[str, ...],
              weights: tuple[float, ...], among: Sequence[int] | None,
              doc_file: Any = None) -> dict[int, float]:
        """Score of every document the FTS5 expression matches (among these files)."""
        tree = bm.parse(match)
        if tree is None:
            return {}
        order = bm.phrases(tree)
        found, lengths = self._hits(table, order, columns, weights)
        docs = bm.matching(tree, found, order)
        if among is not None:
            allowed = set(among)
            docs = {d for d in docs if (doc_file(d) if doc_file else d) in allowed}
        if not docs:
            return {}
        rows, tokens = self._totals(table)
        avgdl = tokens / rows if rows else 1.0
        idfs = [bm.idf(rows, len(found[i])) for i in range(len(order))]
        scores = {}
        for doc in docs:
            length = lengths.get(doc, 0)
            scores[doc] = sum(bm.bm25(found[i][doc], idfs[i], length, avgdl)
                              for i in range(len(order)) if doc in found[i])
        return scores

    def rank(self, query: Query, limit: int, among: Sequence[int] | None = None
             ) -> list[tuple[int, float]]:
        """(file id, BM25 score) best first, as FTS5 ranks the same query (its MATCH
        written by the SQLite store, read back here)."""
        scores = self._bm25("fts", lite.match_of(query), ("title", "body", "grams"),
                            FILE_WEIGHTS, among)
        best = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [(int(d), float(s)) for d, s in best]

    def rank_passages(self, query: Query, limit: int, among: Sequence[int] | None = None
                      ) -> list[tuple[int, int, float]]:
        scores = self._bm25("chunk", lite.match_of(query), ("body", "grams"),
                            PASSAGE_WEIGHTS, among, doc_file=lambda d: d & FILE_MASK)
        best = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [(int(d) & FILE_MASK, int(d) >> CHUNK_SHIFT, float(s)) for d, s in best]

    def frequency(self, query: Query, cap: int) -> int:
        tree = bm.parse(lite.match_of(query))
        if tree is None:
            return 0
        order = bm.phrases(tree)
        found, _ = self._hits("fts", order, ("title", "body", "grams"), FILE_WEIGHTS,
                              lengths=False)
        return min(cap, len(bm.matching(tree, found, order)))

    def file_count(self) -> int:
        memo = self._memo()
        if memo is not None and "files" in memo:  # with this request's first ranking
            return int(memo["files"])
        self._flush()
        return int(self._q("SELECT count(*) FROM docs").fetchone()[0])

    def hits_for(self, file_ids: list[int]) -> dict[int, tuple[str, str, int, int]]:
        """The seam's; with each file's pages and note row kept for this request (the
        hits' pages, backlinks and excerpts ask for them next)."""
        out = {}
        memo = self._memo()
        for fid, root_id, rel, title, n, body_at, body_chars, name, pages, aliases in self._q(
                "SELECT f.id, f.root_id, f.relpath, f.title, f.content_len, "
                "coalesce(n.body_at, 0), coalesce(n.body_chars, 0), n.name, d.pages, "
                "(SELECT array_agg(a.name) FROM aliases a WHERE a.file_id = f.id) "
                "FROM files f LEFT JOIN notes n ON n.file_id = f.id LEFT JOIN docs d "
                "ON d.id = f.id WHERE f.id = ANY(%s)", (list(file_ids),)):
            out[fid] = (self.display_path(root_id, rel), title, int(n), int(body_at))
            if memo is not None:
                memo[("file", fid)] = (pages, name, (int(body_at), int(body_chars)),
                                       aliases or [])
        return out

    def text_ranges(self, ranges: Sequence[tuple[int, int, int]]) -> list[bytes]:
        """The seam's, in one statement: each range's blocks (text_bytes')."""
        self._flush()
        if not ranges:
            return []
        sql = ("SELECT r.k, b.start, convert_to(b.body, 'UTF8') FROM unnest("
               "%s::bigint[], %s::bigint[], %s::bigint[]) WITH ORDINALITY AS r(fid, lo, hi, k) "
               "JOIN blocks b ON b.file_id = r.fid AND b.start <= r.hi AND b.n >= (SELECT "
               "coalesce(max(n), 0) FROM blocks WHERE file_id = r.fid AND start <= r.lo) "
               "ORDER BY r.k, b.n")
        starts = [max(o, 0) for _, o, _ in ranges]
        ends = [o + max(n, 0) for o, (_, _, n) in zip(starts, ranges, strict=True)]
        with self.pg.cursor(binary=True) as cur:
            rows = cur.execute(sql, [[f for f, _, _ in ranges], starts, ends]).fetchall()
        parts: dict[int, list[Any]] = {}
        for k, start, body in rows:
            parts.setdefault(int(k) - 1, []).append((int(start), bytes(body)))
        out = []
        for i, (offset, end) in enumerate(zip(starts, ends, strict=True)):
            got = parts.get(i)
            if not got:
                out.append(b"")
                continue
            data = b"".join(b for _, b in got)
            out.append(data[offset - got[0][0]:end - got[0][0]])
        return out

    def status(self) -> dict[str, object]:
        self._flush()
        counts = dict(self._q("SELECT kind, count(*) FROM files WHERE indexed_at IS NOT NULL "
                              "GROUP BY kind").fetchall())
        failed = self._q("SELECT count(*) FROM files WHERE error IS NOT NULL").fetchone()[0]
        skipped = self._q("SELECT count(*) FROM files WHERE skip IS NOT NULL").fetchone()[0]
        text_bytes = self._q("SELECT coalesce(sum(content_len), 0) FROM files").fetchone()[0]
        last = self._q("SELECT started_at, finished_at, roots, report FROM scans "
                       "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1").fetchone()
        size = self._q("SELECT pg_database_size(current_database())").fetchone()[0]
        return {
            "roots": [{"name": r.name, "path": r.path} for r in self.roots()],
            "files": sum(counts.values()),
            "notes": counts.get("note", 0),
            "pdfs": counts.get("pdf", 0),
            "documents": sum(n for kind, n in counts.items() if kind not in ("note", "pdf")),
            "failed": failed,
            "skipped": skipped,
            "text_bytes": int(text_bytes),
            "index_bytes": int(size),
            "last_scan": None if last is None else {
                "started_at": last[0], "finished_at": last[1],
                "roots": json.loads(last[2]), "report": json.loads(last[3] or "null"),
            },
        }

    # -- vectors -------------------------------------------------------------------------------

    def needing_vectors(self, model: str, dim: int | None = None) -> list[int]:
        return [r[0] for r in self._q(
            "SELECT f.id FROM files f LEFT JOIN vectors v ON v.file_id = f.id "
            "WHERE f.indexed_at IS NOT NULL AND f.content_len > 0 "
            "AND (v.model IS NULL OR v.model != %s OR (%s::integer IS NOT NULL AND "
            "v.dim != %s AND v.dim != 0)) ORDER BY f.content_len, f.id", (model, dim, dim))]

    def vector_dims(self, model: str) -> dict[int, int]:
        return dict(self._q("SELECT dim, count(*) FROM vectors WHERE model = %s GROUP BY dim",
                            (model,)).fetchall())

    def put_vectors(self, file_id: int, model: str, dim: int, spans: bytes, vecs: bytes,
                    scales: bytes) -> None:
        self._unindex("chunk", file_id)
        cur = self._q(
            "INSERT INTO vectors (file_id, model, dim, spans, vecs, scales) "
            "SELECT id, %s, %s, %s, %s, %s FROM files WHERE id = %s AND indexed_at IS NOT NULL "
            "ON CONFLICT (file_id) DO UPDATE SET model = EXCLUDED.model, dim = EXCLUDED.dim, "
            "spans = EXCLUDED.spans, vecs = EXCLUDED.vecs, scales = EXCLUDED.scales",
            (model, dim, spans, vecs, scales, file_id))
        if cur.rowcount and self.pgvector() is not None:
            pv.put(self.pg, file_id, model, dim, spans, vecs, scales)
        if cur.rowcount and spans:
            body = self.text_bytes(file_id)
            for n, text, grams in chunk_texts(body, spans):
                self._index("chunk", file_id + n, file_id, [text, grams])

    def vector_counts(self) -> dict[str, int]:
        return dict(self._q("SELECT model, count(*) FROM vectors GROUP BY model").fetchall())

    def conversation_rows(self, owner: str) -> pc.ConversationRows:
        """`owner`'s conversations, kept in this database (every server shares them)."""
        return pc.ConversationRows(self.pg, owner)

    def pgvector(self) -> tuple[int, ...] | None:
        """pgvector's version when the server ranks the vectors (postgres_vectors.py),
        else None. Asked once per connection."""
        if not self._pgvector_asked:
            self._pgvector, self._pgvector_asked = pv.version(self.pg), True
        return self._pgvector

    def vector_engine(self) -> str:
        return "loom" if self.pgvector() is None else "pgvector"

    def nearest(self, model: str, dim: int, query: Any, limit: int,
                among: Sequence[int] | None = None
                ) -> list[tuple[int, int, int, int, float]] | None:
        """The closest passages, ranked by pgvector (None without it: loom ranks)."""
        version = self.pgvector()
        if version is None:
            return None
        if not self._hnsw_set:
            pv.settings(self.pg, version)
            self._hnsw_set = True
        return pv.nearest(self.pg, version, model, dim, query, limit, among)

    def passage_counts(self, model: str, dim: int) -> dict[int, int]:
        return {int(f): int(n) for f, n in self._q(
            "SELECT file_id, length(scales) / 4 FROM vectors WHERE model = %s AND dim = %s",
            (model, dim))}

    def vector_generation(self) -> tuple[float, int]:
        born, generation = self._q(
            "SELECT (SELECT applied_at FROM migrations WHERE name = '001_initial'), "
            "generation FROM vector_state").fetchone()
        return float(born or 0.0), int(generation)

    def iter_vectors(self, model: str, dim: int | None = None
                     ) -> Iterator[tuple[int, int, bytes, bytes, bytes]]:
        for fid, d, spans, vecs, scales in self._q(
                "SELECT file_id, dim, spans, vecs, scales FROM vectors WHERE model = %s "
                "AND (%s::integer IS NULL OR dim = %s)", (model, dim, dim)):
            yield fid, d, bytes(spans), bytes(vecs), bytes(scales)

    def body_start(self, file_id: int) -> tuple[int, int]:
        memo = self._memo()
        if memo is not None and ("file", file_id) in memo:  # read with the hits
            return tuple(memo[("file", file_id)][2])
        return super().body_start(file_id)

    def vectors_of(self, file_id: int, model: str) -> tuple[int, bytes, bytes, bytes] | None:
        row = self._q("SELECT dim, spans, vecs, scales FROM vectors WHERE file_id = %s "
                      "AND model = %s", (file_id, model)).fetchone()
        return None if row is None else (row[0], bytes(row[1]), bytes(row[2]), bytes(row[3]))


def _blocks(file_id: int, text: str) -> list[tuple[int, int, int, int, str]]:
    """The rows of a text's grep blocks, cut as the SQLite store cuts them (after a
    newline past GREP_BLOCK_CHARS characters): (file id, n, first byte, first line, text).
    An empty text is one empty block."""
    rows: list[tuple[int, int, int, int, str]] = []
    pos = byte = 0
    line = 1
    while pos < len(text) or not rows:
        cut = text.find("\n", pos + GREP_BLOCK_CHARS - 1)
        end = len(text) if cut < 0 else cut + 1
        block = text[pos:end]
        rows.append((file_id, len(rows), byte, line, block))
        byte += utf8_len(block)
        line += block.count("\n")
        pos = end
    return rows


class _Turns:
    """grep's index builder's side: it holds the builder's lock while it lives (`loom
    status` asks), and takes the write lock batch by batch, never waiting for it."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        store._q("SELECT pg_advisory_lock_shared(%s, %s)", store.lock(BUILDER_LOCK))

    def take(self) -> bool:
        return bool(self.store._q("SELECT pg_try_advisory_lock(%s, %s)",
                                  self.store.lock(WRITE_LOCK)).fetchone()[0])

    def give_back(self) -> None:
        self.store._q("SELECT pg_advisory_unlock(%s, %s)", self.store.lock(WRITE_LOCK))

    def close(self) -> None:
        self.store._q("SELECT pg_advisory_unlock_shared(%s, %s)",
                      self.store.lock(BUILDER_LOCK))


def _holds(key: tuple[str, str], term: str) -> bool:
    """Whether a postings row of `term` answers a key of _postings."""
    kind, token = key
    return term == token if kind == "=" else token <= term < token + "\U0010ffff"


_ASCII_RUN = re.compile(r"[\x01-\x7f]{3,}")  # (a NUL is no text PostgreSQL holds)


def _condition(need: Need | None) -> tuple[str, list[str]]:
    """What grep's required literals ask of a block's `body`, as SQL: each literal a
    case-insensitive regular expression of it escaped (`~*`: case-folded, as the trigram
    index of the SQLite store is; the server checks it two to three times faster than
    ILIKE, which folds the whole block first; pg_trgm's GIN index answers both). Only a literal's
    ASCII runs count: how PostgreSQL folds other letters depends on the database's
    locale, and a requirement may only ever be dropped, never be wrong."""
    if need is None:
        return "true", []
    kind, arg = need
    if kind == "lit":
        runs = _ASCII_RUN.findall(arg)
        if not runs:
            return "true", []
        escaped = ["".join(c if c.isalnum() else "\\" + c for c in r) for r in runs]
        return " AND ".join(["body ~* %s"] * len(runs)), escaped
    parts = [_condition(p) for p in arg]
    if kind == "or" and any(sql == "true" for sql, _ in parts):
        return "true", []
    kept = [(sql, ps) for sql, ps in parts if sql != "true"]
    if not kept:
        return "true", []
    joiner = " OR " if kind == "or" else " AND "
    return joiner.join(f"({sql})" for sql, _ in kept), [p for _, ps in kept for p in ps]


Store = PostgresStore  # what open_store (store/__init__.py) opens a server's url with
