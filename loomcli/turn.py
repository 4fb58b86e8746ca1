"""One turn of a conversation: recall the earlier turns, ask (plainly or as an agent), keep
the turn.

The plain ask retrieves with the conversation's words (the previous question's and the new
one's) and sends the earlier turns with the notes; the agent gets them as the messages they
were. Either way the earlier turns take at most a share of the window (`history.recall`).
The turn is written only once its answer is complete: an interrupted ask leaves the
conversation as it was after its last complete turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loomcli import agent, ask, history
from loomcli.conversations import Conversation, Conversations
from loomcli.errors import ToolsUnsupported
from loomcli.providers import Message

if TYPE_CHECKING:
    from loomcli.operations import Corpus
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


def estimator() -> agent.Estimate:
    """The ask's token estimate (issue 20's, measured against a real BPE vocabulary)."""
    try:
        from loomcli.ask.tokens import estimate
    except ImportError:  # before the window work: a conservative bytes / 3
        return lambda text: (len(text.encode("utf-8")) + 2) // 3
    return estimate


def answer_reserve(config: Any, window: int) -> int:
    """Tokens kept for the answer: `[llm] max_answer_tokens`, else sized to the window."""
    return int(config.get("llm.max_answer_tokens") or max(256, min(2048, window // 4)))


def budget(config: Any, provider: Provider, question: str, share: int
           ) -> tuple[int, int, int, agent.Estimate]:
    """(window, answer reserve, the earlier turns' budget, the estimate) of one turn."""
    estimate = estimator()
    window = provider.window().tokens
    answer_tokens = answer_reserve(config, window)
    room = window - answer_tokens - estimate(agent.INSTRUCTIONS) - estimate(question)
    return window, answer_tokens, max(0, room // share), estimate


def model_text(provider: Provider, window: int) -> Callable[[list[Message], int], str]:
    """One plain model call's whole text (for the rolling summary)."""

    def chat(messages: list[Message], max_tokens: int) -> str:
        return "".join(p for p in provider.chat(messages, max_tokens=max_tokens,
                                                 context_tokens=window)
                       if isinstance(p, str))

    return chat


def run(corpus: Corpus, get_provider: Callable[[], Provider], question: str,
        conv: Conversation | None,
        settings: Settings, *, store: Conversations | None,
        on_text: Callable[[str], None] | None = None,
        on_step: Callable[[agent.Step], None] | None = None,
        on_warning: Callable[[str], None] | None = None) -> ask.Answer:
    """Answer `question` as the next turn of `conv` (None: a new conversation) and keep the
    turn in `store` (None: keep nothing). `get_provider` is called only when a model is
    (a plain ask that matches nothing needs none)."""
    recalled = history.Recall()
    provider = None
    if settings.agent or (conv is not None and conv.turns):
        provider = get_provider()
        window, answer_tokens, history_budget, estimate = budget(
            corpus.config, provider, question, settings.history_share)
        recalled = history.recall(conv, history_budget, estimate,
                                  history.summarizer(model_text(provider, window)))
    result: ask.Answer | None = None
    if settings.agent and provider is not None:
        try:
            result = _agent(corpus, provider, question, recalled, settings, window,
                            answer_tokens, estimate, on_text, on_step)
        except ToolsUnsupported as exc:
            if on_warning:
                on_warning(f"{provider.model} takes no tools ({exc.message}); asking "
                           "without --agent")
    if result is None:
        result = corpus.ask_once(question, settings.top_k, provider=provider or get_provider,
                                 on_text=on_text,
                            mode=settings.mode, on_warning=on_warning,
                            retrieve_with=history.retrieval_text(conv, question),
                            recalled=recalled if recalled.turns or recalled.summary else None)
        if not result.used:
            return result  # nothing matched, nothing asked: nothing to keep
    if store is not None:
        result.conversation_id = store.add_turn(
            conv.id if conv else None, question, result.answer, sources=result.citations,
            steps=[s.to_dict() for s in result.steps],
            summary=(recalled.summary, recalled.summary_upto) if recalled.made else None)
    return result


def _agent(corpus: Corpus, provider: Provider, question: str, recalled: history.Recall,
           settings: Settings, window: int, answer_tokens: int, estimate: agent.Estimate,
           on_text: Callable[[str], None] | None,
           on_step: Callable[[agent.Step], None] | None) -> ask.Answer:
    limits = agent.Limits(settings.max_steps, settings.max_calls, settings.result_chars,
                          window, answer_tokens)
    out = agent.run(corpus, provider, question, limits=limits, estimate=estimate,
                    history=recalled.messages(), system=agent.INSTRUCTIONS + recalled.note(),
                    on_step=on_step, on_text=on_text)
    used = corpus.used_files(list(dict.fromkeys(r.path for r in out.returned)))
    result = ask.Answer(out.answer, ask.citations(out.answer, used), used)
    result.steps = out.steps
    return result
