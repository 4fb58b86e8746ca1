"""The PostgreSQL store on a real server (tests/pg.py): BM25 scores equal to FTS5's,
byte ranges across grep's blocks, grep's candidates, migrations applied once, the write
lock across processes, and scanners running at once."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]


def _stores(tmp_path: Path, pg_url: str, *folders: Path):  # type: ignore[no-untyped-def]
    """Both stores, each with `folders` scanned by the real indexer."""
    from loomcli import config as config_mod
    from loomcli.index.indexer import Indexer
    from loomcli.store import open_store

    config = config_mod.load()
    out = {}
    for name, location in (("sqlite", tmp_path / "index.db"), ("postgresql", pg_url)):
        store = open_store(location, create=True)
        Indexer(store, config).scan(list(folders))
        out[name] = store
    return out


def _by_path(store, ranked):  # type: ignore[no-untyped-def]
    """Ranked files by path (ids differ between two scans: files are stored as their
    extraction ends), exact ties in path order (FTS5 leaves their order open)."""
    paths = dict(store.paths())
    return sorted(((paths[f], s) for f, s in ranked), key=lambda ps: (-round(ps[1], 9), ps[0]))


@pytest.fixture
def data(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("notes", "scripts", "vault"):
        shutil.copytree(FIXTURES / name, tmp_path / "data" / name)
        out.append(tmp_path / "data" / name)
    return out


def test_bm25_scores_are_fts5s(tmp_path, pg_url, data) -> None:
    """Every kind of query FTS5 is given — words, phrases, prefixes, acronyms, CJK pairs,
    AND and OR — scores the same files the same (to float rounding) on PostgreSQL."""
    from loomcli.search.text import parse

    stores = _stores(tmp_path, pg_url, *data)
    compared = 0
    for words in ("loom", "loom workshop", '"sourdough bread"', "UPS", "ups battery",
                  "NUMA", "内存", "実装", "Home", "idea", "e-mail", "weav", "the a of"):
        for operator in ("AND", "OR"):
            for prefix in (False, True):
                query = parse(words, operator, prefix)
                lite = _by_path(stores["sqlite"], stores["sqlite"].rank(query, 50))
                pg = _by_path(stores["postgresql"], stores["postgresql"].rank(query, 50))
                assert [f for f, _ in lite] == [f for f, _ in pg], (words, operator, prefix)
                assert [s for _, s in lite] == pytest.approx([s for _, s in pg], rel=1e-9)
                assert stores["sqlite"].frequency(query, 5) == \
                    stores["postgresql"].frequency(query, 5)
                compared += bool(lite)
    assert compared >= 30
    some = [fid for fid, _ in stores["sqlite"].paths()][::2]
    query = parse("loom idea", "OR")
    shown = dict(stores["sqlite"].paths())
    some_shown = {shown[f] for f in some}
    pg_some = [f for f, p in stores["postgresql"].paths() if p in some_shown]
    lite = _by_path(stores["sqlite"], stores["sqlite"].rank(query, 50, among=some))
    pg = _by_path(stores["postgresql"], stores["postgresql"].rank(query, 50, among=pg_some))
    assert [f for f, _ in lite] == [f for f, _ in pg] and lite
    assert {f for f, _ in lite} <= some_shown
    for store in stores.values():
        store.close()


def test_byte_ranges_and_grep_blocks_of_a_long_text(tmp_path, pg_url) -> None:
    """A text of several grep blocks (multi-byte characters across their edges): any byte
    range, the blocks' starts and grep's pieces are SQLite's."""
    line = "naïve café 東京 — line {n} of a long log with words\n"
    text = "".join(line.format(n=n) for n in range(6000))  # ~330 KB: 10+ blocks
    write(tmp_path / "long" / "log.txt", text)
    stores = _stores(tmp_path, pg_url, tmp_path / "long")
    body = text.encode("utf-8")
    lite, pg = stores["sqlite"], stores["postgresql"]
    (fid_lite, _), = lite.paths()
    (fid_pg, _), = pg.paths()
    starts = pg.block_starts(fid_pg)
    assert starts is not None and len(starts) > 8
    assert starts == lite.block_starts(fid_lite)
    rng = random.Random(7)
    edges = [a for a, _ in starts]
    for offset, length in [(0, None), (len(body) - 5, 100), (len(body) + 9, 4), (0, 0),
                           *[(max(e - 3, 0), 7) for e in edges], (-3, 7),
                           *[(rng.randrange(len(body)), rng.randrange(70_000))
                             for _ in range(40)]]:
        got = pg.text_bytes(fid_pg, offset, length)
        assert got == lite.text_bytes(fid_lite, offset, length), (offset, length)
        at = max(offset, 0)
        assert got == (body[at:] if length is None else body[at:at + length])
    chosen = {3, 4, 7}
    for by_blocks in (False, True):
        pieces = {name: [p for _, _, ps, _ in store.iter_texts(None, {f: chosen}, by_blocks)
                         for p in ps]
                  for name, store, f in (("sqlite", lite, fid_lite), ("pg", pg, fid_pg))}
        assert pieces["sqlite"] == pieces["pg"]
    # Blocks compressed with lz4 where the server has it (migration 007), else pglz.
    (has_lz4,) = pg.pg.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = "
                               "'default_toast_compression'").fetchone()
    methods = {m for (m,) in pg.pg.execute("SELECT DISTINCT pg_column_compression(body) "
                                           "FROM blocks")}
    assert methods == ({"lz4"} if has_lz4 else {"pglz"})
    for store in stores.values():
        store.close()


