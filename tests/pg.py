"""A real PostgreSQL for the tests: a cluster made by `initdb` in a temp folder, run as an
unprivileged user (PostgreSQL refuses root), listening on loopback on a free port.

Which server: the first of these that is installed and has `pg_trgm` (grep's candidate
filter), else the first installed at all — the `pgserver` wheel's bundled PostgreSQL
(with pgvector), then Debian's `postgresql-15`. With none, the tests that need it skip
and say why (`reason()`). The pgvector tests start the first that has pgvector
(`vector_bin()`, `vector_reason()`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

NOBODY = 65534
DEBIAN_BIN = Path("/usr/lib/postgresql/15/bin")
START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections


def _bundled_bin() -> Path | None:
    """The bin folder of the PostgreSQL the `pgserver` wheel ships, if installed."""
    from importlib.util import find_spec

    spec = find_spec("pgserver")  # not imported: its start-up sets up folders of its own
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).resolve().parent / "pginstall" / "bin"
    return folder if (folder / "initdb").exists() else None


def has_extension(bin_dir: Path, name: str) -> bool:
    """Whether the PostgreSQL of `bin_dir` ships the extension `name` (pg_trgm, vector)."""
    share = subprocess.run([str(bin_dir / "pg_config"), "--sharedir"], capture_output=True,
                           text=True).stdout.strip() if (bin_dir / "pg_config").exists() else ""
    places = [Path(share)] if share else []
    places.append(bin_dir.parent / "share" / "postgresql")
    return any((p / "extension" / f"{name}.control").exists() for p in places)


def _installed() -> list[Path]:
    return [b for b in (_bundled_bin(), DEBIAN_BIN) if b is not None
            and (b / "initdb").exists() and (b / "pg_ctl").exists()]


def find_bin() -> Path | None:
    found = _installed()
    with_trgm = [b for b in found if has_extension(b, "pg_trgm")]
    return (with_trgm or found or [None])[0]


def vector_bin() -> Path | None:
    """A PostgreSQL that has pgvector (the `pgserver` wheel's; Debian's with
    postgresql-15-pgvector), or None."""
    return next((b for b in _installed() if has_extension(b, "vector")), None)


def vector_reason() -> str | None:
    """Why no server with pgvector can be started here, or None when one can."""
    if vector_bin() is None:
        return ("no PostgreSQL with pgvector to start: install the pgserver wheel (the "
                "test extra) or Debian's postgresql-15-pgvector")
    return client_reason()


def reason() -> str | None:
    """Why no server can be started here, or None when one can."""
    if find_bin() is None:
        return ("no PostgreSQL to start: install Debian's postgresql-15 "
                "(apt-get install postgresql-15) or the pgserver wheel")
    return client_reason()


def client_reason() -> str | None:
    """Why this process cannot run a server it starts (the driver, dropping root)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'loom-index[postgres]'"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "running as root and setpriv (util-linux) is missing: initdb refuses root"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _open_to_user(place: Path) -> None:
    """Let the unprivileged user reach `place` (execute bit on its parents)."""
    for parent in [place, *place.parents]:
        if parent == Path(parent.anchor):
            break
        parent.chmod(parent.stat().st_mode | 0o011)


class Server:
    """One PostgreSQL cluster; `url(db)` for a database in it (made by `create_db`)."""

    def __init__(self, bin_dir: Path, base: Path) -> None:
        self.bin = bin_dir
        self.base = base
        self.data = base / "data"
        self.port = free_port()
        self.user = "loom"
        self._dbs = 0

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] \
            if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, cwd=self.base)

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            _open_to_user(self.base)
            _open_to_user(self.bin)
            os.chown(self.base, NOBODY, NOBODY)
        done = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user,
                         "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-500:]}")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   "-c unix_socket_directories='' -c fsync=off -c full_page_writes=off "
                   "-c max_connections=100 -c shared_buffers=64MB")
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w",
                         "-t", str(START_TIMEOUT), "-l", str(self.base / "log"),
                         "-o", options, "start")
        if done.returncode:
            log = (self.base / "log").read_text(errors="replace")[-800:] \
                if (self.base / "log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                  "stop")

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def create_db(self) -> str:
        """A new empty database; its url."""
        import psycopg

        self._dbs += 1
        name = f"loom_test_{self._dbs}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def start_server(bin_dir: Path | None = None) -> Server:
    """A running server (of `bin_dir`, else find_bin's) in a new temp folder (the caller
    stops it)."""
    bin_dir = bin_dir or find_bin()
    assert bin_dir is not None
    base = Path(tempfile.mkdtemp(prefix="loom-pg-"))
    server = Server(bin_dir, base)
    try:
        server.start()
    except BaseException:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
        raise
    return server
