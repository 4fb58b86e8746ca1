"""One model answer, bounded whatever the model does: a model that ignores `max_tokens`
and never stops streaming is stopped at a multiple of the answer's reserve, and a stream
that goes on for longer than `[llm] answer_timeout_s` (or past the provider's byte cap) is
cut there. Either way what came before is kept as the answer and `cut` says, in one
line, what happened. Text that is not valid Unicode (a lone surrogate from a JSON escape)
becomes U+FFFD here, once for every later printer, store and request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from loomcli.providers import StreamCut, ToolCall
from loomcli.sanitize import has_surrogates, utf8

SLACK = 2  # an answer may take this many times its reserve (estimates differ from the
SLACK_MIN_TOKENS = 256  # model's own count), and at least this many tokens more
PROGRESS_S = 5.0  # how often a long answer reports its progress
ESTIMATE_CHARS = 2048  # the text is estimated in runs of about this many characters


def answer_limit(reserve: int | None) -> int | None:
    """The most tokens an answer may take before loom stops reading it (None: no bound
    but the provider's byte and time caps)."""
    if not reserve:
        return None
    return max(reserve * SLACK, reserve + SLACK_MIN_TOKENS)


def _valid_text(call: ToolCall) -> ToolCall:
    """The call with lone surrogates (JSON's "\\udcff") in its name or arguments made
    U+FFFD: such text can be neither printed, nor kept, nor sent again as UTF-8."""
    import json

    dumped = json.dumps(call.arguments, ensure_ascii=False)
    if not has_surrogates(call.name + dumped):
        return call
    return ToolCall(call.id, utf8(call.name), json.loads(utf8(dumped)), utf8(call.error))


class Bounded:
    """Iterate over `pieces` (a provider's chat); stops past `limit` tokens of text (by
    `estimate`, over runs of ESTIMATE_CHARS cut at a space: pieces are often one token
    each, and a per-piece estimate would count a word cut in two twice), or when the
    provider cuts the stream (StreamCut) after something came. `progress` gets (tokens
    so far, seconds so far) every PROGRESS_S while the answer streams."""

    def __init__(self, pieces: Iterator[str | ToolCall], *, limit: int | None,
                 estimate: Callable[[str], int],
                 progress: Callable[[int, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pieces, self.limit, self.estimate = pieces, limit, estimate
        self.progress, self.clock = progress, clock
        self.tokens = 0  # estimated so far (the text not yet estimated is `pending`)
        self.pending = ""
        self.cut = ""  # why the answer stopped short ("" when it ended by itself)

    def _count(self, piece: str) -> None:
        self.pending += piece
        if len(self.pending) < ESTIMATE_CHARS:
            return
        space = max(self.pending.rfind(" "), self.pending.rfind("\n"))
        head, self.pending = ((self.pending[:space + 1], self.pending[space + 1:])
                              if space > 0 else (self.pending, ""))
        self.tokens += self.estimate(head)

    def __iter__(self) -> Iterator[str | ToolCall]:
        started = last = self.clock()
        got_any = False
        try:
            for piece in self.pieces:
                if isinstance(piece, str):
                    piece = utf8(piece)
                    self._count(piece)
                else:
                    piece = _valid_text(piece)
                got_any = True
                yield piece
                if self.limit is not None and self.tokens > self.limit:
                    self.cut = (f"the model went on past ~{self.limit:,} tokens, twice the "
                                "answer's reserve: its answer is cut there")
                    return
                now = self.clock()
                if self.progress and now - last >= PROGRESS_S:
                    last = now
                    self.progress(self.tokens, now - started)
        except StreamCut as exc:
            if not got_any:
                raise
            self.cut = f"{exc.message}: the answer is cut there"
        finally:
            close = getattr(self.pieces, "close", None)
            if close is not None:
                close()  # hang up: the model may still be writing
