"""Numbered schema migrations, each recorded in the database once applied."""

from __future__ import annotations

import math
import sqlite3
import time
from array import array
from collections.abc import Callable, Iterator

from loomcli.errors import IndexStateError
from loomcli.search import scripts
from loomcli.search.text import words_apart

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.extract import markdown

# BM25 column weights: a query word in a file's title counts this many times more than
# one in its body (titles are short and say what the file is about).
TITLE_WEIGHT = 4.0
BODY_WEIGHT = 1.0
# The character pairs of CJK and Thai runs (scripts.py) weigh as much as body words.
GRAMS_WEIGHT = 1.0

# Chosen by measurement on the kernel docs (README, "Search ranking"): Porter stemming
# finds "configure" for "configuring"; remove_diacritics lets "cafe" find "café".
TOKENIZER = "porter unicode61 remove_diacritics 2"

# The trigram index behind `loom grep`'s prefilter, as migration 002 made it (004 cuts it
# into blocks): case-folded trigrams of every text, detail=none (which files hold a
# trigram, not where: +6 MB on the kernel docs, where detail=full cost +59 MB).
GRAMS = ("CREATE VIRTUAL TABLE grams USING fts5(body, content='docs', content_rowid='id', "
         "tokenize='trigram', detail='none', columnsize=0)")

CHUNK_SHIFT = 40  # a passage's rowid in `chunks`: file id + (passage number << CHUNK_SHIFT)

def chunk_texts(body: bytes, spans: bytes) -> Iterator[tuple[int, str, str | None]]:
    """(rowid, text, words apart) of each passage of one file, as `chunks` indexes them:
    the byte ranges its vectors row holds, cut from its UTF-8 text."""
    ranges = array("i")
    ranges.frombytes(spans)
    pairs = zip(ranges[0::2], ranges[1::2], strict=True)
    for n, (a, b) in enumerate(pairs):
        text = body[a:b].decode("utf-8", "ignore")
        yield n << CHUNK_SHIFT, text, words_apart(text)


def _exact_words_011(conn: sqlite3.Connection) -> None:
    """Index the acronyms of every text already indexed: `cjk` made again for every file
    (title and text, as store._insert_doc makes it), then both BM25 indexes rebuilt."""
    conn.execute("DELETE FROM cjk")
    rows = conn.execute("SELECT f.id, f.title, d.body FROM files f JOIN docs d "
                        "ON d.id = f.id")
    for file_id, title, body in rows:
        found = [g for g in (words_apart(title or ""), words_apart(body)) if g is not None]
        if found:
            conn.execute("INSERT INTO cjk (id, grams) VALUES (?, ?)",
                         (file_id, "\n".join(found)))
    conn.execute("INSERT INTO fts (fts) VALUES ('rebuild')")
    conn.execute("INSERT INTO chunks (chunks) VALUES ('delete-all')")
    _fill_chunks(conn)


def _fill_chunks(conn: sqlite3.Connection) -> None:
    """Index the passages of every file that already has vectors (no re-embedding)."""
    rows = conn.execute("SELECT v.file_id, v.spans FROM vectors v JOIN docs d "
                        "ON d.id = v.file_id WHERE length(v.spans) > 0").fetchall()
    for file_id, spans in rows:
        (body,) = conn.execute("SELECT CAST(body AS BLOB) FROM docs WHERE id = ?",
                               (file_id,)).fetchone()
        for n, text, grams in chunk_texts(body, spans):
            conn.execute("INSERT INTO chunks (rowid, body, grams) VALUES (?, ?, ?)",
                         (file_id + n, text, grams))


