"""LLM providers behind one small protocol: `chat(messages, tools=...)` yields text pieces
as they stream and tool calls; `window()` tells the model's context window in tokens.

HTTP is the standard library's (no SDKs); every failure becomes one ProviderError that
names the endpoint and says what to do next. The API key is read from the environment
variable that `[llm] api_key_env` names, and is never written anywhere.

Each provider is one module and one row of `REGISTRY`: its name, default endpoint, key
variable, how it learns its window and whether it takes tools. Each speaks its API's own
shape for tool calls (Ollama: `message.tool_calls` with object arguments and `role: "tool"`
results; OpenAI: streamed `tool_calls` deltas with JSON-string arguments and
`tool_call_id`; Anthropic: `tool_use` / `tool_result` blocks).

A stream is read line by line with a bounded readline: a line longer than
`MAX_LINE_BYTES` or an answer longer than `MAX_ANSWER_BYTES` is one ProviderError, so a
hostile or broken server cannot grow memory past a few MB.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from loomcli.config import Config
from loomcli.errors import ConfigError, ContextExceeded, ProviderError, ToolsUnsupported

MAX_LINE_BYTES = 1 << 20  # one streamed line (one JSON event) at most 1 MiB
MAX_ANSWER_BYTES = 8 << 20  # a whole streamed answer at most 8 MiB
MAX_ANSWER_S = 600.0  # a whole streamed answer within 10 minutes, however it trickles
PROBE_TIMEOUT_S = 5.0  # asking a server for its window must not stall an ask
DEFAULT_WINDOW = 8192  # no server, config or table says: a conservative window


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    error: str = ""  # arguments that were not a JSON object: what they were (sent as {})


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema


@dataclass
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # for role "tool"
    name: str | None = None  # for role "tool"


@dataclass
class Window:
    tokens: int
    source: str  # e.g. "ollama /api/show", "config", "llama.cpp /props", "default"
    warning: str = ""  # the server told something unusable, so this is a fallback


def count(value: Any) -> int | None:
    """A token count a server reported, when it is one (an int of 0 or more)."""
    return value if type(value) is int and value >= 0 else None


def window_tokens(value: Any) -> int | None:
    """A window a server told, when it is one: an int above 0 (a bool is not an int)."""
    return value if type(value) is int and value > 0 else None


class Provider(Protocol):
    name: str
    endpoint: str
    model: str
    # What the server said the last chat's prompt took, in its own tokens (None: it did
    # not say): Ollama's prompt_eval_count, OpenAI's usage.prompt_tokens, Anthropic's
    # usage.input_tokens plus the tokens it read from or wrote to its prompt cache.
    prompt_count: int | None

    def window(self) -> Window: ...  # cached per model+endpoint

    def chat(self, messages: list[Message], *, tools: list[ToolSpec] | None = None,
             max_tokens: int | None = None, context_tokens: int | None = None
             ) -> Iterator[str | ToolCall]: ...  # text pieces as they stream, tool calls

    def stream(self, system: str, user: str) -> Iterator[str]: ...  # plain ask


@dataclass(frozen=True)
class Registration:
    """One provider: where it lives and what it can do."""

    name: str
    module: str  # loomcli.providers.<module>
    cls: str
    default_endpoint: str
    key_env: str | None  # the variable holding its API key by default
    window_from: str  # how it learns its window, for the docs and `--show-context`
    tools: bool  # takes tool definitions in chat
    connect_hint: str


REGISTRY: dict[str, Registration] = {r.name: r for r in (
    Registration("ollama", "ollama", "Ollama", "http://127.0.0.1:11434", None,
                 "POST /api/show model_info <arch>.context_length; num_ctx sent", True,
                 "start it with `ollama serve`, or set [{table}] endpoint in config.toml"),
    Registration("openai", "openai", "OpenAICompatible", "https://api.openai.com",
                 "OPENAI_API_KEY",
                 "llama.cpp GET /props n_ctx, vLLM /v1/models max_model_len, LM Studio "
                 "/api/v0/models max_context_length, else known hosted models", True,
                 "start the server, or set [{table}] endpoint in config.toml"),
    Registration("anthropic", "anthropic", "Anthropic", "https://api.anthropic.com",
                 "ANTHROPIC_API_KEY", "known model windows", True,
                 "check the network, or set [{table}] endpoint in config.toml"),
)}
# Kept for the embeddings providers, which share endpoints and key variables.
DEFAULT_ENDPOINTS = {name: r.default_endpoint for name, r in REGISTRY.items()}
DEFAULT_KEY_ENV = {name: r.key_env for name, r in REGISTRY.items() if r.key_env}

# Servers word "the prompt is longer than the window" in many ways.
_CONTEXT_WORDS = re.compile(
    r"exceed\w*[^.]{0,40}context|context[^.]{0,40}(length|size|window)[^.]{0,40}"
    r"(exceed|too|maximum|larger)|maximum context length|prompt is too long|too many tokens"
    r"|input is too long|context_length_exceeded|request too large", re.I)
_TOOLS_WORDS = re.compile(
    r"does not support tools|tools? (is|are) not supported|tool[_ ]?(use|calling|choice)?"
    r"[^.]{0,30}not supported|unsupported[^.]{0,20}tools?|unrecognized[^.]{0,30}tools"
    r"|extra[^.]{0,30}tools|unknown (field|parameter)[^.]{0,20}tools"
    # llama.cpp without --jinja (HTTP 500), vLLM without --enable-auto-tool-choice (400)
    r"|tools param requires|tool choice requires", re.I)


class StreamCut(ProviderError):
    """A streamed answer went past its size or time: what came before it is an answer cut
    short, not nothing (ask keeps it and says so)."""


@dataclass
class HttpSettings:
    name: str
    endpoint: str
    model: str
    api_key: str | None
    api_key_env: str | None
    timeout_s: float
    table: str = "llm"  # the config table these settings come from, for hints
    context_tokens: int | None = None  # `[llm] context_tokens`: the window, when set
    max_line_bytes: int = MAX_LINE_BYTES
    max_answer_bytes: int = MAX_ANSWER_BYTES
    max_answer_s: float = MAX_ANSWER_S

    def request(self, url: str, body: dict[str, Any] | None, headers: dict[str, str],
                timeout_s: float | None = None) -> Any:
        """Open a POST (with `body`) or GET; errors become ProviderError."""
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(
            url, data=data, method="POST" if body is not None else "GET",
            headers={"Content-Type": "application/json", "Accept": "application/json",
                     "User-Agent": "loom", **headers})
        timeout = timeout_s or self.timeout_s
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc.code, _error_message(exc)) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timeout(timeout) from None
            reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
            raise ProviderError(f"cannot reach {self.name} at {self.endpoint}: {reason}",
                                REGISTRY[self.name].connect_hint.format(table=self.table)
                                ) from None
        except (TimeoutError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                raise self._timeout(timeout) from None
            raise ProviderError(f"cannot reach {self.name} at {self.endpoint}: {exc}",
                                REGISTRY[self.name].connect_hint.format(table=self.table)
                                ) from None

    def post_lines(self, url: str, body: dict[str, Any], headers: dict[str, str]
                   ) -> Iterator[bytes]:
        """POST JSON and yield the response line by line, each line and the whole bounded:
        in size, and in time (a watchdog shuts the socket `max_answer_s` after the request,
        whatever read is waiting: a per-read time-out never fires on a drip). Past a bound
        the error is `StreamCut`, which the ask keeps what came before."""
        import contextlib
        import http.client
        import threading

        resp = self.request(url, body, headers)
        expired = threading.Event()
        sock = getattr(getattr(resp.fp, "raw", None), "_sock", None)

        def cut_off() -> None:
            expired.set()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(2)  # SHUT_RDWR: wakes the blocked read

        watchdog = threading.Timer(self.max_answer_s, cut_off)
        watchdog.daemon = True
        watchdog.start()
        total = 0
        try:
            with resp:
                while True:
                    try:
                        line = resp.readline(self.max_line_bytes + 1)
                    except TimeoutError:
                        raise self._timeout(self.timeout_s) from None
                    except (OSError, ValueError, http.client.HTTPException) as exc:
                        if expired.is_set():
                            raise self._too_slow() from None
                        raise ProviderError(f"{self.endpoint} closed the connection "
                                            f"mid-answer ({exc})", "try again") from None
                    if expired.is_set():
                        raise self._too_slow()
                    if not line:
                        return
                    if len(line) > self.max_line_bytes:
                        raise ProviderError(
                            f"{self.endpoint} sent a line of more than "
                            f"{self.max_line_bytes:,} bytes in its answer", "check the "
                            f"server; it is not answering as the {self.name} API does")
                    total += len(line)
                    if total > self.max_answer_bytes:
                        raise StreamCut(
                            f"{self.endpoint} sent more than {self.max_answer_bytes:,} bytes "
                            "for one answer", "check the server's log; the model may be "
                            "looping")
                    yield line
        finally:
            watchdog.cancel()

    def _too_slow(self) -> StreamCut:
        return StreamCut(f"{self.endpoint} was still answering after {self.max_answer_s:g}s",
                         "check the server's log; the model may be looping, or too slow")

    def get_json(self, url: str, headers: dict[str, str] | None = None,
                 body: dict[str, Any] | None = None) -> Any:
        """A small JSON document (a server's window, say), within the probe time-out."""
        with self.request(url, body, headers or {}, min(PROBE_TIMEOUT_S, self.timeout_s)) as resp:
            raw = resp.read(self.max_line_bytes + 1)
        if len(raw) > self.max_line_bytes:
            raise self.fail(f"{url} answered more than {self.max_line_bytes:,} bytes")
        try:
            return json.loads(raw)
        except ValueError:
            raise self.fail(f"{url} did not answer JSON") from None

    def _timeout(self, timeout: float) -> ProviderError:
        return ProviderError(f"no answer from {self.endpoint} within {timeout:g}s",
                             f"is the model still loading? raise [{self.table}] timeout_s")

    def _http_error(self, status: int, message: str) -> ProviderError:
        detail = f": {message}" if message else ""
        if status in (401, 403):
            env = self.api_key_env or f"the variable named by [{self.table}] api_key_env"
            return ProviderError(f"{self.endpoint} refused the API key (HTTP {status}){detail}",
                                 f"set a valid key in ${env}")
        if status in (400, 413, 422) and _CONTEXT_WORDS.search(message or ""):
            return ContextExceeded(f"{self.endpoint} refused the prompt as longer than the "
                                   f"model's window (HTTP {status}){detail}",
                                   f"set [{self.table}] context_tokens to the server's window")
        if status in (400, 422, 500) and _TOOLS_WORDS.search(message or ""):
            return ToolsUnsupported(f"{self.endpoint}: model {self.model!r} does not take "
                                    f"tools (HTTP {status}){detail}",
                                    f"pick a model that supports tool calling in [{self.table}] "
                                    "model")
        if status == 404:
            hint = (f"pull it with `ollama pull {self.model}`, or set [{self.table}] model"
                    if self.name == "ollama"
                    else f"check [{self.table}] model and [{self.table}] endpoint")
            return ProviderError(f"{self.endpoint}: model {self.model!r} or its API was not "
                                 f"found (HTTP 404){detail}", hint)
        return ProviderError(f"{self.endpoint} answered HTTP {status}{detail}",
                             "check the server's log, or try again")

    def fail(self, message: str) -> ProviderError:
        return ProviderError(f"{self.endpoint}: {message}", "check the server's log")

    def shape(self, what: str) -> ProviderError:
        """Valid JSON of a shape the API never sends."""
        return ProviderError(f"{self.endpoint} sent {what}, not the {self.name} API's shape",
                             f"check [{self.table}] provider and endpoint: is this server "
                             f"{self.name}-compatible?")

    def cached_window(self, learn: Callable[[], Window]) -> Window:
        """`[llm] context_tokens` when set, else what `learn` finds, once per process."""
        if self.context_tokens:
            return Window(int(self.context_tokens), "config")
        key = (self.name, self.endpoint, self.model)
        if key not in _WINDOWS:
            _WINDOWS[key] = learn()
        return _WINDOWS[key]


# What each (provider, endpoint, model) said its window is. Asking is cheap but not free
# (three probes on an OpenAI-compatible server), and the answer only changes when the
# server restarts; a long-running `loom serve`/`loom mcp` asks once.
_WINDOWS: dict[tuple[str, str, str], Window] = {}


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4000).decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw.strip()[:300]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err)[:300]


