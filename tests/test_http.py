"""`loom serve` as a real process, spoken to with real HTTP requests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import write
from .llm_server import FakeLLM

LOOM = [sys.executable, "-m", "loomcli"]


class Server:
    def __init__(self, *args: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([*LOOM, "serve", "--port", "0", *args],
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        m = re.search(r"http://[\d.]+:(\d+)", line)
        assert m, line + self.proc.stderr.read()
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def call(self, method: str, path: str, body: object = None, token: str | None = None,
             raw: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


@pytest.fixture
def server(scanned_notes):
    s = Server()
    yield s
    s.stop()


def test_every_endpoint(server, scanned_notes, loom_home):
    notes = scanned_notes
    assert server.call("GET", "/healthz") == (200, {"ok": True, "version": "0.1.0"})
    status, files = server.call("GET", "/files")
    assert status == 200 and len(files["files"]) == 9
    status, hits = server.call("POST", "/search", {"query": "warp tension", "limit": 2})
    assert status == 200 and len(hits["hits"]) == 2
    assert {"path", "title", "score", "snippet", "content", "content_len"} <= set(hits["hits"][0])
    status, bare = server.call("POST", "/search", {"query": "warp", "excerpt_chars": 0})
    assert status == 200 and bare["hits"] and "content" not in bare["hits"][0]
    status, grep = server.call("POST", "/grep", {"pattern": "E-4471", "context": 1})
    assert status == 200 and {m["path"] for m in grep["matches"]} == {
        "manuals/release-notes.pdf", "projects/loom-controller.md"}
    m = grep["matches"][0]
    status, got = server.call("POST", "/file", {"path": m["path"], "offset": m["offset"],
                                                "length": 6})
    assert status == 200 and got["content"] == "E-4471"
    write(notes / "new.md", "# New\nfresh words\n")
    status, report = server.call("POST", "/scan", {})
    assert status == 200 and report["added"] == 1
    with FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        status, answer = server.call("POST", "/ask", {"question": "madder root invoice"})
    assert status == 200 and answer["citations"] == ["manuals/field-guide.pdf"]


def test_errors_are_json_with_4xx_5xx(server):
    status, body = server.call("POST", "/search", raw=b"{not json")
    assert "not valid JSON" in body["error"]
    assert server.call("POST", "/search", {}) == (400, {"error": 'missing "query"'})
    assert server.call("POST", "/search", [1, 2])[0] == 400
    assert server.call("GET", "/nope") == (404, {"error": "no such endpoint: /nope"})
    assert server.call("GET", "/search")[0] == 405
    status, body = server.call("POST", "/grep", {"pattern": "a[b"})
    assert status == 400 and "invalid pattern" in body["error"]
    status, body = server.call("POST", "/file", {"path": "../../etc/passwd"})
    assert status == 400 and "escapes the index" in body["error"]
    status, body = server.call("POST", "/file", {"path": "/etc/passwd"})
    assert status == 400
    status, body = server.call("POST", "/file", {"path": "nope.md"})
    assert status == 404 and "not in the index" in body["error"]
    for stream in (False, True):  # no model configured: an error status, streaming or not
        status, body = server.call("POST", "/ask", {"question": "madder", "stream": stream})
        assert status == 500 and "no LLM model configured" in body["error"]


def test_token_required_when_set(scanned_notes):
    s = Server(env={"LOOM_HTTP_TOKEN": "s3cret"})
    try:
        assert s.call("GET", "/healthz")[0] == 401
        assert s.call("GET", "/healthz", token="wrong")[0] == 401
        assert s.call("POST", "/search", {"query": "x"})[0] == 401
        assert s.call("GET", "/healthz", token="s3cret")[0] == 200
        assert s.call("POST", "/search", {"query": "warp"}, token="s3cret")[0] == 200
    finally:
        s.stop()


def test_non_loopback_host_without_token_is_refused_at_start(scanned_notes):
    env = {k: v for k, v in os.environ.items() if k != "LOOM_HTTP_TOKEN"}
    proc = subprocess.run([*LOOM, "serve", "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.startswith("loom: refusing to serve on 0.0.0.0 without a token")


def test_search_excerpt_of_a_long_note(tmp_path, loom_home):
    folder = tmp_path / "long"
    filler = "".join(f"Paragraph {i}: routine notes about yarn orders and loom upkeep.\n"
                     for i in range(2500))
    passage = "The indigo vat ferments for nine days at thirty degrees before first dip.\n"
    text = filler[:120_000] + passage + filler[120_000:]
    write(folder / "big.md", "# Workshop log\n" + text)
    subprocess.run([*LOOM, "scan", str(folder)], check=True, capture_output=True)
    s = Server()
    try:
        status, body = s.call("POST", "/search", {"query": "indigo vat ferments",
                                                  "excerpt_chars": 3000})
    finally:
        s.stop()
    [hit] = body["hits"]
    assert hit["content_len"] == len(("# Workshop log\n" + text).encode()) > 150_000
    assert len(hit["content"]) <= 3000 and passage.strip() in hit["content"]
    assert hit["content"].startswith("# Workshop log")


def make_corpus(root: Path, name: str, text: str) -> None:
    write(root / name / "notes" / "a.md", text)
    write(root / name / "notes" / ".loomignore", "secret*\n")
    write(root / name / "notes" / "secret.md", "# hidden by its own ignore file\nzebra\n")


def test_two_corpora_never_see_each_other(tmp_path, loom_home):
    root = tmp_path / "corpora"
    make_corpus(root, "alice", "# Alice\nzebra crossing notes\n")
    make_corpus(root, "bob", "# Bob\ngiraffe notes\n")
    s = Server("--corpus-root", str(root))
    try:
        assert s.call("POST", "/scan", {"corpus": "alice"})[1]["added"] == 1
        assert s.call("POST", "/scan", {"corpus": "bob"})[1]["added"] == 1
        _, a = s.call("POST", "/grep", {"corpus": "alice", "pattern": "zebra|giraffe"})
        _, b = s.call("POST", "/grep", {"corpus": "bob", "pattern": "zebra|giraffe"})
        assert [m["text"] for m in a["matches"]] == ["zebra crossing notes"]
        assert [m["text"] for m in b["matches"]] == ["giraffe notes"]
        _, files = s.call("GET", "/files?corpus=bob")
        assert [f["path"] for f in files["files"]] == ["a.md"]
        assert s.call("POST", "/search", {"corpus": "carol", "query": "x"})[0] == 404
        assert s.call("POST", "/search", {"corpus": "../alice", "query": "x"})[0] == 400
        assert s.call("POST", "/search", {"query": "x"})[0] == 400  # corpus required
        assert (root / "alice" / "index.db").exists() and (root / "bob" / "index.db").exists()
    finally:
        s.stop()


# -- tried as an attacker would -------------------------------------------------------------

def last_scan(loom_home: Path):
    import sqlite3

    with sqlite3.connect(loom_home / "index.db") as conn:
        return conn.execute("SELECT count(*) FROM scans").fetchone()[0]


def test_web_pages_cannot_read_or_drive_the_server(scanned_notes, loom_home):
    with FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        s = Server()
        scans = last_scan(loom_home)
        try:
            port = s.url.rsplit(":", 1)[1]
            rebinding = {"Host": f"evil.example:{port}"}
            assert s.call("GET", "/files", headers=rebinding)[0] == 403
            assert s.call("GET", "/files", headers={"Host": "127.0.0.1:1"})[0] == 403
            foreign = {"Origin": "https://evil.example"}
            assert s.call("GET", "/files", headers=foreign)[0] == 403
            status, body = s.call("POST", "/scan", {"force": True}, headers=foreign)
            assert status == 403 and "other origins" in body["error"]
            form = {"Content-Type": "text/plain"}
            for path, payload in (("/scan", b'{"force": true}'), ("/ask", b'{"question": "x"}')):
                req = urllib.request.Request(s.url + path, data=payload, method="POST",
                                             headers=form)
                try:
                    urllib.request.urlopen(req, timeout=30)
                    raise AssertionError("a text/plain POST was served")
                except urllib.error.HTTPError as exc:
                    assert exc.code == 415 and "application/json" in json.loads(
                        exc.read())["error"]
            assert last_scan(loom_home) == scans and llm.requests == []  # nothing started
            # Loopback pages (a local dev server) and clients without an Origin work.
            assert s.call("GET", "/files", headers={"Origin": "http://localhost:3000"})[0] == 200
            assert s.call("GET", "/files", headers={"Host": f"localhost:{port}"})[0] == 200
            assert s.call("POST", "/scan", {})[0] == 200
        finally:
            s.stop()


def test_allowed_hosts_and_origins_widen_the_rules(scanned_notes, loom_home):
    write(loom_home / "config.toml", '[http]\nallowed_hosts = ["notes.lan"]\n'
                                     'allowed_origins = ["https://app.example"]\n')
    s = Server(env={"LOOM_HTTP_TOKEN": "t"})
    try:
        port = s.url.rsplit(":", 1)[1]
        ok = {"Host": f"notes.lan:{port}", "Origin": "https://app.example"}
        assert s.call("GET", "/files", token="t", headers=ok)[0] == 200
        assert s.call("GET", "/files", headers=ok)[0] == 401  # the token still applies
        assert s.call("GET", "/files", token="t", headers={"Host": "other.lan"})[0] == 403
    finally:
        s.stop()


def raw_exchange(url: str, *requests: bytes, timeout: float = 10) -> list[tuple[int, dict]]:
    """Send raw requests on ONE connection; parse each JSON response in turn."""
    import http.client
    import socket

    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    out = []
    try:
        for data in requests:
            sock.sendall(data)
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            out.append((resp.status, json.loads(resp.read() or b"null")))
            if resp.will_close:
                break
    finally:
        sock.close()
    return out


def req(method: str, path: str, body: bytes = b"", headers: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
    if body and "Content-Length" not in headers and "chunked" not in headers:
        head += f"Content-Length: {len(body)}\r\n"
    if body and "Content-Type" not in headers:
        head += "Content-Type: application/json\r\n"
    return (head + "\r\n").encode() + body


def test_malformed_requests_get_json_4xx_and_the_connection_goes_on(server):
    files = req("GET", "/files")
    json_ct = "Content-Type: application/json\r\n"
    cases = [
        (req("POST", "/search", b'{"query": "warp", "limit": 1e999}'), 400, "limit"),
        (req("POST", "/scan", b'{"force": "false"}'), 400, "force must be true or false"),
        (req("POST", "/grep", b'{"pattern": "x", "case_sensitive": "false"}'), 400,
         "case_sensitive must be true or false"),
        (req("POST", "/grep", b'{"pattern": "x", "glob": [1, 2]}'), 400, "glob must be"),
        (req("POST", "/search", b'{"query": "\\ud800"}'), 400, "lone surrogate"),
        (req("POST", "/search", b'{"query": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
         400, "nested"),
        (req("POST", "/search", b"{bad"), 400, "not valid JSON"),
        (req("GET", "/nope"), 404, "no such endpoint"),
        (req("DELETE", "/files"), 405, "not allowed"),
    ]
    for request, status, words in cases:
        [(got, body), (after, listing)] = raw_exchange(server.url, request, files)
        assert got == status and words in body["error"], (request[:80], got, body)
        assert after == 200 and len(listing["files"]) == 9
    # A chunked body is read (and counted against the cap).
    chunk = b'{"query": "warp tension", "limit": 1}'
    chunked = req("POST", "/search", b"%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk),
                  "Transfer-Encoding: chunked\r\n" + json_ct)
    [(status, body), (after, _)] = raw_exchange(server.url, chunked, files)
    assert status == 200 and len(body["hits"]) == 1 and after == 200
    big = b"x" * (2 << 20)
    over = req("POST", "/search", b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big),
               "Transfer-Encoding: chunked\r\n" + json_ct)
    assert raw_exchange(server.url, over)[0][0] == 413
    declared = (b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                b"\r\nContent-Length: 209715200\r\n\r\n")
    assert raw_exchange(server.url, declared)[0] == (413, {"error": "body over 1048576 bytes"})
    # Framing errors: where the body ends is unknown, so the answer closes the connection
    # (going on would let a body be read as a request).
    for bad in (req("POST", "/search", b'{"query": "warp"}', "Content-Length: -1\r\n" + json_ct),
                b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                b"Content-Length: 7\r\n\r\n", b"GARBAGE\r\n\r\n",
                b"GET /files HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n"):
        status, body = raw_exchange(server.url, bad)[0]
        assert status == 400 and "error" in body, bad


def test_a_refused_body_is_never_read_as_the_next_request(scanned_notes):
    s = Server(env={"LOOM_HTTP_TOKEN": "t"})
    try:
        hidden = req("GET", "/files", headers="Authorization: Bearer t\r\n")
        smuggle = req("POST", "/search", hidden)  # no token: 401, body must be dropped
        after = req("GET", "/healthz", headers="Authorization: Bearer t\r\n")
        replies = raw_exchange(s.url, smuggle, after)
        assert [status for status, _ in replies] == [401, 200]
        assert replies[1][1] == {"ok": True, "version": replies[1][1]["version"]}
    finally:
        s.stop()


def test_errors_carry_no_absolute_paths(tmp_path, loom_home):
    s = Server()
    try:
        status, body = s.call("POST", "/search", {"query": "x"})
    finally:
        s.stop()
    assert status == 404 and body["error"].startswith("no index at index.db yet")
    assert str(tmp_path) not in body["error"] and "/" not in body["error"].split("—")[0]


def test_healthz_answers_with_300_idle_connections_held_open(server):
    import socket

    host, port = server.url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(300)]
    try:
        # A server with a thread per connection would hold this one behind the idle ones
        # until call()'s 30 s timeout; an event loop answers it.
        assert server.call("GET", "/healthz")[0] == 200
    finally:
        for sock in idle:
            sock.close()


def test_streaming_ask_sends_ndjson_pieces_then_the_result(scanned_notes, loom_home):
    with FakeLLM() as llm:
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        s = Server()
        try:
            request = urllib.request.Request(
                s.url + "/ask", method="POST", headers={"Content-Type": "application/json"},
                data=json.dumps({"question": "madder root invoice", "stream": True}).encode())
            with urllib.request.urlopen(request, timeout=30) as resp:
                kind = resp.headers["Content-Type"]
                events = [json.loads(line) for line in resp]
        finally:
            s.stop()
    assert kind.startswith("application/x-ndjson")
    assert [e["text"] for e in events[:-1]] == ["The answer ", "is here ",
                                                 "[manuals/field-guide.pdf]."]
    assert events[-1]["done"] is True and events[-1]["citations"] == ["manuals/field-guide.pdf"]


def test_mcp_over_http_with_the_token(scanned_notes):
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    s = Server(env={"LOOM_HTTP_TOKEN": "s3cret"})

    async def session(token: str | None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, Client(
                streamable_http_client(s.url + "/mcp", http_client=http)) as client:
            tools = await client.list_tools()
            grep = await client.call_tool("loom_grep", {"pattern": "E-4471"})
            return {t.name for t in tools.tools}, grep.structured_content

    try:
        names, grep = anyio.run(session, "s3cret")
        assert len(names) == 6 and "loom_grep" in names
        assert {m["path"] for m in grep["matches"]} == {"manuals/release-notes.pdf",
                                                         "projects/loom-controller.md"}
        raw = urllib.request.Request(s.url + "/mcp", method="POST", data=b"{}",
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(raw, timeout=30)
            raise AssertionError("/mcp answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
    finally:
        s.stop()


def test_a_port_in_use_says_to_choose_another(server):
    port = server.url.rsplit(":", 1)[1]
    proc = subprocess.run([*LOOM, "serve", "--port", port], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == (f"loom: port {port} on 127.0.0.1 is already in use — choose "
                           "another with --port (0 picks a free one)\n")


def test_a_hostile_glob_does_not_hold_the_server(server, scanned_notes):
    import threading

    write(scanned_notes / ("a" * 44 + ".md"), "# A\nneedle\n")
    server.call("POST", "/scan", {})
    slow: dict = {}

    def hostile() -> None:
        slow["reply"] = server.call("POST", "/grep", {"pattern": "needle",
                                                      "glob": ["*?*?*?*?*?*?*?*?*?*?#"]})

    thread = threading.Thread(target=hostile)
    thread.start()
    assert server.call("GET", "/healthz")[0] == 200  # within call()'s timeout
    thread.join(timeout=300)  # backtracking on this glob would take years
    assert not thread.is_alive() and slow["reply"][0] == 200


def test_a_read_over_the_time_budget_is_answered_503(scanned_notes, loom_home):
    write(scanned_notes / "big.md", "# Big\n" + "a line of ordinary words\n" * 200_000)
    subprocess.run([*LOOM, "scan", str(scanned_notes)], check=True, capture_output=True)
    write(loom_home / "config.toml", "[http]\nrequest_timeout_s = 0.001\n")
    s = Server()
    try:
        status, body = s.call("POST", "/grep", {"pattern": "z[0-9]+q"})
        assert status == 503 and "took longer than 0.001 s" in body["error"]
        assert s.call("GET", "/healthz")[0] == 200
        write(loom_home / "config.toml", "[http]\nrequest_timeout_s = 60\n")  # read per request
        assert s.call("POST", "/grep", {"pattern": "z[0-9]+q"}) == (
            200, {"matches": [], "truncated": False})
    finally:
        s.stop()


def test_a_server_follows_the_index_through_a_rebuild(server, scanned_notes, loom_home):
    status, body = server.call("POST", "/search", {"query": "sourdough"})
    assert status == 200 and body["hits"][0]["path"] == "recipes/bread.md"
    write(scanned_notes / "rye.md", "# Rye\n\nA dense pumpernickel loaf.\n")
    subprocess.run([*LOOM, "scan", "--rebuild", str(scanned_notes)], check=True,
                   capture_output=True)
    assert (loom_home / "index.db.damaged").exists()  # the old file moved aside
    status, body = server.call("POST", "/search", {"query": "pumpernickel"})
    assert status == 200 and [h["path"] for h in body["hits"]] == ["rye.md"]
    status, body = server.call("POST", "/grep", {"pattern": "pumpernickel"})
    assert status == 200 and body["matches"][0]["path"] == "rye.md"


def send_whole(url: str, request: bytes) -> bytes:
    """Send a request all at once (as a client that does not wait for an early answer),
    then read everything the server sends until it closes."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_an_upload_over_the_cap_sent_whole_reads_its_413(server):
    """Issue 23, item 15: the server closed with the body unread, and the reset that made
    reached the client before the 413 (ECONNRESET). The close now lingers."""
    body = b"x" * 1_100_000
    for path in ("/search", "/mcp") * 5:
        answer = send_whole(server.url, req("POST", path, body,
                                            "Accept: application/json, text/event-stream\r\n"))
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 "), (path, answer[:200])
        assert b"connection: close" in head.lower()
        assert json.loads(payload) == {"error": "body over 1048576 bytes"}


