"""Cold start of the read commands: this checkout against loom at --old and the peers.

    python tests/bench/bench_cold.py [--work /tmp/loom-bench] [--old 5b8ed35]
        [--rounds 4] [--runs 10] [--qmd-dir /opt/qmd] [--archive-home DIR] [--nice N]

Installs this checkout and the commit --old (a git worktree) each into its own virtualenv
under WORK, without `-e` (an editable install adds an import hook, ~8 ms) and with their
bytecode compiled, as pip and pipx install them. Indexes the kernel docs (as
bench_scan.py unpacks them) with loom and with qmd, then times, as new processes:
  grep:   `loom grep -i IRQF_ONESHOT` (old, new) against `rg -i -n --no-ignore -g *.rst
          -g *.txt IRQF_ONESHOT` over the same files (as bench_grep.py and
          bench_archive.py measure it);
  search: `loom search QUERY` (old, new) against `qmd search QUERY` (BM25), per query;
  and `python -c pass` (the interpreter alone) for scale.
hyperfine runs one command's runs one after another, so each comparison is run in
--rounds rounds (the order rotating) of --runs runs each and the medians over all rounds
are compared: a change of the machine's load reaches every command alike. The CPU time
(user + system, all threads) of each is shown too: on a loaded machine it moves less than
the wall-clock time. With
--archive-home (the LOOM_HOME of bench_archive.py's archive index), cold searches there
too (old, new). Prints medians and ratios (lower is better) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scan import (  # noqa: E402  (the kernel docs, unpacked once; looms as pip installs them)
    install,
    install_commit,
    prepare_kernel,
)

ROOT = Path(__file__).resolve().parents[2]
PATTERN = "IRQF_ONESHOT"
QUERIES = ["memory barrier", "watchdog timer", "page cache writeback"]
ARCHIVE_QUERIES = ["watchdog timer", "tikz arrow styles", "asyncio event loop"]


NICE: list[str] = []  # --nice N: hyperfine and what it runs at that priority


def hyperfine(commands: dict[str, str], env: dict[str, str], rounds: int, runs: int,
              cwd: Path | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Seconds of every run of each command, over `rounds` rounds in rotating order, and
    the CPU seconds (user + system) of each round's runs on average."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            out = Path(tmp) / f"round-{r}.json"
            subprocess.run([*NICE, "hyperfine", "-N", "-i", "-w", "2", "-r", str(runs), "--style",
                            "none", "--export-json", str(out),
                            *[commands[n] for n in order]],
                           env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
            for name, result in zip(order, json.loads(out.read_text())["results"],
                                    strict=True):
                times[name] += result["times"]
                cpu[name].append(result["user"] + result["system"])
    return times, cpu


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def report(title: str, measured: tuple[dict[str, list[float]], dict[str, list[float]]],
           pairs: list[tuple[str, str]]) -> None:
    times, cpu = measured
    med = {name: statistics.median(t) for name, t in times.items()}
    used = {name: statistics.mean(c) for name, c in cpu.items()}
    print(f"\n{title} (load {load()})")
    for name, t in times.items():
        q1, _, q3 = statistics.quantiles(t, n=4)
        print(f"  {name:<28} median {med[name] * 1e3:7.1f} ms  (IQR {q1 * 1e3:.1f}–"
              f"{q3 * 1e3:.1f}, {len(t)} runs)  CPU {used[name] * 1e3:6.1f} ms")
    for a, b in pairs:
        print(f"  {a} / {b}: {med[a] / med[b]:.2f}x (CPU time {used[a] / used[b]:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--old", default="5b8ed35", help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--qmd-dir", type=Path, default=Path("/opt/qmd"))
    ap.add_argument("--archive-home", type=Path, help="LOOM_HOME of an archive index")
    ap.add_argument("--nice", type=int, help="run the timings at this priority (e.g. -10 "
                    "on a machine shared with other work; all commands alike)")
    args = ap.parse_args()
    if args.nice is not None:
        NICE[:] = ["nice", "-n", str(args.nice)]
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    for tool in ("hyperfine", "rg"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run tests/bench/setup.sh")
    kernel = prepare_kernel(work)

    old = install_commit(args.old, work / f"cold-old-venv-{args.old}")
    shutil.rmtree(work / "cold-new-venv", ignore_errors=True)  # this checkout as it is now
    new = install(ROOT, work / "cold-new-venv")
    python = work / "cold-new-venv" / "bin" / "python"

    home, qhome = work / "cold-loom-home", work / "cold-qmd-home"
    qmd_bin = args.qmd_dir / "node_modules" / ".bin"
    env = {**os.environ, "LOOM_HOME": str(home), "HOME": str(qhome),
           "XDG_CACHE_HOME": str(qhome / "cache"), "XDG_CONFIG_HOME": str(qhome / "config"),
           "PATH": f"{qmd_bin}:{os.environ['PATH']}"}
    env.pop("LOOM_CONFIG", None)
    if not (home / "index.db").exists():
        subprocess.run([str(new), "scan", str(kernel)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    if not (qhome / "cache" / "qmd").exists():
        qhome.mkdir(exist_ok=True)
        subprocess.run(["qmd", "collection", "add", str(kernel), "--name", "kernel", "--mask",
                        "**/*.{rst,txt}"], env=env, cwd=qhome, check=True,
                       stdout=subprocess.DEVNULL)
    for loom in (old, new):  # both find the same lines
        got = subprocess.run([str(loom), "grep", "-i", PATTERN], env=env,
                             capture_output=True, text=True).stdout
        if got.count("\n") != subprocess.run(
                ["rg", "-i", "-n", "--no-ignore", "-g", "*.rst", "-g", "*.txt", PATTERN,
                 str(kernel)], capture_output=True, text=True).stdout.count("\n"):
            sys.exit(f"{loom} grep and rg disagree on {PATTERN}")

    print(f"kernel docs: {kernel}; old = {args.old}, new = this checkout; "
          f"{args.rounds} rounds x {args.runs} runs")
    grep = hyperfine({
        "old loom grep": f"{old} grep -i {PATTERN}",
        "new loom grep": f"{new} grep -i {PATTERN}",
        "rg": f"rg -i -n --no-ignore -g *.rst -g *.txt {PATTERN} {kernel}",
        "python -c pass": f"{python} -c pass",
    }, env, args.rounds, args.runs)
    report(f"cold grep {PATTERN}, kernel docs", grep,
           [("new loom grep", "rg"), ("old loom grep", "rg"),
            ("new loom grep", "old loom grep")])
    for query in QUERIES:
        search = hyperfine({
            "old loom search": f"{old} search '{query}'",
            "new loom search": f"{new} search '{query}'",
            "qmd search": f"qmd search '{query}'",
        }, env, args.rounds, args.runs, cwd=qhome)
        report(f"cold search {query!r}, kernel docs", search,
               [("new loom search", "qmd search"), ("old loom search", "qmd search"),
                ("new loom search", "old loom search")])
    if args.archive_home:
        for query in ARCHIVE_QUERIES:
            search = hyperfine({
                "old loom search": f"{old} search '{query}'",
                "new loom search": f"{new} search '{query}'",
            }, {**env, "LOOM_HOME": str(args.archive_home)}, args.rounds, args.runs)
            report(f"cold search {query!r}, archive", search,
                   [("new loom search", "old loom search")])


if __name__ == "__main__":
    main()
