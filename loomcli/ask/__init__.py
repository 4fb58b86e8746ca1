"""retrieve → excerpts → prompt under the model's window → one provider call → citations,
checked quotes and an account of what was sent.

The modules, one job each:
- `tokens`: a conservative token estimate (measured against a real BPE vocabulary);
- `window`: the budget in tokens (the model's window, less the answer's reserve; Ollama's
  stable num_ctx);
- `assemble`: the prompt under that budget, with the account of every file (sent whole,
  trimmed, left out and why) and the near-copy rule;
- `quotes`: the answer's quotes looked up in what was sent;
- `call`: the provider call, retried once at half the budget when the server refuses
  the prompt as too long, with the stage timings.
`operations.Corpus.ask` is the one entry every edge calls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.ask.assemble import (
    INSTRUCTIONS,
    FileAccount,
    Near,
    UsedFile,
    assemble_blocks,
    page_label,
    question_block,
)
from loomcli.ask.call import answer
from loomcli.ask.quotes import Quote
from loomcli.errors import QueryError

if TYPE_CHECKING:
    from loomcli.ask.window import Budget
    from loomcli.store import Hit, Store

__all__ = ["INSTRUCTIONS", "Answer", "FileAccount", "Near", "Prompt", "Quote", "UsedFile",
           "answer", "build_prompt", "citations", "page_label", "question_block"]

_CITATION = re.compile(r"\[([^\[\]\n]{1,400})\]")
_PAGES = re.compile(r"\s+pp?\.\s*[\d,\s\-–]+$")


@dataclass
class Prompt:
    system: str
    user: str
    used: list[UsedFile]
    warnings: list[str] = field(default_factory=list)  # e.g. search by meaning failed
    account: list[FileAccount] = field(default_factory=list)
    budget: Budget | None = None
    prompt_tokens: int = 0  # the estimate
    timings: dict[str, float] = field(default_factory=dict)

    def context(self) -> dict[str, Any] | None:
        """What was sent against the window (None when no window was known)."""
        if self.budget is None:
            return None
        out = self.budget.to_dict()
        out = {"window_tokens": out.pop("window_tokens"), "prompt_tokens": self.prompt_tokens,
               **out, "files_sent": len(self.used),
               "files_left_out": sum(a.status == "left out" for a in self.account)}
        return out

    def header_line(self) -> str:
        """The context as one line, for `--show-context` and `loom ask -v`."""
        c = self.context()
        if c is None:
            return "[context] no window known"
        left = [a for a in self.account if a.status == "left out"]
        why = "; ".join(f"{a.path}: {a.reason}" for a in left[:5])
        more = f" (+{len(left) - 5})" if len(left) > 5 else ""
        return (f"[context] window {c['window_tokens']:,} tokens ({c['source']}), prompt "
                f"~{c['prompt_tokens']:,}, answer {c['answer_tokens']:,} reserved; "
                f"{c['files_sent']} files sent, {c['files_left_out']} left out"
                + (f" ({why}{more})" if left else ""))

    def render(self) -> str:
        """Exactly what is sent, as `--show-context` prints it."""
        return f"[system]\n{self.system}\n\n[user]\n{self.user}"


@dataclass
class Answer:
    answer: str
    citations: list[str]
    used: list[UsedFile]
    warnings: list[str] = field(default_factory=list)
    context: dict[str, Any] | None = None
    quotes: list[Quote] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    conversation_id: str | None = None  # the conversation this turn was kept in
    steps: list[Any] = field(default_factory=list)  # agent.Step: the tools the model ran
    not_kept: str | None = None  # why the turn could not be kept (the answer stands)

    def sources(self) -> list[dict[str, Any]]:
        """Each cited file with the pages and byte spans that were sent."""
        by_path = {u.path: u for u in self.used}
        return [by_path[p].source_dict() for p in self.citations if p in by_path]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer": self.answer, "citations": self.citations,
                               "used": [u.to_dict() for u in self.used]}
        if self.warnings:
            out["warnings"] = self.warnings
        out["sources"] = self.sources()
        out["quotes"] = [q.to_dict() for q in self.quotes]
        out["context"] = self.context
        out["timings"] = self.timings
        out["conversation_id"] = self.conversation_id
        out["steps"] = [s.to_dict() for s in self.steps]
        return out


def build_prompt(store: Store, question: str, hits: list[Hit], *, top_k: int, budget: int,
                 head_chars: int, near: Near | None = None, window: Budget | None = None,
                 rule: str | None = None) -> Prompt | None:
    """The prompt for `question` over the ranked `hits` (None when there are none).
    `near(file id, text)`: the file's passages scored by meaning, when it has vectors.
    `window`: the token budget it must fit (None: only the character bounds)."""
    from loomcli.ask.assemble import DEFAULT_RULE
    from loomcli.ask.linked import with_linked

    hits = with_linked(store, hits, top_k)
    done = assemble_blocks(store, question, hits, top_k=top_k, budget=budget,
                           head_chars=head_chars, near=near,
                           tokens_max=window.prompt_tokens if window else None,
                           rule=rule or DEFAULT_RULE,
                           estimate=_scaled(window.ratio if window else 1.0))
    if not done.used:
        if done.smallest is not None and window is not None:
            raise _none_fits(len(done.account), done.smallest, done.room or 0, window)
        return None
    return Prompt(INSTRUCTIONS, "\n".join(done.blocks) + "\n" + question_block(question),
                  done.used, account=done.account, budget=window,
                  prompt_tokens=done.prompt_tokens)


def _scaled(ratio: float) -> Callable[[str], int]:
    """The estimate in the model's own tokens, as its server's counts taught (ratio)."""
    from loomcli.ask import tokens

    if ratio == 1.0:
        return tokens.estimate
    return lambda text: math.ceil(tokens.estimate(text) * ratio)


def _none_fits(matched: int, smallest: tuple[str, int], room: int, window: Budget
               ) -> QueryError:
    from loomcli.ask.assemble import MIN_BLOCK_CHARS

    path, tokens = smallest
    files = "1 indexed file matches" if matched == 1 else f"{matched} indexed files match"
    return QueryError(
        f"{files} the question, but none fits the model's window: {window.window_tokens:,} "
        f"tokens ({window.source}) less {window.answer_tokens:,} for the answer leave "
        f"{max(0, room):,} after the instructions and the question, and the smallest block "
        f"({MIN_BLOCK_CHARS} characters of {path}) takes about {tokens:,}; nothing was sent",
        "raise [llm] context_tokens to the model's real window (or the server's), or ask "
        "a shorter question")


def citations(answer: str, used: list[UsedFile]) -> list[str]:
    """Paths the answer cites in [brackets] that were actually sent, in order (a page
    label after the path, as the prompt's headers show it, is allowed)."""
    sent = {u.path for u in used}
    out: list[str] = []
    for m in _CITATION.finditer(answer):
        for part in m.group(1).split(","):
            path = _PAGES.sub("", part.strip().strip("`"))
            if path in sent and path not in out:
                out.append(path)
    return out