def test_mcp_answers_every_error_as_json(server):
    """The MCP SDK answered a chunked body over its own 4 MB cap in plain text (and
    kept reading it); /mcp has the server's cap, and its errors are JSON."""
    big = b"x" * (5 << 20)  # over the SDK's 4 MB too
    over = req("POST", "/mcp", b"%x\r\n%s\r\n0\r\n\r\n" % (len(big), big),
               "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
               "Accept: application/json, text/event-stream\r\n")
    head, _, payload = send_whole(server.url, over).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"application/json" in head, head
    assert json.loads(payload) == {"error": "body over 1048576 bytes"}
    for request in (req("GET", "/mcp"),  # no text/event-stream in Accept
                    req("POST", "/mcp", b"{bad", "Accept: application/json, "
                                                 "text/event-stream\r\n"),
                    req("POST", "/mcp", b'{"x": 1}', "Accept: text/html\r\n")):
        [(status, body)] = raw_exchange(server.url, request)[:1]
        assert 400 <= status < 500 and body["error"], (request[:60], status, body)


def test_grep_by_ripgrep_type(server):
    status, pdfs = server.call("POST", "/grep", {"pattern": "warp", "type": ["pdf"]})
    assert status == 200 and pdfs["matches"]
    assert all(m["path"].endswith(".pdf") for m in pdfs["matches"])
    status, body = server.call("POST", "/grep", {"pattern": "warp", "type": ["nope"]})
    assert status == 400 and body["error"].startswith("unrecognized file type: nope")
