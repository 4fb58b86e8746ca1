"""The conversation store: a real SQLite file under LOOM_HOME."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from loomcli import conversations
from loomcli.conversations import Conversations
from loomcli.errors import IndexMissingError


def test_turns_are_kept_in_order_and_listed_newest_first(loom_home):
    clock = itertools.count(1000).__next__
    with Conversations.open() as store:
        a = store.add_turn(None, "What is  madder?\n", "A red dye [j.md].", sources=["j.md"],
                           clock=clock)
        b = store.add_turn(None, "Second conversation", "ok", clock=clock)
        assert store.add_turn(a, "And woad?", "A blue dye.", steps=[{"tool": "loom_grep"}],
                              clock=clock) == a
        assert store.last_id() == a
        conv = store.get(a)
        assert [(t.n, t.question) for t in conv.turns] == [(1, "What is  madder?\n"),
                                                            (2, "And woad?")]
        assert conv.title == "What is madder?"
        assert conv.turns[0].sources == ["j.md"]
        assert conv.turns[1].steps == [{"tool": "loom_grep"}]
        assert [c.id for c in store.recent()] == [a, b]
        assert [c.to_dict()["turns"] for c in store.recent()] == [2, 1]
    assert (loom_home / conversations.FILE_NAME).is_file()


def test_summary_is_kept_with_its_reach(loom_home):
    with Conversations.open() as store:
        cid = store.add_turn(None, "q1", "a1")
        store.add_turn(cid, "q2", "a2", summary=("q1 was about a1", 1))
        conv = store.get(cid)
        assert (conv.summary, conv.summary_upto) == ("q1 was about a1", 1)


def test_unknown_id_says_how_to_list(loom_home):
    with Conversations.open() as store, pytest.raises(IndexMissingError) as err:
        store.get("nope")
    assert "loom conversations" in str(err.value)


def test_a_turn_that_fails_midway_leaves_nothing(loom_home):
    with Conversations.open() as store:
        cid = store.add_turn(None, "q1", "a1")
        with pytest.raises(sqlite3.Error):
            store.add_turn(cid, "q2", "a2", summary=(object(), 1))  # fails after the insert
        assert [t.n for t in store.get(cid).turns] == [1]


def test_damaged_file_is_one_clear_error(loom_home):
    loom_home.mkdir(parents=True)
    (loom_home / conversations.FILE_NAME).write_bytes(b"not a database" * 100)
    from loomcli.errors import IndexStateError

    with pytest.raises(IndexStateError) as err:
        Conversations.open()
    assert "move it aside" in str(err.value)


@pytest.mark.parametrize("threads_take_turns", [True, False],
                         ids=["one process's threads", "other processes (retried)"])
def test_asks_kept_at_the_same_moment_all_keep_their_turn(tmp_path, monkeypatch,
                                                           threads_take_turns):
    """Four asks of one server finishing together each open the conversations file; the
    first one turns it to WAL, and SQLite answered "locked" at once to some of the others
    (10 of 600 here) — a 500 for an answered ask. Threads take turns setting the file up,
    and a busy answer is tried again (as from another process, without the turns)."""
    import contextlib
    import threading
    from pathlib import Path

    if not threads_take_turns:
        monkeypatch.setattr(conversations, "_SETTING_UP", contextlib.nullcontext())
    failures: list[str] = []

    def keep(path: Path, start: threading.Barrier) -> None:
        start.wait()
        try:
            with Conversations.open(path) as store:
                store.add_turn(None, "which invoice?", "FT-2026-0101", sources=[])
        except Exception as exc:  # noqa: BLE001 - counted, then asserted none
            failures.append(repr(exc))

    for n in range(150):
        path = tmp_path / f"c{n}" / "conversations.db"
        start = threading.Barrier(4)
        workers = [threading.Thread(target=keep, args=(path, start)) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert failures == []
        with Conversations.open(path) as store:
            assert len(store.recent(10)) == 4  # every turn kept
