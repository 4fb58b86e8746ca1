"""Anthropic's /v1/messages, streamed as server-sent events.

The window: the model's published one (every current Claude model: 200,000 tokens), or
`[llm] context_tokens`. The system prompt is the top-level `system` field. Tools: `tools`
with `input_schema`; the answer's `tool_use` blocks stream their input as
`input_json_delta` pieces, assembled here; results go back as `tool_result` blocks in a
user message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from loomcli.providers import (
    HttpSettings,
    Message,
    ToolCall,
    ToolSpec,
    Window,
    count,
    obj,
    only_text,
    plain_messages,
    sse_data,
    text,
    tool_call,
)

API_VERSION = "2023-06-01"
MAX_TOKENS = 2048  # what an answer may take when the caller does not say
CLAUDE_WINDOW = 200_000


class Anthropic:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "anthropic", http.endpoint, http.model
        self.prompt_count: int | None = None

    def window(self) -> Window:
        return self.http.cached_window(lambda: Window(CLAUDE_WINDOW, "known model"))

    def chat(self, messages: list[Message], *, tools: list[ToolSpec] | None = None,
             max_tokens: int | None = None, context_tokens: int | None = None
             ) -> Iterator[str | ToolCall]:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        body: dict[str, Any] = {"model": self.model, "max_tokens": int(max_tokens or MAX_TOKENS),
                                "stream": True, "messages": _messages(messages)}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [{"name": t.name, "description": t.description,
                              "input_schema": t.parameters} for t in tools]
        headers = {"x-api-key": self.http.api_key or "", "anthropic-version": API_VERSION}
        url = f"{self.endpoint.removesuffix('/v1')}/v1/messages"
        http = self.http
        blocks: dict[int, dict[str, Any]] = {}  # index -> a tool_use block being assembled
        self.prompt_count = None
        for data in sse_data(http.post_lines(url, body, headers), http):
            kind = data.get("type")
            if kind == "message_start":
                self.prompt_count = _input_tokens(obj(http, obj(
                    http, data.get("message"), "a `message`").get("usage"), "`usage`"))
            if kind == "error":
                err = obj(http, data.get("error"), "an `error`")
                raise http.fail(str(err.get("message", data))[:300])
            index = data.get("index", 0)
            if not isinstance(index, int):
                raise http.shape("a block `index` that is not a number")
            if kind == "content_block_start":
                block = obj(http, data.get("content_block"), "a `content_block`")
                if block.get("type") == "tool_use":
                    blocks[index] = {"id": text(http, block.get("id"), "a tool_use id"),
                                     "name": text(http, block.get("name"), "a tool's name"),
                                     "input": block.get("input"), "json": []}
            elif kind == "content_block_delta":
                delta = obj(http, data.get("delta"), "a `delta`")
                if delta.get("type") == "input_json_delta" and index in blocks:
                    blocks[index]["json"].append(
                        text(http, delta.get("partial_json"), "`partial_json`"))
                else:
                    piece = text(http, delta.get("text"), "`delta.text`")
                    if piece:
                        yield piece
            elif kind == "content_block_stop" and index in blocks:
                yield _tool_call(blocks.pop(index))
            elif kind == "message_stop":
                break
        for index in sorted(blocks):  # a stream that ended without closing its blocks
            yield _tool_call(blocks[index])

    def stream(self, system: str, user: str) -> Iterator[str]:
        return only_text(self.chat(plain_messages(system, user)))


def _input_tokens(usage: dict[str, Any]) -> int | None:
    """The whole prompt: `input_tokens` counts only what follows the last cache
    breakpoint; what was read from or written to the cache is counted apart."""
    tokens = count(usage.get("input_tokens"))
    if tokens is None:
        return None
    return tokens + sum(count(usage.get(k)) or 0 for k in ("cache_read_input_tokens",
                                                          "cache_creation_input_tokens"))


def _tool_call(block: dict[str, Any]) -> ToolCall:
    raw = "".join(block["json"]).strip()
    return tool_call(block["id"], block["name"], raw if raw else block["input"])


def _messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Anthropic's shape: no system role; tool results are user-turn `tool_result` blocks,
    and consecutive ones share one user message."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id or "",
                     "content": m.content}
            last = out[-1] if out else None
            if (last and last["role"] == "user" and isinstance(last["content"], list)
                    and all(b.get("type") == "tool_result" for b in last["content"])):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant" and m.tool_calls:
            content: list[dict[str, Any]] = ([{"type": "text", "text": m.content}]
                                             if m.content else [])
            content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                        for c in m.tool_calls]
            out.append({"role": "assistant", "content": content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
