"""Scripted tool-calling models on loopback, one server speaking each provider's protocol.

`ToolLLM(brain)` answers Ollama `/api/chat` (+ `/api/show`), OpenAI-compatible
`/v1/chat/completions` (streamed and not, + llama.cpp's `/props`) and Anthropic
`/v1/messages` (streamed and not), in each API's own tool-calling shape:

- Ollama: `tools` [{type: function, function: {name, description, parameters}}], the answer's
  `message.tool_calls` [{function: {name, arguments: OBJECT}}], results as `role: "tool"`.
- OpenAI: the same `tools`; `tool_calls` [{id, type, function: {name, arguments: JSON
  STRING}}], streamed as deltas (id and name first, the arguments in fragments); results as
  `role: "tool"` with `tool_call_id`.
- Anthropic: `tools` [{name, description, input_schema}]; `tool_use` content blocks
  (streamed as `input_json_delta`), results as `tool_result` blocks in the next user turn.

Like the real servers it checks what it is sent (a result for an unknown call id, arguments
of the wrong type, a tool_use without its tool_result: HTTP 400) and keeps a context window:
Ollama silently keeps only the last `num_ctx` tokens (2,048 when omitted) and says how many it
kept in `prompt_eval_count`; each API reports its count of the prompt as the real one does
(OpenAI's streamed `usage` only when asked by `stream_options`); the OpenAI-compatible
one answers 400 "exceeds the available context size"; Anthropic 400 "prompt is too long".
Every request is recorded with its token count and whether it was cut.

A brain reads the conversation (normalised: role, content, tool calls) and returns what the
model says next: text pieces and/or tool calls.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OLLAMA_DEFAULT_CTX = 2048


def count_tokens(text: str) -> int:
    """The stand-in's own count, with a real BPE vocabulary (tests/tokens.py)."""
    from tests.tokens import count

    return count(text)


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]
    raw: str | None = None  # a hostile model: the arguments as this JSON text, valid or not


@dataclass
class Endless:
    """A model that never stops: after what it said, `piece` again and again (every
    `every_s` seconds: a slow stream) until the client hangs up."""

    piece: str
    every_s: float = 0.0


@dataclass
class Turn:
    """One normalised message of the conversation the model is shown."""

    role: str  # system | user | assistant | tool
    content: str = ""
    calls: list[Call] = field(default_factory=list)

    def result(self) -> Any:
        try:
            return json.loads(self.content)
        except ValueError:
            return None


Said = list[str | Call | Endless]
Brain = Callable[[list[Turn], bool], Said]


# -- brains --------------------------------------------------------------------------------

def tool_results(turns: list[Turn]) -> list[Any]:
    return [t.result() for t in turns if t.role == "tool"]


def investigator(pattern: str, before: int = 200, length: int = 900) -> Brain:
    """Greps `pattern`, reads the range around the first match, answers quoting the
    sentence that holds the match and citing its path."""

    def brain(turns: list[Turn], tools: bool) -> Said:
        results = [r for r in tool_results(turns) if isinstance(r, dict)]
        read = [r for r in results if "content" in r and "offset" in r]
        grepped = [r for r in results if "matches" in r]
        if read:
            r = read[-1]
            m = re.search(pattern, r["content"])
            if m is None:
                return ["The notes do not say."]
            start = max(r["content"].rfind(". ", 0, m.start()) + 2,
                        r["content"].rfind("\n", 0, m.start()) + 1)
            end_dot = r["content"].find(".", m.end())
            end = end_dot + 1 if end_dot >= 0 else len(r["content"])
            sentence = " ".join(r["content"][start:end].split())
            return ["The notes say: ", f'"{sentence}" ', f"[{r['path']}]."]
        if not tools:
            return ["I found nothing to quote."]
        if grepped and grepped[-1]["matches"]:
            hit = grepped[-1]["matches"][0]
            return [Call("loom_get_file", {"path": hit["path"],
                                           "offset": max(0, hit["offset"] - before),
                                           "length": length})]
        if grepped:
            return ["No note holds it."]
        return ["Let me look. ", Call("loom_grep", {"pattern": pattern})]

    return brain


