"""Ollama's /api/chat: newline-delimited JSON, one object per piece of the answer.

The window: `POST /api/show` → `model_info["<architecture>.context_length"]`. Ollama keeps
only the last `options.num_ctx` tokens of a longer prompt (2,048 or 4,096 when it is not
sent) without saying so, so the caller sends `context_tokens` with every chat.
Tools: `tools` in the request, `message.tool_calls` (arguments as objects) in the answer,
results as `role: "tool"` messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from loomcli.providers import (
    DEFAULT_WINDOW,
    HttpSettings,
    Message,
    ToolCall,
    ToolSpec,
    Window,
    arr,
    count,
    json_lines,
    obj,
    only_text,
    plain_messages,
    text,
    tool_call,
    window_tokens,
)


class Ollama:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "ollama", http.endpoint, http.model
        self.prompt_count: int | None = None

    def window(self) -> Window:
        return self.http.cached_window(self._learn_window)

    def _learn_window(self) -> Window:
        data = self.http.get_json(f"{self.endpoint}/api/show", body={"model": self.model})
        info = data.get("model_info") if isinstance(data, dict) else None
        if isinstance(info, dict):
            arch = info.get("general.architecture")
            keys = [f"{arch}.context_length"] if isinstance(arch, str) else []
            keys += [k for k in info if k.endswith(".context_length")]
            for key in keys:
                tokens = window_tokens(info.get(key))
                if tokens is not None:
                    return Window(tokens, "ollama /api/show")
            told = {k: info[k] for k in keys if k in info}
            if told:
                key, value = next(iter(told.items()))
                return Window(DEFAULT_WINDOW, "default", f"{self.endpoint}/api/show told "
                              f"{key} = {json.dumps(value)[:40]}, not a number of tokens; "
                              f"assuming {DEFAULT_WINDOW:,} (set [llm] context_tokens to "
                              "the model's window)")
        return Window(DEFAULT_WINDOW, "default")

    def chat(self, messages: list[Message], *, tools: list[ToolSpec] | None = None,
             max_tokens: int | None = None, context_tokens: int | None = None
             ) -> Iterator[str | ToolCall]:
        body: dict[str, Any] = {"model": self.model, "stream": True,
                                "messages": [_message(m) for m in messages]}
        options: dict[str, Any] = {}
        if context_tokens:
            options["num_ctx"] = int(context_tokens)
        if max_tokens:
            options["num_predict"] = int(max_tokens)
        if options:
            body["options"] = options
        if tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in tools]
        http = self.http
        calls = 0
        self.prompt_count = None
        for data in json_lines(http, http.post_lines(f"{self.endpoint}/api/chat", body, {})):
            if data.get("error"):
                raise http.fail(str(data["error"])[:300])
            message = obj(http, data.get("message"), "a `message`")
            piece = text(http, message.get("content"), "`message.content`")
            if piece:
                yield piece
            for call in arr(http, message.get("tool_calls"), "`message.tool_calls`"):
                fn = obj(http, obj(http, call, "a tool call").get("function"),
                         "a tool call's `function`")
                calls += 1  # arguments: an object, or JSON text as some builds send
                yield tool_call(str(call.get("id") or f"call_{calls}"),
                                text(http, fn.get("name"), "a tool's name"),
                                fn.get("arguments"))
            if data.get("done"):
                # The tokens of the prompt as evaluated: after any cut to num_ctx, and
                # with those read from its cache (older versions: without them).
                self.prompt_count = count(data.get("prompt_eval_count"))
                return

    def stream(self, system: str, user: str) -> Iterator[str]:
        return only_text(self.chat(plain_messages(system, user)))


def _message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}}
                             for c in m.tool_calls]
    if m.role == "tool" and m.name:
        out["tool_name"] = m.name
    return out
