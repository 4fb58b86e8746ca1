"""Would a trigram prefilter pay for `loom grep`? Index size against scan time saved.

    python tests/bench/bench_trigram.py [--work /tmp/loom-bench]

Copies the kernel-docs index that bench_grep.py built, adds an FTS5 `trigram` table over
the stored text (detail=full and detail=none), and times: the candidate query for a
literal, and the in-process grep with and without narrowing to those candidates.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import time
from pathlib import Path

from loomcli.search.grep import compile_pattern, search_text

LITERALS = ["IRQF_ONESHOT", "watchdog", "memory barrier", "kmalloc("]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    args = ap.parse_args()
    src = args.work / "grep-home" / "index.db"
    base = os.path.getsize(src)
    for detail in ("full", "none"):
        db = args.work / f"trigram-{detail}.db"
        shutil.copyfile(src, db)
        conn = sqlite3.connect(db)
        start = time.perf_counter()
        with conn:
            conn.execute(f"CREATE VIRTUAL TABLE tri USING fts5(body, content='docs', "
                         f"content_rowid='id', tokenize='trigram', detail={detail})")
            conn.execute("INSERT INTO tri (tri) VALUES ('rebuild')")
        build = time.perf_counter() - start
        conn.execute("VACUUM")
        extra = os.path.getsize(db) - base
        print(f"detail={detail}: build {build:.2f} s, +{extra / 1e6:.1f} MB "
              f"({extra / base:.0%} of the index without it)")
        for lit in LITERALS:
            regex = compile_pattern(lit.replace("(", r"\("))
            t0 = time.perf_counter()
            if detail == "full":
                query = '"' + lit.replace('"', '""') + '"'
            else:  # no phrases without positions: every trigram of the literal must occur
                query = " AND ".join('"' + lit[i:i + 3].replace('"', '""') + '"'
                                     for i in range(len(lit) - 2))
            ids = [r[0] for r in conn.execute("SELECT rowid FROM tri WHERE tri MATCH ?",
                                              (query,))]
            t1 = time.perf_counter()
            hits = 0
            for (body,) in conn.execute("SELECT CAST(body AS BLOB) FROM docs WHERE id IN "
                                        "(SELECT value FROM json_each(?))", (str(ids),)):
                hits += sum(1 for _ in search_text(regex, body))
            t2 = time.perf_counter()
            full = 0
            for (body,) in conn.execute("SELECT CAST(body AS BLOB) FROM docs"):
                full += sum(1 for _ in search_text(regex, body))
            t3 = time.perf_counter()
            assert hits == full, (lit, hits, full)
            print(f"  {lit!r:18} candidates {len(ids):5} in {1000 * (t1 - t0):5.1f} ms, "
                  f"grep with prefilter {1000 * (t2 - t0):6.1f} ms, full scan "
                  f"{1000 * (t3 - t2):6.1f} ms ({full} lines)")
        conn.close()
        db.unlink()


if __name__ == "__main__":
    main()
