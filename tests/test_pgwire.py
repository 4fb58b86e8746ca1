"""store/pgwire.py, the small client a one-shot read uses instead of psycopg, against a
real PostgreSQL: the same rows as psycopg for the same statements (text and binary),
each sign-in a server asks for (trust, SCRAM, md5, cleartext; the password from the
config, PGPASSWORD or ~/.pgpass), TLS, errors, and what it leaves to psycopg. Then the
commands: a cold `loom search`, `grep`, `get` on PostgreSQL never import psycopg, and an
index that needs a migration is still migrated by a read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from loomcli.errors import ConfigError
from loomcli.store import pgwire
from loomcli.store.pg_connect import Router
from tests import pg
from tests.conftest import imported

NOBODY = 65534
PASSWORD = "pw: with 'quotes' \\ and spaces"
ROLES = {"scram_user": "scram-sha-256", "md5_user": "md5", "clear_user": "password"}


@pytest.fixture(scope="module")
def server() -> Iterator[pg.Server]:
    """A server whose roles sign in as ROLES say, with TLS on (a self-signed certificate;
    certificates are not checked in prefer/require, as libpq's)."""
    why = pg.reason()
    if why is not None:
        pytest.skip(why)
    try:
        server = pg.start_server()
    except RuntimeError as exc:
        pytest.skip(f"PostgreSQL could not be started: {exc}")
    try:
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            for role, method in ROLES.items():
                conn.execute(f"SET password_encryption = "
                             f"'{'md5' if method == 'md5' else 'scram-sha-256'}'")
                conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD "
                             f"'{PASSWORD.replace(chr(39), chr(39) * 2)}'")
            conn.execute("CREATE ROLE wide_user LOGIN PASSWORD 'pässwörd'")
        hba = server.data / "pg_hba.conf"
        lines = [f"host all {role} 127.0.0.1/32 {method}" for role, method in ROLES.items()]
        lines.append("host all wide_user 127.0.0.1/32 scram-sha-256")
        hba.write_text("\n".join(lines) + "\n" + hba.read_text())
        _tls(server)
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.base, ignore_errors=True)


def _tls(server: pg.Server) -> None:
    if shutil.which("openssl") is None:
        return  # the TLS test skips, saying why
    crt, key = server.data / "server.crt", server.data / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    key.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(crt, NOBODY, NOBODY)
        os.chown(key, NOBODY, NOBODY)
    with (server.data / "postgresql.auto.conf").open("a") as f:
        f.write("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")


