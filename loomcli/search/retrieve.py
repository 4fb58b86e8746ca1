"""The query plan of every search: terms → candidates from BM25 and vectors → fusion → hits.

The store runs the SQL (files and passages by BM25, for a parsed query: text.parse),
`semantic` the vectors (passages by cosine); this module decides what to ask each and how
to fuse their answers, so that following one search means reading one file; hits.py then
gives each ranked file its snippet.

Hybrid is fused passage by passage (reciprocal rank fusion): the passages BM25 ranks
best and those closest in meaning each get weight / (RRF_K + rank), a passage found by
both gets both, and a file scores as its best passage (plus its rank among whole files
by BM25, for files whose vectors are pending or whose words are spread out). A long
manual thus competes with a short note passage for passage, not by the number of its
pages. Ranks alone do not say how strong a match is: part of each file's score
(STRENGTH) is how close its best passage is and how strongly BM25 matches it. On top of
the fusion four rules:

- no match means no match: a passage that only resembles the question must reach
  the floor (`floor()`: calibrated on nonsense and on the evaluation sets), else it is not a
  candidate; with nothing left, the answer is empty (exit 1, `ask` sends nothing);
- exact words win: files holding the query's quoted phrases, its identifiers, or (for a
  query of a few words, not a question) all its rare words come first;
- language-aware fusion: a question in another language than the passages closest to
  it (told by function words and scripts) leans on the vectors, since BM25 would only
  find other texts in the question's language;
- never worse than its inputs: a file BM25 and the vectors both rank in their first
  three is in hybrid's first three (`agreed_first`).

BM25 alone ranks a few words by `lexical`: every word first, as a preference that a file
holding the query's rare words shares, so a short note is not hidden behind a manual that
happens to hold every word.

Scores a person can read: semantic ones are cosines within [0, 1]; hybrid ones are the
fused score over the best possible (1.0 = first in every list), files matched exactly
(rule two) within [0.5, 1], the others within [0, 0.5).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from loomcli.records import Record
from loomcli.search.text import (
    STOPWORDS,
    identifiers,
    language,
    parse,
    query_words,
    retrieval_query,
)

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.store.seam import IndexStore as Store

RRF_K = 60
FILE_CANDIDATES = 50  # files BM25 ranks as whole files
PASSAGE_CANDIDATES = 200  # passages taken from each passage list
# Weights of the four lists in the fusion, chosen on both evaluation sets at once
# (tests/bench/bench_retrieval.py --grid; docs/benchmarks.md, "Search by meaning"): the
# best on each set within one question, where passages alone lost 0.10 of English.
PASSAGE_BM25_WEIGHT = 0.5
PASSAGE_VECTOR_WEIGHT = 0.5
FILE_BM25_WEIGHT = 0.5
FILE_VECTOR_WEIGHT = 2.0
VECTOR_POOL = 2000  # passages closest to the query that rank whole files by meaning
# A file by meaning, as a whole: its best passage + 0.6 x its second + 0.36 x its third
# (a file that answers in several places is likelier the one).
NEXT_PASSAGE_WEIGHT, PASSAGES_COUNTED = 0.6, 3
# ... but a note of one or two passages has no third place to answer in: when its last
# passage is within SHORT_MARGIN of the closest passage of the file first by that sum, it
# counts again for each passage the note lacks, so the note is not ranked below manuals
# for their length (issue 31: personal set 0.56 -> 0.70 English, 0.52 -> 0.76 Italian
# recall@5 in hybrid, the manual sets' recall@5 unchanged; docs/benchmarks.md). Counted
# always, it lost 0.02-0.05 of the manual sets: there a short page that is merely close
# would pass the manual that answers.
SHORT_MARGIN = 0.03
# Ranks alone hide how strong a match is: a note whose passage is the closest of all by
# meaning scores barely more than one in fifth place, and a manual ranked fair-to-middling
# in every list passes it. So STRENGTH of the fused score is how close each file's best
# passage is (the cosine rescaled from the floor to the best of the query: 0 to 1) and how
# strongly BM25 matches its best passage (over the best passage's score), STRENGTH_MEANING
# of it the former (issue 31; chosen on the even-numbered questions of every set,
# docs/benchmarks.md).
STRENGTH, STRENGTH_MEANING = 0.15, 0.8
CROSS_LANGUAGE_BM25 = 0.25  # BM25's weights when the question's language is not the texts'
# The least cosine similarity of a passage found by meaning alone. What nonsense
# reaches grows with the number of passages (the best of more chance similarities):
# with the built-in model, at most 0.17 over the 17 passages of fixtures/notes and 0.29
# over the evaluation corpus's 31,178 ("zzzzqqq", "xkcd zorblat fnord", …), where the
# evaluation questions' best passage is above 0.31 for 95 of 100 (docs/benchmarks.md).
# The floor is FLOOR_BASE + FLOOR_PER_DECADE x log10(passages): 0.19 and 0.31 there.
FLOOR_BASE, FLOOR_PER_DECADE = 0.145, 0.037
# MiniLM's cosines run higher and grow faster with the index (nonsense reached 0.28 over
# fixtures/notes' 10 passages, 0.38 over 8,000 of the evaluation corpus, and over all its
# 37,954: 0.43 for "qwpoeiruty asdfjkl", 0.47 for "9f8e7d6c" among hex dumps): its own
# line, through 0.29 at 10 passages and 0.48 at 38,000 (it was 0.24 + 0.04 per decade,
# fitted on 8,000: 0.42 there, under two nonsense queries).
MINILM_FLOOR = (0.237, 0.053)  # 0.29 over 10 passages, 0.44 over 8,000, 0.48 over 38,000
FLOORS = {"local:minilm": MINILM_FLOOR}
# Once the closest passage reaches the floor (the question means something here), the
# passages down to this much below it are candidates too (the grid: recall with a floor
# of 0.2 as with none, 0.06 less Italian with the floor itself).
FLOOR_MARGIN = 0.1
AGREED = 3  # a file both lists rank this high is never below it in hybrid (agreed_first)
QUESTION_WORDS = 3  # more content words than this: a question (no rare-word pins)
RARE_SHARE = 0.02  # a word in at most this share of the files is rare
PIN_LIMIT = 50
LANGUAGE_SAMPLE = 5  # passages whose language is compared with the question's
LANGUAGE_SAMPLE_BYTES = 600
class Plan(Record):
    """What a query asks for."""

    __slots__ = ("text", "content", "phrases", "question", "language")

    def __init__(self, text: str, content: str, phrases: list[str], question: bool,
                 language: str | None) -> None:
        self.text = text
        self.content = content  # without function words: what BM25 ranks by
        self.phrases = phrases  # "quoted phrases"
        self.question = question  # more than QUESTION_WORDS content words
        self.language = language


def plan(query: str) -> Plan:
    phrases = [w for w in query_words(query) if " " in w]
    content = retrieval_query(query)
    if phrases:  # keep phrases whole (retrieval_query splits on spaces)
        rest = re.sub(r'"[^"]*"', " ", query)
        content = " ".join([f'"{p}"' for p in phrases] + [retrieval_query(rest)]).strip()
    words = [w for w in query_words(content) if w.lower() not in STOPWORDS]
    return Plan(query, content, phrases, len(words) > QUESTION_WORDS, language(query))


class Ranked(Record):
    __slots__ = ("file_id", "score", "match", "near")

    def __init__(self, file_id: int, score: float, match: str, near: int | None = None) -> None:
        self.file_id = file_id
        self.score = score
        self.match = match  # "bm25" | "semantic" | "both"
        self.near = near  # byte offset of the passage that matched by meaning


class Weights(Record):
    """The fusion's weights: module constants unless a benchmark tries others."""

    __slots__ = ("passage_bm25", "passage_vector", "file_bm25", "file_vector", "cross_language",
                 "floor", "pins", "short_margin", "strength", "strength_meaning", "extra")

    def __init__(self, passage_bm25: float = PASSAGE_BM25_WEIGHT,
                 passage_vector: float = PASSAGE_VECTOR_WEIGHT, file_bm25: float = FILE_BM25_WEIGHT,
                 file_vector: float = FILE_VECTOR_WEIGHT,
                 cross_language: float = CROSS_LANGUAGE_BM25, floor: float | None = None,
                 pins: bool = True, short_margin: float | None = SHORT_MARGIN,
                 strength: float = STRENGTH, strength_meaning: float = STRENGTH_MEANING,
                 extra: dict[str, Any] | None = None) -> None:
        self.passage_bm25 = passage_bm25
        self.passage_vector = passage_vector
        self.file_bm25 = file_bm25
        self.file_vector = file_vector
        self.cross_language = cross_language
        self.floor = floor  # None: floor(index)
        self.pins = pins
        self.short_margin = short_margin  # None: short files never count again
        self.strength = strength  # 0: ranks alone
        self.strength_meaning = strength_meaning
        self.extra: dict[str, Any] = extra if extra is not None else {}


