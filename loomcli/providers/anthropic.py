"""Anthropic's /v1/messages, streamed as server-sent events."""

from __future__ import annotations

from collections.abc import Iterator

from loomcli.providers import HttpSettings, sse_data

API_VERSION = "2023-06-01"
MAX_TOKENS = 2048


class Anthropic:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "anthropic", http.endpoint, http.model

    def stream(self, system: str, user: str) -> Iterator[str]:
        body = {"model": self.model, "max_tokens": MAX_TOKENS, "stream": True,
                "system": system, "messages": [{"role": "user", "content": user}]}
        headers = {"x-api-key": self.http.api_key or "", "anthropic-version": API_VERSION}
        url = f"{self.endpoint.removesuffix('/v1')}/v1/messages"
        for data in sse_data(self.http.post_lines(url, body, headers)):
            kind = data.get("type")
            if kind == "error":
                raise self.http.fail(str((data.get("error") or {}).get("message", data)))
            if kind == "content_block_delta":
                piece = (data.get("delta") or {}).get("text")
                if piece:
                    yield piece
            elif kind == "message_stop":
                return
