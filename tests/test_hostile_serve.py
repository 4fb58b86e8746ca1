"""Hostile patterns, clients and names against grep and `loom serve` (issue 35): bounded
time and memory, one-line errors, nothing lost, every indexed file readable by its path.

Servers are real `loom serve` processes spoken to over real sockets."""

from __future__ import annotations

import json
import queue
import resource
import socket
import sys
import threading
from pathlib import Path

import pytest

from loomcli.errors import IgnorePatternError
from loomcli.index import ignore

from .conftest import as_user, write
from .llm_server import FakeLLM
from .test_hostile import loom  # noqa: F401 - run as another user too
from .test_http import Server

LOOM = [sys.executable, "-m", "loomcli"]
HUGE = r"\w{1000}\w{1000}\w{1000}"  # 18 characters, 4 million RE2 instructions


# Item 2: counted repetitions -------------------------------------------------------------

def test_a_pattern_that_expands_hugely_is_refused_in_bounded_memory(scanned_notes):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = loom("grep", HUGE, check=2)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "loom: pattern '\\\\w{1000}\\\\w{1000}\\\\w{1000}' is too large once compiled")
    assert "\\w+ rather than \\w{1000}" in proc.stderr
    # Compiling it whole took 0.5 GB; refused early it stays near an idle interpreter's.
    assert peak_mib < 200 or before >> 10 >= 200, peak_mib
    # Patterns of ordinary size still run, counted repetitions included.
    assert loom("grep", "-c", r"\w{3}dough").stdout.strip()


def test_a_huge_pattern_over_http_is_a_400_and_healthz_still_answers(scanned_notes):
    server = Server()
    try:
        huge_pattern_answers(server)
    finally:
        server.stop()


def huge_pattern_answers(server: Server) -> None:
    status, body = server.call("POST", "/grep", {"pattern": HUGE})
    assert status == 400 and "too large once compiled" in body["error"]
    status, body = server.call("POST", "/grep", {"pattern": r"\w{1000}", "path": "x"})
    assert status == 400 and "too large once compiled" in body["error"]
    assert server.call("GET", "/healthz")[0] == 200


def test_an_ignore_pattern_too_large_to_compile_names_its_line(monkeypatch):
    monkeypatch.setattr(ignore, "IGNORE_MAX_MEM", 64 << 10)  # what a 2 MB line would need
    with pytest.raises(IgnorePatternError) as info:
        ignore.parse_lines(["*.md", "a?" * 20_000], source=".loomignore")
    assert str(info.value).startswith(".loomignore:2: pattern 'a?a?")
    assert "too large once compiled" in str(info.value)


# Item 16: error bodies keep URLs whole -----------------------------------------------------

def closed_port() -> int:
    import socket

    with socket.socket() as sock:  # bound, never listening: a connection is refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_model_is_named_by_its_whole_url(scanned_notes, loom_home):
    port = closed_port()
    write(loom_home / "config.toml", '[llm]\nprovider = "openai"\nmodel = "m"\n'
          f'endpoint = "http://127.0.0.1:{port}/v1"\n')
    s = Server(env={"OPENAI_API_KEY": "k"})
    try:
        status, body = s.call("POST", "/ask", {"question": "madder root invoice"})
        missing = s.call("POST", "/search", {"query": "x", "corpus": "c"})
    finally:
        s.stop()
    assert status == 502, body
    assert body["error"].startswith(f"cannot reach openai at http://127.0.0.1:{port}/v1: ")
    assert missing[0] == 400  # paths are still scrubbed: see test_http's absolute paths test


# Item 9: odd names are read by the path loom shows ----------------------------------------

ODD = ["back\\slash.md", " leading space.md", "sub/ spaced\\name.md"]


