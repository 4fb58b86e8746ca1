"""The SQLite store: the seam's first implementation (store/seam.py), one file, the
embedded default. Data access only: schema, upserts and FTS5 BM25 queries, built from a
parsed query (text.Query); the text rules are text.py's, a search's composition
retrieve.py's and hits.py's.

One SQLite file in WAL mode, so searches run while a scan writes. The extracted text is
stored once (`docs`); the FTS5 table indexes it as external content through a view, so
every change to a file's text goes through `_fts_delete` / `_fts_insert` with the exact
old values (FTS5's rule for external content).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path, PurePosixPath

from loomcli.errors import IndexMissingError, IndexStateError
from loomcli.extract import Extracted
from loomcli.migrations import (
    CHUNK_SHIFT,
    MIGRATIONS,
    check_owner,
    chunk_texts,
    migrate,
    put_note,
)
from loomcli.search import scripts
from loomcli.search.text import Query, acronym, parse, utf8_len, words_apart
from loomcli.store.common import FILE_COLUMNS, Common
from loomcli.store.rows import FileRow, Root

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.search.trigrams import Need
    from loomcli.store import locks

AMONG_BY_ROWID = 20  # a search among at most this many files asks FTS5 for each (_among)


def explain(exc: sqlite3.Error, path: Path | None) -> IndexStateError:
    """SQLite's error as the one line a user can act on."""
    where = f"the index at {path}" if path else "the index"
    reason = str(exc)
    if "disk is full" in reason:
        return IndexStateError(f"no space left to write {where} ({reason})",
                               "free some space, then run the scan again (what was "
                               "committed is consistent)")
    if "malformed" in reason or "not a database" in reason or "corrupt" in reason:
        return IndexStateError(f"{where} is damaged ({reason})",
                               "rebuild it: loom scan --rebuild (your files are not touched)")
    if "readonly" in reason or "unable to open" in reason:
        return IndexStateError(f"cannot write {where} ({reason})",
                               "check the permissions of its folder, or set db_path / "
                               "LOOM_HOME elsewhere")
    return IndexStateError(f"{where} cannot be used ({reason})",
                           "if this persists, rebuild it: loom scan --rebuild")


def quote_fts(query: str, operator: str = "AND", prefix: bool = False) -> str:
    """Any user text as a safe FTS5 query (text.parse, then match_of)."""
    return match_of(parse(query, operator, prefix))


def match_of(query: Query) -> str:
    """A parsed query as FTS5's MATCH: each word a quoted phrase (`e-mail` is "e mail",
    a phrase its words adjacent, in order); a run of CJK or Thai characters the phrase
    of its character pairs (scripts.py); an acronym (UPS, iOS) only itself, as written
    (text.EXACT_MARK, in the `grams` column); a prefix word the words it starts. No
    words: "" (no query)."""
    terms = [_fts_term(w, query.exact) for w in query.words]
    if query.prefix and terms:
        terms[-1] = _quoted(query.words[-1]) + "*"
    return f" {query.operator} ".join(filter(None, terms))


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def grams_match(need: Need) -> str:
    """grep's required literals as a MATCH of the trigram table: each literal's
    trigrams (trigrams.trigrams), all of them; "or" and "and" as written."""
    from loomcli.search.trigrams import trigrams  # grep's: a search starts without it

    kind, arg = need
    if kind == "lit":
        return " AND ".join(_quoted(g) for g in trigrams(arg))
    joiner = " OR " if kind == "or" else " AND "
    return joiner.join(f"({grams_match(p)})" for p in arg)


def _fts_term(word: str, exact: bool = True) -> str:
    """One query word (or phrase) as an FTS5 expression. An acronym (`exact`: unless
    the whole query is in capitals) matches only itself, as written."""
    form = acronym(word) if exact else None
    if form is not None:
        return f"grams : {_quoted(form)}"
    if not scripts.has_runs(word):
        return _quoted(word)
    rest, runs = scripts.split_word(word)
    parts = [_quoted(rest)] if re.search(r"\w", rest) else []
    for run in runs:
        # A lone character: the pairs it starts (a prefix query).
        parts.append(f"grams : {_quoted(run)}" + (" *" if len(run) == 1 else ""))
    return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"


# 16 KB pages for a new index: texts are long rows, read whole by grep, and a row read
# through a chain of 4 KB overflow pages cost half again as much (measured on the archive
# corpus: a grep verifying 43 MB of candidate text 73 -> 46 ms). 64 KB pages saved 7 ms
# more but make every small lookup read 64 KB.
PAGE_SIZE = 16384

# The FTS tables read a file's text from the tables themselves: scalar subqueries in a
# one-row VALUES, never INSERT … SELECT. A statement that may write several rows opens a
# savepoint, and FTS5 writes its pending terms to disk at every savepoint: one tiny
# segment per file, merged over and over (measured on 40,000 notes: the trigram index
# 4.3 -> 0.6 s, the BM25 index 1.4 -> 0.2 s).
# Inserts of values that may be huge, each in two forms: a one-row VALUES, and for a
# value over RELEASE_ABOVE one that inserts nothing when ?1 is NULL, so that running it
# again with NULLs releases SQLite's copy of the value (_release). That second form is an
# INSERT … SELECT, whose savepoint flushes FTS5 (above): only a huge value pays for it
# (with it for every file, the kernel docs' first scan spent 1.2 s more in SQLite).
RELEASE_ABOVE = 1 << 20  # characters: values this long are released after their insert


def _insert(table: str, columns: str) -> tuple[str, str]:
    marks = ", ".join(f"?{i}" for i in range(1, columns.count(",") + 2))
    return (f"INSERT INTO {table} ({columns}) VALUES ({marks})",
            f"INSERT INTO {table} ({columns}) SELECT {marks} WHERE ?1 IS NOT NULL")


