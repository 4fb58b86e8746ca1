"""Teams at the edge: `loom serve --corpus-root` with LOOM_HTTP_TOKENS (JSON token →
corpus) — each token reaches its corpus and nothing else (files, text, grep, vectors,
conversations), over HTTP and MCP; the server's own token stays. Real `loom serve`
processes, real HTTP, a real MCP client, the loopback stand-ins for the LLM and the
embeddings server."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from .conftest import write
from .embed_server import FakeEmbeddings
from .llm_server import FakeLLM
from .test_http import LOOM, Server

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-bob-2": "bob"}


@pytest.fixture
def corpora(tmp_path: Path) -> Path:
    root = tmp_path / "corpora"
    write(root / "alice" / "notes" / "zoo.md", "# Alice's zoo\nzebra crossing at the gate\n")
    write(root / "alice" / "notes" / "tea.md", "# Tea\noolong brewed at ninety degrees\n")
    write(root / "bob" / "notes" / "zoo.md", "# Bob's zoo\ngiraffe feeding schedule\n")
    write(root / "bob" / "notes" / "secret.md", "# Bob only\nthe vault code is 7781\n")
    return root


@pytest.fixture
def served(corpora: Path, loom_home: Path, backend: str) -> Iterator[tuple[Server, FakeLLM]]:
    """A server over both corpora with embeddings and an LLM stand-in; both corpora
    scanned (by the server's own token, which reaches every corpus). On each backend: on
    PostgreSQL both corpora share the database of LOOM_DATABASE_URL, a schema each."""
    with FakeEmbeddings() as embed, FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n'
              f'[embeddings]\nenabled = true\nprovider = "ollama"\nendpoint = "{embed.url}"\n')
        with scanned(corpora) as s:
            yield s, llm


@contextmanager
def scanned(corpora: Path) -> Iterator[Server]:
    """`loom serve --corpus-root` with TOKENS, both corpora scanned by the server's own
    token (which reaches every corpus)."""
    s = Server("--corpus-root", str(corpora), "--processes", "1",
               env={"LOOM_HTTP_TOKEN": "admin", "LOOM_HTTP_TOKENS": json.dumps(TOKENS)})
    try:
        for name in ("alice", "bob"):
            status, report = s.call("POST", "/scan", {"corpus": name}, token="admin")
            assert status == 200 and report["added"] == 2, report
        yield s
    finally:
        s.stop()


def paths(body: dict[str, Any], key: str) -> list[str]:
    return sorted({item["path"] for item in body[key]})


def test_each_token_reads_its_corpus_and_nothing_else(served):
    s, _ = served
    assert s.call("POST", "/search", {"query": "zoo"})[0] == 401
    assert s.call("POST", "/search", {"query": "zoo"}, token="tok-carol")[0] == 401
    _, a = s.call("GET", "/files", token="tok-alice")
    _, b = s.call("GET", "/files", token="tok-bob")
    assert paths(a, "files") == ["tea.md", "zoo.md"]
    assert paths(b, "files") == ["secret.md", "zoo.md"]
    _, hits = s.call("POST", "/search", {"query": "giraffe vault", "mode": "bm25"},
                     token="tok-alice")
    assert hits["hits"] == []
    _, hits = s.call("POST", "/search", {"query": "zoo", "mode": "bm25"}, token="tok-alice")
    assert [h["title"] for h in hits["hits"]] == ["Alice's zoo"]
    _, grep = s.call("POST", "/grep", {"pattern": "giraffe|zebra|7781"}, token="tok-alice")
    assert [m["text"] for m in grep["matches"]] == ["zebra crossing at the gate"]
    status, body = s.call("POST", "/file", {"path": "secret.md"}, token="tok-alice")
    assert status == 404 and "7781" not in json.dumps(body)
    for where in ({"corpus": "bob"}, {"corpus": "carol"}, {"corpus": "../bob"}):
        status, body = s.call("POST", "/search", {"query": "giraffe", **where},
                              token="tok-alice")
        assert (status, body) == (403, {"error": "this token reaches one corpus; drop "
                                                 "\"corpus\""}), where
    assert s.call("GET", "/files?corpus=bob", token="tok-alice")[0] == 403
    assert s.call("GET", "/status?corpus=bob", token="tok-alice",
                  headers={"Accept": "application/json"})[0] == 403
    status, st = s.call("GET", "/status", token="tok-alice",
                        headers={"Accept": "application/json"})
    assert status == 200 and st["files"] == 2
    status, body = s.call("POST", "/search", {"query": "zoo", "corpus": "alice"},
                          token="tok-alice")
    assert status == 200 and len(body["hits"]) == 1  # naming its own corpus is fine
    # The server's own token still reaches every corpus, by name.
    _, grep = s.call("POST", "/grep", {"pattern": "giraffe", "corpus": "bob"}, token="admin")
    assert [m["path"] for m in grep["matches"]] == ["zoo.md"]


def test_vectors_stay_with_their_corpus(served):
    s, _ = served
    for token, own in (("tok-alice", {"tea.md", "zoo.md"}), ("tok-bob", {"secret.md",
                                                                          "zoo.md"})):
        status, body = s.call("POST", "/search", {"query": "animals at the zoo gate",
                                                  "mode": "semantic", "limit": 10},
                              token=token)
        assert status == 200 and body["hits"], body
        assert {h["path"] for h in body["hits"]} <= own
        titles = {h["title"] for h in body["hits"]}
        assert not titles & ({"Bob's zoo", "Bob only"} if token == "tok-alice"
                             else {"Alice's zoo", "Tea"})


def test_conversations_are_kept_per_token(served, corpora):
    s, llm = served
    status, first = s.call("POST", "/ask", {"question": "what is at the zoo gate?"},
                           token="tok-bob")
    assert status == 200, first
    cid = first["conversation_id"]
    # Another token of the same corpus cannot read or continue it, nor can another corpus.
    for token in ("tok-bob-2", "tok-alice"):
        status, body = s.call("POST", "/ask", {"question": "and then?",
                                               "conversation_id": cid}, token=token)
        assert status == 404 and f"no conversation {cid!r}" in body["error"], body
    sent = len(llm.requests)
    status, follow = s.call("POST", "/ask", {"question": "and then?", "conversation_id": cid},
                            token="tok-bob")
    assert status == 200 and follow["conversation_id"] == cid
    assert len(llm.requests) > sent
    kept = sorted(p.name for p in (corpora / "bob").glob("conversations*.db"))
    if os.environ.get("LOOM_DATABASE_URL"):  # kept in bob's schema of the database
        assert kept == []
        return
    assert len(kept) == 1 and kept[0].startswith("conversations-")  # tok-bob's alone
    assert "tok-bob" not in kept[0]  # a digest names the file, never the token
    assert not list((corpora / "alice").glob("conversations*.db"))


def test_on_postgresql_each_corpus_is_a_schema_of_the_database(corpora, loom_home, pg_url,
                                                               monkeypatch):
    """`serve --corpus-root` with `[store] url`: each corpus's index in a schema of its
    own (loom_<name>), nothing in the corpus folders; `loom status` of a corpus names its
    schema. (Locks per schema: test_pg_schemas.)"""
    import psycopg

    monkeypatch.setenv("LOOM_DATABASE_URL", pg_url)
    with scanned(corpora) as s:
        status, st = s.call("GET", "/status", token="tok-bob",
                            headers={"Accept": "application/json"})
        assert status == 200 and st["backend"] == "postgresql", st
        assert st["store"].endswith(", schema loom_bob") and st["files"] == 2, st
    assert not list(corpora.rglob("*.db"))
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT table_schema, count(*) FROM information_schema.tables "
                            "WHERE table_name = 'files' GROUP BY 1 ORDER BY 1").fetchall()
        assert rows == [("loom_alice", 1), ("loom_bob", 1)]
        paths = {schema: sorted(r[0] for r in conn.execute(
            f"SELECT relpath FROM {schema}.files")) for schema in ("loom_alice", "loom_bob")}
    assert paths == {"loom_alice": ["tea.md", "zoo.md"], "loom_bob": ["secret.md", "zoo.md"]}


def mcp_session(url: str, token: str) -> tuple[set[str], dict[str, Any], dict[str, Any]]:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session() -> tuple[set[str], dict[str, Any], dict[str, Any]]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=30) as http, Client(
                streamable_http_client(url + "/mcp", http_client=http)) as client:
            tools = await client.list_tools()
            grep = await client.call_tool("loom_grep", {"pattern": "giraffe|zebra|7781"})
            files = await client.call_tool("loom_list_files", {})
            return ({t.name for t in tools.tools}, grep.structured_content or {},
                    files.structured_content or {})

    return anyio.run(session)


def test_mcp_over_http_serves_the_tokens_corpus(served):
    s, _ = served
    names, grep, files = mcp_session(s.url, "tok-alice")
    assert "loom_grep" in names
    assert [m["text"] for m in grep["matches"]] == ["zebra crossing at the gate"]
    assert paths(files, "files") == ["tea.md", "zoo.md"]
    _, grep, files = mcp_session(s.url, "tok-bob")
    assert sorted(m["text"] for m in grep["matches"]) == ["giraffe feeding schedule",
                                                          "the vault code is 7781"]
    assert paths(files, "files") == ["secret.md", "zoo.md"]
    # The server's own token names no corpus: MCP says how to reach one.
    status, body = s.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                          token="admin", headers={"Accept": "application/json, "
                                                            "text/event-stream"})
    assert status == 404 and "use a token of LOOM_HTTP_TOKENS" in body["error"]


def start(*args: str, tokens: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOM_HTTP_TOKENS": tokens}
    env.pop("LOOM_HTTP_TOKEN", None)
    return subprocess.run([*LOOM, "serve", "--port", "0", *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize(("tokens", "expected"), [
    ("{not json", "loom: $LOOM_HTTP_TOKENS is not valid JSON — "),
    ('["tok"]', "loom: $LOOM_HTTP_TOKENS must be a JSON object of token → corpus name — "),
    ('{"t": 5}', "loom: $LOOM_HTTP_TOKENS must be a JSON object of token → corpus name — "),
    ('{"t k": "alice"}', "loom: a token of $LOOM_HTTP_TOKENS holds a space or a character "),
    ('{"t": "../bob"}', "loom: $LOOM_HTTP_TOKENS names an invalid corpus '../bob' — "),
    ('{"t": "carol"}', "loom: $LOOM_HTTP_TOKENS names corpus 'carol', which has no folder "),
])
def test_bad_tokens_are_refused_at_start_in_one_line(corpora, tokens, expected):
    run = start("--corpus-root", str(corpora), tokens=tokens)
    assert run.returncode == 2 and run.stderr.startswith(expected), run.stderr
    assert len(run.stderr.splitlines()) == 1


def test_tokens_naming_corpora_need_a_corpus_root(loom_home):
    run = start(tokens='{"t": "alice"}')
    assert run.returncode == 2
    assert run.stderr == ("loom: $LOOM_HTTP_TOKENS names corpora, and this server has one — "
                          "start with --corpus-root DIR (one DIR/<name>/notes per corpus), "
                          'or give each token "" (this server\'s corpus)\n')


def test_tokens_of_the_one_corpus_keep_their_own_conversations(scanned_notes, loom_home):
    """Without --corpus-root, token → "": each token reaches the server's one corpus, and
    keeps conversations of its own (a file each here; on PostgreSQL, rows of its own:
    test_pg_conversations.py)."""
    with FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        s = Server("--processes", "1",
                   env={"LOOM_HTTP_TOKENS": json.dumps({"t1": "", "t2": ""})})
        try:
            assert s.call("GET", "/files")[0] == 401
            status, files = s.call("GET", "/files", token="t2")
            assert status == 200 and len(files["files"]) == 9
            status, first = s.call("POST", "/ask", {"question": "warp tension?"}, token="t1")
            assert status == 200, first
            cid = first["conversation_id"]
            status, body = s.call("POST", "/ask", {"question": "more?",
                                                   "conversation_id": cid}, token="t2")
            assert status == 404 and f"no conversation {cid!r}" in body["error"], body
            status, body = s.call("POST", "/ask", {"question": "more?",
                                                   "conversation_id": cid}, token="t1")
            assert status == 200 and body["conversation_id"] == cid, body
        finally:
            s.stop()
    kept = sorted(p.name for p in loom_home.glob("conversations*.db"))
    assert len(kept) == 1 and kept[0].startswith("conversations-") and "t1" not in kept[0]


def test_team_tokens_count_as_a_token_off_loopback(corpora):
    """A non-loopback host is refused at start without a token; team tokens are tokens."""
    env = {**os.environ, "LOOM_HTTP_TOKENS": json.dumps({"t": "alice"})}
    env.pop("LOOM_HTTP_TOKEN", None)
    proc = subprocess.Popen([*LOOM, "serve", "--host", "0.0.0.0", "--port", "0",
                             "--corpus-root", str(corpora), "--processes", "1"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on http://0.0.0.0:" in line and "(token required)" in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=60)
