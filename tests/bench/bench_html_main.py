"""Web pages by their main content: how much of a page's indexed text was navigation.

    python tests/bench/bench_html_main.py [--old 4911dda] [DIR ...]

For every .html page under each DIR (default: python3.11-doc's pages, then every other
page under /usr/share/doc), the words loom indexes before (loom at --old, read from git)
and now. For pages that mark their main content (<main>, role=main, one <article>,
Sphinx's .body) the words gone are the navigation; for pages that mark nothing, nothing
may be lost: the table counts those whose words changed (what went was in elements
marked as chrome: Texinfo's node headers "Next: … Previous: … Up: …", footers).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYDOC = Path("/usr/share/doc/python3.11/html")
# What Sphinx's sidebar and bars say on every page (counted in the indexed text).
SIDEBAR = ("Previous topic", "Next topic", "This Page", "Show Source", "Quick search",
           "Report a Bug", "Table of Contents")


def old_module(rev: str):
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:loomcli/extract/"
                             "documents.py"], capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_documents.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_documents", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default="4911dda")
    ap.add_argument("dirs", nargs="*", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from loomcli.extract import documents as new
    from loomcli.extract.text import decode

    old = old_module(args.old)
    sets = {"python3.11-doc": sorted(PYDOC.rglob("*.html"))} if not args.dirs else {}
    if not args.dirs:
        sets["other pages in /usr/share/doc"] = sorted(
            p for p in Path("/usr/share/doc").rglob("*.htm*")
            if PYDOC not in p.parents and p.is_file())[:2000]
    for d in args.dirs:
        sets[str(d)] = sorted(d.rglob("*.htm*"))
    print(f"{'pages':<32} {'n':>5} {'marked':>7} {'words dropped':>14} "
          f"{'sidebar phrases before/after':>29} {'unmarked, words changed':>24}")
    for name, pages in sets.items():
        shares, marked, changed, unmarked, chrome = [], 0, 0, 0, [0, 0]
        lost: list[float] = []
        for page in pages:
            try:
                markup = decode(page.read_bytes())
                before = old.html_text(markup)[0].replace("¶", "").split()
                after = new.html_text(markup)[0].split()
            except Exception:  # noqa: BLE001 - a page either version cannot read
                continue
            if not before:
                continue
            import lxml.html

            root = lxml.html.document_fromstring(new._DOCTYPE_SUBSET.sub(
                "<!DOCTYPE html>", new._XML_DECLARATION.sub("", markup)))
            is_marked = any(root.xpath(q) for q in new._MAIN if q != "//article") or len(
                root.xpath("//article")) == 1
            for i, words in enumerate((before, after)):
                text = " ".join(words)
                chrome[i] += sum(text.count(p) for p in SIDEBAR)
            if is_marked:
                marked += 1
                shares.append(1 - len(after) / len(before))
            else:
                unmarked += 1
                changed += after != before
                lost.append(1 - len(after) / len(before))
        share = f"{statistics.mean(shares):.1%}" if shares else "-"
        print(f"{name:<32} {len(pages):>5} {marked:>7} {share:>14} "
              f"{f'{chrome[0]} / {chrome[1]}':>29} {f'{changed} of {unmarked}':>24}"
              + (f" ({statistics.mean(lost):.1%} of their words, in <nav>, headers, "
                 "footers)" if lost else ""))


if __name__ == "__main__":
    main()
