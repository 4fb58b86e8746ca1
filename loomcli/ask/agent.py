"""The agent loop: the model investigates with loom's reading tools, then answers.

Each model call may ask for tool calls (in its API's own shape, turned into `ToolCall`s by
the provider); each call runs through the corpus (`run_tool`) and its JSON result goes back
as a tool message. Bounded three ways: at most `max_steps` tools run, at most `max_calls` model
calls, and every request fits the window (older results shortened, then folded into a
one-line note; the newest kept whole while it fits). The last call offers no tools, so the
model has to answer. A call repeated with the same arguments is answered "already done".

Whatever a model sends stays bounded: one message's calls past `CALLS_PER_MESSAGE` are
answered with the limit, arguments past `ARGUMENT_CHARS` are neither run nor sent again,
arguments that are not a JSON object are a tool error for the model (never the end of the
ask), and each model message is read through `bounded.Bounded` (twice the answer's reserve,
`[llm] answer_timeout_s`). Fitting a request is linear in its messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomcli import tools
from loomcli.ask.bounded import Bounded, answer_limit
from loomcli.ask.tokens import raw_estimate
from loomcli.errors import LoomError, ProviderError
from loomcli.providers import Message, ToolCall, ToolSpec
from loomcli.sanitize import safe

if TYPE_CHECKING:
    from loomcli.providers import Provider

INSTRUCTIONS = """\
You answer questions from the user's own notes and documents, which you explore with \
tools. loom_search ranks files by a query: use the words a document would use (technical \
terms, names, synonyms of the question's words), not only the question's. loom_grep finds \
exact strings or regular expressions and returns each match's byte offset; then read a few \
thousand bytes around it with loom_get_file instead of whole files. Try other words when a \
search finds nothing. Answer only from what the tools returned. Quote the sentence you rely \
on in "double quotes" and cite its path in square brackets, exactly as the tools gave it, \
e.g. [notes/a.md]. If the notes do not hold the answer, say so plainly. Reply in the \
language of the question."""
LAST_CALL = ("No more tools now: answer the question from what the tools returned above, "
             "quoting and citing as instructed.")
REPEATED = "already done, see above"
NOT_RUN = "not run: the step limit is reached; answer from what you have"
CALLS_PER_MESSAGE = 16  # tool calls of one model message that get a result; the rest go
TOO_MANY_CALLS = ("not run: at most {n} tool calls of one message are run, and {left:,} more "
                  "were left out; ask again for those you still need, a few at a time")
ARGUMENT_CHARS = 4000  # a call's arguments (JSON) longer than this are not run, nor re-sent
NAME_CHARS = 100  # a tool's name longer than this is not re-sent whole
SHORT_RESULT_CHARS = 600  # an older result shortened to this before it is folded
MIN_RESULT_CHARS = 300  # the newest result is never cut below this
MESSAGE_OVERHEAD_TOKENS = 8  # role and framing of one message
CUT_WORDS = "cut the request silently"  # the warning of a silent cut, said once an ask

Estimate = Callable[[str], int]
RunTool = Callable[[tools.Tool, dict[str, Any]], dict[str, Any]]  # the corpus's run_tool


@dataclass
class Step:
    tool: str
    arguments: dict[str, Any]
    result_chars: int
    ms: int
    summary: str = ""  # "2 matches", "already done", "error: …" (the step line)

    def to_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments,
                "result_chars": self.result_chars, "ms": self.ms}

    def line(self) -> str:
        """`→ loom_grep FT-2026-0[0-9]{3} · 2 matches · 12 ms`, as stderr shows it: what
        the model chose (the tool's name, its arguments) with control characters and
        bidi overrides made visible, never run by the terminal."""
        args = " ".join(_shown(v) for v in self.arguments.values() if v not in (None, []))
        line = f"→ {_shown(self.tool)} {args} · {_shown(self.summary)} · {self.ms} ms"
        return line.replace("  ", " ")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return safe(text if len(text) <= 60 else text[:57] + "...")


@dataclass
class Returned:
    """A text a tool gave the model, where it comes from (for quote checking)."""

    path: str
    offset: int | None  # byte offset in the file's text, when known
    text: str


@dataclass
class Outcome:
    answer: str
    steps: list[Step] = field(default_factory=list)
    returned: list[Returned] = field(default_factory=list)
    calls: int = 0  # model calls made
    prompt_tokens: list[int] = field(default_factory=list)  # each request's estimate
    server_tokens: list[int | None] = field(default_factory=list)  # the server's counts
    stopped: bool = False  # the model kept calling tools past the last step
    warnings: list[str] = field(default_factory=list)  # e.g. an answer cut short


@dataclass
class Limits:
    max_steps: int
    max_calls: int
    result_chars: int  # one tool result's cap, in characters of JSON
    window_tokens: int
    answer_tokens: int
    context_tokens: int | None = None  # sent to the server (Ollama's num_ctx)


def specs() -> list[ToolSpec]:
    return [ToolSpec(t.name, t.description, t.parameters) for t in tools.READING.values()]


def request_tokens(messages: Iterable[Message], offered: list[ToolSpec] | None,
                   estimate: Estimate) -> int:
    """The estimate of one request: every message's text and tool calls, and the tools."""
    return sum(_tokens(m, estimate) for m in messages) + _tools_tokens(offered, estimate)


def _tokens(m: Message, estimate: Estimate) -> int:
    n = MESSAGE_OVERHEAD_TOKENS + estimate(m.content or "")
    for c in m.tool_calls or []:
        n += estimate(c.name + json.dumps(c.arguments, ensure_ascii=False)) + 4
    return n


def _tools_tokens(offered: list[ToolSpec] | None, estimate: Estimate) -> int:
    if not offered:
        return 0
    return estimate(json.dumps([{"name": s.name, "description": s.description,
                                 "parameters": s.parameters} for s in offered]))


def run(run_tool: RunTool, provider: Provider, question: str, *, limits: Limits,
        estimate: Estimate, history: list[Message] | None = None, system: str = INSTRUCTIONS,
        on_step: Callable[[Step], None] | None = None,
        on_text: Callable[[str], None] | None = None,
        on_progress: Callable[[str], None] | None = None) -> Outcome:
    """Loop until the model answers (see the module's docstring). `on_progress` gets a
    line now and then while the model writes a long message."""
    messages = [Message("system", system), *(history or []), Message("user", question)]
    offered = specs()
    out = Outcome("")
    done: dict[str, str] = {}  # (tool, arguments) -> its first result
    budget = limits.window_tokens - limits.answer_tokens
    while True:
        last = len(out.steps) >= limits.max_steps or out.calls >= limits.max_calls - 1
        tools_now = None if last else offered
        if last:
            messages.append(Message("user", LAST_CALL))
        request = fit_messages(messages, tools_now, budget, estimate)
        out.prompt_tokens.append(request_tokens(request, tools_now, estimate))
        text: list[str] = []
        calls: list[ToolCall] = []
        dropped = 0
        stream = Bounded(provider.chat(request, tools=tools_now,
                                       max_tokens=limits.answer_tokens,
                                       context_tokens=limits.context_tokens),
                         limit=answer_limit(limits.answer_tokens), estimate=raw_estimate,
                         progress=_progress(on_progress, out.calls + 1))
        for item in stream:
            if isinstance(item, str):
                text.append(item)
                if last and on_text:  # the answer: stream it as it comes
                    on_text(item)
            elif len(calls) <= CALLS_PER_MESSAGE:  # one past the limit is answered with it
                calls.append(item)
            else:  # the rest are not kept
                dropped += 1
        out.calls += 1
        counted, cut = _counted(provider, out.prompt_tokens[-1], limits.context_tokens)
        out.server_tokens.append(counted)
        if cut and counted is not None and not any(CUT_WORDS in w for w in out.warnings):
            out.warnings.append(
                f"{provider.endpoint} evaluated only {counted:,} of the "
                f"~{out.prompt_tokens[-1]:,} tokens of request {out.calls} with num_ctx "
                f"{limits.context_tokens:,}: Ollama {CUT_WORDS} (its window holds about "
                f"{cut:,}); the model saw only the request's end — set [llm] "
                f"context_tokens to {cut:,} or less")
        said = "".join(text)
        if stream.cut:
            out.warnings.append(stream.cut)
        if not calls:
            if not last and on_text and said:
                on_text(said)
            out.answer = said
            return out
        if last:  # asked to answer, it called a tool again: stop with what it said
            out.stopped = True
            if not said.strip():
                raise ProviderError(
                    f"the model kept calling tools after {out.calls} calls and "
                    f"{len(out.steps)} steps and gave no answer",
                    "ask a narrower question, raise [ask] max_steps, or ask without --agent")
            out.answer = said
            return out
        calls = [_kept(c) for c in calls]
        messages.append(Message("assistant", said, tool_calls=calls))
        for n, call in enumerate(calls):
            if n == CALLS_PER_MESSAGE:
                note = TOO_MANY_CALLS.format(n=CALLS_PER_MESSAGE, left=1 + dropped)
                messages.append(Message("tool", tools.dumps({"error": note}),
                                        tool_call_id=call.id, name=call.name))
                continue
            if len(out.steps) >= limits.max_steps:  # many calls in one answer: the rest wait
                messages.append(Message("tool", tools.dumps({"note": NOT_RUN}),
                                        tool_call_id=call.id, name=call.name))
                continue
            step, content = _run_tool(run_tool, call, done, limits.result_chars, out.returned)
            out.steps.append(step)
            messages.append(Message("tool", content, tool_call_id=call.id, name=call.name))
            if on_step:
                on_step(step)


def _counted(provider: Provider, estimated: int, num_ctx: int | None
             ) -> tuple[int | None, int | None]:
    """The server's count of the request just answered, and the window Ollama really
    kept when the count shows it cut the request silently (else None). The count is
    learned from as a plain ask's is (`window.observe`: the model's ratio of real to
    estimated tokens), unless it is a cut request's, which says nothing of the tokenizer."""
    from loomcli.ask import window

    counted = getattr(provider, "prompt_count", None)
    cut = window.silent_cut(counted, estimated, num_ctx) if provider.name == "ollama" \
        else None
    if cut is None:
        window.observe(provider, estimated, counted)
    return counted, cut


def _progress(on_progress: Callable[[str], None] | None, call: int
              ) -> Callable[[int, float], None] | None:
    if on_progress is None:
        return None
    return lambda tokens, seconds: on_progress(
        f"… the model is writing (call {call}: ~{tokens:,} tokens, {seconds:.0f} s)")


def _kept(call: ToolCall) -> ToolCall:
    """The call as the history keeps it, and re-sends with every later request: a name
    or arguments far longer than any real call's are replaced by what they were (and
    such a call is not run: its result says why)."""
    name = call.name if len(call.name) <= NAME_CHARS else call.name[:NAME_CHARS] + "..."
    if call.error:
        return call if name == call.name else ToolCall(call.id, name, {}, call.error)
    size = len(json.dumps(call.arguments, ensure_ascii=False))
    if size <= ARGUMENT_CHARS:
        return call if name == call.name else ToolCall(call.id, name, call.arguments)
    return ToolCall(call.id, name, {"cut": f"{size:,} characters of arguments, left out"},
                    f"arguments of {size:,} characters, more than the {ARGUMENT_CHARS:,} "
                    "a call may have; send shorter ones")


def _run_tool(run_tool: RunTool, call: ToolCall, done: dict[str, str], cap: int,
              returned: list[Returned]) -> tuple[Step, str]:
    args = call.arguments
    key = call.name + "\0" + call.error + "\0" + json.dumps(args, sort_keys=True,
                                                         ensure_ascii=False)
    if key in done:
        content = tools.dumps({"note": REPEATED})
        return Step(call.name, args, len(content), 0, "already done"), content
    tool = tools.READING.get(call.name)
    start = time.perf_counter()
    if tool is None:
        result: dict[str, Any] = {"error": f"no tool named {call.name!r}; the tools are "
                                           + ", ".join(tools.READING)}
        summary = "unknown tool"
    elif call.error:  # not JSON, not an object, far too long: the model can do better
        result = {"error": f"{call.name}: {call.error}; the arguments must be one JSON "
                           "object of the tool's parameters"}
        summary = "bad arguments"
    else:
        try:
            result = tools.fit(tool.name, run_tool(tool, args), cap)
            summary = tool.summary(result)
        except LoomError as exc:
            result, summary = {"error": str(exc)}, f"error: {exc.message}"
    ms = round((time.perf_counter() - start) * 1000)
    content = tools.dumps(result)
    done[key] = content
    returned.extend(_texts(call.name, result))
    return Step(call.name, args, len(content), ms, summary), content


def _texts(name: str, result: dict[str, Any]) -> list[Returned]:
    if name == tools.GET_FILE.name and "content" in result:
        return [Returned(result["path"], result["offset"], result["content"])]
    if name == tools.GREP.name:
        return [Returned(m["path"], None, "\n".join([*m.get("before", []), m["text"],
                                                     *m.get("after", [])]))
                for m in result.get("matches", [])]
    if name == tools.SEARCH.name:
        return [Returned(h["path"], None, h.get("content") or h.get("snippet", ""))
                for h in result.get("hits", [])]
    return []


# -- the window ---------------------------------------------------------------------------

def _folded(m: Message) -> str:
    try:
        data = json.loads(m.content)
    except ValueError:
        data = {}
    tool = tools.READING.get(m.name or "")
    what = tool.summary(data) if tool and isinstance(data, dict) and "error" not in data \
        else "a result"
    return tools.dumps({"note": f"{what}, folded to fit the window; call again to see it"})


def fit_messages(messages: list[Message], offered: list[ToolSpec] | None, budget: int,
                 estimate: Estimate) -> list[Message]:
    """A copy of `messages` whose request fits `budget` tokens: older tool results are
    shortened first, then folded into a short note, oldest first; the newest results
    (those of the last assistant message) are cut last, and only as far as needed; past
    that, whole older rounds (a call with its results) are left out, oldest first.
    Linear in the messages: each one's tokens are estimated once, and again only when
    its content changes (a running total, not the whole request per step)."""
    out = list(messages)
    costs = [_tokens(m, estimate) for m in out]
    total = sum(costs) + _tools_tokens(offered, estimate)
    if total <= budget:
        return out

    def put(i: int, content: str) -> None:
        nonlocal total
        out[i] = _with_content(out[i], content)
        cost = _tokens(out[i], estimate)
        total += cost - costs[i]
        costs[i] = cost

    results = [i for i, m in enumerate(out) if m.role == "tool"]
    last_call = max((i for i, m in enumerate(out) if m.tool_calls), default=-1)
    older = [i for i in results if i < last_call]
    newest = [i for i in results if i > last_call]
    for i in older:  # 1. shorten, oldest first
        if total <= budget:
            return out
        put(i, _shortened(out[i], SHORT_RESULT_CHARS))
    for i in older:  # 2. fold, oldest first
        if total <= budget:
            return out
        put(i, _folded(out[i]))
    for i in newest:  # 3. the newest, cut just enough (largest first)
        if total <= budget:
            return out
        chars = len(out[i].content)
        while total > budget and chars > MIN_RESULT_CHARS:
            chars = max(MIN_RESULT_CHARS, chars - max((total - budget) * 4, chars // 5))
            put(i, _shortened(messages[i], chars))
    for i in newest:
        if total > budget:
            put(i, _folded(out[i]))
    if total <= budget:
        return out
    # 4. whole older rounds (a call and its results) leave, oldest first; never the last.
    gone: set[int] = set()
    rounds = [i for i, m in enumerate(out) if m.tool_calls and i < last_call]
    for first in rounds:
        if total <= budget:
            break
        end = first + 1
        while end < len(out) and out[end].role == "tool":
            end += 1
        for j in range(first, end):
            gone.add(j)
            total -= costs[j]
    return [m for i, m in enumerate(out) if i not in gone]


def _shortened(m: Message, chars: int) -> str:
    try:
        data = json.loads(m.content)
    except ValueError:
        return m.content[:chars]
    if not isinstance(data, dict) or len(m.content) <= chars:
        return m.content
    return tools.dumps(tools.fit(m.name or "", data, chars))


def _with_content(m: Message, content: str) -> Message:
    return Message(m.role, content, tool_calls=list(m.tool_calls or []),
                   tool_call_id=m.tool_call_id, name=m.name)
