"""The prompt under a budget, with an account of every file: sent whole, trimmed, or left
out and why.

Bounds, all upper ones: `top_k` files, each block (its `## [path] title` line and
excerpt) at most `file_budget_chars`, and, when the model's window is known, the whole
prompt at most `tokens_max` by a conservative estimate. The instructions and the
question are never cut; the files give way. How they give way (`RULES`):
- "fewer": files in rank order at their full budget while they fit; the last one that
  does not fit is cut to what is left (if that is `MIN_BLOCK_CHARS` or more), the rest
  are left out;
- "shorter": every file gets an equal share of what is left (among the slots still
  open, never more slots than files still to try), so all top_k are sent with shorter
  excerpts.
A file over its share is excerpted again from what its block really took (a whole file is
shorter than its budget) down to `MIN_BLOCK_CHARS`; one that cannot fit even then is left
out and the next files are still tried. Files that match but none fits: the caller says
so (the window, the smallest block), never "no file matches".
`DEFAULT_RULE` was chosen by measurement (tests/bench/bench_window.py, 80 questions over
the kernel docs and LaTeX manuals, share of the answers sent with no window that the
model still sees): "shorter" 0.93 / 1.00 / 0.85 / 1.00 at 2k / 4k / 8k / 32k, "fewer"
0.59 / 0.78 / 0.89 / 1.00 — shorter loses fewer at 4k and 8k together, and far fewer at 2k.
Each file's excerpts come from one `Excerpter`, so a larger share sends all a smaller
one would (since then: 0.96 / 1.00 / 1.04 / 1.11, none lost from a window to a larger).

A file whose excerpt is nearly the same as what was already sent (an exported copy, a
copy with a line appended, Sphinx's `_sources/*.rst.txt` beside the page) is skipped
for the next best file: `near_copy` compares word 5-gram shingles (`NEAR_COPY`).
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.ask import tokens as tok
from loomcli.errors import QueryError
from loomcli.search.excerpt import SCAN_BYTES, Excerpter
from loomcli.search.text import WORD

if TYPE_CHECKING:
    from loomcli.store.rows import Hit
    from loomcli.store.seam import IndexStore as Store

Near = Callable[[int, str], list[tuple[int, int, float]]]

RULES = ("fewer", "shorter")
DEFAULT_RULE = "shorter"
LABEL_CHARS = 24  # the longest page label in a header (`pp. 3, 40-41, 57`)
MIN_BLOCK_CHARS = 600  # a file cut shorter than this is left out instead
SHRINK_TRIES = 6  # excerpt again at most this many times to fit a file's share
TEMPLATE_TOKENS = 24  # a chat template's role markers around system and user messages
SHINGLE_WORDS = 5
# A file whose excerpt shares this much of its word 5-grams (of the smaller set) with one
# already sent is a near-copy. Measured (bench_window.py) on the excerpts one question
# makes of 250 real copies (python3.11-doc and kernel HTML pages vs their rST sources):
# 0.3 catches 0.90 of them and every copy with a line appended; 296 pairs of different
# documents in one folder overlap 0.13 at most (none skipped). 3- and 4-grams caught 0.91
# but let different documents reach 0.23 and 0.17: 5-grams leave the widest gap.
NEAR_COPY = 0.3
MIN_SHINGLES = 20  # a shorter excerpt is compared by its whole content hash only

INSTRUCTIONS = """\
You answer questions from the user's own notes. Use only the notes given below; do not \
add facts from elsewhere. Each note starts with a line "## [path] title". Cite every \
note you use by writing its path in square brackets, exactly as given, e.g. [notes/a.md]. \
When you rely on a sentence of a note, quote it word for word in double quotes. \
If the notes do not contain the answer, say so plainly instead of guessing. Parts of long \
notes are left out where you see [...]. Reply in the language of the question."""


@dataclass
class UsedFile:
    path: str
    title: str
    content_len: int
    spans: list[tuple[int, int]] = field(default_factory=list)  # characters of the text
    byte_spans: list[tuple[int, int]] = field(default_factory=list)  # (offset, length)
    pages: list[int] = field(default_factory=list)  # PDF pages the sent part is on
    pieces: list[tuple[int, str]] = field(default_factory=list)  # (byte offset, text) sent
    page_starts: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "title": self.title, "content_len": self.content_len}

    def source_dict(self) -> dict[str, Any]:
        return {"path": self.path, "title": self.title, "pages": self.pages or None,
                "spans": [{"offset": o, "length": n} for o, n in self.byte_spans]}