def test_grep_finds_what_sqlite_finds_through_the_trigram_index(tmp_path, pg_url) -> None:
    """Candidates are a superset: a case-insensitive pattern with letters PostgreSQL may
    fold differently (É, Ö) still finds its lines; a pattern with no literal reads
    everything; the trigram index is there (pg_trgm) and used for literals."""
    import psycopg

    from loomcli.search import grep

    write(tmp_path / "d" / "a.md", "ÉCOLE normale\nnothing here\nKÖLN and köln\n")
    write(tmp_path / "d" / "b.md", "école du soir\n" * 3)
    write(tmp_path / "d" / "c.md", "unrelated text\n")
    stores = _stores(tmp_path, pg_url, tmp_path / "d")
    for pattern, case in (("école", "ignore"), ("KÖLN", "ignore"), ("köln", "sensitive"),
                          ("ol.", "ignore"), ("(soir|normale)", "ignore"), ("x*", "smart")):
        found = {name: [(m.path, m.line, m.offset) for m in grep.matches(
            store, pattern, case=case, indexed=True)] for name, store in stores.items()}
        assert found["sqlite"] == found["postgresql"], pattern
        assert found["sqlite"], pattern
    with psycopg.connect(pg_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        trgm = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'"
                            ).fetchone()
    assert ("blocks_trgm" in indexes) == bool(trgm)  # the pgserver wheel's has no pg_trgm
    for store in stores.values():
        store.close()


def test_migrations_run_once_when_processes_open_a_new_database_at_once(pg_url) -> None:
    code = ("import sys; from loomcli.store import open_store; "
            "open_store(sys.argv[1], create=True).close(); print('ok')")
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert (p.returncode, out.strip()) == (0, "ok"), err
    import psycopg

    from loomcli.store import postgres

    with psycopg.connect(pg_url) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
    assert names == [name for name, _ in postgres.MIGRATIONS]


HOLDER = """
import sys
from loomcli.store import open_store
store = open_store(sys.argv[1], create=True)
with store.write_lock():
    print("locked", flush=True)
    sys.stdin.readline()  # held until the test says, or the process is killed
"""


def test_the_write_lock_spans_processes_and_dies_with_its_holder(pg_url) -> None:
    from loomcli.errors import BusyError
    from loomcli.store import open_store

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, pg_url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        store = open_store(pg_url)
        with pytest.raises(BusyError), store.write_lock():
            pass
        told: list[str] = []
        holder.send_signal(signal.SIGKILL)  # no goodbye: the server gives the lock back
        with store.write_lock(told.append):
            pass  # waited (or not, if the server noticed first), then took it
        store.close()
    finally:
        holder.kill()
        holder.wait()


