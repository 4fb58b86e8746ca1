"""Conversations kept under LOOM_HOME: one SQLite file, a row per conversation and per turn.

A turn is written in one transaction once its answer is complete, so an interrupted ask
leaves the conversation as it was after its last complete turn. The rolling summary of
older turns (made when the window needs it) is kept with the turn it reaches, so the next
follow-up reuses it instead of summarising again.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomcli import paths
from loomcli.errors import IndexMissingError, IndexStateError, QueryError

FILE_NAME = "conversations.db"
LIST_LIMIT = 20
TITLE_CHARS = 80
ID_BYTES = 6  # 12 hex digits

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    summary TEXT NOT NULL DEFAULT '',
    summary_upto INTEGER NOT NULL DEFAULT 0  -- turns 1..summary_upto are in the summary
);
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    question TEXT NOT NULL,
    answer TEXT NOT NULL,
    sources TEXT NOT NULL DEFAULT '[]',  -- JSON list of paths
    steps TEXT NOT NULL DEFAULT '[]',    -- JSON list of agent steps
    created REAL NOT NULL,
    PRIMARY KEY (conversation_id, n)
);
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated DESC);
"""


@dataclass
class Turn:
    n: int
    question: str
    answer: str
    sources: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    summary: str = ""
    summary_upto: int = 0
    turns: list[Turn] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "created": round(self.created, 3),
                "updated": round(self.updated, 3), "turns": len(self.turns)}


def default_path() -> Path:
    return paths.home() / FILE_NAME


def check_id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QueryError("conversation_id must be a non-empty string")
    if len(value) > 64:
        raise QueryError("conversation_id is longer than 64 characters")
    return value.strip()


class Conversations:
    """The conversation store. Use as a context manager."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db, self.path = db, path

    @classmethod
    def open(cls, path: Path | None = None) -> Conversations:
        path = path or default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, timeout=10, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(SCHEMA)
        except (OSError, sqlite3.DatabaseError) as exc:
            raise IndexStateError(f"cannot use the conversations file {path}: {exc}",
                                  "check its permissions, or move it aside") from None
        return cls(db, path)

    def __enter__(self) -> Conversations:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.db.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def last_id(self) -> str | None:
        row = self.db.execute("SELECT id FROM conversations ORDER BY updated DESC, rowid DESC "
                              "LIMIT 1").fetchone()
        return row["id"] if row else None

    def get(self, cid: str) -> Conversation:
        row = self.db.execute("SELECT * FROM conversations WHERE id = ?", (cid,)).fetchone()
        if row is None:
            raise IndexMissingError(f"no conversation {cid!r}",
                                    "`loom conversations` lists them")
        turns = [Turn(t["n"], t["question"], t["answer"], json.loads(t["sources"]),
                      json.loads(t["steps"]))
                 for t in self.db.execute("SELECT * FROM turns WHERE conversation_id = ? "
                                          "ORDER BY n", (cid,))]
        return Conversation(row["id"], row["title"], row["created"], row["updated"],
                            row["summary"], row["summary_upto"], turns)

    def recent(self, limit: int = LIST_LIMIT) -> list[Conversation]:
        """Newest first, without their turns' text (only how many)."""
        rows = self.db.execute(
            "SELECT c.*, (SELECT count(*) FROM turns t WHERE t.conversation_id = c.id) AS n "
            "FROM conversations c ORDER BY updated DESC, rowid DESC LIMIT ?", (limit,))
        out = []
        for r in rows:
            conv = Conversation(r["id"], r["title"], r["created"], r["updated"])
            conv.turns = [Turn(0, "", "")] * r["n"]
            out.append(conv)
        return out

    def add_turn(self, cid: str | None, question: str, answer: str, *,
                 sources: list[str] | None = None, steps: list[dict[str, Any]] | None = None,
                 summary: tuple[str, int] | None = None, clock: Any = time.time) -> str:
        """Record one complete turn (a new conversation when cid is None); returns the id.
        `summary`: the rolling summary of turns 1..n made for this turn, to keep."""
        now = clock()
        with self._transaction():
            if cid is None:
                cid = secrets.token_hex(ID_BYTES)
                title = " ".join(question.split())[:TITLE_CHARS]
                self.db.execute("INSERT INTO conversations (id, title, created, updated) "
                                "VALUES (?, ?, ?, ?)", (cid, title, now, now))
            n = self.db.execute("SELECT coalesce(max(n), 0) + 1 FROM turns WHERE "
                                "conversation_id = ?", (cid,)).fetchone()[0]
            self.db.execute("INSERT INTO turns VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (cid, n, question, answer, json.dumps(sources or []),
                             json.dumps(steps or [], ensure_ascii=False), now))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, cid))
            if summary is not None:
                self.db.execute("UPDATE conversations SET summary = ?, summary_upto = ? "
                                "WHERE id = ?", (summary[0], summary[1], cid))
        return cid


class Later:
    """The conversation store of a new conversation, opened only when its first turn is
    kept: an ask that fails (no model, server down) leaves no conversations file."""

    def add_turn(self, *args: Any, **kwargs: Any) -> str:
        with Conversations.open() as store:
            return store.add_turn(*args, **kwargs)