# Notes as notes (extract/markdown.py): `notes` holds every file's link name (what a
# `[[wikilink]]` names it by), where a Markdown note's body starts after its front matter
# (in bytes and characters of the stored text) and its searchable fields (aliases and
# tags, one a line); `tags` and `links` what its body and front matter say. The BM25
# index reads the fields with the title (the title's weight) and the body without the
# front matter, through the view.
NOTES_SCHEMA = """
    CREATE TABLE notes (file_id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                        body_at INTEGER NOT NULL DEFAULT 0,
                        body_chars INTEGER NOT NULL DEFAULT 0,
                        fields TEXT NOT NULL DEFAULT '');
    CREATE INDEX notes_name ON notes(name);
    CREATE TABLE tags (file_id INTEGER NOT NULL, tag TEXT NOT NULL,
                       PRIMARY KEY (file_id, tag)) WITHOUT ROWID;
    CREATE INDEX tags_tag ON tags(tag);
    CREATE TABLE links (file_id INTEGER NOT NULL, n INTEGER NOT NULL, target TEXT NOT NULL,
                        name TEXT NOT NULL, heading TEXT, alias TEXT, line INTEGER NOT NULL,
                        PRIMARY KEY (file_id, n)) WITHOUT ROWID;
    CREATE INDEX links_name ON links(name);
    DROP VIEW fts_source;
    CREATE VIEW fts_source AS
        SELECT files.id AS id,
               CASE WHEN notes.fields != '' THEN files.title || char(10) || notes.fields
                    ELSE files.title END AS title,
               CASE WHEN notes.body_chars > 0 THEN substr(docs.body, notes.body_chars + 1)
                    ELSE docs.body END AS body,
               cjk.grams AS grams
        FROM files JOIN docs ON docs.id = files.id LEFT JOIN cjk ON cjk.id = files.id
        LEFT JOIN notes ON notes.file_id = files.id;
"""


# The other names a note answers `[[wikilinks]]` by (markdown.NoteMeta.names: its
# aliases, its title, a journal's date as Logseq shows it), as link keys; a file's own
# name wins over them (store.common). Notes indexed before get them from their stored
# text, and a daily note its date title and words.
ALIASES_SCHEMA = """
    CREATE TABLE aliases (file_id INTEGER NOT NULL, name TEXT NOT NULL,
                          PRIMARY KEY (file_id, name)) WITHOUT ROWID;
    CREATE INDEX aliases_name ON aliases(name);
"""


def put_note(conn: sqlite3.Connection, file_id: int, relpath: str,
             meta: markdown.NoteMeta | None, body: str | None = None,
             names: bool = True) -> None:
    """A file's rows in `notes`, `tags`, `links` and `aliases` (its link name, and for a
    Markdown note what it says about itself; `body`: its text, for where the body starts;
    `names`: False before migration 013 made `aliases`)."""
    from loomcli.extract import markdown  # notes only: not on start-up

    at = chars = 0
    if meta is not None and meta.body_start and body is not None:
        chars = meta.body_start
        at = len(body[:chars].encode("utf-8"))
    # Plain one-row inserts (the caller dropped the file's old rows): a statement that
    # may write or replace several rows opens a savepoint, which flushes FTS5 (store.py).
    conn.execute("INSERT INTO notes (file_id, name, body_at, body_chars, fields) "
                 "VALUES (?, ?, ?, ?, ?)", (file_id, markdown.name_key(relpath), at, chars,
                                            meta.fields() if meta else ""))
    if meta is None:
        return
    if meta.tags:
        conn.executemany("INSERT INTO tags (file_id, tag) VALUES (?, ?)",
                         [(file_id, tag) for tag in dict.fromkeys(meta.tags)])
    if meta.links:
        conn.executemany(
            "INSERT INTO links (file_id, n, target, name, heading, alias, line) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(file_id, n, link.target, markdown.name_key(link.target), link.heading,
              link.alias, link.line) for n, link in enumerate(meta.links)])
    if names and meta.names():
        conn.executemany("INSERT INTO aliases (file_id, name) VALUES (?, ?)",
                         [(file_id, name) for name in meta.names()])


def _fill_notes(conn: sqlite3.Connection) -> None:
    """What the notes indexed before say about themselves, read from their stored text
    (the file as it was read): no rescan needed. A note with front matter or fields
    leaves the BM25 index with its old values and comes back through the new view."""
    from loomcli.extract import markdown  # notes only: not on start-up

    rows = conn.execute("SELECT f.id, f.relpath, f.kind FROM files f "
                        "JOIN docs d ON d.id = f.id").fetchall()
    for file_id, relpath, kind in rows:
        if kind != "note" or not markdown.is_markdown(relpath):
            put_note(conn, file_id, relpath, None)
            continue
        (body,) = conn.execute("SELECT body FROM docs WHERE id = ?", (file_id,)).fetchone()
        meta = markdown.parse(body)
        if not (meta.body_start or meta.fields() or meta.title):
            put_note(conn, file_id, relpath, meta, body, names=False)
            continue
        conn.execute("INSERT INTO fts (fts, rowid, title, body, grams) VALUES ('delete', ?1, "
                     "(SELECT title FROM files WHERE id = ?1), "
                     "(SELECT body FROM docs WHERE id = ?1), "
                     "(SELECT grams FROM cjk WHERE id = ?1))", (file_id,))
        put_note(conn, file_id, relpath, meta, body, names=False)
        if meta.title:
            conn.execute("UPDATE files SET title = ? WHERE id = ?", (meta.title, file_id))
        conn.execute("INSERT INTO fts (rowid, title, body, grams) VALUES (?1, "
                     "(SELECT title FROM fts_source WHERE id = ?1), "
                     "(SELECT body FROM fts_source WHERE id = ?1), "
                     "(SELECT grams FROM fts_source WHERE id = ?1))", (file_id,))


