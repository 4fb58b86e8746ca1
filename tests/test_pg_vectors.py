"""Vectors on PostgreSQL: ranked by pgvector (HNSW) where the server has it, else stored
as bytes and ranked in loom — the same files, in the same order, with the same scores (to
float rounding) as the SQLite index, on the same folders and the same loopback
embeddings server. Real servers: Debian's PostgreSQL (no pgvector: bytes) and the
pgserver wheel's (pgvector)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, write
from tests.embed_server import FakeEmbeddings
from tests.test_backends import loom
from tests.test_http import Server

QUERIES = ("how do I bake bread", "garden plans for spring", "watchdog",
           "a loom for weaving cloth", "meeting at the café", "notes about linking pages")
SCORE_ROUNDING = 2e-4  # loom ranks int8 rows against an int32 query (semantic.py)


def has_pgvector(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
                            ).fetchone() is not None


@pytest.fixture
def folders(tmp_path: Path) -> list[Path]:
    out = []
    for name in ("notes", "vault"):
        shutil.copytree(FIXTURES / name, tmp_path / "data" / name)
        out.append(tmp_path / "data" / name)
    return out


def configure(home: Path, endpoint: str) -> None:
    write(home / "config.toml", '[embeddings]\nenabled = true\nprovider = "ollama"\n'
          f'endpoint = "{endpoint}"\n')


def ranked(out: str | dict) -> list[tuple[str, float, str]]:
    hits = (json.loads(out) if isinstance(out, str) else out)["hits"]
    return [(h["path"], h["score"], h["match"]) for h in hits]


def served(server: Server, mode: str, query: str, path: str | None = None
           ) -> list[tuple[str, float, str]]:
    """A search of `loom serve`'s, as `loom search --json --mode MODE [--path PATH]`."""
    body = {"query": query, "mode": mode, "excerpt_chars": 0}
    if path is not None:
        body["path"] = path
    status, found = server.call("POST", "/search", body)
    assert status == 200, (mode, query, found)
    return ranked(found)


def assert_same(expected: list[tuple[str, float, str]], got: list[tuple[str, float, str]],
                what: str) -> None:
    """The same files in the same order with the same scores, to rounding; two files whose
    scores tie (to rounding) may come in either order."""
    assert len(expected) == len(got), what
    for (path, score, match), (path2, score2, match2) in zip(expected, got, strict=True):
        assert abs(score - score2) <= SCORE_ROUNDING, (what, path, score, path2, score2)
        assert match == match2, what
        if path != path2:
            tied = [p for p, s, _ in expected if abs(s - score) <= SCORE_ROUNDING]
            assert path2 in tied, (what, expected, got)
    assert sorted(p for p, _, _ in expected) == sorted(p for p, _, _ in got), what


def test_semantic_and_hybrid_rank_the_same_on_sqlite_pg_bytes_and_pgvector(
        tmp_path, folders, pg_url, pgvector_url) -> None:
    backends = {"sqlite": {"LOOM_HOME": str(tmp_path / "home-sqlite")},
                "pgvector": {"LOOM_HOME": str(tmp_path / "home-pgvector"),
                             "LOOM_DATABASE_URL": pgvector_url}}
    if has_pgvector(pg_url):
        print("the session's PostgreSQL has pgvector: the bytes case is "
              "test_a_server_without_pgvector_keeps_bytes_ranked_in_loom's")
    else:
        backends["pg-bytes"] = {"LOOM_HOME": str(tmp_path / "home-pg"),
                                "LOOM_DATABASE_URL": pg_url}
    with FakeEmbeddings() as server:
        for env in backends.values():
            configure(Path(env["LOOM_HOME"]), server.url)
            loom(env, "scan", *map(str, folders))
        engines = {name: json.loads(loom(env, "status", "--json").stdout)["vectors"]
                   for name, env in backends.items()}
        assert engines["sqlite"]["ranked_by"] == "loom"
        assert engines["pgvector"]["ranked_by"] == "pgvector"
        assert "pg-bytes" not in engines or engines["pg-bytes"]["ranked_by"] == "loom"
        assert len({v["files"] for v in engines.values()}) == 1 and engines["sqlite"]["files"]
        assert "ranked by pgvector" in loom(backends["pgvector"], "status").stdout
        # The queries go to one `loom serve` per backend (a process per query was 72 loom
        # start-ups, most of this file's time); the first query of each mode also goes
        # through `loom search`, which must answer as its server does.
        servers = {name: Server("--processes", "1", env=env) for name, env in backends.items()}
        try:
            compared = narrowed = 0
            for mode in ("semantic", "hybrid"):
                for query in QUERIES:
                    runs = {name: served(server, mode, query)
                            for name, server in servers.items()}
                    for name in backends:
                        assert_same(runs["sqlite"], runs[name], f"{name} {mode} {query!r}")
                    compared += len(runs["sqlite"])
                    # Limited to some files (--path): pgvector scans theirs exactly. (It
                    # was `--path notes`, no indexed path — loom said so and exited 2 —
                    # so every backend agreed on no hits.)
                    narrow = {name: served(server, mode, query, "vault")
                              for name, server in servers.items()}
                    for name in backends:
                        assert_same(narrow["sqlite"], narrow[name], f"{name} --path {query!r}")
                    narrowed += len(narrow["sqlite"])
                    if query == QUERIES[0]:
                        for name, env in backends.items():
                            for got, more in ((runs, ()), (narrow, ("--path", "vault"))):
                                proc = loom(env, "search", "--json", "--mode", mode,
                                            *more, query, check=None)
                                assert proc.returncode in (0, 1), proc.stderr  # 1: no hit
                                cli = ranked(proc.stdout)
                                assert cli == got[name], (name, mode, more)
        finally:
            for server in servers.values():
                server.stop()
        assert compared > 30  # queries found files by meaning, not nothing
        assert narrowed > 10  # and some in the folder too


