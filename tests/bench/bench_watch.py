"""`loom watch`: latency from a write to a searchable hit, and a 1,000-file burst.

    python tests/bench/bench_watch.py [--work /tmp/loom-bench] [--writes 10]

Latency: a note with a unique word is written while `loom watch` runs; the clock stops
when the word is in the index (polled in SQLite every 5 ms). Burst: 1,000 notes are
written at once; the clock stops when all 1,000 are indexed, and is compared with one
`loom scan` of the same 1,000 new files into a fresh index.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import time
from pathlib import Path


def wait_until(db: Path, sql: str, args: tuple, want: int, limit: float = 60) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                if conn.execute(sql, args).fetchone()[0] >= want:
                    return time.perf_counter()
        except sqlite3.OperationalError:
            pass
        time.sleep(0.005)
    raise SystemExit(f"timed out waiting for {sql} {args}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--writes", type=int, default=10)
    ap.add_argument("--loom", default=shutil.which("loom") or "loom")
    args = ap.parse_args()
    base = args.work / "watch"
    shutil.rmtree(base, ignore_errors=True)
    notes = base / "notes"
    notes.mkdir(parents=True)
    (notes / "seed.md").write_text("# Seed\n")
    env = {**os.environ, "LOOM_HOME": str(base / "home")}
    db = base / "home" / "index.db"
    proc = subprocess.Popen([args.loom, "watch", str(notes), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # the initial scan
    time.sleep(2.5)  # past the watcher's first wake-up
    latencies = []
    for i in range(args.writes):
        word = f"zqxlatency{i}"
        start = time.perf_counter()
        (notes / f"l{i}.md").write_text(f"# L{i}\n{word}\n")
        done = wait_until(db, "SELECT count(*) FROM docs WHERE instr(body, ?)", (word,), 1)
        latencies.append(done - start)
        time.sleep(0.3)
    burst = notes / "burst"
    burst.mkdir()
    time.sleep(1)
    start = time.perf_counter()
    for i in range(1000):
        (burst / f"b{i:04}.md").write_text(f"# Burst {i}\nburst note {i} about looms\n")
    last_write = time.perf_counter()
    done = wait_until(db, "SELECT count(*) FROM files WHERE relpath LIKE 'burst/%'", (), 1000)
    burst_s, after_last = done - start, done - last_write
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    scan_env = {**os.environ, "LOOM_HOME": str(base / "scan-home")}
    start = time.perf_counter()
    subprocess.run([args.loom, "scan", str(burst)], env=scan_env, check=True,
                   stdout=subprocess.DEVNULL)
    scan_s = time.perf_counter() - start
    print(f"write -> searchable: median {statistics.median(latencies) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} writes "
          f"(debounce: batch closes after 200 ms of quiet)")
    print(f"burst of 1,000 notes: all indexed {burst_s:.2f} s after the first write, "
          f"{after_last:.2f} s after the last (200 ms of that is the quiet the batch waits "
          f"for); one `loom scan` of the same files: {scan_s:.2f} s; SIGINT exit code {code}")


if __name__ == "__main__":
    main()