def _fill_aliases(conn: sqlite3.Connection) -> None:
    """The other names of the notes indexed before (see ALIASES_SCHEMA), read from their
    stored text: only the notes that may have one are read (front matter, fields, or a
    date for a name). A daily note's title and fields change: it leaves the BM25 index
    with its old values and comes back with the new ones."""
    from loomcli.extract import markdown  # notes only: not on start-up

    rows = conn.execute("SELECT f.id, f.relpath, n.body_at, n.fields FROM files f "
                        "JOIN notes n ON n.file_id = f.id JOIN docs d ON d.id = f.id "
                        "WHERE f.kind = 'note'").fetchall()
    for file_id, relpath, body_at, fields in rows:
        day = markdown.day_of(relpath) if markdown.is_markdown(relpath) else None
        if not (day or body_at or fields):
            continue
        (body,) = conn.execute("SELECT body FROM docs WHERE id = ?", (file_id,)).fetchone()
        meta = markdown.parse(body, relpath)
        if day is None or meta.title is None:  # (a daily note with a heading keeps it)
            conn.executemany("INSERT INTO aliases (file_id, name) VALUES (?, ?)",
                             [(file_id, name) for name in meta.names()])
            continue
        conn.execute("INSERT INTO fts (fts, rowid, title, body, grams) VALUES ('delete', "
                     "?1, (SELECT title FROM fts_source WHERE id = ?1), "
                     "(SELECT body FROM fts_source WHERE id = ?1), "
                     "(SELECT grams FROM fts_source WHERE id = ?1))", (file_id,))
        for table in ("notes", "tags", "links"):
            conn.execute(f"DELETE FROM {table} WHERE file_id = ?", (file_id,))
        put_note(conn, file_id, relpath, meta, body)
        conn.execute("UPDATE files SET title = ? WHERE id = ?", (meta.title, file_id))
        conn.execute("INSERT INTO fts (rowid, title, body, grams) VALUES (?1, "
                     "(SELECT title FROM fts_source WHERE id = ?1), "
                     "(SELECT body FROM fts_source WHERE id = ?1), "
                     "(SELECT grams FROM fts_source WHERE id = ?1))", (file_id,))


