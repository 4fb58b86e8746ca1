"""One suite, both backends: real `loom` commands on the same folders, once with the
embedded SQLite index and once with the index on a real PostgreSQL (tests/pg.py), give
the same answers — grep, get and files identical; search the same files in the same
order (scores equal to float rounding: the PostgreSQL store computes FTS5's BM25)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, write

LOOM = [sys.executable, "-m", "loomcli"]
FOLDERS = ("notes", "documents", "long", "scripts", "vault", "encodings")
QUERIES = ("loom", "field guide", "release notes", "weaving loom", "configure",
           "\"sourdough bread\"", "UPS", "NUMA", "内存", "実装", "watchdog timer",
           "stable API", "instal", "the loom")
PATTERNS = (["bread"], ["-i", "LOOM"], ["^#"], ["[0-9]{4}-[0-9]{2}-[0-9]{2}"],
            ["-F", "(x)"], ["-w", "the"], ["-C", "1", "loom"], ["-v", "-m", "2", "e"],
            ["内存"], ["café|naïve"], ["-o", "\\w+ing\\b"], ["-c", "実装"])


def loom(env: dict[str, str], *args: str, check: int | None = 0
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*LOOM, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def folders(tmp_path: Path) -> list[Path]:
    out = []
    for name in FOLDERS:
        shutil.copytree(FIXTURES / name, tmp_path / "data" / name)
        out.append(tmp_path / "data" / name)
    return out


@pytest.fixture
def backends(tmp_path: Path, pg_url: str) -> dict[str, dict[str, str]]:
    """The environment of each backend: its own LOOM_HOME; PostgreSQL's also the url."""
    return {"sqlite": {"LOOM_HOME": str(tmp_path / "home-sqlite")},
            "postgresql": {"LOOM_HOME": str(tmp_path / "home-pg"),
                           "LOOM_DATABASE_URL": pg_url}}


def both(backends: dict[str, dict[str, str]], *args: str, check: int | None = 0
         ) -> dict[str, subprocess.CompletedProcess[str]]:
    return {name: loom(env, *args, check=check) for name, env in backends.items()}


def same(backends: dict[str, dict[str, str]], *args: str, check: int | None = 0) -> str:
    """Run a command on both backends; its output must be the same. Returns it."""
    runs = both(backends, *args, check=check)
    lite, pg = runs["sqlite"], runs["postgresql"]
    assert (lite.returncode, lite.stdout) == (pg.returncode, pg.stdout), args
    return lite.stdout


def test_every_command_answers_the_same_on_both_backends(backends, folders) -> None:
    for run in both(backends, "scan", *map(str, folders)).values():
        assert "error" not in run.stderr.lower(), run.stderr
    files = _files(backends)
    assert len(files) > 30  # the folders were indexed, not skipped
    status = {name: json.loads(r.stdout) for name, r in
              both(backends, "status", "--json").items()}
    for key in ("files", "notes", "pdfs", "documents", "failed", "skipped", "text_bytes"):
        assert status["sqlite"][key] == status["postgresql"][key], key
    found = 0
    for pattern in PATTERNS:
        found += '"path"' in same(backends, "grep", "--json", *pattern, check=None)
    assert found >= len(PATTERNS) - 4  # most patterns match: a real comparison
    for f in files[::5]:
        same(backends, "get", f["path"])
        same(backends, "get", "--json", "--offset", "5", "--length", "300", f["path"])
        same(backends, "get", "--json", "--lines", "3:9", f["path"], check=None)
    found = 0
    for query in QUERIES:
        hits = {name: json.loads(r.stdout) for name, r in
                both(backends, "search", "--json", "--mode", "bm25", query,
                     check=None).items()}
        assert _ranked(hits["sqlite"]) == _ranked(hits["postgresql"]), query
        found += bool(_ranked(hits["sqlite"]))
    assert found >= len(QUERIES) - 2
    same(backends, "forget", str(folders[0]))
    assert len(_files(backends)) < len(files)
    same(backends, "grep", "--json", "loom")


def _files(backends: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """`loom files --json` of both, the same but for when each file was indexed."""
    runs = {name: json.loads(r.stdout)["files"] for name, r in
            both(backends, "files", "--json").items()}
    for listed in runs.values():
        for f in listed:
            assert f.pop("indexed_at") > 0
    assert runs["sqlite"] == runs["postgresql"]
    return runs["sqlite"]


def _ranked(result: Any) -> list[tuple[str, float]]:
    """(path, score) best first; exact ties in path order (the files' ids, FTS5's order
    among ties, differ between two scans: files are stored as their extraction ends)."""
    hits = result["hits"] if isinstance(result, dict) else result
    return sorted(((h["path"], round(h["score"], 3)) for h in hits),
                  key=lambda ps: (-ps[1], ps[0]))


def test_hybrid_search_is_the_same_on_both_backends(backends, folders) -> None:
    """Passages by BM25 (the PostgreSQL store's own postings) fused with vectors from the
    loopback embeddings server: the same files in the same order."""
    from tests.embed_server import FakeEmbeddings

    with FakeEmbeddings() as server:
        for env in backends.values():
            write(Path(env["LOOM_HOME"]) / "config.toml",
                  '[embeddings]\nenabled = true\nprovider = "ollama"\n'
                  f'endpoint = "{server.url}"\n')
        both(backends, "scan", str(folders[0]), str(folders[4]))
        for query in ("how do I bake bread", "garden plans for spring", "watchdog"):
            hits = {name: json.loads(r.stdout) for name, r in
                    both(backends, "search", "--json", "--mode", "hybrid", query).items()}
            assert _ranked(hits["sqlite"]) == _ranked(hits["postgresql"]), query
            assert _ranked(hits["sqlite"]), query


def test_grep_of_a_common_literal_is_the_same_in_path_order_on_both(backends, tmp_path
                                                                     ) -> None:
    """A literal in most files: PostgreSQL reads them in path order a group at a time
    (32, 128, then 500 files) and stops at the limit; the lines, their order across the
    groups, -l, -c, -m, context lines and a long text's blocks are SQLite's."""
    folder = tmp_path / "many"
    for n in range(230):
        body = f"# Note {n:03}\nthe loom weaves line one\nnothing here\n"
        if n % 7 == 0:
            body += "no common word\n" * 3
        write(folder / f"d{n % 5}" / f"n{n:03}.md", body if n % 11 else "none of it\n")
    write(folder / "long.txt", "".join(f"line {i} {'the loom ' if i % 900 == 0 else ''}"
                                       f"{'x' * 60}\n" for i in range(6000)))
    both(backends, "scan", str(folder))
    for args in (["--json", "loom"], ["-l", "loom"], ["-c", "weaves"], ["-m", "1", "-n", "the"],
                 ["-C", "1", "loom"], ["--json", "-g", "d3/**", "loom"], ["-i", "LOOM"]):
        out = same(backends, "grep", *args)
        assert out.count("n1") > 10 or "-g" in args, args  # many files: several groups
    assert same(backends, "grep", "-q", "loom") == ""
