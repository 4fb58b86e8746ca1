"""Retrieval quality of every recipe, on both evaluation sets, and the similarity floor.

    python tests/bench/bench_retrieval.py --work /tmp/i25eval [--grid]

WORK/meaning.toml points at an index of the kernel docs (root "kernel"), the LaTeX
manuals (root "texlive-doc") and python3.11-doc's HTML pages (root "python") with the
built-in model's vectors (tests/bench/bench_retrieval.py --build makes it; see
docs/benchmarks.md for the subcorpus used). Two sets of questions:

- tests/bench/eval/questions.toml (80: everyday English, Italian, documents' words;
  kernel docs and LaTeX manuals), the set the earlier recipe was tuned on;
- tests/bench/eval/everyday.toml (99: everyday English and Italian over all three
  corpora), written for this change and never used to tune before it.

For each, recall@5 and MRR@10 of: BM25 (`--mode bm25`), vectors alone (`--mode
semantic`), the earlier hybrid (file-level RRF, vector ranks double, a file's score its
best passage + 0.6 x second + 0.36 x third, identifiers pinned) and the new one
(retrieve.hybrid). `--grid` tries the fusion's weights and reports each choice on both
sets, so a choice that only suits one set shows. Then nonsense queries: the best cosine
any passage reaches, against the best cosine of the target files' passages.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETS = {"questions": ROOT / "tests/bench/eval/questions.toml",
        "everyday": ROOT / "tests/bench/eval/everyday.toml"}
NONSENSE = ["zzzzqqq", "qwpoeiruty asdfjkl", "xkcd zorblat fnord", "asdf", "blorptastic",
            "9f8e7d6c", "ghjkl mnbvc", "flurbo wibble", "qqq www eee"]


def build(work: Path, corpus: Path) -> None:
    """Index WORK's corpus: text first, then the built-in model's vectors."""
    import subprocess

    db = work / "index.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    base = f'db_path = "{db}"\nextensions = ["rst", "txt"]\n'
    (work / "text.toml").write_text(base + "[embeddings]\nenabled = false\n")
    (work / "meaning.toml").write_text(base + "[embeddings]\nenabled = true\n")
    loom = [sys.executable, "-m", "loomcli"]
    for name, args in (("text", ["scan", *(str(corpus / r) for r in
                                          ("kernel", "texlive-doc", "python"))]),
                       ("meaning", ["scan"])):
        env = {**os.environ, "LOOM_CONFIG": str(work / f"{name}.toml")}
        t = time.perf_counter()
        subprocess.run([*loom, *args], env=env, check=False)
        print(f"scan ({name}): {time.perf_counter() - t:.1f} s, index "
              f"{os.path.getsize(db) / 1e6:.1f} MB")


class Cached:
    """The store's BM25 answers, kept: a grid asks the same ones many times."""

    def __init__(self, store):
        self._store = store
        self.rank = functools.lru_cache(maxsize=None)(store.rank)
        self.rank_passages = functools.lru_cache(maxsize=None)(store.rank_passages)
        self.frequency = functools.lru_cache(maxsize=None)(store.frequency)

    def __getattr__(self, name):
        return getattr(self._store, name)


def old_hybrid(store, index, vector, query):
    """The recipe before this change (semantic.py and operations.py at 4911dda)."""
    import numpy as np

    from loomcli import retrieve
    from loomcli.excerpt import retrieval_query

    sims = index.similarities(vector)
    take = min(len(sims), 2000)
    top = np.argpartition(-sims, take - 1)[:take]
    top = top[np.argsort(-sims[top], kind="stable")]
    score: dict[int, float] = {}
    seen: dict[int, int] = {}
    for i in top.tolist():
        fid = int(index.ids[i])
        k = seen.get(fid, 0)
        if k < 3:
            score[fid] = score.get(fid, 0.0) + float(sims[i]) * 0.6 ** k
        seen[fid] = k + 1
    sem = sorted(score, key=lambda f: -score[f])[:50]
    kw = [fid for fid, _ in store.rank(retrieval_query(query), 50, "fill", None)]
    pinned = set()
    for word in retrieve.identifiers(query):
        pinned.update(fid for fid, _ in store.rank(word, 3, "AND", None))
    fused: dict[int, float] = {}
    for r, fid in enumerate(kw, 1):
        fused[fid] = fused.get(fid, 0.0) + 1 / (60 + r)
    for r, fid in enumerate(sem, 1):
        fused[fid] = fused.get(fid, 0.0) + 2 / (60 + r)
    for fid in pinned:
        if fid in fused:
            fused[fid] += 3
    return sorted(fused, key=lambda f: -fused[f])


def rank_of(paths, targets):
    for i, p in enumerate(paths[:10], 1):
        if p in targets:
            return i
    return None


def groups(questions):
    out = {}
    for q in questions:
        out.setdefault(f"{q['kind']}-{q['lang']}", []).append(q)
    return out


