"""Conversations kept in the PostgreSQL database of the index (migration 004), so every
`loom serve`, `ask` and `chat` on any machine that shares the database shares them.

The same tables as the SQLite conversations file (loomcli/conversations.py), plus
`owner`: whose they are ("" for the corpus's own: the CLI, a server's single token; a
digest of the token for each token of LOOM_HTTP_TOKENS). Every statement names its
owner: one token never reads, lists, continues or deletes another's. A turn is written in
one transaction, its conversation's row locked first, so two servers continuing the same
conversation at once number their turns one after the other. Rows only, as tuples:
loomcli/conversations.py makes them Conversations.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

SCHEMA = """
CREATE TABLE conversations (id text PRIMARY KEY, owner text NOT NULL DEFAULT '',
                            title text NOT NULL, created double precision NOT NULL,
                            updated double precision NOT NULL,
                            summary text NOT NULL DEFAULT '',
                            summary_upto integer NOT NULL DEFAULT 0);
CREATE INDEX conversations_owner ON conversations (owner, updated DESC);
CREATE TABLE turns (conversation_id text NOT NULL REFERENCES conversations(id)
                        ON DELETE CASCADE,
                    n integer NOT NULL, question text NOT NULL, answer text NOT NULL,
                    sources text NOT NULL DEFAULT '[]', steps text NOT NULL DEFAULT '[]',
                    created double precision NOT NULL, PRIMARY KEY (conversation_id, n));
"""
_COLUMNS = "id, title, created, updated, summary, summary_upto"


def _clean(text: str) -> str:
    """PostgreSQL's text holds no NUL; an answer may (a model wrote one)."""
    return text.replace("\x00", "\ufffd")


class ConversationRows:
    """The conversations of one owner in one database (the store's connection)."""

    def __init__(self, conn: Any, owner: str) -> None:
        self.pg, self.owner = conn, owner

    def last_id(self) -> str | None:
        row = self.pg.execute("SELECT id FROM conversations WHERE owner = %s "
                              "ORDER BY updated DESC, created DESC, id LIMIT 1",
                              (self.owner,)).fetchone()
        return None if row is None else str(row[0])

    def get(self, cid: str) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]] | None:
        """(id, title, created, updated, summary, summary_upto) and the turns (n,
        question, answer, sources JSON, steps JSON), or None."""
        row = self.pg.execute(f"SELECT {_COLUMNS} FROM conversations WHERE id = %s "
                              "AND owner = %s", (cid, self.owner)).fetchone()
        if row is None:
            return None
        turns = self.pg.execute("SELECT n, question, answer, sources, steps FROM turns "
                                "WHERE conversation_id = %s ORDER BY n", (cid,)).fetchall()
        return tuple(row), [tuple(t) for t in turns]

    def remove(self, cid: str) -> bool:
        return bool(self.pg.execute("DELETE FROM conversations WHERE id = %s AND owner = %s",
                                    (cid, self.owner)).rowcount)

    def clear(self) -> int:
        return int(self.pg.execute("DELETE FROM conversations WHERE owner = %s",
                                   (self.owner,)).rowcount)

    def recent(self, limit: int) -> list[tuple[Any, ...]]:
        """(id, title, created, updated, turns) newest first."""
        return [tuple(r) for r in self.pg.execute(
            "SELECT c.id, c.title, c.created, c.updated, (SELECT count(*) FROM turns t "
            "WHERE t.conversation_id = c.id) FROM conversations c WHERE c.owner = %s "
            "ORDER BY c.updated DESC, c.created DESC, c.id LIMIT %s", (self.owner, limit))]

    def add_turn(self, cid: str, new: bool, title: str, question: str, answer: str,
                 sources: str, steps: str, summary: tuple[str, int] | None, now: float
                 ) -> bool:
        """Keep one turn (of a new conversation `cid` when `new`); False when `cid` is not
        this owner's (removed meanwhile, or another's)."""
        with self.pg.transaction():
            if new:
                self.pg.execute("INSERT INTO conversations (id, owner, title, created, "
                                "updated) VALUES (%s, %s, %s, %s, %s)",
                                (cid, self.owner, _clean(title), now, now))
            elif self.pg.execute("SELECT 1 FROM conversations WHERE id = %s AND owner = %s "
                                 "FOR UPDATE", (cid, self.owner)).fetchone() is None:
                return False
            self.pg.execute(
                "INSERT INTO turns (conversation_id, n, question, answer, sources, steps, "
                "created) SELECT %s, coalesce(max(n), 0) + 1, %s, %s, %s, %s, %s FROM turns "
                "WHERE conversation_id = %s",
                (cid, _clean(question), _clean(answer), _clean(sources), _clean(steps), now,
                 cid))
            self.pg.execute("UPDATE conversations SET updated = %s WHERE id = %s", (now, cid))
            if summary is not None:
                self.pg.execute("UPDATE conversations SET summary = %s, summary_upto = %s "
                                "WHERE id = %s", (_clean(summary[0]), summary[1], cid))
        return True

    def put(self, row: tuple[Any, ...], turns: list[tuple[Any, ...]]) -> bool:
        """Keep a whole conversation as it was elsewhere (`loom migrate`): (id, title,
        created, updated, summary, summary_upto) and its turns (n, question, answer,
        sources JSON, steps JSON, created). False when the id is taken."""
        cid, title, created, updated, summary, upto = row
        with self.pg.transaction():
            if not self.pg.execute(
                    "INSERT INTO conversations (id, owner, title, created, updated, summary, "
                    "summary_upto) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (id) DO NOTHING",
                    (cid, self.owner, _clean(title), created, updated, _clean(summary),
                     upto)).rowcount:
                return False
            with self.pg.cursor() as cur:
                cur.executemany(
                    "INSERT INTO turns (conversation_id, n, question, answer, sources, steps, "
                    "created) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(cid, n, _clean(q), _clean(a), _clean(src), _clean(steps), at)
                     for n, q, a, src, steps, at in turns])
        return True