@dataclass
class FileAccount:
    """What became of one ranked file."""

    path: str
    status: str  # "whole", "trimmed" or "left out"
    reason: str = ""  # trimmed: "excerpt" or "window"; left out: "no room", "near-copy of P"
    chars: int = 0
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "reason": self.reason,
                "chars": self.chars, "tokens": self.tokens}


@dataclass
class Assembly:
    blocks: list[str]
    used: list[UsedFile]
    account: list[FileAccount]
    prompt_tokens: int
    smallest: tuple[str, int] | None = None  # nothing sent: the least one file needed
    room: int | None = None  # the files' room in tokens, when the window is known


def question_block(question: str) -> str:
    return f"Question: {question.strip()}\n"


def page_label(pages: list[int]) -> str:
    """`p. 40`, `pp. 40-42`, `pp. 3, 40-41`."""
    if not pages:
        return ""
    runs: list[list[int]] = []
    for p in sorted(set(pages)):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
    return f"p. {text}" if len(runs) == 1 and runs[0][0] == runs[0][1] else f"pp. {text}"


def shingles(text: str) -> set[int]:
    words = WORD.findall(text.lower())
    if len(words) < SHINGLE_WORDS:
        return {zlib.crc32(" ".join(words).encode())} if words else set()
    return {zlib.crc32(" ".join(words[i:i + SHINGLE_WORDS]).encode())
            for i in range(len(words) - SHINGLE_WORDS + 1)}


def near_copy(part: set[int], sent: list[tuple[str, set[int]]]) -> str | None:
    """The path of a sent excerpt that `part` nearly repeats, if any."""
    if len(part) < MIN_SHINGLES:
        return None
    for path, other in sent:
        shared = len(part & other) / max(1, min(len(part), len(other)))
        if len(other) >= MIN_SHINGLES and shared >= NEAR_COPY:
            return path
    return None


def _byte_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for a, b in spans:
        start = len(text[:a].encode("utf-8")) if not text.isascii() else a
        out.append((start, len(text[a:b].encode("utf-8"))))
    return out


def assemble_blocks(store: Store, question: str, hits: list[Hit], *, top_k: int, budget: int,
             head_chars: int, near: Near | None = None, tokens_max: int | None = None,
             rule: str = DEFAULT_RULE, estimate: Callable[[str], int] = tok.estimate
             ) -> Assembly:
    """The blocks to send for `question` over the ranked `hits`, and their account."""
    fixed = estimate(INSTRUCTIONS) + estimate("\n" + question_block(question)) + TEMPLATE_TOKENS
    room = None if tokens_max is None else tokens_max - fixed
    if room is not None and room < 0:
        raise QueryError(f"the question and the instructions take about {fixed:,} tokens, "
                         f"more than the {tokens_max:,} the model's window leaves for a "
                         "prompt", "ask a shorter question, or raise [llm] context_tokens")
    blocks: list[str] = []
    used: list[UsedFile] = []
    account: list[FileAccount] = []
    seen_hashes: dict[bytes, str] = {}
    sent: list[tuple[str, set[int]]] = []
    smallest: tuple[str, int] | None = None  # the least a left-out file needed, in tokens
    no_room = 0  # files left out for want of room since the last one sent
    for n, hit in enumerate(hits):
        if len(used) == top_k or no_room >= top_k:
            break
        row = store.file(hit.file_id)
        if row.hash is not None and row.hash in seen_hashes:
            account.append(FileAccount(hit.path, "left out",
                                       f"same content as {seen_hashes[row.hash]}"))
            continue
        page_starts = store.pages(hit.file_id) if row.kind == "pdf" else None
        text = store.text_bytes(hit.file_id, 0, SCAN_BYTES).decode("utf-8", "ignore")
        body_start = store.body_start(hit.file_id)[1]  # a note's front matter is not sent
        share = None
        if room is not None:
            # "shorter": an equal share of what is left among the slots still open (no
            # more slots than files still to try).
            slots = max(1, min(top_k - len(used), len(hits) - n))
            share = room if rule == "fewer" else room // slots
        fitted, chars, least = _fit(hit, text, question, budget, share, head_chars, near,
                                    page_starts, estimate, body_start)
        if fitted is None:
            account.append(FileAccount(hit.path, "left out", "no room"))
            if smallest is None or least < smallest[1]:
                smallest = (hit.path, least)
            no_room += 1
            continue
        block, part, pages, cost = fitted
        marks = shingles(part.text)
        copy = near_copy(marks, sent)
        if copy is not None:
            account.append(FileAccount(hit.path, "left out", f"near-copy of {copy}"))
            continue
        no_room = 0
        if row.hash is not None:
            seen_hashes[row.hash] = hit.path
        sent.append((hit.path, marks))
        if room is not None:
            room -= cost
        blocks.append(block)
        byte_spans = _byte_spans(text, part.spans)
        used.append(UsedFile(hit.path, hit.title, row.content_len, part.spans, byte_spans,
                             pages, [(o, text[a:b]) for (o, _), (a, b)
                                     in zip(byte_spans, part.spans, strict=True)],
                             page_starts))
        status = "trimmed" if part.cut else "whole"
        reason = ("window" if chars < budget else "excerpt") if part.cut else ""
        account.append(FileAccount(hit.path, status, reason, len(block), cost))
    total = fixed + sum(a.tokens for a in account if a.status != "left out")
    return Assembly(blocks, used, account, total, None if used else smallest,
                    None if room is None else (tokens_max or 0) - fixed)


