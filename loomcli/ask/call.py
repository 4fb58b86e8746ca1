"""One provider call for a prompt: stream the answer, retry once at half the budget when
the server still refuses the prompt as too long, then check quotes and cite.

Never a silent cut: a second refusal is one ContextExceeded line saying which window, how
many tokens were sent and how to raise it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loomcli.ask import quotes as quotes_mod
from loomcli.errors import ContextExceeded, QueryError

if TYPE_CHECKING:
    from loomcli.ask import Answer, Prompt
    from loomcli.ask.window import Budget
    from loomcli.providers import Provider

Rebuild = Callable[["Budget"], "Prompt | None"]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def answer(prompt: Prompt, provider: Provider, on_text: Callable[[str], None] | None = None,
           *, rebuild: Rebuild | None = None,
           clock: Callable[[], float] = time.perf_counter) -> Answer:
    """Send the prompt in one call; stream the answer's pieces to on_text. `rebuild(budget)`
    assembles the prompt again under a smaller budget, for one retry after a refusal."""
    from loomcli import ask
    from loomcli.providers import plain_messages

    pieces: list[str] = []
    started = clock()
    first: float | None = None
    retried = False
    while True:
        budget = prompt.budget
        try:
            for piece in provider.chat(
                    plain_messages(prompt.system, prompt.user),
                    max_tokens=budget.answer_tokens if budget else None,
                    context_tokens=budget.context_tokens if budget else None):
                if not isinstance(piece, str):
                    continue  # no tools were offered; a stray call is not an answer
                if first is None:
                    first = clock()
                pieces.append(piece)
                if on_text:
                    on_text(piece)
            break
        except ContextExceeded as exc:
            if pieces or budget is None:
                raise
            if retried or rebuild is None:
                raise _refused(exc, prompt, provider) from None
            try:
                smaller = rebuild(budget.halved())
            except QueryError:  # at half the budget no file fits any more
                smaller = None
            if smaller is None:
                raise _refused(exc, prompt, provider) from None
            smaller.warnings = [*prompt.warnings, f"{provider.endpoint} refused a prompt of "
                                f"~{prompt.prompt_tokens:,} tokens; sent again at half the "
                                "budget"]
            smaller.timings = prompt.timings
            prompt, retried = smaller, True
    done = clock()
    text = "".join(pieces)
    timings = {**prompt.timings, "first_token_ms": _ms((first or done) - started),
               "model_ms": _ms(done - started)}
    sources = [quotes_mod.Source(u.path, [quotes_mod.Piece(o, t) for o, t in u.pieces],
                                 u.page_starts) for u in prompt.used]
    return ask.Answer(text, ask.citations(text, prompt.used), prompt.used, prompt.warnings,
                      prompt.context(), quotes_mod.check(text, sources), timings)


def _refused(exc: ContextExceeded, prompt: Prompt, provider: Provider) -> ContextExceeded:
    budget = prompt.budget
    assert budget is not None
    return ContextExceeded(
        f"{provider.endpoint} refused the prompt as longer than the model's window: loom "
        f"planned for a window of {budget.window_tokens:,} tokens ({budget.source}) and "
        f"sent about {prompt.prompt_tokens:,}, even at half the budget ({exc.message})",
        "set [llm] context_tokens to the server's real window (llama.cpp: its --ctx-size; "
        "Ollama: the model's num_ctx), or raise the server's window")
