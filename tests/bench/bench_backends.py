"""SQLite and PostgreSQL in the same run: first scan, no-change rescan, cold search, cold
grep and index size, through real `loom` processes (a cold command is a new process).

    python tests/bench/bench_backends.py FOLDER [FOLDER...] [--runs 3]

Starts its own PostgreSQL (tests/pg.py: Debian's postgresql-15 or the pgserver wheel's,
fsync off as in the tests). The first scan is timed until grep's index is filled too
(SQLite and PostgreSQL both fill it after the scan, in a process of its own).
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

LOOM = [sys.executable, "-m", "loomcli"]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--runs", type=int, default=3)
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
    finally:
        server.stop()


if __name__ == "__main__":
    main()