def test_names_with_a_backslash_or_a_leading_space_are_read_everywhere(notes, loom_home):
    from loomcli.config import load
    from loomcli.operations import Corpus
    from loomcli.tools import GET_FILE

    for n, name in enumerate(ODD):
        write(notes / name, f"# Odd {n}\nquokka{n} lives here\n")
    write(notes / "backslash.md", "# Decoy\nnot this one\n")
    loom("scan", str(notes))
    shown = {f["path"] for f in json.loads(loom("files", "--json").stdout)["files"]}
    assert set(ODD) <= shown
    s = Server()
    try:
        for n, name in enumerate(ODD):
            assert loom("get", name).stdout == f"# Odd {n}\nquokka{n} lives here\n"
            found = json.loads(loom("search", f"quokka{n}", "--path", name, "--json").stdout)
            assert [h["path"] for h in found["hits"]] == [name]
            grepped = json.loads(loom("grep", "quokka", "--path", name, "--json").stdout)
            assert [m["path"] for m in grepped["matches"]] == [name]
            status, body = s.call("POST", "/file", {"path": name})
            assert status == 200 and body["content"].startswith(f"# Odd {n}"), body
            status, body = s.call("POST", "/pages", {"path": name})
            assert status == 200 and body["path"] == name
            read = GET_FILE.call(Corpus(load()), {"path": name})  # the agent's and MCP's tool
            assert read["path"] == name and read["content"].startswith(f"# Odd {n}")
    finally:
        s.stop()
    # A pasted Windows-style path still finds the file it names with slashes.
    assert loom("get", "recipes\\bread.md").stdout.startswith("# ")


# Item 17: an index loom may read but not write -------------------------------------------

@pytest.mark.parametrize("locked", ["folder", "file"])
def test_an_index_that_cannot_be_written_is_still_read(notes, loom_home, locked):
    loom("scan", str(notes))
    run_as = as_user(loom_home, notes)
    index = loom_home / "index.db"
    index.chmod(0o444)
    if locked == "folder":  # a read-only mount as an unprivileged user meets it
        loom_home.chmod(0o555)
    try:
        found = json.loads(loom("search", "sourdough", "--json", run_as=run_as).stdout)
        assert found["hits"][0]["path"] == "recipes/bread.md"
        assert "sourdough" in loom("grep", "-i", "sourdough", run_as=run_as).stdout.lower()
        assert loom("get", "recipes/bread.md", run_as=run_as).stdout.startswith("# ")
        assert "recipes/bread.md" in loom("files", run_as=run_as).stdout
        write(notes / "new.md", "# New\nmore\n")
        refused = loom("scan", str(notes), run_as=run_as, check=None)
        assert refused.returncode != 0 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith("loom: ") and "internal error" not in refused.stderr
    finally:
        loom_home.chmod(0o755)
        index.chmod(0o644)


# Items 10 and 15: clients that leave, slow models -----------------------------------------

def open_request(url: str, path: str, body: object) -> socket.socket:
    """Send one POST on a fresh raw socket; the caller reads (or leaves)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=120)
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                 f"application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one whole response from a raw socket, then close it."""
    import http.client

    try:
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        sock.close()


def first_line(sock: socket.socket) -> bytes:
    """Read a streamed response up to its first NDJSON line (headers skipped)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    buf = buf.split(b"\r\n\r\n", 1)[1]
    while b"\n" not in buf.split(b"\r\n", 1)[-1]:  # chunked: a size line, then data
        buf += sock.recv(4096)
    return buf.split(b"\r\n", 1)[1].split(b"\n", 1)[0]


class Log:
    """The server's stderr, line by line, read on a thread so a test can wait for a line."""

    def __init__(self, server: Server) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert server.proc.stderr is not None
        stream = server.proc.stderr
        threading.Thread(target=lambda: [self.lines.put(line) for line in stream],
                         daemon=True).start()

    def wait_for(self, text: str, timeout: float = 240) -> str:
        while True:
            line = self.lines.get(timeout=timeout)  # queue.Empty: it never came
            self.seen.append(line)
            if text in line:
                return line


def test_a_client_that_leaves_a_streamed_scan_does_not_stop_it(tmp_path, loom_home):
    notes = tmp_path / "many"
    for n in range(1500):
        write(notes / f"d{n // 100}" / f"n{n}.md", f"# Note {n}\nword{n} and more\n")
    write(loom_home / "config.toml", f'notes_dirs = ["{notes}"]\n')
    s = Server()
    log = Log(s)
    try:
        sock = open_request(s.url, "/scan", {"stream": True})
        event = json.loads(first_line(sock))
        sock.close()  # the client leaves at its first progress line
        assert event["progress"]["done"] < 1500, event
        done = log.wait_for("loom serve: scan:")
        assert done == "loom serve: scan: the client left before the end; finished " \
                       "without it\n", log.seen
        status = json.loads(loom("status", "--json").stdout)
    finally:
        s.stop()
    assert status["files"] == 1500 and status["last_scan"], status
    assert not log.seen[:-1], log.seen  # that one line, no traceback


