r"""Where the target file ranks in BM25, in the vectors and in hybrid, question by question
(issue 31, item 3: the fusion never worse than its inputs), and the file-level fusion
recipes tried for item 1. Over the index LOOM_HOME (or LOOM_CONFIG) names, with vectors:

    LOOM_HOME=/work/evalidx/use python tests/bench/bench_fusion.py \
        tests/bench/eval/personal.toml tests/bench/eval/everyday.toml \
        tests/bench/eval/questions.toml [--variants] [--ranks ranks.json] [--half tune]

Prints recall@1 / recall@5 / recall@10 / MRR@10 per set and language for each recipe, then
how many questions have their target in the first 3 of both BM25 and the vectors but below
3rd in hybrid; `--ranks` writes every question's rank in each list. `--half tune` takes
the even-numbered questions of each set (first, third, …: the half recipes were chosen on),
`--half held` the others (held out), both by default. `--moves RECIPE` lists, for every
other fused recipe, the questions whose target crossed rank 1, 5 or 10 against RECIPE
(e.g. `--only "ranks alone" --moves "ranks alone"`: what the strength term won and lost).
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_retrieval import Cached  # run as a script: tests/bench is on sys.path

VARIANTS: dict[str, tuple[dict[str, float], dict[str, Any]]] = {
    # name: (module constants of retrieve, Weights fields)
    "file by best passage": ({"NEXT_PASSAGE_WEIGHT": 0.0}, {}),
    "file vectors 1.0": ({}, {"file_vector": 1.0}),
    "best passage, 1.0": ({"NEXT_PASSAGE_WEIGHT": 0.0}, {"file_vector": 1.0}),
    "best passage, 0.5": ({"NEXT_PASSAGE_WEIGHT": 0.0}, {"file_vector": 0.5}),
    "no file vectors": ({}, {"file_vector": 0.0}),
    "best passage, fb 1": ({"NEXT_PASSAGE_WEIGHT": 0.0}, {"file_bm25": 1.0}),
    "next passages 0.3": ({"NEXT_PASSAGE_WEIGHT": 0.3}, {}),
    "best passage, 1.5": ({"NEXT_PASSAGE_WEIGHT": 0.0}, {"file_vector": 1.5}),
    "short files filled": ({}, {"short_margin": 1.0}),  # whenever whole in the pool
    "filled, next 0.3": ({"NEXT_PASSAGE_WEIGHT": 0.3}, {"short_margin": 1.0}),
    "short margin 0": ({}, {"short_margin": 0.0}),
    "short margin 0.05": ({}, {"short_margin": 0.05}),
    "no short files filled": ({}, {"short_margin": None}),  # as before issue 31
    "ranks alone": ({}, {"strength": 0.0}),  # before the strength term
    "strength 0.1": ({}, {"strength": 0.1}),
    "strength 0.2": ({}, {"strength": 0.2}),
    "strength 0.3": ({}, {"strength": 0.3}),
    "strength 0.15 m0.7": ({}, {"strength": 0.15, "strength_meaning": 0.7}),
    "strength 0.2 m0.7": ({}, {"strength": 0.2, "strength_meaning": 0.7}),
    "strength 0.15 m1": ({}, {"strength": 0.15, "strength_meaning": 1.0}),
    "rrf k 20": ({"RRF_K": 20}, {}),
    "rrf k 30": ({"RRF_K": 30}, {}),
    "rrf k 40": ({"RRF_K": 40}, {}),
}


class CachedIndex:
    """The vector index's closest passages, kept per query vector (recipes ask the same)."""

    def __init__(self, index) -> None:
        self._index = index
        self._top: dict[tuple[bytes, int, object], list] = {}

    def top(self, vector, limit: int, among=None) -> list:
        key = (vector.tobytes(), limit, tuple(among) if among is not None else None)
        if key not in self._top:
            self._top[key] = self._index.top(vector, limit, among)
        return self._top[key]

    def __len__(self) -> int:
        return len(self._index)

    def __getattr__(self, name):
        return getattr(self._index, name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sets", nargs="+", type=Path)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--ranks", type=Path)
    ap.add_argument("--only", action="append", help="a variant to try (repeatable)")
    ap.add_argument("--half", choices=("tune", "held", "all"), default="all")
    ap.add_argument("--moves", help="a recipe to compare the others with, question by question")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as in a loom process

    from loomcli.operations import Corpus
    from loomcli.search import retrieve, semantic
    from loomcli.store import Store

    corpus = Corpus.default()
    raw = Store.open(corpus.index_path)
    store = Cached(raw)
    paths = dict(raw.paths())
    embedder = corpus._embedder()
    dims = raw.vector_dims(embedder.identity)
    index = CachedIndex(semantic.vector_index(raw, embedder.identity,
                                              max(dims, key=lambda d: dims[d])))
    sets = {p.stem: tomllib.loads(p.read_text())["q"] for p in args.sets}
    if args.half != "all":
        sets = {k: qs[args.half == "held"::2] for k, qs in sets.items()}
    vectors = {q["q"]: embedder.embed([q["q"]])[0] for qs in sets.values() for q in qs}
    print(f"{len(index):,} passages, {len(paths):,} files; questions: {args.half}; "
          "columns: recall@1/@5/@10/MRR@10")

    def named(ranked) -> list[str]:
        return [paths.get(r.file_id, "?") for r in ranked]

    def variant(constants: dict[str, float], weights: dict[str, float]) -> Callable:
        def run(q: str, v) -> list[str]:
            old = {k: getattr(retrieve, k) for k in constants}
            for k, x in constants.items():
                setattr(retrieve, k, x)
            try:
                return named(retrieve.hybrid(store, index, v, q, 10,
                                             weights=retrieve.Weights(**weights)))
            finally:
                for k, x in old.items():
                    setattr(retrieve, k, x)
        return run

    recipes: dict[str, Callable] = {
        "bm25": lambda q, v: named(retrieve.bm25(store, q, 10)),
        "semantic": lambda q, v: named(retrieve.semantic(store, index, v, 10)),
        "hybrid": lambda q, v: named(retrieve.hybrid(store, index, v, q, 10)),
    }
    if args.variants or args.only:
        recipes.update({name: variant(*spec) for name, spec in VARIANTS.items()
                        if not args.only or name in args.only})
    ranks: dict[str, dict[str, int | None]] = {}
    where: dict[str, str] = {}
    for name, fn in recipes.items():
        line = f"{name:<22}"
        for set_name, qs in sets.items():
            by_lang: dict[str, list[int | None]] = {}
            for q in qs:
                got = fn(q["q"], vectors[q["q"]])
                rank = next((i for i, p in enumerate(got[:10], 1) if p in q["targets"]), None)
                ranks.setdefault(q["q"], {})[name] = rank
                where[q["q"]] = f"{set_name}-{q.get('lang', '')}"
                by_lang.setdefault(q.get("lang", ""), []).append(rank)
            for lang, rs in sorted(by_lang.items()):
                at = [sum(1 for r in rs if r and r <= k) / len(rs) for k in (1, 5, 10)]
                mrr = sum(1 / r for r in rs if r) / len(rs)
                line += (f"  {set_name}-{lang}({len(rs)}) "
                         + "/".join(f"{x:.2f}" for x in (*at, mrr)))
        print(line, flush=True)
    worse = [(q, r) for q, r in ranks.items() if (r["bm25"] or 99) <= 3
             and (r["semantic"] or 99) <= 3 and (r["hybrid"] or 99) > 3]
    print(f"target in both lists' first 3, below 3rd in hybrid: {len(worse)}")
    for q, r in worse:
        print(f"  {q!r}: bm25 {r['bm25']}, semantic {r['semantic']}, hybrid {r['hybrid']}")
    if args.moves:
        moves(ranks, where, args.moves)
    if args.ranks:
        args.ranks.write_text(json.dumps(ranks, indent=1))


def moves(ranks: dict[str, dict[str, int | None]], where: dict[str, str], base: str) -> None:
    """Per fused recipe: how many targets moved up and down against `base`, and each
    question whose target crossed rank 1, 5 or 10 (won or lost)."""
    for name in next(iter(ranks.values())):
        if name in ("bm25", "semantic", base):
            continue
        up = sum(1 for r in ranks.values() if (r[name] or 99) < (r[base] or 99))
        down = sum(1 for r in ranks.values() if (r[name] or 99) > (r[base] or 99))
        print(f"{name} against {base}: {up} up, {down} down")
        for q, r in ranks.items():
            a, b = r[base] or 99, r[name] or 99
            crossed = next((k for k in (1, 5, 10) if min(a, b) <= k < max(a, b)), None)
            if crossed:
                verb = "won" if b < a else "lost"
                print(f"  {verb} @{crossed} {r[base]} -> {r[name]} [{where[q]}] {q}")


if __name__ == "__main__":
    main()