def rank_files(store: Store, query: str, limit: int, operator: str = "auto",
               among: Sequence[int] | None = None, prefix: bool = False
               ) -> list[tuple[int, float]]:
    """(file id, BM25 score) best first, for a query as typed. `AND`, `OR`: every word,
    any word; `auto`: every word, else any; `fill`: the files holding every word first,
    then those holding any, up to limit (for questions: a long one rarely has all its
    words in one file). `among`: only these files (--glob, --path). `prefix`: the last
    word is being typed (text.parse)."""
    if operator == "fill":
        every = rank_files(store, query, limit, "AND", among, prefix)
        if len(every) < limit:
            seen = {fid for fid, _ in every}
            every += [h for h in rank_files(store, query, limit, "OR", among, prefix)
                      if h[0] not in seen]
        return every[:limit]
    for op in (("AND", "OR") if operator == "auto" else (operator,)):
        parsed = parse(query, op, prefix)
        if not parsed.words:
            return []
        found = store.rank(parsed, limit, among)
        if found:
            return found
    return []


def bm25(store: Store, query: str, limit: int, operator: str = "auto",
         among: Sequence[int] | None = None, prefix: bool = False) -> list[Ranked]:
    """Files by BM25. A question (more than QUESTION_WORDS content words) is ranked by
    any of its content words; a few words by `lexical` (`auto`). `prefix`: the last word
    is being typed (text.parse)."""
    p = plan(query)
    if operator == "OR" or p.question:
        found = rank_files(store, p.content, limit, "OR", among)
    elif operator == "auto":
        found = lexical(store, p, limit, among, prefix)
    else:
        found = rank_files(store, query, limit, operator, among, prefix)
    return [Ranked(fid, score, "bm25") for fid, score in found]


