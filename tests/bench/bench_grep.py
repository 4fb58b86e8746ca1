"""`loom grep` against ripgrep (plain files) and pdfgrep (PDFs): hits and speed.

    python tests/bench/bench_grep.py [--work /tmp/loom-bench] [--runs 5]

Uses the index and corpora that bench_scan.py built. Correctness: the (path, line) hits
of each pattern equal `rg -i -n` over the same files, and every returned offset, given to
`loom get --offset`, starts at a match. Speed: median of --runs cold processes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

PATTERNS = [r"watchdog", r"EXPORT_SYMBOL(_GPL)?\(\w+\)", r"\w+é\w*", r"0x[0-9a-f]{8}\b",
            r"^Author:", r"memory barrier", r"\bkmalloc\(", r"CONFIG_[A-Z_]+=y$",
            r"(?i)schedule\s+timeout", r"[àéèüö]", r"->\w+_ops\b"]
SELECTIVE = r"IRQF_ONESHOT"
PDF_PATTERN = r"\\newcommand"


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def timed(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--loom", default=shutil.which("loom") or "loom")
    args = ap.parse_args()
    kernel, pdfs = args.work / "kernel", args.work / "pdfs"
    env = {**os.environ, "LOOM_HOME": str(args.work / "grep-home")}
    home = Path(env["LOOM_HOME"])
    if not (home / "index.db").exists():
        run([args.loom, "scan", str(kernel)], env)
    failures = 0
    for pat in PATTERNS:
        proc = run([args.loom, "grep", "--limit", "500", "--json", "--", pat], env)
        if proc.returncode not in (0, 1):
            sys.exit(f"loom grep {pat!r} failed: {proc.stderr}")
        got = json.loads(proc.stdout)["matches"]
        rg = subprocess.run(
            ["rg", "-i", "-n", "--no-heading", "--no-ignore", "--hidden", "-g", "*.rst",
             "-g", "*.txt", "--", pat], cwd=kernel, capture_output=True, text=True)
        rg_hits = sorted({(line.split(":", 2)[0].removeprefix("./"), int(line.split(":", 2)[1]))
                          for line in rg.stdout.splitlines()})
        ours = sorted({(m["path"], m["line"]) for m in got})
        cut = len(got) == 500
        same = ours == rg_hits[:len(ours)] if cut else ours == rg_hits
        bad_offsets = 0
        regex = re.compile(pat, re.I)
        for m in got[:40]:
            part = json.loads(run([args.loom, "get", m["path"], "--offset", str(m["offset"]),
                                   "--length", "400", "--json"], env).stdout)["content"]
            line = part.split("\n", 1)[0]
            if not regex.match(line) and not regex.match(part):
                bad_offsets += 1
        ok = same and bad_offsets == 0
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {pat!r:34} loom {len(ours):4} lines, rg "
              f"{len(rg_hits):4}{' (loom cut at 500)' if cut else ''}; offsets checked: "
              f"{min(40, len(got))}, wrong: {bad_offsets}")
    loom_t = timed([args.loom, "grep", SELECTIVE], env, args.runs)
    rg_t = timed(["rg", "-i", "-n", "--no-ignore", "-g", "*.rst", "-g", "*.txt", SELECTIVE,
                  str(kernel)], env, args.runs)
    print(f"cold grep {SELECTIVE!r} on {kernel.name}: loom {loom_t:.3f} s, rg {rg_t:.3f} s, "
          f"ratio {loom_t / rg_t:.2f}x (goal <= 1.5x)")
    penv = {**os.environ, "LOOM_HOME": str(args.work / "grep-pdf-home")}
    if not (Path(penv["LOOM_HOME"]) / "index.db").exists():
        run([args.loom, "scan", str(pdfs)], penv)
    loom_p = timed([args.loom, "grep", PDF_PATTERN, "--limit", "500"], penv, args.runs)
    pdfgrep_t = timed(["pdfgrep", "-n", "-i", "-r", PDF_PATTERN, str(pdfs)], penv,
                      max(1, args.runs // 2))
    print(f"grep {PDF_PATTERN!r} over {len(list(pdfs.glob('*.pdf')))} PDFs: loom "
          f"{loom_p:.3f} s, pdfgrep -n {pdfgrep_t:.2f} s, loom is {pdfgrep_t / loom_p:.0f}x "
          "faster (goal >= 20x)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
