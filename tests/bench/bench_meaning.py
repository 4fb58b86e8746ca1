"""Search by meaning: recall@5 and MRR of BM25, vectors and hybrid on questions people ask.

    python tests/bench/bench_meaning.py [--work /tmp/eval] [--build]

The questions (tests/bench/eval/questions.toml) are written by hand the way people ask:
40 in everyday English, 20 in Italian about the same English documents, and 20 in the
documents' own words, over the kernel docs (linux-doc-6.1) and the LaTeX manuals
(texlive-latex-base-doc). `--build` indexes both into WORK/index.db, first text only,
then the vectors (the built-in model), and reports time, passages/s, peak RSS and
index growth. Then, for every question, the rank of its first target file under:

- `loom search` before this change (BM25, all words, else any), and BM25 over the
  question's content words (OR);
- vectors alone (a file scores as its best passage);
- Loom 0.7's recipe: one vector per file (here the mean of its passage vectors), cosine,
  fused with BM25;
- hybrid (reciprocal rank fusion) at several weights, and what `loom search` ships.

And for ask: how often the answer string is inside what would be sent (top 5 files,
8,000 characters each) when the target file is among them, with and without passage
similarity in the window choice.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = Path("/usr/share/doc/linux-doc-6.1/Documentation")
LATEX = Path("/usr/share/doc/texlive-doc")


def build(work: Path, kernel: Path, latex: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    db = work / "index.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    base = f'db_path = "{db}"\nextensions = ["rst", "txt"]\n'
    (work / "text.toml").write_text(base + "[embeddings]\nenabled = false\n")
    (work / "meaning.toml").write_text(base + "[embeddings]\nenabled = true\n")
    loom = [sys.executable, "-m", "loomcli"]
    for name, args in (("text", ["scan", str(kernel), str(latex)]), ("meaning", ["scan"])):
        env = {**os.environ, "LOOM_CONFIG": str(work / f"{name}.toml")}
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t = time.perf_counter()
        out = subprocess.run([*loom, *args, "--json"], env=env, capture_output=True,
                             text=True, check=False)
        dt = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        size = sum(os.path.getsize(p) for p in (db, f"{db}-wal") if os.path.exists(p))
        print(f"scan ({name}): {dt:.1f} s, peak RSS of one process {peak / 1024:.0f} MB"
              f"{'' if peak > before else ' (not above the previous step)'}, index "
              f"{size / 1e6:.1f} MB")
        if name == "meaning":
            import json

            v = json.loads(out.stdout)["vectors"]
            print(f"  vectors: {v['embedded']} files, {v['passages']} passages in "
                  f"{v['seconds']:.1f} s = {v['passages'] / max(v['seconds'], 1e-9):.0f} "
                  f"passages/s; pending {v['pending']}; error {v['error']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/eval"))
    ap.add_argument("--kernel", type=Path, default=KERNEL)
    ap.add_argument("--latex", type=Path, default=LATEX)
    ap.add_argument("--build", action="store_true")
    args = ap.parse_args()
    if args.build:
        build(args.work, args.kernel, args.latex)
    os.environ["LOOM_CONFIG"] = str(args.work / "meaning.toml")
    evaluate(args.work)


def ranks_of(paths: list[str], targets: list[str]) -> int | None:
    for i, p in enumerate(paths, 1):
        if p in targets:
            return i
    return None


def evaluate(work: Path) -> None:
    import numpy as np

    from loomcli.operations import Corpus
    from loomcli.search import semantic
    from loomcli.search.retrieve import rank_files
    from loomcli.search.text import retrieval_query
    from loomcli.store import Store

    questions = tomllib.loads((ROOT / "tests/bench/eval/questions.toml").read_text())["q"]
    corpus = Corpus.default()
    store = Store.open(corpus.index_path)
    embedder = corpus._embedder()
    size = int(embedder.embed(["size"]).shape[1])
    index = semantic.vector_index(store, embedder.identity, size)
    # Loom 0.7's recipe: one vector per file (the mean of its passages), cosine.
    files = np.unique(index.ids)
    means = np.zeros((len(files), index.dim), dtype=np.float32)
    row_of = {int(f): i for i, f in enumerate(files)}
    full = index.vecs.astype(np.float32) * index.scales[:, None]
    np.add.at(means, np.searchsorted(files, index.ids), full)
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    del row_of, full
    paths = {fid: p for fid, (p, _, _) in store.hits_for([int(f) for f in files]).items()}

    def named(ids: list[int]) -> list[str]:
        return [paths.get(i, "?") for i in ids]

    methods: dict[str, list[tuple[dict, int | None]]] = {}

    def record(name: str, q: dict, ids: list[int]) -> None:
        methods.setdefault(name, []).append((q, ranks_of(named(ids)[:10], q["targets"])))

    t_embed = 0.0
    for q in questions:
        text = q["q"]
        t = time.perf_counter()
        qv = embedder.embed([text])[0]
        t_embed += time.perf_counter() - t
        auto = [fid for fid, _ in rank_files(store, text, 50, "auto")]
        anyw = [fid for fid, _ in rank_files(store, retrieval_query(text), 50, "OR")]
        fill = [fid for fid, _ in rank_files(store, retrieval_query(text), 50, "fill")]
        sem = [p.file_id for p in index.rank(qv, 50)]
        whole = files[np.argsort(-(means @ qv))[:50]].tolist()
        pinned: set[int] = set()
        for word in semantic.identifiers(text):
            pinned.update(fid for fid, _ in rank_files(store, word, 3, "AND"))
        record("loom search before (BM25, AND then OR)", q, auto)
        record("BM25, OR over content words", q, anyw)
        record("BM25, content words: all, then any", q, fill)
        record("vectors alone (best passage)", q, sem)
        record("Loom 0.7 recipe: file vectors + BM25 (RRF)", q,
               [f for f, _, _ in semantic.fuse(auto, whole, weight=1.0)])
        for kw_name, kw in (("AND-then-OR", auto), ("OR", anyw), ("all-then-any", fill)):
            for w in (1.0, 1.5, 2.0):
                record(f"hybrid: BM25 {kw_name} + vectors, weight {w}", q,
                       [f for f, _, _ in semantic.fuse(kw, sem, pinned, weight=w)])
        for mode in ("bm25", "hybrid"):
            shipped = corpus.search(text, 10, 0, mode)
            methods.setdefault(f"loom search now (--mode {mode})", []).append(
                (q, ranks_of([h.path for h in shipped.hits], q["targets"])))

    groups = [("people", "en"), ("people", "it"), ("doc", "en")]
    print(f"\n{len(questions)} questions; query embedding {1000 * t_embed / len(questions):.1f} "
          f"ms each; {len(index)} passages")
    print(f"{'method':<52}" + "".join(f"{k}-{lang} R@5  MRR   " for k, lang in groups))
    for name, rows in methods.items():
        line = f"{name:<52}"
        for kind, lang in groups:
            ranks = [r for q, r in rows if q["kind"] == kind and q["lang"] == lang]
            r5 = sum(1 for r in ranks if r and r <= 5) / len(ranks)
            mrr = sum(1 / r for r in ranks if r) / len(ranks)
            line += f"{'':>10}{r5:.2f}  {mrr:.2f}  "
        print(line)

    print("\nask: answer string inside what is sent (target among the 5 files sent)")
    from loomcli import operations

    for label, mode, meaning in (("BM25 retrieval, lexical window", "bm25", False),
                                 ("hybrid retrieval, lexical window", "hybrid", False),
                                 ("hybrid retrieval, lexical + passage window", "hybrid",
                                  True)):
        found = inside = 0
        saved = operations.Corpus._near
        if not meaning:
            operations.Corpus._near = lambda self, *a: []  # type: ignore[method-assign]
        try:
            for q in questions:
                if q["kind"] != "people":
                    continue
                prompt = corpus.prompt(q["q"], 5, mode)
                if prompt is None:
                    continue
                blocks = prompt.user.split("\n## [")
                for block in blocks:
                    path = block.lstrip("# [").split("]", 1)[0]
                    if path in q["targets"]:
                        found += 1
                        inside += q["answer"].lower() in block.lower()
                        break
        finally:
            operations.Corpus._near = saved  # type: ignore[method-assign]
        print(f"  {label:<46} target sent for {found}/60, answer inside {inside}/{found} "
              f"= {inside / max(found, 1):.2f}")


if __name__ == "__main__":
    main()