def lexical(store: Store, p: Plan, limit: int, among: Sequence[int] | None = None,
            prefix: bool = False) -> list[tuple[int, float]]:
    """A few words by BM25, their function words aside ("which UPS did I buy" is
    "UPS buy"): the files holding every word first — a preference, not a gate: a file
    holding every rare word of the query (RARE_SHARE) ranks among them by its score, so
    a short note about the UPS beats a manual that holds "buy" somewhere too — then those
    holding any word."""
    words = query_words(p.content)
    if len(words) < 2:
        return rank_files(store, p.content, limit, "AND", among, prefix)
    every = rank_files(store, p.content, limit, "AND", among, prefix)
    wide = max(limit, FILE_CANDIDATES)
    some = rank_files(store, p.content, wide, "OR", among, prefix)
    rare = rare_words(store, p)
    first = {fid for fid, _ in every}
    if rare and len(rare) < len(words):
        first |= {fid for fid, _ in rank_files(store, " ".join(rare), wide, "AND", among)}
    score = dict(some)
    for fid, s in every:
        score.setdefault(fid, s)
    lead = sorted(first, key=lambda f: -score.get(f, 0.0))
    return ([(fid, score.get(fid, 0.0)) for fid in lead]
            + [h for h in some if h[0] not in first])[:limit]


def rare_words(store: Store, p: Plan) -> list[str]:
    """The query's content words (phrases aside) found in at most RARE_SHARE of the
    files (at least one)."""
    total = max(1, store.file_count())
    cap = max(1, int(total * RARE_SHARE))
    words = [w for w in query_words(re.sub(r'"[^"]*"', " ", p.content))
             if w.lower() not in STOPWORDS]
    return [w for w in words if store.frequency(parse(w), cap + 1) <= cap]


def floor(index: Any) -> float:
    """The similarity a passage found by meaning alone must reach in this index (its
    model's line: the built-in model's for any model not in FLOORS)."""
    base, per_decade = FLOORS.get(getattr(index, "model", ""), (FLOOR_BASE, FLOOR_PER_DECADE))
    return base + per_decade * math.log10(max(10, len(index)))


def semantic(store: Store, index: Any, vector: Any, limit: int,
             among: Sequence[int] | None = None, least: float | None = None
             ) -> list[Ranked]:
    """Files by their passage closest to the query (cosine), those past the floor."""
    found = index.rank(vector, limit, among)
    least = floor(index) if least is None else least
    if found and found[0].score >= least:
        least -= FLOOR_MARGIN
    return [Ranked(p.file_id, p.score, "semantic", p.start) for p in found
            if p.score >= least]


