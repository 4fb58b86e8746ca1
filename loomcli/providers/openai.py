"""Any OpenAI-compatible /v1/chat/completions (OpenAI, LM Studio, llama.cpp, vLLM), streamed.

The window, where the server says it: llama.cpp `GET /props` → `n_ctx`; vLLM
`GET /v1/models` → `max_model_len`; LM Studio `GET /api/v0/models` →
`max_context_length`; else a table of well-known hosted models; else `DEFAULT_WINDOW`.
Tools: `tools` in the request; the answer's `tool_calls` arrive as deltas (an index, then
pieces of the JSON-string arguments) that are assembled here; results go back as
`role: "tool"` messages with the `tool_call_id`. A non-streamed answer
(`choices[0].message`), which some servers send whatever `stream` says, is read too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from loomcli.errors import ProviderError
from loomcli.providers import (
    DEFAULT_WINDOW,
    HttpSettings,
    Message,
    ToolCall,
    ToolSpec,
    Window,
    arr,
    count,
    obj,
    only_text,
    plain_messages,
    sse_data,
    text,
    tool_call,
    window_tokens,
)

# Hosted models' windows, by the longest matching name prefix (their published limits).
KNOWN_WINDOWS = {
    "gpt-4.1": 1_047_576, "gpt-4o": 128_000, "gpt-4-turbo": 128_000, "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385, "gpt-5": 400_000, "o1": 200_000, "o3": 200_000, "o4": 200_000,
    "chatgpt-4o": 128_000,
}


def known_window(model: str) -> int | None:
    best = max((p for p in KNOWN_WINDOWS if model.startswith(p)), key=len, default=None)
    return KNOWN_WINDOWS[best] if best else None


class OpenAICompatible:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "openai", http.endpoint, http.model
        self.prompt_count: int | None = None

    def base(self) -> str:
        # Accept both "http://host:port" and "http://host:port/v1" as the endpoint.
        return self.endpoint.removesuffix("/chat/completions").removesuffix("/v1")

    def url(self) -> str:
        return f"{self.base()}/v1/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.http.api_key}"} if self.http.api_key else {}

    def window(self) -> Window:
        return self.http.cached_window(self._learn_window)

    def _learn_window(self) -> Window:
        known = known_window(self.model)
        if known and "api.openai.com" in self.endpoint:
            return Window(known, "known model")
        for path, source, find in (("/props", "llama.cpp /props", _llama_cpp),
                                   ("/v1/models", "vllm /v1/models", self._vllm),
                                   ("/api/v0/models", "lm studio /api/v0/models",
                                    self._lm_studio)):
            try:
                data = self.http.get_json(self.base() + path, self._headers())
            except ProviderError:
                continue
            tokens = window_tokens(find(data))
            if tokens is not None:
                return Window(tokens, source)
        if known:
            return Window(known, "known model")
        return Window(DEFAULT_WINDOW, "default")

    def _vllm(self, data: Any) -> int | None:
        return _model_field(data, self.model, "max_model_len")

    def _lm_studio(self, data: Any) -> int | None:
        return (_model_field(data, self.model, "loaded_context_length")
                or _model_field(data, self.model, "max_context_length"))

    def chat(self, messages: list[Message], *, tools: list[ToolSpec] | None = None,
             max_tokens: int | None = None, context_tokens: int | None = None
             ) -> Iterator[str | ToolCall]:
        # context_tokens: the server's window is its own; nothing to send for it.
        # stream_options: a streamed answer ends with a chunk holding `usage` (its
        # prompt_tokens count every prompt token, those from a prompt cache too).
        body: dict[str, Any] = {"model": self.model, "stream": True,
                                "stream_options": {"include_usage": True},
                                "messages": [_message(m) for m in messages]}
        if max_tokens:
            body["max_tokens"] = int(max_tokens)
        if tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools]
        http = self.http
        pending: dict[int, dict[str, Any]] = {}  # tool-call index -> id, name, argument text
        self.prompt_count = None
        for data in sse_data(http.post_lines(self.url(), body, self._headers()), http):
            if data.get("error"):
                err = data["error"]
                raise http.fail(str(err.get("message") if isinstance(err, dict) else err)[:300])
            usage = data.get("usage")
            if isinstance(usage, dict):
                self.prompt_count = count(usage.get("prompt_tokens"))
            for choice in arr(http, data.get("choices"), "`choices`"):
                choice = obj(http, choice, "a choice")
                # A streamed chunk has `delta`; a whole answer has `message`.
                part = obj(http, choice.get("delta") if "delta" in choice
                           else choice.get("message"), "a choice's `delta`")
                piece = text(http, part.get("content"), "`delta.content`")
                if piece:
                    yield piece
                for n, call in enumerate(arr(http, part.get("tool_calls"), "`tool_calls`")):
                    call = obj(http, call, "a tool call")
                    index = call.get("index", n)
                    slot = pending.setdefault(index if isinstance(index, int) else n,
                                              {"id": "", "name": "", "args": []})
                    fn = obj(http, call.get("function"), "a tool call's `function`")
                    slot["id"] = slot["id"] or text(http, call.get("id"), "a tool call's id")
                    slot["name"] += text(http, fn.get("name"), "a tool's name")
                    args = fn.get("arguments")
                    if args is not None and not isinstance(args, str):
                        args = json.dumps(args)  # an object (or worse): the agent judges
                    slot["args"].append(args or "")
        for index in sorted(pending):
            slot = pending[index]
            yield tool_call(slot["id"] or f"call_{index}", slot["name"], "".join(slot["args"]))

    def stream(self, system: str, user: str) -> Iterator[str]:
        return only_text(self.chat(plain_messages(system, user)))


def _llama_cpp(data: Any) -> int | None:
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    n_ctx = data.get("n_ctx")
    if n_ctx is None and isinstance(settings, dict):
        n_ctx = settings.get("n_ctx")
    return n_ctx if isinstance(n_ctx, int) else None


def _model_field(data: Any, model: str, key: str) -> int | None:
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    rows = [r for r in rows if isinstance(r, dict)]
    mine = [r for r in rows if r.get("id") == model] or (rows if len(rows) == 1 else [])
    value = mine[0].get(key) if mine else None
    return value if isinstance(value, int) else None


def _message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.name, "arguments": json.dumps(c.arguments)}} for c in m.tool_calls]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
        if m.name:
            out["name"] = m.name
    return out