def test_a_client_that_leaves_a_streamed_ask_leaves_one_log_line(scanned_notes, loom_home):
    gate = threading.Event()
    with FakeLLM() as llm:
        llm.behaviour.gate = gate
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        s = Server()
        log = Log(s)
        try:
            sock = open_request(s.url, "/ask", {"question": "madder root invoice",
                                                "stream": True})
            assert llm.arrived.acquire(timeout=120)
            sock.close()
            gate.set()
            line = log.wait_for("loom serve: ask:")
        finally:
            s.stop()
    assert line == "loom serve: ask: the client left before the end; finished without it\n"
    assert not log.seen[:-1], log.seen


def test_slow_asks_never_hold_reads_and_the_one_too_many_is_503(scanned_notes, loom_home):
    from loomcli.http_server import ASK_RETRY_AFTER_S, ASKS_AT_ONCE

    gate = threading.Event()
    with FakeLLM() as llm:
        llm.behaviour.gate = gate
        write(loom_home / "config.toml",
              f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{llm.url}"\n')
        s = Server("--processes", "1")  # the cap is each process's
        try:
            held = [open_request(s.url, "/ask", {"question": "madder root invoice",
                                                 "stream": n % 2 == 0})
                    for n in range(ASKS_AT_ONCE)]
            for _ in held:  # every admitted ask is with the model now
                assert llm.arrived.acquire(timeout=120)
            for stream in (False, True):
                status, headers, body = answer(open_request(
                    s.url, "/ask", {"question": "madder root invoice", "stream": stream}))
                assert status == 503, (status, headers, body)
                assert headers.get("retry-after") == str(ASK_RETRY_AFTER_S), headers
                assert json.loads(body)["error"].startswith(
                    f"{ASKS_AT_ONCE} answers are being written already")
            # Eight reads at once, while every ask waits on the model: all answered.
            reads = [open_request(s.url, "/search", {"query": "sourdough"})
                     for _ in range(8)]
            assert [answer(sock)[0] for sock in reads] == [200] * 8
            assert s.call("GET", "/healthz")[0] == 200
            gate.set()
            for sock in held:  # every one answers, all at once
                status, _, body = answer(sock)
                assert status == 200, body
            assert s.call("POST", "/ask", {"question": "madder root invoice"})[0] == 200
        finally:
            gate.set()
            s.stop()


# Item 20: a large page parsed as a stream ------------------------------------------------

def test_a_20_mb_page_of_spans_is_indexed(tmp_path, loom_home):
    notes = tmp_path / "web"
    spans = "".join(f"<span class=w>word{n}</span> " for n in range(700_000))
    write(notes / "spans.html", f"<html><head><title>Spans</title></head><body><nav>menu"
                                f"</nav><div>{spans}</div><p>the last line</p></body></html>")
    assert (notes / "spans.html").stat().st_size > 20_000_000
    report = json.loads(loom("scan", str(notes), "--json").stdout)
    assert report["added"] == 1 and report["failed"] == 0, report
    text = loom("get", "spans.html").stdout
    assert text.startswith("word0 word1 ") and text.endswith("word699999\n\nthe last line\n")
    assert "menu" not in text  # the page's chrome is still left out


def test_a_streamed_page_reads_as_the_tree_reads_it(monkeypatch):
    from loomcli.extract import documents

    pages = [p.read_text(encoding="utf-8") for p in
             sorted((Path(__file__).parent.parent / "fixtures").glob("*/*.html"))]
    pages += ["<html><body><article>one</article><article>two</article><nav>n</nav>"
              "<p>rest</p></body></html>",
              "<div role=main><header><h1>T</h1></header><nav>x</nav>body<script>s</script>"
              "<!-- c -->tail</div><main>first <span class=headerlink>¶</span>m</main>",
              "<body><nav>only chrome</nav></body>", "<p class='document body'>x<br>y</p>"]
    trees = [documents.html_text(page) for page in pages]
    assert documents.html_text("<p>a<script>x</script>b</p><p>c<nav>n</nav>d</p>") == (
        "ab\n\nc\nd\n", "")  # a skipped part's tail once, not twice
    monkeypatch.setattr(documents, "TREE_BYTES_SAFE", 0)  # every page as a large one
    assert [documents.html_text(page) for page in pages] == trees