_INSERT_DOC = _insert("docs", "id, body, pages")
_INSERT_BLOCK = _insert("grams", "rowid, body")
_INSERT_CJK = _insert("cjk", "id, grams")
_BODY_OF = "(SELECT body FROM docs WHERE id = ?1)"
# What the BM25 index holds of a file, as its view gives it (a note's fields with its
# title, its body without front matter: migrations.NOTES_SCHEMA).
_TITLE_OF = "(SELECT title FROM fts_source WHERE id = ?1)"
_FTS_BODY_OF = "(SELECT body FROM fts_source WHERE id = ?1)"
_BODY_AFTER = "(SELECT substr(body, ?3) FROM docs WHERE id = ?1)"
_GRAMS_OF = "(SELECT grams FROM cjk WHERE id = ?1)"

# grep's trigram index holds a long text as blocks of about this many characters, cut
# after a newline: candidates are blocks, and grep reads only those. Measured on the
# archive corpus (tests/bench/bench_archive.py), for `pdfTeX warning`: whole files 164
# candidates, 42.8 MB to read, trigram table 38.9 MB; 64 KB blocks 11.5 MB, 55.1 MB;
# 32 KB blocks 5.7 MB, 64.8 MB; 16 KB blocks 2.3 MB, 76.9 MB.
GREP_BLOCK_CHARS = 32768
BLOCK_SHIFT = 40  # a block's rowid: file id + (block number << BLOCK_SHIFT)
FILE_MASK = (1 << BLOCK_SHIFT) - 1


RUN_BYTES = 4 << 20  # grep reads a long text's blocks in runs of about this much


Span = tuple[int, int, int | None]  # first byte, first line, end byte (None: the end)


def _spans(starts: Sequence[Sequence[int]]) -> list[Span]:
    """Each grep block of a text, from where the blocks start (byte, line)."""
    return [(start, line, starts[n + 1][0] if n + 1 < len(starts) else None)
            for n, (start, line) in enumerate(starts)]


def _runs(spans: list[Span], chosen: Iterable[int]) -> list[Span]:
    """Blocks `chosen` (ascending), adjacent ones merged into runs of about RUN_BYTES."""
    out: list[Span] = []
    for n in chosen:
        start, line, end = spans[n]
        if out and out[-1][2] == start and start - out[-1][0] < RUN_BYTES:
            out[-1] = (out[-1][0], out[-1][1], end)
        else:
            out.append(spans[n])
    return out


def _ready(conn: sqlite3.Connection, path: Path,
           set_up: Callable[[sqlite3.Connection, Path], None]) -> sqlite3.Connection:
    """A new connection to the index, checked as loom's and set up; closed (and the error
    explained in one line) when that fails."""
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        check_owner(conn, path)
        set_up(conn, path)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, sqlite3.Error):
            raise explain(exc, path) from None
        raise
    return conn


def _set_up(conn: sqlite3.Connection, path: Path) -> None:
    # Takes effect only when the file is created (in WAL mode it is fixed).
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA cache_size = -32000")
    # Read through a memory map: a fresh `loom grep` reads every text once, and
    # copying pages into SQLite's cache would cost more than the search itself.
    conn.execute("PRAGMA mmap_size = 1073741824")
    migrate(conn)


def _check_current(conn: sqlite3.Connection, path: Path) -> None:
    """A read-only index must need no migration: it cannot take one."""
    conn.execute("PRAGMA mmap_size = 1073741824")
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    if {name for name, _ in MIGRATIONS} - done:
        raise IndexStateError(
            f"the index at {path} was made by an older loom and is read-only here",
            "run `loom scan` once as a user who can write it (it upgrades the index)")


def set_aside(path: Path) -> None:
    """Move the index at `path` to `<index>.damaged` with its side files dropped, under
    the write lock (a writer of the old index, grep's builder, is done first)."""
    from loomcli.store import locks

    with locks.write_lock(path):
        if path.exists():
            path.replace(path.with_name(path.name + ".damaged"))
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


