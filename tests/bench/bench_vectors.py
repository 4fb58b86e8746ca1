"""Search by meaning on three stores in the same run: SQLite (vectors ranked in loom),
PostgreSQL without pgvector (bytes, ranked in loom) and PostgreSQL with pgvector (HNSW,
ranked by the server) — the same index, moved with `loom migrate`.

    python tests/bench/bench_vectors.py [--notes 3000] [--runs 5]
    python tests/bench/bench_vectors.py --ranking-alone 5000 [--runs 20]

Makes NOTES notes of one passage each, embeds them once (tests/embed_server.py: the
built-in model's vectors behind an Ollama-shaped server) into an SQLite index, migrates
that index into both PostgreSQL databases (Debian's postgresql-15, the pgserver wheel's
with pgvector), then times, interleaved: a cold `loom search --mode semantic` (a new
process: it loads the vectors, or asks the server) and a warm search in one process
(a server's case: the matrix kept, or the server asked again). Prints medians in ms.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import pg  # noqa: E402
from tests.embed_server import FakeEmbeddings  # noqa: E402

LOOM = [sys.executable, "-m", "loomcli"]
WORDS = ("loom", "warp", "weft", "shuttle", "heddle", "reed", "beam", "tension", "yarn",
         "wool", "linen", "cotton", "dye", "indigo", "madder", "kiln", "glaze", "clay",
         "wheel", "bread", "flour", "yeast", "oven", "garden", "seed", "spring", "rain",
         "river", "bridge", "engine", "valve", "pump", "sensor", "timer", "watchdog",
         "firmware", "battery", "solar", "market", "invoice", "ledger", "tax", "travel",
         "train", "ticket", "museum", "painting", "violin", "piano", "choir", "poem",
         "novel", "chapter")
QUERIES = ("weaving cloth on a loom", "baking bread at home", "the firmware watchdog timer",
           "paying taxes on an invoice", "a trip by train to the museum")


def make_notes(folder: Path, count: int) -> None:
    rng = random.Random(34)
    for i in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
        (folder / f"n{i // 500:02}").mkdir(parents=True, exist_ok=True)
        (folder / f"n{i // 500:02}" / f"note{i:05}.md").write_text(
            f"# Note {i}\n{words}\n", encoding="utf-8")


def cold(env: dict[str, str], query: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([*LOOM, "search", "--mode", "semantic", "--json", query], env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    return elapsed


def warm(env: dict[str, str], runs: int) -> float:
    """Median ms of a semantic search in one process that keeps its index open."""
    code = (
        "import sys, time, statistics\n"
        "from loomcli.operations import Corpus\n"
        "from loomcli import config\n"
        "c = Corpus(config.load(None), keep_open=True)\n"
        f"qs = {QUERIES!r}\n"
        "c.search(qs[0], mode='semantic')\n"
        "t = []\n"
        f"for _ in range({runs}):\n"
        "    for q in qs:\n"
        "        s = time.perf_counter(); c.search(q, mode='semantic')\n"
        "        t.append(time.perf_counter() - s)\n"
        "print(statistics.median(t) * 1000)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.strip())


def ranking_alone(stores: dict[str, str], passages: int, runs: int) -> None:
    """The vectors' part of a search alone, in one process: `passages` random unit
    vectors of 512 numbers (10 per file) put into each store through the store's own
    API, then per store: the first ranking (a new process: loads the matrix, or asks the
    server) and the next ones (kept), each the 2,000 closest passages (hybrid's pool) and
    the 10 closest files (semantic)."""
    import numpy as np

    from loomcli.embeddings import quantize
    from loomcli.extract import Extracted
    from loomcli.search import semantic
    from loomcli.store import open_store

    rng = np.random.default_rng(34)
    rows = rng.normal(size=(passages, 512)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1)[:, None]
    queries = rng.normal(size=(runs, 512)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1)[:, None]
    per = 10
    for name, location in stores.items():
        start = time.perf_counter()
        with open_store(location, create=True) as store, store.transaction():
            root = store.ensure_root(Path("/bench") / name)
            for f in range(passages // per):
                text = "\n".join(f"passage {f}.{n} " * 8 for n in range(per))
                fid = store.add_file(root.id, f"f{f:05}.md", "note", 1, 1, f.to_bytes(4, "big"),
                                     Extracted(text=text, title=f"f{f}"))
                spans = np.array([[n * 100, n * 100 + 99] for n in range(per)], dtype=np.int32)
                q, scales = quantize(rows[f * per:(f + 1) * per])
                store.put_vectors(fid, "bench", 512, spans.tobytes(), q, scales)
            store.optimize()  # what the end of a scan does: pgvector's HNSW index, at once
        print(f"{name:9} put {passages} passages: {time.perf_counter() - start:.1f} s")
    for name, location in stores.items():
        with open_store(location) as store:
            start = time.perf_counter()
            index = semantic.vector_index(store, "bench", 512)
            index.top(queries[0], 2000)
            first = time.perf_counter() - start
            pool, files = [], []
            for q in queries:
                start = time.perf_counter()
                semantic.vector_index(store, "bench", 512).top(q, 2000)
                pool.append(time.perf_counter() - start)
                start = time.perf_counter()
                semantic.vector_index(store, "bench", 512).rank(q, 10)
                files.append(time.perf_counter() - start)
        print(f"{name:9} ({store.vector_engine()}): first ranking {first * 1000:.0f} ms; then "
              f"2,000 closest passages {statistics.median(pool) * 1000:.1f} ms, 10 closest "
              f"files {statistics.median(files) * 1000:.1f} ms (medians of {runs})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--notes", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ranking-alone", type=int, default=0, metavar="PASSAGES",
                    help="only time the vectors' ranking on this many random passages")
    args = ap.parse_args()
    if args.ranking_alone:
        debian = pg.DEBIAN_BIN if (pg.DEBIAN_BIN / "initdb").exists() else None
        work = Path(tempfile.mkdtemp(prefix="loom-bench-vectors-"))
        servers = [pg.start_server(debian), pg.start_server(pg.vector_bin())]
        try:
            ranking_alone({"sqlite": str(work / "index.db"),
                           "pg-bytes": servers[0].create_db(),
                           "pgvector": servers[1].create_db()},
                          args.ranking_alone, args.runs)
        finally:
            for srv in servers:
                srv.stop()
        return
    debian = pg.DEBIAN_BIN if (pg.DEBIAN_BIN / "initdb").exists() else None
    if debian is None or pg.vector_bin() is None:
        sys.exit("needs Debian's postgresql-15 and a PostgreSQL with pgvector (pgserver)")
    work = Path(tempfile.mkdtemp(prefix="loom-bench-vectors-"))
    plain, vector = pg.start_server(debian), pg.start_server(pg.vector_bin())
    try:
        notes = work / "notes"
        make_notes(notes, args.notes)
        with FakeEmbeddings() as server:
            home = work / "home"
            home.mkdir()
            (home / "config.toml").write_text(
                '[embeddings]\nenabled = true\nprovider = "ollama"\n'
                f'endpoint = "{server.url}"\n', encoding="utf-8")
            lite = {**os.environ, "LOOM_HOME": str(home)}
            start = time.perf_counter()
            subprocess.run([*LOOM, "scan", str(notes)], env=lite, check=True,
                           capture_output=True)
            print(f"scan + embed {args.notes} notes (SQLite): "
                  f"{time.perf_counter() - start:.1f} s")
            stores = {"sqlite": lite}
            for name, srv in (("pg-bytes", plain), ("pgvector", vector)):
                url = srv.create_db()
                start = time.perf_counter()
                subprocess.run([*LOOM, "migrate", "--to", url], env=lite, check=True,
                               capture_output=True)
                print(f"migrate into {name}: {time.perf_counter() - start:.1f} s")
                stores[name] = {**lite, "LOOM_DATABASE_URL": url}
            for name, env in stores.items():
                status = subprocess.run([*LOOM, "status", "--json"], env=env,
                                        capture_output=True, text=True).stdout
                print(name, "ranked_by:", '"pgvector"' in status and "pgvector" or "loom")
            times: dict[str, list[float]] = {name: [] for name in stores}
            for _ in range(args.runs):
                for query in QUERIES:
                    for name, env in stores.items():  # interleaved: the same load for each
                        times[name].append(cold(env, query))
            for name in stores:
                print(f"{name:9} cold semantic search: median "
                      f"{statistics.median(times[name]) * 1000:.0f} ms "
                      f"(n={len(times[name])})")
            for name, env in stores.items():
                print(f"{name:9} warm semantic search (kept open): median "
                      f"{warm(env, args.runs):.1f} ms")
            import psycopg

            with psycopg.connect(stores["pgvector"]["LOOM_DATABASE_URL"]) as conn:
                sizes = conn.execute(
                    "SELECT pg_total_relation_size('vectors'), pg_table_size('passages'), "
                    "pg_indexes_size('passages'), (SELECT count(*) FROM passages)"
                ).fetchone()
            mb = [f"{n / 1e6:.1f} MB" for n in sizes[:3]]
            print(f"pgvector sizes: vectors (bytes) {mb[0]}, passages {mb[1]}, their indexes "
                  f"(HNSW, primary key) {mb[2]}, for {sizes[3]} passages")
    finally:
        plain.stop()
        vector.stop()


if __name__ == "__main__":
    main()
