"""The PostgreSQL the tests start (tests/pg.py) is real, reachable and empty."""

from __future__ import annotations


def test_the_harness_gives_a_fresh_database_on_a_real_server(pg_url: str, pg_server) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()[0]
        assert int(version) >= 150000
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                              ).fetchone()[0]
        assert tables == 0
    assert pg_server.create_db() != pg_url  # every test its own database