def _fit(hit: Hit, text: str, question: str, budget: int, share: int | None, head_chars: int,
         near: Near | None, page_starts: list[int] | None, estimate: Callable[[str], int],
         body_start: int = 0) -> tuple[tuple[str, Any, list[int], int] | None, int, int]:
    """The file's block within `share` tokens (None: it cannot fit even at
    `MIN_BLOCK_CHARS`), the characters it was given, and its last (smallest) cost.
    Each try shrinks from what the last block really took (a whole file is shorter than
    its budget), down to the minimum block, never below it."""
    chars = budget
    cost = 0
    # One excerpter for every try (the text is scanned once): what a smaller share sends
    # is inside what a larger one sends (a larger window never sends less of the answer).
    cutter = Excerpter(text, question, head_chars, near(hit.file_id, text) if near else None,
                       body_start, hit.path)
    for _ in range(SHRINK_TRIES):
        block, part, pages = _block(hit, text, question, chars, head_chars, near,
                                    page_starts, body_start, cutter)
        cost = estimate(block) + 1
        if share is None or cost <= share:
            return (block, part, pages, cost), chars, cost
        if chars <= MIN_BLOCK_CHARS:
            break
        chars = max(MIN_BLOCK_CHARS, int(min(chars, len(block)) * share / cost * 0.95))
    return None, chars, cost


def _block(hit: Hit, text: str, question: str, chars: int, head_chars: int,
           near: Near | None, page_starts: list[int] | None, body_start: int = 0,
           cutter: Excerpter | None = None) -> tuple[str, Any, list[int]]:
    """`## [path p. N] title` and the excerpt, within `chars` characters (`cutter`: the
    file's excerpter, when it is fitted at several sizes)."""
    header_room = max(60, chars // 2)
    # The page label depends on the excerpt and the excerpt's room on the header: room
    # is kept for the longest label.
    longest = " " + "p" * LABEL_CHARS if page_starts else ""
    provisional = f"## [{hit.path}{longest}] {hit.title}".rstrip()[:header_room] + "\n"
    if cutter is None:
        cutter = Excerpter(text, question, head_chars,
                           near(hit.file_id, text) if near else None, body_start, hit.path)
    part = cutter.at(max(1, chars - len(provisional) - 1))
    pages: list[int] = []
    label = ""
    if page_starts:
        for a, n in _byte_spans(text, part.spans):
            first = bisect_right(page_starts, a)
            pages.extend(range(first, bisect_right(page_starts, max(a, a + n - 1)) + 1))
        pages = sorted(set(pages))
        label = " " + page_label(pages)
        if len(label) > len(longest):
            label = f" pp. {pages[0]}-{pages[-1]}"
    header = f"## [{hit.path}{label}] {hit.title}".rstrip()[:header_room] + "\n"
    return header + part.text.rstrip("\n") + "\n", part, pages