def test_scanners_at_once_never_lose_or_duplicate_a_file(tmp_path, pg_url) -> None:
    """Two `loom scan` processes of the same folder, and two of different folders, on one
    database at once: every file once, the same list as a scan alone gives."""
    for name in ("notes", "vault"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    env = {**os.environ, "LOOM_DATABASE_URL": pg_url}
    runs = [[str(tmp_path / "notes")], [str(tmp_path / "notes")], [str(tmp_path / "vault")],
            [str(tmp_path / "vault"), str(tmp_path / "notes")]]
    procs = [subprocess.Popen([*LOOM, "scan", *folders], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for folders in runs]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    import sqlite3

    import psycopg

    every = "SELECT r.path, f.relpath, f.indexed_at IS NOT NULL FROM files f JOIN roots r " \
            "ON r.id = f.root_id"
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(every).fetchall()
    alone = {"LOOM_HOME": str(tmp_path / "alone")}
    subprocess.run([*LOOM, "scan", str(tmp_path / "notes"), str(tmp_path / "vault")],
                   env={**os.environ, **alone}, check=True, capture_output=True)
    with sqlite3.connect(tmp_path / "alone" / "index.db") as conn:
        expected = [(a, b, bool(c)) for a, b, c in conn.execute(every)]
    assert len(found) == len(set(found))  # no file twice
    assert sorted(found) == sorted(expected)
    assert len(found) > 12


def test_grep_index_is_filled_after_the_scan_by_a_builder(tmp_path, pg_url) -> None:
    """As on SQLite, a large scan leaves grep's trigram index to a process of its own:
    meanwhile grep reads the pending texts whole (the same matches); the builder then
    indexes every block, and candidates come from the index."""
    import time

    from loomcli import config as config_mod
    from loomcli.index.indexer import Indexer
    from loomcli.search import grep
    from loomcli.search.trigrams import required
    from loomcli.store import open_store

    for n in range(30):
        write(tmp_path / "d" / f"n{n}.md", f"note {n}\n" + "filler line of text\n" * 200
              + ("the rare needle here\n" if n % 7 == 0 else ""))
    store = open_store(pg_url, create=True)
    Indexer(store, config_mod.load(), grep_inline_bytes=0).scan([tmp_path / "d"])
    expected = [f"n{n}.md" for n in sorted(range(0, 30, 7), key=lambda n: f"n{n}.md")]
    assert [m.path for m in grep.matches(store, "rare needle", indexed=True)] == expected
    deadline = time.monotonic() + 120
    while store.grams_pending()[0] or store.building():  # the builder's end, not a clock
        assert time.monotonic() < deadline, "grep's index builder never finished"
        time.sleep(0.05)
    need = required("rare needle")
    assert need is not None
    found = store.candidates(need)
    assert sorted(found) == sorted(fid for fid, p in store.paths() if p in expected)
    assert all(blocks == {0} for blocks in found.values())
    assert [m.path for m in grep.matches(store, "rare needle", indexed=True)] == expected
    store.close()


def test_a_server_keeps_its_connection_and_survives_losing_it(tmp_path, pg_url,
                                                              monkeypatch) -> None:
    """`loom serve` and `loom mcp` keep one connection per thread (keep_open): it is
    reused while it answers; one the database dropped (a restart, a failover) is seen
    before it is used and opened anew, so no request fails."""
    import psycopg

    from loomcli import config as config_mod
    from loomcli.operations import Corpus

    monkeypatch.setenv("LOOM_DATABASE_URL", pg_url)
    shutil.copytree(FIXTURES / "notes", tmp_path / "notes")
    corpus = Corpus(config_mod.load(), keep_open=True)
    corpus.scan([tmp_path / "notes"])
    first = [h.to_dict() for h in corpus.search("loom", mode="bm25").hits]
    assert first
    with corpus.store() as store:
        pid = store.pg.info.backend_pid
    assert [h.to_dict() for h in corpus.search("loom", mode="bm25").hits] == first
    with corpus.store() as store:
        assert store.pg.info.backend_pid == pid  # kept, not reopened
    with psycopg.connect(pg_url, autocommit=True) as admin:  # waits for it to end
        assert admin.execute("SELECT pg_terminate_backend(%s, 60000)", (pid,)).fetchone()[0]
    assert [h.to_dict() for h in corpus.search("loom", mode="bm25").hits] == first
    with corpus.store() as store:
        assert store.pg.info.backend_pid != pid  # a new connection


def test_an_empty_or_foreign_database_is_told_apart(pg_url, pg_server) -> None:
    import psycopg

    from loomcli.errors import IndexMissingError, IndexStateError
    from loomcli.store import open_store

    with pytest.raises(IndexMissingError, match="no index in postgresql://"):
        open_store(pg_url)
    open_store(pg_url, create=True).close()
    open_store(pg_url).close()  # made once, opened after
    other = pg_server.create_db()
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id integer)")
    with pytest.raises(IndexStateError, match="not a loom index"):
        open_store(other, create=True)
    with psycopg.connect(other, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ).fetchone()[0] == 1  # left alone


def _postings_indexes(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'fts_terms'")}


def test_a_first_scan_makes_the_postings_indexes_once_and_a_dead_one_is_mended(
        tmp_path, pg_url, data) -> None:
    """A first scan writes its postings without their indexes and makes them at its end
    (kept up row by row, they were most of the server's work). A scan that died in
    between leaves them missing: searches still answer the same, and the next scan
    makes them."""
    from loomcli import config as config_mod
    from loomcli.index.indexer import Indexer
    from loomcli.search.text import parse
    from loomcli.store import open_store

    wanted = {"fts_terms_term", "fts_terms_doc"}
    lite = open_store(tmp_path / "index.db", create=True)
    Indexer(lite, config_mod.load()).scan(list(data))
    store = open_store(pg_url, create=True)
    with store.transaction():
        store.begin_scan([str(d) for d in data])  # a scan that dies right after
    assert _postings_indexes(pg_url) & wanted == set()
    Indexer(store, config_mod.load()).scan(list(data[:1]))  # no longer a first scan...
    store.close()
    assert _postings_indexes(pg_url) >= wanted  # ...but it mends the dead one's work
    store = open_store(pg_url)
    with store.transaction():
        store.begin_scan([])
    assert _postings_indexes(pg_url) >= wanted  # postings exist: nothing is dropped
    store.close()

    other = pg_url.rsplit("/", 1)[0] + "/postgres"
    import psycopg

    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS loom_first_scan")
        conn.execute("CREATE DATABASE loom_first_scan")
    first = pg_url.rsplit("/", 1)[0] + "/loom_first_scan"
    store = open_store(first, create=True)
    with store.transaction():
        store.begin_scan([])
    assert _postings_indexes(first) & wanted == set()
    Indexer(store, config_mod.load()).scan(list(data))  # a first scan, after a dead one
    assert _postings_indexes(first) >= wanted
    for words in ("loom", "sourdough bread", "idea"):
        query = parse(words, "OR")
        got, expected = _by_path(store, store.rank(query, 50)), _by_path(lite, lite.rank(query, 50))
        assert [f for f, _ in got] == [f for f, _ in expected] and got
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)
    store.close()
    lite.close()


class _Counting:
    """A psycopg connection that counts the statements sent through it (execute, and
    each cursor: a COPY or an executemany)."""

    def __init__(self, conn) -> None:  # type: ignore[no-untyped-def]
        self.conn, self.sent = conn, 0

    def execute(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.sent += 1
        return self.conn.execute(*args, **kwargs)

    def cursor(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.sent += 1
        return self.conn.cursor(*args, **kwargs)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.conn, name)


def test_a_scans_statements_do_not_grow_with_its_new_files(tmp_path, pg_url) -> None:
    """A new note's rows (its `files` row, text, postings, note, tags, links) go in COPYs
    shared by many files, its id taken from the sequence beforehand: no round trip per
    file (there were two to four: the `files` row, the note, its tags, its links)."""
    from loomcli import config as config_mod
    from loomcli.index.indexer import Indexer
    from loomcli.store import open_store

    for n in range(120):
        write(tmp_path / "d" / f"n{n}.md", f"---\ntags: [t{n % 3}, common]\n---\n# Note {n}\n"
              f"see [[n{(n + 1) % 120}]] and [[n{(n + 2) % 120}]]\n")
    store = open_store(pg_url, create=True)
    counting = _Counting(store.pg)
    store.pg = counting
    Indexer(store, config_mod.load()).scan([tmp_path / "d"])
    assert counting.sent < 60, counting.sent
    ids = [store.resolve(f"n{n}.md").id for n in (5, 6, 7)]
    before = counting.sent
    linked = store.backlinks(ids)  # the names in one statement, then each target's file
    assert counting.sent - before <= 2 + 3, counting.sent - before
    assert sorted(linked[ids[0]]) == sorted(store.resolve(f"n{n}.md").id for n in (3, 4))
    store.pg = counting.conn
    assert len(store.tagged(["common"])) == 120
    assert store.links_of(store.resolve("n5.md").id)[0][0] == "n6"
    assert sorted(store.backlinks([store.resolve("n5.md").id])[store.resolve("n5.md").id]) \
        == sorted([store.resolve("n4.md").id, store.resolve("n3.md").id])
    store.close()


def test_a_bm25_ranking_is_one_statement(tmp_path, pg_url, data) -> None:
    """Every phrase of a query, the lengths of the documents holding them and the table's
    totals come in one statement (a cold search sent one per phrase, one for the totals
    and one for the lengths, for each of its rankings); the scores stay FTS5's."""
    from loomcli.search.text import parse

    stores = _stores(tmp_path, pg_url, *data)
    pg = stores["postgresql"]
    pg.close()
    from loomcli.store import open_store

    pg = open_store(pg_url)
    counting = _Counting(pg.pg)
    pg.pg = counting
    for words, operator, prefix in (("loom idea", "OR", False), ('"sourdough bread" loom',
                                    "OR", False), ("loom wor", "AND", True)):
        query = parse(words, operator, prefix)
        before = counting.sent
        ranked = pg.rank(query, 50)
        assert counting.sent - before == 1, words
        got = _by_path(pg, ranked)
        before = counting.sent
        assert pg.frequency(query, 50) == stores["sqlite"].frequency(query, 50)
        assert counting.sent - before == 1, words
        expected = _by_path(stores["sqlite"], stores["sqlite"].rank(query, 50))
        assert [f for f, _ in got] == [f for f, _ in expected] and got, words
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)
    pg.pg = counting.conn
    pg.close()


def test_an_index_with_the_older_postings_is_made_compact_in_place(
        tmp_path, pg_url, data) -> None:
    """Positions are stored as text ('1,5,9': an integer[] spent 24 bytes of header on a
    row) and the term index is on the term alone (deduplicated); an index made before is
    converted when opened, and its phrase queries score as FTS5's."""
    import psycopg

    from loomcli.search.text import parse
    from loomcli.store import open_store

    stores = _stores(tmp_path, pg_url, *data)
    stores["postgresql"].close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in ("fts_terms", "chunk_terms"):  # as an older loom left it
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN pos TYPE integer[] "
                         "USING string_to_array(pos, ',')::integer[]")
            conn.execute(f"DROP INDEX {table}_term")
            conn.execute(f"CREATE INDEX {table}_term ON {table} (term, doc)")
        conn.execute("DELETE FROM migrations WHERE name = '003_compact_postings'")
    pg = open_store(pg_url)
    with psycopg.connect(pg_url) as conn:
        kinds = {r[0] for r in conn.execute(
            "SELECT data_type FROM information_schema.columns WHERE column_name = 'pos'")}
    assert kinds == {"text"}
    with psycopg.connect(pg_url) as conn:
        made = {r[0] for r in conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname LIKE '%_terms_term'")}
    assert made == {"CREATE INDEX fts_terms_term ON public.fts_terms USING btree (term)",
                    "CREATE INDEX chunk_terms_term ON public.chunk_terms USING btree (term)"}
    for words in ('"sourdough bread"', '"loom workshop" idea', "loom"):
        query = parse(words, "OR")
        got = _by_path(pg, pg.rank(query, 50))
        expected = _by_path(stores["sqlite"], stores["sqlite"].rank(query, 50))
        assert [f for f, _ in got] == [f for f, _ in expected] and got, words
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)
    pg.close()


