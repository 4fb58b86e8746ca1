"""A real HTTP server on loopback standing in for Ollama, OpenAI-compatible servers and
Anthropic: it records every request and streams answers the way each API does."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    answer: list[str] = field(default_factory=lambda: ["The answer ", "is here ",
                                                       "[manuals/field-guide.pdf]."])
    status: int = 200
    error: str = ""
    stall_s: float = 0.0  # sleep before answering (to test time-outs)


class RecordingHandler(BaseHTTPRequestHandler):
    """Keep-alive, quiet, and `record()` reads a JSON body into `requests`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def record(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        return body


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.behaviour = Behaviour()
        fake = self

        class Handler(RecordingHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.record(fake.requests)
                b = fake.behaviour
                if b.stall_s:
                    time.sleep(b.stall_s)
                if b.status != 200:
                    payload = json.dumps({"error": {"message": b.error or "nope"}}).encode()
                    self.send_response(b.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if self.path == "/api/chat":
                    chunks = [json.dumps({"message": {"role": "assistant", "content": p},
                                          "done": False}) + "\n" for p in b.answer]
                    chunks.append(json.dumps({"done": True}) + "\n")
                    self._stream("application/x-ndjson", chunks)
                elif self.path == "/v1/chat/completions":
                    chunks = [f"data: {json.dumps({'choices': [{'delta': {'content': p}}]})}\n\n"
                              for p in b.answer] + ["data: [DONE]\n\n"]
                    self._stream("text/event-stream", chunks)
                elif self.path == "/v1/messages":
                    events = [("message_start", {"type": "message_start"})]
                    events += [("content_block_delta", {"type": "content_block_delta",
                                "delta": {"type": "text_delta", "text": p}}) for p in b.answer]
                    events.append(("message_stop", {"type": "message_stop"}))
                    self._stream("text/event-stream",
                                 [f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events])
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def _stream(self, ctype: str, chunks: list[str]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    data = chunk.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
