"""Which FTS5 tokenizer: build time, index size and recall on the kernel docs.

    python tests/bench/bench_tokenizer.py [--work /tmp/loom-bench]

Recall proxy: for queries written the way people ask ("configuring interrupts"), how
many files contain every query word in some inflection (the files a user wants) are
found. Exact-word tokenizers miss the other inflections; stemming finds them.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import tempfile
import time
from pathlib import Path

TOKENIZERS = ["unicode61 remove_diacritics 2", "porter unicode61 remove_diacritics 2",
              "trigram"]
QUERIES = ["configuring interrupts", "allocated buffers", "scheduling latencies",
           "mounted filesystems", "registering drivers", "timers expired"]


def stems(query: str) -> list[re.Pattern[str]]:
    return [re.compile(r"\b" + re.escape(w[:5]), re.I) for w in query.split()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    args = ap.parse_args()
    texts = [p.read_text(errors="replace") for p in sorted((args.work / "kernel").rglob("*"))
             if p.suffix in (".rst", ".txt")]
    wanted = {q: {i for i, t in enumerate(texts) if all(s.search(t) for s in stems(q))}
              for q in QUERIES}
    print(f"{len(texts)} files, {sum(map(len, texts)) / 1e6:.1f} M characters")
    for tok in TOKENIZERS:
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "t.db")
            conn = sqlite3.connect(db)
            conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(body, content='', "
                         f"tokenize='{tok}')")
            start = time.perf_counter()
            with conn:
                conn.executemany("INSERT INTO f (rowid, body) VALUES (?, ?)",
                                 enumerate(texts))
                conn.execute("INSERT INTO f (f) VALUES ('optimize')")
            build = time.perf_counter() - start
            conn.close()
            size = os.path.getsize(db) / 1e6
            conn = sqlite3.connect(db)
            found = []
            for q in QUERIES:
                match = " AND ".join(f'"{w}"' for w in q.split())
                got = {r[0] for r in conn.execute("SELECT rowid FROM f WHERE f MATCH ?",
                                                  (match,))}
                found.append(len(got & wanted[q]) / max(1, len(wanted[q])))
            print(f"{tok:<38} build {build:5.2f} s  index {size:6.1f} MB  "
                  f"recall {sum(found) / len(found):.2f}")


if __name__ == "__main__":
    main()