def _url(server: pg.Server, user: str = "loom", query: str = "") -> str:
    return f"postgresql://{user}@127.0.0.1:{server.port}/postgres" + query


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("PG"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def _wire(url: str, **kw: Any) -> pgwire.Connection:
    conn = pgwire.connect(url, **kw)
    assert conn is not None, url
    return conn


STATEMENTS: list[tuple[str, Any]] = [
    ("SELECT 1::int2, 2::int4, 3::int8, 4::oid, 1.5::float4, 2.25::float8, 1.10::numeric, "
     "true, false, NULL::text, ''::text, 'é ✓ 𝄞'::text, 'x'::varchar, 'n'::name, "
     "'\\x00ff41'::bytea, '{\"a\": [1, null]}'::jsonb, '[1, 2]'::json", None),
    ("SELECT ARRAY['a', 'b,c', 'd\"e', 'f\\g', NULL, '', 'NULL', ' sp '], ARRAY[1, NULL, 3], "
     "ARRAY[]::text[], ARRAY[1.5, 2]::float8[]", None),
    ("SELECT %s::text, %s::int8, %s::float8, %s::bool, %s::bytea, %s::text IS NULL",
     ("it's \\ \"q\" ✓", -(2 ** 62), 0.1, True, b"\x00\x01\xfe", None)),
    ("SELECT x FROM unnest(%s::text[]) AS x", (["a", "b,c", 'd"e', "f\\g", "", None, "NULL"],)),
    ("SELECT x FROM unnest(%s::bigint[]) AS x ORDER BY x", ([3, 1, 2],)),
    ("SELECT 'x' = ANY(%s), 5 = ANY(%s)", (["y", "x"], [4, 5])),
    ("SELECT 'a%%b' LIKE %s, '100%%'", ("a%b",)),
    ("SELECT '50%' LIKE '50%'", None),  # no parameters: `%` as written
    ("SELECT generate_series(1, 3), 'row ' || generate_series(1, 3)", None),
    ("SELECT %s::float8, %s::float8, %s::float8", (float("inf"), float("-inf"), 1e-300)),
    ("SELECT 1 WHERE false", None),
]


def test_reads_give_what_psycopg_gives(server: pg.Server, clean_env: None) -> None:
    import psycopg

    with psycopg.connect(_url(server), autocommit=True) as ref, _wire(_url(server)) as wire:
        for sql, params in STATEMENTS:
            want = ref.execute(sql, params).fetchall()
            got = wire.execute(sql, params).fetchall()
            assert got == want, sql
        assert isinstance(wire.execute("SELECT 1.10::numeric").fetchone()[0], Decimal)
        sql = ("SELECT 7::int8, 8::int4, 9::int2, 'tëxt'::text, convert_to('bytes ✓', 'UTF8'), "
               "true, 2.5::float8, NULL::int8")
        with ref.cursor(binary=True) as a, wire.cursor(binary=True) as b:
            assert b.execute(sql, ()).fetchall() == a.execute(sql, ()).fetchall()
        # A cursor is read one row at a time, then to the end, as psycopg's.
        cur = wire.execute("SELECT generate_series(1, 4)")
        assert cur.fetchone() == (1,)
        assert list(cur) == [(2,), (3,), (4,)]
        assert cur.fetchone() is None


def test_errors_carry_the_sqlstate_and_leave_the_connection_usable(
        server: pg.Server, clean_env: None) -> None:
    import psycopg

    with _wire(_url(server)) as wire:
        with pytest.raises(pgwire.Error) as raised:
            wire.execute("SELEC 1", ())
        assert raised.value.sqlstate == "42601" and "syntax error" in str(raised.value)
        assert not isinstance(raised.value, pgwire.OperationalError)
        with pytest.raises(pgwire.Error) as raised:
            wire.execute("SELECT * FROM no_such_table")
        assert raised.value.sqlstate == "42P01"
        assert wire.execute("SELECT 2", ()).fetchone() == (2,)
        with pytest.raises(pgwire.Error, match="only %s"):
            wire.execute("SELECT %d", (1,))
        wire.execute("BEGIN")
        assert pgwire.in_transaction(wire)
        wire.execute("ROLLBACK")
        assert not pgwire.in_transaction(wire)
        # The server ends the session: the next statement fails as a lost connection.
        (pid,) = wire.execute("SELECT pg_backend_pid()").fetchone()
        with psycopg.connect(_url(server), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(pgwire.OperationalError) as lost:
            wire.execute("SELECT 1")
        assert wire.broken
        # the server's own words (57P01), or the end of the connection if it came first
        assert lost.value.sqlstate == "57P01" or "closed the connection" in str(lost.value)
        with pytest.raises(pgwire.OperationalError, match="lost"):  # and stays lost
            wire.execute("SELECT 1")


@pytest.mark.parametrize("role", list(ROLES))
def test_each_sign_in_with_the_password_from_each_place(
        server: pg.Server, clean_env: None, role: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = _url(server, role)
    who = "SELECT current_user"
    with _wire(url, password=PASSWORD) as conn:  # [store] password_env's
        assert conn.execute(who).fetchone() == (role,)
    with pytest.raises(pgwire.OperationalError) as raised:
        _wire(url)
    assert "no password supplied" in str(raised.value)
    with pytest.raises(pgwire.OperationalError) as raised:
        _wire(url, password="wrong")
    assert f'password authentication failed for user "{role}"' in str(raised.value)
    assert str(raised.value).startswith(
        f'connection to server at "127.0.0.1", port {server.port} failed: FATAL:')
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with _wire(url) as conn:
        assert conn.execute(who).fetchone() == (role,)
    monkeypatch.delenv("PGPASSWORD")
    escaped = PASSWORD.replace("\\", "\\\\").replace(":", "\\:")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"# comment\nother:*:*:*:nope\n127.0.0.1:{server.port}:*:{role}:"
                      f"{escaped}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    with _wire(url) as conn:
        assert conn.execute(who).fetchone() == (role,)
    pgpass.chmod(0o644)  # readable by others: ignored, as libpq ignores it
    with pytest.raises(pgwire.OperationalError, match="no password supplied"):
        _wire(url)


def test_the_router_says_a_failed_sign_in_in_one_line(server: pg.Server, clean_env: None
                                                      ) -> None:
    router = Router(_url(server, "scram_user"), password="wrong")
    with pytest.raises(ConfigError) as raised:
        router.connect_reader(light=True)
    assert str(raised.value).startswith(f"cannot open the store at 127.0.0.1:{server.port}"
                                        "/postgres: ")
    assert "password authentication failed" in str(raised.value)
    dead = Router(f"postgresql://loom@127.0.0.1:{pg.free_port()}/postgres")
    with pytest.raises(Exception, match="Connection refused") as down:
        dead.connect_reader(light=True)
    assert type(down.value).__name__ == "StoreDownError"


def test_what_it_does_not_speak_goes_to_psycopg(server: pg.Server, clean_env: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A non-ASCII password needs SASLprep: psycopg (libpq) signs in instead.
    router = Router(_url(server, "wide_user"), password="pässwörd")
    conn = router.connect_reader(light=True)
    assert not pgwire.is_light(conn)
    assert conn.execute("SELECT current_user").fetchone() == ("wide_user",)
    conn.close()
    assert pgwire.is_light(Router(_url(server)).connect_reader(light=True))
    for url in (_url(server, query="?sslmode=verify-full"),
                _url(server, query="?service=x"),
                _url(server, query="?target_session_attrs=read-write"),
                f"postgresql://loom@127.0.0.1:{server.port},127.0.0.1:1/postgres",
                "postgresql:///postgres"):  # libpq's default socket folder
        assert pgwire.settings(url) is None, url
    monkeypatch.setenv("PGSERVICE", "team")
    assert pgwire.settings(_url(server)) is None
    monkeypatch.delenv("PGSERVICE")
    conf = pgwire.settings("postgresql://u:p%40ss@%2FRun%2FPG:5433/db?options=-c%20x%3Dy")
    assert conf is not None and conf["host"] == "/Run/PG" and conf["port"] == "5433"
    assert (conf["user"], conf["password"], conf["options"]) == ("u", "p@ss", "-c x=y")
    conf = pgwire.settings("postgresql://[::1]:6000/db")
    assert conf is not None and (conf["host"], conf["port"]) == ("::1", "6000")


def test_tls_as_libpq_prefer_and_require(server: pg.Server, clean_env: None) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the test server's certificate")
    ssl_on = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
    for mode, want in (("require", True), ("prefer", True), ("disable", False)):
        with _wire(_url(server, query=f"?sslmode={mode}")) as conn:
            assert conn.execute(ssl_on).fetchone() == (want,), mode
    with _wire(_url(server, "scram_user", "?sslmode=require"), password=PASSWORD) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("scram_user",)


# -- the commands ---------------------------------------------------------------------------

def _loom(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "loomcli", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def test_cold_reads_on_postgresql_never_import_psycopg(pg_url: str, notes: Path,
                                                       tmp_path: Path) -> None:
    env = {**os.environ, "LOOM_HOME": str(tmp_path / "home"), "LOOM_DATABASE_URL": pg_url}
    env.pop("LOOM_CONFIG", None)
    for name in [n for n in env if n.startswith("PG")]:
        env.pop(name)
    scan = _loom(env, "scan", str(notes))
    assert scan.returncode == 0, scan.stderr[-2000:]
    assert "psycopg" in imported(scan.stderr)  # a write: psycopg's COPY and transactions
    for args in (("search", "--mode", "bm25", "warp"), ("grep", "-n", "warp"),
                 ("files",), ("status",)):
        done = _loom(env, *args)
        assert done.returncode == 0, (args, done.stderr[-2000:])
        assert done.stdout.strip(), args
        assert not {m for m in imported(done.stderr) if m.startswith("psycopg")}, args
    path = _loom(env, "files").stdout.split()[0]
    got = _loom(env, "get", path)
    assert got.returncode == 0 and got.stdout
    assert not {m for m in imported(got.stderr) if m.startswith("psycopg")}
    # `[store] light_reads = false`: psycopg for every connection, the same answers.
    light = _loom(env, "search", "--mode", "bm25", "warp").stdout
    assert _loom(env, "config", "set", "store.light_reads", "false").returncode == 0
    done = _loom(env, "search", "--mode", "bm25", "warp")
    assert done.returncode == 0 and done.stdout == light
    assert "psycopg" in imported(done.stderr)


def test_a_read_still_migrates_an_index_that_needs_it(pg_url: str, notes: Path,
                                                      tmp_path: Path) -> None:
    """The light connection cannot run migrations (transactions, COPY): a read that finds
    one missing reopens with psycopg and applies it."""
    import psycopg

    env = {**os.environ, "LOOM_HOME": str(tmp_path / "home"), "LOOM_DATABASE_URL": pg_url}
    env.pop("LOOM_CONFIG", None)
    assert _loom(env, "scan", str(notes)).returncode == 0
    want = _loom(env, "search", "--mode", "bm25", "warp").stdout
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE aliases")
        conn.execute("DELETE FROM migrations WHERE name = '006_aliases'")
    done = _loom(env, "search", "--mode", "bm25", "warp")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == want
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM migrations WHERE name = '006_aliases'"
                            ).fetchone() == (1,)


def test_a_server_that_never_answers_is_given_up_after_connect_timeout(
        server: pg.Server, clean_env: None) -> None:
    import socket

    with socket.socket() as silent:  # accepts (the kernel's backlog), never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        with pytest.raises(pgwire.OperationalError) as raised:
            _wire(f"postgresql://loom@127.0.0.1:{port}/postgres?connect_timeout=2")
        assert str(raised.value) == (f'connection to server at "127.0.0.1", port {port} '
                                     "failed: timeout expired")
    # 0 waits for ever (as libpq's): a server that answers is reached.
    with _wire(_url(server, query="?connect_timeout=0")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def _fake_server(reply: bytes) -> tuple[Any, int]:
    """A loopback server that signs anyone in (trust), then answers the first statement
    with `reply` and closes: a server that lies."""
    import socket
    import struct
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            size = struct.unpack("!i", conn.recv(4))[0]
            first = conn.recv(size - 4)
            if struct.unpack("!i", first[:4])[0] == pgwire.SSL_REQUEST:
                conn.sendall(b"N")
                size = struct.unpack("!i", conn.recv(4))[0]
                conn.recv(size - 4)
            conn.sendall(b"R\x00\x00\x00\x08\x00\x00\x00\x00" + b"Z\x00\x00\x00\x05I")
            conn.recv(65536)  # the statement
            conn.sendall(reply)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, listener.getsockname()[1]


@pytest.mark.parametrize("reply", [
    b"T\x00\x00\x00\x06\x00\x05",  # five columns announced, none described
    b"D\x00\x00\x00\x02",  # a message shorter than its own length field
    b"T\x00\x00\x00\x1d\x00\x01c\x00" + b"\x00" * 6 + b"\x00\x00\x00\x17" + b"\x00" * 8
    + b"D\x00\x00\x00\x0e\x00\x01\x00\x00\x00\x04abcd" + b"Z\x00\x00\x00\x05I",  # int4 'abcd'
    b"",  # the connection ends mid-statement
])
def test_a_lying_server_is_a_lost_connection_not_a_crash(clean_env: None, reply: bytes
                                                         ) -> None:
    thread, port = _fake_server(reply)
    conn = _wire(f"postgresql://loom@127.0.0.1:{port}/postgres")
    with pytest.raises(pgwire.OperationalError):
        conn.execute("SELECT 1", ())
    assert conn.broken
    conn.close()
    thread.join(timeout=30)
