"""What an ask sends and what comes back: the Prompt (with its account of the window)
and the Answer (with its citations), apart from the package's __init__ so that the
modules that make them (call.py) need not import the package that imports them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli.ask.assemble import FileAccount, UsedFile
from loomcli.ask.quotes import Quote

if TYPE_CHECKING:
    from loomcli.ask.window import Budget

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
