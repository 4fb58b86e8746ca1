"""HTML: `loom scan` of Debian's python3.11-doc against the extractor called directly.

    python tests/bench/bench_html.py [--docs /usr/share/doc/python3.11/html]

Needs Debian's python3.11-doc. Reports the scan time (extraction in the worker pool, the
text and trigram indexes written) and the time of `html_text()` over the same pages in
one process (extraction alone), and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    args = ap.parse_args()
    if not args.docs.is_dir():
        sys.exit(f"{args.docs} missing: apt-get install python3.11-doc")
    pages = sorted(p for p in args.docs.rglob("*.html") if not p.is_symlink())
    from loomcli.extract.documents import _decode_html, html_text

    started = time.perf_counter()
    chars = sum(len(html_text(_decode_html(p.read_bytes()))[0]) for p in pages)
    direct = time.perf_counter() - started
    home = Path(tempfile.mkdtemp(prefix="loom-html-"))
    try:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "loomcli", "scan", str(args.docs)], check=False,
                       env={**os.environ, "LOOM_HOME": str(home)}, stdout=subprocess.DEVNULL)
        scan = time.perf_counter() - started
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"{len(pages)} pages, {chars / 1e6:.1f} M characters of visible text")
    print(f"html_text() called directly, one process: {direct:.2f} s")
    print(f"loom scan (2 workers, text + trigram index): {scan:.2f} s "
          f"({scan / direct:.2f}x the extraction alone)")


if __name__ == "__main__":
    main()