def pins(store: Store, p: Plan, among: Sequence[int] | None) -> list[int]:
    """Files that hold the query's words as typed: its phrases and identifiers, and for
    a few words (not a question) those words side by side or all its rare ones. In BM25
    order."""
    out: list[int] = []
    for word in identifiers(p.text):
        out += [fid for fid, _ in rank_files(store, word, 3, "AND", among) if fid not in out]
    exact = [f'"{x}"' for x in p.phrases]
    typed = " ".join(query_words(p.text.replace('"', " ")))
    if not p.question and not p.phrases and " " in typed:  # the words as typed, in order
        out += [fid for fid, _ in rank_files(store, f'"{typed}"', PIN_LIMIT, "AND", among)
                if fid not in out]
    if not p.question:
        # A few words, some rare: the files that hold every rare one were asked for.
        exact += rare_words(store, p)
    if exact:
        out += [fid for fid, _ in rank_files(store, " ".join(exact), PIN_LIMIT, "AND", among)
                if fid not in out]
    return out


def hybrid(store: Store, index: Any, vector: Any, query: str, limit: int,
           among: Sequence[int] | None = None, weights: Weights | None = None
           ) -> list[Ranked]:
    """Files by passage-level fusion of BM25 and vectors (see the module's docstring)."""
    w = weights or Weights()
    p = plan(query)
    files = rank_files(store, p.content, FILE_CANDIDATES, "fill", among)
    lexical = store.rank_passages(parse(p.content, "OR"), PASSAGE_CANDIDATES, among)
    pool = index.top(vector, VECTOR_POOL, among) if vector is not None else []
    lexical_files = {fid for fid, _ in files} | {fid for fid, _, _ in lexical}
    least = floor(index) if w.floor is None else w.floor
    if pool and pool[0].score >= least:
        least -= FLOOR_MARGIN
    by_meaning = _first_files((c.file_id for c in pool if c.score >= least), AGREED)
    pool = [c for c in pool if c.score >= least or c.file_id in lexical_files]
    close = pool[:PASSAGE_CANDIDATES]
    scale = 1.0
    if p.language and close and _cross_language(store, p.language, close):
        scale = w.cross_language
    passage: dict[tuple[int, int], float] = {}
    for rank, (fid, n, _) in enumerate(lexical, 1):
        key = (fid, n)
        passage[key] = passage.get(key, 0.0) + scale * w.passage_bm25 / (RRF_K + rank)
    for rank, c in enumerate(close, 1):
        key = (c.file_id, c.number)
        passage[key] = passage.get(key, 0.0) + w.passage_vector / (RRF_K + rank)
    best: dict[int, float] = {}
    for (fid, _), score in passage.items():
        best[fid] = max(best.get(fid, 0.0), score)
    for rank, (fid, _) in enumerate(files, 1):
        best[fid] = best.get(fid, 0.0) + scale * w.file_bm25 / (RRF_K + rank)
    if w.file_vector:
        counts = index.passage_counts() if w.short_margin is not None else None
        ranked = _files_by_meaning(pool, counts, w.short_margin or 0.0)
        for rank, fid in enumerate(ranked[:FILE_CANDIDATES], 1):
            best[fid] = best.get(fid, 0.0) + w.file_vector / (RRF_K + rank)
    top = ((w.passage_bm25 + w.file_bm25) * scale + w.passage_vector + w.file_vector
           ) / (RRF_K + 1)
    strong = _strength(lexical, pool, least, w, scale) if w.strength else {}
    near: dict[int, int] = {}
    for c in pool:
        near.setdefault(c.file_id, c.start)
    meaning = set(near)
    pinned = pins(store, p, among) if w.pins else []
    tier = {fid: i for i, fid in enumerate(pinned)}
    out = []
    for fid, score in best.items():
        how = ("both" if fid in meaning else "bm25") if fid in lexical_files else "semantic"
        norm = (1 - w.strength) * min(1.0, score / top) + strong.get(fid, 0.0)
        shown = 0.5 + 0.5 * norm if fid in tier else 0.5 * norm
        out.append(Ranked(fid, shown, how, None if fid in lexical_files else near[fid]))
    for fid in pinned:  # pinned by an identifier or phrase, outside every list
        if fid not in best:
            out.append(Ranked(fid, 0.5, "bm25"))
    out.sort(key=lambda r: -r.score)
    if by_meaning:
        by_words = [r.file_id for r in bm25(store, query, AGREED, among=among)]
        out = agreed_first(out, [f for f in by_words if f in by_meaning])
    return out[:limit]


