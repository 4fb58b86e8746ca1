"""A follow-up's memory of its conversation, within a token budget.

The most recent turns go verbatim (question and answer), newest first until the budget is
spent; the older ones are folded into a rolling summary written by the model (one short
call, kept with the conversation so the next follow-up reuses and extends it). When that
call fails the summary is plain shortening of each turn instead. Never over the budget.

The summary call itself fits the model's window: the turns it folds share what the window
leaves (short ones whole, long ones cut to an equal share), so a kept 8 MB answer sends a
few thousand tokens, not 8 MB. A text is only ever estimated over the part of it that
could fit (`tokens.TOKEN_CHARS_MAX` characters a token at most), so a huge answer costs
what the budget does, not what the answer does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loomcli.ask.tokens import TOKEN_CHARS_MAX
from loomcli.conversations import Conversation, Turn
from loomcli.errors import ProviderError
from loomcli.providers import Message

SUMMARY_SHARE = 3  # the summary takes at most a third of the history's budget
SUMMARY_INSTRUCTIONS = """\
Summarise the conversation below between a user and an assistant that answers from the \
user's notes, in at most {words} words. Keep each question's subject, the facts of the \
answers and the file paths they cite in [brackets]. Write only the summary."""
WORDS_PER_TOKEN = 0.6  # for the summary's length in words (English prose, measured ~0.75)
TURN_CHARS_SHORTENED = 240  # each folded turn's question and answer, when the model fails
TEMPLATE_TOKENS = 24  # a chat template's role markers around the two messages
SUMMARY_INPUT_MIN = 128  # a window leaving less for the turns: no summary call

Estimate = Callable[[str], int]
Summarize = Callable[[str, int], str]  # (text to summarise, words) -> summary


@dataclass
class Recall:
    summary: str = ""
    summary_upto: int = 0  # turns 1..summary_upto are in the summary
    turns: list[Turn] = field(default_factory=list)  # verbatim, oldest first
    made: bool = False  # the summary was written (or extended) for this follow-up
    tokens: int = 0  # the estimate of what this adds to a request

    def messages(self) -> list[Message]:
        """The verbatim turns as the user / assistant messages they were."""
        out: list[Message] = []
        for t in self.turns:
            out += [Message("user", t.question), Message("assistant", t.answer)]
        return out

    def note(self) -> str:
        """The summary as a paragraph for the instructions ("" when there is none)."""
        if not self.summary:
            return ""
        return f"\n\nEarlier in this conversation (a summary):\n{self.summary}"

    def as_text(self) -> str:
        """Summary and turns as one block, for a prompt with a single user message."""
        parts = [f"Earlier in this conversation (a summary): {self.summary}"] \
            if self.summary else []
        for t in self.turns:
            parts.append(f"Earlier question: {t.question}\nYour answer: {t.answer}")
        return "\n\n".join(parts) + ("\n\n" if parts else "")


def retrieval_text(conv: Conversation | None, question: str) -> str:
    """What a follow-up retrieves with: the previous question's words and the new ones,
    so "and who keeps the ledger of it?" finds the notes the conversation is about."""
    if conv is None or not conv.turns:
        return question
    return f"{conv.turns[-1].question}\n{question}"


def _within(text: str, tokens: int) -> str:
    """The part of `text` that could fit `tokens` (a longer text is over them anyway)."""
    return text[: (max(0, tokens) + 1) * TOKEN_CHARS_MAX]


def _turn_tokens(t: Turn, estimate: Estimate, limit: int) -> int:
    """A turn's cost, exact up to `limit` (more means over it)."""
    return estimate(_within(t.question, limit)) + estimate(_within(t.answer, limit)) + 16


def _shortened(text: str, chars: int) -> str:
    text = " ".join(text[: chars * 4].split())
    return text if len(text) <= chars else text[: chars - 5] + "[...]"


def _plain(previous: str, turns: list[Turn]) -> str:
    parts = [previous] if previous else []
    parts += [f"Q: {_shortened(t.question, TURN_CHARS_SHORTENED // 2)} — A: "
              f"{_shortened(t.answer, TURN_CHARS_SHORTENED)}" for t in turns]
    return "\n".join(parts)


