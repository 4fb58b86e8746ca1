"""The first scan of the kernel docs: this loom against an older one and qmd, interleaved.

    python tests/bench/bench_first_scan.py --old COMMIT [--runs 5]
        [--work /tmp/loom-bench] [--qmd-dir /opt/qmd]

This checkout and the commit --old are each installed into a virtualenv of their own under
WORK, as pip and pipx install them (no `-e`, bytecode compiled: a loom started without its
.pyc files compiles every module first, ~60 ms of a rescan). Each run makes fresh indexes
with the three, in an order that rotates from run to run (the machine's load drifts), and
measures: the first scan (wall time, and CPU time of the process and the children it
waited for; the background builder is not among those), a cold `loom grep PATTERN` right
after it (this loom may still be filling grep's index in the background: the grep competes
with that process, as a user's would), when grep's index is complete (this loom: from the
scan's start until its builder lets go of its lock), the no-change rescan (wall and CPU),
a cold grep with the index complete (median of 5), and index size. Ratios are to qmd in
the same run (median of the runs' ratios); the load average is printed at the start and
the end. Needs the kernel docs and qmd (tests/bench/setup.sh).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scan import (  # noqa: E402  (the kernel docs, unpacked once)
    ROOT,
    install,
    install_commit,
    loom_env,
    prepare_kernel,
    qmd_environment,
)

PATTERN = "IRQF_ONESHOT"


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and the children it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def wait_for_grep_index(db: Path) -> None:
    """Until no process holds the builder's lock (a loom without one: at once)."""
    lock = Path(f"{db}.lock-grams")
    if lock.exists():
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            fcntl.flock(fh, fcntl.LOCK_UN)


def size_mb(db: Path) -> float:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(f.stat().st_size for f in db.parent.glob(db.name + "*")) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--old", required=True, help="the commit to compare with")
    ap.add_argument("--qmd-dir", type=Path, default=Path("/opt/qmd"))
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    kernel = prepare_kernel(work)
    qmd_bin = args.qmd_dir / "node_modules" / ".bin"
    shutil.rmtree(work / "first-new-venv", ignore_errors=True)  # this checkout as it is now
    looms = {"new": str(install(ROOT, work / "first-new-venv")),
             "old": str(install_commit(args.old, work / f"first-old-venv-{args.old}"))}

    def qmd_env(home: Path) -> dict[str, str]:
        return qmd_environment(home, qmd_bin)

    print(f"load at start: {os.getloadavg()}; runs: {args.runs}")
    rows: dict[str, dict[str, list[float]]] = {k: {} for k in ("qmd", "old", "new")}

    def note(tool: str, measure: str, value: float) -> None:
        rows[tool].setdefault(measure, []).append(value)

    order = ["qmd", "old", "new"]
    for i in range(args.runs):
        turn = order[i % 3:] + order[:i % 3]
        for tool in turn:
            home = work / f"first-{tool}-{i}"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            if tool == "qmd":
                env = qmd_env(home)
                wall, cpu = run(["qmd", "collection", "add", str(kernel), "--name", "kernel",
                                 "--mask", "**/*.{rst,txt}"], env, cwd=home)
                note(tool, "scan", wall)
                note(tool, "scan cpu", cpu)
                wall, cpu = run(["qmd", "update"], env, cwd=home)
                note(tool, "rescan", wall)
                note(tool, "rescan cpu", cpu)
                note(tool, "size MB", sum(f.stat().st_size for f in
                                          (home / "cache" / "qmd").glob("index.sqlite*")) / 1e6)
                shutil.rmtree(home, ignore_errors=True)
                continue
            env, db = loom_env(home), home / "index.db"
            start = time.perf_counter()
            wall, cpu = run([looms[tool], "scan", str(kernel)], env)
            note(tool, "scan", wall)
            note(tool, "scan cpu", cpu)
            note(tool, "grep after scan", run([looms[tool], "grep", PATTERN], env)[0])
            wait_for_grep_index(db)
            note(tool, "grep index complete", time.perf_counter() - start)
            wall, cpu = run([looms[tool], "scan", str(kernel)], env)
            note(tool, "rescan", wall)
            note(tool, "rescan cpu", cpu)
            note(tool, "grep, index complete",
                 statistics.median(run([looms[tool], "grep", PATTERN], env)[0]
                                   for _ in range(5)))
            note(tool, "size MB", size_mb(db))
            shutil.rmtree(home, ignore_errors=True)
        print(f"run {i + 1}: " + ", ".join(
            f"{t} scan {rows[t]['scan'][-1]:.2f}s rescan {rows[t]['rescan'][-1]:.3f}s"
            for t in order), flush=True)

    print(f"load at end: {os.getloadavg()}")
    measures = ["scan", "scan cpu", "grep index complete", "rescan", "rescan cpu",
                "grep after scan",
                "grep, index complete", "size MB"]
    print(f"{'measure (median)':<24} {'qmd':>8} {'old':>8} {'new':>8} {'old/qmd':>8} "
          f"{'new/qmd':>8}  per-run new/qmd")
    for m in measures:
        cells = [statistics.median(rows[t][m]) if m in rows[t] else None for t in order]
        ratios = {t: [a / b for a, b in zip(rows[t][m], rows["qmd"][m], strict=True)]
                  for t in ("old", "new")} if m in rows["qmd"] else {}
        shown = [f"{c:8.3f}" if c is not None else f"{'-':>8}" for c in cells]
        rs = [f"{statistics.median(ratios[t]):7.2f}x" if ratios else f"{'-':>8}"
              for t in ("old", "new")]
        per_run = " ".join(f"{r:.2f}" for r in ratios.get("new", []))
        print(f"{m:<24} {' '.join(shown)} {' '.join(rs)}  {per_run}")


if __name__ == "__main__":
    main()
