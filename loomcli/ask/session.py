"""Asks over one corpus: the window an ask plans for, the prompt it sends, the agent's
loop, the conversation's turn.

The operations layer checks an ask's arguments and hands a `Session` what it needs of the
corpus, through the corpus's public API (`Notes`: its config, a retrieval over its index,
the index itself, its reading tools) and where the corpus keeps its conversations.
Everything from there happens here and in the modules this calls (`turn`, `agent`,
`assemble`, `call`), none of which imports the operations or calls back into them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from loomcli.errors import ConfigError, LoomError
from loomcli.limits import AGENT_MAX_CALLS, ASK_CANDIDATES, HISTORY_SHARE, TOOL_RESULT_CHARS

if TYPE_CHECKING:
    from loomcli.ask import Answer, Prompt, UsedFile
    from loomcli.ask.agent import Returned, Step
    from loomcli.ask.history import Recall
    from loomcli.ask.window import Budget
    from loomcli.config import Config
    from loomcli.conversations import Conversation, Conversations, Later
    from loomcli.providers import Provider
    from loomcli.store.rows import Hit
    from loomcli.store.seam import IndexStore as Store
    from loomcli.tools import Tool

Sending = Callable[["Prompt | None", str], None]  # (what is sent, the model) before a call
Near = Callable[[int, str], list[tuple[int, int, float]]]


@dataclass
class Retrieved:
    """The files an ask may send, best first, with the index they are read from (open
    while the prompt is made) and their passages by meaning (`near(file id, text)`:
    empty without vectors)."""

    store: Store
    hits: list[Hit]
    warnings: list[str]
    near: Near


class Notes(Protocol):
    """What an ask uses of a corpus (operations.Corpus is one)."""

    config: Config

    def ask_scope(self, top_k: Any, mode: Any) -> tuple[int, str]:
        """An ask's number of files (checked; `[ask] top_k` when None) and search mode."""
        ...

    def retrieved(self, query: str, n: int, mode: str
                  ) -> AbstractContextManager[Retrieved]:
        """The best `n` files for `query` (any of its words)."""
        ...

    def store(self) -> AbstractContextManager[Store]: ...

    def run_tool(self, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        """One reading tool (tools.READING), as MCP runs it."""
        ...


class Session:
    """Asks over `notes`, whose conversations `conversations(readonly)` opens (a file,
    or the index's database: operations.Corpus.kept_conversations)."""

    def __init__(self, notes: Notes,
                 conversations: Callable[[bool], AbstractContextManager[Any]]) -> None:
        self.notes = notes
        self.conversations = conversations

    @property
    def config(self) -> Config:
        return self.notes.config

    # -- the window and the prompt ----------------------------------------------------

    def window_budget(self, provider: Provider | None, warnings: list[str]) -> Budget | None:
        """The token budget of an ask: the provider's window (asked once per model and
        endpoint), less the answer's reserve. No provider configured: the character
        bounds only. Without a provider given (`--show-context`), a server that cannot
        be asked is a warning and the default window."""
        import dataclasses

        from loomcli import providers
        from loomcli.ask import window
        from loomcli.errors import ProviderError

        strict = provider is not None  # an ask: a server that cannot be asked fails it
        try:
            provider = provider or providers.from_config(self.config)
        except LoomError:
            return None
        try:
            told = provider.window()
        except ProviderError as exc:
            if strict:
                raise
            warnings.append(f"could not learn the model's window, assuming "
                            f"{providers.DEFAULT_WINDOW:,} tokens: {exc}")
            told = providers.Window(providers.DEFAULT_WINDOW, "default")
        if told.warning:
            warnings.append(told.warning)
        # Sized by the configured top_k, not this request's: Ollama reloads the model
        # whenever num_ctx changes, so clients alternating top_k must not change it.
        planned = window.plan(provider.name, told.tokens, told.source,
                              top_k=self.config.get("ask.top_k"),
                              file_budget_chars=self.config.get("ask.file_budget_chars"),
                              max_answer_tokens=self.config.get("llm.max_answer_tokens"))
        return dataclasses.replace(planned, ratio=window.learned_ratio(provider))

    def prompt(self, question: str, top_k: Any = None, mode: Any = None, *,
               provider: Provider | None = None, window: Budget | None = None,
               clock: Callable[[], float] = time.perf_counter,
               retrieve_with: str | None = None, recalled: Recall | None = None,
               conversation_id: str | None = None) -> Prompt | None:
        """Exactly what ask would send, or None when no indexed file matches. The prompt
        fits the model's window, learned from `provider` (the configured one when None);
        `window` overrides it (a retry at half the budget). A follow-up (`conversation_id`,
        or `retrieve_with` and `recalled` from its turn) retrieves with the conversation's
        words and carries its earlier turns, which the notes make room for."""
        from loomcli import ask

        if conversation_id is not None and retrieve_with is None:
            retrieve_with, recalled = self.recall(question, conversation_id)
        k, mode = self.notes.ask_scope(top_k, mode)
        warnings: list[str] = []
        budget = window or self.window_budget(provider, warnings)
        earlier = recalled.tokens if recalled is not None else 0
        started = clock()
        with self.notes.retrieved(retrieve_with or question, k * ASK_CANDIDATES,
                                  mode) as found:
            ranked = clock()
            prompt = ask.build_prompt(
                found.store, question, found.hits, top_k=k,
                budget=self.config.get("ask.file_budget_chars"),
                head_chars=self.config.get("ask.head_chars"), near=found.near,
                window=budget.reserving(earlier) if budget else None)
        if prompt is not None:
            prompt.warnings = warnings + found.warnings
            prompt.timings = {"retrieve_ms": round((ranked - started) * 1000, 1),
                              "excerpts_ms": round((clock() - ranked) * 1000, 1)}
            if recalled is not None:
                prompt.user = recalled.as_text() + prompt.user
                prompt.prompt_tokens += earlier
                prompt.budget = budget
        return prompt

    def recall(self, question: str, conversation_id: str) -> tuple[str, Recall]:
        """A follow-up's retrieval words and earlier turns, as its ask would send them
        (for --show-context: no summary is written, older turns are shortened)."""
        from loomcli import providers
        from loomcli.ask import history, turn
        with self.conversations(True) as store:
            conv = store.get(conversation_id)
        plan = turn.budget(self, providers.from_config(self.config), question, HISTORY_SHARE)
        return (history.retrieval_text(conv, question),
                history.recall(conv, plan.history_tokens, plan.estimate))

    def agent_request(self, question: str, conversation_id: str | None = None) -> str:
        """What `ask --agent` would send first (tools, instructions, turns), calling
        nothing: `--show-context`."""
        import json

        from loomcli.ask import agent, history

        recalled = history.Recall() if conversation_id is None \
            else self.recall(question, conversation_id)[1]
        tools = [{"name": s.name, "description": s.description, "parameters": s.parameters}
                 for s in agent.specs()]
        parts = [f"[tools]\n{json.dumps(tools, indent=2, ensure_ascii=False)}",
                 f"[system]\n{agent.INSTRUCTIONS}{recalled.note()}"]
        parts += [f"[{m.role}]\n{m.content}" for m in recalled.messages()]
        parts.append(f"[user]\n{question}")
        return "\n\n".join(parts) + "\n"

    # -- asking -----------------------------------------------------------------------

    def ask(self, question: str, top_k: Any = None, mode: Any = None, *, agent: bool,
            conversation_id: str | None, keep: bool, provider: Provider | None = None,
            model: str | None = None,
            on_text: Callable[[str], None] | None = None,
            on_warning: Callable[[str], None] | None = None,
            on_step: Callable[[Step], None] | None = None,
            clock: Callable[[], float] = time.perf_counter,
            on_sending: Sending | None = None,
            on_progress: Callable[[str], None] | None = None) -> Answer:
        """One turn (see operations.Corpus.ask, which checks the arguments): the provider
        is made only when a model is needed (`model`: instead of [llm] model)."""
        from loomcli import providers
        from loomcli.ask import turn
        from loomcli.conversations import Later

        settings = turn.Settings(top_k, mode, agent, self.config.get("ask.max_steps"),
                                 AGENT_MAX_CALLS, TOOL_RESULT_CHARS, HISTORY_SHARE)
        made: list[Provider] = [provider] if provider else []
        cfg = self.config if model is None else self.config.with_value("llm.model", model)

        def chosen() -> Provider:
            if not made:
                made.append(providers.from_config(cfg))
            return made[0]

        def run(conv: Conversation | None, store: Conversations | Later | Any) -> Answer:
            return turn.run(self, chosen, question, conv, settings, store=store,
                            on_text=on_text, on_step=on_step, on_warning=on_warning,
                            clock=clock, on_sending=on_sending, on_progress=on_progress)

        if conversation_id is None:  # a new conversation: its file is made once a turn is kept
            return run(None, Later(self.conversations) if keep else None)
        with self.conversations(not keep) as store:
            return run(store.get(conversation_id), store if keep else None)

    def ask_once(self, question: str, top_k: Any = None, *,
                 provider: Provider | Callable[[], Provider],
                 on_text: Callable[[str], None] | None = None, mode: Any = None,
                 on_warning: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 retrieve_with: str | None = None, recalled: Recall | None = None,
                 on_sending: Sending | None = None) -> Answer:
        """One LLM call over the best files, fitted to the model's window (retrieved with
        `retrieve_with`, the conversation's words, when given; `recalled`: the earlier
        turns to send). Nothing matching: an empty Answer (no call)."""
        from loomcli import ask

        started = clock()
        try:
            chosen = provider() if callable(provider) else provider
        except ConfigError:  # no model configured: fine while nothing matches
            if self.prompt(question, top_k, mode, retrieve_with=retrieve_with) is None:
                return ask.Answer("", [], [])
            raise
        prompt = self.prompt(question, top_k, mode, provider=chosen, clock=clock,
                             retrieve_with=retrieve_with, recalled=recalled)
        for warning in prompt.warnings if prompt and on_warning else ():
            on_warning(warning)  # type: ignore[misc]
        if prompt is None:
            return ask.Answer("", [], [])

        def rebuild(smaller: Budget) -> Prompt | None:
            return self.prompt(question, top_k, mode, provider=chosen, window=smaller,
                               clock=clock, retrieve_with=retrieve_with, recalled=recalled)

        said = len(prompt.warnings)
        if on_sending is not None:
            on_sending(prompt, chosen.model)
        # every warning of the call (a silent cut, a refusal, a cut answer) said once, here
        result = ask.answer(prompt, chosen, on_text, clock=clock, rebuild=rebuild)
        for warning in result.warnings[said:] if on_warning else ():  # a cut answer, a retry
            on_warning(warning)  # type: ignore[misc]
        result.timings["total_ms"] = round((clock() - started) * 1000, 1)
        return result

    def used_files(self, returned: list[Returned]) -> list[UsedFile]:
        """What an agent's tools returned, as ask's `used` files with the pieces the model
        read located in each file's text (byte offsets in `loom get` terms, PDF pages),
        so its quotes are checked as a plain ask's are."""
        from loomcli import ask
        from loomcli.search.excerpt import SCAN_BYTES

        by_path: dict[str, list[Returned]] = {}
        for r in returned:
            by_path.setdefault(r.path, []).append(r)
        out = []
        with self.notes.store() as store:
            for path, got in by_path.items():
                try:
                    row = store.resolve(path)
                except LoomError:
                    continue
                text: str | None = None
                pieces: list[tuple[int, str]] = []
                for r in got:
                    if r.offset is not None:
                        pieces.append((r.offset, r.text))
                        continue
                    if text is None:
                        text = store.text_bytes(row.id, 0, SCAN_BYTES).decode("utf-8",
                                                                              "ignore")
                    for part in r.text.split("[...]"):
                        at = text.find(part.strip()) if part.strip() else -1
                        if at >= 0:
                            pieces.append((len(text[:at].encode("utf-8")), part.strip()))
                used = ask.UsedFile(path, row.title or "", row.content_len)
                used.pieces = pieces
                used.page_starts = store.pages(row.id) if row.kind == "pdf" else None
                out.append(used)
        return out
