"""Cold `loom search --mode hybrid` (a new process each time) of two copies of `loomcli`,
before and after a change, interleaved so a change of the machine's load reaches both:

    git archive OLD loomcli | tar -x -C /tmp/old; git archive NEW loomcli | tar -x -C /tmp/new
    LOOM_HOME=INDEX python tests/bench/bench_cold_hybrid.py /tmp/old /tmp/new [--rounds 8]

Prints the median wall-clock and CPU (user + system) time of each and their ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

QUERIES = ["jump back to the branch I was on before",
           "how do I make the kernel reboot after a panic",
           "come smetto di tracciare un file in git"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    wall: dict[str, list[float]] = {"old": [], "new": []}
    cpu: dict[str, list[float]] = {"old": [], "new": []}
    for n in range(args.rounds):
        for which in ("old", "new") if n % 2 == 0 else ("new", "old"):
            env = dict(os.environ, PYTHONPATH=getattr(args, which))
            for q in QUERIES:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "loomcli", "search", q, "--mode",
                                "hybrid", "--json"], env=env, cwd="/", check=True,
                               capture_output=True)
                wall[which].append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[which].append(after.ru_utime - before.ru_utime
                                  + after.ru_stime - before.ru_stime)
    for which in ("old", "new"):
        print(f"{which}: wall {statistics.median(wall[which]):.3f} s, "
              f"CPU {statistics.median(cpu[which]):.3f} s ({len(wall[which])} runs)")
    print(f"new/old: wall {statistics.median(wall['new']) / statistics.median(wall['old']):.3f}"
          f"x, CPU {statistics.median(cpu['new']) / statistics.median(cpu['old']):.3f}x; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
