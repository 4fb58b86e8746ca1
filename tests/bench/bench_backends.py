"""SQLite and PostgreSQL in the same run: first scan, no-change rescan, cold search, cold
grep and index size, through real `loom` processes (a cold command is a new process).

    python tests/bench/bench_backends.py FOLDER [FOLDER...] [--runs 3] [--load]

Starts its own PostgreSQL (tests/pg.py: Debian's postgresql-15 or the pgserver wheel's,
fsync off as in the tests). The first scan is timed until grep's index is filled too
(SQLite and PostgreSQL both fill it after the scan, in a process of its own).
With --load, `loom serve` under 50 clients x 40 requests (bench_serve.py's mix of /search
and /grep, keep-alive): one server on the SQLite index, two server processes on one
PostgreSQL database, and two on a primary + hot standby (tests/pg_replica.py; reads from
the standby) — failed requests, p50/p99 latency, requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import pg  # noqa: E402
from tests.bench.bench_serve import load, start  # noqa: E402

LOOM = [sys.executable, "-m", "loomcli"]
ROOT = Path(__file__).resolve().parents[2]
SEARCHES = ("memory barrier", "interrupt handler", "how to configure the scheduler",
            "device tree binding", "unicode strings")
GREPS = ("spin_lock\\(", "(?i)memory barrier", "^Author", "[0-9]{4}-[0-9]{2}-[0-9]{2}")


def run(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([*LOOM, *args], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def wait_for_grep_index(env: dict[str, str]) -> None:
    while True:
        out = subprocess.run([*LOOM, "status", "--json"], env=env, capture_output=True,
                             text=True).stdout
        grams = json.loads(out)["grep_index"] if out else {"pending": 0, "building": False}
        if not grams["pending"] and not grams["building"]:
            return
        time.sleep(0.2)


def serve(env: dict[str, str], count: int) -> tuple[list[subprocess.Popen[str]], list[int]]:
    """`count` servers on the same index, each on a free port (bench_serve.start)."""
    started = [start([*LOOM, "serve", "--port", "0"], env, ROOT) for _ in range(count)]
    return [proc for proc, _ in started], [port for _, port in started]


def under_load(env: dict[str, str], count: int) -> dict[str, float]:
    procs, ports = serve(env, count)
    try:
        return load(ports, keep_alive=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def load_runs(folders: list[str], sqlite_env: dict[str, str], base: Path) -> None:
    from tests import pg_replica

    why = pg_replica.reason()
    results = {"sqlite, 1 server": under_load(sqlite_env, 1)}
    pair = None if why else pg_replica.start_pair()
    try:
        if pair is not None:
            import psycopg

            with psycopg.connect(pair.primary.url(), autocommit=True) as conn:
                conn.execute("CREATE DATABASE loom_load")
            primary = {**os.environ, "LOOM_HOME": str(base / "load-pg"),
                       "LOOM_DATABASE_URL": pair.primary.url("loom_load")}
            primary.pop("LOOM_CONFIG", None)
            run(primary, "scan", *folders)
            wait_for_grep_index(primary)
            pair.wait_replayed()
            results["postgresql, 2 servers"] = under_load(primary, 2)
            config = base / "replica.toml"
            config.write_text(f'[store]\nurl = "{pair.primary.url("loom_load")}"\n'
                              f'read_urls = ["{pair.standby.url("loom_load")}"]\n')
            replica = {**primary, "LOOM_CONFIG": str(config)}
            replica.pop("LOOM_DATABASE_URL")
            results["primary + standby, 2 servers"] = under_load(replica, 2)
        else:
            print(f"no primary + standby: {why}")
    finally:
        if pair is not None:
            pair.stop()
    print("\n50 clients x 40 requests (/search and /grep), keep-alive")
    print(f"{'':30}{'failed':>8}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>8}")
    for name, r in results.items():
        print(f"{name:30}{r['failed']:>8.0f}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}"
              f"{r['rps']:>8.1f}")


def print_sizes(url: str) -> None:
    """What the PostgreSQL index's bytes are: each table with its indexes and TOAST."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND "
            "n.nspname = current_schema() ORDER BY pg_total_relation_size(c.oid) DESC"
        ).fetchall()
    print(f"\n{'PostgreSQL table':16}{'table MB':>10}{'indexes MB':>12}")
    for name, table, indexes in rows:
        if table + indexes >= 1 << 20:
            print(f"{name:16}{table / 1e6:>10.1f}{indexes / 1e6:>12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--load", action="store_true", help="also `loom serve` under load")
    args = parser.parse_args()
    server = pg.start_server()
    base = Path(tempfile.mkdtemp(prefix="loom-bench-"))
    try:
        backends = {"sqlite": {**os.environ, "LOOM_HOME": str(base / "sqlite")},
                    "postgresql": {**os.environ, "LOOM_HOME": str(base / "pg"),
                                   "LOOM_DATABASE_URL": server.create_db()}}
        rows: dict[str, dict[str, float]] = {}
        for name, env in backends.items():
            env.pop("LOOM_CONFIG", None)
            start = time.perf_counter()
            run(env, "scan", *args.folders)
            scanned = time.perf_counter() - start
            wait_for_grep_index(env)
            row = {"first scan s": scanned, "+ grep index s": time.perf_counter() - start,
                   "rescan s": min(run(env, "scan", *args.folders) for _ in range(args.runs))}
            row["cold search ms"] = 1000 * statistics.median(
                run(env, "search", "--mode", "bm25", q) for q in SEARCHES
                for _ in range(args.runs))
            row["cold grep ms"] = 1000 * statistics.median(
                run(env, "grep", "-c", p) for p in GREPS for _ in range(args.runs))
            status = json.loads(subprocess.run([*LOOM, "status", "--json"], env=env,
                                               capture_output=True, text=True).stdout)
            row["files"] = status["files"]
            row["index MB"] = status["index_bytes"] / 1e6
            rows[name] = row
        keys = list(rows["sqlite"])
        print(f"{'':16}" + "".join(f"{k:>16}" for k in keys))
        for name, row in rows.items():
            print(f"{name:16}" + "".join(f"{row[k]:>16.2f}" for k in keys))
        print_sizes(backends["postgresql"]["LOOM_DATABASE_URL"])
        if args.load:
            load_runs(args.folders, backends["sqlite"], base)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
