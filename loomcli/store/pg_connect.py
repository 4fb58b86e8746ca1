"""Which PostgreSQL server a connection goes to: writes to the primary (`[store] url`),
reads to the first healthy replica of `[store] read_urls`, else to the primary.

A server that cannot be reached is marked down for DOWN_FOR_S in this process, so a
dead replica costs one failed connect, not one per request; a read that loses its
server half-way runs again on the next one (reads are idempotent). With the primary
down, reads go on from the replicas and a write fails with one line naming it.

psycopg is imported only when a connection is made: `loom status` on SQLite, and every
command's start-up, never load it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from loomcli.errors import ConfigError, StoreDownError

TYPE_CHECKING = False  # typing's, without importing it (records.py)

if TYPE_CHECKING:
    from typing import Any, TypeVar

    import psycopg

    from loomcli.config import Config

    T = TypeVar("T")

CONNECT_TIMEOUT_S = 3  # libpq's connect_timeout: an unreachable host is given up after it
DOWN_FOR_S = 5.0  # a server that failed is skipped for this long, then tried again
APPLICATION_NAME = "loom"  # as pg_stat_activity and pg_stat_replication show it
# libpq's message for a refused connection holds the host, then what failed.
_FAILED = re.compile(r".*failed: (.+)$")
_SIGN_IN = ("authentication", "password", "does not exist", "no pg_hba.conf entry",
            "SSL", "sslmode")


def place(url: str) -> str:
    """A server as it may be shown: `host:port/db` (and the schema of a corpus's index),
    never a user or a password."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2] or "localhost"
    except ValueError:
        return "(an unreadable URL)"
    db = unquote(parts.path.lstrip("/")) or "(default database)"
    schema = schema_of(url)
    return f"{netloc}/{db}" + (f", schema {schema}" if schema else "")


# Several corpora in one database (`serve --corpus-root` with `[store] url`): each in a
# schema of its own, named from the corpus (PostgreSQL folds unquoted names to lower case
# and keeps 63 bytes of a name: a name that would change is shortened with a digest).
SCHEMA_PREFIX = "loom_"
_PLAIN_SCHEMA = re.compile(r"[a-z0-9_]{1,58}")
_SEARCH_PATH = re.compile(r"search_path\s*=\s*([A-Za-z0-9_]+)")


def corpus_schema(name: str) -> str:
    """The schema a corpus's index lives in: `loom_<name>`, or for a name PostgreSQL would
    fold or cut, its plain part and a digest (two corpora never share one)."""
    if _PLAIN_SCHEMA.fullmatch(name):
        return SCHEMA_PREFIX + name
    import zlib

    plain = re.sub(r"[^a-z0-9_]", "_", name.lower())[:48]
    return f"{SCHEMA_PREFIX}{plain}_{zlib.crc32(name.encode()):08x}"


def in_schema(url: str, schema: str) -> str:
    """`url` with libpq's `options` setting the search path to `schema` (then public,
    where the extensions are): every connection made from it, in this process or in
    grep's index builder, reads and writes that schema's tables."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    setting = f"-c search_path={schema},public"
    kept = [(k, v) for k, v in query if k != "options"]
    given = " ".join(v for k, v in query if k == "options")
    kept.append(("options", f"{given} {setting}".strip()))
    return urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote)))


def schema_of(url: str) -> str | None:
    """The schema a URL's `options` put first in the search path (in_schema), or None:
    the database's default."""
    try:
        query = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    except ValueError:
        return None
    found = [name for key, value in query if key == "options"
             for name in _SEARCH_PATH.findall(value)]
    return found[-1].lower() if found else None  # the last wins, folded as PostgreSQL does


def reason(exc: BaseException) -> str:
    """libpq's error in one short line: `Connection refused`, not three lines of it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    found = _FAILED.search(first)
    return (found.group(1) if found else first)[:300]


def _sign_in_problem(text: str) -> bool:
    return any(word.lower() in text.lower() for word in _SIGN_IN)


# Routers by (url, read_urls, password): `Router.shared`. Per process, like the SQLite
# store's kept connections (operations._KEPT): what a server knows of its servers.
_SHARED: dict[tuple[str, tuple[str, ...], str | None], Router] = {}
_SHARED_LOCK = threading.Lock()


def _row(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...] = ()
         ) -> tuple[Any, ...]:
    """The one row a query of loom's own returns."""
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return tuple(row)


def create_extension(conn: Any, name: str) -> None:
    """CREATE EXTENSION where every index of the database sees it: in public when a
    corpus's schema comes first in the search path (it would go there otherwise, out of
    the other corpora's sight)."""
    first, schemas = conn.execute("SELECT current_schema(), current_schemas(false)"
                                  ).fetchone()
    where = " SCHEMA public" if first != "public" and "public" in schemas else ""
    conn.execute(f"CREATE EXTENSION IF NOT EXISTS {name}{where}")


def _urls(url: str, read_urls: Sequence[str], schema: str | None
          ) -> tuple[str, list[str]]:
    if schema is None:
        return url, list(read_urls)
    return in_schema(url, schema), [in_schema(u, schema) for u in read_urls]


class Router:
    """Connections to one store's servers. `read` and `write` run a function on a
    connection kept per thread (servers answer many requests; a connect is a round trip
    or three); `connect_primary` gives a connection of its own (a scan's transaction)."""

    def __init__(self, primary: str, replicas: Sequence[str] = (), password: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.primary = primary
        self.replicas = list(replicas)
        self.password = password
        self.clock = clock
        self._down: dict[str, float] = {}  # url -> when it may be tried again
        self._lock = threading.Lock()
        self._local = threading.local()
        self._urls: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    @classmethod
    def from_config(cls, config: Config, schema: str | None = None) -> Router | None:
        """The config's store, or None when the index is the SQLite file. `schema`: a
        corpus's (corpus_schema), on the primary and every replica alike."""
        url = config.store_url
        if url is None:
            return None
        return cls(*_urls(url, config.read_urls, schema), config.store_password)

    @classmethod
    def shared(cls, config: Config, schema: str | None = None) -> Router | None:
        """from_config's router, one per process for the same servers: a server's
        requests share what it learnt (which replica is down) and its kept connections.
        A config that names other servers (or another schema) gets another router."""
        url = config.store_url
        if url is None:
            return None
        primary, replicas = _urls(url, config.read_urls, schema)
        key = (primary, tuple(replicas), config.store_password)
        with _SHARED_LOCK:
            router = _SHARED.get(key)
            if router is None:
                router = _SHARED[key] = cls(primary, replicas, config.store_password)
        return router

    # -- connecting -----------------------------------------------------------------------

    def connect(self, url: str, *, autocommit: bool = True, light: bool = False
                ) -> psycopg.Connection[Any]:
        """A new connection to `url`; libpq reads PGPASSWORD and ~/.pgpass itself, and
        `sslmode` and the URL's other parameters are passed through as written. `light`:
        a one-shot read's, made by store/pgwire.py when it speaks the URL and the
        server's sign-in (no psycopg to import: most of a cold command's time), else by
        psycopg."""
        from loomcli.store import pgwire

        try:
            conn = self._light(url) if light and autocommit else None
            if conn is None:
                conn = self._psycopg(url, autocommit)
        except pgwire.operational():
            self.mark_down(url)
            raise
        self._up(url)
        self._urls[conn] = url
        return conn

    def _light(self, url: str) -> Any:
        """store/pgwire.py's connection, or None where it does not speak the URL or the
        server's sign-in (psycopg then makes it)."""
        from loomcli.store import pgwire

        try:
            wire = pgwire.connect(url, password=self.password, timeout=CONNECT_TIMEOUT_S,
                                  application_name=APPLICATION_NAME)
        except pgwire.Unsupported:
            return None
        if wire is not None:
            wire.reopen = lambda: self.connect(url)  # psycopg, for what a read cannot do
        return wire

    def _psycopg(self, url: str, autocommit: bool) -> psycopg.Connection[Any]:
        import psycopg

        extra: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S,
                                 "application_name": APPLICATION_NAME}
        if self.password is not None:
            extra["password"] = self.password
        return psycopg.connect(url, autocommit=autocommit, **extra)

    def lost(self, conn: psycopg.Connection[Any]) -> None:
        """A connection this router made failed (its server went away): mark that server
        down, so the next connect_reader() goes to the next one."""
        url = self._urls.get(conn)
        if url is not None:
            self.mark_down(url)

    def mark_down(self, url: str) -> None:
        with self._lock:
            self._down[url] = self.clock() + DOWN_FOR_S

    def _up(self, url: str) -> None:
        with self._lock:
            self._down.pop(url, None)

    def is_down(self, url: str) -> bool:
        with self._lock:
            until = self._down.get(url)
        return until is not None and self.clock() < until

    def read_order(self) -> list[str]:
        """Replicas first, in their order, then the primary; servers marked down go last
        (still tried: with every server marked, one may be back)."""
        servers = [*self.replicas, self.primary]
        return ([u for u in servers if not self.is_down(u)]
                + [u for u in servers if self.is_down(u)])

    def _kept(self, url: str) -> psycopg.Connection[Any]:
        conns: dict[str, Any] = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(url)
        if conn is None or conn.closed or conn.broken:
            conn = conns[url] = self.connect(url)
        return conn

    def _drop(self, url: str) -> None:
        conn = self._local.__dict__.get("conns", {}).pop(url, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close this thread's kept connections."""
        for url in list(self._local.__dict__.get("conns", {})):
            self._drop(url)

    # -- reading and writing --------------------------------------------------------------

    def read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """fn on the first server that answers, in read_order; a server that fails
        before or during fn is marked down and fn runs on the next."""
        from loomcli.store.pgwire import operational

        failures: list[tuple[str, str]] = []
        for url in self.read_order():
            try:
                return fn(self._kept(url))
            except operational() as exc:
                self._drop(url)
                self.mark_down(url)
                if url == self.primary and _sign_in_problem(str(exc)):
                    raise self._sign_in_error(url, exc) from None
                failures.append((url, reason(exc)))
        raise self._all_down(failures)

    def connect_reader(self, *, light: bool = False) -> psycopg.Connection[Any]:
        """A connection of its own (autocommit) to the first server in read_order that
        answers: for a store that keeps its connection (one per server thread). When
        that server goes down mid-use, the store drops the connection and asks again:
        the server is marked down by then, so the next one answers. `light`: for a
        one-shot command's reads (connect)."""
        from loomcli.store.pgwire import operational

        failures: list[tuple[str, str]] = []
        for url in self.read_order():
            try:
                return self.connect(url, light=light)
            except operational() as exc:
                if url == self.primary and _sign_in_problem(str(exc)):
                    raise self._sign_in_error(url, exc) from None
                failures.append((url, reason(exc)))
        raise self._all_down(failures)

    def write(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """fn on the primary (kept connection, autocommit: fn opens its transaction)."""
        import psycopg

        try:
            conn = self._kept(self.primary)
        except psycopg.OperationalError as exc:
            raise self._primary_error(exc) from None
        try:
            return fn(conn)
        except psycopg.OperationalError as exc:
            if not conn.broken and not conn.closed:
                raise
            self._drop(self.primary)
            self.mark_down(self.primary)
            raise self._primary_error(exc) from None

    def connect_primary(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A connection of its own to the primary, or StoreDownError in one line."""
        import psycopg

        try:
            return self.connect(self.primary, autocommit=autocommit)
        except psycopg.OperationalError as exc:
            raise self._primary_error(exc) from None

    def _primary_error(self, exc: BaseException) -> ConfigError | StoreDownError:
        if _sign_in_problem(str(exc)):
            return self._sign_in_error(self.primary, exc)
        readers = (f"reads go on from {len(self.replicas)} "
                   f"replica{'s' if len(self.replicas) != 1 else ''}; "
                   if self.replicas else "")
        return StoreDownError(f"the primary at {place(self.primary)} is down "
                              f"({reason(exc)})",
                              f"{readers}start it, or point [store] url at the new primary, "
                              "then run this again")

    def _sign_in_error(self, url: str, exc: BaseException) -> ConfigError:
        return ConfigError(f"cannot open the store at {place(url)}: {reason(exc)}",
                           "check the URL, and the password in $PGPASSWORD, ~/.pgpass or "
                           "[store] password_env")

    def _all_down(self, failures: list[tuple[str, str]]) -> StoreDownError:
        said = "; ".join(f"{place(u)}: {why}" for u, why in failures)
        if not self.replicas:
            return StoreDownError(f"the primary at {place(self.primary)} is down ({said})",
                                  "start it, or point [store] url at a server that is up")
        return StoreDownError(f"no server of the store answers ({said})",
                              "start the primary or a replica of [store] read_urls")

    # -- replicas' state ------------------------------------------------------------------

    def replica_status(self) -> list[dict[str, Any]]:
        """Each replica: whether it answers, and how far it is behind the primary —
        `lag_bytes` of WAL it has not replayed yet (against the primary's current
        position, when the primary answers) and `lag_s`, the age of the last transaction
        it replayed while WAL is still waiting (0 when it has replayed everything it has
        received and the primary has nothing newer)."""
        if not self.replicas:
            return []  # (no connection, no psycopg: `loom status` is a one-shot read)
        import psycopg

        primary_lsn = None
        with contextlib.suppress(StoreDownError, ConfigError, psycopg.Error):
            primary_lsn = self.write(lambda c: _row(c, "SELECT pg_current_wal_lsn()::text"))[0]
        out = []
        for url in self.replicas:
            row: dict[str, Any] = {"url": place(url), "up": False, "in_recovery": None,
                                   "lag_bytes": None, "lag_s": None, "error": None}
            try:
                conn = self._kept(url)
                got = _row(conn,
                           "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
                           "pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), "
                           "extract(epoch FROM now() - pg_last_xact_replay_timestamp())"
                           "::float8, "
                           "pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::float8",
                           (primary_lsn or "0/0",))
            except psycopg.Error as exc:
                self._drop(url)
                self.mark_down(url)
                row["error"] = reason(exc)
                out.append(row)
                continue
            recovering, replay_lsn, caught_up, age, behind = got
            row.update(up=True, in_recovery=bool(recovering))
            if recovering:
                lag_bytes = max(0, int(behind)) if primary_lsn and replay_lsn else None
                row["lag_bytes"] = lag_bytes
                row["lag_s"] = 0.0 if (caught_up and lag_bytes in (0, None)) \
                    else round(age, 3) if age is not None else None
            else:  # a read_url that is not a standby (promoted, or a primary): no lag
                row["lag_bytes"], row["lag_s"] = 0, 0.0
            out.append(row)
        return out
