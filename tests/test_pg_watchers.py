"""Several `loom watch` processes on one PostgreSQL database — as on several machines:
two on the same folder, one on another folder — never lose or duplicate a file, and a
watcher killed (SIGKILL) while it writes leaves no lock behind: the server frees its
advisory locks with its session, and the others go on. Real processes, a real server
(tests/pg.py); the test waits on the watchers' events and on the database's state."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from loomcli.store.postgres import MIGRATIONS

from .conftest import FIXTURES, sigint_default, write
from .test_watch import LOOM, WAIT

BURST = 30  # files written at once into each folder
KILL_BURST = 120  # files written while a watcher is killed


class Watcher:
    """`loom watch FOLDER --json` with its own environment; its events in a queue."""

    def __init__(self, folder: Path, env: dict[str, str], log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen([*LOOM, "watch", str(folder), "--json"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **env}, preexec_fn=sigint_default)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"change": "not JSON", "line": line})

    def next(self, timeout: float = WAIT) -> dict[str, Any]:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event from loom watch in {timeout:.0f}s (exit code "
                                 f"{self.proc.poll()})") from None

    def drain(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=WAIT)
        self.log.close()
        return code


def put_files(folder: Path, stage: Path, names: list[str]) -> None:
    """Each file written whole elsewhere, then renamed in: a watcher never sees one half
    written (which it would rightly index twice: added, then updated)."""
    stage.mkdir(exist_ok=True)
    for name in names:
        write(stage / name, f"# {name}\nthe {name} note, unique word w{abs(hash(name))}\n")
    for name in names:
        os.replace(stage / name, folder / name)


def indexed(url: str) -> dict[str, list[str]]:
    """Every file row, by root path: relpaths, duplicates kept."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT r.path, f.relpath FROM files f JOIN roots r "
                            "ON r.id = f.root_id WHERE f.indexed_at IS NOT NULL "
                            "ORDER BY r.path, f.relpath").fetchall()
    out: dict[str, list[str]] = {}
    for root, rel in rows:
        out.setdefault(root, []).append(rel)
    return out


def on_disk(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in
                                             p.relative_to(folder).parts))


def wait_until_indexed(url: str, folders: list[Path]) -> dict[str, list[str]]:
    """The index once it holds exactly what the folders hold (a deadline, not a sleep:
    the watchers' commits are what is waited for)."""
    deadline = time.monotonic() + WAIT
    want = {str(f): on_disk(f) for f in folders}
    while True:
        got = indexed(url)
        if all(got.get(k) == v for k, v in want.items()):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"index never matched the folders: {got} != {want}")
        time.sleep(0.2)


def added(events: list[dict[str, Any]]) -> list[str]:
    """The names of the files added (a root's display prefix aside: whichever watcher made
    the index first has the root without one)."""
    return sorted(e["path"].rsplit("/", 1)[-1] for e in events if e["change"] == "added")


def test_watchers_on_one_database_lose_and_duplicate_nothing(tmp_path, pg_url) -> None:
    import psycopg

    a, b = tmp_path / "a", tmp_path / "b"
    for name in ("welcome.md", "recipes/bread.md", "reference/watchdog.rst"):
        (a / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(FIXTURES / "notes" / name, a / name)
    b.mkdir()
    write(b / "first.md", "# First\nthe b folder\n")
    env = {"LOOM_HOME": str(tmp_path / "home"), "LOOM_DATABASE_URL": pg_url}
    # Three at once on a new database: one makes the index, the others wait their turn.
    w1 = Watcher(a, env, tmp_path / "w1.log")
    w2 = Watcher(a, {**env, "LOOM_HOME": str(tmp_path / "home2")}, tmp_path / "w2.log")
    w3 = Watcher(b, env, tmp_path / "w3.log")
    watchers = [w1, w2, w3]
    try:
        for w in watchers:
            first = w.next()
            assert first["change"] == "scanned", first
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT name) FROM migrations"
                                ).fetchone() == (len(MIGRATIONS),) * 2  # each applied once
            assert conn.execute("SELECT count(*) FROM roots").fetchone()[0] == 2
        wait_until_indexed(pg_url, [a, b])

        # A burst into each folder: the two watchers of `a` add each file once between
        # them; the watcher of `b` adds b's.
        names_a = [f"a{i:03}.md" for i in range(BURST)]
        names_b = [f"b{i:03}.md" for i in range(BURST)]
        put_files(a, tmp_path / "stage-a", names_a)
        put_files(b, tmp_path / "stage-b", names_b)
        got_a: list[dict[str, Any]] = []
        got_b: list[dict[str, Any]] = []
        while len(added(got_a)) < BURST:
            got_a.append(_either(w1, w2))
        while len(added(got_b)) < BURST:
            got_b.append(w3.next())
        final = wait_until_indexed(pg_url, [a, b])
        got_a += w1.drain() + w2.drain()  # anything more would be a second "added"
        assert added(got_a) == names_a  # every file once: none twice, none lost
        got_b += w3.drain()
        assert added(got_b) == names_b
        assert [e for e in got_a + got_b if e["change"] != "added"] == []
        assert all(len(v) == len(set(v)) for v in final.values())

        # One watcher of `a` killed while it writes a larger burst: its session's locks
        # go with it, the other watcher of `a` takes over, and nothing is lost.
        more = [f"c{i:03}.md" for i in range(KILL_BURST)]
        put_files(a, tmp_path / "stage-c", more)
        while True:  # the first change either applies: it holds the write lock now
            e = _either(w1, w2)
            if e["change"] == "added":
                break
        killed = w1 if e.get("_from") is w1 else w2
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait(timeout=WAIT)
        survivor = w2 if killed is w1 else w1
        last = ["zz-after-kill.md"]
        put_files(a, tmp_path / "stage-d", last)
        while "zz-after-kill.md" not in added([survivor.next()]):
            pass
        final = wait_until_indexed(pg_url, [a, b])
        assert final[str(a)] == on_disk(a) and len(final[str(a)]) == len(set(final[str(a)]))
        # Only live sessions hold loom's advisory locks.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            dead = conn.execute(
                "SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
                "AND NOT EXISTS (SELECT 1 FROM pg_stat_activity s WHERE s.pid = l.pid)"
            ).fetchone()[0]
        assert dead == 0
        # The survivor and `b`'s watcher are still at work.
        put_files(b, tmp_path / "stage-e", ["b-late.md"])
        assert added([w3.next()]) == ["b-late.md"]
        watchers.remove(killed)
    finally:
        codes = [w.stop() for w in watchers]
        logs = "".join((tmp_path / f"w{i}.log").read_text() for i in (1, 2, 3))
    assert codes == [0] * len(codes), logs


def _either(*watchers: Watcher) -> dict[str, Any]:
    """The next event of whichever watcher has one first (tagged `_from`)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        for w in watchers:
            try:
                event = w.events.get(timeout=0.05)
            except queue.Empty:
                continue
            event["_from"] = w
            return event
    raise AssertionError(f"no event from any watcher in {WAIT:.0f}s")
