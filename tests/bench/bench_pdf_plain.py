"""PDF scan with a plain install against pdftotext on the same 20 real manuals.

    python tests/bench/bench_pdf_plain.py [--work /tmp/loom-bench] [--runs 3]

Needs Debian's texlive-latex-base-doc and poppler-utils. The 20 largest manuals are those
bench_scan.py uses. loom runs as installed here (a plain install brings PDFium; OCR on
when Tesseract is installed, as for a user), each run into an empty index; pdftotext runs
on each file in turn. Median of --runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    from bench_scan import prepare_pdfs

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    pdfs = prepare_pdfs(args.work)
    files = sorted(pdfs.glob("*.pdf"))
    loom_t, p2t_t = [], []
    for i in range(args.runs):
        home = args.work / f"plain-{i}"
        shutil.rmtree(home, ignore_errors=True)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(pdfs)],
                       env={**os.environ, "LOOM_HOME": str(home)}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        loom_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        for f in files:
            subprocess.run(["pdftotext", str(f), "/dev/null"], stderr=subprocess.DEVNULL)
        p2t_t.append(time.perf_counter() - started)
    engines = subprocess.run([sys.executable, "-m", "loomcli", "status"], capture_output=True,
                             text=True, env={**os.environ, "LOOM_HOME": str(
                                 args.work / "plain-0")}).stdout
    mb = sum(f.stat().st_size for f in files) / 1e6
    loom_s, p2t_s = statistics.median(loom_t), statistics.median(p2t_t)
    print(f"{len(files)} manuals, {mb:.0f} MB; "
          + next(line for line in engines.splitlines() if line.startswith("engines")))
    print(f"loom scan {loom_s:.2f} s, pdftotext {p2t_s:.2f} s: {loom_s / p2t_s:.2f}x "
          "(goal <= 0.6x)")


if __name__ == "__main__":
    main()
