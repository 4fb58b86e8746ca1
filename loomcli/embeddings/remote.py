"""Embeddings from a server: Ollama's `/api/embed`, or any OpenAI-compatible
`/v1/embeddings` (OpenAI, LM Studio, llama.cpp server, vLLM, text-embeddings-inference).

Texts go in batches of BATCH texts; every failure is one EmbeddingsError naming the
endpoint (the same HTTP client and messages as the LLM providers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from loomcli.config import Config
from loomcli.embeddings import EmbeddingsError, identity, require_numpy
from loomcli.errors import ProviderError
from loomcli.providers import DEFAULT_ENDPOINTS, DEFAULT_KEY_ENV, HttpSettings

BATCH = 32
RESPONSE_BYTES_MAX = 64 << 20  # 32 vectors of 4,096 numbers are about 3 MB of JSON


class RemoteEmbedder:
    def __init__(self, provider: str, http: HttpSettings) -> None:
        self.provider, self.http = provider, http
        self.model = http.model
        self.endpoint = http.endpoint

    @classmethod
    def from_config(cls, cfg: Config, provider: str, model: str) -> RemoteEmbedder:
        endpoint = (cfg.get("embeddings.endpoint") or DEFAULT_ENDPOINTS[provider]).rstrip("/")
        key_env = cfg.get("embeddings.api_key_env") or DEFAULT_KEY_ENV.get(provider)
        return cls(provider, HttpSettings(provider, endpoint, model,
                                          os.environ.get(key_env) if key_env else None,
                                          key_env, float(cfg.get("embeddings.timeout_s")),
                                          table="embeddings"))

    @property
    def identity(self) -> str:
        return identity(self.provider, self.model)

    def embed(self, texts: Sequence[str]) -> Any:
        np = require_numpy()
        rows: list[list[float]] = []
        for i in range(0, len(texts), BATCH):
            rows += self._batch(list(texts[i:i + BATCH]))
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def _batch(self, texts: list[str]) -> list[list[float]]:
        if self.provider == "ollama":
            url, body, headers = f"{self.endpoint}/api/embed", \
                {"model": self.model, "input": texts}, {}
        else:
            url, body = f"{self.endpoint}/v1/embeddings", {"model": self.model, "input": texts}
            headers = ({"Authorization": f"Bearer {self.http.api_key}"}
                       if self.http.api_key else {})
        chunks: list[bytes] = []
        size = 0
        try:
            for line in self.http.post_lines(url, body, headers):
                size += len(line)
                if size > RESPONSE_BYTES_MAX:
                    raise EmbeddingsError(f"{self.endpoint} sent more than "
                                          f"{RESPONSE_BYTES_MAX >> 20} MB for {len(texts)} "
                                          "embeddings", "check [embeddings] endpoint")
                chunks.append(line)
        except ProviderError as exc:
            raise EmbeddingsError(exc.message, exc.hint) from None
        raw = b"".join(chunks)
        try:
            data = json.loads(raw)
            if self.provider == "ollama":
                rows = data["embeddings"]
            else:
                items = sorted(data["data"], key=lambda d: d.get("index", 0))
                rows = [d["embedding"] for d in items]
            ok = (isinstance(rows, list) and len(rows) == len(texts) and rows
                  and all(isinstance(r, list) and len(r) == len(rows[0]) and r for r in rows))
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise EmbeddingsError(f"{self.endpoint} did not answer with {len(texts)} "
                                  "embeddings", f"check that [embeddings] model "
                                  f"{self.model!r} is an embedding model")
        return rows
