"""Head + best window(s) of a long text for a question: pure, testable on strings.

A file longer than its budget is sent as its head (what the document is: at most a
quarter of the budget) plus the part that best answers the question (where the answer
is). Windows are scored by the question's terms (text.terms: crude prefix stems that
work across languages), each weighted by its rarity inside this file (a word on every
page says little about where the answer is), with a cap on how often one term counts.
When the question's terms sit in two places, two half-size windows can beat one. Cuts
snap to line ends and are marked `[...]`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left

from loomcli.records import Record
from loomcli.text import terms

MARK = "\n[...]\n"
TERM_CAP = 3  # one term counts at most this many times in a window
BLOCK_CHARS = 600  # rarity of a term = in how many such blocks of the file it occurs
SNAP_CHARS = 200  # how far a cut may move back to land on a line end
# Excerpts are chosen from this much of a file's text at most: the cost of a search hit
# or an ask must not grow with a 200 MB log (a longer text is cut there, and says so).
SCAN_BYTES = 16 << 20
CANDIDATES_PER_TERM = 2000  # window starts tried around one term's occurrences
WINDOW_STEP = 8  # window starts closer than 1/8 of the window's size are not both tried
SEMANTIC_SHARE = 4.0  # closest passage vs all question terms: chosen on the eval set


class Excerpt(Record):
    __slots__ = ("text", "spans", "cut")

    def __init__(self, text: str, spans: list[tuple[int, int]], cut: bool = False) -> None:
        self.text = text
        self.spans = spans  # character ranges used
        self.cut = cut


def _occurrences(lower: str, stems: list[str], text: str | None = None
                 ) -> dict[str, list[int]]:
    """Where each stem starts a word or a part of an identifier (after `_`, or at a
    lower-to-upper case change in `text`), in one pass for all stems. At each match every
    stem that starts there is counted, a shorter inside a longer too."""
    if not stems:
        return {}
    ordered = sorted(stems, key=len, reverse=True)
    # The stems alone, with the word-start test done here: `re` scans for a plain
    # alternation about four times as fast as for one behind a lookbehind.
    search = re.compile("|".join(map(re.escape, ordered))).search
    camel = text is not None and len(text) == len(lower)
    starts: list[int] = []
    pos = 0
    while m := search(lower, pos):
        at = m.start()
        before = lower[at - 1] if at else ""
        if not before.isalnum() or (camel and "a" <= text[at - 1] <= "z"  # type: ignore[index]
                                    and "A" <= text[at] <= "Z"):  # type: ignore[index]
            starts.append(at)
        pos = at + 1
    found: dict[str, list[int]] = {}
    for pos in starts:
        for stem in ordered:
            if lower.startswith(stem, pos):
                found.setdefault(stem, []).append(pos)
    return {stem: found[stem] for stem in stems if stem in found}


def _weights(occ: dict[str, list[int]], length: int) -> dict[str, float]:
    blocks = max(1, math.ceil(length / BLOCK_CHARS))
    weights = {}
    for stem, hits in occ.items():
        df = len({h // BLOCK_CHARS for h in hits})
        weights[stem] = math.log(1 + blocks / df)
    return weights


def _score(occ: dict[str, list[int]], weights: dict[str, float], start: int, end: int,
           only: set[str] | None = None) -> tuple[float, set[str]]:
    score = 0.0
    present: set[str] = set()
    for stem, hits in occ.items():
        if only is not None and stem not in only:
            continue
        n = bisect_left(hits, end) - bisect_left(hits, start)
        if n:
            present.add(stem)
            score += weights[stem] * (1 + math.log(min(n, TERM_CAP)))
    return score, present


def _snap_end(text: str, end: int, floor: int) -> int:
    """Move a cut back to just after a newline, when one is near."""
    if end >= len(text):
        return len(text)
    nl = text.rfind("\n", max(floor, end - SNAP_CHARS), end)
    return nl + 1 if nl >= 0 else end


def _snap_start(text: str, start: int, floor: int) -> int:
    """Move a window start back to a line start, when one is near."""
    if start <= floor:
        return floor
    nl = text.rfind("\n", max(floor, start - SNAP_CHARS), start)
    return nl + 1 if nl >= 0 else start


class _Meaning:
    """Passages of the file scored by similarity to the question (from its vectors),
    rescaled to 0..1 within the file and weighed like the lexical score's full value."""

    def __init__(self, near: list[tuple[int, int, float]], weights: dict[str, float]
                 ) -> None:
        sims = [s for _, _, s in near]
        lo, hi = (min(sims), max(sims)) if sims else (0.0, 0.0)
        spread = hi - lo or 1.0
        self.passages = sorted((a, b, (s - lo) / spread) for a, b, s in near)
        # A window holding the closest passage gains SEMANTIC_SHARE times what one
        # holding every question term once gains.
        self.weight = SEMANTIC_SHARE * (sum(weights.values()) or 1.0)

    def best_starts(self, count: int = 5) -> list[int]:
        return [a for a, _, _ in sorted(self.passages, key=lambda p: -p[2])[:count]]

    def score(self, start: int, end: int) -> float:
        """The best rescaled similarity of a passage mostly inside [start, end)."""
        best = 0.0
        for a, b, s in self.passages:
            if a >= end:
                break
            if s > best and min(b, end) - max(a, start) >= (b - a) / 2:
                best = s
        return best * self.weight


