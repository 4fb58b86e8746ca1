"""Any OpenAI-compatible /v1/chat/completions (OpenAI, LM Studio, llama.cpp, vLLM), streamed."""

from __future__ import annotations

from collections.abc import Iterator

from loomcli.providers import HttpSettings, sse_data


class OpenAICompatible:
    def __init__(self, http: HttpSettings) -> None:
        self.http = http
        self.name, self.endpoint, self.model = "openai", http.endpoint, http.model

    def url(self) -> str:
        # Accept both "http://host:port" and "http://host:port/v1" as the endpoint.
        base = self.endpoint.removesuffix("/chat/completions").removesuffix("/v1")
        return f"{base}/v1/chat/completions"

    def stream(self, system: str, user: str) -> Iterator[str]:
        body = {"model": self.model, "stream": True, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]}
        headers = {"Authorization": f"Bearer {self.http.api_key}"} if self.http.api_key else {}
        for data in sse_data(self.http.post_lines(self.url(), body, headers)):
            if data.get("error"):
                err = data["error"]
                raise self.http.fail(str(err.get("message") if isinstance(err, dict) else err))
            for choice in data.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    yield piece
