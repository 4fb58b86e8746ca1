"""Does what `loom ask` sends contain the answer? An evaluation on long real documents.

    python tests/bench/bench_ask.py [--work /tmp/loom-bench] [--questions 300]

Documents: the kernel docs and the 20 LaTeX manuals that bench_scan.py indexed, those
longer than 20,000 characters. For each sampled document an answer sentence is picked
past character 10,000 (deep: head-only excerpts cannot hold it) that has at least three
distinctive words (rare in the corpus). The question names three of them, inflected
differently (configure -> configuring), plus the document's most frequent topic word, in
a question template. Success: the whole answer sentence lies inside what is sent.

Compared at the same budget (8,000 characters, head 1,200): head-only; the single-window
rule loom started from (1,200-char head, one window, 6-letter stems, each term counted at
most 3 times, rarity-weighted); and loom's excerpts. Also: recall@5 of retrieval (is the
source document among the top five hits for the question).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sqlite3
from collections import Counter
from pathlib import Path

from loomcli.search.excerpt import excerpt
from loomcli.search.text import STOPWORDS, retrieval_query
from loomcli.store import Store

BUDGET, HEAD = 8000, 1200
TEMPLATES = [
    "How does {a} work with {b} and {c} in {t}?",
    "What does the {t} documentation say about {a}, {b} and {c}?",
    "When is {a} {b} used for {c}?",
    "Explain {a} and {b} ({c}) for {t}.",
    "Where are {a} {b} {c} described?",
]
WORD = re.compile(r"[A-Za-z]{5,}")
SENTENCE = re.compile(r"[^\n.!?]{40,300}[.!?]")


def inflect(word: str, rng: random.Random) -> str:
    w = word.lower()
    options = [w]
    if w.endswith("s"):
        options.append(w[:-1])
    else:
        options.append(w + "s")
    if w.endswith("ed"):
        options.append(w[:-2] + "ing")
    elif w.endswith("ing"):
        options.append(w[:-3] + "ed")
    elif w.endswith("e"):
        options.append(w[:-1] + "ing")
    return rng.choice(options)


def baseline(text: str, question: str) -> list[tuple[int, int]]:
    """The single-window rule: 1,200-char head, one window, 6-letter stems, cap 3."""
    if len(text) <= BUDGET:
        return [(0, len(text))]
    stems = {w[:6] for w in re.findall(r"\w+", question.lower())
             if w not in STOPWORDS and len(w) >= 3}
    size = BUDGET - HEAD
    lower = text.lower()
    hits = {s: [m.start() for m in re.finditer(r"(?<!\w)" + re.escape(s), lower)] for s in stems}
    hits = {s: h for s, h in hits.items() if h}
    if not hits:
        return [(0, HEAD)]
    windows = max(1, len(text) // size)
    weight = {s: math.log(1 + windows / len({p // size for p in h})) for s, h in hits.items()}
    best, best_start = -1.0, HEAD
    for start in range(HEAD, max(HEAD + 1, len(text) - size + 1), 200):
        score = sum(weight[s] * min(3, sum(1 for p in h if start <= p < start + size))
                    for s, h in hits.items())
        if score > best:
            best, best_start = score, start
    return [(0, HEAD), (best_start, best_start + size)]


def rank_bm25_windows(text: str, question: str) -> list[tuple[int, int]]:
    """The alternative the issue suggests: windows as documents, scored by rank-bm25."""
    from rank_bm25 import BM25Okapi

    if len(text) <= BUDGET:
        return [(0, len(text))]
    size, step = BUDGET - HEAD, (BUDGET - HEAD) // 2
    starts = list(range(HEAD, max(HEAD + 1, len(text) - size + 1), step))
    tok = lambda s: [w[:6] for w in re.findall(r"\w+", s.lower())]  # noqa: E731
    bm25 = BM25Okapi([tok(text[a:a + size]) for a in starts])
    query = [w for w in tok(question) if w not in STOPWORDS]
    scores = bm25.get_scores(query)
    best = max(range(len(starts)), key=lambda i: scores[i])
    return [(0, HEAD), (starts[best], starts[best] + size)]


def covered(spans: list[tuple[int, int]], a: int, b: int) -> bool:
    return any(s <= a and b <= e for s, e in spans)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/loom-bench"))
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    db = args.work / "loom-home-mem" / "index.db"
    store = Store.open(db)
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT f.id, d.body FROM files f JOIN docs d ON d.id = f.id "
                        "WHERE length(d.body) > 20000").fetchall()
    doc_freq: Counter[str] = Counter()
    for _, body in conn.execute("SELECT id, body FROM docs"):
        doc_freq.update({w.lower() for w in WORD.findall(body)})
    n_docs = conn.execute("SELECT count(*) FROM docs").fetchone()[0]
    rng = random.Random(args.seed)
    rng.shuffle(rows)
    cases = []
    for file_id, body in rows:
        if len(cases) >= args.questions:
            break
        in_doc = Counter(w.lower() for w in WORD.findall(body))
        topic = next((w for w, _ in in_doc.most_common(40) if w not in STOPWORDS), None)
        candidates = []
        for m in SENTENCE.finditer(body, 10_000):
            words = [w for w in dict.fromkeys(x.lower() for x in WORD.findall(m.group()))
                     if w not in STOPWORDS and in_doc[w] <= 4 and doc_freq[w] <= n_docs * 0.02]
            if len(words) >= 3:
                candidates.append((m.start(), m.end(), words))
        if not candidates or topic is None:
            continue
        a, b, words = rng.choice(candidates)
        picked = rng.sample(words, 3)
        q = rng.choice(TEMPLATES).format(a=inflect(picked[0], rng), b=inflect(picked[1], rng),
                                         c=inflect(picked[2], rng), t=topic)
        cases.append((file_id, body, a, b, q))

    head_only = base = ours = recall5 = bm25w = 0
    for file_id, body, a, b, q in cases:
        head_only += covered([(0, BUDGET)], a, b)
        base += covered(baseline(body, q), a, b)
        bm25w += covered(rank_bm25_windows(body, q), a, b)
        ours += covered(excerpt(body, q, BUDGET, HEAD).spans, a, b)
        hits = store.search(retrieval_query(q), 5, operator="OR")  # as loom ask does
        recall5 += any(h.file_id == file_id for h in hits)
    n = len(cases)
    print(f"{n} questions over {len(rows)} documents longer than 20,000 characters; "
          f"answers start past character 10,000; budget {BUDGET}, head {HEAD}")
    print(f"answer inside what is sent: head-only {head_only / n:.3f}, "
          f"single-window rule {base / n:.3f}, rank-bm25 windows {bm25w / n:.3f}, "
          f"loom {ours / n:.3f} (goal >= 0.90)")
    print(f"retrieval recall@5: {recall5 / n:.3f}")


if __name__ == "__main__":
    main()
