"""A small PostgreSQL client for one-shot reads: `loom search`, `grep`, `get`, `files` and
`status` against a server, without importing psycopg.

Why: a cold command on PostgreSQL paid `import psycopg` first — 100-130 ms, three times
SQLite's whole search — before it sent a byte. This module speaks the frontend/backend
protocol (version 3.0) itself for the few things a read needs: connect (plain or TLS),
sign in (trust, password, md5, SCRAM-SHA-256), run a statement with parameters and read
its rows as Python values, the way psycopg returns them for the types loom selects.

It is a reader, not a driver. `connect` returns None for whatever it does not speak —
a URL or environment it does not know (several hosts, a service file, client
certificates, certificate checks, Kerberos), a non-ASCII password, no host named — and
the caller opens psycopg instead; so does a server that asks for a sign-in it lacks
(`Unsupported`). Writes, migrations, COPY and long-running processes (`loom serve`,
`mcp`, `watch`) keep psycopg. Errors carry the server's SQLSTATE; `errors()` and
`operational()` give the exception classes to catch whichever client made the
connection, importing neither.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

PROTOCOL = 196608  # 3.0
SSL_REQUEST = 80877103
# URL parameters this client honours; any other one (or a PG* variable for one) is
# left to libpq through psycopg.
_PARAMS = {"host", "port", "dbname", "user", "password", "options", "application_name",
           "connect_timeout", "sslmode"}
_ENV = {"PGHOST": "host", "PGPORT": "port", "PGDATABASE": "dbname", "PGUSER": "user",
        "PGOPTIONS": "options", "PGAPPNAME": "application_name",
        "PGCONNECT_TIMEOUT": "connect_timeout", "PGSSLMODE": "sslmode"}
_ENV_OK = {*_ENV, "PGPASSWORD", "PGPASSFILE"}
# SQLSTATE classes psycopg raises as OperationalError (connection, resources, operator
# intervention — a server shutting down —, system errors).
_OPERATIONAL = ("08", "53", "54", "55", "57", "58")


class Error(Exception):
    """An error the server sent (sqlstate set) or the connection failed."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class OperationalError(Error):
    """The connection failed or the server is going away: the next server may answer."""


class Unsupported(Exception):
    """The server asks for something this client does not speak: use psycopg."""


def errors() -> tuple[type[BaseException], ...]:
    """The exception classes of a database error, from either client (psycopg's only
    when something imported it: it cannot have raised one otherwise)."""
    psycopg = sys.modules.get("psycopg")
    return (Error, psycopg.Error) if psycopg is not None else (Error,)


def operational() -> tuple[type[BaseException], ...]:
    """The classes of a lost or refused connection, from either client."""
    psycopg = sys.modules.get("psycopg")
    return (OperationalError, psycopg.OperationalError) if psycopg is not None \
        else (OperationalError,)


def sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None)


def is_light(conn: object) -> bool:
    return isinstance(conn, Connection)


def in_transaction(conn: Any) -> bool:
    """Whether a connection of either client is inside a transaction."""
    if isinstance(conn, Connection):
        return conn.status != b"I"
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status != TransactionStatus.IDLE)


# -- where to connect -----------------------------------------------------------------------

def settings(url: str) -> dict[str, str] | None:
    """The connection settings of a `postgresql://` URL (with the PG* variables libpq
    reads), or None when they hold anything this client leaves to libpq."""
    env = os.environ
    if any(k.startswith("PG") and k not in _ENV_OK for k in env) or "KRB5CCNAME" in env:
        return None  # PGSERVICE, PGSSLCERT, PGHOSTADDR, Kerberos, …: libpq's business
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("postgresql", "postgres") or "," in parts.netloc:
        return None
    got = {key: env[name] for name, key in _ENV.items() if env.get(name)}
    sign_in, _, place = parts.netloc.rpartition("@")
    host, port = place, ""
    if place.startswith("["):  # [::1]:5432
        host, _, rest = place[1:].partition("]")
        port = rest.removeprefix(":")
    elif ":" in place:
        host, _, port = place.rpartition(":")
    if host:
        got["host"] = unquote(host)  # a socket's folder keeps its case
    if port:
        got["port"] = port
    if sign_in:
        user, colon, secret = sign_in.partition(":")
        if user:
            got["user"] = unquote(user)
        if colon:
            got["password"] = unquote(secret)
    if parts.path.lstrip("/"):
        got["dbname"] = unquote(parts.path.lstrip("/"))
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _PARAMS:
            return None
        got[key] = value
    mode = got.setdefault("sslmode", "prefer")
    if mode not in ("disable", "prefer", "require") or not got.get("host"):
        return None  # certificate checks, `allow`; the default socket folder: libpq's
    if mode == "require" and os.path.exists(os.path.expanduser("~/.postgresql/root.crt")):
        return None  # libpq then checks the server's certificate (verify-ca)
    if got["host"].startswith("@") or "," in got["host"] or not got.get(
            "port", "5432").isdigit():
        return None  # an abstract socket, several hosts or ports
    if "user" not in got:
        import getpass

        got["user"] = getpass.getuser()
    got.setdefault("dbname", got["user"])
    got.setdefault("port", "5432")
    return got


