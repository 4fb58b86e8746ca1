"""A primary and a hot standby on loopback for the replica tests: the primary made by
`initdb` in a temp folder, the standby by `pg_basebackup -R` from it (streaming
replication), both run as an unprivileged user (PostgreSQL refuses root).

Debian's postgresql-15 (/usr/lib/postgresql/15/bin) has every program this needs; where
it is missing, `reason()` says why and the tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.pg import client_reason, free_port

NOBODY = 65534
BIN = Path("/usr/lib/postgresql/15/bin")
PROGRAMS = ("initdb", "pg_ctl", "pg_basebackup")
START_TIMEOUT = 60  # seconds pg_ctl waits for a server to accept connections
CATCH_UP_TIMEOUT = 30.0  # seconds a standby is given to replay what the primary wrote
USER = "loom"
# A role that must give a password (scram) — to test [store] password_env and PGPASSWORD.
PASSWORD_USER, PASSWORD = "loompw", "s3cret-for-tests"


def reason() -> str | None:
    """Why a primary and standby cannot be started here, or None when they can."""
    missing = [p for p in PROGRAMS if not (BIN / p).exists()]
    if missing:
        return (f"no {', '.join(missing)} in {BIN}: install Debian's postgresql-15 "
                "(apt-get install postgresql-15)")
    return client_reason()




def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] \
        if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, cwd=cwd)


class Node:
    """One server of the pair: its data folder and port."""

    def __init__(self, base: Path, name: str) -> None:
        self.base = base
        self.data = base / name
        self.log = base / f"{name}.log"
        self.port = free_port()

    def url(self, db: str = "postgres", user: str = USER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   "-c unix_socket_directories='' -c fsync=off -c max_connections=40 "
                   "-c shared_buffers=16MB")
        done = _run(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", str(START_TIMEOUT),
                    "-l", str(self.log), "-o", options, "start", cwd=self.base)
        if done.returncode:
            log = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def kill(self) -> None:
        """Stop at once, as a crash would (no shutdown checkpoint)."""
        _run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop",
             cwd=self.base)


class Pair:
    """A primary with one streaming hot standby."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="loom-pgrep-"))
        self.primary = Node(self.base, "primary")
        self.standby = Node(self.base, "standby")

    def start(self) -> None:
        if os.geteuid() == 0:
            for parent in [self.base, *self.base.parents]:
                if parent == Path(parent.anchor):
                    break
                parent.chmod(parent.stat().st_mode | 0o011)
            os.chown(self.base, NOBODY, NOBODY)
        done = _run(str(BIN / "initdb"), "-D", str(self.primary.data), "-U", USER,
                    "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
                    cwd=self.base)
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-500:]}")
        hba = self.primary.data / "pg_hba.conf"
        # The password role signs in with scram; everyone else as initdb set (trust).
        hba.write_text(f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
                       + hba.read_text())
        self.primary.start()
        import psycopg

        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_USER} LOGIN PASSWORD '{PASSWORD}'")
            conn.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_USER}")
        done = _run(str(BIN / "pg_basebackup"), "-h", "127.0.0.1",
                    "-p", str(self.primary.port), "-U", USER, "-D", str(self.standby.data),
                    "-R", "-X", "stream", "--no-sync", cwd=self.base)
        if done.returncode:
            raise RuntimeError(f"pg_basebackup failed: {done.stderr.strip()[-500:]}")
        self.standby.start()

    def stop(self) -> None:
        self.standby.kill()
        self.primary.kill()
        shutil.rmtree(self.base, ignore_errors=True)

    def wait_replayed(self) -> None:
        """Until the standby has replayed everything the primary wrote so far (polls the
        replay position: the event waited for is the standby reaching the primary's)."""
        import psycopg

        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert target is not None
        deadline = time.monotonic() + CATCH_UP_TIMEOUT
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            while True:
                row = conn.execute("SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s)",
                                   (target[0],)).fetchone()
                if row is not None and row[0] is not None and row[0] >= 0:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError("the standby did not catch up with the primary")
                conn.execute("SELECT pg_sleep(0.02)")


def start_pair() -> Pair:
    """A running primary and standby in a new temp folder (the caller stops them)."""
    pair = Pair()
    try:
        pair.start()
    except BaseException:
        pair.stop()
        raise
    return pair
