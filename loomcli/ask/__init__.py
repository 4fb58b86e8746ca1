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
from collections.abc import Callable
from typing import TYPE_CHECKING

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
from loomcli.ask.prompt import Answer, Prompt, citations
from loomcli.ask.quotes import Quote
from loomcli.errors import QueryError

if TYPE_CHECKING:
    from loomcli.ask.window import Budget
    from loomcli.store.rows import Hit
    from loomcli.store.seam import IndexStore as Store

__all__ = ["INSTRUCTIONS", "Answer", "FileAccount", "Near", "Prompt", "Quote", "UsedFile",
           "answer", "build_prompt", "citations", "page_label", "question_block"]

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
