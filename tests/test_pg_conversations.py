"""Conversations with the index on PostgreSQL live in its database: two `loom serve`
processes (two machines: each its own LOOM_HOME) on one database share them — a
conversation started on one is continued on the other — while each token of
LOOM_HTTP_TOKENS keeps its own, and the CLI's `ask -c` continues from another machine.
Real servers, a real PostgreSQL (tests/pg.py), the loopback LLM stand-in."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import write
from .llm_server import FakeLLM, prompt_text
from .test_http import LOOM, Server

TOKENS = {"tok-ann": "", "tok-ben": ""}  # "": the server's one corpus, per token


def machine(tmp_path: Path, name: str, url: str, llm: FakeLLM) -> dict[str, str]:
    home = tmp_path / name
    write(home / "config.toml",
          f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
    return {"LOOM_HOME": str(home), "LOOM_DATABASE_URL": url}


def loom(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def two_servers(tmp_path: Path, pg_url: str
                ) -> Iterator[tuple[Server, Server, FakeLLM, dict[str, str]]]:
    with FakeLLM() as llm:
        one = machine(tmp_path, "one", pg_url, llm)
        two = machine(tmp_path, "two", pg_url, llm)
        write(tmp_path / "notes" / "kiln.md", "# Kiln\nthe kiln fires at 1200 degrees\n")
        write(tmp_path / "notes" / "glaze.md", "# Glaze\nceladon glaze needs reduction\n")
        loom(one, "scan", str(tmp_path / "notes"))
        env = {"LOOM_HTTP_TOKENS": json.dumps(TOKENS)}
        first = Server("--processes", "1", env={**one, **env})
        try:
            second = Server("--processes", "1", env={**two, **env})
            try:
                yield first, second, llm, one
            finally:
                second.stop()
        finally:
            first.stop()


def asked(llm: FakeLLM, since: int) -> str:
    return "\n".join(prompt_text(r["path"], r["body"]) for r in llm.requests[since:]
                     if r["path"] == "/api/chat")


def test_a_conversation_started_on_one_server_goes_on_on_the_other(two_servers, tmp_path):
    first, second, llm, cli = two_servers
    status, start = first.call("POST", "/ask", {"question": "how hot does the kiln fire?"},
                               token="tok-ann")
    assert status == 200 and start["conversation_id"], start
    cid = start["conversation_id"]
    sent = len(llm.requests)
    status, follow = second.call("POST", "/ask", {"question": "and the glaze?",
                                                  "conversation_id": cid}, token="tok-ann")
    assert status == 200 and follow["conversation_id"] == cid, follow
    assert "how hot does the kiln fire?" in asked(llm, sent)  # the first turn, recalled
    # Another token of the same corpus, on either server, cannot read or continue it.
    for server in (first, second):
        status, body = server.call("POST", "/ask", {"question": "and then?",
                                                    "conversation_id": cid}, token="tok-ben")
        assert status == 404 and f"no conversation {cid!r}" in body["error"], body
    # Nor can the corpus's own CLI (no token): its conversations are others.
    listed = json.loads(loom(cli, "conversations", "--json").stdout)["conversations"]
    assert cid not in [c["id"] for c in listed]
    # Kept in the database, as two turns of one conversation, under a digest of the token.
    import psycopg

    with psycopg.connect(cli["LOOM_DATABASE_URL"], autocommit=True) as conn:
        rows = conn.execute("SELECT c.owner, count(t.n) FROM conversations c JOIN turns t "
                            "ON t.conversation_id = c.id WHERE c.id = %s GROUP BY c.owner",
                            (cid,)).fetchall()
    assert len(rows) == 1 and rows[0][1] == 2
    assert rows[0][0] and "tok-ann" not in rows[0][0]
    for home in ("one", "two"):
        assert not list((tmp_path / home).glob("conversations*.db"))


def test_ask_c_goes_on_from_another_machine(two_servers, tmp_path):
    _, _, llm, one = two_servers
    two = {**one, "LOOM_HOME": str(tmp_path / "two")}
    first = json.loads(loom(one, "ask", "--json", "what about the glaze?").stdout)
    sent = len(llm.requests)
    follow = json.loads(loom(two, "ask", "-c", "--json", "and the kiln?").stdout)
    assert follow["conversation_id"] == first["conversation_id"]
    assert "what about the glaze?" in asked(llm, sent)
    listed = json.loads(loom(two, "conversations", "--json").stdout)["conversations"]
    assert [(c["id"], c["turns"]) for c in listed] == [(first["conversation_id"], 2)]
    assert "removed 1 conversation" in loom(two, "conversations", "--clear").stdout
    assert json.loads(loom(one, "conversations", "--json").stdout)["conversations"] == []


def test_migrate_into_postgresql_takes_the_conversations_along(tmp_path, pg_url):
    """`loom migrate --to URL` copies the conversations of the home's files (the CLI's and
    a token's) into the database, where `ask -c` then goes on with them."""
    with FakeLLM() as llm:
        lite = machine(tmp_path, "laptop", pg_url, llm)
        lite.pop("LOOM_DATABASE_URL")
        write(tmp_path / "notes" / "kiln.md", "# Kiln\nthe kiln fires at 1200 degrees\n")
        loom(lite, "scan", str(tmp_path / "notes"))
        first = json.loads(loom(lite, "ask", "--json", "how hot is the kiln?").stdout)
        moved = json.loads(loom(lite, "migrate", "--to", pg_url, "--json").stdout)
        assert moved["conversations"] == 1 and moved["files"] == 1
        on_pg = {**lite, "LOOM_DATABASE_URL": pg_url}
        sent = len(llm.requests)
        follow = json.loads(loom(on_pg, "ask", "-c", "--json", "in Fahrenheit?").stdout)
        assert follow["conversation_id"] == first["conversation_id"]
        assert "how hot is the kiln?" in asked(llm, sent)
        listed = json.loads(loom(on_pg, "conversations", "--json").stdout)["conversations"]
        assert [(c["id"], c["turns"]) for c in listed] == [(first["conversation_id"], 2)]