def never_stops(answers_without_tools: bool = False) -> Brain:
    """Calls loom_search with a new query every time; with no tools offered, either gives a
    short answer or (a model that ignores it) calls a tool anyway."""

    def brain(turns: list[Turn], tools: bool) -> Said:
        n = sum(1 for t in turns if t.role == "tool")
        if not tools and answers_without_tools:
            return [f"After {n} searches: the loom notes mention warp threads."]
        return [Call("loom_search", {"query": f"warp threads {n}"})]

    return brain


def repeater() -> Brain:
    """Asks for the same search every time until it sees "already done"."""

    def brain(turns: list[Turn], tools: bool) -> Said:
        if any("already done" in t.content for t in turns if t.role == "tool") or not tools:
            return ["Done searching."]
        return [Call("loom_search", {"query": "warp"})]

    return brain


def plain(answer: str) -> Brain:
    return lambda turns, tools: [answer]


# -- protocol parsing ---------------------------------------------------------------------

class Refused(Exception):
    def __init__(self, status: int, message: str, *, shape: str = "openai") -> None:
        super().__init__(message)
        self.status, self.message, self.shape = status, message, shape


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    raise Refused(400, f"invalid content type: {type(content).__name__}")


def parse_ollama(body: dict[str, Any]) -> list[Turn]:
    turns = []
    for m in body.get("messages") or []:
        calls = []
        for c in m.get("tool_calls") or []:
            args = (c.get("function") or {}).get("arguments")
            if not isinstance(args, dict):
                raise Refused(400, "json: cannot unmarshal string into Go struct field "
                              ".messages.tool_calls.function.arguments of type "
                              "api.ToolCallFunctionArguments", shape="ollama")
            calls.append(Call(c["function"]["name"], args))
        if not isinstance(m.get("content", ""), str):
            raise Refused(400, "json: cannot unmarshal array into Go struct field "
                          "Message.messages.content of type string", shape="ollama")
        turns.append(Turn(m.get("role", ""), m.get("content") or "", calls))
    return turns


def parse_openai(body: dict[str, Any]) -> list[Turn]:
    turns, pending = [], set()
    for m in body.get("messages") or []:
        role = m.get("role")
        calls = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            if not isinstance(fn.get("arguments"), str):
                raise Refused(400, "Invalid type for 'messages.tool_calls.function.arguments'"
                              ": expected a string")
            if not c.get("id"):
                raise Refused(400, "Missing required parameter: 'messages.tool_calls.id'")
            pending.add(c["id"])
            calls.append(Call(fn.get("name", ""), json.loads(fn["arguments"] or "{}")))
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in pending:
                raise Refused(400, "Invalid parameter: messages with role 'tool' must be a "
                              "response to a preceeding message with 'tool_calls'.")
            pending.discard(cid)
        turns.append(Turn(role or "", _text_of(m.get("content")), calls))
    return turns


def parse_anthropic(body: dict[str, Any]) -> list[Turn]:
    turns = [Turn("system", _text_of(body.get("system")))] if body.get("system") else []
    pending: list[str] = []
    for m in body.get("messages") or []:
        role, content = m.get("role"), m.get("content")
        if isinstance(content, str):
            if pending:
                raise Refused(400, "messages: tool_use ids were found without tool_result "
                              f"blocks immediately after: {pending[0]}", shape="anthropic")
            turns.append(Turn(role or "", content))
            continue
        text, calls = [], []
        results_here = []
        for block in content or []:
            kind = block.get("type")
            if kind == "text":
                text.append(block.get("text", ""))
            elif kind == "tool_use":
                if not isinstance(block.get("input"), dict):
                    raise Refused(400, "messages: tool_use.input: Input should be a valid "
                                  "dictionary", shape="anthropic")
                pending.append(block["id"])
                calls.append(Call(block["name"], block["input"]))
            elif kind == "tool_result":
                if block.get("tool_use_id") not in pending:
                    raise Refused(400, "messages: unexpected `tool_use_id` found in "
                                  "`tool_result` blocks", shape="anthropic")
                pending.remove(block["tool_use_id"])
                results_here.append(Turn("tool", _text_of(block.get("content"))))
        if role == "user" and pending and not results_here:
            raise Refused(400, "messages: tool_use ids were found without tool_result "
                          f"blocks immediately after: {pending[0]}", shape="anthropic")
        turns.extend(results_here)
        if text or calls:
            turns.append(Turn(role or "", "".join(text), calls))
    return turns


