"""What reading notes as notes costs: this checkout against loom's source at --old.

    git archive main loomcli | tar -x -C /tmp/loom-old
    python tests/bench/bench_notes.py --old /tmp/loom-old [--til DIR] [--notes 2000]
        [--rounds 2] [--runs 10]

Two corpora: Josh Branchaud's TIL notes (--til: a checkout of jbranchaud/til, 1,873
Markdown notes, little front matter) and a generated Obsidian-style vault of --notes
notes, each with YAML front matter (title, aliases, tags), inline #tags and three
[[wikilinks]]. For each loom (old, new; run from its source tree, the editable install's
import hook set aside) and corpus: the first scan's CPU and wall time, the index's size, and
the median CPU time of `loom search QUERY` as a new process (--runs runs per round,
the looms alternating, --rounds rounds). Prints medians and new/old ratios; the load
average is printed too (on a shared machine it moves every figure).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = """
import os, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, os.environ["LOOM_SRC"])
from loomcli.fastpath import main
main()
"""
QUERIES = {"til": ["git rebase interactive", "postgres index"],
           "vault": ["compost tomatoes", "#garden"]}
WORDS = ["garden", "compost", "tomatoes", "rebase", "kernel", "battery", "invoice",
         "weaving", "loom", "thread", "sourdough", "bread", "recipe", "python", "index",
         "query", "backup", "router", "firmware"]


def make_vault(dest: Path, n: int) -> None:
    rng = random.Random(31)
    for i in range(n):
        folder = dest / f"area{i % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        tags = rng.sample(["garden", "project/loom", "idea", "home", "work/admin"], 2)
        links = " ".join(f"[[note {rng.randrange(n)}]]" for _ in range(3))
        body = " ".join(rng.choice(WORDS) for _ in range(150))
        (folder / f"note {i}.md").write_text(
            f"---\ntitle: Note {i}\naliases: [n{i}]\ntags: [{', '.join(tags)}]\n---\n"
            f"# Note {i}\n\n{body} #{rng.choice(WORDS)}\n\nSee {links}.\n", encoding="utf-8")


def loom(src: Path, home: Path, *args: str) -> float:
    """The run's CPU time (user + system): on a shared machine it moves far less than
    the wall-clock time (both are printed for scans)."""
    # Compiled once, kept apart from the source trees, as an installed loom's bytecode.
    env = {**os.environ, "LOOM_HOME": str(home), "LOOM_SRC": str(src),
           "PYTHONPYCACHEPREFIX": str(home.parent / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    WALL.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


WALL: list[float] = []  # each run's wall-clock seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--til", type=Path)
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    looms = {"old": a.old, "new": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpora = {"vault": work / "vault"}
        make_vault(corpora["vault"], a.notes)
        if a.til:
            corpora["til"] = work / "til"
            shutil.copytree(a.til, corpora["til"], ignore=shutil.ignore_patterns(".*"))
        for corpus, folder in corpora.items():
            scans: dict[str, list[float]] = {k: [] for k in looms}
            walls: dict[str, list[float]] = {k: [] for k in looms}
            size: dict[str, int] = {}
            for r in range(a.rounds):
                for name, src in looms.items():
                    home = work / f"home-{name}-{corpus}-{r}"
                    scans[name].append(loom(src, home, "scan", str(folder)))
                    walls[name].append(WALL[-1])
                    size[name] = (home / "index.db").stat().st_size
            for query in QUERIES[corpus]:
                cold: dict[str, list[float]] = {k: [] for k in looms}
                for _ in range(a.rounds):
                    for name, src in looms.items():
                        home = work / f"home-{name}-{corpus}-0"
                        loom(src, home, "search", query)  # warm the file cache
                        cold[name] += [loom(src, home, "search", query)
                                       for _ in range(a.runs)]
                old, new = (statistics.median(cold[k]) for k in ("old", "new"))
                print(f"{corpus}: search {query!r} (CPU): old {old * 1000:.0f} ms, new "
                      f"{new * 1000:.0f} ms ({new / old:.2f}x)")
            old, new = (min(scans[k]) for k in ("old", "new"))
            wold, wnew = (min(walls[k]) for k in ("old", "new"))
            print(f"{corpus}: first scan (CPU): old {old:.2f} s, new {new:.2f} s "
                  f"({new / old:.2f}x); wall: old {wold:.2f} s, new {wnew:.2f} s;"
                  f" index: old {size['old'] / 1e6:.2f} MB, new {size['new'] / 1e6:.2f} MB "
                  f"({size['new'] / size['old']:.3f}x)")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