class _Rows(_Counting):
    """_Counting that also counts the rows the server sends back."""

    def __init__(self, conn) -> None:  # type: ignore[no-untyped-def]
        super().__init__(conn)
        self.rows = 0

    def _counted(self, cur):  # type: ignore[no-untyped-def]
        rows = cur.fetchall() if cur.description else []
        self.rows += len(rows)
        return rows

    def execute(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.sent += 1
        return _Fetched(self._counted(self.conn.execute(*args, **kwargs)))

    def cursor(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.sent += 1
        outer = self

        class Cursor:
            def __init__(self) -> None:
                self.cur = outer.conn.cursor(*args, **kwargs)

            def __enter__(self):  # type: ignore[no-untyped-def]
                return self

            def __exit__(self, *exc: object) -> None:
                self.cur.close()

            def execute(self, *a, **k):  # type: ignore[no-untyped-def]
                return _Fetched(outer._counted(self.cur.execute(*a, **k)))

        return Cursor()


class _Fetched(list):  # type: ignore[type-arg]
    def fetchall(self):  # type: ignore[no-untyped-def]
        return list(self)

    def fetchone(self):  # type: ignore[no-untyped-def]
        return self[0] if self else None


def test_a_limited_grep_of_a_common_literal_reads_its_first_files_only(tmp_path,
                                                                       pg_url) -> None:
    """A literal in every one of 600 files: grep asks for at most PROBE_BLOCKS + 1
    candidate blocks, then reads the files in path order a group at a time and stops at
    its limit — the
    rows it reads do not grow with the files that match (it asked the server for every
    candidate block, then read 500 files' texts). A rare literal is one indexed lookup.
    The lines are SQLite's, also with texts not in grep's index yet."""
    from loomcli.search import grep as grep_mod
    from loomcli.store.postgres import PROBE_BLOCKS, PROBE_FILES

    for n in range(600):
        write(tmp_path / "d" / f"n{n:03}.md", f"# Note {n}\nthe loom weaves\n"
              + ("a rare zebra\n" if n in (7, 450) else "")
              + ("a sparse kudu\n" if n % 6 == 5 else ""))
    stores = _stores(tmp_path, pg_url, tmp_path / "d")
    pg, lite = stores["postgresql"], stores["sqlite"]
    counting = _Rows(pg.pg)
    pg.pg = counting
    for pattern, limit in (("loom", 20), ("weaves", 1), ("zebra", 20)):
        counting.sent = counting.rows = 0
        got = grep_mod.grep(pg, pattern, limit=limit)
        assert got == grep_mod.grep(lite, pattern, limit=limit) and got.matches, pattern
        # the probe, the roots, two groups in path order (322), never the 600 files
        limit_rows = PROBE_BLOCKS + 1 + 1 + 2 * PROBE_FILES + 20
        assert counting.rows < min(limit_rows, 600), (pattern, counting.rows)
        assert counting.sent <= 5, (pattern, counting.sent)
    counting.sent = counting.rows = 0
    assert [m.path for m in grep_mod.grep(pg, "zebra", limit=20).matches] == [
        "n007.md", "n450.md"]
    assert counting.sent <= 4  # the lookup (its candidates), the roots, the files, their texts
    every = grep_mod.grep(pg, "loom")  # no limit: every group, in path order
    assert every == grep_mod.grep(lite, "loom") and len(every.matches) == 600
    for limit in (20, None):  # in a sixth of the files: past the first group, the index
        counting.sent = 0     # names the rest at once
        sparse = grep_mod.grep(pg, "kudu", limit=limit)
        assert sparse == grep_mod.grep(lite, "kudu", limit=limit)
        assert len(sparse.matches) == (20 if limit else 100)
        assert counting.sent <= 8, counting.sent
    pg.pg = counting.conn
    pg._q("UPDATE blocks SET indexed = false WHERE file_id IN (SELECT id FROM files "
          "WHERE relpath >= 'n300')")  # as before grep's index builder gets to them
    for pattern in ("loom", "zebra"):
        assert grep_mod.grep(pg, pattern) == grep_mod.grep(lite, pattern)
        assert grep_mod.grep(pg, pattern, context=1) == grep_mod.grep(lite, pattern, context=1)
    pg.close()
    lite.close()


def test_a_bm25_search_is_a_handful_of_statements(tmp_path, pg_url, data,
                                                  monkeypatch) -> None:
    """A server's warm search: its rankings (every word, any word, the rare words'
    frequencies) share one postings read, the file count comes with it, the hits' rows
    bring their pages and note rows, and every hit's snippet and excerpt text is one
    statement each (it was about 30: one per ranking, per frequency, per hit's text,
    pages and note row). The hits are SQLite's, excerpts included. (Backlinks still
    resolve each distinct link target with a statement: the vault is left out here.)"""
    from loomcli import config as config_mod
    from loomcli.operations import Corpus

    data = [d for d in data if d.name != "vault"]
    _stores(tmp_path, pg_url, *data)["postgresql"].close()
    monkeypatch.setenv("LOOM_HOME", str(tmp_path / "home"))
    lite = Corpus(config_mod.load(), roots=data, db_path=tmp_path / "index.db")
    monkeypatch.setenv("LOOM_DATABASE_URL", pg_url)
    server = Corpus(config_mod.load(), keep_open=True)
    assert server.location == pg_url
    compared = 0
    for query in ("loom idea", "sourdough bread recipe", "the garden", "watchdog"):
        server.search(query, limit=5, mode="bm25")  # the connection opened, roots read
        with server.store() as store:
            counting = _Counting(store.pg)
            store.pg = counting
            try:
                for chars in (None, 600):
                    before = counting.sent
                    got = server.search(query, limit=5, excerpt_chars=chars, mode="bm25")
                    assert counting.sent - before <= (6 if chars is None else 7), \
                        (query, chars, counting.sent - before)
                    expected = lite.search(query, limit=5, excerpt_chars=chars, mode="bm25")
                    assert got.to_dict() == expected.to_dict(), query
                    compared += bool(got.hits)
            finally:
                store.pg = counting.conn
    assert compared >= 6


def test_a_kept_connection_scores_with_the_totals_of_now(tmp_path, pg_url,
                                                          monkeypatch) -> None:
    """A server keeps its connection for many requests; another process's scan changes
    the BM25 totals (documents, tokens) meanwhile. The next search scores with the new
    ones, as a new process does (the first request's were kept for good)."""
    from loomcli import config as config_mod
    from loomcli.index.indexer import Indexer
    from loomcli.operations import Corpus
    from loomcli.store import open_store

    for n in range(5):
        write(tmp_path / "d" / f"n{n}.md", f"# Note {n}\nloom weaving {n}\n")
    monkeypatch.setenv("LOOM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOOM_DATABASE_URL", pg_url)
    with open_store(pg_url, create=True) as store:
        Indexer(store, config_mod.load()).scan([tmp_path / "d"])
    server = Corpus(config_mod.load(), keep_open=True)
    before = server.search("loom", mode="bm25").hits[0].score
    for n in range(5, 40):  # another scanner: many more documents, longer ones
        write(tmp_path / "d" / f"n{n}.md", f"# Other {n}\n" + "cloth and thread " * 30)
    with open_store(pg_url) as store:
        Indexer(store, config_mod.load()).scan([tmp_path / "d"])
    kept = server.search("loom", mode="bm25").hits[0].score
    fresh = Corpus(config_mod.load()).search("loom", mode="bm25").hits[0].score
    assert kept == pytest.approx(fresh, rel=1e-9) and kept != pytest.approx(before)
