"""Ollama's /api/chat: newline-delimited JSON, one object per piece of the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator

from loomcli.providers import HttpSettings


class Ollama:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "ollama", http.endpoint, http.model

    def stream(self, system: str, user: str) -> Iterator[str]:
        body = {"model": self.model, "stream": True, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]}
        for line in self.http.post_lines(f"{self.endpoint}/api/chat", body, {}):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if data.get("error"):
                raise self.http.fail(str(data["error"]))
            piece = (data.get("message") or {}).get("content")
            if piece:
                yield piece
            if data.get("done"):
                return
