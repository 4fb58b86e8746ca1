"""Start-up of `loom --version`, `loom search` and `loom grep` at two commits, in one run.

    python tests/bench/bench_startup_edges.py [--old f5fc4ae] [--new HEAD] [--runs 10]

Exports each commit's `loomcli` (git archive) into a temporary folder, compiles its
bytecode (as pip does), indexes fixtures/notes once with each, then runs each command
--runs times per commit, the two commits interleaved and their order alternating, as new
processes of this interpreter (PYTHONPATH pointing at the export; PYTHONDONTWRITEBYTECODE
unset). Prints the median wall-clock and CPU (user + system) milliseconds of each and the
load average: on a loaded machine the CPU time moves less than the wall-clock time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {"--version": ["--version"], "search": ["search", "warp tension"],
            "grep": ["grep", "E-4471"]}


def export(commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "loomcli"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "loomcli")],
                   check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", default="f5fc4ae")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    env0 = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = {"old": export(args.old, work / "old"), "new": export(args.new, work / "new")}
        envs = {}
        for name, tree in trees.items():
            envs[name] = {**env0, "PYTHONPATH": str(tree), "LOOM_HOME": str(work / f"home-{name}")}
            notes = str(ROOT / "fixtures" / "notes")
            subprocess.run([sys.executable, "-m", "loomcli", "scan", notes],
                           env=envs[name], cwd=work, check=True, capture_output=True)
        wall: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for i in range(args.runs):
            for command, words in COMMANDS.items():
                for name in (("old", "new") if i % 2 == 0 else ("new", "old")):
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    start = time.perf_counter()
                    done = subprocess.run([sys.executable, "-m", "loomcli", *words],
                                          env=envs[name], cwd=work, capture_output=True)
                    took = time.perf_counter() - start
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    assert done.returncode == 0, done.stderr
                    wall.setdefault((command, name), []).append(took * 1000)
                    cpu.setdefault((command, name), []).append(
                        (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                        * 1000)
    print(f"medians of {args.runs} runs, ms: old = {args.old}, new = {args.new}")
    print(f"{'command':<16}{'wall old':>10}{'wall new':>10}{'cpu old':>10}{'cpu new':>10}")
    for command in COMMANDS:
        row = [statistics.median(d[command, n]) for d in (wall, cpu) for n in ("old", "new")]
        print(f"{'loom ' + command:<16}" + "".join(f"{v:>10.1f}" for v in row))
    print("load average:", " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
