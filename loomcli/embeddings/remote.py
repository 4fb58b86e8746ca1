"""Embeddings from a server: Ollama's `/api/embed`, or any OpenAI-compatible
`/v1/embeddings` (OpenAI, LM Studio, llama.cpp server, vLLM, text-embeddings-inference).

Texts go in batches of BATCH texts. A server may answer anything, so every answer is
read as it arrives with a cap per read (READ_BYTES) and per answer (RESPONSE_BYTES_MAX),
within one deadline for the whole request (`[embeddings] timeout_s`: a server that
sends one byte a second is cut off, not waited on for ever), then checked for shape
(one row of numbers per text, all rows of one length) and values (finite in float32,
not all zero). Every failure is one EmbeddingsError naming the endpoint, with the
same messages and hints as the LLM providers.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from loomcli.config import Config
from loomcli.embeddings.common import EmbeddingsError, identity, require_numpy
from loomcli.errors import ProviderError
from loomcli.providers import DEFAULT_ENDPOINTS, DEFAULT_KEY_ENV, REGISTRY, HttpSettings

BATCH = 32
# 32 vectors of 4,096 numbers are about 3 MB of JSON: five times that is the most an
# answer may hold. Read a piece at a time, so a 1 GB answer costs READ_BYTES, not 1 GB.
RESPONSE_BYTES_MAX = 16 << 20
READ_BYTES = 1 << 20
FLOAT32_MAX = 3.4028234663852886e38


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
        parts = [self._batch(list(texts[i:i + BATCH])) for i in range(0, len(texts), BATCH)]
        dims = {p.shape[1] for p in parts}
        if len(dims) > 1:
            raise self._bad(f"vectors of {' and '.join(map(str, sorted(dims)))} numbers in "
                            "one scan")
        out = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def _batch(self, texts: list[str]) -> Any:
        if self.provider == "ollama":
            path = "/api/embed"
            headers: dict[str, str] = {}
        else:
            path = "/v1/embeddings"
            headers = ({"Authorization": f"Bearer {self.http.api_key}"}
                       if self.http.api_key else {})
        raw = self._post(path, {"model": self.model, "input": texts}, headers)
        try:
            data = json.loads(raw)
        except ValueError:
            raise self._bad("an answer that is not JSON") from None
        del raw
        return self._rows(data, len(texts))

    def _rows(self, data: Any, n: int) -> Any:
        """The answer's vectors as one float32 array, after checking every row."""
        np = require_numpy()
        if self.provider == "ollama":
            rows = data.get("embeddings") if isinstance(data, dict) else None
        else:
            items = data.get("data") if isinstance(data, dict) else None
            if isinstance(items, list) and all(isinstance(d, dict) for d in items):
                items = sorted(items, key=lambda d: d.get("index", 0)
                               if isinstance(d.get("index", 0), int) else 0)
                rows = [d.get("embedding") for d in items]
            else:
                rows = None
        if not isinstance(rows, list) or len(rows) != n:
            raise self._bad(f"no list of {n} embeddings")
        first = rows[0]
        dim = len(first) if isinstance(first, list) else 0
        if dim == 0:
            raise self._bad("an embedding that is not a list of numbers")
        out = np.empty((n, dim), dtype=np.float32)
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != dim:
                raise self._bad(f"embeddings of different sizes ({dim} and "
                                f"{len(row) if isinstance(row, list) else 'none'})")
            for x in row:
                if type(x) not in (float, int):  # bool, str, None, lists: not numbers
                    raise self._bad(f"a value that is not a number ({_show(x)})")
                if not -FLOAT32_MAX <= x <= FLOAT32_MAX:  # NaN, ±Inf, past float32
                    raise self._bad(f"a value that is not a finite number ({x})")
            out[i] = row
            if not out[i].any():
                raise self._bad("an embedding of zeros")
            rows[i] = None  # free each row as it is copied
        return out

    def _bad(self, what: str) -> EmbeddingsError:
        return EmbeddingsError(f"{self.endpoint} answered with {what}",
                               f"check that [embeddings] model {self.model!r} is an "
                               "embedding model, and the server's log")

    def _post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
        """POST JSON, return the answer's body: capped, and within one deadline."""
        url = urllib.parse.urlsplit(self.endpoint)
        secure = url.scheme == "https"
        timeout = self.http.timeout_s
        deadline = time.monotonic() + timeout
        conn_cls = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        prefix = url.path.rstrip("/")
        conn = conn_cls(url.hostname or "127.0.0.1", url.port, timeout=timeout)
        # The deadline covers the whole request: a watchdog closes the socket when it
        # passes, whatever read is waiting (a per-read timeout never fires on a drip).
        expired = threading.Event()
        opened: list[socket.socket] = []  # http.client forgets it once the answer began

        def cut_off() -> None:
            expired.set()
            for sock in opened:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(timeout, cut_off)
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                conn.connect()
                opened.append(conn.sock)
                if expired.is_set():  # the deadline passed while connecting
                    raise TimeoutError
                conn.request("POST", prefix + path, body=json.dumps(body).encode("utf-8"),
                             headers={"Content-Type": "application/json",
                                      "Accept": "application/json", "User-Agent": "loom",
                                      **headers})
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                if expired.is_set() or isinstance(exc, TimeoutError):
                    raise self._error(self.http._timeout(self.http.timeout_s)) from None
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise EmbeddingsError(
                    f"cannot reach {self.provider} at {self.endpoint}: {reason}",
                    REGISTRY[self.provider].connect_hint.format(table="embeddings")) from None
            chunks: list[bytes] = []
            size = 0
            try:
                while True:
                    piece = resp.read1(READ_BYTES)
                    if not piece:
                        break
                    size += len(piece)
                    if size > (RESPONSE_BYTES_MAX if resp.status == 200 else 4000):
                        if resp.status != 200:
                            break
                        raise EmbeddingsError(
                            f"{self.endpoint} sent more than {RESPONSE_BYTES_MAX >> 20} MB "
                            f"for {len(body['input'])} embeddings",
                            "check [embeddings] endpoint and model")
                    chunks.append(piece)
            except (OSError, http.client.HTTPException) as exc:
                if expired.is_set() or isinstance(exc, TimeoutError):
                    raise self._error(self.http._timeout(self.http.timeout_s)) from None
                raise EmbeddingsError(f"{self.endpoint} closed the connection mid-answer "
                                      f"({exc})", "try again") from None
            if expired.is_set() or time.monotonic() > deadline:
                raise self._error(self.http._timeout(self.http.timeout_s))
            raw = b"".join(chunks)
            if resp.status != 200:
                raise self._error(self.http._http_error(resp.status, _message(raw)))
            return raw
        finally:
            watchdog.cancel()
            conn.close()

    @staticmethod
    def _error(exc: ProviderError) -> EmbeddingsError:
        return EmbeddingsError(exc.message, exc.hint)


def _message(raw: bytes) -> str:
    """The error a server gave in its body, short (as the LLM providers show it)."""
    text = raw[:4000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:200]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err)[:200]


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else \
        str(value)
    return text if len(text) <= 30 else text[:27] + "..."