def _strength(lexical: list[tuple[int, int, float]], pool: list[Any], least: float,
              w: Weights, scale: float) -> dict[int, float]:
    """Each file's share of the fused score for how strong its best passages match
    (STRENGTH): by meaning, its closest passage's cosine from `least` (0) to the query's
    closest (1); by BM25, its best passage's score over the best one's. BM25 counts
    `scale` as much (a question in another language than the texts leans on meaning)."""
    meaning = w.strength_meaning
    words = (1 - meaning) * scale
    out: dict[int, float] = {}
    if lexical and lexical[0][2] > 0:
        high = lexical[0][2]
        for fid, _, score in lexical:
            out.setdefault(fid, words * max(0.0, score) / high)
    if pool:
        span = max(pool[0].score - least, 1e-6)
        seen: set[int] = set()
        for c in pool:
            if c.file_id not in seen:
                seen.add(c.file_id)
                close = min(1.0, max(0.0, (c.score - least) / span))
                out[c.file_id] = out.get(c.file_id, 0.0) + meaning * close
    total = meaning + words
    return {fid: w.strength * x / total for fid, x in out.items()}


def _first_files(file_ids: Iterable[int], count: int) -> list[int]:
    """The first `count` distinct files of a list of passages' files."""
    out: list[int] = []
    for fid in file_ids:
        if fid not in out:
            out.append(fid)
            if len(out) == count:
                break
    return out


def agreed_first(fused: list[Ranked], agreed: list[int]) -> list[Ranked]:
    """The fusion never worse than its inputs: a file both BM25 and the vectors rank in
    their first AGREED (`agreed`, at most AGREED files) is moved up to place AGREED or
    better (the k-th of them, in fused order, to AGREED - len(agreed) + k at worst),
    taking the score of the file it passes so the scores still read best first."""
    if not agreed:
        return fused
    moved = [r for r in fused if r.file_id in agreed]
    rest = [r for r in fused if r.file_id not in agreed]
    out = list(rest)
    for k, r in enumerate(moved):
        at = min(fused.index(r), AGREED - len(moved) + k)
        if at < len(out) and out[at].score > r.score:
            r = Ranked(r.file_id, out[at].score, r.match, r.near)
        out.insert(at, r)
    return out


def _files_by_meaning(pool: list[Any], counts: dict[int, int] | None = None,
                      margin: float = SHORT_MARGIN) -> list[int]:
    """Files ranked by their closest passages in the pool (see NEXT_PASSAGE_WEIGHT). With
    `counts` (passages per file), a file of fewer than PASSAGES_COUNTED passages, all in
    the pool, counts its last one again for each it lacks when that passage is within
    `margin` of the best passage of the file the plain sum ranks first (SHORT_MARGIN): a
    note that is all about what the question asks weighs as a manual whose three closest
    passages are as close, and a note that is merely close does not pass the manuals."""
    score: dict[int, float] = {}
    seen: dict[int, int] = {}
    best: dict[int, float] = {}
    last: dict[int, float] = {}
    for c in pool:
        k = seen.get(c.file_id, 0)
        if k < PASSAGES_COUNTED:
            score[c.file_id] = score.get(c.file_id, 0.0) + c.score * NEXT_PASSAGE_WEIGHT ** k
            best.setdefault(c.file_id, c.score)
            last[c.file_id] = c.score
        seen[c.file_id] = k + 1
    order = sorted(score, key=lambda f: -score[f])
    if not counts or not order:
        return order
    least = best[order[0]] - margin
    for fid, n in seen.items():
        have = counts.get(fid, PASSAGES_COUNTED)
        if n == have < PASSAGES_COUNTED and last[fid] >= least:
            score[fid] += sum(last[fid] * NEXT_PASSAGE_WEIGHT ** j
                              for j in range(have, PASSAGES_COUNTED))
    return sorted(score, key=lambda f: -score[f])


def _cross_language(store: Store, lang: str, close: list[Any]) -> bool:
    """Whether the passages closest to the question are mostly in another language."""
    votes: dict[str, int] = {}
    for c in close[:LANGUAGE_SAMPLE]:
        text = store.text_bytes(c.file_id, c.start, LANGUAGE_SAMPLE_BYTES)
        got = language(text.decode("utf-8", "ignore"))
        if got:
            votes[got] = votes.get(got, 0) + 1
    if not votes:
        return False
    return max(votes, key=lambda k: votes[k]) != lang
