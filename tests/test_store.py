"""The store on a real SQLite file: safe queries, FTS consistency, byte ranges."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli import operations
from loomcli.errors import IndexMissingError, QueryError
from loomcli.extract import Extracted
from loomcli.store import Store, quote_fts

from .conftest import bm25_hits


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "index.db", create=True)
    with s.transaction():
        root = s.ensure_root(tmp_path / "notes")
        s.add_file(root.id, "a.md", "note", 1, 1, b"h1",
                   Extracted("Weaving on a Jacquard loom. Café crème ☕ naïve.\n", "Weaving"))
        s.add_file(root.id, "b.md", "note", 1, 1, b"h2",
                   Extracted("Dyeing with madder and woad; weaving is elsewhere.\n", "Dyes"))
        s.add_file(root.id, "c.pdf", "pdf", 1, 1, b"h3",
                   Extracted("page one\npage two has loom\n", "C", pages=[0, 9]))
    yield s
    s.close()


def test_open_missing_index_says_what_to_do(tmp_path):
    with pytest.raises(IndexMissingError, match="loom scan DIR"):
        Store.open(tmp_path / "nope.db")


def test_wal_mode_and_migrations_recorded(store):
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = [r[0] for r in store.conn.execute("SELECT name FROM migrations")]
    assert names == ["001_initial", "002_trigrams", "003_vectors", "004_grams_blocks",
                     "006_scripts_and_passages", "007_stable_paths_and_skips",
                     "008_finite_vectors", "009_grams_todo", "010_ocr_fingerprint",
                     "011_exact_words", "012_notes", "013_aliases"]


def test_a_new_index_has_16k_pages_and_an_old_one_keeps_its_own(store, tmp_path):
    import sqlite3

    from loomcli.migrations import migrate

    assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old, isolation_level=None)
    conn.execute("PRAGMA page_size = 4096")  # an index made with 4 KB pages, as 0.1 made
    migrate(conn)
    conn.close()
    with Store.open(old) as reopened:
        assert reopened.conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert reopened.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_search_ranks_title_and_body(store):
    hits = bm25_hits(store, "weaving", 10)
    assert [h.path for h in hits] == ["a.md", "b.md"]  # the title match ranks first
    assert hits[0].score > hits[1].score > 0


def test_search_folds_diacritics_and_stems(store):
    assert [h.path for h in bm25_hits(store, "cafe", 10)] == ["a.md"]
    assert [h.path for h in bm25_hits(store, "dyes", 10)] == ["b.md"]  # porter: dyes ~ dyeing


def test_the_store_ranks_a_parsed_query_in_no_query_language(store):
    """The seam's BM25 takes words, an operator and a prefix flag (text.parse): another
    backend builds its own query from them; the parse is the same for every backend."""
    from loomcli.search.text import Query, parse

    assert parse('madder "dyeing with" MAD', "OR") == Query(
        ("madder", "dyeing with", "MAD"), "OR", False, True)
    assert parse("WHICH UPS DID I BUY").exact is False  # capitals throughout: no acronyms
    assert parse("weav", prefix=True).prefix and not parse("weav ", prefix=True).prefix
    assert [fid for fid, _ in store.rank(parse("madder woad"), 10)] == [
        store.resolve("b.md").id]
    assert {fid for fid, _ in store.rank(parse("madder jacquard", "OR"), 10)} == {
        store.resolve("a.md").id, store.resolve("b.md").id}
    assert store.rank(parse("madder jacquard"), 10) == []  # AND means AND: no fallback
    assert [fid for fid, _ in store.rank(Query(("jacq",), "AND", True), 10)] == [
        store.resolve("a.md").id]  # a prefix, however the query was made
    assert store.frequency(parse("weaving"), 10) == 2
    assert store.rank(parse("?!"), 10) == []


def test_and_then_or_fallback(store):
    both = bm25_hits(store, "madder woad", 10)
    assert [h.path for h in both] == ["b.md"]
    either = bm25_hits(store, "madder jacquard", 10)  # no file has both: OR fallback
    assert {h.path for h in either} == {"a.md", "b.md"}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_a_valid_query(tmp_path_factory, text):
    s = Store.open(tmp_path_factory.mktemp("q") / "i.db", create=True)
    bm25_hits(s, text, 5)  # must not raise
    s.close()


@pytest.mark.parametrize("query", ['"', 'AND', 'a OR b', 'NEAR(a b)', '*', 'x:y', '-x', '(',
                                   "l'homme", 'c++', 'title:weaving', '^a'])
def test_fts_syntax_in_user_text_is_literal(store, query):
    bm25_hits(store, query, 5)
    assert quote_fts(query).count('"') % 2 == 0


def test_update_and_remove_keep_fts_consistent(store):
    a = store.resolve("a.md")
    with store.transaction():
        store.replace_content(a.id, 2, 2, b"h9", Extracted("Now about indigo.\n", "Indigo"))
        store.remove(store.resolve("b.md").id)
    store.check()
    assert [h.path for h in bm25_hits(store, "indigo", 5)] == ["a.md"]
    assert bm25_hits(store, "weaving", 5) == []
    assert bm25_hits(store, "madder", 5) == []
    # The count BM25's rare-word rule divides by (read from the full-text index's sizes)
    # is the files with a text, after a replace and a removal too.
    docs = store.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
    assert store.file_count() == docs == 2


def test_get_range_is_bytes_snapped_to_characters(store):
    full = operations.read_range(store, "a.md")
    text = "Weaving on a Jacquard loom. Café crème ☕ naïve.\n"
    assert full.content == text and full.content_len == len(text.encode())
    cafe = text.encode().index("é".encode())
    # Starting inside "é" (2 bytes) moves forward to the next whole character.
    inside = operations.read_range(store, "a.md", cafe + 1, 6)
    assert inside.offset == cafe + 2 and inside.content == " crè"
    assert inside.length == len(" crè".encode())
    # Ending inside "☕" (3 bytes) stops before it.
    cup = text.encode().index("☕".encode())
    cut = operations.read_range(store, "a.md", cup - 2, 4)
    assert cut.content == "e " and cut.offset == cup - 2 and cut.length == 2
    end = operations.read_range(store, "a.md", full.content_len, 5)  # the end: nothing
    assert end.content == "" and end.offset == full.content_len
    with pytest.raises(QueryError, match=f"whose text is {full.content_len} bytes"):
        operations.read_range(store, "a.md", 10_000, 5)  # past it: an error naming its size
    with pytest.raises(QueryError):
        operations.read_range(store, "a.md", -1)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # read-only use
@given(offset=st.integers(0, 53), length=st.integers(0, 80))
def test_get_range_never_breaks_a_character(store, offset, length):
    text = "Weaving on a Jacquard loom. Café crème ☕ naïve.\n".encode()
    assert len(text) == 53  # offsets up to the end; past it is an error (above)
    got = operations.read_range(store, "a.md", offset, length)
    start, n = got.offset, got.length
    assert min(offset, len(text)) <= start  # clamped to the text, never before the ask
    assert start + n <= min(offset + length, len(text)) or n == 0
    assert text[start:start + n].decode("utf-8") == got.content


def test_paths_stay_put_when_roots_come_and_go(store, tmp_path):
    assert store.display_path(1, "a.md") == "a.md"
    with store.transaction():
        other = store.ensure_root(tmp_path / "more" / "notes")
        store.add_file(other.id, "z.md", "note", 1, 1, b"z", Extracted("zed\n", "Z"))
    assert (other.name, other.prefix) == ("notes-2", "notes-2")
    assert store.display_path(1, "a.md") == "a.md"  # the first root's paths never move
    assert store.display_path(other.id, "z.md") == "notes-2/z.md"
    assert store.resolve("a.md").relpath == "a.md"
    assert store.resolve("notes-2/z.md").relpath == "z.md"
    with pytest.raises(IndexMissingError):
        store.resolve("notes-2/../a.md")
    with store.transaction():
        store.remove_root(1)
        third = store.ensure_root(tmp_path / "third")
    assert store.display_path(other.id, "z.md") == "notes-2/z.md"  # forgetting moves nothing
    assert third.prefix == "third"


def test_a_later_root_never_takes_a_first_folder_of_the_first_root(store, tmp_path):
    with store.transaction():
        root = store.roots()[0]
        store.add_file(root.id, "notes/inner.md", "note", 1, 1, b"i", Extracted("i\n", "I"))
        other = store.ensure_root(tmp_path / "elsewhere" / "notes")
    assert other.prefix == "notes-2"


def test_an_index_made_before_keeps_the_paths_it_showed(tmp_path):
    import sqlite3

    from loomcli.migrations import MIGRATIONS, migrate

    for roots in (["/x/notes"], ["/x/notes", "/y/docs"]):
        db = tmp_path / f"old{len(roots)}.db"
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        for name, sql in MIGRATIONS[:4]:  # as loom made it before 007
            for statement in sql.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
        for i, path in enumerate(roots, 1):
            conn.execute("INSERT INTO roots (id, path, name) VALUES (?, ?, ?)",
                         (i, path, path.rsplit("/", 1)[1]))
            conn.execute("INSERT INTO files (root_id, relpath, kind, size, mtime_ns, "
                         "indexed_at) VALUES (?, 'a.md', 'note', 1, 1, 1)", (i,))
        migrate(conn)
        conn.close()
        with Store.open(db) as old:
            shown = [old.display_path(r.id, "a.md") for r in old.roots()]
        assert shown == (["a.md"] if len(roots) == 1 else ["notes/a.md", "docs/a.md"])


def test_an_index_from_before_migration_010_tries_its_ocr_failures_once(tmp_path,
                                                                        monkeypatch):
    """Files an earlier loom failed or skipped for want of OCR get a fingerprint no setting
    has, so the next scan tries them once (issue 23, item 13); other files are left."""
    import sqlite3

    from loomcli import migrations

    path = tmp_path / "old.db"
    monkeypatch.setattr(migrations, "MIGRATIONS", [m for m in migrations.MIGRATIONS
                                                   if m[0] < "010_ocr_fingerprint"])
    Store.open(path, create=True).close()
    conn = sqlite3.connect(path)
    rows = [("scan.pdf", None, "PDF has no text layer (scanned or image-only pages) — …"),
            ("shot.png", "an image needs OCR to be indexed — install Tesseract …", None),
            ("letter.pdf", "OCR failed (Failed loading language 'xyz') — check …", None),
            ("cut.pdf", "damaged or unsupported PDF (…)", None), ("a.md", None, None)]
    with conn:
        conn.execute("INSERT INTO roots (id, path, name) VALUES (1, '/notes', 'notes')")
        conn.executemany("INSERT INTO files (root_id, relpath, kind, size, mtime_ns, error, "
                         "skip) VALUES (1, ?, 'pdf', 1, 1, ?, ?)", rows)
    conn.close()
    monkeypatch.undo()
    with Store.open(path) as store:
        got = {f.relpath: f.ocr for f in store.files_under(1).values()}
    assert got == {"scan.pdf": "", "shot.png": "", "letter.pdf": "", "cut.pdf": None,
                   "a.md": None}


def _segments(store: Store, table: str) -> int:
    """How many segments an FTS5 index holds (a %_data rowid is its segment id << 37)."""
    return store.conn.execute(f"SELECT count(DISTINCT id >> 37) FROM {table}_data "
                              "WHERE id >> 37 > 0").fetchone()[0]


def test_a_transaction_of_many_files_writes_one_segment_per_index(tmp_path):
    # FTS5 writes its pending terms at every savepoint, and a statement that may write
    # several rows opens one: an insert of that kind per file made one segment per file
    # (the kernel docs' first scan spent 1.2 s more in SQLite). A huge value takes that
    # form on purpose (its copy is released after), a single flush.
    s = Store.open(tmp_path / "index.db", create=True)
    with s.transaction():
        root = s.ensure_root(tmp_path / "notes")
        for i in range(60):
            s.add_file(root.id, f"n{i}.md", "note", 1, 1, b"h%d" % i,
                       Extracted(f"note {i} 日本語のメモリ {'word ' * 20}\n", f"T{i}"))
        s.index_grams(s.grams_batch(1 << 30))
    assert _segments(s, "fts") == 1
    assert _segments(s, "grams") == 1
    with s.transaction():
        s.add_file(root.id, "huge.md", "note", 1, 1, b"big",
                   Extracted("huge line " * 120_000, "Huge"))
    assert [h.path for h in bm25_hits(s, "huge", 10)] == ["huge.md"]
    s.close()


def test_rebuild_sets_an_sqlite_index_aside_and_refuses_a_database(store, tmp_path):
    from loomcli.errors import IndexStateError
    from loomcli.store import set_aside

    path = tmp_path / "index.db"
    store.close()
    set_aside(path)
    assert not path.exists() and (tmp_path / "index.db.damaged").exists()
    with pytest.raises(IndexStateError, match="SQLite index only"):
        set_aside("postgresql://localhost/loom")
