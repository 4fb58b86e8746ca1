"""grep's trigram index filled after the scan: by the scan itself when little is new, else
by a process of its own; grep's answers are the same at every moment, a killed builder
leaves a consistent index, and the next scan finishes its work."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loomcli.config import load
from loomcli.errors import BusyError
from loomcli.index import grep_index
from loomcli.operations import Corpus
from loomcli.store import Store, locks

from .conftest import write

LOOM = [sys.executable, "-m", "loomcli"]
pytestmark = pytest.mark.plain


def loom(*args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, env=os.environ)
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def big_notes(folder: Path, count: int, lines: int = 20_000) -> Path:
    """`count` notes of about 25 bytes a line, each with its own marker line in the middle
    (more text than a scan indexes for grep itself)."""
    for i in range(count):
        body = "".join(f"routine line {n} of note {i}\n" for n in range(lines // 2))
        write(folder / f"big-{i:02}.md", f"# Big {i}\n{body}MARKER_{i:02} IRQF_ONESHOT here\n"
              f"{body}")
    return folder


def grep_index_state(db: Path) -> tuple[int, int]:
    """(texts waiting for grep's index, texts in it) as the database says."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        waiting = conn.execute("SELECT count(*) FROM grams_todo").fetchone()[0]
        docs = conn.execute("SELECT count(*) FROM docs").fetchone()[0]
    return waiting, docs - waiting


def wait_for_builder(db: Path) -> None:
    """Block until no builder holds its lock (an event, not a clock)."""
    with open(f"{db}.lock-grams", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)
        fcntl.flock(fh, fcntl.LOCK_UN)


def check_consistent(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 1)")
        conn.execute("INSERT INTO grams (grams, rank) VALUES ('integrity-check', 1)")
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # every waiting text exists, and none is both waiting and cut into blocks
        assert conn.execute("SELECT count(*) FROM grams_todo WHERE id NOT IN "
                            "(SELECT id FROM docs) OR id IN (SELECT file_id FROM blocks)"
                            ).fetchone()[0] == 0
    finally:
        conn.close()


def grep_lines(*args: str) -> list[tuple[str, int, int]]:
    out = loom("grep", *args, "--json", check=None)
    assert out.returncode in (0, 1), out.stderr
    return [(m["path"], m["line"], m["offset"]) for m in json.loads(out.stdout)["matches"]]


def test_a_small_scan_fills_grep_index_itself(notes):
    report = Corpus(load()).scan([notes])
    assert report.added > 0
    st = Corpus(load()).status().to_dict()
    assert st["grep_index"] == {"pending": 0, "building": False}
    assert grep_index_state(load().db_path)[0] == 0


def test_a_large_scan_hands_grep_index_to_a_builder_that_gives_way(tmp_path, loom_home):
    folder = big_notes(tmp_path / "big", 3)  # 1.5 MB: more than INLINE_BYTES
    db = loom_home / "index.db"
    loom_home.mkdir(parents=True, exist_ok=True)
    # Hold the writers' waiting lock, as a scan waiting for the index would: the builder
    # the scan starts must give way at once and leave every text to the next scan.
    with open(f"{db}.lock-wait", "w") as waiting:
        fcntl.flock(waiting, fcntl.LOCK_SH)
        report = json.loads(loom("scan", str(folder), "--json").stdout)
        assert report["added"] == 3
        wait_for_builder(db)
    assert grep_index_state(db) == (3, 0)
    status = loom("status").stdout
    assert "grep index: 3 files to add (by the next scan); grep reads them directly " \
           "meanwhile" in status
    assert json.loads(loom("status", "--json").stdout)["grep_index"] == {
        "pending": 3, "building": False}
    # grep answers from the texts themselves meanwhile
    expected = [(f"big-{i:02}.md", 10_002, None) for i in range(3)]
    found = grep_lines("-i", "marker_[0-9]+ irqf_oneshot")
    assert [(p, line, None) for p, line, _ in found] == expected
    check_consistent(db)
    # The next scan changes nothing, and starts a builder that fills the index.
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert report["skipped"] == 3 and report["added"] == 0
    wait_for_builder(db)
    assert grep_index_state(db) == (0, 3)
    assert grep_lines("-i", "marker_[0-9]+ irqf_oneshot") == found
    assert "grep index" not in loom("status").stdout
    check_consistent(db)


def test_a_writer_waits_for_the_builder_instead_of_failing(tmp_path):
    db = tmp_path / "index.db"
    Store.open(db, create=True).close()
    assert not locks.building(db)
    builder = locks.take_builder_lock(db)
    assert locks.building(db)  # what `loom status` tells
    turns = locks.Turns(db)
    try:
        assert turns.take()  # the builder writes a batch
        entered, done = threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def forget_like() -> None:  # write_lock without on_wait: busy is an error…
            try:
                with locks.write_lock(db):
                    entered.set()
                    done.wait()  # writing until the test has looked
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        writer = threading.Thread(target=forget_like)
        writer.start()
        # …but not when the builder holds the lock: the writer waits, and says so by
        # holding the waiting lock, which the builder sees between two batches.
        probe = os.open(f"{db}.lock-wait", os.O_WRONLY)
        try:
            while True:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(probe, fcntl.LOCK_UN)
                    assert writer.is_alive() and not errors, errors
                    time.sleep(0.01)  # the writer has not asked yet
                except BlockingIOError:
                    break
        finally:
            os.close(probe)
        assert not entered.is_set()
        turns.give_back()
        assert not turns.take()  # the builder stops: a writer waits, or writes
        assert entered.wait(60), errors  # the writer got the lock the builder gave back
        assert not turns.take()  # and holds it while it writes
        done.set()
        writer.join()
        assert not errors
        assert turns.take()  # the writer is done: the builder's turn again
        turns.give_back()
    finally:
        done.set()
        turns.close()
        os.close(builder)
    assert not locks.building(db)
    # Without a builder, a busy index is still an error for a writer that cannot wait.
    with locks.write_lock(db), pytest.raises(BusyError), locks.write_lock(db):
        pass


def test_texts_waiting_for_grep_index_can_change_and_go(tmp_path):
    from loomcli.extract import Extracted

    store = Store.open(tmp_path / "index.db", create=True)
    try:
        with store.transaction():
            root = store.ensure_root(tmp_path)
            a = store.add_file(root.id, "a.md", "note", 1, 1, b"a", Extracted("alpha one\n", "a"))
            b = store.add_file(root.id, "b.md", "note", 1, 1, b"b", Extracted("beta two\n", "b"))
        assert store.grams_pending() == (2, 19)
        with store.transaction():
            store.replace_content(a, 2, 2, b"A", Extracted("alpha three\n" * 5000, "a"))
            store.remove(b)
        store.check()
        assert store.grams_pending() == (1, 60_000)
        assert grep_index.fill(store) == 1
        assert store.grams_pending() == (0, 0)
        assert store.block_starts(a) is not None  # a long text: in blocks
        store.check()
        with store.transaction():  # an indexed text changes: its blocks go, it waits
            store.replace_content(a, 3, 3, b"B", Extracted("gamma\n", "a"))
        assert store.block_starts(a) is None and store.grams_pending() == (1, 6)
        store.check()
    finally:
        store.close()


@pytest.mark.slow
def test_a_killed_builder_leaves_a_consistent_index_and_the_next_scan_finishes(
        tmp_path, loom_home):
    folder = big_notes(tmp_path / "big", 24, lines=40_000)  # about 24 MB: several batches
    db = loom_home / "index.db"
    loom_home.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock-wait", "w") as waiting:  # the scan's own builder gives way
        fcntl.flock(waiting, fcntl.LOCK_SH)
        loom("scan", str(folder))
        wait_for_builder(db)
    assert grep_index_state(db) == (24, 0)
    expected = grep_lines("-i", "marker_[0-9]+ irqf_oneshot")
    assert len(expected) == 24
    lock_fd = locks.take_builder_lock(db)
    builder = subprocess.Popen([sys.executable, "-m", "loomcli.index.grep_index", str(db),
                                str(lock_fd)], pass_fds=(lock_fd,))
    os.close(lock_fd)
    while grep_index_state(db)[1] == 0:  # until its first batch is committed
        assert builder.poll() is None, "the builder finished before it could be killed"
        time.sleep(0.02)
    builder.send_signal(signal.SIGKILL)
    assert builder.wait(timeout=300) == -9
    waiting_now, done = grep_index_state(db)
    assert waiting_now > 0 and done > 0
    check_consistent(db)
    assert grep_lines("-i", "marker_[0-9]+ irqf_oneshot") == expected  # half built: same answer
    assert "grep index: " in loom("status").stdout
    report = json.loads(loom("scan", str(folder), "--json").stdout)
    assert report["skipped"] == 24
    wait_for_builder(db)
    assert grep_index_state(db) == (0, 24)
    check_consistent(db)
    assert grep_lines("-i", "marker_[0-9]+ irqf_oneshot") == expected
