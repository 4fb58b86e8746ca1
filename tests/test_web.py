"""The web page of `loom serve`, in a real browser: Playwright driving Debian's Chromium.

Every test runs a real `loom serve` process over a real index; the browser reaches only
that server (any other request is refused and fails the test), and the page's console
must show no CSP violation. Waits are on events (Playwright's expect / wait_for), never
on clocks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .conftest import write
from .llm_server import RecordingHandler
from .test_http import Server

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; "
       "require-trusted-types-for 'script'; trusted-types 'none'")
WEB = Path(__file__).resolve().parent.parent / "loomcli" / "web"


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                       else None)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    if path is None:
        pytest.skip("Chromium not found (apt-get install chromium; .ci/run does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (it is in the [test] extra)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Tab:
    """A fresh browser context on one server: records dialogs, console errors and every
    request; refuses (and remembers) any request to another host."""

    def __init__(self, browser: Any, server: Server, **context: Any) -> None:
        self.server = server
        self.context = browser.new_context(**context)
        self.dialogs: list[str] = []
        self.console: list[str] = []
        self.foreign: list[str] = []
        self.requests: list[Any] = []
        self.context.route("**/*", self._route)
        self.page = self.new_page()

    def new_page(self) -> Any:
        page = self.context.new_page()
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: self.console.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        page.on("request", lambda r: self.requests.append(r))
        return page

    def _route(self, route: Any) -> None:
        if route.request.url.startswith(self.server.url + "/"):
            route.continue_()
        else:
            self.foreign.append(route.request.url)
            route.abort()

    def goto(self, path: str) -> Any:
        self.page.goto(self.server.url + path)
        return self.page

    def posts(self, path: str) -> list[Any]:
        return [r for r in self.requests
                if r.method == "POST" and r.url == self.server.url + path]

    def close(self) -> None:
        self.context.close()
        assert self.foreign == [], "the page loaded something from elsewhere"
        assert not [c for c in self.console if "Content Security Policy" in c
                    or "Trusted Type" in c or "pageerror" in c], self.console


@pytest.fixture
def serve(browser):
    """serve(*args, env=...) -> Tab on a fresh `loom serve`; all stopped at the end."""
    servers: list[Server] = []
    tabs: list[Tab] = []

    def start(*args: str, env: dict | None = None, **context: Any) -> Tab:
        servers.append(Server("--processes", "1", *args, env=env))  # stopped even if
        tabs.append(Tab(browser, servers[-1], **context))  # the tab cannot be made
        return tabs[-1]

    yield start
    try:
        for tab in tabs:
            tab.close()
    finally:
        for server in servers:
            server.stop()


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect(target)


def config(loom_home: Path, text: str) -> None:
    write(loom_home / "config.toml", text)


def api(server: Server, path: str, body: dict) -> dict:
    status, data = server.call("POST", path, body)
    assert status == 200, data
    return data


# -- a stand-in LLM that holds its answer until told --------------------------------------

class HeldLLM:
    """Ollama's /api/chat on loopback: streams the first piece, then waits for `release`
    before the rest, so a test can see the answer arrive piece by piece. /api/show
    answers as Ollama does (a model's window)."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.release = threading.Event()
        self.requests: list[dict[str, Any]] = []
        held = self

        class Handler(RecordingHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.record(held.requests)
                if self.path == "/api/show":
                    body = json.dumps({"model_info": {"general.architecture": "llama",
                                                      "llama.context_length": 8192},
                                       "parameters": ""}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i, piece in enumerate(held.pieces):
                    if i == 1:
                        held.release.wait(60)
                    self._chunk(json.dumps({"message": {"role": "assistant", "content": piece},
                                            "done": False}) + "\n")
                self._chunk(json.dumps({"done": True, "prompt_eval_count": 100,
                                        "eval_count": 10}) + "\n")
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def chats(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == "/api/chat"]

    def __enter__(self) -> HeldLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def use_llm(loom_home: Path, url: str) -> None:
    config(loom_home, f'[llm]\nprovider = "ollama"\nmodel = "m"\nendpoint = "{url}"\n')


# -- without a browser: the routes and headers ----------------------------------------------

def test_page_routes_headers_and_no_collision_with_the_api(scanned_notes):
    s = Server("--processes", "1")
    try:
        for path in ("/", "/search?q=x", "/grep?pattern=a", "/file?path=a", "/ask?q=a",
                     "/status"):
            req = urllib.request.Request(s.url + path, headers={"Accept": "text/html"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
                assert resp.headers["Content-Security-Policy"] == CSP
                assert resp.headers["X-Content-Type-Options"] == "nosniff"
                assert resp.headers["Referrer-Policy"] == "no-referrer"
                assert resp.read() == (WEB / "index.html").read_bytes()
        with urllib.request.urlopen(s.url + "/assets/app.js", timeout=30) as resp:
            assert resp.headers["Content-Type"] == "text/javascript; charset=utf-8"
            assert resp.headers["Content-Security-Policy"] == CSP
            tag = resp.headers["ETag"]
        req = urllib.request.Request(s.url + "/assets/app.js", headers={"If-None-Match": tag})
        with pytest.raises(urllib.error.HTTPError) as cached:
            urllib.request.urlopen(req, timeout=30)
        assert cached.value.code == 304
        # The API as it was: JSON clients get JSON, wrong methods 405, unknown files 404.
        assert s.call("GET", "/search") == (405, {"error": "GET is not allowed on /search"})
        assert s.call("GET", "/file")[0] == 405
        assert s.call("GET", "/assets/nope.js")[0] == 404
        assert s.call("GET", "/assets/..%2Fwebpage.py")[0] == 404
        status, st = s.call("GET", "/status")
        assert status == 200 and st["files"] == 9 and st["failures"] == []
        assert s.call("POST", "/search", {"query": "warp"})[0] == 200
        status, pages = s.call("POST", "/pages", {"path": "manuals/field-guide.pdf"})
        assert status == 200 and pages["pages"][0] == 0 and len(pages["pages"]) == 5
        assert pages["title"] == "Field Guide to the Loom Workshop"
        assert s.call("POST", "/pages", {"path": "welcome.md"})[1]["pages"] is None
        # The page obeys the same Host and Origin rules as the API.
        assert s.call("GET", "/", headers={"Host": "evil.example"})[0] == 403
        assert s.call("GET", "/assets/app.js",
                      headers={"Origin": "https://evil.example"})[0] == 403
    finally:
        s.stop()


def test_page_source_has_no_inline_script_style_or_html_sinks():
    html = (WEB / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert not re.search(r"\s(style|on[a-z]+)\s*=", html)
    assert "<style" not in html and "http://" not in html and "https://" not in html
    js = (WEB / "app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "setAttribute(\"style"):
        assert sink not in js, sink
    css = (WEB / "app.css").read_text(encoding="utf-8")
    assert "@import" not in css and "url(" not in css
    first_load = sum((WEB / n).stat().st_size for n in ("index.html", "app.js", "app.css",
                                                         "icon.svg"))
    assert first_load <= 300 * 1024


def test_serve_open_starts_the_default_browser_at_the_page(scanned_notes, tmp_path):
    fifo = tmp_path / "opened"
    os.mkfifo(fifo)
    script = write(tmp_path / "browser.sh", f'#!/bin/sh\necho "$1" > {fifo}\n')
    script.chmod(0o755)
    s = Server("--processes", "1", "--open", env={"BROWSER": f"{script} %s"})
    try:
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(fifo.read_text().strip()))
        reader.start()
        reader.join(60)
        assert got == [s.url + "/"]
    finally:
        s.stop()


def test_search_as_you_type_takes_the_last_word_as_a_prefix(scanned_notes):
    from loomcli.operations import Corpus
    from loomcli.store import quote_fts

    assert quote_fts("warp tens", "AND", prefix=True) == '"warp" AND "tens"*'
    assert quote_fts("warp tens ", "AND", prefix=True) == '"warp" AND "tens"'  # word ended
    assert quote_fts("warp te", "AND", prefix=True) == '"warp" AND "te"'  # too short
    corpus = Corpus.default()
    assert corpus.search("Jacqu").hits == []
    assert {h.path for h in corpus.search("Jacqu", prefix=True).hits} == {
        "manuals/field-guide.pdf", "projects/loom-controller.md"}


# -- in the browser ----------------------------------------------------------------------------

def long_note(notes: Path) -> Path:
    """A note of ~200 KB whose two hits are deep inside it."""
    lines = [f"filler line {i} about warp and weft and nothing else" for i in range(4000)]
    lines[2600] = "the quetzal feather is kept in the second drawer"
    lines[3300] = "a second quetzal sighting near the dye vats"
    return write(notes / "long" / "aviary.md", "# Aviary log\n" + "\n".join(lines) + "\n")


def scan(notes: Path, code: int = 0) -> None:
    done = subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)],
                          capture_output=True, text=True)
    assert done.returncode == code, done.stderr


def test_type_a_query_and_open_a_result_at_its_hit(serve, notes):
    long_note(notes)
    scan(notes)
    tab = serve()
    page = tab.goto("/")
    expect(page.locator("#q")).to_be_focused()
    page.locator("#q").press_sequentially("quetz")
    first = page.locator("#hits li").first
    expect(first.locator("a.title")).to_have_text("Aviary log")
    expect(first.locator(".snippet mark").first).to_have_text("quetzal")
    expect(first.locator(".tag")).to_have_text("words")
    assert "/search?q=quetz" in page.url
    page.keyboard.press("ArrowDown")
    expect(first).to_have_class(re.compile("selected"))
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/file\?path=long%2Faviary\.md&q=quetz"))
    current = page.locator("#doc-text mark.current")
    expect(current).to_have_text("quetzal")
    expect(current).to_be_in_viewport()
    expect(page.locator("#match-pos")).to_have_text("match 1 of 2")
    # Scrolled to the hit (the text before it loads as the reader settles, keeping the place).
    page.wait_for_function("() => document.querySelector('#doc').scrollTop > 1000")
    page.click("#match-next")
    expect(page.locator("#match-pos")).to_have_text("match 2 of 2")
    expect(page.locator("#doc-text mark.current")).to_be_in_viewport()
    second = page.locator("#doc-text mark.current").evaluate("m => m.parentNode.textContent")
    assert "a second quetzal sighting" in second
    # Ranges, never the whole text: every read asks for 64 KB at most.
    total = api(tab.server, "/pages", {"path": "long/aviary.md"})["content_len"]
    reads = [r.post_data_json for r in tab.posts("/file")]
    assert reads and all(r["length"] <= 65536 for r in reads) and total > 65536 * 2
    # Scrolling to the top fetches the text before, keeping the reader's place.
    chunks = page.locator("#doc-text .chunk")
    for _ in range(10):  # each scroll to the top loads one range before
        if chunks.first.get_attribute("data-start") == "0":
            break
        before = chunks.count()
        kept = page.locator("#doc-text mark.current").evaluate(
            "m => m.getBoundingClientRect().top")
        page.locator("#doc").evaluate("d => { d.scrollTop = 0; }")
        expect(chunks).not_to_have_count(before)
    expect(page.locator("#doc-text")).to_contain_text("filler line 0 about")
    assert kept is not None
    # Back to the results, as they were.
    page.go_back()
    expect(page).to_have_url(re.compile(r"/search\?q=quetz$"))
    expect(page.locator("#q")).to_have_value("quetz")
    expect(page.locator("#hits li a.title").first).to_have_text("Aviary log")
    # "/" focuses the search box from any view.
    page.goto(tab.server.url + "/status")
    expect(page.locator("#status-facts")).to_contain_text("Files")
    page.keyboard.press("/")
    expect(page.locator("#q")).to_be_focused()


def test_a_pdf_result_names_its_page_and_opens_there(serve, scanned_notes):
    tab = serve()
    page = tab.goto("/search?q=madder")
    hit = page.locator("#hits li", has_text="manuals/field-guide.pdf")
    expect(hit.locator(".page")).to_have_text("page 4")
    hit.locator("a.title").click()
    expect(page.locator("#file-title")).to_have_text("Field Guide to the Loom Workshop")
    expect(page.locator("#doc-text mark.current")).to_have_text("madder")
    expect(page.locator("#file-page")).to_have_text("page 4 of 5")
    expect(page.locator("#doc-text .pagebreak")).to_have_count(4)


def test_grep_deep_link_groups_by_file_and_opens_at_the_offset(serve, scanned_notes):
    tab = serve()
    page = tab.goto("/grep?pattern=FT-2026-0%5B0-9%5D%7B3%7D&context=1")
    expect(page.locator("#grep-pattern")).to_have_value("FT-2026-0[0-9]{3}")
    expect(page.locator("#grep-context")).to_have_value("1")
    groups = page.locator("#grep-results .group")
    want = api(tab.server, "/grep", {"pattern": "FT-2026-0[0-9]{3}"})["matches"]
    expect(groups).to_have_count(len({m["path"] for m in want}))
    expect(page.locator("#grep-count")).to_have_text(re.compile(rf"^{len(want)} matches in "))
    pdf = next(m for m in want if m["path"] == "manuals/field-guide.pdf")
    group = groups.filter(has_text="manuals/field-guide.pdf")
    expect(group.locator("li .meta")).to_have_text(
        f"line {pdf['line']}offset {pdf['offset']}page {pdf['page']}")
    expect(group.locator("li mark")).to_have_text("FT-2026-0412")
    group.locator("li a").click()
    expect(page).to_have_url(re.compile(rf"/file\?path=manuals%2Ffield-guide\.pdf&offset="
                                        rf"{pdf['offset']}&"))
    expect(page.locator("#doc-text mark.current")).to_have_text("FT-2026-0412")
    expect(page.locator("#doc-text mark.current")).to_be_in_viewport()
    expect(page.locator("#file-page")).to_have_text(f"page {pdf['page']} of 5")
    # A glob narrows it, and the form writes the deep link.
    page.goto(tab.server.url + "/grep")
    page.fill("#grep-pattern", "FT-2026")
    page.fill("#grep-glob", "*.md")
    page.click("#grep-form button")
    expect(page).to_have_url(re.compile(r"/grep\?pattern=FT-2026&glob=\*\.md$"))
    expect(page.locator("#grep-results .group h2")).not_to_contain_text(["manuals/"])
    expect(page.locator("#grep-results .group").first).to_be_visible()


def test_a_document_at_an_offset(serve, scanned_notes):
    tab = serve()
    m = api(tab.server, "/grep", {"pattern": "Invoice FT", "path": "manuals/field-guide.pdf"}
            )["matches"][0]
    page = tab.goto(f"/file?path=manuals/field-guide.pdf&offset={m['offset']}")
    here = page.locator("#here")
    expect(here).to_have_text("Invoice FT-2026-0412 covers the madder root delivered in March.")
    expect(here).to_be_in_viewport()
    expect(page.locator("#file-page")).to_have_text("page 4 of 5")
    expect(page.locator("#match-pos")).to_have_text("")
    # A span (a quote of an answer): exactly those bytes are marked.
    page.goto(tab.server.url + f"/file?path=manuals/field-guide.pdf&offset={m['offset']}"
              "&length=20")
    expect(page.locator("#doc-text mark.current")).to_have_text("Invoice FT-2026-0412")
    # Not-ASCII text before the place: offsets are bytes of UTF-8, not characters.
    cafe = api(tab.server, "/grep", {"pattern": "per cup", "path": "manuals/field-guide.pdf"}
               )["matches"][0]
    page.goto(tab.server.url + f"/file?path=manuals/field-guide.pdf&offset={cafe['offset']}")
    expect(page.locator("#here")).to_have_text("per cup — naïve budgeting.")
    page.goto(tab.server.url + "/file?path=nope.md")
    expect(page.locator("#file-error")).to_contain_text("not in the index")


def test_ask_streams_and_its_sources_open(serve, scanned_notes, loom_home):
    with HeldLLM(["The invoice is FT-2026-0412 ", "[manuals/field-guide.pdf]."]) as llm:
        use_llm(loom_home, llm.url)
        tab = serve()
        page = tab.goto("/ask")
        page.fill("#question", "which invoice covers the madder root?")
        page.get_by_role("button", name="Ask").click()
        # The first piece is on screen while the model still holds the rest: streaming.
        expect(page.locator("#answer")).to_have_text("The invoice is FT-2026-0412 ")
        expect(page.locator("#ask-state")).to_have_text("Answering…")
        expect(page.locator("#ask-sources")).to_be_hidden()
        llm.release.set()
        expect(page.locator("#ask-state")).to_have_text("Done.")
        expect(page.locator("#answer")).to_have_text(
            "The invoice is FT-2026-0412 [manuals/field-guide.pdf].")
        assert len(llm.chats()) == 1
        expect(page).to_have_url(re.compile(r"/ask\?q=which\+invoice"))
        source = page.locator("#sources a", has_text="Field Guide to the Loom Workshop")
        expect(source).to_be_visible()
        expect(page.locator("#sources li").first.locator(".tag")).to_have_text("cited")
        page.locator("#answer a").click()  # the citation in the answer is a link too
        expect(page.locator("#file-title")).to_have_text("Field Guide to the Loom Workshop")
        expect(page.locator("#doc-text mark.current").first).to_be_visible()
        page.go_back()
        source.click()
        expect(page).to_have_url(re.compile(r"/file\?path=manuals%2Ffield-guide\.pdf"))
        expect(page.locator("#doc-text")).to_contain_text("Invoice FT-2026-0412")


def test_ask_shows_quotes_steps_and_accounting_of_the_final_event(serve, scanned_notes):
    """The fields the window and agent work add to ask's last streamed event (quotes,
    sources with pages, context, timings, steps, conversation_id), rendered from that
    framing: the browser's POST /ask is answered here with those lines."""
    tab = serve()
    m = api(tab.server, "/grep", {"pattern": "Invoice FT", "path": "manuals/field-guide.pdf"}
            )["matches"][0]
    step = {"tool": "loom_grep", "arguments": {"pattern": "FT-2026"}, "result": "1 match"}
    final = {"done": True, "answer": "It is FT-2026-0412 [manuals/field-guide.pdf, page 4].",
             "citations": ["manuals/field-guide.pdf"],
             "used": [{"path": "manuals/field-guide.pdf",
                       "title": "Field Guide to the Loom Workshop", "content_len": 918}],
             "sources": [{"path": "manuals/field-guide.pdf",
                          "title": "Field Guide to the Loom Workshop", "pages": [4]}],
             "quotes": [{"text": "Invoice FT-2026-0412", "path": "manuals/field-guide.pdf",
                         "offset": m["offset"], "length": 20, "page": 4, "verified": True},
                        {"text": "paid in gold", "path": "manuals/field-guide.pdf",
                         "offset": None, "length": None, "page": None, "verified": False}],
             "context": {"window_tokens": 8192, "prompt_tokens": 612, "answer_tokens": 20,
                         "source": "api/show", "files_sent": 1, "files_left_out": 0},
             "timings": {"retrieve_ms": 3, "llm_ms": 40},
             "steps": [step], "conversation_id": "c-42"}
    lines = [{"step": step}, {"text": "It is FT-2026-0412 "},
             {"text": "[manuals/field-guide.pdf, page 4]."}, final]
    bodies: list[Any] = []

    def answer(route: Any) -> None:
        bodies.append(route.request.post_data_json)
        route.fulfill(status=200, content_type="application/x-ndjson",
                      body="".join(json.dumps(x) + "\n" for x in lines))

    page = tab.goto("/ask")
    page.route(tab.server.url + "/ask", answer)
    page.fill("#question", "which invoice?")
    page.check("#ask-agent")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator("#ask-state")).to_have_text("Done.")
    expect(page.locator("#ask-steps li")).to_have_count(1)  # from the event, not twice
    expect(page.locator("#ask-steps li")).to_contain_text('loom_grep {"pattern":"FT-2026"}')
    expect(page.locator("#sources li").first).to_contain_text("page 4")
    expect(page.locator("#quotes li")).to_have_count(2)
    expect(page.locator("#quotes li").nth(0).locator(".verified")).to_be_visible()
    expect(page.locator("#quotes li").nth(1).locator(".unverified")).to_be_visible()
    expect(page.locator("#ask-context")).to_contain_text("8192")
    expect(page.locator("#ask-context")).to_contain_text("c-42")
    expect(page.locator("#answer a")).to_have_text("manuals/field-guide.pdf, page 4")
    expect(page.locator("#ask-follow")).to_be_visible()
    page.check("#ask-follow")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator("#ask-state")).to_have_text("Done.")
    assert bodies[0] == {"question": "which invoice?", "stream": True, "agent": True}
    assert bodies[1]["conversation_id"] == "c-42"
    page.locator("#quotes li").first.get_by_role("link").click()
    expect(page.locator("#doc-text mark.current")).to_have_text("Invoice FT-2026-0412")
    expect(page.locator("#file-page")).to_have_text("page 4 of 5")


def test_a_deep_link_to_ask_fills_the_box_and_calls_nothing(serve, scanned_notes, loom_home):
    with HeldLLM(["Madder ", "gives red."]) as llm:
        llm.release.set()
        use_llm(loom_home, llm.url)
        tab = serve()
        page = tab.goto("/ask?q=what+does+madder+give%3F")
        expect(page.locator("#question")).to_have_value("what does madder give?")
        expect(page.locator("#question")).to_be_focused()
        expect(page.locator("#ask-follow")).to_be_hidden()  # no conversation to continue yet
        page.wait_for_load_state("networkidle")
        assert tab.posts("/ask") == [] and llm.requests == []
        # The button is what asks (so the check above could have failed).
        page.get_by_role("button", name="Ask").click()
        expect(page.locator("#ask-state")).to_have_text("Done.")
        assert len(tab.posts("/ask")) == 1 and len(llm.chats()) == 1


HOSTILE = """# <img src=x onerror="window.__pwned=1;alert('title')">
<script>window.__pwned = 1; alert("script")</script>
zebrawood <img src=x onerror="window.__pwned=1;alert('img')"> zebrawood
<svg onload="alert('svg')"></svg> <a href="javascript:alert('link')">click</a>
"""


def test_a_hostile_note_is_shown_as_text_and_runs_nothing(serve, notes, loom_home):
    write(notes / "hostile.md", HOSTILE)
    scan(notes)
    evil = "zebrawood is <img src=x onerror=alert('answer')> [hostile.md]"
    with HeldLLM([evil, "<script>alert('late')</script>"]) as llm:
        llm.release.set()
        use_llm(loom_home, llm.url)
        tab = serve()
        page = tab.goto("/search?q=zebrawood")
        hit = page.locator("#hits li").first
        expect(hit.locator("a.title")).to_have_text(
            "<img src=x onerror=\"window.__pwned=1;alert('title')\">")
        expect(hit.locator(".snippet")).to_contain_text("</script> zebrawood <img src=x onerror=")
        hit.locator("a.title").click()
        expect(page.locator("#doc-text")).to_contain_text('<script>window.__pwned = 1;')
        expect(page.locator("#doc-text mark").first).to_have_text("zebrawood")
        page.goto(tab.server.url + "/grep?pattern=onerror")
        expect(page.locator("#grep-results mark").first).to_have_text("onerror")
        page.goto(tab.server.url + "/ask?q=zebrawood")
        page.get_by_role("button", name="Ask").click()
        expect(page.locator("#ask-state")).to_have_text("Done.")
        expect(page.locator("#answer")).to_contain_text("<img src=x onerror=alert('answer')>")
        expect(page.locator("#answer")).to_contain_text("<script>alert('late')</script>")
        for view in ("/search?q=zebrawood", "/file?path=hostile.md&q=zebrawood"):
            page.goto(tab.server.url + view)
            expect(page.locator("mark").first).to_have_text("zebrawood")
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator("main img, main svg, main script").count() == 0
        assert tab.dialogs == []
        # And were a script to slip in, the CSP would stop it: no inline script, no eval,
        # no HTML strings (Trusted Types).
        # (Code compiled from a string by the page itself: DevTools' own evaluate is exempt.)
        ran = page.evaluate("""() => new Promise((resolve) => {
            const s = document.createElement('script');
            s.append(document.createTextNode('window.__inline = 1'));  // past Trusted Types
            try { document.body.append(s); } catch (e) { /* refused */ }
            try { setTimeout('window.__evaled = 1', 0); } catch (e) { /* refused */ }
            let htmlOk = true;
            try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); }
            catch (e) { htmlOk = false; }
            // Timers run in order: had the string been compiled, it would have run first.
            setTimeout(() => resolve([window.__inline === 1, window.__evaled === 1, htmlOk]), 0);
        })""")
        assert ran == [False, False, False]
        tab.console = [c for c in tab.console if "Content Security Policy" not in c
                       and "Trusted Type" not in c and "EvalError" not in c]


def test_the_token_is_asked_once_and_kept_for_the_tab(serve, scanned_notes):
    tab = serve(env={"LOOM_HTTP_TOKEN": "s3cret"})
    s = tab.server
    assert s.call("GET", "/files")[0] == 401  # the API without it stays closed
    assert s.call("GET", "/status")[0] == 401
    assert s.call("POST", "/search", {"query": "warp"})[0] == 401
    page = tab.goto("/search?q=warp")  # the page itself loads, to ask for it
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#token")).to_have_attribute("type", "password")
    page.fill("#token", "wrong")
    page.keyboard.press("Enter")
    expect(page.locator("#token-why")).to_contain_text("refused")
    page.fill("#token", "s3cret")
    page.get_by_role("button", name="Use token").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#hits li").first).to_be_visible()
    sent = [r.headers.get("authorization") for r in tab.posts("/search")]
    assert sent[-1] == "Bearer s3cret" and None in sent
    # Kept for the tab: a reload and other views do not ask again.
    page.reload()
    expect(page.locator("#hits li").first).to_be_visible()
    page.goto(s.url + "/status")
    expect(page.locator("#status-facts")).to_contain_text("Files")
    expect(dialog).to_be_hidden()
    # A new tab asks again (sessionStorage is per tab).
    other = tab.new_page()
    other.goto(s.url + "/status")
    expect(other.locator("#token-dialog")).to_be_visible()
    tab.console = [c for c in tab.console if "401" not in c]  # the refused fetches


def test_status_lists_failures_and_scan_shows_progress(serve, notes):
    shutil.copy(Path(__file__).resolve().parent.parent / "fixtures" / "bad" /
                "binary-notes.txt", notes / "binary-notes.txt")
    scan(notes, code=1)  # one file failed
    tab = serve()
    page = tab.goto("/status")
    expect(page.locator("#status-roots li")).to_contain_text("notes")
    expect(page.locator("#failures tbody tr")).to_have_count(1)
    expect(page.locator("#failures tbody td").first).to_have_text("binary-notes.txt")
    expect(page.locator("#failures tbody td").nth(1)).to_contain_text("binary")
    write(notes / "fresh.md", "# Fresh\nnew words\n")
    page.get_by_role("button", name="Scan").click()
    expect(page.locator("#scan-state")).to_have_text(re.compile(r"^Scan finished: 1 added"))
    expect(page.locator("#scan-progress")).to_have_attribute("value", "1")
    expect(page.locator("#status-facts")).to_contain_text("Files10 (8 notes")
    expect(page.locator("#status-facts")).to_contain_text("Grep indexcomplete")
    # The CLI's words and units: unchanged files are "unchanged", sizes the CLI's
    expect(page.locator("#scan-state")).to_contain_text("9 unchanged")
    expect(page.locator("#status-facts")).to_contain_text("Skipped0 (no text)")
    from loomcli.console import size

    status = tab.server.call("GET", "/status")[1]
    expect(page.locator("#status-facts")).to_contain_text(f"Text{size(status['text_bytes'])}")
    events = tab.posts("/scan")
    assert len(events) == 1 and events[0].post_data_json == {"stream": True, "force": False}


def test_status_says_when_grep_s_index_is_still_to_be_filled(serve, scanned_notes, loom_home):
    # A large first scan leaves grep's trigram index to a process of its own
    # (grep_index.py): here three texts still named as waiting, no process running.
    db = sqlite3.connect(loom_home / "index.db")
    with db:
        db.execute("INSERT INTO grams_todo (id) SELECT id FROM files LIMIT 3")
    db.close()
    tab = serve()
    page = tab.goto("/status")
    expect(page.locator("#status-facts")).to_contain_text(
        "Grep index3 files to add (by the next scan)")


def test_streamed_scan_reports_progress_then_the_report(scanned_notes):
    s = Server("--processes", "1")
    try:
        req = urllib.request.Request(s.url + "/scan", method="POST",
                                     headers={"Content-Type": "application/json"},
                                     data=b'{"stream": true, "force": true}')
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.headers["Content-Type"].startswith("application/x-ndjson")
            events = [json.loads(line) for line in resp]
        assert s.call("POST", "/scan", {"stream": "yes"})[0] == 400
    finally:
        s.stop()
    progress = [e["progress"] for e in events if "progress" in e]
    assert progress and progress[-1]["done"] == progress[-1]["total"] == 9
    assert events[-1]["done"] is True and events[-1]["updated"] + events[-1]["skipped"] == 9


def test_usable_at_360_px_and_in_dark_mode(serve, scanned_notes):
    tab = serve(viewport={"width": 360, "height": 740}, color_scheme="dark")
    page = tab.goto("/search?q=warp+tension")
    expect(page.locator("#hits li").first).to_be_visible()
    for view in ("/search?q=warp+tension", "/grep?pattern=warp&context=2", "/status",
                 "/ask?q=warp", "/file?path=manuals/field-guide.pdf&q=warp"):
        page.goto(tab.server.url + view)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 360, view
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(21, 22, 26)"
    # Labels and roles for screen readers.
    page.goto(tab.server.url + "/")
    expect(page.get_by_role("searchbox", name="Search your notes")).to_be_visible()
    expect(page.get_by_role("navigation", name="Views")).to_be_visible()


def test_a_deep_link_pattern_is_marked_by_the_server_never_run_by_the_page(serve, notes):
    # `(\w+\s?)+$` backtracks exponentially in a JS RegExp on a long word with no end:
    # the page froze for over 18 s re-running it. RE2 marks it on the server instead.
    write(notes / "trap.md", "# Trap\nquokka wombat\n" + "a" * 60 + "!\n")
    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(notes)], check=True,
                   capture_output=True)
    tab = serve()
    page = tab.goto("/file?path=trap.md&pattern=%28%5Cw%2B%5Cs%3F%29%2B%24")
    marks = page.locator("#doc-text mark")
    expect(marks.first).to_have_text("Trap")
    assert marks.all_text_contents() == ["Trap", "quokka wombat"]
    page = tab.goto("/grep?pattern=%28%5Cw%2B%5Cs%3F%29%2B%24&glob=trap.md")
    expect(page.locator("#grep-results li mark").first).to_have_text("Trap")
    assert page.locator("#grep-results li mark").all_text_contents() == [
        "Trap", "quokka wombat"]
    assert tab.foreign == [] and not tab.console


