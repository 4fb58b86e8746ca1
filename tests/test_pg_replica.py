"""Reads from replicas, writes to the primary (loomcli/store/pg_connect.py), on a real
primary and hot standby (tests/pg_replica.py): a replica that goes down sends reads to
the next server, a primary that goes down leaves reads working and fails writes with one
line; `lag` as the standby reports it; passwords and sslmode reach libpq."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loomcli.errors import ConfigError, StoreDownError
from loomcli.store.pg_connect import Router, place
from tests import pg_replica

why_not = pg_replica.reason()
if why_not:
    print(f"skipping the replica tests: {why_not}", file=sys.stderr)
pytestmark = pytest.mark.skipif(why_not is not None, reason=why_not or "")


@pytest.fixture(scope="module")
def servers() -> Iterator[pg_replica.Pair]:
    pair = pg_replica.start_pair()
    try:
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def pair(servers: pg_replica.Pair) -> pg_replica.Pair:
    """The pair, both servers up (a test before may have killed one)."""
    import psycopg

    for node in (servers.primary, servers.standby):
        try:
            psycopg.connect(node.url(), connect_timeout=2).close()
        except psycopg.OperationalError:
            node.start()
    return servers


def dead_url() -> str:
    return f"postgresql://{pg_replica.USER}@127.0.0.1:{pg_replica.free_port()}/postgres"


def fresh_db(pair: pg_replica.Pair, name: str) -> str:
    """A new empty database on the primary (replicated to the standby): its name. The
    `postgres` database holds the tables of the router's tests, not a loom index."""
    import psycopg

    with psycopg.connect(pair.primary.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return name


def where(conn: Any) -> tuple[bool, int]:
    row = conn.execute("SELECT pg_is_in_recovery(), inet_server_port()").fetchone()
    return bool(row[0]), int(row[1])


def test_reads_go_to_the_replica_and_writes_to_the_primary(pair: pg_replica.Pair) -> None:
    router = Router(pair.primary.url(), [pair.standby.url()])
    router.write(lambda c: c.execute("CREATE TABLE IF NOT EXISTS t (n int); "
                                     "INSERT INTO t VALUES (7)"))
    pair.wait_replayed()
    assert router.read(where) == (True, pair.standby.port)
    assert router.write(where) == (False, pair.primary.port)
    assert router.read(lambda c: c.execute("SELECT max(n) FROM t").fetchone()[0]) == 7


def test_a_replica_down_sends_reads_to_the_next_then_to_the_primary(
        pair: pg_replica.Pair) -> None:
    router = Router(pair.primary.url(), [dead_url(), pair.standby.url()])
    assert router.read(where) == (True, pair.standby.port)  # the first is down: the next
    pair.standby.kill()
    assert router.read(where) == (False, pair.primary.port)  # a kept connection lost
    fresh = Router(pair.primary.url(), [pair.standby.url()])
    assert fresh.read(where) == (False, pair.primary.port)  # none up: the primary


def test_a_reader_of_its_own_moves_on_when_its_server_dies(pair: pg_replica.Pair) -> None:
    """connect_reader: the connection a store keeps. Its server killed, the store asks
    again and gets the next server (the dead one is marked down by the failed query)."""
    import psycopg

    router = Router(pair.primary.url(), [pair.standby.url()])
    conn = router.connect_reader()
    assert where(conn) == (True, pair.standby.port)
    pair.standby.kill()
    with pytest.raises(psycopg.OperationalError):
        where(conn)
    router.lost(conn)  # as the store does when its connection fails
    with router.connect_reader() as again:
        assert where(again) == (False, pair.primary.port)
    conn.close()
    pair.primary.kill()
    with pytest.raises(StoreDownError, match="no server of the store answers"):
        Router(pair.primary.url(), [pair.standby.url()]).connect_reader()


def test_a_replica_back_up_serves_reads_again(pair: pg_replica.Pair) -> None:
    now = [0.0]
    router = Router(pair.primary.url(), [pair.standby.url()], clock=lambda: now[0])
    pair.standby.kill()
    assert router.read(where)[1] == pair.primary.port
    pair.standby.start()
    assert router.read(where)[1] == pair.primary.port  # still marked down
    now[0] += 60  # past DOWN_FOR_S: tried again
    assert router.read(where) == (True, pair.standby.port)


def test_the_primary_down_leaves_reads_and_fails_writes_in_one_line(
        pair: pg_replica.Pair) -> None:
    router = Router(pair.primary.url(), [pair.standby.url()])
    router.write(lambda c: c.execute("CREATE TABLE IF NOT EXISTS kept (s text); "
                                     "INSERT INTO kept VALUES ('before')"))
    pair.wait_replayed()
    pair.primary.kill()
    assert router.read(lambda c: c.execute("SELECT s FROM kept LIMIT 1").fetchone()[0]) \
        == "before"
    with pytest.raises(StoreDownError) as raised:
        router.write(where)  # the kept connection died with the server
    message = str(raised.value)
    assert message.startswith(f"the primary at 127.0.0.1:{pair.primary.port}/postgres is "
                              "down (")
    assert "reads go on from 1 replica" in message and "\n" not in message
    with pytest.raises(StoreDownError, match="the primary at .* is down"):
        Router(pair.primary.url(), [pair.standby.url()]).connect_primary()


def test_every_server_down_is_one_line(pair: pg_replica.Pair) -> None:
    router = Router(dead_url(), [dead_url()])
    with pytest.raises(StoreDownError) as raised:
        router.read(where)
    assert str(raised.value).startswith("no server of the store answers (127.0.0.1:")
    assert "Connection refused" in str(raised.value) and "\n" not in str(raised.value)


def test_status_shows_each_replicas_lag(pair: pg_replica.Pair) -> None:
    import psycopg

    router = Router(pair.primary.url(), [pair.standby.url(), dead_url()])
    router.write(lambda c: c.execute("CREATE TABLE IF NOT EXISTS lagged (n int); "
                                     "INSERT INTO lagged VALUES (1)"))
    pair.wait_replayed()
    up, down = router.replica_status()
    assert up == {"url": f"127.0.0.1:{pair.standby.port}/postgres", "up": True,
                  "in_recovery": True, "lag_bytes": 0, "lag_s": 0.0, "error": None}
    assert down["up"] is False and down["error"] == "Connection refused"
    # Replay paused: the standby receives WAL but does not apply it, and says how far
    # behind it is (bytes against the primary; seconds since its last replayed commit).
    with psycopg.connect(pair.standby.url(), autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            router.write(lambda c: c.execute("INSERT INTO lagged "
                                             "SELECT generate_series(1, 1000)"))
            behind = router.replica_status()[0]
            assert behind["lag_bytes"] > 0 and behind["lag_s"] is not None
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")


def test_a_password_from_password_env_pgpassword_or_pgpass(
        pair: pg_replica.Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = pair.primary.url(user=pg_replica.PASSWORD_USER)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    with pytest.raises(ConfigError) as raised:
        Router(url).read(where)
    assert str(raised.value).startswith(f"cannot open the store at 127.0.0.1:"
                                        f"{pair.primary.port}/postgres: ")
    assert "$PGPASSWORD, ~/.pgpass or [store] password_env" in str(raised.value)
    assert Router(url, password=pg_replica.PASSWORD).read(where)[0] is False
    monkeypatch.setenv("PGPASSWORD", pg_replica.PASSWORD)
    assert Router(url).read(where)[0] is False
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{pair.primary.port}:*:{pg_replica.PASSWORD_USER}:"
                      f"{pg_replica.PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert Router(url).read(where)[0] is False


def test_sslmode_is_passed_through(pair: pg_replica.Pair) -> None:
    assert Router(pair.primary.url() + "?sslmode=disable").read(where)[0] is False
    with pytest.raises(ConfigError, match="SSL"):  # the test server has no certificate
        Router(pair.primary.url() + "?sslmode=require").read(where)


def test_one_router_per_process_for_the_same_servers(pair: pg_replica.Pair, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's requests share one router: a replica found down by one request is
    skipped by the next (no second connect timeout)."""
    from loomcli import config

    monkeypatch.delenv("LOOM_DATABASE_URL", raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[store]\nurl = "{pair.primary.url()}"\nread_urls = ["{dead_url()}"]\n')
    first = Router.shared(config.load(path))
    assert first is not None and first is Router.shared(config.load(path))
    assert first.read(where)[1] == pair.primary.port
    assert first.is_down(first.replicas[0])
    path.write_text(f'[store]\nurl = "{pair.primary.url()}"\n')
    assert Router.shared(config.load(path)) is not first
    assert Router.shared(config.Config(tmp_path / "none.toml")) is None


def test_password_env_from_config(pair: pg_replica.Pair, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from loomcli import config

    cfg_path = tmp_path / "config.toml"
    cfg_path.write_text(f'[store]\nurl = "{pair.primary.url(user=pg_replica.PASSWORD_USER)}"\n'
                        f'read_urls = ["{pair.standby.url()}"]\n'
                        'password_env = "LOOM_TEST_PG_PASSWORD"\n')
    monkeypatch.setenv("LOOM_TEST_PG_PASSWORD", pg_replica.PASSWORD)
    router = Router.from_config(config.load(cfg_path))
    assert router is not None
    assert router.write(where) == (False, pair.primary.port)
    assert place(router.replicas[0]) == f"127.0.0.1:{pair.standby.port}/postgres"


def test_status_names_the_primary_and_its_replicas(pair: pg_replica.Pair, tmp_path: Path
                                                   ) -> None:
    """`loom status` on a PostgreSQL store names it (never a password) and shows each
    replica's lag; with the standby down, that replica is shown down."""
    import json

    db = fresh_db(pair, "loom_status")
    env = {**os.environ, "LOOM_DATABASE_URL": pair.primary.url(db),
           "LOOM_CONFIG": str(tmp_path / "config.toml")}
    (tmp_path / "config.toml").write_text(f'[store]\nread_urls = ["{pair.standby.url(db)}"]\n')
    pair.wait_replayed()
    run = subprocess.run([sys.executable, "-m", "loomcli", "status", "--json"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["backend"] == "postgresql"
    assert data["store"] == f"postgresql: 127.0.0.1:{pair.primary.port}/{db}"
    assert [r["url"] for r in data["replicas"]] == [f"127.0.0.1:{pair.standby.port}/{db}"]
    assert data["replicas"][0]["up"] is True
    pair.standby.kill()
    run = subprocess.run([sys.executable, "-m", "loomcli", "status"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"index:  postgresql: 127.0.0.1:{pair.primary.port}/{db} (" in run.stdout
    assert (f"replica: 127.0.0.1:{pair.standby.port}/{db}: down (Connection refused)"
            in run.stdout)


def test_status_with_the_primary_down_still_shows_the_replica(pair: pg_replica.Pair,
                                                              tmp_path: Path) -> None:
    import json

    db = fresh_db(pair, "loom_status_down")
    (tmp_path / "config.toml").write_text(f'[store]\nurl = "{pair.primary.url(db)}"\n'
                                          f'read_urls = ["{pair.standby.url(db)}"]\n')
    env = {**os.environ, "LOOM_CONFIG": str(tmp_path / "config.toml")}
    env.pop("LOOM_DATABASE_URL", None)
    pair.wait_replayed()
    pair.primary.kill()
    run = subprocess.run([sys.executable, "-m", "loomcli", "status", "--json"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    [replica] = json.loads(run.stdout)["replicas"]
    assert (replica["up"], replica["in_recovery"], replica["lag_bytes"]) == (True, True, None)


def test_loom_reads_from_the_replica_with_the_primary_down(pair: pg_replica.Pair,
                                                           tmp_path: Path) -> None:
    """The commands themselves: a scan writes to the primary; with the primary killed,
    `loom search`, `grep` and `get` answer from the standby and a scan fails in one line
    naming the primary."""
    name = fresh_db(pair, "loom_cli")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "boiler.md").write_text("# Boiler\nThe boiler pressure should read 1.5 bar.\n")
    (notes / "garden.md").write_text("# Garden\nPrune the roses in late winter.\n")
    (tmp_path / "config.toml").write_text(f'[store]\nurl = "{pair.primary.url(name)}"\n'
                                          f'read_urls = ["{pair.standby.url(name)}"]\n')
    env = {**os.environ, "LOOM_CONFIG": str(tmp_path / "config.toml"),
           "LOOM_HOME": str(tmp_path / "home")}
    env.pop("LOOM_DATABASE_URL", None)

    def loom(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "loomcli", *args], env=env,
                              capture_output=True, text=True)

    scanned = loom("scan", str(notes))
    assert scanned.returncode == 0, scanned.stderr
    pair.wait_replayed()
    pair.primary.kill()
    found = loom("search", "boiler pressure", "--json")
    assert found.returncode == 0, found.stderr
    first = json.loads(found.stdout)["hits"][0]["path"]
    assert first.endswith("boiler.md")
    grep = loom("grep", "-c", "roses")
    assert grep.returncode == 0 and grep.stdout.strip().endswith(":1"), grep
    got = loom("get", first)
    assert got.returncode == 0 and "1.5 bar" in got.stdout, got
    again = loom("scan", str(notes))
    assert again.returncode != 0
    [line] = again.stderr.strip().splitlines()
    assert line.startswith(f"loom: the primary at 127.0.0.1:{pair.primary.port}/{name} is "
                           "down"), line