def json_lines(http: HttpSettings, lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a newline-delimited stream (Ollama); another shape is an error."""
    for raw in lines:
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            raise http.shape("a line that is not JSON") from None
        if not isinstance(data, dict):
            raise http.shape(f"a JSON {type(data).__name__} where an object belongs")
        yield data


def sse_data(lines: Iterator[bytes], http: HttpSettings | None = None
             ) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a server-sent-events stream (`data: {...}` lines). A body that
    is one JSON document instead (a server that does not stream) is that one payload."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith(("{", "[")):
            whole = raw + b"".join(lines)  # bounded by post_lines' answer cap
            try:
                data = json.loads(whole)
            except ValueError:
                if http is None:
                    return
                raise http.shape("a body that is neither events nor JSON") from None
            if not isinstance(data, dict):
                if http is None:
                    return
                raise http.shape(f"a JSON {type(data).__name__} where an object belongs")
            yield data
            return
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError:
            continue  # keep-alive comments and partial lines some proxies send
        if not isinstance(data, dict):
            if http is None:
                continue
            raise http.shape(f"an event of JSON {type(data).__name__} where an object belongs")
        yield data


def obj(http: HttpSettings, value: Any, what: str) -> dict[str, Any]:
    """`value` when it is a JSON object (or absent: {}), else a shape error naming `what`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise http.shape(f"{what} as a JSON {type(value).__name__}")
    return value


def arr(http: HttpSettings, value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise http.shape(f"{what} as a JSON {type(value).__name__}")
    return value


def text(http: HttpSettings, value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise http.shape(f"{what} as a JSON {type(value).__name__}")
    return value


def tool_call(call_id: str, name: str, raw: Any) -> ToolCall:
    """A tool call whose arguments are `raw` (JSON text, or a value already decoded):
    arguments that are not JSON, or not an object, are kept as `error` for the agent to
    answer the model with, not a failure of the whole answer."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw.strip() or "{}")
        except ValueError:
            return ToolCall(call_id, name, {}, f"arguments that are not JSON: {raw[:80]!r}")
    if value is None:
        return ToolCall(call_id, name, {})
    if not isinstance(value, dict):
        return ToolCall(call_id, name, {}, f"arguments that are a JSON {type(value).__name__}, "
                                           "not an object")
    return ToolCall(call_id, name, value)


def plain_messages(system: str, user: str) -> list[Message]:
    return [Message("system", system), Message("user", user)]


def only_text(pieces: Iterator[str | ToolCall]) -> Iterator[str]:
    for piece in pieces:
        if isinstance(piece, str):
            yield piece


def from_config(cfg: Config) -> Provider:
    name = cfg.get("llm.provider")
    model = cfg.get("llm.model")
    if not model:
        raise ConfigError("no LLM model configured",
                          "set one, e.g. `loom config set llm.model llama3.2`")
    reg = REGISTRY[name]
    endpoint = (cfg.url("llm.endpoint") or reg.default_endpoint).rstrip("/")
    key_env = cfg.get("llm.api_key_env") or reg.key_env
    settings = HttpSettings(name, endpoint, model, os.environ.get(key_env) if key_env else None,
                            key_env, float(cfg.get("llm.timeout_s")),
                            context_tokens=_config_int(cfg, "llm.context_tokens"),
                            max_answer_s=float(cfg.get("llm.answer_timeout_s")))
    if name == "anthropic" and not settings.api_key:
        raise ConfigError(f"no API key for Anthropic: ${key_env} is not set",
                          f"export {key_env}=… (the key is never written to disk)")
    # Said before any network call: a key that is needed and missing. A local
    # OpenAI-compatible server configured without api_key_env needs none.
    hosted = endpoint == reg.default_endpoint.rstrip("/")
    if key_env and not settings.api_key and (cfg.get("llm.api_key_env") or
                                             (hosted and name != "ollama")):
        raise ConfigError(f"no key in {key_env}",
                          "set it (export " + key_env + "=…), or change [llm] api_key_env")
    import importlib

    module = importlib.import_module(f"loomcli.providers.{reg.module}")
    provider: Provider = getattr(module, reg.cls)(settings)
    return provider


def _config_int(cfg: Config, key: str) -> int | None:
    value = cfg.get(key)
    return int(value) if value else None

