"""retrieve → excerpts → prompt → one provider call → citations.

The prompt is bounded: each file's block (its `## [path] title` line and excerpt) fits
`file_budget_chars`, so the whole prompt never exceeds top_k × budget plus the fixed
instructions and the question.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loomcli.excerpt import SCAN_BYTES, excerpt
from loomcli.providers import Provider
from loomcli.store import Hit, Store

Near = Callable[[int, str], list[tuple[int, int, float]]]

INSTRUCTIONS = """\
You answer questions from the user's own notes. Use only the notes given below; do not \
add facts from elsewhere. Each note starts with a line "## [path] title". Cite every \
note you use by writing its path in square brackets, exactly as given, e.g. [notes/a.md]. \
If the notes do not contain the answer, say so plainly instead of guessing. Parts of long \
notes are left out where you see [...]. Reply in the language of the question."""
_CITATION = re.compile(r"\[([^\[\]\n]{1,400})\]")


@dataclass
class UsedFile:
    path: str
    title: str
    content_len: int
    spans: list[tuple[int, int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "title": self.title, "content_len": self.content_len}


@dataclass
class Prompt:
    system: str
    user: str
    used: list[UsedFile]
    warnings: list[str] = field(default_factory=list)  # e.g. search by meaning failed

    def render(self) -> str:
        """Exactly what is sent, as `--show-context` prints it."""
        return f"[system]\n{self.system}\n\n[user]\n{self.user}"


@dataclass
class Answer:
    answer: str
    citations: list[str]
    used: list[UsedFile]
    warnings: list[str] = field(default_factory=list)
    conversation_id: str | None = None  # the conversation this turn was kept in
    steps: list[Any] = field(default_factory=list)  # agent.Step: the tools the model ran

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer": self.answer, "citations": self.citations,
                               "used": [u.to_dict() for u in self.used],
                               "conversation_id": self.conversation_id,
                               "steps": [s.to_dict() for s in self.steps]}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


def question_block(question: str) -> str:
    return f"Question: {question.strip()}\n"


def build_prompt(store: Store, question: str, hits: list[Hit], *, top_k: int, budget: int,
                 head_chars: int, near: Near | None = None) -> Prompt | None:
    """The prompt for `question` over the ranked `hits` (None when there are none).
    `near(file id, text)`: the file's passages scored by meaning, when it has vectors."""
    blocks: list[str] = []
    used: list[UsedFile] = []
    seen_hashes: set[bytes] = set()
    seen_texts: set[str] = set()
    for hit in hits:
        if len(used) == top_k:
            break
        row = store.file(hit.file_id)
        if row.hash is not None and row.hash in seen_hashes:
            continue  # the same content under another path: send it once
        header = f"## [{hit.path}] {hit.title}".rstrip()[: budget // 2] + "\n"
        text = store.text_bytes(hit.file_id, 0, SCAN_BYTES).decode("utf-8", "ignore")
        part = excerpt(text, question, budget - len(header) - 1, head_chars,
                       near=near(hit.file_id, text) if near else None)
        key = " ".join(part.text.split())
        if key in seen_texts:
            continue  # a near-duplicate: the same excerpt would be sent twice
        if row.hash is not None:
            seen_hashes.add(row.hash)
        seen_texts.add(key)
        blocks.append(header + part.text.rstrip("\n") + "\n")
        used.append(UsedFile(hit.path, hit.title, row.content_len, part.spans))
    if not used:
        return None
    return Prompt(INSTRUCTIONS, "\n".join(blocks) + "\n" + question_block(question), used)


def citations(answer: str, used: list[UsedFile]) -> list[str]:
    """Paths the answer cites in [brackets] that were actually sent, in order."""
    sent = {u.path for u in used}
    out: list[str] = []
    for m in _CITATION.finditer(answer):
        for part in m.group(1).split(","):
            path = part.strip().strip("`")
            if path in sent and path not in out:
                out.append(path)
    return out


def answer(prompt: Prompt, provider: Provider,
           on_text: Callable[[str], None] | None = None) -> Answer:
    """Send the prompt in one call; stream the answer's pieces to on_text."""
    pieces: list[str] = []
    for piece in provider.stream(prompt.system, prompt.user):
        pieces.append(piece)
        if on_text:
            on_text(piece)
    text = "".join(pieces)
    return Answer(text, citations(text, prompt.used), prompt.used, prompt.warnings)
