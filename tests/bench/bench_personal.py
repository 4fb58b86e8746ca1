r"""Everyday questions over a person's own notes beside big manuals, measured with `loom eval`.

    python tests/bench/bench_personal.py --work /work/evalidx --corpus /work/corpora/i25corpus \
        [--minilm] [--sets personal,questions,everyday] [--modes bm25,hybrid] [--no-scan]

The folder is WORK/corpus, one root holding four folders, so every path shows as the
questions name it:
- til/: Josh Branchaud's TIL notes (tests/bench/eval/til, 1,871 notes, MIT), copied (in
  four of them a package index's address is written out in words);
- kernel/, python/, texlive-doc/: the 1,803-file subcorpus of the kernel docs,
  python3.11-doc's HTML and the LaTeX manuals (tests/bench/bench_retrieval.py's docstring
  says how CORPUS is made), hard-linked from CORPUS.
The index is WORK/use (LOOM_HOME: config.toml and index.db) with the built-in
multilingual model's vectors, or WORK/minilm with `--minilm` (`[embeddings] model =
"minilm"`, the `loom-index[minilm]` extra). Each run first scans (`loom scan`: the whole
folder the first time, 10-30 min of embedding on a loaded 2-core machine, nothing when
the index is current; `--no-scan` skips it), then runs `loom eval SET --mode M --json`
for each set and mode and prints recall@1/5/10, MRR and what `ask` would send, per
language, and writes WORK/<index>/results.json.

The sets (tests/bench/eval/): personal.toml (92 questions about the TIL notes, 63 English
and 29 Italian), questions.toml (80, kernel docs and LaTeX manuals) and everyday.toml (99,
all three manuals' corpora).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "tests/bench/eval"
SETS = ("personal", "questions", "everyday")
MANUALS = ("kernel", "python", "texlive-doc")
EXTENSIONS = '["md", "markdown", "txt", "text", "rst", "org", "adoc"]'


def folder(work: Path, corpus: Path | None) -> Path:
    """WORK/corpus: the notes copied, the manuals hard-linked (made once)."""
    top = work / "corpus"
    if not (top / "til").is_dir():
        shutil.copytree(EVAL / "til", top / "til", ignore=shutil.ignore_patterns("LICENSE"))
    for name in MANUALS:
        if (top / name).is_dir():
            continue
        if corpus is None or not (corpus / name).is_dir():
            sys.exit(f"bench_personal: {top / name} is missing — give --corpus (see the "
                     "docstring)")
        shutil.copytree(corpus / name, top / name, copy_function=os.link)
    return top


def home(work: Path, top: Path, minilm: bool) -> Path:
    """The LOOM_HOME of the index, its config written once."""
    where = work / ("minilm" if minilm else "use")
    where.mkdir(parents=True, exist_ok=True)
    config = where / "config.toml"
    if not config.exists():
        model = 'model = "minilm"\n' if minilm else ""
        config.write_text(f'notes_dirs = ["{top}"]\nextensions = {EXTENSIONS}\n\n'
                          f"[embeddings]\nenabled = true\n{model}")
    return where


def loom(loom_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOM_HOME": str(loom_home)}
    env.pop("LOOM_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], env=env,
                          capture_output=True, text=True, check=False)


def scan(loom_home: Path) -> None:
    started = time.perf_counter()
    done = loom(loom_home, "scan")
    db = loom_home / "index.db"
    print(f"scan: {time.perf_counter() - started:.0f} s, index "
          f"{db.stat().st_size / 1e6:.0f} MB (exit {done.returncode})", flush=True)
    if done.returncode != 0:
        sys.exit(done.stderr.strip())


def row(label: str, s: dict) -> str:
    phrase = "  -  " if s["ask_phrase"] is None else f"{s['ask_phrase']:.2f}"
    return (f"{label:<28} {s['questions']:>3}  {s['recall_1']:.2f}  {s['recall_5']:.2f}  "
            f"{s['recall_10']:.2f}  {s['mrr']:.2f}  {s['ask_file']:>8.2f}  {phrase:>10}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, help="the 1,803-file subcorpus (first run only)")
    ap.add_argument("--minilm", action="store_true", help="the second built-in model")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--modes", default="bm25,hybrid")
    ap.add_argument("--no-scan", action="store_true", help="use the index as it is")
    ap.add_argument("--home", type=Path, help="this LOOM_HOME instead of WORK/use (a copy "
                    "of the index, e.g. to measure a branch that changes its format)")
    args = ap.parse_args()
    top = folder(args.work, args.corpus)
    loom_home = args.home or home(args.work, top, args.minilm)
    if not args.no_scan:
        scan(loom_home)
    results: dict[str, dict] = {}
    print(f"{'set / language / mode':<28} {'n':>3}  R@1   R@5   R@10  MRR   ask:file  "
          "ask:phrase")
    for name in args.sets.split(","):
        for mode in args.modes.split(","):
            started = time.perf_counter()
            done = loom(loom_home, "eval", str(EVAL / f"{name}.toml"), "--mode", mode,
                        "--json")
            if done.returncode != 0:
                sys.exit(f"{name} {mode}: {done.stderr.strip()}")
            for line in done.stderr.splitlines():
                print(f"  {line}")
            report = json.loads(done.stdout)
            figures = report["modes"][mode]
            results[f"{name}/{mode}"] = figures
            print(row(f"{name} {mode}", figures)
                  + f"   ({time.perf_counter() - started:.0f} s)", flush=True)
            for group in ("by_lang", "by_kind"):
                for value, s in figures[group].items():
                    print(row(f"  {value}", s))
    out = loom_home / "results.json"
    out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"details (misses with their ranks): {out}")


if __name__ == "__main__":
    main()
