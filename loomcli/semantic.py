"""Ranking by meaning, and its fusion with BM25.

Vector search is brute force over the int8 passage vectors of one model, in numpy:
every passage is compared with the question (a matrix-vector product), a file scores
as its best passage. Measured faster than an approximate index needs to be at this
scale (README, "Search by meaning"); a running server (MCP, HTTP, watch) keeps the
matrix in memory until the next scan changes a vector.

Fusion is reciprocal rank fusion (RRF): a file's score is the sum over the two lists
of weight / (RRF_K + rank). Semantic ranks weigh SEMANTIC_WEIGHT, BM25 ranks 1; a file
whose text holds a rare identifier of the query verbatim is moved to the top.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from loomcli.store import Store

RRF_K = 60
# Chosen on the evaluation set (README, "Search by meaning"): semantic ranks counted
# double. Files holding all or some rare words of the query were measured as extra
# pins too, and lost recall; only identifiers are pinned.
SEMANTIC_WEIGHT = 2.0
CANDIDATES = 50  # files taken from each list before fusing
POOL = 2000  # passages closest to the query that rank the files
# A file's score: its best passage, + 0.6 x its second, + 0.36 x its third (measured on
# the evaluation set: recall@5 0.47 / 0.65 against 0.42 / 0.60 for the best alone).
PASSAGES_COUNTED, NEXT_PASSAGE_WEIGHT = 3, 0.6
# Identifiers and settings: a word with an underscore, a digit, an inner dot, or a
# lower-to-upper case change (panic_on_oops, ext4, vm.swappiness, maxUserWatches).
IDENTIFIERS_MAX = 8
IDENTIFIER = re.compile(r"\b(?=\w*[_\d]|\w+\.\w|[a-z]+[A-Z])[\w.]{4,}\b")


@dataclass
class Passage:
    file_id: int
    score: float  # cosine similarity of the best passage
    start: int  # byte range of that passage in the file's text
    end: int


def _arrays(dim: int, spans: bytes, vecs: bytes, scales: bytes) -> tuple[Any, Any, Any]:
    """One file's vectors row as arrays: passages' byte ranges (n x 2 int32), int8
    vectors (n x dim) and their float32 scales."""
    import numpy as np

    n = len(scales) // 4
    return (np.frombuffer(spans, dtype=np.int32).reshape(n, 2),
            np.frombuffer(vecs, dtype=np.int8).reshape(n, dim),
            np.frombuffer(scales, dtype=np.float32))


def _similarities(vecs: Any, scales: Any, query: Any) -> Any:
    """Cosine similarity of each int8 vector (times its scale) to the query."""
    import numpy as np

    out = np.empty(len(scales), dtype=np.float32)
    q = np.asarray(query, dtype=np.float32)
    step = 16384  # int8 -> float32 a block at a time: bounded memory
    for i in range(0, len(scales), step):
        out[i:i + step] = vecs[i:i + step].astype(np.float32) @ q
    return out * scales


class VectorIndex:
    """Every passage vector of one model and size, as one int8 matrix."""

    def __init__(self, store: Store, model: str, size: int | None = None) -> None:
        import numpy as np

        ids, spans, vecs, scales = [], [], [], []
        dim = 0
        for file_id, d, sp, vc, sc in store.iter_vectors(model, size):
            file_spans, file_vecs, file_scales = _arrays(d, sp, vc, sc)
            if len(file_scales) == 0:
                continue
            dim = d
            ids.append(np.full(len(file_scales), file_id, dtype=np.int64))
            spans.append(file_spans)
            vecs.append(file_vecs)
            scales.append(file_scales)
        self.dim = dim
        self.ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        self.spans = np.concatenate(spans) if spans else np.zeros((0, 2), dtype=np.int32)
        self.vecs = np.concatenate(vecs) if vecs else np.zeros((0, 1), dtype=np.int8)
        self.scales = np.concatenate(scales) if scales else np.zeros(0, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.ids)

    def similarities(self, query: Any) -> Any:
        return _similarities(self.vecs, self.scales, query)

    def rank(self, query: Any, limit: int) -> list[Passage]:
        """The `limit` files closest to the query. A file scores as its best passage plus
        its next ones at decreasing weight (a file that answers in several places is
        likelier the one), among the POOL passages closest to the query."""
        import numpy as np

        if len(self) == 0 or self.dim != len(query):
            return []
        sims = self.similarities(query)
        take = min(len(sims), POOL)
        top = np.argpartition(-sims, take - 1)[:take]
        top = top[np.argsort(-sims[top], kind="stable")]
        best: dict[int, Passage] = {}
        seen: dict[int, int] = {}
        for i in top.tolist():
            fid = int(self.ids[i])
            k = seen.get(fid, 0)
            if k == 0:
                best[fid] = Passage(fid, float(sims[i]), int(self.spans[i, 0]),
                                    int(self.spans[i, 1]))
            elif k < PASSAGES_COUNTED:
                best[fid].score += float(sims[i]) * NEXT_PASSAGE_WEIGHT ** k
            seen[fid] = k + 1
        return sorted(best.values(), key=lambda p: -p.score)[:limit]


_cache: dict[tuple[str, str, int], tuple[int, VectorIndex]] = {}
_cache_lock = threading.Lock()


def vector_index(store: Store, model: str, size: int) -> VectorIndex:
    """The store's vectors of `model` with `size` numbers each (vectors are keyed by
    both: a server's model re-pulled under the same name may change size), kept between
    calls in a long-running process and reloaded when a scan has changed any."""
    key = (str(store.path), model, size)
    generation = store.vector_generation()
    with _cache_lock:
        cached = _cache.get(key)
        if cached and cached[0] == generation:
            return cached[1]
    index = VectorIndex(store, model, size)
    with _cache_lock:
        _cache[key] = (generation, index)
    return index


def passage_scores(store: Store, file_id: int, model: str, query: Any
                   ) -> list[tuple[int, int, float]]:
    """(start byte, end byte, similarity) of every embedded passage of one file."""

    row = store.vectors_of(file_id, model)
    if row is None:
        return []
    dim, sp, vc, sc = row
    spans, vecs, scales = _arrays(dim, sp, vc, sc)
    if len(scales) == 0 or dim != len(query):
        return []
    sims = _similarities(vecs, scales, query)
    return [(int(a), int(b), float(s)) for (a, b), s in zip(spans.tolist(), sims.tolist(),
                                                             strict=True)]


def fuse(bm25: list[int], semantic: list[int], pinned: set[int] | None = None,
         weight: float = SEMANTIC_WEIGHT) -> list[tuple[int, float, str]]:
    """(file id, fused score, how it matched: bm25 | semantic | both), best first.
    `pinned` files (holding a query identifier verbatim) come first, in BM25 order."""
    scores: dict[int, float] = {}
    how: dict[int, str] = {}
    for rank, fid in enumerate(bm25, 1):
        scores[fid] = scores.get(fid, 0.0) + 1.0 / (RRF_K + rank)
        how[fid] = "bm25"
    for rank, fid in enumerate(semantic, 1):
        scores[fid] = scores.get(fid, 0.0) + weight / (RRF_K + rank)
        how[fid] = "both" if fid in how else "semantic"
    top = 1.0 + weight  # above any fused score
    for fid in pinned or ():
        if fid in scores:
            scores[fid] += top
    return sorted(((fid, s, how[fid]) for fid, s in scores.items()),
                  key=lambda t: -t[1])


def identifiers(query: str) -> list[str]:
    """The query's identifiers, each once, at most IDENTIFIERS_MAX (each costs a query)."""
    out: list[str] = []
    for m in IDENTIFIER.finditer(query):
        if m.group() not in out:
            out.append(m.group())
            if len(out) == IDENTIFIERS_MAX:
                break
    return out
