"""Time and peak memory of a hugely expanding grep pattern and of a 22 MB page of spans
(issue 35, items 2 and 20), each in a fresh interpreter.

    .venv/bin/python -m tests.bench.bench_patterns_pages
"""

from __future__ import annotations

import subprocess
import sys

PATTERN = r"""
import resource, time
from loomcli.search import grep
t = time.perf_counter()
try:
    grep.build(r"\w{1000}\w{1000}\w{1000}"); r = "compiled"
except Exception as exc:
    r = f"refused ({exc})"[:60]
print(f"pattern: {r}: {time.perf_counter() - t:.2f} s, "
      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB peak")
"""

PAGE = r"""
import resource, time
from loomcli.extract import documents
page = "<html><body><div>" + "".join(f"<span class=w>word{i}</span> "
                                     for i in range(700_000)) + "</div></body></html>"
t = time.perf_counter()
text, _ = documents.html_text(page)
print(f"page: {len(page) / 1e6:.0f} MB of markup, {len(text) / 1e6:.1f} MB of text: "
      f"{time.perf_counter() - t:.1f} s, "
      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB peak")
"""

if __name__ == "__main__":
    for code in (PATTERN, PAGE):
        subprocess.run([sys.executable, "-c", code], check=False)
