"""One provider call for a prompt: stream the answer, retry once at half the budget when
the server still refuses the prompt as too long, then check quotes and cite.

Never a silent cut: a second refusal is one ContextExceeded line saying which window, how
many tokens were sent and how to raise it. The server's own count of the prompt is kept
(`window.observe`: the ratio that gives known models the room the margin wastes); an
Ollama count that shows a silent cut (`window.silent_cut`) is warned about once per model
and, when nothing was streamed yet, the prompt is sent again within the window it kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from loomcli.ask import quotes as quotes_mod
from loomcli.ask.bounded import Bounded, answer_limit
from loomcli.ask.prompt import Answer, citations
from loomcli.ask.tokens import raw_estimate
from loomcli.errors import ContextExceeded, QueryError

if TYPE_CHECKING:
    from loomcli.ask.prompt import Prompt
    from loomcli.ask.window import Budget
    from loomcli.providers import Provider

Rebuild = Callable[["Budget"], "Prompt | None"]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


_WARNED: set[tuple[str, str, str]] = set()  # models already warned of a silent cut


def answer(prompt: Prompt, provider: Provider, on_text: Callable[[str], None] | None = None,
           *, rebuild: Rebuild | None = None,
           clock: Callable[[], float] = time.perf_counter,
           on_warning: Callable[[str], None] | None = None) -> Answer:
    """Send the prompt in one call; stream the answer's pieces to on_text. `rebuild(budget)`
    assembles the prompt again under a smaller budget, for one retry after a refusal or
    a silent cut."""
    from loomcli.providers import plain_messages

    pieces: list[str] = []
    started = clock()
    first: float | None = None
    retried = False
    counted: int | None = None
    while True:
        budget = prompt.budget
        stream = Bounded(provider.chat(plain_messages(prompt.system, prompt.user),
                                       max_tokens=budget.answer_tokens if budget else None,
                                       context_tokens=budget.context_tokens if budget else None),
                         limit=answer_limit(budget.answer_tokens if budget else None),
                         estimate=raw_estimate)
        try:
            for piece in stream:
                if not isinstance(piece, str):
                    continue  # no tools were offered; a stray call is not an answer
                if first is None:
                    first = clock()
                pieces.append(piece)
                if on_text:
                    on_text(piece)
            counted = getattr(provider, "prompt_count", None)
            smaller = _after(prompt, provider, counted, on_text is not None,
                             None if retried else rebuild, on_warning)
            if smaller is None:
                break
            pieces, first, prompt, retried = [], None, smaller, True
            continue
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
    if stream.cut:
        prompt.warnings = [*prompt.warnings, stream.cut]
    text = "".join(pieces)
    timings = {**prompt.timings, "first_token_ms": _ms((first or done) - started),
               "model_ms": _ms(done - started)}
    sources = [quotes_mod.Source(u.path, [quotes_mod.Piece(o, t) for o, t in u.pieces],
                                 u.page_starts) for u in prompt.used]
    context = prompt.context()
    if context is not None:
        context["server_prompt_tokens"] = counted
    return Answer(text, citations(text, prompt.used), prompt.used, prompt.warnings,
                      context, quotes_mod.check(text, sources), timings)


def _after(prompt: Prompt, provider: Provider, counted: int | None, streamed: bool,
           rebuild: Rebuild | None, on_warning: Callable[[str], None] | None
           ) -> Prompt | None:
    """Learn from the server's count of the prompt; on an Ollama silent cut, warn (once
    per model) and return the prompt rebuilt within what the server kept, when the
    answer was not streamed yet (else None: the answer stands)."""
    from loomcli.ask import window

    budget = prompt.budget
    if budget is None:
        return None
    estimated = max(1, round(prompt.prompt_tokens / budget.ratio))
    cut = (window.silent_cut(counted, estimated, budget.context_tokens)
           if provider.name == "ollama" else None)
    if cut is None or counted is None:
        window.observe(provider, estimated, counted)
        return None
    kept = cut if cut < budget.window_tokens else budget.window_tokens // 2
    smaller = None
    if rebuild is not None and not streamed:
        try:
            smaller = rebuild(budget.within(kept, f"{provider.endpoint} kept {counted:,}")
                              if cut < budget.window_tokens else budget.halved())
        except QueryError:
            smaller = None
    message = (f"{provider.endpoint} evaluated only {counted:,} of the ~{estimated:,} prompt "
               f"tokens loom sent with num_ctx {budget.context_tokens:,}: Ollama cut the "
               f"prompt silently (its window holds about {cut:,}); "
               + ("sent again within it" if smaller is not None else
                  "this answer saw only the prompt's end")
               + f" — set [llm] context_tokens to {kept:,} or less")
    key = (provider.name, provider.endpoint, provider.model)
    if key not in _WARNED:
        _WARNED.add(key)
        if on_warning is not None:
            on_warning(message)
        prompt.warnings = [*prompt.warnings, message]
    if smaller is not None:
        smaller.warnings = [*prompt.warnings]
        smaller.timings = prompt.timings
    return smaller


def _refused(exc: ContextExceeded, prompt: Prompt, provider: Provider) -> ContextExceeded:
    budget = prompt.budget
    assert budget is not None
    return ContextExceeded(
        f"{provider.endpoint} refused the prompt as longer than the model's window: loom "
        f"planned for a window of {budget.window_tokens:,} tokens ({budget.source}) and "
        f"sent about {prompt.prompt_tokens:,}, even at half the budget ({exc.message})",
        "set [llm] context_tokens to the server's real window (llama.cpp: its --ctx-size; "
        "Ollama: the model's num_ctx), or raise the server's window")
