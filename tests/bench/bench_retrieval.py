r"""Retrieval quality of every recipe, on both evaluation sets, and the similarity floor.

    python tests/bench/bench_retrieval.py --work /tmp/i25eval [--grid]

WORK/meaning.toml points at an index of the kernel docs (root "kernel"), the LaTeX
manuals (root "texlive-doc") and python3.11-doc's HTML pages (root "python") with the
built-in model's vectors (tests/bench/bench_retrieval.py --build makes it; see
docs/benchmarks.md for the subcorpus used). The folder for `--build`, from Debian's
linux-doc-6.1, python3.11-doc and texlive-latex-base-doc (1,803 files):

    D=/usr/share/doc; C=/tmp/i25corpus
    cd $D/linux-doc-6.1/Documentation && find admin-guide dev-tools driver-api \
        filesystems mm networking process timers -name '*.rst.gz' -o -name '*.txt.gz' |
        while read f; do mkdir -p $C/kernel/${f%/*}; zcat $f > $C/kernel/${f%.gz}; done
    cd $D/python3.11-doc/html && find tutorial library howto faq reference -name '*.html' |
        while read f; do mkdir -p $C/python/${f%/*}; cp $f $C/python/$f; done
    dpkg -L texlive-latex-base-doc | grep -E '\.(pdf|html|txt)$' | while read f; do
        r=${f#$D/texlive-doc/}; mkdir -p $C/texlive-doc/${r%/*}; cp $f $C/texlive-doc/$r; done

Two sets of questions:

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

The second built-in model (all-MiniLM-L6-v2, `[embeddings] model = "minilm"`):

    python tests/bench/bench_retrieval.py --work /tmp/i25eval --minilm /tmp/i25mini \
        --pool 400 [--embed-pool] [--cost]

MINILM/index.db holds the same corpus's text (a text-only scan); `--embed-pool` gives
MiniLM vectors (loom's own scan step, embed_pending) to the files of the pool only:
every target file plus `--pool` others drawn at random (seed 25). Embedding the whole
subcorpus with MiniLM takes an hour or more on the shared 2-core machine (5-8 passages/s
under load, 37,954 passages). `--build
CORPUS --minilm MINILM` builds MINILM as a user would, every file with MiniLM's vectors
(`loom scan` with `[embeddings] model = "minilm"`), after WORK; then run without
`--pool` for both models on the whole corpus. With `--pool`, every
recipe of both models ranks the pool's files only (BM25's statistics stay the whole
corpus's), so its figures compare with each other, not with a run without `--pool`.
`--cost` times both models on the same 256 passages in this process (passages/s, one
thread).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import random
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETS = {"questions": ROOT / "tests/bench/eval/questions.toml",
        "everyday": ROOT / "tests/bench/eval/everyday.toml"}
NONSENSE = ["zzzzqqq", "qwpoeiruty asdfjkl", "xkcd zorblat fnord", "asdf", "blorptastic",
            "9f8e7d6c", "ghjkl mnbvc", "flurbo wibble", "qqq www eee"]


def build(work: Path, corpus: Path, model: str | None = None) -> None:
    """Index WORK's corpus: text first, then a built-in model's vectors (the default
    model's, or `model`'s: `[embeddings] model = "minilm"`)."""
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    db = work / "index.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    base = f'db_path = "{db}"\nextensions = ["rst", "txt"]\n'
    chosen = f'model = "{model}"\n' if model else ""
    (work / "text.toml").write_text(base + "[embeddings]\nenabled = false\n")
    (work / "meaning.toml").write_text(base + "[embeddings]\nenabled = true\n" + chosen)
    loom = [sys.executable, "-m", "loomcli"]
    for name, args in (("text", ["scan", *(str(corpus / r) for r in
                                          ("kernel", "texlive-doc", "python"))]),
                       ("meaning", ["scan"])):
        env = {**os.environ, "LOOM_CONFIG": str(work / f"{name}.toml")}
        t = time.perf_counter()
        subprocess.run([*loom, *args], env=env, check=False)
        print(f"scan ({name}{', ' + model if model else ''}): "
              f"{time.perf_counter() - t:.1f} s, index {os.path.getsize(db) / 1e6:.1f} MB",
              flush=True)


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

    from loomcli.search import retrieve
    from loomcli.search.text import retrieval_query

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
    kw = [fid for fid, _ in retrieve.rank_files(store, retrieval_query(query), 50, "fill")]
    pinned = set()
    for word in retrieve.identifiers(query):
        pinned.update(fid for fid, _ in retrieve.rank_files(store, word, 3, "AND"))
    fused: dict[int, float] = {}
    for r, fid in enumerate(kw, 1):
        fused[fid] = fused.get(fid, 0.0) + 1 / (60 + r)
    for r, fid in enumerate(sem, 1):
        fused[fid] = fused.get(fid, 0.0) + 2 / (60 + r)
    for fid in pinned:
        if fid in fused:
            fused[fid] += 3
    return sorted(fused, key=lambda f: -fused[f])


class PoolStore:
    """The store as the scan's embedding step sees it, with only the pool pending."""

    def __init__(self, store, ids):
        self._store, self._ids = store, set(ids)

    def needing_vectors(self, model, dim=None):
        return [f for f in self._store.needing_vectors(model, dim) if f in self._ids]

    def __getattr__(self, name):
        return getattr(self._store, name)


