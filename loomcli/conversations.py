"""Conversations kept under LOOM_HOME: one SQLite file, a row per conversation and per turn
(`Conversations`); with the index on PostgreSQL, in its database (`InDatabase`, over
store/postgres_conversations.py), where every server that shares it finds them.

A turn is written in one transaction once its answer is complete, so an interrupted ask
leaves the conversation as it was after its last complete turn. The rolling summary of
older turns (made when the window needs it) is kept with the turn it reaches, so the next
follow-up reuses it instead of summarising again.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomcli import paths
from loomcli.errors import Exit, IndexMissingError, IndexStateError, QueryError

FILE_NAME = "conversations.db"
LIST_LIMIT = 20
TITLE_CHARS = 80
ID_BYTES = 6  # 12 hex digits
LOCK_WAIT_S = 10  # how long a read or write waits for another process's write lock
_SETTING_UP = threading.Lock()  # the threads of one server making the file at once

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


def _json_list(text: Any, kind: type) -> list[Any]:
    """A turn's JSON list (sources, steps); damaged or of another shape: empty, so one bad
    row never makes a conversation unreadable."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return []
    return [v for v in value if isinstance(v, kind)] if isinstance(value, list) else []


def default_path() -> Path:
    return paths.home() / FILE_NAME


def check_id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise QueryError("conversation_id must be a non-empty string")
    if len(value) > 64:
        raise QueryError("conversation_id is longer than 64 characters")
    return value.strip()


class ConversationBusy(IndexStateError):
    """Another process held the conversations file's write lock past LOCK_WAIT_S: the
    answer was given, its turn not kept (exit 1 after the answer)."""

    exit_code = Exit.PARTIAL



def _set_up(db: sqlite3.Connection) -> None:
    """WAL mode and the tables, once per connection. Turning a new file to WAL needs it
    alone, and SQLite may answer "locked" at once rather than wait (four asks kept at
    the same moment by one server met it): the threads of a process take turns, and a
    busy answer from another process is tried again until LOCK_WAIT_S."""
    deadline = time.monotonic() + LOCK_WAIT_S
    with _SETTING_UP:
        while True:
            try:
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA foreign_keys=ON")
                db.execute("PRAGMA secure_delete=ON")  # removed turns leave no text behind
                db.executescript(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)
                        or time.monotonic() > deadline):
                    raise
                time.sleep(0.05)