class Store(Common):
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._roots: list[Root] | None = None

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> Store:
        """Open the index; with create=False a missing index is a user error."""
        if path.is_dir():
            raise IndexStateError(f"the index path {path} is a folder",
                                  "set db_path in the config to a file, e.g. ~/.loom/index.db")
        if not create and not path.exists():
            raise IndexMissingError(
                f"no index at {path} yet", "run `loom scan DIR` to index a folder first"
            )
        if not create and not os.access(path, os.W_OK):
            return cls._open_read_only(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise IndexStateError(f"cannot create {path.parent}: {exc.strerror or exc}",
                                  "make it writable, or point LOOM_HOME or db_path at a "
                                  "folder you can write") from None
        if not create and not os.access(path.parent, os.W_OK | os.X_OK):
            return cls._open_read_only(path)  # no room for the WAL's side files
        conn = sqlite3.connect(path, isolation_level=None, timeout=30,
                               check_same_thread=False)
        return cls(_ready(conn, path, _set_up), path)

    @classmethod
    def _open_read_only(cls, path: Path) -> Store:
        """An index loom may read but not write (a read-only mount, another user's file):
        searches, grep and get work; a scan fails when it writes. In a folder that cannot
        hold the WAL's side files SQLite is told the file cannot change (`immutable`): it
        then reads without locks, as of the last checkpoint."""
        from urllib.parse import quote

        folder_writable = os.access(path.parent, os.W_OK | os.X_OK)
        uri = f"file:{quote(str(path.absolute()))}?mode=ro" + (
            "" if folder_writable else "&immutable=1")
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise explain(exc, path) from None
        return cls(_ready(conn, path, _check_current), path)

    def close(self) -> None:
        self.conn.close()

    def _run(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def __enter__(self) -> Store:
        return self

    @property
    def location(self) -> str:
        return str(self.path.absolute())

    def begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        # Ask SQLite, not a flag: an interrupt may land between COMMIT and the flag.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:  # damaged, full, read-only: say what to do
            raise explain(exc, self.path) from None

    # -- locks: files beside the index (locks.py; imported by the writers only, a read's
    # start-up does without it) ----------------------------------------------------------

    def write_lock(self, on_wait: Callable[[str], None] | None = None
                   ) -> AbstractContextManager[None]:
        from loomcli.store import locks

        return locks.write_lock(self.path, on_wait)

    def building(self) -> bool:
        from loomcli.store import locks

        return locks.building(self.path)

    def take_builder_lock(self) -> int | None:
        from loomcli.store import locks

        return locks.take_builder_lock(self.path) if locks.HAVE_LOCKS else None

    def builder_turns(self) -> locks.Turns:
        from loomcli.store import locks

        return locks.Turns(self.path)

    # -- roots and display paths ---------------------------------------------------------

    def still_open(self) -> bool:
        return True  # a replaced file is seen by its inode (operations._kept_store)

    def ensure_root(self, path: Path) -> Root:
        """The root for `path`, added if new. Its prefix is fixed here, once: none for an
        index's first root, else its folder name made unique (also against the first
        folders of the unprefixed roots' paths, so no two roots can show one path)."""
        for root in self.roots():
            if root.path == str(path):
                return root
        taken = {r.name for r in self.roots()} | {r.prefix for r in self.roots()}
        for root in self.roots():
            if not root.prefix:
                taken.update(r[0] for r in self.conn.execute(
                    "SELECT DISTINCT substr(relpath, 1, instr(relpath, '/') - 1) FROM files "
                    "WHERE root_id = ? AND instr(relpath, '/') > 0", (root.id,)))
        name = base = path.name or "root"
        n = 2
        while name in taken:
            name = f"{base}-{n}"
            n += 1
        prefix = name if self.roots() else ""
        cur = self.conn.execute("INSERT INTO roots (path, name, prefix) VALUES (?, ?, ?)",
                                (str(path), name, prefix))
        self._roots = None
        return Root(int(cur.lastrowid or 0), str(path), name, prefix)

    def ids_under(self, root: Root, folder: str) -> list[int]:
        """Ids of the indexed files of `root` inside its subfolder `folder` ("": all)."""
        if not folder:
            return [r[0] for r in self.conn.execute(
                "SELECT id FROM files WHERE root_id = ? AND indexed_at IS NOT NULL "
                "ORDER BY relpath", (root.id,))]
        prefix = folder.rstrip("/") + "/"
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM files WHERE root_id = ? AND indexed_at IS NOT NULL AND "
            "substr(relpath, 1, ?) = ? ORDER BY relpath", (root.id, len(prefix), prefix))]

    def resolve(self, path: str) -> FileRow:
        """Find a file by the path loom shows, or by its path on disk. The path exactly
        as given comes first (a name may hold `\\` or start with a space), then read as a
        pasted or Windows path: `\\` as `/`, spaces around it dropped."""
        roots = self.roots()
        candidates: list[tuple[int, str]] = []
        for shown in dict.fromkeys([path, path.replace("\\", "/").strip()]):
            if shown.startswith("./"):
                shown = shown[2:]
            head, _, rest = shown.partition("/")
            candidates += [(r.id, shown) for r in roots if not r.prefix]
            candidates += [(r.id, rest) for r in roots if r.prefix and r.prefix == head]
        try:
            disk = Path(path).expanduser().resolve()
        except (OSError, RuntimeError):
            disk = None
        if disk is not None:
            for r in roots:
                with suppress(ValueError):
                    candidates.append((r.id, disk.relative_to(r.path).as_posix()))
        for root_id, rel in candidates:
            if ".." in PurePosixPath(rel).parts:
                continue
            row = self.conn.execute(
                f"SELECT {FILE_COLUMNS} FROM files WHERE root_id = ? AND relpath = ? "
                "AND indexed_at IS NOT NULL", (root_id, rel)).fetchone()
            if row:
                return FileRow(*row)
        raise IndexMissingError(f"{path}: not in the index",
                                "see `loom files` for the indexed paths")

    # -- writing (the indexer's calls) ---------------------------------------------------

    def _fts_delete(self, file_id: int) -> None:
        """Take a file's old text out of both indexes (FTS5 wants the exact old values;
        SQLite reads them itself, Python holds at most one block of them)."""
        if not self.conn.execute("SELECT 1 FROM docs WHERE id = ?", (file_id,)).fetchone():
            return
        self.conn.execute(f"INSERT INTO fts (fts, rowid, title, body, grams) VALUES "
                          f"('delete', ?1, {_TITLE_OF}, {_FTS_BODY_OF}, {_GRAMS_OF})",
                          (file_id,))
        self.conn.execute("DELETE FROM cjk WHERE id = ?", (file_id,))
        self._drop_note(file_id)
        if self.conn.execute("DELETE FROM grams_todo WHERE id = ?", (file_id,)).rowcount:
            return  # not in grep's index yet: nothing to take out of it
        starts = self.block_starts(file_id)
        if starts is None:
            self.conn.execute(f"INSERT INTO grams (grams, rowid, body) VALUES "
                              f"('delete', ?1, {_BODY_OF})", (file_id,))
            return
        for n, (_start, _line, block) in enumerate(self._read_runs(file_id, _spans(starts))):
            self.conn.execute("INSERT INTO grams (grams, rowid, body) VALUES ('delete', ?, ?)",
                              (file_id + (n << BLOCK_SHIFT), block.decode("utf-8")))
        self.conn.execute("DELETE FROM blocks WHERE file_id = ?", (file_id,))

    def block_starts(self, file_id: int) -> list[tuple[int, int]] | None:
        """Where each grep block of a text starts (byte offset, line number), or None
        when the text is one block."""
        row = self.conn.execute("SELECT starts FROM blocks WHERE file_id = ?",
                                (file_id,)).fetchone()
        return [(a, b) for a, b in json.loads(row[0])] if row else None

    def add_file(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                 digest: bytes, doc: Extracted, ocr: str | None = None) -> int:
        body_len = utf8_len(doc.text)
        cur = self.conn.execute(
            "INSERT INTO files (root_id, relpath, kind, size, mtime_ns, hash, title, "
            "content_len, indexed_at, ocr) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (root_id, relpath, kind, size, mtime_ns, digest, doc.title, body_len, time.time(),
             ocr))
        file_id = int(cur.lastrowid or 0)
        self._insert_doc(file_id, doc, relpath)
        return file_id

    def _insert_doc(self, file_id: int, doc: Extracted, relpath: str | None = None) -> None:
        """Store the text and index it for search; grep's trigram index gets it later
        (`grams_todo`, filled by index_grams). Takes the text out of `doc` once it is
        stored, and the BM25 index reads it back from the table: a huge note's text is
        never held twice over (measured on a 218 MB note: peak RSS 943 MB before, 704 MB
        after)."""
        pages = json.dumps(doc.pages, separators=(",", ":")) if doc.pages is not None else None
        self._insert_once(_INSERT_DOC, (file_id, doc.text, pages))
        self.conn.execute("INSERT INTO grams_todo (id) VALUES (?)", (file_id,))
        # Title and text apart (as one f-string, a huge text was copied whole).
        found = [g for g in (words_apart(doc.title), words_apart(doc.text)) if g is not None]
        if found:
            self._insert_once(_INSERT_CJK, (file_id, "\n".join(found)))
        del found
        if relpath is None:
            (relpath,) = self.conn.execute("SELECT relpath FROM files WHERE id = ?",
                                           (file_id,)).fetchone()
        put_note(self.conn, file_id, relpath, doc.note, doc.text)
        doc.text = ""
        # The values the view gives (migrations.NOTES_SCHEMA), from what is at hand: a
        # note's fields after its title, its body after its front matter.
        fields = doc.note.fields() if doc.note is not None else ""
        title = f"{doc.title}\n{fields}" if fields else doc.title
        skip = doc.note.body_start if doc.note is not None else 0
        self.conn.execute(f"INSERT INTO fts (rowid, title, body, grams) VALUES (?1, ?2, "
                          f"{_BODY_AFTER if skip else _BODY_OF}, {_GRAMS_OF})",
                          (file_id, title, skip + 1) if skip else (file_id, title))

    # -- grep's trigram index, filled after the text (grep_index.py) ----------------------

    def grams_pending(self) -> tuple[int, int]:
        """(files, bytes of text) not in grep's trigram index yet."""
        files, size = self.conn.execute(
            "SELECT count(*), coalesce(sum(f.content_len), 0) FROM grams_todo t "
            "JOIN files f ON f.id = t.id").fetchone()
        return int(files), int(size)

    def grams_batch(self, max_bytes: int) -> list[int]:
        """The next texts for grep's index, about `max_bytes` of them (at least one)."""
        ids: list[int] = []
        total = 0
        for fid, size in self.conn.execute(
                "SELECT t.id, f.content_len FROM grams_todo t JOIN files f ON f.id = t.id "
                "ORDER BY t.id"):
            if ids and total + size > max_bytes:
                break
            ids.append(fid)
            total += size
        return ids

    def index_grams(self, file_ids: Iterable[int]) -> None:
        """Put these texts into grep's trigram index (inside the caller's transaction).
        A short text is read by SQLite itself; a long one in blocks."""
        for fid in file_ids:
            row = self.conn.execute(
                "SELECT f.content_len FROM grams_todo t JOIN files f ON f.id = t.id "
                "WHERE t.id = ?", (fid,)).fetchone()
            if row is None:
                continue  # indexed or removed since it was chosen
            if row[0] <= GREP_BLOCK_CHARS:  # bytes >= characters: one block
                self.conn.execute(f"INSERT INTO grams (rowid, body) VALUES (?1, {_BODY_OF})",
                                  (fid,))
            else:
                (text,) = self.conn.execute("SELECT body FROM docs WHERE id = ?",
                                            (fid,)).fetchone()
                self._insert_blocks(fid, text)
                del text
            self.conn.execute("DELETE FROM grams_todo WHERE id = ?", (fid,))

    def optimize_grams(self) -> None:
        self.conn.execute("INSERT INTO grams (grams) VALUES ('optimize')")

    def _insert_once(self, forms: tuple[str, str], params: tuple[Any, ...]) -> None:
        """Run one of the `_INSERT_*` statements with values that may be huge, and release
        them after (see _release) when they are: a small copy held until the next insert
        costs nothing, and a second statement per file would, on every scan."""
        if any(isinstance(p, str | bytes) and len(p) > RELEASE_ABOVE for p in params):
            self.conn.execute(forms[1], params)
            self._release(forms[1], len(params))
        else:
            self.conn.execute(forms[0], params)

    def _release(self, sql: str, count: int) -> None:
        """Let SQLite drop its copy of a statement's last values. Python's sqlite3 caches
        statements and never clears their bindings, so the copy of a 150 MB text stayed
        held after its insert, until the statement ran again. The second form of each
        `_INSERT_*` inserts nothing when its first value is NULL: run again with NULLs,
        it holds nothing."""
        self.conn.execute(sql, (None,) * count)

    def _insert_blocks(self, file_id: int, text: str) -> None:
        """Index a long text for grep as blocks of about GREP_BLOCK_CHARS, each ending
        after a newline (a line longer than that stays whole in its block)."""
        starts: list[tuple[int, int]] = []
        pos = byte = 0
        line = 1
        while pos < len(text):
            cut = text.find("\n", pos + GREP_BLOCK_CHARS - 1)
            end = len(text) if cut < 0 else cut + 1
            block = text[pos:end]
            self._insert_once(_INSERT_BLOCK, (file_id + (len(starts) << BLOCK_SHIFT), block))
            starts.append((byte, line))
            byte += utf8_len(block)
            line += block.count("\n")
            pos = end
            del block
        if len(starts) > 1:
            self.conn.execute("INSERT INTO blocks (file_id, starts) VALUES (?, ?)",
                              (file_id, json.dumps(starts, separators=(",", ":"))))

    def replace_content(self, file_id: int, size: int, mtime_ns: int, digest: bytes,
                        doc: Extracted, ocr: str | None = None) -> None:
        self._chunks_delete(file_id)
        self._fts_delete(file_id)
        self.conn.execute("DELETE FROM vectors WHERE file_id = ?", (file_id,))
        self.conn.execute("DELETE FROM docs WHERE id = ?", (file_id,))
        self.conn.execute(
            "UPDATE files SET size = ?, mtime_ns = ?, hash = ?, title = ?, content_len = ?, "
            "indexed_at = ?, error = NULL, skip = NULL, ocr = ? WHERE id = ?",
            (size, mtime_ns, digest, doc.title, utf8_len(doc.text), time.time(), ocr,
             file_id))
        self._insert_doc(file_id, doc)

    def record_failure(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                       digest: bytes | None, error: str, file_id: int | None,
                       ocr: str | None = None) -> None:
        """Remember a failure (so an unchanged file is not retried — unless `ocr`, the OCR
        fingerprint it depended on, changes); earlier text is kept."""
        if file_id is None:
            self.conn.execute(
                "INSERT INTO files (root_id, relpath, kind, size, mtime_ns, hash, error, ocr) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (root_id, relpath, kind, size, mtime_ns, digest, error, ocr))
        else:
            self.conn.execute(
                "UPDATE files SET size = ?, mtime_ns = ?, error = ?, skip = NULL, ocr = ? "
                "WHERE id = ?", (size, mtime_ns, error, ocr, file_id))

    def record_skip(self, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                    digest: bytes | None, reason: str, file_id: int | None,
                    ocr: str | None = None) -> None:
        """Remember that a valid file holds nothing to index (not retried while unchanged,
        unless `ocr`, the OCR fingerprint it depended on, changes)."""
        if file_id is None:
            self.conn.execute(
                "INSERT INTO files (root_id, relpath, kind, size, mtime_ns, hash, skip, ocr) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (root_id, relpath, kind, size, mtime_ns, digest, reason, ocr))
        else:
            self.conn.execute(
                "UPDATE files SET size = ?, mtime_ns = ?, hash = ?, error = NULL, skip = ?, "
                "ocr = ? WHERE id = ?", (size, mtime_ns, digest, reason, ocr, file_id))

    def move(self, file_id: int, root_id: int, relpath: str, size: int, mtime_ns: int) -> None:
        self.conn.execute(
            "UPDATE files SET root_id = ?, relpath = ?, size = ?, mtime_ns = ? WHERE id = ?",
            (root_id, relpath, size, mtime_ns, file_id))
        from loomcli.extract import markdown

        self.conn.execute("UPDATE notes SET name = ? WHERE file_id = ?",
                          (markdown.name_key(relpath), file_id))

    def remove(self, file_id: int) -> None:
        self._chunks_delete(file_id)
        self._fts_delete(file_id)
        self.conn.execute("DELETE FROM vectors WHERE file_id = ?", (file_id,))
        self.conn.execute("DELETE FROM docs WHERE id = ?", (file_id,))
        self.conn.execute("DELETE FROM files WHERE id = ?", (file_id,))

    def begin_scan(self, roots: list[str]) -> int:
        cur = self.conn.execute("INSERT INTO scans (started_at, roots) VALUES (?, ?)",
                                (time.time(), json.dumps(roots)))
        return int(cur.lastrowid or 0)

    def check(self) -> None:
        """Raise sqlite3.DatabaseError if the FTS index disagrees with the stored text."""
        self.conn.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 1)")
        self.conn.execute("INSERT INTO grams (grams, rank) VALUES ('integrity-check', 1)")
        self.conn.execute("PRAGMA integrity_check").fetchall()

    def optimize(self) -> None:
        """Merge FTS5 segments after a large change: smaller index, faster queries
        (grep's trigram index: optimize_grams, once it is filled)."""
        self.conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        self.conn.execute("INSERT INTO chunks (chunks) VALUES ('optimize')")

    # -- vectors (search by meaning) ----------------------------------------------------

    def needing_vectors(self, model: str, dim: int | None = None) -> list[int]:
        """Files with text but no vectors from `model` (new, changed, or made by another
        model) — or, given the `dim` the model now answers with, vectors of another size
        (a server's model re-pulled under the same name) — smallest first: the most
        files get vectors soonest. Vectors are keyed by model and size."""
        return [r[0] for r in self.conn.execute(
            "SELECT f.id FROM files f LEFT JOIN vectors v ON v.file_id = f.id "
            "WHERE f.indexed_at IS NOT NULL AND f.content_len > 0 "
            "AND (v.model IS NULL OR v.model != ? OR (? IS NOT NULL AND v.dim != ? "
            "AND v.dim != 0)) ORDER BY f.content_len, f.id", (model, dim, dim))]

    def vector_dims(self, model: str) -> dict[int, int]:
        """How many files have vectors of `model`, by the vectors' size (0: no passages)."""
        return dict(self.conn.execute(
            "SELECT dim, count(*) FROM vectors WHERE model = ? GROUP BY dim", (model,)))

    def put_vectors(self, file_id: int, model: str, dim: int, spans: bytes, vecs: bytes,
                    scales: bytes) -> None:
        self._chunks_delete(file_id)
        cur = self.conn.execute(
            "INSERT OR REPLACE INTO vectors (file_id, model, dim, spans, vecs, scales) "
            "SELECT id, ?, ?, ?, ?, ? FROM files WHERE id = ? AND indexed_at IS NOT NULL",
            (model, dim, spans, vecs, scales, file_id))
        if cur.rowcount and spans:
            self._chunks(file_id, spans, "INSERT INTO chunks (rowid, body, grams) "
                                         "VALUES (?, ?, ?)")

    def _chunks(self, file_id: int, spans: bytes, sql: str) -> None:
        body = self.text_bytes(file_id)
        for n, text, grams in chunk_texts(body, spans):
            self.conn.execute(sql, (file_id + n, text, grams))

    def _chunks_delete(self, file_id: int) -> None:
        """Take a file's passages out of `chunks` (contentless: FTS5 wants the very
        values it indexed, read again from the text and the spans still stored)."""
        row = self.conn.execute("SELECT spans FROM vectors WHERE file_id = ?",
                                (file_id,)).fetchone()
        if row and row[0]:
            self._chunks(file_id, row[0], "INSERT INTO chunks (chunks, rowid, body, grams) "
                                          "VALUES ('delete', ?, ?, ?)")

    def vector_counts(self) -> dict[str, int]:
        """Files with vectors, by the model that made them."""
        return dict(self.conn.execute(
            "SELECT model, count(*) FROM vectors GROUP BY model").fetchall())

    def conversation_rows(self, owner: str) -> None:
        return None  # kept in a file of their own (loomcli/conversations.py)

    def vector_engine(self) -> str:
        return "loom"  # semantic.VectorIndex: every vector in one matrix, ranked in numpy

    def nearest(self, model: str, dim: int, query: Any, limit: int,
                among: Sequence[int] | None = None
                ) -> list[tuple[int, int, int, int, float]] | None:
        return None  # ranked in loom (vector_engine)

    def passage_counts(self, model: str, dim: int) -> dict[int, int]:
        return dict(self.conn.execute(
            "SELECT file_id, length(scales) / 4 FROM vectors WHERE model = ? AND dim = ?",
            (model, dim)).fetchall())

    def vector_generation(self) -> tuple[float, int]:
        """Which vectors the index holds: its birth (when its first migration ran) and the
        count of vector writes since. The count alone starts again in a rebuilt index, where
        a server's cached matrix would then pass for current with the old file ids."""
        born, generation = self.conn.execute(
            "SELECT (SELECT applied_at FROM migrations WHERE name = '001_initial'), "
            "generation FROM vector_state").fetchone()
        return float(born or 0.0), int(generation)

    def iter_vectors(self, model: str, dim: int | None = None
                     ) -> Iterator[tuple[int, int, bytes, bytes, bytes]]:
        """(file id, dim, spans, vectors, scales) of every file embedded by `model`
        (with vectors of `dim` numbers, when given)."""
        yield from self.conn.execute(
            "SELECT file_id, dim, spans, vecs, scales FROM vectors WHERE model = ? "
            "AND (? IS NULL OR dim = ?)", (model, dim, dim))

    def vectors_of(self, file_id: int, model: str) -> tuple[int, bytes, bytes, bytes] | None:
        row = self.conn.execute("SELECT dim, spans, vecs, scales FROM vectors "
                                "WHERE file_id = ? AND model = ?", (file_id, model)).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def hits_for(self, file_ids: list[int]) -> dict[int, tuple[str, str, int, int]]:
        """(display path, title, content_len, byte where the body starts) of these files."""
        out = {}
        for fid, root_id, rel, title, n, body_at in self.conn.execute(
                "SELECT f.id, f.root_id, f.relpath, f.title, f.content_len, "
                "coalesce(n.body_at, 0) FROM files f LEFT JOIN notes n ON n.file_id = f.id "
                "WHERE f.id IN (SELECT value FROM json_each(?))", (json.dumps(file_ids),)):
            out[fid] = (self.display_path(root_id, rel), title, n, body_at)
        return out

    # -- reading -----------------------------------------------------------------------

    def rank(self, query: Query, limit: int, among: Sequence[int] | None = None
             ) -> list[tuple[int, float]]:
        """(file id, BM25 score) best first. `among`: only these files (search's --glob
        and --path)."""
        match = match_of(query)
        if not match:
            return []
        where, extra = self._among("rowid", among)
        rows = self.conn.execute(
            f"SELECT rowid, -rank FROM fts WHERE fts MATCH ?{where} ORDER BY rank "
            "LIMIT ?", (match, *extra, limit)).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    @staticmethod
    def _among(column: str, among: Sequence[int] | None) -> tuple[str, tuple[str, ...]]:
        if among is None:
            return "", ()
        # FTS5 runs the query once per rowid of a plain `rowid IN (...)`: fast for a few
        # files, not for many; `+rowid` (no index) runs it once and filters. Measured on
        # a vault of 2,000 notes, "garden" among the 875 tagged so: 473 ms -> 3 ms; among
        # 10: 9 ms -> 15 ms.
        shown = column if len(among) <= AMONG_BY_ROWID else f"+{column}"
        return (f" AND {shown} IN (SELECT value FROM json_each(?))",
                (json.dumps(list(among)),))

    def rank_passages(self, query: Query, limit: int, among: Sequence[int] | None = None
                      ) -> list[tuple[int, int, float]]:
        """(file id, passage number, BM25 score) of the passages that have vectors, best
        first: a long manual competes with a short note passage for passage."""
        match = match_of(query)
        if not match:
            return []
        where, extra = self._among(f"(rowid & {FILE_MASK})", among)
        rows = self.conn.execute(
            f"SELECT rowid, -rank FROM chunks WHERE chunks MATCH ?{where} ORDER BY rank "
            "LIMIT ?", (match, *extra, limit)).fetchall()
        return [(int(r) & FILE_MASK, int(r) >> CHUNK_SHIFT, float(score))
                for r, score in rows]

    def frequency(self, query: Query, cap: int) -> int:
        """In how many files a query matches, counted up to `cap` (bounded cost)."""
        match = match_of(query)
        if not match:
            return 0
        return int(self.conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)",
            (match, cap)).fetchone()[0])

    def file_count(self) -> int:
        """The files with a text: one row each in `docs` and in the full-text index, whose
        size table (a few bytes a row) counts them in microseconds — counting `docs`
        walked every page of the texts (5 ms warm, 16 ms cold on the kernel docs)."""
        return int(self.conn.execute("SELECT count(*) FROM fts_docsize").fetchone()[0])

    def text_bytes(self, file_id: int, offset: int = 0, length: int | None = None) -> bytes:
        """A byte range of a file's UTF-8 text. Incremental blob I/O reads only the pages
        that hold the range, so 20 bytes of a 200 MB text cost what 20 bytes cost."""
        try:
            with self.conn.blobopen("docs", "body", file_id, readonly=True) as blob:
                start = min(max(offset, 0), len(blob))
                blob.seek(start)
                return blob.read(-1 if length is None else length)
        except sqlite3.OperationalError:  # no such row: removed by a scan meanwhile
            return b""

    def candidates(self, need: Need) -> dict[int, set[int] | None]:
        """The blocks whose text holds every trigram of what a pattern requires
        (trigrams.required), by file id: a superset of where it can match. A text not
        in the trigram index yet is a candidate whole (None: every block). One
        statement, so one snapshot: a text indexed meanwhile is never missed."""
        match = grams_match(need)
        found: dict[int, set[int] | None] = {}
        for rowid, pending in self.conn.execute(
                "SELECT rowid, 0 FROM grams WHERE grams MATCH ? "
                "UNION ALL SELECT id, 1 FROM grams_todo", (match,)):
            if pending:
                found[rowid] = None
                continue
            blocks = found.setdefault(rowid & FILE_MASK, set())
            if blocks is not None:
                blocks.add(rowid >> BLOCK_SHIFT)
        return found

    def pages(self, file_id: int) -> list[int] | None:
        row = self.conn.execute("SELECT pages FROM docs WHERE id = ?", (file_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    # -- notes as notes: front matter, tags, links (extract/markdown.py) ---------------

    def _drop_note(self, file_id: int) -> None:
        for table in ("notes", "tags", "links", "aliases"):
            self.conn.execute(f"DELETE FROM {table} WHERE file_id = ?", (file_id,))

    def tagged(self, tags: Sequence[str]) -> list[int]:
        """The files that have every one of `tags` (a tag also matches the tags nested
        under it: `project` matches `project/loom`), case-insensitively."""
        ids: set[int] | None = None
        for tag in tags:
            t = tag.strip().lstrip("#").strip("/").lower()
            found = {r[0] for r in self.conn.execute(
                "SELECT file_id FROM tags WHERE tag = ?1 OR "
                "(tag > ?1 || '/' AND tag < ?1 || '0')", (t,))}
            ids = found if ids is None else ids & found
        return sorted(ids or ())

    def tags_of(self, file_id: int) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT tag FROM tags WHERE file_id = ? ORDER BY tag", (file_id,))]

    def tags_for(self, file_ids: Sequence[int]) -> dict[int, list[str]]:
        """Each of these files' tags, in order (search hits': one query for all)."""
        out: dict[int, list[str]] = {fid: [] for fid in file_ids}
        for fid, tag in self.conn.execute(
                "SELECT file_id, tag FROM tags WHERE file_id IN (SELECT value FROM "
                "json_each(?)) ORDER BY file_id, tag", (json.dumps(list(file_ids)),)):
            out[fid].append(tag)
        return out

    def _notes_named(self, names: Sequence[str]) -> Iterable[tuple[int, int, str]]:
        """(file id, root id, relpath) of the indexed files a link by these names may
        name."""
        return self.conn.execute(
            "SELECT f.id, f.root_id, f.relpath FROM notes n JOIN files f ON f.id = n.file_id "
            "WHERE n.name IN (SELECT value FROM json_each(?)) AND f.indexed_at IS NOT NULL",
            (json.dumps(list(names)),)).fetchall()

    def _notes_aliased(self, keys: Sequence[str]) -> Iterable[tuple[int, int, str]]:
        """(file id, root id, relpath) of the indexed notes with one of these aliases."""
        return self.conn.execute(
            "SELECT f.id, f.root_id, f.relpath FROM aliases a JOIN files f ON f.id = "
            "a.file_id WHERE a.name IN (SELECT value FROM json_each(?)) "
            "AND f.indexed_at IS NOT NULL", (json.dumps(list(keys)),)).fetchall()

    def links_of(self, file_id: int) -> list[tuple[str, str | None, str | None, int]]:
        """(target, heading, alias, line) of each link of a note, in its order."""
        return [(r[0], r[1], r[2], r[3]) for r in self.conn.execute(
            "SELECT target, heading, alias, line FROM links WHERE file_id = ? ORDER BY n",
            (file_id,))]

    def _link_names(self, file_ids: Sequence[int]) -> Iterable[tuple[str, bool]]:
        """The names these notes are linked by: (name, whether an alias)."""
        ids = json.dumps(list(file_ids))
        return self.conn.execute(
            "SELECT name, 0 FROM notes WHERE file_id IN (SELECT value FROM json_each(?)) "
            "UNION ALL SELECT name, 1 FROM aliases WHERE file_id IN "
            "(SELECT value FROM json_each(?))", (ids, ids)).fetchall()

    def _links_named(self, names: Sequence[str]) -> Iterable[tuple[int, int, str, str, int]]:
        """(note, its root id, its relpath, target, first line) of the links by these
        names."""
        return self.conn.execute(
            "SELECT l.file_id, f.root_id, f.relpath, l.target, min(l.line) FROM links l "
            "JOIN files f ON f.id = l.file_id WHERE l.name IN (SELECT value FROM "
            "json_each(?)) AND f.indexed_at IS NOT NULL GROUP BY l.file_id, l.target",
            (json.dumps(list(names)),)).fetchall()

    def iter_texts(self, file_ids: list[int] | None = None,
                   wanted: dict[int, set[int] | None] | None = None,
                   by_blocks: bool = False
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """For grep, in path order: (file id, display path, pieces, pages JSON); the
        pieces are (first byte, first line, UTF-8 text). A text of one grep block comes
        whole. With `by_blocks`, a text of several is read by blob I/O in runs of its
        blocks (those `wanted` names for it; None or no `wanted`: all), each about
        RUN_BYTES at most:
        grep then holds a few MB of a 200 MB text, not three copies of it."""
        runs: dict[int, list[Span]] = {}
        if by_blocks:
            chosen = set(file_ids) if file_ids is not None else None
            rows = (self.conn.execute("SELECT file_id, starts FROM blocks") if wanted is None
                    else self.conn.execute("SELECT file_id, starts FROM blocks WHERE file_id "
                                           "IN (SELECT value FROM json_each(?))",
                                           (json.dumps(list(wanted)),)))
            for fid, starts_json in rows:
                if chosen is None or fid in chosen:
                    spans = _spans(json.loads(starts_json))
                    chosen_blocks = wanted[fid] if wanted is not None else None
                    runs[fid] = _runs(spans, range(len(spans)) if chosen_blocks is None
                                      else sorted(chosen_blocks))
        # Ordered by the (root_id, relpath) index: SQLite never sorts rows holding texts.
        # A whole text is read with CAST AS BLOB through the memory map: 20% faster on the
        # kernel docs than blob I/O per file.
        sql = ("SELECT f.id, f.root_id, f.relpath, CASE WHEN f.id IN "
               "(SELECT value FROM json_each(?)) THEN NULL ELSE CAST(d.body AS BLOB) END, "
               "d.pages FROM files f JOIN docs d ON d.id = f.id")
        params: tuple[str, ...] = (json.dumps(list(runs)),)
        if file_ids is not None:
            sql += " WHERE f.id IN (SELECT value FROM json_each(?))"
            params += (json.dumps(file_ids),)
        sql += " ORDER BY f.root_id, f.relpath"
        for fid, root_id, rel, body, pages in self.conn.execute(sql, params):
            pieces = self._read_runs(fid, runs[fid]) if fid in runs else [(0, 1, body)]
            yield fid, self.display_path(root_id, rel), pieces, pages

    def _read_runs(self, file_id: int, runs: list[Span]) -> Iterator[tuple[int, int, bytes]]:
        """Each run's (first byte, first line, UTF-8 text), through one blob handle."""
        try:
            blob = self.conn.blobopen("docs", "body", file_id, readonly=True)
        except sqlite3.OperationalError:  # removed by a scan meanwhile
            return
        with blob:
            size = len(blob)
            for start, line, end in runs:
                blob.seek(start)
                yield start, line, blob.read((size if end is None else end) - start)

    def status(self) -> dict[str, object]:
        c = self.conn
        counts = dict(c.execute(
            "SELECT kind, count(*) FROM files WHERE indexed_at IS NOT NULL GROUP BY kind"
        ).fetchall())
        failed = c.execute("SELECT count(*) FROM files WHERE error IS NOT NULL").fetchone()[0]
        skipped = c.execute("SELECT count(*) FROM files WHERE skip IS NOT NULL").fetchone()[0]
        text_bytes = c.execute("SELECT coalesce(sum(content_len), 0) FROM files").fetchone()[0]
        last = c.execute("SELECT started_at, finished_at, roots, report FROM scans "
                         "WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1").fetchone()
        size = sum(os.path.getsize(p) for p in (str(self.path), f"{self.path}-wal")
                   if os.path.exists(p))
        return {
            "roots": [{"name": r.name, "path": r.path} for r in self.roots()],
            "files": sum(counts.values()),
            "notes": counts.get("note", 0),
            "pdfs": counts.get("pdf", 0),
            # web pages, office documents and e-books
            "documents": sum(n for kind, n in counts.items() if kind not in ("note", "pdf")),
            "failed": failed,
            "skipped": skipped,
            "text_bytes": text_bytes,
            "index_bytes": size,
            "last_scan": None if last is None else {
                "started_at": last[0], "finished_at": last[1],
                "roots": json.loads(last[2]), "report": json.loads(last[3] or "null"),
            },
        }