def test_pgvector_answers_through_its_hnsw_index(tmp_path, folders, pgvector_url) -> None:
    """The closest passages come from the HNSW index (the plan says so), with the
    similarity loom computes from the stored bytes."""
    import numpy as np
    import psycopg

    from loomcli.search import semantic
    from loomcli.store import open_store
    from loomcli.store import postgres_vectors as pv

    env = {"LOOM_HOME": str(tmp_path / "home"), "LOOM_DATABASE_URL": pgvector_url}
    with FakeEmbeddings() as server:
        configure(Path(env["LOOM_HOME"]), server.url)
        loom(env, "scan", *map(str, folders))
        query = np.asarray(server.embed(["bread and flour"])[0][::-1], dtype=np.float32)
    query /= np.linalg.norm(query)
    with open_store(pgvector_url) as store:
        model = next(iter(store.vector_counts()))
        dim = len(query)
        by_server = store.nearest(model, dim, query, 5)
        assert by_server is not None and len(by_server) == 5
        in_loom = semantic.VectorIndex(store, model, dim).top(query, 5)
    assert [(p.file_id, p.number) for p in in_loom] == [(f, n) for f, n, *_ in by_server]
    for p, (_, _, start, end, score) in zip(in_loom, by_server, strict=True):
        assert (p.start, p.end) == (start, end)
        assert abs(p.score - score) <= SCORE_ROUNDING
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f"SET hnsw.ef_search = {pv.EF_SEARCH}")
        conn.execute("SET enable_seqscan = off")  # a few rows: the planner would scan
        q = pv.literal(query.tolist())
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT file_id FROM passages WHERE dim = {dim} AND model = %s "
            f"ORDER BY (embedding::vector({dim})) <#> %s::vector({dim}) LIMIT 5",
            (model, q)))
    assert f"passages_hnsw_{dim}" in plan, plan


def test_a_server_without_pgvector_keeps_bytes_ranked_in_loom(tmp_path, folders,
                                                               pg_url) -> None:
    if has_pgvector(pg_url):
        pytest.skip("the session's PostgreSQL has pgvector (Debian's postgresql-15 "
                    "without postgresql-15-pgvector is the server without it)")
    import psycopg

    env = {"LOOM_HOME": str(tmp_path / "home"), "LOOM_DATABASE_URL": pg_url}
    with FakeEmbeddings() as server:
        configure(Path(env["LOOM_HOME"]), server.url)
        loom(env, "scan", *map(str, folders))
        assert json.loads(loom(env, "status", "--json").stdout)["vectors"]["ranked_by"] == \
            "loom"
        assert ranked(loom(env, "search", "--json", "--mode", "semantic", "bread").stdout)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
        assert "004_pgvector" in names  # applied (it found no pgvector): never again
        assert conn.execute("SELECT to_regclass('passages')").fetchone()[0] is None


def test_migrate_carries_vectors_into_pgvector_and_back(tmp_path, folders,
                                                       pgvector_url) -> None:
    """`loom migrate --to URL` fills pgvector's passages from the copied vectors; `--to
    PATH` back gives them to SQLite again; search by meaning answers the same throughout."""
    env = {"LOOM_HOME": str(tmp_path / "home")}
    with FakeEmbeddings() as server:
        configure(Path(env["LOOM_HOME"]), server.url)
        loom(env, "scan", *map(str, folders))
        before = ranked(loom(env, "search", "--json", "--mode", "semantic", "bread").stdout)
        moved = json.loads(loom(env, "migrate", "--to", pgvector_url, "--json").stdout)
        assert moved["vectors"] > 5
        on_pg = {**env, "LOOM_DATABASE_URL": pgvector_url}
        assert json.loads(loom(on_pg, "status", "--json").stdout)["vectors"] == {
            **json.loads(loom(env, "status", "--json").stdout)["vectors"],
            "ranked_by": "pgvector"}
        assert_same(before, ranked(loom(on_pg, "search", "--json", "--mode", "semantic",
                                        "bread").stdout), "pgvector after migrate")
        back = tmp_path / "back.db"
        assert json.loads(loom(on_pg, "migrate", "--to", str(back), "--json").stdout
                          )["vectors"] == moved["vectors"]
        again = {"LOOM_HOME": str(tmp_path / "home2")}
        write(Path(again["LOOM_HOME"]) / "config.toml",
              f'db_path = "{back}"\n[embeddings]\nenabled = true\nprovider = "ollama"\n'
              f'endpoint = "{server.url}"\n')
        assert_same(before, ranked(loom(again, "search", "--json", "--mode", "semantic",
                                        "bread").stdout), "SQLite after migrating back")