def pool_paths(paths, sets, n):
    """Every target file plus n others drawn at random (seed 25), as display paths."""
    targets = {t for qs in sets.values() for q in qs for t in q["targets"]}
    others = sorted(set(paths.values()) - targets)
    return targets | set(random.Random(25).sample(others, min(n, len(others))))


def cost(texts):
    """Passages per second of each built-in model on the same texts, one thread."""
    from loomcli.embeddings import builtin

    for model in ("use-multilingual-v3", "minilm"):
        embedder = builtin(model, bulk=True)
        embedder.embed(texts[:2])  # loaded
        t = time.perf_counter()
        c = time.process_time()
        embedder.embed(texts)
        print(f"  {model}: {len(texts) / (time.perf_counter() - t):.1f} passages/s wall, "
              f"{len(texts) / (time.process_time() - c):.1f} per CPU second")


def root_paths(store):
    """Each file's path as the questions name it: its root's name, then its path inside
    (display paths leave the first root's name out)."""
    return dict(store.conn.execute("SELECT f.id, r.name || '/' || f.relpath FROM files f "
                                   "JOIN roots r ON r.id = f.root_id"))


def floor_report(label, sets, index, vectors, paths, embedder, among=None):
    """Where a model's similarity floor falls: the best passage of nonsense queries, of
    each question's target files, and how many questions the floor would lose."""
    from loomcli.search import retrieve

    best_target = []
    for qs in sets.values():
        for q in qs:
            hits = [p.score for p in index.top(vectors[q["q"]], 2000, among)
                    if paths.get(p.file_id) in q["targets"]]
            best_target.append(hits[0] if hits else 0.0)
    best_target.sort()
    junk = [(index.top(embedder.embed([t])[0], 1, among)[0].score, t) for t in NONSENSE]
    print(f"  {label}nonsense queries, best passage anywhere: "
          + ", ".join(f"{t!r} {s:.2f}" for s, t in sorted(junk)))
    for pct in (5, 10, 25, 50):
        print(f"  {label}target files' best passage, {pct}th percentile: "
              f"{best_target[len(best_target) * pct // 100]:.2f}")
    least = retrieve.floor(index)
    print(f"  {label}questions whose target's best passage is under the floor "
          f"({least:.3f}): {sum(1 for s in best_target if s < least)}/{len(best_target)}")


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
                    "python/: index it first (and, with --minilm, into MINILM with "
                    "MiniLM's vectors for every file)")
    ap.add_argument("--grid", action="store_true")
    ap.add_argument("--minilm", type=Path, help="an index of the same corpus for MiniLM")
    ap.add_argument("--pool", type=int, help="rank among the targets and this many others")
    ap.add_argument("--embed-pool", action="store_true")
    ap.add_argument("--cost", action="store_true")
    args = ap.parse_args()
    for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # as in a loom process
        os.environ.setdefault(name, "1")
    if args.build:
        build(args.work, args.build)
        if args.minilm:
            build(args.minilm, args.build, "minilm")
    os.environ["LOOM_CONFIG"] = str(args.work / "meaning.toml")

    from loomcli.operations import Corpus
    from loomcli.search import retrieve, semantic
    from loomcli.store import Store

    corpus = Corpus.default()
    raw = Store.open(corpus.index_path)
    store = Cached(raw)
    embedder = corpus._embedder()
    files = [fid for fid, _ in raw.paths()]
    paths = root_paths(raw)
    sets = {name: tomllib.loads(path.read_text())["q"] for name, path in SETS.items()}
    among = None
    if args.pool is not None:
        chosen = pool_paths(paths, sets, args.pool)
        among = tuple(fid for fid, p in paths.items() if p in chosen)
        print(f"pool: {len(among)} files (targets and {args.pool} others); every recipe "
              "ranks these only")
    mini = None
    if args.minilm:
        from loomcli.embeddings import builtin
        from loomcli.embeddings.build import embed_pending

        raw2 = Store.open(args.minilm / "index.db")
        paths2 = root_paths(raw2)
        among2 = None if among is None else tuple(f for f, p in paths2.items() if p in chosen)
        if args.embed_pool:
            report = embed_pending(PoolStore(raw, among or paths), embedder)
            rate = report.passages / max(report.seconds, 1e-9)
            print(f"USE {report.summary()} = {rate:.1f} passages/s")
            report = embed_pending(PoolStore(raw2, among2 or paths2), builtin("minilm"))
            rate = report.passages / max(report.seconds, 1e-9)
            print(f"MiniLM {report.summary()} = {rate:.1f} passages/s")
        mini_embedder = builtin("minilm")
        mini_index = semantic.vector_index(raw2, mini_embedder.identity, 384)
        mini = (Cached(raw2), mini_index, mini_embedder, paths2, among2)
        print(f"MiniLM: {len(mini_index):,} passages with vectors")
    dims = raw.vector_dims(embedder.identity)
    index = semantic.vector_index(raw, embedder.identity, max(dims, key=lambda d: dims[d]))
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
        "BM25 (--mode bm25)": lambda q, v: named(r.file_id for r in retrieve.bm25(
            store, q, 10, among=among)),
        "vectors alone, no floor": lambda q, v: named(r.file_id for r in retrieve.semantic(
            store, index, v, 10, among, least=0.0)),
        "vectors alone (--mode semantic)": lambda q, v: named(
            r.file_id for r in retrieve.semantic(store, index, v, 10, among)),
        "hybrid now (passage-level RRF)": lambda q, v: named(r.file_id for r in retrieve.hybrid(
            store, index, v, q, 10, among)),
    }
    if among is None:
        recipes["hybrid before (file-level RRF)"] = lambda q, v: named(
            old_hybrid(store, index, v, q))
    if mini is not None:
        m_store, m_index, m_embedder, m_paths, m_among = mini
        t = time.perf_counter()
        m_vectors = {q["q"]: m_embedder.embed([q["q"]])[0] for qs in sets.values() for q in qs}
        print(f"MiniLM query embedding {(time.perf_counter() - t) * 1000 / n_q:.0f} ms each")

        def m_named(ids):
            return [m_paths.get(i, "?") for i in ids]

        recipes["MiniLM vectors, no floor"] = lambda q, v: m_named(
            r.file_id for r in retrieve.semantic(m_store, m_index, m_vectors[q], 10, m_among,
                                                 least=0.0))
        recipes["MiniLM vectors (--mode semantic)"] = lambda q, v: m_named(
            r.file_id for r in retrieve.semantic(m_store, m_index, m_vectors[q], 10, m_among))
        recipes["MiniLM hybrid (auto)"] = lambda q, v: m_named(
            r.file_id for r in retrieve.hybrid(m_store, m_index, m_vectors[q], q, 10, m_among))
    header = None
    for name, fn in recipes.items():
        line = f"{name:<36}"
        cols = []
        for set_name, qs in sets.items():
            for g, members in groups(qs).items():
                ranks = [rank_of(fn(q["q"], vectors[q["q"]]), q["targets"])
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
    floor_report("", sets, index, vectors, paths, embedder, among)
    if mini is not None:
        floor_report("MiniLM, ", sets, m_index, m_vectors, m_paths, m_embedder, m_among)
    if args.cost:
        from loomcli.embeddings import passages as cut

        texts = []
        for fid in sorted(among or files)[:200]:
            texts += cut(raw.text_bytes(fid, 0, 20000).decode("utf-8", "ignore"))[1][:2]
        print("cost of embedding, the same passages:")
        cost(texts[:256])


if __name__ == "__main__":
    main()