def _best_window(text: str, occ: dict[str, list[int]], weights: dict[str, float],
                 floor: int, size: int, only: set[str] | None = None,
                 meaning: _Meaning | None = None) -> tuple[float, int, int, set[str]]:
    best = (0.0, floor, min(len(text), floor + size), set[str]())
    seen: set[int] = set()
    places: list[int] = []
    for stem, hits in occ.items():
        if only is None or stem in only:
            # A term on every line of a huge log: try evenly spread places, not all.
            places += hits[::max(1, len(hits) // CANDIDATES_PER_TERM)]
    if meaning is not None and only is None:
        places += meaning.best_starts()
    # Windows that start a few lines apart score alike: try one per WINDOW_STEP of the
    # window's size (a term on every line of a long file costs tens of tries, not
    # thousands).
    step, last = max(1, size // WINDOW_STEP), -size
    for h in sorted(places):
        if h < floor or h - last < step:
            continue
        last = h
        for lead in (size // 4, size // 2):
            start = _snap_start(text, max(floor, h - lead), floor)
            start = min(start, max(floor, len(text) - size))
            if start in seen:
                continue
            seen.add(start)
            end = _snap_end(text, start + size, start + size // 2)
            score, present = _score(occ, weights, start, end, only)
            if meaning is not None and only is None:
                score += meaning.score(start, end)
            if score > best[0]:
                best = (score, start, end, present)
    return best


def excerpt(text: str, question: str, budget: int, head_chars: int = 1200,
            near: list[tuple[int, int, float]] | None = None, start: int = 0) -> Excerpt:
    """Fit `text` into `budget` characters: whole if it fits, else head + best window(s).
    `near`: the file's passages as (start char, end char, similarity to the question),
    when it has vectors: the window then also goes where the meaning is closest.
    `start`: the character where the body starts (after a note's front matter, which is
    left out); spans stay those of `text`."""
    if start > 0:
        part = excerpt(text[start:], question, budget, head_chars,
                       [(max(0, a - start), b - start, s) for a, b, s in near or () if b > start])
        return Excerpt(part.text, [(a + start, b + start) for a, b in part.spans], part.cut)
    if len(text) <= budget:
        return Excerpt(text, [(0, len(text))], cut=False)
    head_end = _snap_end(text, min(head_chars, budget // 4), min(head_chars, budget // 4) // 2)
    head = text[:head_end]
    occ = _occurrences(text.lower(), terms(question), text)
    occ = {s: [h for h in hits if h >= head_end] for s, hits in occ.items()}
    occ = {s: hits for s, hits in occ.items() if hits}
    room = budget - len(head) - 2 * len(MARK)
    near = [p for p in near or () if p[0] >= head_end]
    if (not occ and not near) or room <= 0:
        end = _snap_end(text, budget - len(MARK), budget // 2)
        return Excerpt(text[:end] + MARK.rstrip("\n"), [(0, end)], cut=True)
    weights = _weights(occ, len(text))
    meaning = _Meaning(near, weights) if near else None
    score, start, end, present = _best_window(text, occ, weights, head_end, room,
                                              meaning=meaning)
    windows = [(start, end)]
    missing = set(occ) - present
    if missing and room >= 1200:
        # Two half windows: the best one for all terms, then the best for what it lacks.
        half = (room - len(MARK)) // 2
        s1, a1, b1, p1 = _best_window(text, occ, weights, head_end, half, meaning=meaning)
        rest = set(occ) - p1
        if rest:
            s2, a2, b2, _ = _best_window(text, occ, weights, head_end, half, only=rest)
            if s2 > 0 and (b2 <= a1 or a2 >= b1):
                pair_score, _ = _score(occ, weights, a1, b1)
                pair_score += meaning.score(a1, b1) if meaning else 0.0
                pair_score += _score(occ, weights, a2, b2, only=rest)[0]
                if pair_score > score:
                    windows = sorted([(a1, b1), (a2, b2)])
    parts = [head]
    pos = head_end
    spans = [(0, head_end)]
    for a, b in windows:
        if a > pos:
            parts.append(MARK)
        parts.append(text[a:b])
        spans.append((a, b))
        pos = b
    if pos < len(text):
        parts.append(MARK.rstrip("\n"))
    out = "".join(parts)
    assert len(out) <= budget, (len(out), budget)
    return Excerpt(out, spans, cut=True)
