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