def pgpass(conf: dict[str, str]) -> str | None:
    """The password ~/.pgpass (or $PGPASSFILE) gives for these settings, as libpq reads
    it: the first line whose host, port, database and user match (`*` any), a socket
    matching `localhost`; a file others may read is ignored."""
    path = os.environ.get("PGPASSFILE") or os.path.expanduser("~/.pgpass")
    try:
        if os.stat(path).st_mode & 0o077:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    host = "localhost" if conf["host"].startswith("/") else conf["host"]
    want = (host, conf["port"], conf["dbname"], conf["user"])
    for line in lines:
        if not line or line.startswith("#"):
            continue
        fields: list[str] = []
        part: list[str] = []
        escaped = False
        for ch in line:
            if escaped:
                part.append(ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == ":" and len(fields) < 4:
                fields.append("".join(part))
                part = []
            else:
                part.append(ch)
        fields.append("".join(part))
        if len(fields) == 5 and all(f in ("*", w) for f, w in zip(fields, want, strict=False)):
            return fields[4]
    return None


def connect(url: str, *, password: str | None = None, timeout: float = 10,
            application_name: str = "") -> Connection | None:
    """A connection to the server of `url`, or None when psycopg should make it (see the
    module's docstring). Raises OperationalError when the server cannot be reached or
    refuses the sign-in, with libpq's wording (`connection to server at "h", port p
    failed: …`), and Unsupported for a sign-in this client lacks."""
    conf = settings(url)
    if conf is None:
        return None
    if password is not None:
        conf["password"] = password
    if application_name and "application_name" not in conf:
        conf["application_name"] = application_name
    try:
        wait = float(conf.get("connect_timeout") or timeout)
    except ValueError:
        return None
    # As libpq: 0 (or less) waits for ever, and less than 2 seconds is taken as 2.
    limit = None if wait <= 0 else max(wait, 2.0)
    host, port = conf["host"], int(conf["port"])
    where = (f'connection to server on socket "{host}/.s.PGSQL.{port}" failed' if
             host.startswith("/") else
             f'connection to server at "{host}", port {port} failed')
    try:
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(limit)
            sock.connect(f"{host}/.s.PGSQL.{port}")
        else:
            # (an ASCII name as bytes: no IDNA codec to import, 2-3 ms)
            address: Any = (host.encode() if host.isascii() else host, port)
            sock = socket.create_connection(address, timeout=limit)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = _tls(sock, conf["sslmode"], host)
    except TimeoutError:
        raise OperationalError(f"{where}: timeout expired") from None
    except OSError as exc:
        raise OperationalError(f"{where}: {exc.strerror or exc}") from None
    conn = Connection(sock)
    try:
        conn._start(conf)
    except Error as exc:
        conn.close()
        raise OperationalError(f"{where}: {exc}", exc.sqlstate) from None
    except OSError as exc:
        conn.close()
        raise OperationalError(f"{where}: {exc.strerror or exc}") from None
    except BaseException:
        conn.close()
        raise
    sock.settimeout(None)
    return conn


def _tls(sock: socket.socket, mode: str, host: str) -> socket.socket:
    """TLS as libpq's `prefer` and `require`: asked for, no certificate check."""
    if mode == "disable":
        return sock
    sock.sendall(struct.pack("!ii", 8, SSL_REQUEST))
    answer = sock.recv(1)
    if answer == b"S":
        import ssl

        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context.wrap_socket(sock, server_hostname=host)
    if answer == b"N" and mode == "prefer":
        return sock
    raise OSError(0, "server does not support SSL, but SSL was required"
                  if answer == b"N" else "received invalid response to SSL negotiation")


# -- values -----------------------------------------------------------------------------

def _text_param(value: Any) -> str | None:
    """A parameter in PostgreSQL's text form (its type left for the server to infer)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else \
            {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return "{" + ",".join(_array_item(v) for v in value) + "}"
    raise Error(f"cannot send a {type(value).__name__} as a parameter")


def _array_item(value: Any) -> str:
    if value is None:
        return "NULL"
    text = _text_param(value)
    assert text is not None
    if isinstance(value, list | tuple):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array(text: str, item: Callable[[str], Any]) -> list[Any]:
    """A one-dimensional array in PostgreSQL's text form."""
    if text.startswith("["):  # bounds: [0:2]={…}
        text = text[text.index("=") + 1:]
    inner = text[1:-1]
    out: list[Any] = []
    i, n = 0, len(inner)
    while i < n:
        if inner[i] == '"':
            j, part = i + 1, []
            while inner[j] != '"':
                if inner[j] == "\\":
                    j += 1
                part.append(inner[j])
                j += 1
            out.append(item("".join(part)))
            i = j + 2
        else:
            j = inner.find(",", i)
            j = n if j < 0 else j
            word = inner[i:j]
            out.append(None if word == "NULL" else item(word))
            i = j + 1
    return out


def _decimal(raw: bytes) -> Any:
    from decimal import Decimal

    return Decimal(raw.decode())


def _json(raw: bytes) -> Any:
    import json

    return json.loads(raw)


def _bytea(raw: bytes) -> bytes:
    return bytes.fromhex(raw[2:].decode())


def _text(raw: bytes) -> str:
    return raw.decode()


# Result values in text form, by type oid, each read from the value's bytes (int and
# float read bytes themselves); others are returned as text, as psycopg returns a type it
# has no loader for.
_TEXT: dict[int, Callable[[bytes], Any]] = {
    16: b"t".__eq__, 17: _bytea, 20: int, 21: int, 23: int, 26: int, 700: float,
    701: float, 1700: _decimal, 114: _json, 3802: _json}
_ARRAYS = {1000: 16, 1001: 17, 1016: 20, 1005: 21, 1007: 23, 1009: 25, 1015: 1043,
           1021: 700, 1022: 701, 1231: 1700, 1003: 19}
_INT4 = struct.Struct("!i")
_KINDS = [bytes([i]) for i in range(256)]  # a message's type byte as the bytes it is
# In binary form (a cursor(binary=True)): the types loom's binary reads select.
_BINARY: dict[int, Callable[[bytes], Any]] = {
    16: b"\x01".__eq__, 17: bytes,
    20: lambda b: int.from_bytes(b, "big", signed=True),
    21: lambda b: int.from_bytes(b, "big", signed=True),
    23: lambda b: int.from_bytes(b, "big", signed=True),
    26: lambda b: int.from_bytes(b, "big"),
    700: lambda b: struct.unpack("!f", b)[0], 701: lambda b: struct.unpack("!d", b)[0],
    25: _text, 1043: _text, 19: _text, 1042: _text}


def _loader(oid: int, binary: bool) -> Callable[[bytes], Any]:
    if binary:
        found = _BINARY.get(oid)
        if found is None:
            raise Error(f"no binary reader for type {oid}")
        return found
    text = _TEXT.get(oid)
    if text is not None:
        return text
    element = _ARRAYS.get(oid)
    if element is not None:
        item = _TEXT.get(element, _text)
        return lambda raw: _array(raw.decode(), lambda word: item(word.encode()))
    return _text


def _placeholders(sql: str) -> str:
    """psycopg's `%s` as `$1`, `$2`… (`%%` as `%`)."""
    out, n, i = [], 0, 0
    while True:
        j = sql.find("%", i)
        if j < 0:
            out.append(sql[i:])
            return "".join(out)
        out.append(sql[i:j])
        nxt = sql[j + 1:j + 2]
        if nxt == "s":
            n += 1
            out.append(f"${n}")
        elif nxt == "%":
            out.append("%")
        else:
            raise Error(f"only %s placeholders are supported, not %{nxt}")
        i = j + 2


# -- the connection -----------------------------------------------------------------------

class Cursor:
    """The rows of the last statement; psycopg's shape (execute, fetchone, fetchall,
    iteration)."""

    def __init__(self, conn: Connection, binary: bool = False) -> None:
        self._conn = conn
        self._binary = binary
        self._rows: list[tuple[Any, ...]] = []
        self._at = 0
        self.rowcount = -1

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        self._rows, self.rowcount = self._conn._run(sql, params, self._binary)
        self._at = 0
        return self

    def fetchone(self) -> tuple[Any, ...] | None:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows = self._rows[self._at:]
        self._at = len(self._rows)
        return rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        self._rows = []

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Connection:
    """One session, autocommit (each statement its own transaction unless BEGIN)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self.closed = False
        self.broken = False
        self.status = b"I"  # the last ReadyForQuery's: I idle, T in a transaction, E failed
        self.reopen: Callable[[], Any] | None = None  # psycopg to the same server (Router)

    # psycopg's surface, as far as loom's reads use it
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Cursor:
        return Cursor(self).execute(sql, params)

    def cursor(self, binary: bool = False) -> Cursor:
        return Cursor(self, binary)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if not self.broken:
                self._sock.sendall(b"X\x00\x00\x00\x04")
        except OSError:
            pass
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # messages
    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.broken = True
            raise OperationalError(f"the connection to the server was lost ({exc})") from None

    def _fill(self, need: int) -> None:
        while len(self._buf) < need:
            try:
                got = self._sock.recv(1 << 18)
            except OSError as exc:
                self.broken = True
                raise OperationalError(f"the connection to the server was lost ({exc})") \
                    from None
            if not got:
                self.broken = True
                raise OperationalError("server closed the connection unexpectedly")
            self._buf += got

    def _message(self) -> tuple[bytes, bytes]:
        buf = self._buf
        if len(buf) < 5:
            self._fill(5)
        (size,) = _INT4.unpack_from(buf, 1)
        if size < 4:
            self.broken = True
            raise OperationalError(f"the server sent a malformed message ({size} bytes)")
        if len(buf) < 1 + size:
            self._fill(1 + size)
        kind, body = _KINDS[buf[0]], bytes(buf[5:1 + size])
        del buf[:1 + size]
        return kind, body

    def _error(self, body: bytes) -> Error:
        fields = {}
        for part in body.split(b"\x00"):
            if part:
                fields[part[:1]] = part[1:].decode("utf-8", "replace")
        state = fields.get(b"C")
        text = fields.get(b"M", "unknown error")
        if fields.get(b"S") in ("FATAL", "PANIC"):
            text = f"{fields[b'S']}:  {text}"
        cls = OperationalError if state and state[:2] in _OPERATIONAL else Error
        return cls(text, state)

    def _start(self, conf: dict[str, str]) -> None:
        params = {"user": conf["user"], "database": conf["dbname"],
                  "client_encoding": "UTF8"}
        for key in ("application_name", "options"):
            if conf.get(key):
                params[key] = conf[key]
        start = struct.pack("!i", PROTOCOL) + b"".join(
            k.encode() + b"\x00" + v.encode() + b"\x00" for k, v in params.items()) + b"\x00"
        self._send(struct.pack("!i", len(start) + 4) + start)
        scram: _Scram | None = None
        while True:
            kind, body = self._message()
            if kind == b"R":
                code = int.from_bytes(body[:4], "big")
                if code == 0:
                    continue
                if code in (3, 5):  # cleartext, md5
                    secret = self._password(conf)
                    if code == 5:
                        import hashlib

                        inner = hashlib.md5((secret + conf["user"]).encode()).hexdigest()
                        secret = "md5" + hashlib.md5(inner.encode() + bytes(body[4:8])
                                                     ).hexdigest()
                    self._send_password(secret.encode() + b"\x00")
                elif code == 10:  # SASL: the mechanisms offered
                    offered = bytes(body[4:]).split(b"\x00")
                    if b"SCRAM-SHA-256" not in offered:
                        raise Unsupported("SASL mechanism")
                    scram = _Scram(self._password(conf))
                    first = scram.first()
                    self._send_password(b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first))
                                        + first)
                elif code == 11 and scram is not None:
                    self._send_password(scram.final(bytes(body[4:])))
                elif code == 12 and scram is not None:
                    scram.verify(bytes(body[4:]))
                else:  # Kerberos, GSS, SSPI, …
                    raise Unsupported(f"authentication request {code}")
            elif kind == b"E":
                raise self._error(body)
            elif kind == b"Z":
                self.status = bytes(body[:1])
                return
            # S (parameter status), K (backend key), N (notice): nothing loom needs

    def _password(self, conf: dict[str, str]) -> str:
        secret = conf.get("password") or os.environ.get("PGPASSWORD") or pgpass(conf)
        if not secret:
            raise Error("fe_sendauth: no password supplied")
        if not secret.isascii():
            raise Unsupported("a non-ASCII password (SASLprep)")
        return secret

    def _send_password(self, body: bytes) -> None:
        self._send(b"p" + struct.pack("!i", len(body) + 4) + body)

    def _run(self, sql: str, params: Sequence[Any] | None, binary: bool
             ) -> tuple[list[tuple[Any, ...]], int]:
        if self.closed or self.broken:
            raise OperationalError("the connection is closed" if self.closed else
                                   "the connection to the server was lost")
        if params is None:  # the simple protocol (several statements allowed), as psycopg
            data = sql.encode()
            self._send(b"Q" + struct.pack("!i", len(data) + 5) + data + b"\x00")
            binary = False
        else:
            self._send(self._extended(_placeholders(sql), params, binary))
        rows: list[tuple[Any, ...]] = []
        loaders: list[Callable[[bytes], Any]] = []
        count = -1
        failure: Error | None = None
        while True:
            try:
                kind, body = self._message()
            except OperationalError:
                if failure is None:
                    raise
                # A FATAL error (the server shutting down, the backend terminated) is
                # followed by the end of the connection: say the server's words.
                raise OperationalError(str(failure), failure.sqlstate) from None
            try:
                if kind == b"D":
                    rows.append(_row(body, loaders))
                elif kind == b"T":
                    rows, loaders = [], _description(body, binary)
                elif kind == b"C":
                    tail = bytes(body[:-1]).rsplit(b" ", 1)[-1]
                    count = int(tail) if tail.isdigit() else -1
                elif kind == b"E":
                    failure = self._error(body)
            except (ValueError, IndexError, struct.error) as exc:
                self.broken = True
                raise OperationalError(f"the server sent a malformed message ({exc})"
                                       ) from None
            if kind == b"Z":
                self.status = bytes(body[:1])
                if failure is not None:
                    if isinstance(failure, OperationalError):
                        self.broken = True
                    raise failure
                return rows, count

    def _extended(self, sql: str, params: Sequence[Any], binary: bool) -> bytes:
        data = sql.encode()
        parse = b"\x00" + data + b"\x00" + b"\x00\x00"
        values = [_text_param(v) for v in params]
        bind = [b"\x00\x00", b"\x00\x00", struct.pack("!h", len(values))]
        for value in values:
            if value is None:
                bind.append(b"\xff\xff\xff\xff")
            else:
                raw = value.encode()
                bind.append(struct.pack("!i", len(raw)) + raw)
        bind.append(struct.pack("!hh", 1, 1 if binary else 0))
        bind_body = b"".join(bind)
        return (b"P" + struct.pack("!i", len(parse) + 4) + parse
                + b"B" + struct.pack("!i", len(bind_body) + 4) + bind_body
                + b"D\x00\x00\x00\x06P\x00"
                + b"E\x00\x00\x00\x09\x00\x00\x00\x00\x00"
                + b"S\x00\x00\x00\x04")


def _description(body: bytes, binary: bool) -> list[Callable[[bytes], Any]]:
    count = int.from_bytes(body[:2], "big")
    at, loaders = 2, []
    for _ in range(count):
        at = body.index(b"\x00", at) + 1  # the column's name
        oid = int.from_bytes(body[at + 6:at + 10], "big")
        loaders.append(_loader(oid, binary))
        at += 18
    return loaders


def _row(body: bytes, loaders: list[Callable[[bytes], Any]]) -> tuple[Any, ...]:
    at = 2
    out: list[Any] = []
    unpack = _INT4.unpack_from
    for load in loaders:
        (size,) = unpack(body, at)
        at += 4
        if size < 0:
            out.append(None)
        else:
            out.append(load(body[at:at + size]))
            at += size
    return tuple(out)


class _Scram:
    """SCRAM-SHA-256 (RFC 5802/7677) as PostgreSQL asks it: no channel binding, the
    user name left to the startup message; the server's signature is checked."""

    def __init__(self, password: str) -> None:
        import base64

        self.password = password
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.bare = f"n=,r={self.nonce}"
        self.server_key = b""
        self.auth = ""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        import base64
        import hashlib
        import hmac

        text = server_first.decode()
        parts = dict(p.split("=", 1) for p in text.split(","))
        if not parts["r"].startswith(self.nonce):
            raise OperationalError("SCRAM: the server's nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(),
                                     base64.b64decode(parts["s"]), int(parts["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={parts['r']}"
        self.auth = f"{self.bare},{text},{without_proof}"
        signature = hmac.digest(hashlib.sha256(client_key).digest(), self.auth.encode(),
                                "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_key = hmac.digest(salted, b"Server Key", "sha256")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        import base64
        import hmac

        want = hmac.digest(self.server_key, self.auth.encode(), "sha256")
        got = dict(p.split("=", 1) for p in server_final.decode().split(","))
        if "v" not in got or not hmac.compare_digest(base64.b64decode(got["v"]), want):
            raise OperationalError("SCRAM: the server's signature is wrong")
