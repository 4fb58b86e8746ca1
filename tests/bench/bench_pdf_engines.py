"""pypdf against PDFium (pypdfium2) on real PDF manuals: speed and text quality.

    python tests/bench/bench_pdf_engines.py [--work /tmp/loom-bench]

Text quality is word recall against pdftotext (poppler), the reference most people
trust: the share of pdftotext's words (as a multiset) that the engine also produced.
Uses the 20 manuals that bench_scan.py prepares.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from loomcli.errors import ExtractionError
from loomcli.extract import pdf

WORD = re.compile(r"\w{2,}")


def words(text: str) -> Counter[str]:
    return Counter(w.lower() for w in WORD.findall(text))


def recall(ours: Counter[str], ref: Counter[str]) -> float:
    total = sum(ref.values())
    return sum((ours & ref).values()) / total if total else 1.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    args = ap.parse_args()
    files = sorted((args.work / "pdfs").glob("*.pdf"))
    if not files:
        raise SystemExit("run tests/bench/bench_scan.py first (it prepares the PDFs)")
    refs = {f: words(subprocess.run(["pdftotext", "-enc", "UTF-8", str(f), "-"],
                                    capture_output=True, text=True).stdout) for f in files}
    print(f"{len(files)} PDFs, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB, "
          "one process, one core")
    for engine in ("pdfium", "pypdf"):
        os.environ["LOOM_PDF_ENGINE"] = engine
        start = time.perf_counter()
        scores = []
        for f in files:
            try:
                scores.append(recall(words(pdf.extract_pdf(str(f)).text), refs[f]))
            except ExtractionError:
                scores.append(0.0)
        elapsed = time.perf_counter() - start
        print(f"{engine:<7} {elapsed:7.2f} s   word recall vs pdftotext: mean "
              f"{sum(scores) / len(scores):.3f}, worst {min(scores):.3f}")


if __name__ == "__main__":
    main()
