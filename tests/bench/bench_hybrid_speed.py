"""Speed of search by meaning: cold CLI searches, and warm searches at 100,000 passages.

    python tests/bench/bench_hybrid_speed.py [--work /tmp/eval] [--minilm /tmp/i25mini]
        [--times 4]

Needs an index with the built-in model's vectors (bench_meaning.py --build or
bench_retrieval.py --build make one). Reports, from one run:

- cold `loom search` (a new process each time, hyperfine) in bm25 and hybrid mode, and
  their ratio (goal: hybrid <= 3x bm25): rounds of hyperfine runs, the commands
  interleaved (their order reversed every round) so that a change in the machine's load
  falls on all of them; medians of wall time, and CPU time (user + system), which a
  busy machine disturbs less. `--times N` also measures on a copy of the index whose
  vectors are stored N times (each file's passages repeated): the cost of an index N
  times the size. `--minilm` adds hybrid search with the MiniLM model (that index);
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


def passages(work: Path) -> int:
    with sqlite3.connect(work / "index.db") as conn:
        return int(conn.execute("SELECT sum(length(scales)) / 4 FROM vectors").fetchone()[0])


def cold(configs: dict[str, tuple[Path, str, dict[str, str]]], rounds: int = 6,
         runs: int = 3) -> None:
    """configs: name -> (folder holding meaning.toml, search mode, more environment)."""
    out = Path(tempfile.mkdtemp()) / "cold.json"
    wall: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(rounds):
        for name in (list(configs) if r % 2 == 0 else list(reversed(configs))):
            work, mode, more = configs[name]
            env = {**os.environ, "LOOM_CONFIG": str(work / "meaning.toml"), **more}
            flags = "-S " if "PYTHONPATH" in more else ""  # -S: not the editable install
            cmd = f"{sys.executable} {flags}-m loomcli search --mode {mode} '{QUERIES[0]}'"
            subprocess.run(["hyperfine", "-N", "--warmup", "1", "--runs", str(runs),
                            "--export-json", str(out), cmd], env=env, check=True,
                           capture_output=True, cwd=out.parent)  # not this checkout: -m
            res = json.loads(out.read_text())["results"][0]
            wall[name] += res["times"]
            cpu[name].append(res["user"] + res["system"])
    for name in configs:
        base = "bm25, before" if name.endswith(", before") else "bm25"
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:<26} wall median {w * 1000:6.0f} ms ({len(wall[name])} runs)  "
              f"CPU {c * 1000:5.0f} ms   ratio to its bm25: wall "
              f"{w / statistics.median(wall[base]):.2f}x, CPU "
              f"{c / statistics.median(cpu[base]):.2f}x (goal <= 3x)")


def repeated(work: Path, times: int) -> Path:
    """A copy of WORK's index whose vectors are stored `times` times over."""
    src = sqlite3.connect(work / "index.db")
    tmp = Path(tempfile.mkdtemp())
    dst = sqlite3.connect(tmp / "index.db")
    src.backup(dst)
    src.close()
    rows = dst.execute("SELECT file_id, spans, vecs, scales FROM vectors").fetchall()
    dst.executemany("UPDATE vectors SET spans = ?, vecs = ?, scales = ? WHERE file_id = ?",
                    [(sp * times, vc * times, sc * times, fid) for fid, sp, vc, sc in rows])
    dst.commit()
    dst.close()
    (tmp / "meaning.toml").write_text((work / "meaning.toml").read_text().replace(
        str(work / "index.db"), str(tmp / "index.db")))
    return tmp


def warm(work: Path) -> None:
    from loomcli.operations import Corpus

    tmp = repeated(work, 2)
    db = sqlite3.connect(tmp / "index.db")
    n = db.execute("SELECT sum(length(scales)) / 4 FROM vectors").fetchone()[0]
    db.close()
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
    ap.add_argument("--minilm", type=Path, help="an index with MiniLM's vectors")
    ap.add_argument("--times", type=int, help="also on the vectors stored N times over")
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--before", type=Path, help="a copy of an earlier loomcli's parent "
                    "folder: its bm25 and hybrid searches are timed in the same rounds")
    args = ap.parse_args()
    sizes = [(args.work, args.minilm)]
    if args.times:
        sizes.append((repeated(args.work, args.times),
                      repeated(args.minilm, args.times) if args.minilm else None))
    for work, mini in sizes:
        now: dict[str, str] = {}
        if args.before:  # both without site (-S), each loomcli by PYTHONPATH: the same start
            import sysconfig

            lib = sysconfig.get_path("purelib")
            now = {"PYTHONPATH": f"{Path(__file__).resolve().parents[2]}{os.pathsep}{lib}"}
            old = {"PYTHONPATH": f"{args.before}{os.pathsep}{lib}"}
        configs = {"bm25": (work, "bm25", now), "hybrid": (work, "hybrid", now)}
        if args.before:
            configs["bm25, before"] = (work, "bm25", old)
            configs["hybrid, before"] = (work, "hybrid", old)
        line = f"cold loom search, {passages(work):,} passages (USE)"
        if mini:
            configs["hybrid, MiniLM"] = (mini, "hybrid", now)
            line += f", {passages(mini):,} (MiniLM)"
        print(line + ":")
        cold(configs, args.rounds)
    if not args.no_warm:
        warm(args.work)


if __name__ == "__main__":
    main()
