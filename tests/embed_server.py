"""A real HTTP server on loopback standing in for Ollama's /api/embed and an
OpenAI-compatible /v1/embeddings. Its vectors come from the real built-in model (so
search by meaning really works through it), reversed in order of dimensions: a different
model as far as loom can tell. On a plain install (no built-in model) they come from a
hashed bag of words instead, which still finds a note by the words it shares with a query.
It records every request and misbehaves on demand, as real servers have: it fails, stalls,
drips, answers too much, or answers vectors of another size or with values that are not
finite numbers."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

from tests.llm_server import RecordingHandler

Rows = list[list[Any]]


class FakeEmbeddings:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.stall_s = 0.0
        # Changes each answer's rows (another size, NaN, strings) when set.
        self.rows: Callable[[Rows], Rows] | None = None
        # Sends this body instead, piece by piece (a drip, a flood) when set.
        self.body: Callable[[], Iterator[bytes]] | None = None
        self.lock = threading.Lock()
        self._model: Any = None
        fake = self

        class Handler(RecordingHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.record(fake.requests)
                if fake.stall_s:
                    time.sleep(fake.stall_s)
                if fake.status != 200:
                    self._send(fake.status, {"error": "model not loaded"})
                    return
                if fake.body is not None:
                    self._stream(fake.body())
                    return
                rows = [list(map(float, v[::-1])) for v in fake.embed(body["input"])]
                if fake.rows is not None:
                    rows = fake.rows(rows)
                if self.path == "/api/embed":
                    self._send(200, {"model": body["model"], "embeddings": rows})
                elif self.path == "/v1/embeddings":
                    self._send(200, {"object": "list", "data": [
                        {"object": "embedding", "index": i, "embedding": r}
                        for i, r in reversed(list(enumerate(rows)))]})
                else:
                    self._send(404, {"error": "no such API"})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()  # NaN and Infinity as Python writes them
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, pieces: Iterator[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for piece in pieces:
                        self.wfile.write(piece)
                        self.wfile.flush()
                except OSError:  # loom hung up: what a real server sees too
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def embed(self, texts: list[str]) -> Any:
        with self.lock:
            if self._model is None:
                try:
                    from loomcli.embeddings.local import LocalUSE

                    self._model = LocalUSE(bulk=True)
                    self._model.embed(["probe"])
                except Exception:  # noqa: BLE001 - a plain install: no built-in model
                    self._model = HashedWords()
            return self._model.embed(texts)

    def __enter__(self) -> FakeEmbeddings:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


class HashedWords:
    """Each word adds 1 to one of DIM numbers (by its hash): texts sharing words point
    the same way."""

    DIM = 256

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            row = [0.0] * self.DIM
            for word in re.findall(r"\w+", text.lower()):
                row[hashlib.blake2b(word.encode(), digest_size=4).digest()[0]] += 1.0
            row[-1] += 0.01  # never all zeros
            out.append(row)
        return out


def drip(pieces: int = 10_000, every_s: float = 1.0) -> Callable[[], Iterator[bytes]]:
    """One byte a second: a per-read timeout never fires on it."""
    def body() -> Iterator[bytes]:
        yield b"{"
        for _ in range(pieces):
            time.sleep(every_s)
            yield b" "
    return body


def flood(megabytes: int) -> Callable[[], Iterator[bytes]]:
    """A valid-looking one-line JSON answer of `megabytes` MB (made as it is sent)."""
    def body() -> Iterator[bytes]:
        yield b'{"embeddings": [['
        piece = b"0.125, " * (1 << 17)  # 896 KB
        for _ in range(megabytes * (1 << 20) // len(piece)):
            yield piece
        yield b"0.125]]}"
    return body
