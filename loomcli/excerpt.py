"""Head + best window(s) of a long text for a question: pure, testable on strings.

A file longer than its budget is sent as its head (what the document is: at most a
quarter of the budget) plus the part that best answers the question (where the answer
is). Windows are scored by the question's terms, each weighted by its rarity inside this
file (a word on every page says little about where the answer is), with crude prefix
stemming that works across languages and a cap on how often one term counts. When the
question's terms sit in two places, two half-size windows can beat one. Cuts snap to
line ends and are marked `[...]`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from loomcli.records import Record

MARK = "\n[...]\n"
STEM_CHARS = 6  # crude stemming: a term matches words that start with its first 6 letters
TERM_CAP = 3  # one term counts at most this many times in a window
BLOCK_CHARS = 600  # rarity of a term = in how many such blocks of the file it occurs
SNAP_CHARS = 200  # how far a cut may move back to land on a line end
# Excerpts are chosen from this much of a file's text at most: the cost of a search hit
# or an ask must not grow with a 200 MB log (a longer text is cut there, and says so).
SCAN_BYTES = 16 << 20
CANDIDATES_PER_TERM = 2000  # window starts tried around one term's occurrences
WINDOW_STEP = 8  # window starts closer than 1/8 of the window's size are not both tried
SEMANTIC_SHARE = 4.0  # closest passage vs all question terms: chosen on the eval set

_WORD = re.compile(r"\w+", re.UNICODE)
# Where an identifier splits into parts: underscores, letter-digit edges, camelCase.
_SPLIT = re.compile(r"_+|(?<=\D)(?=\d)|(?<=\d)(?=\D)|(?<=[a-z])(?=[A-Z])")
# Function words of a few languages: they say nothing about where an answer is.
_FUNCTION_WORDS = """
a about above after again all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from
further had has have having he her here hers him his how i if in into is it its itself
just me more most my no nor not now of off on once only or other our out over own same
she should so some such than that the their them then there these they this those
through to too under until up very was we were what when where which while who whom why
will with would you your yours tell explain describe show give list say says said use
used using get gets le la les un une des du de et est en que qui dans pour pas sur au
der die das und ist ein eine nicht mit von zu den im el los las y es por con para se
il lo gli di che non una uno per con mi ti ci si del della dello dei delle nel nella
negli al alla ai agli dal dalla su sul sulla come cosa dove quando quale quali quanto
quanta perché posso puoi può faccio fare fa sono essere ho hai ha questo questa quello
quella ogni anche più ma se tra fra invece o e è
"""
STOPWORDS = frozenset(_FUNCTION_WORDS.split())


class Excerpt(Record):
    __slots__ = ("text", "spans", "cut")

    def __init__(self, text: str, spans: list[tuple[int, int]], cut: bool = False) -> None:
        self.text = text
        self.spans = spans  # character ranges used
        self.cut = cut


def retrieval_query(question: str) -> str:
    """The question without its function words (what BM25 ranks a question by)."""
    words = [w for w in question.split() if w.lower().strip("?!.,;:()\"'") not in STOPWORDS]
    return " ".join(words) or question


def terms(question: str) -> list[str]:
    """The question's content words as lower-case stems, in order, without repeats. An
    identifier counts as its parts too: `panic_on_oops` → panic, oops; `maxUserWatches`
    → max, user, watches (dotted and path-like names are split as words already)."""
    out: list[str] = []
    for token in _WORD.findall(question):
        parts = [token] + [p for p in _SPLIT.split(token) if len(p) >= 3 and p != token]
        for word in (p.lower() for p in parts):
            word = word.strip("_")
            if not word or word in STOPWORDS or (len(word) < 3 and not word.isdigit()):
                continue
            stem = word[:STEM_CHARS]
            if stem not in out:
                out.append(stem)
    return out


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


# Where the window goes is chosen once, at BASE_CHARS, and grown around (see _Growth).
BASE_CHARS = 300
SPLIT_CHARS = 1200  # two windows (half each) only when the windows' room reaches this
GROW_TRIES = 9  # placements tried when a window doubles around the last one
END = MARK.rstrip("\n")  # the mark after the last span when the text goes on


def _best_window(text: str, occ: dict[str, list[int]], weights: dict[str, float],
                 floor: int, size: int, only: set[str] | None = None,
                 meaning: _Meaning | None = None
                 ) -> tuple[float, int, int, set[str], int]:
    """The best window of `size` characters from `floor` on: its score, start, end, the
    terms it holds, and the place it was chosen around (inside it)."""
    best = (0.0, floor, min(len(text), floor + size), set[str](), floor)
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
                best = (score, start, end, present, min(max(h, start), end))
    return best


def _snap_forward(text: str, start: int, ceil: int) -> int:
    """Move a window start forward to the next line start, when one is near (never past
    `ceil`)."""
    if start <= 0 or text[start - 1] == "\n":
        return start
    nl = text.find("\n", start, min(ceil, start + SNAP_CHARS))
    return nl + 1 if nl >= 0 else start


class _Growth:
    """One window that only grows. At size 0 it is its point; at BASE_CHARS the best
    window around that point; then, at each doubling, the best placement of a window
    twice as large that holds the last one. Sizes in between grow from one step toward
    the next, their cuts moved to line ends inward. So the window of any size holds the
    window of every smaller size: a larger budget never loses what a smaller one sent."""

    def __init__(self, text: str, scorer: Callable[[int, int], float], point: int,
                 base: tuple[int, int]) -> None:
        self.text = text
        self.scorer = scorer
        self.sizes = [0, BASE_CHARS]
        self.spans = [(point, point), (min(base[0], point), max(base[1], point))]

    def _grow(self) -> None:
        n = len(self.text)
        a, c = self.spans[-1]
        size = 2 * self.sizes[-1]
        self.sizes.append(size)
        if size >= n:
            self.spans.append((0, n))
            return
        lo, hi = max(0, c - size), max(0, min(a, n - size))
        lo = min(lo, hi)
        # The last window a quarter into the new one (an answer tends to follow the
        # words that lead to it), unless another placement scores higher.
        preferred = max(lo, min(hi, a - (size - (c - a)) // 4))
        tries = sorted({lo + (hi - lo) * i // (GROW_TRIES - 1) for i in range(GROW_TRIES)}
                       | {preferred}, key=lambda s: abs(s - preferred))
        best: tuple[float, int, int] | None = None
        for s in tries:
            start = _snap_start(self.text, s, 0)
            end = max(c, _snap_end(self.text, s + size, c))
            score = self.scorer(start, end)
            if best is None or score > best[0]:
                best = (score, start, end)
        assert best is not None
        self.spans.append((best[1], best[2]))

    def at(self, size: int) -> tuple[int, int]:
        n = len(self.text)
        while self.sizes[-1] < size and self.spans[-1] != (0, n):
            self._grow()
        if size >= self.sizes[-1]:
            return self.spans[-1]
        k = bisect_right(self.sizes, size)
        (a0, c0), (a1, c1) = self.spans[k - 1], self.spans[k]
        frac = (size - self.sizes[k - 1]) / (self.sizes[k] - self.sizes[k - 1])
        start = _snap_forward(self.text, a0 - int((a0 - a1) * frac), a0)
        return start, max(c0, _snap_end(self.text, c0 + int((c1 - c0) * frac), c0))


class Excerpter:
    """The excerpts of one text for one question, at any budget. Each holds every smaller
    budget's excerpt: the head and the window(s) only grow with the budget (where the
    window goes is chosen once, small, and grown around), so a larger budget never sends
    less of the answer. Cheap to ask again at another budget: the text is scanned once.
    `near`: the file's passages as (start char, end char, similarity to the question),
    when it has vectors: the window then also goes where the meaning is closest.
    `start`: the character where the body starts (after a note's front matter, which is
    left out); spans stay those of the whole text."""

    def __init__(self, text: str, question: str, head_chars: int = 1200,
                 near: list[tuple[int, int, float]] | None = None, start: int = 0) -> None:
        self.offset = max(0, start)
        self.text = text[self.offset:] if self.offset else text
        self.question = question
        self.head_chars = max(0, head_chars)
        self.near = [(max(0, a - self.offset), b - self.offset, s)
                     for a, b, s in near or () if b > self.offset]
        self.growths: list[_Growth] | None = None

    def _prepare(self) -> list[_Growth]:
        """Where the window(s) grow from: the best BASE_CHARS window past the head's
        largest size, and, when the question's terms sit in two places, a second one for
        the terms the first lacks."""
        if self.growths is not None:
            return self.growths
        text = self.text
        floor = _snap_end(text, self.head_chars, self.head_chars // 2)
        occ = _occurrences(text.lower(), terms(self.question), text)
        occ = {s: kept for s, hits in occ.items() if (kept := [h for h in hits if h >= floor])}
        near = [p for p in self.near if p[0] >= floor]
        self.growths = []
        if not occ and not near:
            return self.growths
        weights = _weights(occ, len(text))
        meaning = _Meaning(near, weights) if near else None

        def full(a: int, b: int) -> float:
            return _score(occ, weights, a, b)[0] + (meaning.score(a, b) if meaning else 0.0)

        _, a, b, _, point = _best_window(text, occ, weights, floor, BASE_CHARS,
                                         meaning=meaning)
        first = _Growth(text, full, point, (a, b))
        self.growths.append(first)
        a1, b1 = first.at(SPLIT_CHARS // 2)
        rest = set(occ) - _score(occ, weights, a1, b1)[1]
        if not rest:
            return self.growths

        def lacking(a: int, b: int) -> float:
            return _score(occ, weights, a, b, only=rest)[0]

        found, a, b, _, point = _best_window(text, occ, weights, floor, BASE_CHARS,
                                             only=rest)
        if found > 0:
            second = _Growth(text, lacking, point, (a, b))
            a2, b2 = second.at(SPLIT_CHARS // 2)
            if ((b2 <= a1 or a2 >= b1)
                    and full(a1, b1) + lacking(a2, b2) > full(*first.at(SPLIT_CHARS))):
                self.growths.append(second)
        return self.growths

    def _spans(self, t: int) -> tuple[list[tuple[int, int]], int]:
        """The spans sent at growth `t` (the head, then the windows past it, merged), and
        an upper bound on their text's length that never decreases as `t` grows."""
        text, growths = self.text, self._prepare()
        head = min(self.head_chars, t // 4) if growths else t
        head_end = _snap_end(text, head, head // 2)
        room = t - head
        if len(growths) == 2:
            # One window up to half SPLIT_CHARS, then the second up to as much, then both
            # grow alike: two half windows from SPLIT_CHARS on.
            half, extra = SPLIT_CHARS // 2, max(0, room - SPLIT_CHARS) // 2
            sizes = [min(room, half) + extra, min(max(0, room - half), half) + extra]
        else:
            sizes = [room] if growths else []
        windows: list[tuple[int, int]] = []
        for a, b in sorted(g.at(w) for g, w in zip(growths, sizes, strict=True)):
            a = max(a, head_end)
            if b <= a:
                continue
            if windows and a <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(b, windows[-1][1]))
            else:
                windows.append((a, b))
        spans = [(0, head_end), *windows]
        reserve = len(growths) * len(MARK) + len(END)
        return spans, sum(b - a for a, b in spans) + reserve

    def at(self, budget: int) -> Excerpt:
        """The excerpt within `budget` characters: whole if it fits, else the largest
        growth of head + window(s) that fits."""
        text = self.text
        if len(text) <= budget:
            out = Excerpt(text, [(0, len(text))], cut=False)
        else:
            fits = self._spans(0)[1] <= budget
            low, high = 0, max(1, budget)
            while fits and self._spans(high)[1] <= budget:  # find a growth too large
                low, high = high, 2 * high
            while high - low > 1:
                mid = (low + high) // 2
                if self._spans(mid)[1] <= budget:
                    low = mid
                else:
                    high = mid
            if not fits:  # not even the marks fit
                return Excerpt("", [(self.offset, self.offset)], cut=True)
            spans = self._spans(low)[0]
            parts, pos = [], 0
            for a, b in spans:
                if a > pos:
                    parts.append(MARK)
                parts.append(text[a:b])
                pos = b
            if pos < len(text):
                parts.append(END)
            out = Excerpt("".join(parts), spans, cut=True)
            assert len(out.text) <= budget, (len(out.text), budget)
        if self.offset:
            out.spans = [(a + self.offset, b + self.offset) for a, b in out.spans]
        return out


def excerpt(text: str, question: str, budget: int, head_chars: int = 1200,
            near: list[tuple[int, int, float]] | None = None, start: int = 0) -> Excerpt:
    """Fit `text` into `budget` characters: whole if it fits, else head + best window(s)
    (see Excerpter: a larger budget's excerpt holds a smaller one's)."""
    return Excerpter(text, question, head_chars, near, start).at(budget)
