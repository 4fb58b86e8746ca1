"""Speed of search by meaning: cold CLI searches, and warm searches at 100,000 passages.

    python tests/bench/bench_hybrid_speed.py [--work /tmp/eval]

Needs the index bench_meaning.py --build made (kernel docs + LaTeX manuals, vectors of
the built-in model). Reports, from one run:

- cold `loom search` (a new process each time, hyperfine) in bm25 and hybrid mode, and
  their ratio (goal: hybrid <= 3x bm25);
- warm hybrid and semantic searches in one process (as MCP, HTTP and watch serve them),
  on a copy of the index whose passages are doubled past 100,000 (each file's vectors
  stored twice): median and 95th percentile (goal: <= 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERIES = ["how do I keep the kernel from swapping so much",
           "come limito la memoria di un gruppo di processi",
           "make PDF links clickable", "panic_on_oops", "page margins in LaTeX",
           "network card acting as a router", "IRQF_ONESHOT threaded interrupt"]


def cold(work: Path) -> None:
    env = {**os.environ, "LOOM_CONFIG": str(work / "meaning.toml")}
    out = Path(tempfile.mkdtemp()) / "cold.json"
    cmds = [f"{sys.executable} -m loomcli search --mode {m} '{QUERIES[0]}'"
            for m in ("bm25", "hybrid")]
    subprocess.run(["hyperfine", "-N", "--warmup", "3", "--runs", "20", "--export-json",
                    str(out), *cmds], env=env, check=True, capture_output=True)
    res = json.loads(out.read_text())["results"]
    bm25, hybrid = (r["mean"] for r in res)
    print(f"cold loom search: bm25 {bm25 * 1000:.0f} ms, hybrid {hybrid * 1000:.0f} ms "
          f"= {hybrid / bm25:.2f}x (goal <= 3x)")


def warm(work: Path) -> None:
    from loomcli.operations import Corpus

    src = sqlite3.connect(work / "index.db")
    tmp = Path(tempfile.mkdtemp())
    dst = sqlite3.connect(tmp / "index.db")
    src.backup(dst)
    src.close()
    rows = dst.execute("SELECT file_id, spans, vecs, scales FROM vectors").fetchall()
    dst.executemany("UPDATE vectors SET spans = ?, vecs = ?, scales = ? WHERE file_id = ?",
                    [(sp * 2, vc * 2, sc * 2, fid) for fid, sp, vc, sc in rows])
    dst.commit()
    n = dst.execute("SELECT sum(length(scales)) / 4 FROM vectors").fetchone()[0]
    dst.close()
    (tmp / "meaning.toml").write_text(f'db_path = "{tmp / "index.db"}"\n'
                                      "[embeddings]\nenabled = true\n")
    os.environ["LOOM_CONFIG"] = str(tmp / "meaning.toml")
    corpus = Corpus.default()
    t = time.perf_counter()
    corpus.search("warm up", 10, 0, "hybrid")
    first = time.perf_counter() - t
    print(f"warm searches over {n:,} passages (first call, loading the model and the "
          f"vectors: {first * 1000:.0f} ms)")
    for mode in ("semantic", "hybrid", "bm25"):
        times = []
        for _ in range(5):
            for q in QUERIES:
                t = time.perf_counter()
                corpus.search(q, 10, 0, mode)
                times.append(time.perf_counter() - t)
        times.sort()
        print(f"  {mode:<8} median {statistics.median(times) * 1000:.1f} ms, p95 "
              f"{times[int(len(times) * 0.95)] * 1000:.1f} ms (goal <= 50 ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval"))
    args = ap.parse_args()
    cold(args.work)
    warm(args.work)


if __name__ == "__main__":
    main()