def scores(ranks):
    r5 = sum(1 for r in ranks if r and r <= 5) / len(ranks)
    mrr = sum(1 / r for r in ranks if r) / len(ranks)
    return r5, mrr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/i25eval"))
    ap.add_argument("--build", type=Path, help="a folder holding kernel/, texlive-doc/, "
                    "python/: index it first")
    ap.add_argument("--grid", action="store_true")
    args = ap.parse_args()
    if args.build:
        build(args.work, args.build)
    os.environ["LOOM_CONFIG"] = str(args.work / "meaning.toml")

    from loomcli import retrieve, semantic
    from loomcli.operations import Corpus
    from loomcli.store import Store

    corpus = Corpus.default()
    raw = Store.open(corpus.index_path)
    store = Cached(raw)
    embedder = corpus._embedder()
    index = semantic.vector_index(raw, embedder.identity)
    files = [fid for fid, _ in raw.paths()]
    paths = {fid: p for fid, (p, _, _) in raw.hits_for(files).items()}
    sets = {name: tomllib.loads(path.read_text())["q"] for name, path in SETS.items()}
    vectors = {}
    t = time.perf_counter()
    for qs in sets.values():
        for q in qs:
            vectors[q["q"]] = embedder.embed([q["q"]])[0]
    n_q = sum(len(qs) for qs in sets.values())
    print(f"{n_q} questions, {len(index):,} passages, {len(files):,} files; query embedding "
          f"{(time.perf_counter() - t) * 1000 / n_q:.0f} ms each")

    def named(ids):
        return [paths.get(i, "?") for i in ids]

    recipes = {
        "BM25 (--mode bm25)": lambda q, v: [r.file_id for r in retrieve.bm25(store, q, 10)],
        "vectors alone, no floor": lambda q, v: [r.file_id for r in retrieve.semantic(
            store, index, v, 10, least=0.0)],
        "vectors alone (--mode semantic)": lambda q, v: [r.file_id for r in retrieve.semantic(
            store, index, v, 10)],
        "hybrid before (file-level RRF)": lambda q, v: old_hybrid(store, index, v, q),
        "hybrid now (passage-level RRF)": lambda q, v: [r.file_id for r in retrieve.hybrid(
            store, index, v, q, 10)],
    }
    header = None
    for name, fn in recipes.items():
        line = f"{name:<36}"
        cols = []
        for set_name, qs in sets.items():
            for g, members in groups(qs).items():
                ranks = [rank_of(named(fn(q["q"], vectors[q["q"]])), q["targets"])
                         for q in members]
                cols.append(f"{set_name}:{g}({len(members)})")
                line += "  {:.2f} {:.2f}".format(*scores(ranks))
        if header is None:
            header = " " * 36 + "".join(f"  {c}" for c in cols)
            print("R@5 MRR per group:\n" + header)
        print(line)

    if args.grid:
        print("\ngrid (passage BM25 weight 1): passage-vector, file-BM25, cross-language, "
              "floor -> R@5 per group, as above")
        top_cache: dict[str, list] = {}

        class TopCached:  # the same passages for every weight tried
            def __init__(self, inner):
                self.inner = inner

            def top(self, vector, limit, among=None):
                key = vector.tobytes()
                if key not in top_cache:
                    top_cache[key] = self.inner.top(vector, limit, among)
                return top_cache[key]

        cached_index = TopCached(index)
        for pb, pv, fb, fv, cross in itertools.product((1.0, 0.5, 0.0), (1.0, 0.5, 0.0),
                                                       (1.0, 0.5), (2.0, 1.0), (0.25,)):
            floor = 0.0
            w = retrieve.Weights(passage_bm25=pb, passage_vector=pv, file_bm25=fb,
                                 file_vector=fv, cross_language=cross, floor=floor)
            line = f"pb {pb:<4} pv {pv:<4} fb {fb:<4} fv {fv:<4} cross {cross:<5}"
            for qs in sets.values():
                for members in groups(qs).values():
                    ranks = [rank_of(named([r.file_id for r in retrieve.hybrid(
                        store, cached_index, vectors[q["q"]], q["q"], 10, weights=w)]),
                        q["targets"]) for q in members]
                    line += f"  {scores(ranks)[0]:.2f}"
            print(line, flush=True)

    print("\nsimilarity floor: best passage cosine")
    best_target = []
    for qs in sets.values():
        for q in qs:
            top = index.top(vectors[q["q"]], 2000)
            hits = [p.score for p in top if paths.get(p.file_id) in q["targets"]]
            best_target.append(hits[0] if hits else 0.0)
    best_target.sort()
    junk = [(index.top(embedder.embed([t])[0], 1)[0].score, t) for t in NONSENSE]
    print("  nonsense queries, best passage anywhere: "
          + ", ".join(f"{t!r} {s:.2f}" for s, t in sorted(junk)))
    for pct in (5, 10, 25, 50):
        print(f"  target files' best passage, {pct}th percentile: "
              f"{best_target[len(best_target) * pct // 100]:.2f}")
    least = retrieve.floor(index)
    print(f"  questions whose target's best passage is under the floor ({least:.3f}): "
          f"{sum(1 for s in best_target if s < least)}/{len(best_target)}")


if __name__ == "__main__":
    main()
