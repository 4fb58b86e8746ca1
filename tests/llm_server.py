"""A real HTTP server on loopback standing in for Ollama, OpenAI-compatible servers and
Anthropic: it records every request and streams answers the way each API does — text,
tool calls in each API's own shape, and malformed or endless streams when told to.

It also keeps a context window the way the real servers do (`Behaviour.window`):
- as Ollama: `POST /api/show` advertises `model_info["<arch>.context_length"]`; a chat uses
  `options.num_ctx` (2,048 when omitted) and silently keeps only the LAST tokens of a
  longer prompt; what it kept is recorded in `kept` (tests assert kept == sent);
- as llama.cpp: `GET /props` → `n_ctx`; a prompt past it is refused with HTTP 400
  "the request exceeds the available context size".
Each chat reports its prompt's token count as its API does: Ollama's `prompt_eval_count`
in the last line (what it evaluated: after a cut, and with an older version's prompt
cache only the tokens past the cached prefix, `Behaviour.cache_lowers`), OpenAI's
`usage.prompt_tokens` in a last chunk when the request asks with `stream_options`
(every prompt token), Anthropic's `usage.input_tokens` in `message_start` (without those
read from its cache, counted in `cache_read_input_tokens`). `Behaviour.real_window`: an
Ollama that holds fewer tokens than the num_ctx asked (its memory, OLLAMA_CONTEXT_LENGTH)
and cuts silently; `cut_half`: a newer runner that keeps num_ctx / 2 + 2 tokens of a
longer prompt instead of num_ctx.
Tokens are counted by `tests.tokens` (a real BPE vocabulary where one is installed).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests import tokens

OLLAMA_DEFAULT_NUM_CTX = 2048


@dataclass
class Behaviour:
    answer: list[str] = field(default_factory=lambda: ["The answer ", "is here ",
                                                       "[manuals/field-guide.pdf]."])
    status: int = 200
    error: str = ""
    stall_s: float = 0.0  # sleep before answering (to test time-outs)
    # Tool calls to answer with, as (name, arguments) — in the API's own shape.
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    no_tools: bool = False  # refuse a request carrying `tools` as the real servers do
    raw: list[bytes] | None = None  # send these bytes as the body instead of an answer
    huge_line_bytes: int = 0  # stream one answer line of this many bytes, in pieces
    endless: bool = False  # stream small pieces until the client hangs up
    # Stream this many chunks, then hold the rest until `FakeLLM.resume` is set (or the
    # client hangs up): an answer caught mid-stream. `FakeLLM.paused` says it is held.
    pause_after: int | None = None
    non_stream: bool = False  # answer OpenAI chat with one JSON document
    # The context window, in tokens: None keeps everything (no window).
    window: int | None = None
    model_length: int = 32768  # the model's own length (what /api/show advertises)
    show_length: Any = None  # /api/show advertises this instead (a hostile `true`, say)
    refuse_times: int | None = None  # llama.cpp: refuse only the first N long prompts
    # Which OpenAI-compatible server tells the window, and where: "llama.cpp" (GET /props),
    # "vllm" (GET /v1/models max_model_len), "lmstudio" (GET /api/v0/models).
    told_by: str = "llama.cpp"
    real_window: int | None = None  # Ollama: holds at most this many, whatever num_ctx says
    cut_half: bool = False  # Ollama: a cut keeps num_ctx / 2 + 2 tokens (newer runners)
    cache_lowers: bool = False  # the count leaves out the prefix shared with the last prompt
    report_counts: bool = True  # report prompt token counts at all
    # Hold each chat until this is set (a slow model, without clocks); FakeLLM.arrived is
    # released once per chat held.
    gate: threading.Event | None = None


class RecordingHandler(BaseHTTPRequestHandler):
    """Keep-alive, quiet, and `record()` reads a JSON body into `requests`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def record(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        return body


def prompt_text(path: str, body: dict[str, Any]) -> str:
    """The text a server tokenizes for a chat: its messages in order (system first)."""
    parts: list[str] = []
    if isinstance(body.get("system"), str):
        parts.append(body["system"])
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(b.get("text") or b.get("content") or "") for b in content)
        parts.append(str(content or ""))
    return "\n".join(parts)


class FakeLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.behaviour = Behaviour()
        self.kept: list[str] = []  # what the window kept of each chat's prompt (Ollama)
        self.sent: list[str] = []  # each chat's whole prompt
        self.refused = 0
        self.counts: list[int] = []  # each chat's prompt tokens as reported
        self.previous = ""  # the last prompt (a prompt cache's prefix)
        self.cached_last = 0  # tokens of the last prompt found in the cache
        self.closed = threading.Event()  # an endless stream saw the client hang up
        self.paused = threading.Event()  # a stream is held (Behaviour.pause_after)
        self.resume = threading.Event()
        self.arrived = threading.Semaphore(0)  # a chat reached Behaviour.gate
        fake = self

        class Handler(RecordingHandler):
            def do_GET(self) -> None:  # noqa: N802
                b = fake.behaviour
                fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                      "body": None})
                if self.path == "/props" and b.window and b.told_by == "llama.cpp":
                    self._json(200, {"default_generation_settings": {"n_ctx": b.window},
                                     "total_slots": 1})
                elif self.path == "/v1/models" and b.window and b.told_by == "vllm":
                    self._json(200, {"object": "list", "data": [
                        {"id": "test-model", "object": "model", "max_model_len": b.window}]})
                elif self.path == "/api/v0/models" and b.window and b.told_by == "lmstudio":
                    self._json(200, {"object": "list", "data": [
                        {"id": "other", "max_context_length": 999},
                        {"id": "test-model", "type": "llm", "max_context_length": 32768,
                         "loaded_context_length": b.window}]})
                else:
                    self._json(404, {"error": {"message": "File Not Found"}})

            def do_POST(self) -> None:  # noqa: N802
                body = self.record(fake.requests)
                b = fake.behaviour
                if b.stall_s:
                    time.sleep(b.stall_s)
                if self.path == "/api/show":
                    self._json(200, {"model_info": {"general.architecture": "llama",
                                                    "llama.context_length":
                                                        b.model_length if b.show_length is None
                                                        else b.show_length},
                                     "parameters": ""})
                    return
                if b.status != 200:
                    self._json(b.status, {"error": {"message": b.error or "nope"}})
                    return
                if b.no_tools and body.get("tools"):
                    msg = (f"registry.ollama.ai/library/{body.get('model')} does not support "
                           "tools" if self.path == "/api/chat"
                           else "tools is not supported by this server")
                    self._json(400, {"error": msg} if self.path == "/api/chat"
                               else {"error": {"message": msg}})
                    return
                if self.path in ("/api/chat", "/v1/chat/completions", "/v1/messages"):
                    if b.gate is not None:
                        fake.arrived.release()
                        b.gate.wait(timeout=300)
                    text = prompt_text(self.path, body)
                    fake.sent.append(text)
                    if self.path == "/api/chat" and b.window is not None:
                        num_ctx = min((body.get("options") or {}).get("num_ctx")
                                      or OLLAMA_DEFAULT_NUM_CTX, b.model_length,
                                      b.real_window or b.model_length)
                        if b.cut_half and tokens.count(text) > num_ctx:
                            num_ctx = num_ctx // 2 + 2
                        fake.kept.append(tokens.keep_last(text, num_ctx))
                    elif self.path == "/v1/chat/completions" and b.window is not None:
                        n = tokens.count(text)
                        if n > b.window and (b.refuse_times is None
                                             or fake.refused < b.refuse_times):
                            fake.refused += 1
                            self._json(400, {"error": {
                                "code": 400, "type": "exceed_context_size_error",
                                "message": f"the request exceeds the available context size"
                                           f", try increasing it (n_prompt_tokens={n}, "
                                           f"n_ctx={b.window})"}})
                            return
                        fake.kept.append(text)
                    else:
                        fake.kept.append(text)
                if self.path in ("/api/chat", "/v1/chat/completions", "/v1/messages"):
                    self.prompt_tokens = fake.count(self.path, text)
                    self.cached = fake.cached_last
                self.body = body
                if b.raw is not None:
                    self._stream("application/octet-stream", b.raw)
                elif b.huge_line_bytes:
                    self._huge_line()
                elif b.endless:
                    self._endless()
                elif self.path == "/api/chat":
                    self._ollama(b)
                elif self.path == "/v1/chat/completions":
                    self._openai(b)
                elif self.path == "/v1/messages":
                    self._anthropic(b)
                else:
                    self._json(404, {"error": "not found"})

            def _ollama(self, b: Behaviour) -> None:
                chunks = [{"message": {"role": "assistant", "content": p}, "done": False}
                          for p in b.answer]
                if b.tool_calls:
                    chunks.append({"message": {"role": "assistant", "content": "",
                                               "tool_calls": [
                                                   {"function": {"name": n, "arguments": a}}
                                                   for n, a in b.tool_calls]},
                                   "done": False})
                last: dict[str, Any] = {"message": {"role": "assistant", "content": ""},
                                        "done": True, "done_reason": "stop"}
                if b.report_counts:
                    last |= {"prompt_eval_count": self.prompt_tokens, "eval_count": len(b.answer)}
                chunks.append(last)
                self._stream("application/x-ndjson",
                             [(json.dumps(c) + "\n").encode() for c in chunks])

            def _openai(self, b: Behaviour) -> None:
                calls = [{"id": f"call_{i}", "type": "function",
                          "function": {"name": n, "arguments": json.dumps(a)}}
                         for i, (n, a) in enumerate(b.tool_calls)]
                if b.non_stream:
                    message: dict[str, Any] = {"role": "assistant",
                                               "content": "".join(b.answer) or None}
                    if calls:
                        message["tool_calls"] = calls
                    whole: dict[str, Any] = {"id": "x", "object": "chat.completion", "choices": [
                        {"index": 0, "message": message, "finish_reason": "stop"}]}
                    if b.report_counts:
                        whole["usage"] = {"prompt_tokens": self.prompt_tokens,
                                          "completion_tokens": len(b.answer),
                                          "total_tokens": self.prompt_tokens + len(b.answer)}
                    self._json(200, whole)
                    return
                chunks = [{"choices": [{"index": 0, "delta": {"content": p}}]}
                          for p in b.answer]
                for i, call in enumerate(calls):
                    # As OpenAI streams them: the id and name first, then the JSON text
                    # of the arguments in small pieces, all under the call's index.
                    args = call["function"]["arguments"]
                    chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                        {"index": i, "id": call["id"], "type": "function",
                         "function": {"name": call["function"]["name"], "arguments": ""}}]}}]})
                    for k in range(0, len(args), 7):
                        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
                            {"index": i, "function": {"arguments": args[k:k + 7]}}]}}]})
                chunks.append({"choices": [{"index": 0, "delta": {},
                                            "finish_reason": "tool_calls" if calls
                                            else "stop"}]})
                asked = (self.body.get("stream_options") or {}).get("include_usage")
                if b.report_counts and asked:
                    chunks.append({"choices": [], "usage": {
                        "prompt_tokens": self.prompt_tokens, "completion_tokens": len(b.answer),
                        "total_tokens": self.prompt_tokens + len(b.answer)}})
                self._stream("text/event-stream",
                             [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
                             + [b"data: [DONE]\n\n"])

            def _anthropic(self, b: Behaviour) -> None:
                start: dict[str, Any] = {"type": "message_start", "message": {
                    "id": "msg_1", "type": "message", "role": "assistant", "content": []}}
                if b.report_counts:
                    start["message"]["usage"] = {
                        "input_tokens": self.prompt_tokens - self.cached, "output_tokens": 1,
                        "cache_read_input_tokens": self.cached,
                        "cache_creation_input_tokens": 0}
                events: list[dict[str, Any]] = [start]
                index = 0
                if b.answer:
                    events.append({"type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}})
                    events += [{"type": "content_block_delta", "index": 0,
                                "delta": {"type": "text_delta", "text": p}} for p in b.answer]
                    events.append({"type": "content_block_stop", "index": 0})
                    index = 1
                for i, (name, args) in enumerate(b.tool_calls):
                    raw = json.dumps(args)
                    events.append({"type": "content_block_start", "index": index, "content_block":
                                   {"type": "tool_use", "id": f"toolu_{i}", "name": name,
                                    "input": {}}})
                    events += [{"type": "content_block_delta", "index": index, "delta": {
                        "type": "input_json_delta", "partial_json": raw[k:k + 5]}}
                        for k in range(0, len(raw), 5)]
                    events.append({"type": "content_block_stop", "index": index})
                    index += 1
                events.append({"type": "message_stop"})
                self._stream("text/event-stream",
                             [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
                              for e in events])

            def _huge_line(self) -> None:
                self._start("application/x-ndjson")
                piece = b"x" * (1 << 20)
                sent = 0
                try:
                    self._chunk(b'{"message": {"content": "')
                    while sent < fake.behaviour.huge_line_bytes:
                        self._chunk(piece)
                        sent += len(piece)
                    self._chunk(b'"}}\n')
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    fake.closed.set()

            def _endless(self) -> None:
                self._start("application/x-ndjson")
                line = (json.dumps({"message": {"content": "more "}, "done": False})
                        + "\n").encode() * 64
                try:
                    while True:
                        self._chunk(line)
                except OSError:
                    fake.closed.set()

            def _json(self, status: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _start(self, ctype: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, ctype: str, chunks: list[bytes]) -> None:
                self._start(ctype)
                pause = fake.behaviour.pause_after
                for i, chunk in enumerate(chunks):
                    if i == pause:
                        fake.paused.set()
                        fake.resume.wait(120)
                    if chunk:
                        try:
                            self._chunk(chunk)
                        except OSError:
                            fake.closed.set()
                            return
                self.wfile.write(b"0\r\n\r\n")

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up (a time-out test, a capped stream): expected

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def count(self, path: str, text: str) -> int:
        """The prompt's tokens as the API reports them (what was kept of it; an older
        Ollama with a cache: only those past the prefix shared with the last prompt)."""
        kept = self.kept[-1] if self.kept else text
        n = tokens.count(kept)
        shared = 0
        if self.behaviour.cache_lowers and self.previous:
            while (shared < min(len(kept), len(self.previous))
                   and kept[shared] == self.previous[shared]):
                shared += 1
        self.previous = kept
        cached = tokens.count(kept[:shared]) if shared else 0
        self.counts.append(n - cached if path == "/api/chat" else n)
        self.cached_last = cached
        return self.counts[-1] if path == "/api/chat" else n

    def chats(self) -> list[dict[str, Any]]:
        return [r for r in self.requests
                if r["path"] in ("/api/chat", "/v1/chat/completions", "/v1/messages")]

    def __enter__(self) -> FakeLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
