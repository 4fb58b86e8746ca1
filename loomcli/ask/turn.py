"""One turn of a conversation: recall the earlier turns, ask (plainly or as an agent), keep
the turn.

The plain ask retrieves with the conversation's words (the previous question's and the new
one's) and sends the earlier turns with the notes; the agent gets them as the messages they
were. Either way the earlier turns take at most a share of the window (`history.recall`).
The turn is written only once its answer is complete: an interrupted ask leaves the
conversation as it was after its last complete turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomcli import ask
from loomcli.ask import agent, history
from loomcli.conversations import Conversation, ConversationBusy, Conversations, Later
from loomcli.errors import ToolsUnsupported
from loomcli.providers import DEFAULT_WINDOW, Message

if TYPE_CHECKING:
    from loomcli.ask.session import Session
    from loomcli.ask.window import Budget
    from loomcli.providers import Provider


@dataclass
class Settings:
    """The limits of one turn, from the operations layer and the config."""

    top_k: Any
    mode: Any
    agent: bool
    max_steps: int
    max_calls: int
    result_chars: int
    history_share: int  # earlier turns take at most 1/history_share of the prompt's room


@dataclass
class Plan:
    """The token plan of one turn."""

    budget: Budget  # the model's window as the ask plans it, and the answer's reserve
    history_tokens: int  # what the earlier turns may take
    estimate: agent.Estimate


def budget(session: Session, provider: Provider, question: str, share: int) -> Plan:
    """The window (as a plain ask plans it: Ollama's stable num_ctx), the answer's reserve
    and the earlier turns' share of what is left."""
    from loomcli.ask import tokens, window

    warnings: list[str] = []
    planned = session.window_budget(provider, warnings) or window.Budget(
        DEFAULT_WINDOW, window.answer_reserve(DEFAULT_WINDOW, None), "default")
    room = planned.prompt_tokens - tokens.estimate(agent.INSTRUCTIONS) \
        - tokens.estimate(question)
    return Plan(planned, max(0, room // share), tokens.estimate)


def model_text(provider: Provider, window: int | None
               ) -> Callable[[list[Message], int], str]:
    """One plain model call's whole text (for the rolling summary)."""

    def chat(messages: list[Message], max_tokens: int) -> str:
        return "".join(p for p in provider.chat(messages, max_tokens=max_tokens,
                                                 context_tokens=window)
                       if isinstance(p, str))

    return chat


def run(session: Session, get_provider: Callable[[], Provider], question: str,
        conv: Conversation | None, settings: Settings, *,
        store: Conversations | Later | None,
        on_text: Callable[[str], None] | None = None,
        on_step: Callable[[agent.Step], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_sending: Callable[[ask.Prompt | None, str], None] | None = None,
        on_progress: Callable[[str], None] | None = None) -> ask.Answer:
    """Answer `question` as the next turn of `conv` (None: a new conversation) and keep the
    turn in `store` (None: keep nothing). `get_provider` is called only when a model is
    needed (a plain ask that matches nothing needs none). `on_sending(prompt, model)`: just
    before the model is called (prompt None for an agent)."""
    recalled = history.Recall()
    provider = None
    plan = None
    if settings.agent or (conv is not None and conv.turns):
        provider = get_provider()
        plan = budget(session, provider, question, settings.history_share)
        recalled = history.recall(conv, plan.history_tokens, plan.estimate, history.summarizer(
            model_text(provider, plan.budget.context_tokens), plan.budget.window_tokens))
    result: ask.Answer | None = None
    if settings.agent and provider is not None and plan is not None:
        try:
            if on_sending is not None:
                on_sending(None, provider.model)
            result = _agent(session, provider, question, recalled, settings, plan, on_text,
                            on_step, clock, on_progress)
            for warning in result.warnings if on_warning else ():
                on_warning(warning)  # type: ignore[misc]
        except ToolsUnsupported as exc:
            if on_warning:
                on_warning(f"{provider.model} takes no tools ({exc.message}); asking "
                           "without --agent")
    if result is None:
        earlier = recalled if recalled.turns or recalled.summary else None
        result = session.ask_once(question, settings.top_k,
                                  provider=provider or get_provider, on_text=on_text,
                                  mode=settings.mode, on_warning=on_warning, clock=clock,
                                  recalled=earlier,
                                  retrieve_with=history.retrieval_text(conv, question),
                                  on_sending=on_sending)
        if not result.used and provider is not None and plan is not None and earlier:
            # "now into German", "shorter?": about the conversation, not the notes.
            result = _about_the_conversation(provider, question, earlier, plan, on_text,
                                             clock, on_sending)
        if not result.used and not result.answer:
            return result  # nothing matched, nothing asked: nothing to keep
    if store is not None:
        try:
            result.conversation_id = store.add_turn(
                conv.id if conv else None, question, result.answer,
                sources=result.citations, steps=[s.to_dict() for s in result.steps],
                summary=(recalled.summary, recalled.summary_upto) if recalled.made else None)
        except ConversationBusy as exc:
            result.not_kept = str(exc)  # the answer stands; the edge says it was not kept
            result.warnings.append(result.not_kept)
    return result


CONVERSATION_INSTRUCTIONS = (
    "You are continuing a conversation with a user about their notes. No note matched "
    "their new message: it is about the conversation itself (translate, shorten, explain "
    "or rephrase an earlier answer). Answer it from the conversation below, keeping the "
    "[path] citations the earlier answers gave. If it needs notes the conversation does "
    "not hold, say so.")


def _about_the_conversation(provider: Provider, question: str, recalled: history.Recall,
                            plan: Plan, on_text: Callable[[str], None] | None,
                            clock: Callable[[], float],
                            on_sending: Callable[[ask.Prompt | None, str], None] | None
                            ) -> ask.Answer:
    """A follow-up that matches no note, sent with the conversation alone."""
    from loomcli.ask import question_block

    user = recalled.as_text() + question_block(question)
    prompt = ask.Prompt(CONVERSATION_INSTRUCTIONS, user, [], budget=plan.budget,
                        prompt_tokens=plan.estimate(CONVERSATION_INSTRUCTIONS)
                        + plan.estimate(user))
    if on_sending is not None:
        on_sending(prompt, provider.model)
    result = ask.answer(prompt, provider, on_text, clock=clock)
    earlier = {p for t in recalled.turns for p in t.sources}
    result.citations = ask.citations(result.answer, [ask.UsedFile(p, "", 0) for p in earlier])
    result.quotes = []  # nothing was sent to check them against but the earlier answers
    return result


def _agent(session: Session, provider: Provider, question: str, recalled: history.Recall,
           settings: Settings, plan: Plan, on_text: Callable[[str], None] | None,
           on_step: Callable[[agent.Step], None] | None,
           clock: Callable[[], float],
           on_progress: Callable[[str], None] | None = None) -> ask.Answer:
    from loomcli.ask import quotes

    started = clock()
    limits = agent.Limits(settings.max_steps, settings.max_calls, settings.result_chars,
                          plan.budget.window_tokens, plan.budget.answer_tokens,
                          plan.budget.context_tokens)
    out = agent.run(session.notes.run_tool, provider, question, limits=limits,
                    estimate=plan.estimate, history=recalled.messages(),
                    system=agent.INSTRUCTIONS + recalled.note(), on_step=on_step,
                    on_text=on_text, on_progress=on_progress)
    used = session.used_files(out.returned)
    sources = [quotes.Source(u.path, [quotes.Piece(o, t) for o, t in u.pieces], u.page_starts)
               for u in used]
    context = {"window_tokens": plan.budget.window_tokens,
               "prompt_tokens": max(out.prompt_tokens, default=0),
               "answer_tokens": plan.budget.answer_tokens, "source": plan.budget.source,
               "files_sent": len(used), "files_left_out": 0,
               "server_prompt_tokens": out.server_tokens[-1] if out.server_tokens else None}
    result = ask.Answer(out.answer, ask.citations(out.answer, used), used, out.warnings,
                        context,
                        quotes.check(out.answer, sources),
                        {"model_ms": round((clock() - started) * 1000, 1)})
    result.steps = out.steps
    return result