def prompt_text(turns: list[Turn], tools: list[Any]) -> str:
    parts = [json.dumps(tools)] if tools else []
    for t in turns:
        parts.append(t.role + "\n" + t.content)
        parts += [json.dumps({"name": c.name, "arguments": c.arguments}) for c in t.calls]
    return "\n".join(parts)


def _raw_text(call: Call) -> str:
    return call.raw if call.raw is not None else json.dumps(call.arguments)


def _raw_value(call: Call) -> Any:
    """The arguments as an API that sends them as a JSON value does: what `raw` decodes
    to, or the text itself when it is not JSON (some Ollama builds send text)."""
    if call.raw is None:
        return call.arguments
    try:
        return json.loads(call.raw)
    except ValueError:
        return call.raw


# -- the server ---------------------------------------------------------------------------

@dataclass
class Limits:
    window: int = 32768  # tokens the server keeps (Ollama: the model's own length)
    supports_tools: bool = True
    no_tools_error: str = ""  # the provider's real refusal, when tools are not supported
    stream: bool | None = None  # None: as asked; False: whole answers even when asked to stream
    calls_without_tools: bool = False  # a model that calls a tool it was not offered
    fragment_chars: int = 7  # OpenAI's argument fragments (Anthropic's: this + 2)


class ToolLLM:
    """The stand-in. `brain` decides; `limits` is the server's window and tool support.
    `interrupt` (an Event), when set, is waited on before answering the nth request
    (`stall_at`), so a test can stop a client in the middle of the loop."""

    def __init__(self, brain: Brain, limits: Limits | None = None) -> None:
        self.brain, self.limits = brain, limits or Limits()
        self.requests: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        self.stall_at: int | None = None
        self.release = threading.Event()
        self.hung_up = threading.Event()  # an endless answer saw the client go
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/props":
                    self._json(200, {"default_generation_settings": {"n_ctx": fake.limits.window},
                                     "n_ctx": fake.limits.window})
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"
                body = json.loads(raw)
                if self.path == "/api/show":
                    self._json(200, {"model_info": {"general.architecture": "llama",
                                                    "llama.context_length": fake.limits.window},
                                     "capabilities": ["completion", "tools"]
                                     if fake.limits.supports_tools else ["completion"]})
                    return
                record: dict[str, Any] = {"path": self.path, "body": body,
                                          "headers": dict(self.headers)}
                fake.requests.append(record)
                n = len(fake.requests)
                if fake.stall_at == n:
                    fake.arrived.set()
                    fake.release.wait()
                try:
                    self._answer(body, record)
                except Refused as exc:
                    record["refused"] = exc.message
                    if exc.shape == "ollama":
                        self._json(exc.status, {"error": exc.message})
                    elif exc.shape == "anthropic":
                        self._json(exc.status, {"type": "error", "error": {
                            "type": "invalid_request_error", "message": exc.message}})
                    else:
                        self._json(exc.status, {"error": {"code": exc.status, "message":
                                                          exc.message, "type":
                                                          "invalid_request_error"}})
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _answer(self, body: dict[str, Any], record: dict[str, Any]) -> None:
                tools = body.get("tools") or []
                kind = {"/api/chat": "ollama", "/v1/chat/completions": "openai",
                        "/v1/messages": "anthropic"}.get(self.path)
                if kind is None:
                    self._json(404, {"error": "not found"})
                    return
                if tools and not fake.limits.supports_tools:
                    raise Refused(500 if kind == "openai" else 400,
                                  fake.limits.no_tools_error or
                                  f"{body.get('model')} does not support tools", shape=kind)
                turns = {"ollama": parse_ollama, "openai": parse_openai,
                         "anthropic": parse_anthropic}[kind](body)
                tokens = count_tokens(prompt_text(turns, tools))
                record["tokens"], record["turns"] = tokens, turns
                window = fake.limits.window
                if kind == "ollama":
                    window = min(window, int((body.get("options") or {}).get(
                        "num_ctx", OLLAMA_DEFAULT_CTX)))
                    record["window"] = window
                    if tokens > window:  # Ollama keeps the last tokens, silently
                        record["cut"] = True
                        turns = [Turn("user", "[cut]")] + turns[-1:]
                elif tokens > window:
                    record["window"] = window
                    if kind == "openai":
                        raise Refused(400, f"the request exceeds the available context size "
                                      f"({tokens} > {window} tokens), try increasing it")
                    raise Refused(400, f"prompt is too long: {tokens} tokens > {window} "
                                  "maximum", shape="anthropic")
                record.setdefault("cut", False)
                said = fake.brain(turns, bool(tools))
                if not tools and not fake.limits.calls_without_tools:
                    # a model offered no tools cannot call one in these APIs
                    said = [s if not isinstance(s, Call) else
                            f'<tool_call>{{"name": "{s.name}"}}</tool_call>' for s in said]
                record["said"] = said
                stream = body.get("stream", kind == "ollama")
                if fake.limits.stream is not None:
                    stream = fake.limits.stream
                endless = [s for s in said if isinstance(s, Endless)]
                if endless:
                    self._endless(kind, [s for s in said if isinstance(s, str)], endless[0])
                    return
                # what the server counted: Ollama what it kept, the others all of it
                self.usage_asked = bool((body.get("stream_options") or {}).get(
                    "include_usage"))
                getattr(self, f"_{kind}")(said, stream, min(tokens, window))

            def _endless(self, kind: str, text: list[str], more: Endless) -> None:
                """Text pieces in the API's streamed shape, then `more.piece` for ever."""
                def event(piece: str) -> str:
                    if kind == "ollama":
                        return json.dumps({"model": "m", "done": False, "message": {
                            "role": "assistant", "content": piece}}) + "\n"
                    if kind == "openai":
                        return "data: " + json.dumps({"id": "x", "object":
                                                      "chat.completion.chunk", "choices": [
                                                          {"index": 0, "delta": {
                                                              "content": piece}}]}) + "\n\n"
                    return "event: content_block_delta\ndata: " + json.dumps({
                        "type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": piece}}) + "\n\n"

                def chunks() -> Any:
                    if kind == "anthropic":
                        yield ("event: message_start\ndata: " + json.dumps({
                            "type": "message_start", "message": {"id": "msg", "role":
                                                                 "assistant", "content": []}})
                               + "\n\nevent: content_block_start\ndata: " + json.dumps({
                                   "type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}}) + "\n\n")
                    yield from (event(p) for p in text)
                    while True:
                        if more.every_s:
                            time.sleep(more.every_s)  # the model's pace, not a test's wait
                        yield event(more.piece)

                try:
                    self._chunks({"ollama": "application/x-ndjson"}.get(
                        kind, "text/event-stream"), chunks())
                except OSError:
                    fake.hung_up.set()

            # -- each API's answer shape --

            def _ollama(self, said: Said, stream: bool, tokens: int) -> None:
                text = [s for s in said if isinstance(s, str)]
                calls = [{"function": {"name": c.name, "arguments": _raw_value(c)}}
                         for c in said if isinstance(c, Call)]
                done = {"model": "m", "done": True, "done_reason": "stop",
                        "prompt_eval_count": tokens, "eval_count": 10,
                        "message": {"role": "assistant", "content": ""}}
                if not stream:
                    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
                    if calls:
                        msg["tool_calls"] = calls
                    self._json(200, {**done, "message": msg})
                    return
                lines = [{"model": "m", "done": False, "message": {"role": "assistant",
                                                                   "content": p}} for p in text]
                if calls:
                    lines.append({"model": "m", "done": False, "message": {
                        "role": "assistant", "content": "", "tool_calls": calls}})
                lines.append(done)
                self._chunks("application/x-ndjson", [json.dumps(x) + "\n" for x in lines])

            def _openai(self, said: Said, stream: bool, tokens: int) -> None:
                calls = [c for c in said if isinstance(c, Call)]
                text = "".join(s for s in said if isinstance(s, str))
                ids = [f"call_{len(fake.requests)}_{i}" for i in range(len(calls))]
                finish = "tool_calls" if calls else "stop"
                usage = {"prompt_tokens": tokens, "completion_tokens": 10}
                if not stream:
                    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
                    if calls:
                        msg["tool_calls"] = [
                            {"id": i, "type": "function", "function": {
                                "name": c.name, "arguments": _raw_text(c)}}
                            for i, c in zip(ids, calls, strict=True)]
                    self._json(200, {"id": "x", "object": "chat.completion", "choices": [
                        {"index": 0, "message": msg, "finish_reason": finish}],
                        "usage": usage})
                    return
                events: list[dict[str, Any]] = [{"delta": {"role": "assistant",
                                                           "content": ""}}]
                events += [{"delta": {"content": p}} for p in said if isinstance(p, str)]
                step = fake.limits.fragment_chars
                for n, (i, c) in enumerate(zip(ids, calls, strict=True)):
                    args = _raw_text(c)
                    events.append({"delta": {"tool_calls": [{"index": n, "id": i,
                                   "type": "function", "function": {"name": c.name,
                                                                    "arguments": ""}}]}})
                    for k in range(0, len(args), step):  # arguments arrive in fragments
                        events.append({"delta": {"tool_calls": [{"index": n, "function": {
                            "arguments": args[k:k + step]}}]}})
                events.append({"delta": {}, "finish_reason": finish})
                chunks = [f"data: {json.dumps({'id': 'x', 'object': 'chat.completion.chunk', 'choices': [{'index': 0, **e}]})}\n\n"  # noqa: E501
                          for e in events]
                if self.usage_asked:  # a last chunk with no choice, as OpenAI sends it
                    chunks.append(f"data: {json.dumps({'id': 'x', 'choices': [], 'usage': usage})}"
                                  "\n\n")
                chunks.append("data: [DONE]\n\n")
                self._chunks("text/event-stream", chunks)

            def _anthropic(self, said: Said, stream: bool, tokens: int) -> None:
                blocks: list[dict[str, Any]] = []
                text = "".join(s for s in said if isinstance(s, str))
                if text:
                    blocks.append({"type": "text", "text": text})
                for i, c in enumerate(c for c in said if isinstance(c, Call)):
                    blocks.append({"type": "tool_use", "id": f"toolu_{len(fake.requests)}_{i}",
                                   "name": c.name, "input": _raw_value(c), "raw": _raw_text(c)})
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) \
                    else "end_turn"
                if not stream:
                    self._json(200, {"id": "msg", "type": "message", "role": "assistant",
                                     "content": [{k: v for k, v in b.items() if k != "raw"}
                                                 for b in blocks], "stop_reason": stop,
                                     "usage": {"input_tokens": tokens, "output_tokens": 10}})
                    return
                ev: list[tuple[str, dict[str, Any]]] = [("message_start", {
                    "type": "message_start", "message": {"id": "msg", "role": "assistant",
                                                         "content": [], "usage": {
                                                             "input_tokens": tokens}}})]
                for i, b in enumerate(blocks):
                    if b["type"] == "text":
                        ev.append(("content_block_start", {"type": "content_block_start",
                                   "index": i, "content_block": {"type": "text", "text": ""}}))
                        for p in (s for s in said if isinstance(s, str)):
                            ev.append(("content_block_delta", {
                                "type": "content_block_delta", "index": i,
                                "delta": {"type": "text_delta", "text": p}}))
                    else:
                        start = {k: v for k, v in b.items() if k != "raw"}
                        ev.append(("content_block_start", {"type": "content_block_start",
                                   "index": i, "content_block": {**start, "input": {}}}))
                        args, step = b["raw"], fake.limits.fragment_chars + 2
                        for k in range(0, len(args), step):
                            ev.append(("content_block_delta", {
                                "type": "content_block_delta", "index": i, "delta": {
                                    "type": "input_json_delta",
                                    "partial_json": args[k:k + step]}}))
                    ev.append(("content_block_stop", {"type": "content_block_stop",
                                                      "index": i}))
                ev.append(("message_delta", {"type": "message_delta",
                                             "delta": {"stop_reason": stop},
                                             "usage": {"output_tokens": 10}}))
                ev.append(("message_stop", {"type": "message_stop"}))
                self._chunks("text/event-stream",
                             [f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in ev])

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _chunks(self, ctype: str, chunks: Iterable[str]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    data = chunk.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def chats(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] != "/api/show"]

    def __enter__(self) -> ToolLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# The providers' real refusals of `tools` (quoted from their servers' answers).
OLLAMA_NO_TOOLS = 'registry.ollama.ai/library/gemma2:2b does not support tools'
LLAMACPP_NO_TOOLS = "tools param requires --jinja flag"
VLLM_NO_TOOLS = ('"auto" tool choice requires --enable-auto-tool-choice and '
                 "--tool-call-parser to be set")
