"""Several corpora in one PostgreSQL database (`serve --corpus-root` with `[store] url`):
each index in a schema of its own, reached through libpq's `options` in its URL, with its
own tables, migrations and advisory locks. Names first, then a real server (tests/pg.py);
the served case over HTTP and MCP is in test_team_tokens."""

from __future__ import annotations

import pytest

from loomcli.store.pg_connect import corpus_schema, in_schema, place, schema_of


def test_a_corpus_schema_is_a_plain_name_postgresql_keeps_as_written():
    assert corpus_schema("alice") == "loom_alice"
    assert corpus_schema("team_2") == "loom_team_2"
    # Names PostgreSQL would fold or cut get a digest: two corpora never share a schema.
    folded = {corpus_schema(n) for n in ("Alice", "alice-", "ALICE", "a" * 64, "a" * 63)}
    assert len(folded) == 5 and "loom_alice" not in folded
    for name in folded:
        assert name.startswith("loom_") and len(name) <= 63 and name == name.lower()


def test_a_schema_rides_in_the_url_beside_its_other_parameters():
    url = "postgresql://ann@db.example:5433/team?sslmode=require&options=-c%20work_mem%3D64MB"
    moved = in_schema(url, "loom_alice")
    assert schema_of(moved) == "loom_alice" and schema_of(url) is None
    assert "sslmode=require" in moved and "work_mem%3D64MB" in moved
    assert schema_of(in_schema(moved, "loom_bob")) == "loom_bob"  # the last setting wins
    assert place(moved) == "db.example:5433/team, schema loom_alice"
    assert place(url) == "db.example:5433/team"


def test_each_schema_is_an_index_of_its_own(pg_url, tmp_path):
    """Tables, migrations and the write lock per schema: a scan of one corpus never
    waits for another's, and a corpus not scanned yet is not the database's other index."""
    from loomcli.errors import BusyError, IndexMissingError
    from loomcli.store import open_store

    default = open_store(pg_url, create=True)  # an index in the database's own schema
    alice_url, bob_url = in_schema(pg_url, "loom_alice"), in_schema(pg_url, "loom_bob")
    with pytest.raises(IndexMissingError):
        open_store(alice_url)  # public's index is not alice's
    alice = open_store(alice_url, create=True)
    bob = open_store(bob_url, create=True)
    again = open_store(alice_url)
    try:
        with alice.write_lock():
            with bob.write_lock(), default.write_lock():
                pass  # other schemas' locks are free
            with pytest.raises(BusyError), again.write_lock():
                pass  # the same schema's is held
        for store, schema in ((alice, "loom_alice"), (bob, "loom_bob")):
            assert store.pg.execute("SELECT current_schema()").fetchone()[0] == schema
            migrated = store.pg.execute("SELECT count(*) FROM migrations").fetchone()[0]
            assert migrated == default.pg.execute(
                "SELECT count(*) FROM public.migrations").fetchone()[0]
        # pg_trgm went where every schema sees it: grep's filter works in each.
        assert default.pg.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                                  "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
                                  ).fetchone() in (None, ("public",))
    finally:
        for store in (default, alice, bob, again):
            store.close()


def test_a_search_path_in_the_url_puts_the_index_in_that_schema(pg_url, tmp_path, loom_home):
    """Without --corpus-root too: `LOOM_DATABASE_URL` (or `[store] url`) naming a search
    path keeps the whole index there, made when missing; `loom status` says where."""
    import json
    import os
    import subprocess
    import sys

    import psycopg

    from tests.conftest import write

    write(tmp_path / "notes" / "kiln.md", "# Kiln\nthe kiln fires at 1200 degrees\n")
    url = pg_url + "?options=-c%20search_path%3Dteam_docs,public"
    env = {**os.environ, "LOOM_DATABASE_URL": url}
    loom = [sys.executable, "-m", "loomcli"]
    scan = subprocess.run([*loom, "scan", str(tmp_path / "notes")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert scan.returncode == 0, scan.stderr
    status = json.loads(subprocess.run([*loom, "status", "--json"], env=env, check=True,
                                       capture_output=True, text=True, timeout=60).stdout)
    assert status["store"].endswith(", schema team_docs") and status["files"] == 1
    grep = subprocess.run([*loom, "grep", "-c", "1200"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert grep.stdout.strip() == "kiln.md:1", grep.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT relpath FROM team_docs.files").fetchall() == [("kiln.md",)]
        assert conn.execute("SELECT to_regclass('public.files')").fetchone() == (None,)


def test_a_corpus_scan_never_touches_the_schemas_after_it_in_the_path(pg_url):
    """A first scan drops its postings' indexes (made again at its end); a scan that died
    left them dropped, and the next one must not then find public's by the search path."""
    from loomcli.store import open_store

    def indexes(store, schema):  # type: ignore[no-untyped-def]
        return {r[0] for r in store.pg.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = "
            "'fts_terms'", (schema,))}

    default = open_store(pg_url, create=True)
    before = indexes(default, "public")
    alice_url = in_schema(pg_url, "loom_alice")
    died, again = open_store(alice_url, create=True), open_store(alice_url)
    try:
        died.begin_scan(["notes"])  # its indexes dropped; it never finishes
        assert indexes(died, "loom_alice") == set()
        again.begin_scan(["notes"])
        assert before and indexes(default, "public") == before
    finally:
        for store in (default, died, again):
            store.close()