def test_an_index_made_before_pgvector_gets_its_passages_once(tmp_path, pgvector_url
                                                            ) -> None:
    """An index whose vectors were stored as bytes by a loom without migration 003: the
    next open applies it once, turning every stored vector into a passage row, and the
    server then ranks as loom did."""
    import numpy as np
    import psycopg

    from loomcli.embeddings import quantize
    from loomcli.extract import Extracted
    from loomcli.search import semantic
    from loomcli.store import open_store
    from loomcli.store import postgres as pgstore

    rng = np.random.default_rng(7)
    rows = rng.normal(size=(12, 48)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1)[:, None]
    older = [m for m in pgstore.MIGRATIONS if m[0] < "004_pgvector"]
    saved = pgstore.MIGRATIONS[:]
    pgstore.MIGRATIONS[:] = older  # the loom of before: no 004
    try:
        with open_store(pgvector_url, create=True) as store, store.transaction():
            root = store.ensure_root(tmp_path)
            for i in range(3):
                text = "\n".join(f"passage {i}.{n} " * 4 for n in range(4))
                fid = store.add_file(root.id, f"f{i}.md", "note", 1, 1, bytes([i]),
                                     Extracted(text=text, title=f"f{i}"))
                spans = np.array([[n * 10, n * 10 + 9] for n in range(4)], dtype=np.int32)
                q, scales = quantize(rows[i * 4:(i + 1) * 4])
                store.put_vectors(fid, "m", 48, spans.tobytes(), q, scales)
            assert store.vector_engine() == "loom"
    finally:
        pgstore.MIGRATIONS[:] = saved
    for _ in range(2):  # opened twice: migrated once
        with open_store(pgvector_url) as store:
            assert store.vector_engine() == "pgvector"
            found = store.nearest("m", 48, rows[5], 12)
            assert found is not None and len(found) == 12
            expected = semantic.VectorIndex(store, "m", 48).top(rows[5], 12)
            assert [(p.file_id, p.number) for p in expected] == [r[:2] for r in found]
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM migrations WHERE name = '004_pgvector'"
                            ).fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM passages").fetchone()[0] == 12
        assert conn.execute("SELECT to_regclass('passages_hnsw_48')").fetchone()[0]


def test_a_short_pool_from_pgvectors_cap_is_ranked_again_exactly(tmp_path, pgvector_url,
                                                                  monkeypatch) -> None:
    """pgvector before 0.8 (the wheel's is 0.6) returns at most hnsw.ef_search passages
    (EF_SEARCH, lowered here to 12 so that a few files' passages fill it): when they hold
    fewer files than asked, and more files have vectors, the files come from an exact scan
    of every passage — loom's own ranking of the bytes — not from the short pool."""
    import numpy as np

    from loomcli.embeddings import quantize
    from loomcli.extract import Extracted
    from loomcli.search import semantic
    from loomcli.store import open_store
    from loomcli.store import postgres_vectors as pv

    monkeypatch.setattr(pv, "EF_SEARCH", 12)
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(30, 48)).astype(np.float32)
    with open_store(pgvector_url, create=True) as store:
        with store.transaction():
            root = store.ensure_root(tmp_path)
            for i, center in enumerate(centers):  # 8 passages a file, close to its center
                text = "\n".join(f"passage {i}.{n} " * 4 for n in range(8))
                fid = store.add_file(root.id, f"f{i:02}.md", "note", 1, 1, bytes([i]),
                                     Extracted(text=text, title=f"f{i}"))
                rows = center + 0.05 * rng.normal(size=(8, 48)).astype(np.float32)
                rows /= np.linalg.norm(rows, axis=1)[:, None]
                spans = np.array([[n * 10, n * 10 + 9] for n in range(8)], dtype=np.int32)
                q, scales = quantize(rows)
                store.put_vectors(fid, "m", 48, spans.tobytes(), q, scales)
        store.optimize()  # the HNSW index, built at once as a scan's end builds it
    query = centers[3] / np.linalg.norm(centers[3])
    with open_store(pgvector_url) as store:
        assert store.vector_engine() == "pgvector"
        short = store.nearest("m", 48, query, semantic.POOL)
        assert short is not None and len(short) <= 12  # the cap, on a real server
        assert len({f for f, *_ in short}) < 10  # a few files' passages fill it
        server = semantic.ServerVectors(store, "m", 48, store.passage_counts("m", 48))
        got = server.rank(query, 10)
        expected = semantic.VectorIndex(store, "m", 48).rank(query, 10)
    assert [p.file_id for p in got] == [p.file_id for p in expected] and len(got) == 10
    for p, e in zip(got, expected, strict=True):
        assert abs(p.score - e.score) <= SCORE_ROUNDING
