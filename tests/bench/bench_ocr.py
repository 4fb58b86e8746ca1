"""OCR: `loom scan` of scanned pages against Tesseract run directly on the same pages.

    python tests/bench/bench_ocr.py [--pages 20]
    python tests/bench/bench_ocr.py --dpi-sweep      (how OCR_DPI was chosen)

Prints pages of known text (paragraphs of this project's docs) with the fixtures' PDF
writer, scans them at 300 dpi into an image-only PDF, then (1) runs `tesseract` on each
page image directly, one after another, and (2) scans the PDF with `loom scan`. Reports
pages per second and word recall against the known text for both.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "fixtures"))


def words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.lower())


def recall(known: list[str], got: str) -> float:
    have = set(words(got))
    return sum(w in have for w in known) / len(known)


def main() -> None:
    from make_fixtures import _content, build_pdf, scan_of

    from loomcli.extract.ocr import pgm

    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--dpi-sweep", action="store_true")
    args = ap.parse_args()
    if args.dpi_sweep:
        dpi_sweep()
        return
    prose = " ".join((ROOT / "docs" / "reference.md").read_text().split())
    prose = re.sub(r"[`*|\\]", "", prose).encode("cp1252", "ignore").decode("cp1252")
    lines = textwrap.wrap(prose, 80)
    pages = [lines[i * 40:(i + 1) * 40] for i in range(args.pages)]
    known = words("\n".join("\n".join(p) for p in pages))
    work = Path(tempfile.mkdtemp(prefix="loom-ocr-"))
    scans = [scan_of(_content(p)) for p in pages]
    (work / "pdf").mkdir()
    (work / "pdf" / "scan.pdf").write_bytes(build_pdf(scans))
    started = time.perf_counter()
    direct = []
    for scan in scans:
        image = pgm(scan.width, scan.height, scan.width, scan.pixels)
        direct.append(subprocess.run(["tesseract", "stdin", "stdout", "-l", "eng"],
                                     input=image, capture_output=True).stdout.decode())
    t_direct = time.perf_counter() - started
    env = {**os.environ, "LOOM_HOME": str(work / "home")}
    (work / "home").mkdir()
    (work / "home" / "config.toml").write_text('[ocr]\nlanguages = "eng"\n')
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "loomcli", "scan", str(work / "pdf")], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    t_loom = time.perf_counter() - started
    got = subprocess.run([sys.executable, "-m", "loomcli", "get", "scan.pdf"], env=env,
                         capture_output=True, text=True).stdout
    n = len(pages)
    print(f"{n} scanned pages of known text, 300 dpi")
    print(f"tesseract directly, one page after another: {t_direct:.1f} s "
          f"({n / t_direct:.2f} pages/s), word recall {recall(known, ''.join(direct)):.3f}")
    print(f"loom scan (render + tesseract in the worker): {t_loom:.1f} s "
          f"({n / t_loom:.2f} pages/s), word recall {recall(known, got):.3f}; "
          f"ratio {t_loom / t_direct:.2f}x")


def dpi_sweep() -> None:
    """Word recall and time of rendering resolutions on the fixtures' letter and manual
    pages, printed at 6, 8 and 11 pt."""
    import pypdfium2 as pdfium
    from make_fixtures import MIXED, SCANNED_LETTER, _content, build_pdf

    from loomcli.extract.ocr import pgm

    pages = SCANNED_LETTER + MIXED
    known = words("\n".join("\n".join(p) for p in pages))
    for size in (6, 8, 11):
        for dpi in (150, 200, 300):
            started, got = time.perf_counter(), ""
            for lines in pages:
                content = _content(lines).replace(b"/F1 11 Tf 14 TL",
                                                  b"/F1 %d Tf %d TL" % (size, size + 3))
                page = pdfium.PdfDocument(build_pdf([content]))[0]
                bitmap = page.render(scale=dpi / 72, grayscale=True)
                image = pgm(bitmap.width, bitmap.height, bitmap.stride, bytes(bitmap.buffer))
                got += subprocess.run(["tesseract", "stdin", "stdout", "-l", "eng+ita"],
                                      input=image, capture_output=True).stdout.decode()
            print(f"{size:>2} pt at {dpi} dpi: word recall {recall(known, got):.3f}, "
                  f"{time.perf_counter() - started:.1f} s for {len(pages)} pages")


if __name__ == "__main__":
    main()