MIGRATIONS: list[tuple[str, str | Callable[[sqlite3.Connection], None]]] = [
    ("001_initial", f"""
        CREATE TABLE roots (
            id INTEGER PRIMARY KEY,
            path TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL UNIQUE
        );
        CREATE TABLE files (
            id INTEGER PRIMARY KEY,
            root_id INTEGER NOT NULL REFERENCES roots(id),
            relpath TEXT NOT NULL,
            kind TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            hash BLOB,
            title TEXT NOT NULL DEFAULT '',
            content_len INTEGER NOT NULL DEFAULT 0,
            indexed_at REAL,
            error TEXT,
            UNIQUE (root_id, relpath)
        );
        CREATE INDEX files_hash ON files(hash);
        -- The extracted text, stored once; FTS5 indexes it as external content.
        CREATE TABLE docs (
            id INTEGER PRIMARY KEY,
            body TEXT NOT NULL,
            pages TEXT
        );
        CREATE VIEW fts_source AS
            SELECT files.id AS id, files.title AS title, docs.body AS body
            FROM files JOIN docs ON docs.id = files.id;
        CREATE VIRTUAL TABLE fts USING fts5(
            title, body, content='fts_source', content_rowid='id',
            tokenize='{TOKENIZER}'
        );
        INSERT INTO fts(fts, rank) VALUES ('rank', 'bm25({TITLE_WEIGHT}, {BODY_WEIGHT})');
        CREATE TABLE scans (
            id INTEGER PRIMARY KEY,
            started_at REAL NOT NULL,
            finished_at REAL,
            roots TEXT NOT NULL,
            report TEXT
        );
    """),
    ("002_trigrams", f"""
        {GRAMS};
        INSERT INTO grams(grams) VALUES ('rebuild');
    """),
    # Passage vectors for search by meaning: one row per file, its passages' byte ranges
    # (int32 start/end pairs) and vectors (int8 rows, one float32 scale each), tagged
    # with the model that made them. `generation` changes with every write, so a running
    # server knows when its in-memory copy is stale.
    ("003_vectors", """
        CREATE TABLE vectors (
            file_id INTEGER PRIMARY KEY,
            model TEXT NOT NULL,
            dim INTEGER NOT NULL,
            spans BLOB NOT NULL,
            vecs BLOB NOT NULL,
            scales BLOB NOT NULL
        );
        CREATE INDEX vectors_model ON vectors(model);
        CREATE TABLE vector_state (id INTEGER PRIMARY KEY CHECK (id = 1),
                                   generation INTEGER NOT NULL);
        INSERT INTO vector_state VALUES (1, 0);
        CREATE TRIGGER vectors_ins AFTER INSERT ON vectors
            BEGIN UPDATE vector_state SET generation = generation + 1; END;
        CREATE TRIGGER vectors_del AFTER DELETE ON vectors
            BEGIN UPDATE vector_state SET generation = generation + 1; END;
        CREATE TRIGGER vectors_upd AFTER UPDATE ON vectors
            BEGIN UPDATE vector_state SET generation = generation + 1; END;
    """),
    # The trigram index by blocks: a long text is indexed as blocks of about 32 KB cut
    # at line ends (grep's matches never span lines), so a pattern's candidates are
    # blocks, not whole files. Contentless, since its rows are blocks, not docs rows:
    # block 0 of a file has the file's id as rowid, block n the id + (n << 40). `blocks`
    # holds each block's start (UTF-8 byte offset, first line number), for the texts cut
    # into more than one. Texts indexed before keep one block until they change (or
    # `loom scan --rebuild`).
    ("004_grams_blocks", """
        DROP TABLE grams;
        CREATE VIRTUAL TABLE grams USING fts5(body, content='', tokenize='trigram',
                                              detail='none', columnsize=0);
        CREATE TABLE blocks (file_id INTEGER PRIMARY KEY, starts TEXT NOT NULL);
        INSERT INTO grams (rowid, body) SELECT id, body FROM docs;
    """),
    # Every script searchable: runs of CJK and Thai characters also indexed as character
    # pairs (scripts.py), in a third column `grams` of the BM25 index read from `cjk`
    # (a row only for texts that hold such runs). And `chunks`: the BM25 index of the
    # passages that have vectors (rowid = file id + passage number << 40), so hybrid
    # search fuses passages with passages (README, "Search by meaning"). Contentless:
    # it stores no second copy of the text (its deletes re-read the passages).
    ("006_scripts_and_passages", lambda conn: _run(conn, f"""
        CREATE TABLE cjk (id INTEGER PRIMARY KEY, grams TEXT NOT NULL);
        INSERT INTO cjk (id, grams) SELECT id, g FROM (
            SELECT files.id AS id, loom_bigrams(files.title || char(10) || docs.body) AS g
            FROM files JOIN docs ON docs.id = files.id) WHERE g IS NOT NULL;
        DROP TABLE fts;
        DROP VIEW fts_source;
        CREATE VIEW fts_source AS
            SELECT files.id AS id, files.title AS title, docs.body AS body,
                   cjk.grams AS grams
            FROM files JOIN docs ON docs.id = files.id LEFT JOIN cjk ON cjk.id = files.id;
        CREATE VIRTUAL TABLE fts USING fts5(
            title, body, grams, content='fts_source', content_rowid='id',
            tokenize='{TOKENIZER}'
        );
        INSERT INTO fts(fts, rank) VALUES
            ('rank', 'bm25({TITLE_WEIGHT}, {BODY_WEIGHT}, {GRAMS_WEIGHT})');
        INSERT INTO fts(fts) VALUES ('rebuild');
        CREATE VIRTUAL TABLE chunks USING fts5(body, grams, content='',
                                               tokenize='{TOKENIZER}');
    """, then=_fill_chunks)),
    # Paths that stay put: each root's prefix is fixed when the root is added (the first
    # root none, every later one its folder name, made unique), so adding or forgetting
    # another root never changes a path. An index made before showed prefixes only while
    # it held two roots or more: each keeps exactly the paths it showed. And `skip`: why
    # a valid file holds nothing to index (an image-only PDF), kept apart from failures.
    ("007_stable_paths_and_skips", """
        ALTER TABLE roots ADD COLUMN prefix TEXT NOT NULL DEFAULT '';
        UPDATE roots SET prefix = name WHERE (SELECT count(*) FROM roots) > 1;
        ALTER TABLE files ADD COLUMN skip TEXT;
    """),
    # Vectors a server sent with NaN, infinite or float32-overflowing values were stored
    # before loom checked them (their int8 rows scale by NaN or infinity): drop them, so
    # the next scan makes them again. `finite_floats` is defined by migrate().
    ("008_finite_vectors", """
        DELETE FROM vectors WHERE NOT finite_floats(scales);
    """),
    # grep's trigram index is filled after the scan that stored the text (indexer.py,
    # "grep's index later"): `grams_todo` names the texts not in it yet, which grep
    # reads linearly meanwhile. Every text indexed before is in it already.
    ("009_grams_todo", """
        CREATE TABLE grams_todo (id INTEGER PRIMARY KEY);
    """),
    # `ocr`: the OCR fingerprint (Tesseract's presence and version, `[ocr] enabled` and
    # `languages`) a file's failure, skip or partial text depended on; a scan tries the
    # file again when it changes. The files an earlier loom failed or skipped for want of
    # OCR get a fingerprint no setting has, so the next scan tries them once.
    ("010_ocr_fingerprint", """
        ALTER TABLE files ADD COLUMN ocr TEXT;
        UPDATE files SET ocr = '' WHERE skip LIKE 'PDF has no text%'
            OR error LIKE 'an image needs OCR%' OR error LIKE 'OCR %'
            OR error LIKE 'Tesseract is not installed%';
    """),
    # Acronyms as written (see text.EXACT_MARK): the `grams` column of both BM25 indexes (read
    # from `cjk` for files, made from the passage for `chunks`) also holds each text's
    # acronyms, unstemmed. An index made before gets them for every text it holds.
    ("011_exact_words", _exact_words_011),
    ("012_notes", lambda conn: _run(conn, NOTES_SCHEMA, then=_fill_notes)),
    ("013_aliases", lambda conn: _run(conn, ALIASES_SCHEMA, then=_fill_aliases)),
]