def test_notes_show_their_tags_links_and_backlinks(serve, tmp_path):
    """A real Obsidian vault: a hit shows its tags and how many notes link to it; a tag
    narrows the search to it; a note opened shows its tags, what it links to and what
    links to it, each opening its own."""
    from .conftest import FIXTURES

    vault = tmp_path / "vault"
    shutil.copytree(FIXTURES / "vault", vault)
    scan(vault)
    tab = serve()
    page = tab.goto("/search?q=loom")
    hit = page.locator("#hits li").filter(has=page.locator("a.path", has_text="Projects/Loom.md"))
    expect(hit.locator("a.title")).to_have_text("Loom project")
    expect(hit.locator(".meta .backlinks")).to_have_text("linked from 3 notes")
    expect(hit.locator(".meta a.tag")).to_have_text(["#active", "#project/loom"])
    old = page.locator("#hits li").filter(
        has=page.locator("a.path", has_text="Archive/2023/old/Loom.md"))
    expect(old.locator(".meta")).not_to_contain_text("linked from")  # nothing links there
    expect(old.locator(".meta a.tag")).to_have_count(0)
    hit.locator("a.tag", has_text="#active").click()  # the query, narrowed to the tag
    expect(page).to_have_url(re.compile(r"/search\?q=loom\+%23active$"))
    expect(page.locator("#q")).to_have_value("loom #active")
    expect(page.locator("#hits li a.path")).to_have_text(["Projects/Loom.md"])
    # A note opened: its tags, its links (a missing one said so), its backlinks.
    page.goto(tab.server.url + "/file?path=Home.md")
    expect(page.locator("#file-title")).to_have_text("Vault home")
    notes = page.locator("#file-notes")
    expect(notes).to_be_visible()
    expect(page.locator("#file-tags a")).to_have_text(["#index", "#meta"])
    expect(page.locator("#file-links > :not(.label)")).to_have_text(
        ["the loom project", "my UPS note", "Missing note (no such note)"])
    expect(page.locator("#file-links .missing")).to_have_count(1)  # text, not a link
    expect(page.locator("#file-backlinks a")).to_have_text(["Idea one"])
    expect(page.locator("#file-backlinks .label")).to_have_text("Linked from")
    expect(notes).to_be_in_viewport()
    page.locator("#file-links a", has_text="the loom project").click()
    expect(page).to_have_url(re.compile(r"/file\?path=Projects%2FLoom\.md$"))
    expect(page.locator("#file-title")).to_have_text("Loom project")
    expect(page.locator("#doc-text")).to_contain_text("Loom indexes a folder of notes")
    expect(page.locator("#file-links a")).to_have_text(["Idea one", "second IDEA"])
    expect(page.locator("#file-backlinks a")).to_have_text(
        ["Friday 1 March 2024", "Vault home", "Second idea"])
    page.locator("#file-backlinks a", has_text="Second idea").click()
    expect(page.locator("#file-title")).to_have_text("Second idea")
    expect(page.locator("#file-tags a")).to_have_text(["#idea", "#project/loom"])
    page.locator("#file-tags a", has_text="#idea").click()  # a tag searches by it
    expect(page).to_have_url(re.compile(r"/search\?q=%23idea$"))
    paths = page.locator("#hits li a.path")
    expect(paths).to_have_count(2)
    assert sorted(paths.all_inner_texts()) == ["Ideas/Idea one.md", "Ideas/Second idea.md"]
    # A note that links nowhere, is linked from nowhere and has no tags shows none of it.
    page.goto(tab.server.url + "/file?path=Archive/2023/old/Loom.md")
    expect(page.locator("#doc-text")).to_contain_text("An older page named Loom")
    expect(notes).to_be_hidden()
