"""`loom watch` as a real process: changes show up in grep and files within seconds."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from .conftest import FIXTURES, sigint_default, write

LOOM = [sys.executable, "-m", "loomcli"]
WAIT = 300.0  # a generous deadline for each event: the machine may be busy


class Watch:
    def __init__(self, folder) -> None:
        self.proc = subprocess.Popen([*LOOM, "watch", str(folder), "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=sigint_default)
        self.events: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        first = self.next()
        assert first["change"] == "scanned", first

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:  # shown by the assertion it fails, not lost with the thread
                self.events.put({"change": "not JSON", "line": line})

    def next(self) -> dict:
        try:
            return self.events.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no event from loom watch in {WAIT:.0f}s (exit code "
                                 f"{self.proc.poll()})") from None

    def expect(self, *wanted: dict) -> None:
        got = [self.next() for _ in wanted]
        key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
        assert sorted(map(key, got)) == sorted(map(key, wanted))

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=WAIT)


def files() -> list[str]:
    out = subprocess.run([*LOOM, "files"], capture_output=True, text=True).stdout
    return out.splitlines()


def grep(pattern: str) -> list[str]:
    return subprocess.run([*LOOM, "grep", pattern], capture_output=True, text=True
                          ).stdout.splitlines()


@pytest.fixture
def notes(tmp_path, loom_home):
    folder = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", folder)
    return folder


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for CPU time")
@pytest.mark.slow
def test_watch_applies_every_kind_of_change_and_idles_quietly(notes, loom_home):
    w = Watch(notes)
    try:
        write(notes / "new.md", "# New\nkumquat marmalade\n")
        w.expect({"change": "added", "path": "new.md"})
        assert grep("kumquat") == ["new.md:2:6:kumquat marmalade"]
        write(notes / "new.md", "# New\nkumquat jam now\n")
        w.expect({"change": "updated", "path": "new.md"})
        (notes / "new.md").rename(notes / "journal" / "jam.md")
        w.expect({"change": "moved", "path": "journal/jam.md", "from": "new.md"})
        (notes / "ideas.org").unlink()
        w.expect({"change": "removed", "path": "ideas.org"})
        with open(notes / ".loomignore", "a") as fh:
            fh.write("recipes/\n")
        w.expect({"change": "removed", "path": "recipes/bread.md"},
                 {"change": "removed", "path": "recipes/crepes-latin1.txt"})
        assert not any(p.startswith("recipes/") for p in files())
        (notes / "sub" / "deeper").mkdir(parents=True)
        write(notes / "sub" / "deeper" / "n.md", "# Deep\nnested folder\n")
        w.expect({"change": "added", "path": "sub/deeper/n.md"})
        assert "journal/jam.md" in files() and grep("kumquat") == [
            "journal/jam.md:2:6:kumquat jam now"]
        before = w.cpu_seconds()
        time.sleep(10)
        assert w.cpu_seconds() - before < 0.3
    finally:
        code = w.stop(signal.SIGINT)
    assert code == 0


def test_a_burst_is_absorbed_and_sigterm_exits_0(notes, loom_home):
    w = Watch(notes)
    try:
        burst = notes / "burst"
        burst.mkdir()
        for i in range(300):
            (burst / f"n{i:03}.md").write_text(f"# Note {i}\nburst-token-{i}\n")
        seen = {w.next()["path"] for _ in range(300)}
        assert seen == {f"burst/n{i:03}.md" for i in range(300)}
    finally:
        code = w.stop(signal.SIGTERM)
    assert code == 0
    conn = sqlite3.connect(loom_home / "index.db")
    conn.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 1)")
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 309


def test_a_vanished_root_is_waited_for(notes, loom_home, tmp_path):
    w = Watch(notes)
    try:
        notes.rename(tmp_path / "away")
        time.sleep(3)
        assert w.proc.poll() is None
        (tmp_path / "away").rename(notes)
        write(notes / "after.md", "# After\nreturned\n")
        deadline = time.time() + WAIT
        while time.time() < deadline and "after.md" not in files():
            time.sleep(0.2)
        assert "after.md" in files() and "welcome.md" in files()
    finally:
        assert w.stop() == 0
    assert w.proc.stderr is not None
    err = w.proc.stderr.read()
    assert "disappeared; its files stay indexed" in err
