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
             raw: bytes | None = None) -> tuple[int, dict]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


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
    status, body = server.call("POST", "/ask", {"question": "madder"})  # no model configured
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
