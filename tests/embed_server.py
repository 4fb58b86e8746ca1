"""A real HTTP server on loopback standing in for Ollama's /api/embed and an
OpenAI-compatible /v1/embeddings. Its vectors come from the real built-in model (so
search by meaning really works through it), reversed in order of dimensions: a different
model as far as loom can tell. It records every request and can fail or stall on demand."""

from __future__ import annotations

import json
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from tests.llm_server import RecordingHandler


class FakeEmbeddings:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.stall_s = 0.0
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
                rows = [list(map(float, v[::-1])) for v in fake.embed(body["input"])]
                if self.path == "/api/embed":
                    self._send(200, {"model": body["model"], "embeddings": rows})
                elif self.path == "/v1/embeddings":
                    self._send(200, {"object": "list", "data": [
                        {"object": "embedding", "index": i, "embedding": r}
                        for i, r in reversed(list(enumerate(rows)))]})
                else:
                    self._send(404, {"error": "no such API"})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def embed(self, texts: list[str]) -> Any:
        with self.lock:
            if self._model is None:
                from loomcli.embeddings.local import LocalUSE

                self._model = LocalUSE(bulk=True)
            return self._model.embed(texts)

    def __enter__(self) -> FakeEmbeddings:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