def _fit(text: str, tokens: int, estimate: Estimate) -> str:
    """Cut from the front (the oldest part of a rolling summary goes first)."""
    if len(text) > (max(0, tokens) + 1) * TOKEN_CHARS_MAX:
        text = "[...]" + text[-(max(0, tokens) + 1) * TOKEN_CHARS_MAX:]
    while text and estimate(text) > tokens:
        text = text[max(1, len(text) // 5):]
        text = "[...]" + text[text.find(" ") + 1:] if " " in text else ""
    return text


def _head(text: str, tokens: int, estimate: Estimate) -> str:
    """The start of `text` within `tokens`, marked `[...]` where it was cut."""
    if tokens <= 2:
        return ""
    cut = _within(text, tokens)
    cost = estimate(cut)
    if cost <= tokens and len(cut) == len(text):
        return text
    while cut and cost > tokens - 2:
        cut = cut[: int(len(cut) * (tokens - 2) / cost * 0.95)]
        cost = estimate(cut)
    return cut + "[...]" if cut else ""


def recall(conv: Conversation | None, budget: int, estimate: Estimate,
           summarize: Summarize | None = None) -> Recall:
    """The conversation's turns that fit `budget` tokens, the rest summarised."""
    if conv is None or not conv.turns or budget <= 0:
        return Recall()
    turns = conv.turns
    summary_room = budget // SUMMARY_SHARE
    verbatim: list[Turn] = []
    used = 0
    for t in reversed(turns):
        need = _turn_tokens(t, estimate, budget)
        room = budget - (summary_room if len(verbatim) + 1 < len(turns) else 0)
        if used + need > room:
            break
        verbatim.insert(0, t)
        used += need
    if not verbatim:  # the newest turn alone is too long: its answer, shortened
        t = turns[-1]
        room = budget - summary_room - estimate(_within(t.question, budget)) - 16
        answer = _head(t.answer, room, estimate)
        if room > 0 and answer:
            verbatim = [Turn(t.n, t.question, answer, t.sources)]
            used = _turn_tokens(verbatim[0], estimate, budget)
    first_verbatim = verbatim[0].n if verbatim else turns[-1].n + 1
    folded_upto = first_verbatim - 1
    out = Recall(turns=verbatim, tokens=used)
    if folded_upto <= 0:
        return out
    summary, upto = conv.summary, conv.summary_upto
    if upto > folded_upto:  # the kept summary reaches into the verbatim turns
        out.turns = [t for t in verbatim if t.n > upto]
        out.tokens = sum(_turn_tokens(t, estimate, budget) for t in out.turns)
    elif upto < folded_upto:
        new = [t for t in turns if upto < t.n <= folded_upto]
        summary = _summarised(summary, new, summary_room, estimate, summarize)
        upto, out.made = folded_upto, True
    room = budget - out.tokens
    out.summary = _fit(summary, max(0, room - 16), estimate)
    out.summary_upto = upto
    out.tokens += estimate(out.summary) + 16 if out.summary else 0
    return out


def _summarised(previous: str, turns: list[Turn], room: int, estimate: Estimate,
                summarize: Summarize | None) -> str:
    if summarize is not None:
        words = max(20, int(room * WORDS_PER_TOKEN))
        text = _to_summarise(previous, turns, estimate,
                             summarize.input_tokens(words, estimate)
                             if isinstance(summarize, Summarizer) else None)
        try:
            made = summarize(text, words) if text else ""
        except ProviderError:
            made = ""
        if made.strip():
            return _fit(made.strip(), room, estimate)
    return _fit(_plain(previous, turns), room, estimate)


def _to_summarise(previous: str, turns: list[Turn], estimate: Estimate, room: int | None
                  ) -> str:
    """The summary so far and the turns to fold, within `room` tokens when it is known:
    the summary so far takes at most a quarter, each turn an equal share of the rest
    (a short turn whole, what it leaves going to the longer ones)."""
    parts = [f"User: {t.question}\nAssistant: {t.answer}" for t in turns]
    if room is not None:
        if room < SUMMARY_INPUT_MIN:
            return ""
        previous = _head(previous, room // 4, estimate) if previous else ""
        left = room - (estimate(previous) + 8 if previous else 0)
        costs = sorted((_turn_tokens(t, estimate, left), i) for i, t in enumerate(turns))
        for k, (cost, i) in enumerate(costs):
            share = left // (len(costs) - k) - 4
            if cost > share:
                parts[i] = _head(parts[i], share, estimate)
            left -= estimate(parts[i]) + 4 if parts[i] else 0
        parts = [p for p in parts if p]
    return (f"Summary so far: {previous}\n\n" if previous else "") + "\n\n".join(parts)


@dataclass
class Summarizer:
    """A Summarize over one model call (`chat(messages, max_tokens)` -> its text), its
    input fitted to `window_tokens` (the num_ctx or window the call is made with)."""

    chat: Callable[[list[Message], int], str]
    window_tokens: int | None = None

    def input_tokens(self, words: int, estimate: Estimate) -> int | None:
        """What the turns to fold may take of the window, after instructions and answer."""
        if not self.window_tokens:
            return None
        return (self.window_tokens - _answer_tokens(words) - TEMPLATE_TOKENS
                - estimate(SUMMARY_INSTRUCTIONS.format(words=words)))

    def __call__(self, text: str, words: int) -> str:
        return self.chat([Message("system", SUMMARY_INSTRUCTIONS.format(words=words)),
                          Message("user", text)], _answer_tokens(words))


def _answer_tokens(words: int) -> int:
    return int(words / WORDS_PER_TOKEN) + 16


def summarizer(chat: Callable[[list[Message], int], str], window_tokens: int | None = None
               ) -> Summarizer:
    """A Summarize over one model call, within `window_tokens` when given."""
    return Summarizer(chat, window_tokens)