class Conversations:
    """The conversation store. Use as a context manager."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db, self.path = db, path

    @classmethod
    def open(cls, path: Path | None = None, *, readonly: bool = False) -> Conversations:
        """The store at `path` (default: under the home). `readonly`: only to read (an ask
        that keeps nothing): the file is neither created nor written."""
        path = path or default_path()
        try:
            if readonly:
                # mode=rw, not ro: never created, never written, and as the last
                # connection to close it removes the -wal and -shm files a read makes.
                db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True,
                                     timeout=LOCK_WAIT_S, isolation_level=None)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
            db.row_factory = sqlite3.Row
            if not readonly:
                _set_up(db)
        except (OSError, sqlite3.DatabaseError) as exc:
            if readonly and not path.exists():
                raise IndexMissingError("no conversation kept yet",
                                        "ask without -c or --cid first") from None
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
        turns = [Turn(t["n"], str(t["question"]), str(t["answer"]),
                      _json_list(t["sources"], str), _json_list(t["steps"], dict))
                 for t in self.db.execute("SELECT * FROM turns WHERE conversation_id = ? "
                                          "ORDER BY n", (cid,))]
        return Conversation(row["id"], row["title"], row["created"], row["updated"],
                            row["summary"], row["summary_upto"], turns)

    def remove(self, cid: str) -> bool:
        """Delete one conversation and its turns; False when there was none."""
        with self._transaction():
            self.db.execute("DELETE FROM turns WHERE conversation_id = ?", (cid,))
            gone = self.db.execute("DELETE FROM conversations WHERE id = ?", (cid,)).rowcount
        return gone > 0

    def clear(self) -> int:
        """Delete every conversation; how many there were. The file is emptied (VACUUM),
        so no deleted text stays in its free pages."""
        with self._transaction():
            self.db.execute("DELETE FROM turns")
            n = self.db.execute("DELETE FROM conversations").rowcount
        self.db.execute("VACUUM")
        return n

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
        try:
            return self._add_turn(cid, question, answer, sources, steps, summary, now)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            raise ConversationBusy(
                f"this turn was not kept: {self.path} stayed locked by another process for "
                f"{LOCK_WAIT_S} s",
                "the answer above is complete; ask again (with -c) once that process is "
                "done, or pass --no-keep") from None

    def _add_turn(self, cid: str | None, question: str, answer: str,
                  sources: list[str] | None, steps: list[dict[str, Any]] | None,
                  summary: tuple[str, int] | None, now: float) -> str:
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


def copy_files(files: list[tuple[str, Path]], rows_of: Any) -> int:
    """Every conversation of these files — (owner, path): the home's conversations.db is
    owner "", a token's conversations-<digest>.db that digest — into a database's rows
    (`rows_of(owner)`: the store's conversation_rows), as they were (`loom migrate`).
    How many were copied (an id already there is left as it is)."""
    copied = 0
    for owner, path in files:
        rows = rows_of(owner)
        with Conversations.open(path, readonly=True) as kept:
            for (cid,) in kept.db.execute("SELECT id FROM conversations").fetchall():
                head = kept.db.execute("SELECT id, title, created, updated, summary, "
                                       "summary_upto FROM conversations WHERE id = ?",
                                       (cid,)).fetchone()
                turns = kept.db.execute("SELECT n, question, answer, sources, steps, created "
                                        "FROM turns WHERE conversation_id = ? ORDER BY n",
                                        (cid,)).fetchall()
                copied += bool(rows.put(tuple(head), [tuple(t) for t in turns]))
    return copied


class InDatabase:
    """The conversations of one owner kept in the index's database (PostgreSQL): the
    methods of Conversations over the store's rows (ConversationRows). The store's
    connection is the caller's to close."""

    def __init__(self, rows: Any, where: str) -> None:
        self.rows, self.path = rows, where

    def __enter__(self) -> InDatabase:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def last_id(self) -> str | None:
        return self.rows.last_id()

    def get(self, cid: str) -> Conversation:
        found = self.rows.get(cid)
        if found is None:
            raise IndexMissingError(f"no conversation {cid!r}",
                                    "`loom conversations` lists them")
        (id_, title, created, updated, summary, upto), turns = found
        return Conversation(id_, title, created, updated, summary, upto,
                            [Turn(n, q, a, _json_list(src, str), _json_list(steps, dict))
                             for n, q, a, src, steps in turns])

    def remove(self, cid: str) -> bool:
        return bool(self.rows.remove(cid))

    def clear(self) -> int:
        return int(self.rows.clear())

    def recent(self, limit: int = LIST_LIMIT) -> list[Conversation]:
        out = []
        for id_, title, created, updated, n in self.rows.recent(limit):
            conv = Conversation(id_, title, created, updated)
            conv.turns = [Turn(0, "", "")] * n
            out.append(conv)
        return out

    def add_turn(self, cid: str | None, question: str, answer: str, *,
                 sources: list[str] | None = None, steps: list[dict[str, Any]] | None = None,
                 summary: tuple[str, int] | None = None, clock: Any = time.time) -> str:
        new = cid is None
        kept = cid or secrets.token_hex(ID_BYTES)
        if not self.rows.add_turn(kept, new, " ".join(question.split())[:TITLE_CHARS],
                                  question, answer, json.dumps(sources or []),
                                  json.dumps(steps or [], ensure_ascii=False), summary,
                                  clock()):
            raise IndexMissingError(f"no conversation {kept!r} (removed meanwhile)",
                                    "ask again without -c or --cid")
        return kept


class Later:
    """The conversation store of a new conversation, opened only when its first turn is
    kept: an ask that fails (no model, server down) leaves no conversations file.
    `opener(readonly)`: the corpus's conversations (operations.Corpus.kept_conversations;
    default: the file under the home)."""

    def __init__(self, opener: Any = None) -> None:
        self.opener = opener or (lambda readonly: Conversations.open(readonly=readonly))

    def add_turn(self, *args: Any, **kwargs: Any) -> str:
        with self.opener(False) as store:
            return store.add_turn(*args, **kwargs)
