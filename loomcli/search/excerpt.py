"""Head + best window(s) of a long text for a question: pure, testable on strings.

A file longer than its budget is sent as its head (what the document is: at most a
quarter of the budget) plus the part that best answers the question (where the answer
is). Windows are scored by the question's terms (text.terms: crude prefix stems that work
across languages), each weighted by its rarity inside this file (a word on every page says
little about where the answer is), with a cap on how often one term counts. When the
question's terms sit in two places, two windows can beat one. A larger budget's excerpt
holds a smaller one's (Excerpter: the windows grow, or one more opens, never chosen anew),
so a larger window never sends less of the answer. Cuts snap to line ends and are marked
`[...]`.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right

from loomcli.records import Record
from loomcli.search.text import hide_metadata, squeeze_blank, terms

MARK = "\n[...]\n"
TERM_CAP = 3  # one term counts at most this many times in a window
BLOCK_CHARS = 600  # rarity of a term = in how many such blocks of the file it occurs
SNAP_CHARS = 200  # how far a cut may move back to land on a line end
# Excerpts are chosen from this much of a file's text at most: the cost of a search hit
# or an ask must not grow with a 200 MB log (a longer text is cut there, and says so).
SCAN_BYTES = 16 << 20
CANDIDATES_PER_TERM = 2000  # window starts tried around one term's occurrences
WINDOW_STEP = 4  # window starts closer than 1/4 of the window's size are not both tried
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


# Nested excerpts (Excerpter): levels of room doubling from BASE_CHARS, each holding the last.
BASE_CHARS = 600  # the first level's window; below it, it shrinks to a point
MAX_WINDOWS = 3  # windows opened at most (each costs a [...] mark)
GROW_TRIES = 5  # placements tried when a window doubles
END = MARK.rstrip("\n")  # the mark after the last span when the text goes on
Span = tuple[int, int]


def _best_window(text: str, occ: dict[str, list[int]], weights: dict[str, float],
                 floor: int, size: int, meaning: _Meaning | None = None
                 ) -> tuple[float, int, int]:
    """The best window of `size` characters from `floor` on: its score, start and end."""
    best = (0.0, floor, min(len(text), floor + size))
    seen: set[int] = set()
    places: list[int] = []
    for hits in occ.values():
        # A term on every line of a huge log: try evenly spread places, not all.
        places += hits[::max(1, len(hits) // CANDIDATES_PER_TERM)]
    if meaning is not None:
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
            score = _score(occ, weights, start, end)[0]
            if meaning is not None:
                score += meaning.score(start, end)
            if score > best[0]:
                best = (score, start, end)
    return best


def _snap_forward(text: str, start: int, ceil: int) -> int:
    """Move a growing window's start forward to the next line start, when one is near
    (never past `ceil`, its last start: a part of a line is not added)."""
    if start <= 0 or text[start - 1] == "\n":
        return start
    nl = text.find("\n", start, min(ceil, start + SNAP_CHARS))
    if nl >= 0:
        return nl + 1
    return ceil if ceil - start < SNAP_CHARS else start


def _snap_back(text: str, end: int, floor: int) -> int:
    """Move a growing window's end back to just after a newline, when one is near (never
    before `floor`, its last end: a part of a line is not added)."""
    if end >= len(text):
        return len(text)
    nl = text.rfind("\n", max(floor, end - SNAP_CHARS), end)
    if nl >= 0:
        return nl + 1
    return floor if end - floor < SNAP_CHARS else end


class Excerpter:
    """The excerpts of one text for one question at any budget, each holding every
    smaller budget's: what is sent at a budget is never lost at a larger one. Levels of
    room, doubling from BASE_CHARS: the first is the best window for the question; each
    next one keeps what the last one sent and spends the room it adds where it helps
    most, either growing the windows (each placed where it scores best while it holds
    its last span) or opening one more window (where it adds most to what is sent: the
    terms still missing, or the closest passage); a budget between two levels gets the
    lower one's windows grown toward the upper one's. Cheap to ask again at another
    budget: the text is scanned once.
    `near`: the file's passages as (start char, end char, similarity to the question),
    when it has vectors: the windows then also go where the meaning is closest.
    `start`: the character where the body starts (after a note's front matter, which is
    left out); spans stay those of the whole text. `path`: the file's, for a Markdown
    note's metadata in its body (Logseq's block properties and references), left out."""

    def __init__(self, text: str, question: str, head_chars: int = 1200,
                 near: list[tuple[int, int, float]] | None = None, start: int = 0,
                 path: str = "") -> None:
        self.offset = max(0, start)
        body = text[self.offset:] if self.offset else text
        self.text = hide_metadata(body, path)
        self.hidden = self.text is not body
        self.question = question
        self.head_chars = max(0, head_chars)
        self.near = [(max(0, a - self.offset), b - self.offset, s)
                     for a, b, s in near or () if b > self.offset]
        # Levels of growth `t` (about the budget), ascending; each window's span there
        # (a window opened at a level is its point at the levels below).
        self.levels: list[int] = []
        self.spans: list[list[Span]] = []
        self.places: list[int] = []  # where new windows are tried (sorted, once)

    # -- the levels --------------------------------------------------------------------

    def _prepare(self) -> None:
        if self.levels:
            return
        text = self.text
        first = min(self.head_chars, self._growth(BASE_CHARS) // 4)
        self.floor = floor = _snap_end(text, first, first // 2)
        occ = _occurrences(text.lower(), terms(self.question), text)
        self.occ = {s: kept for s, hits in occ.items()
                    if (kept := [h for h in hits if h >= floor])}
        near = [p for p in self.near if p[0] >= floor]
        self.levels, self.spans = [0], [[]]
        if not self.occ and not near or floor >= len(text):
            return  # the head alone, grown with the budget
        self.weights = _weights(self.occ, len(text))
        self.meaning = _Meaning(near, self.weights) if near else None
        _, start, end = _best_window(text, self.occ, self.weights, floor, BASE_CHARS,
                                     self.meaning)
        point = self._point(start, end)
        self.room = [0, BASE_CHARS]
        self.levels = [0, self._growth(BASE_CHARS)]
        self.spans = [[(point, point)], [(start, end)]]

    def _growth(self, room: int) -> int:
        """The growth `t` whose windows' room is `room` (the head takes a quarter of a
        budget, at most head_chars)."""
        return room + min(self.head_chars, room // 3)

    def _value(self, spans: list[Span]) -> float:
        """How well spans sent together answer: each term counted over all of them."""
        score = 0.0
        for stem, hits in self.occ.items():
            n = sum(bisect_left(hits, b) - bisect_left(hits, a) for a, b in spans)
            if n:
                score += self.weights[stem] * (1 + math.log(min(n, TERM_CAP)))
        if self.meaning is not None:
            score += max((self.meaning.score(a, b) for a, b in spans), default=0.0)
        return score

    def _point(self, a: int, b: int) -> int:
        """Where a window shrinks to: the first place of its rarest term."""
        best = (0.0, a)
        for stem, hits in self.occ.items():
            i = bisect_left(hits, a)
            if i < len(hits) and hits[i] < b and self.weights[stem] > best[0]:
                best = (self.weights[stem], hits[i])
        return best[1]

    def _grown(self, windows: list[Span], i: int) -> Span:
        """Window `i` twice as large, placed where the windows score best while it holds
        its last span."""
        n = len(self.text)
        a, c = windows[i]
        size = max(2 * (c - a), BASE_CHARS)
        if size >= n:
            return (0, n)
        lo, hi = max(0, c - size), max(0, min(a, n - size))
        lo = min(lo, hi)
        # The last span a quarter into the new one (an answer tends to follow the words
        # that lead to it), unless another placement scores higher.
        preferred = max(lo, min(hi, a - (size - (c - a)) // 2))
        tries = sorted({lo + (hi - lo) * k // (GROW_TRIES - 1) for k in range(GROW_TRIES)}
                       | {preferred}, key=lambda s: abs(s - preferred))
        best: tuple[float, int, int] | None = None
        for s in tries:
            start = _snap_start(self.text, s, 0)
            end = _snap_back(self.text, s + size, c)
            value = self._value([*windows[:i], (start, end), *windows[i + 1:]])
            if best is None or value > best[0]:
                best = (value, start, end)
        assert best is not None
        return best[1], best[2]

    def _opened(self, windows: list[Span], size: int) -> tuple[float, Span] | None:
        """The best new window of `size` apart from `windows`, and the value of all."""
        text, floor = self.text, self.floor
        counts = {stem: sum(bisect_left(hits, b) - bisect_left(hits, a) for a, b in windows)
                  for stem, hits in self.occ.items()}
        if self.meaning is None and min(counts.values()) >= TERM_CAP:
            return None  # every term counts in full already: another window adds nothing
        sent = max((self.meaning.score(a, b) for a, b in windows), default=0.0
                   ) if self.meaning else 0.0
        if not self.places:
            for hits in self.occ.values():
                self.places += hits[::max(1, len(hits) // CANDIDATES_PER_TERM)]
            if self.meaning is not None:
                self.places += self.meaning.best_starts()
            self.places.sort()
        best: tuple[float, Span] | None = None
        # A window opened beside others: one start per quarter of its size is tried.
        step, last = max(1, size // 4), -size
        for h in self.places:
            if h < floor or h - last < step or any(a <= h < b for a, b in windows):
                continue
            last = h
            for lead in (size // 4, size // 2):
                start = _snap_start(text, max(floor, h - lead), floor)
                start = min(start, max(floor, len(text) - size))
                end = _snap_end(text, start + size, start + size // 2)
                if any(start < b and a < end for a, b in windows):
                    continue
                value = 0.0
                for stem, hits in self.occ.items():
                    k = counts[stem] + bisect_left(hits, end) - bisect_left(hits, start)
                    if k:
                        value += self.weights[stem] * (1 + math.log(min(k, TERM_CAP)))
                if self.meaning is not None:
                    value += max(sent, self.meaning.score(start, end))
                if best is None or value > best[0]:
                    best = (value, (start, end))
        return best

    def _grow(self) -> None:
        """One more level, twice the room: the windows grown, or one more window."""
        n = len(self.text)
        windows = list(self.spans[-1])
        room = 2 * self.room[-1]
        grown = [w if w[0] == w[1] else self._grown(windows, i)
                 for i, w in enumerate(windows)]
        live = sum(a < b for a, b in windows)
        opened = (self._opened(windows, self.room[-1]) if live < MAX_WINDOWS
                  and grown != [(0, n)] * len(grown) else None)
        if opened is not None and opened[0] > self._value(grown):
            a, b = opened[1]
            point = self._point(a, b)
            for spans in self.spans:
                spans.append((point, point))
            grown = [*windows, (a, b)]
        self.room.append(room)
        self.levels.append(self._growth(room))
        self.spans.append(grown)

    def _windows(self, t: int) -> list[Span]:
        """The windows at growth `t`: between two levels, the lower one's windows grown
        toward the upper one's, their cuts moved inward to line ends."""
        n = len(self.text)
        while self.levels[-1] < t and any(s != (0, n) for s in self.spans[-1]):
            self._grow()
        if t >= self.levels[-1]:
            return self.spans[-1]
        k = bisect_right(self.levels, t)
        frac = (t - self.levels[k - 1]) / (self.levels[k] - self.levels[k - 1])
        out = []
        for (a0, c0), (a1, c1) in zip(self.spans[k - 1], self.spans[k], strict=True):
            start = _snap_forward(self.text, a0 - int((a0 - a1) * frac), a0)
            out.append((start, _snap_back(self.text, c0 + int((c1 - c0) * frac), c0)))
        return out

    # -- one budget -------------------------------------------------------------------------

    def _spans(self, t: int, budget: int | None = None) -> tuple[list[Span], int]:
        """The spans sent at growth `t` (the head, then the windows past it, merged), and
        an upper bound on their text's length that never decreases as `t` grows. With
        `budget`, the head is at most a quarter of it (a growth past the budget is one
        whose windows overlap)."""
        self._prepare()
        text = self.text
        found = self.levels != [0]
        head = min(self.head_chars, t // 4) if found else t
        if budget is not None and found:
            head = min(head, budget // 4)
        head_end = _snap_end(text, head, head // 2)
        live = [w for w in self._windows(t) if w[0] < w[1]] if found else []
        windows: list[Span] = []
        for a, b in sorted(live):
            a = max(a, head_end)
            if b <= a:
                continue
            if windows and a <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(b, windows[-1][1]))
            else:
                windows.append((a, b))
        spans = [(0, head_end), *windows]
        return spans, sum(b - a for a, b in spans) + len(live) * len(MARK) + len(END)

    def at(self, budget: int) -> Excerpt:
        """The excerpt within `budget` characters: whole if it fits, else the largest
        growth of head + window(s) that fits."""
        text = self.text
        if len(text) <= budget:
            out = Excerpt(text, [(0, len(text))], cut=False)
        elif self._spans(0)[1] > budget:  # not even the marks fit
            out = Excerpt("", [(0, 0)], cut=True)
        else:
            # A growth too large, to search below: found in small steps (the levels past it
            # are not worked out).
            low, high = 0, max(1, budget)
            while self._spans(high)[1] <= budget:
                low, high = high, high + max(64, high // 8)
            while high - low > 1:
                mid = (low + high) // 2
                if self._spans(mid)[1] <= budget:
                    low = mid
                else:
                    high = mid
            spans = self._spans(low, budget)[0]
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
        if self.hidden:
            out.text = squeeze_blank(out.text)
        return out


def excerpt(text: str, question: str, budget: int, head_chars: int = 1200,
            near: list[tuple[int, int, float]] | None = None, start: int = 0,
            path: str = "") -> Excerpt:
    """Fit `text` into `budget` characters: whole if it fits, else head + window(s); at a
    larger budget, the same and more (see Excerpter)."""
    return Excerpter(text, question, head_chars, near, start, path).at(budget)