def check_owner(conn: sqlite3.Connection, path: object) -> None:
    """Refuse a database loom did not make, or one a newer loom has migrated further."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return  # a new, empty file: loom's to fill
    known = {name for name, _ in MIGRATIONS}
    try:
        done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    except sqlite3.OperationalError:
        done = set()
    if not done & known:
        raise IndexStateError(f"{path} is an SQLite database, but not a loom index",
                              "set db_path (or LOOM_HOME) to another file; loom leaves this "
                              "one alone")
    if done - known:
        raise IndexStateError(
            f"the index at {path} was made by a newer loom (it has migration "
            f"{max(done - known)})", "upgrade loom (pipx upgrade loom-index), or scan into "
            "another index with a different db_path")


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations this database has not seen yet."""
    # Migration 006 computes the CJK pairs of the texts already indexed.
    conn.create_function("loom_bigrams", 1, scripts.bigram_text, deterministic=True)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    conn.create_function("finite_floats", 1, _finite_floats, deterministic=True)
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            if name not in {r[0] for r in conn.execute("SELECT name FROM migrations")}:
                if callable(sql):
                    sql(conn)
                else:
                    for statement in _statements(sql):
                        conn.execute(statement)
                conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))


def _finite_floats(blob: bytes | None) -> bool:
    """Whether a blob of float32 values holds only finite ones."""
    values = array("f")
    values.frombytes((blob or b"")[:len(blob or b"") // 4 * 4])
    return all(math.isfinite(v) for v in values)


def _run(conn: sqlite3.Connection, sql: str,
         then: Callable[[sqlite3.Connection], None] | None = None) -> None:
    for statement in _statements(sql):
        conn.execute(statement)
    if then is not None:
        then(conn)


def _statements(sql: str) -> list[str]:
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return [s for s in out if s]
