"""Hostile patterns, clients and names against grep and `loom serve` (issue 35): bounded
time and memory, one-line errors, nothing lost, every indexed file readable by its path.

Servers are real `loom serve` processes spoken to over real sockets."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from loomcli import ignore
from loomcli.errors import IgnorePatternError

from .conftest import as_user, write
from .test_http import Server, server  # noqa: F401  (the fixture)

LOOM = [sys.executable, "-m", "loomcli"]
HUGE = r"\w{1000}\w{1000}\w{1000}"  # 18 characters, 4 million RE2 instructions


def loom(*args: str, check: int | None = 0, run_as: list[str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*(run_as or []), *LOOM, *args], capture_output=True, text=True,
                          env=os.environ, timeout=120)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


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


def test_a_huge_pattern_over_http_is_a_400_and_healthz_still_answers(server):
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
