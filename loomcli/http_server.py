"""`loom serve`: loom's operations as JSON over HTTP, and MCP at /mcp, on Starlette + uvicorn.

Threat model (README, "For apps"): the server reads the user's notes and can drive their
LLM, so anything that can reach the port must be trusted or hold the token. Browsers are
the hard case — any web page can make the user's browser send requests to 127.0.0.1 — so
`Guard` refuses, before any route runs: a `Host` that is not a loopback name or address
(DNS rebinding), an `Origin` that is not loopback (a foreign page), and a POST body that is
not `application/json` (a form post needs no CORS preflight). `[http] allowed_hosts` and
`allowed_origins` widen that on purpose. With a token, every request needs it too.

The transport is uvicorn's (h11): bodies are read with a cap that refuses a declared
oversize, negative or malformed length up front and counts chunked bodies as they come;
idle connections are closed; client work runs in a bounded thread pool, so a slow request
cannot stall the event loop; SIGINT/SIGTERM let requests in flight finish. Every error,
malformed HTTP included, is `{"error": "..."}`, without absolute server paths (the log on
stderr keeps them).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import ipaddress
import json
import os
import re
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loomcli import __version__, declare, webpage
from loomcli.config import Config
from loomcli.errors import (
    BusyError,
    ConfigError,
    IgnorePatternError,
    IndexMissingError,
    IndexStateError,
    LoomError,
    ProviderError,
    QueryError,
    RootError,
    StoreDownError,
)
from loomcli.limits import EXCERPT_CHARS, GREP_CASE
from loomcli.operations import Corpus, terms

MAX_BODY = 1 << 20
MAX_JSON_DEPTH = 32
WORKERS = 8  # client work in threads at once; more requests wait their turn
# Answers from an LLM run in threads of their own, at most this many at once in each
# server process; one more is answered 503 with Retry-After. Eight asks to a slow model
# once held all eight workers and a search waited 18 s behind them.
ASKS_AT_ONCE = 4
ASK_RETRY_AFTER_S = 5
IDLE_TIMEOUT_S = 5  # a connection with no request in flight is closed after this
GRACEFUL_SHUTDOWN_S = 30
# Lingering close (RFC 9112 §9.6): a connection closed while the client may still be
# sending (a body refused unread) is shut for writing, and what still comes is read and
# dropped until the client closes, for at most this long and this much. Closing with
# unread data makes the kernel send a reset, which can reach the client before it reads
# the answer: a 1.1 MB upload saw ECONNRESET instead of its 413.
LINGER_S = 5.0
LINGER_BYTES = 64 << 20
SCAN_PROGRESS_EVERY_S = 0.1  # a streamed scan's progress lines, at most this often
# Server processes by default: one per core, at most this many. Measured on 2 cores with
# 50 clients: one process used 1.1 cores (its interpreter lock), two use both.
PROCESSES_MAX = 4
STATUS = [(QueryError, 400), (IndexMissingError, 404), (BusyError, 409),
          (IgnorePatternError, 422), (RootError, 422), (ProviderError, 502),
          (ConfigError, 500), (IndexStateError, 500), (StoreDownError, 503)]
TEAM_TOKENS_ENV = "LOOM_HTTP_TOKENS"  # JSON {token: corpus of --corpus-root}
# A path starts at a slash (or a drive) that no word, dot, colon or slash precedes: a URL's
# `//host/path` and the segments after it are left whole ("at http://h:9/v1/chat").
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])(?:/|[A-Za-z]:\\)[^\s'\"]*[/\\]([^\s'\"/\\]+)")


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scrub(message: str) -> str:
    """No absolute server paths to clients: `/home/u/.loom/index.db` becomes `index.db`."""
    return _ABSOLUTE_PATH.sub(r"\1", message)


def _split_host(value: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit("//" + value)
        return (parts.hostname or ""), parts.port
    except ValueError:
        return "", None


class Team:
    """A token of LOOM_HTTP_TOKENS: the one corpus it reaches, and `owner`, which keeps
    its conversations apart from those of any other token of the same corpus (a digest:
    the token itself is never written to disk)."""

    __slots__ = ("corpus", "owner")

    def __init__(self, corpus: str, token: str) -> None:
        import hashlib

        self.corpus = corpus
        self.owner = hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


# The team of the request being served (None: the server's own token, or no token). Set by
# Guard around each request; the tasks and threads a request starts (its work, its MCP
# session) inherit it, so every corpus a request opens is the one its token reaches.
_TEAM: contextvars.ContextVar[Team | None] = contextvars.ContextVar("loom_team", default=None)


def team_tokens(value: str | None, corpus_root: Path | None) -> dict[str, Team]:
    """$LOOM_HTTP_TOKENS, checked at start: a JSON object of token → the name of a corpus
    of --corpus-root that exists; without --corpus-root, token → "": the server's one
    corpus (each token with conversations of its own: a team sharing one index, kept on
    PostgreSQL by several servers)."""
    if not value:
        return {}
    from loomcli.operations import CORPUS_NAME

    hint = f'set it like {TEAM_TOKENS_ENV}=\'{{"TOKEN": "CORPUS"}}\' (a corpus of --corpus-root)'
    try:
        data = json.loads(value)
    except ValueError:
        raise ConfigError(f"${TEAM_TOKENS_ENV} is not valid JSON", hint) from None
    if not isinstance(data, dict) or not data or not all(
            isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in data.items()):
        raise ConfigError(f"${TEAM_TOKENS_ENV} must be a JSON object of token → corpus name",
                          hint)
    if not all(33 <= ord(c) < 127 for token in data for c in token):
        raise ConfigError(f"a token of ${TEAM_TOKENS_ENV} holds a space or a character an "
                          "Authorization header cannot carry",
                          "use letters, digits and -._~+/ (e.g. `openssl rand -hex 32`)")
    if corpus_root is None:
        if any(data.values()):
            raise ConfigError(f"${TEAM_TOKENS_ENV} names corpora, and this server has one",
                              "start with --corpus-root DIR (one DIR/<name>/notes per "
                              'corpus), or give each token "" (this server\'s corpus)')
        return {token: Team("", token) for token in data}
    for name in sorted(set(data.values())):
        if not CORPUS_NAME.fullmatch(name):
            raise ConfigError(f"${TEAM_TOKENS_ENV} names an invalid corpus {name[:64]!r}",
                              "names are 1-64 letters, digits, '_' or '-'")
        if not (corpus_root / name / "notes").is_dir():
            raise RootError(f"${TEAM_TOKENS_ENV} names corpus {name!r}, which has no "
                            f"folder {corpus_root / name / 'notes'}", "create it, or drop "
                            "that token")
    return {token: Team(name, token) for token, name in data.items()}


class Settings:
    """Who may talk to the server: read once, at start. `teams`: the tokens of
    LOOM_HTTP_TOKENS, each limited to its corpus."""

    def __init__(self, config: Config, host: str, port: int,
                 teams: dict[str, Team] | None = None) -> None:
        self.token = os.environ.get(config.get("http.token_env")) or None
        self.teams = teams or {}
        self.bound_host, self.port = host, port
        self.allowed_hosts = {h.lower() for h in config.get("http.allowed_hosts")}
        self.allowed_origins = {o.rstrip("/").lower() for o in config.get("http.allowed_origins")}

    def host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        value = value.lower()
        if value in self.allowed_hosts:  # "name" or "name:port", as listed
            return True
        name, port = _split_host(value)
        if port not in (None, self.port):
            return False
        return is_loopback(name) or name == self.bound_host.strip("[]").lower() \
            or name in self.allowed_hosts

    def origin_ok(self, value: str | None) -> bool:
        if value is None:
            return True  # curl, scripts, same-origin navigation
        value = value.rstrip("/").lower()
        if value in self.allowed_origins:
            return True
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")

    def caller(self, header: str | None) -> tuple[bool, Team | None]:
        """Whether the Authorization header may pass, and the team its token is (None:
        the server's own token, which reaches every corpus, or no token needed). Every
        token is compared, in constant time, whichever matches."""
        if not self.token and not self.teams:
            return True, None
        given = (header or "").encode()
        allowed = bool(self.token) and hmac.compare_digest(
            given, f"Bearer {self.token}".encode())
        team = None
        for token, member in self.teams.items():
            if hmac.compare_digest(given, f"Bearer {token}".encode()):
                team = member
        return allowed or team is not None, None if allowed else team


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


async def _send_json(send: Callable[..., Awaitable[None]], status: int, payload: Any,
                     headers: dict[str, str] | None = None) -> None:
    body = _json_bytes(payload)
    raw = [(b"content-type", b"application/json; charset=utf-8"),
           (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: every check a request must pass before any route sees it."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        try:
            team = self.check(scope, headers)
        except HttpError as exc:
            if exc.status != 413:
                await _drain(receive)  # keep the connection usable for the next request
            await _send_json(send, exc.status, {"error": str(exc)}, exc.headers)
            return
        reset = _TEAM.set(team)
        try:
            await self.app(scope, receive, _json_errors(send))
        finally:
            _TEAM.reset(reset)

    def check(self, scope: dict[str, Any], headers: Any) -> Team | None:
        """Refuse what must not pass; returns the caller's team (LOOM_HTTP_TOKENS)."""
        s = self.settings
        if not s.host_ok(headers.get("host")):
            raise HttpError(403, "this Host is not served here (loopback names only, or "
                                 "[http] allowed_hosts)")
        if len(headers.getlist("origin")) > 1 or not s.origin_ok(headers.get("origin")):
            raise HttpError(403, "requests from web pages of other origins are refused "
                                 "(list trusted ones in [http] allowed_origins)")
        allowed, team = s.caller(headers.get("authorization"))
        if not allowed and not webpage.is_public(
                scope["method"], scope["path"], headers.get("accept")):
            raise HttpError(401, "missing or wrong bearer token",
                            {"WWW-Authenticate": 'Bearer realm="loom"'})
        lengths = headers.getlist("content-length")
        if lengths:
            if len(set(lengths)) > 1 or not lengths[0].isdigit():
                raise HttpError(400, "invalid Content-Length")
            if int(lengths[0]) > MAX_BODY:
                raise HttpError(413, f"body over {MAX_BODY} bytes",
                                {"Connection": "close"})
        if scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                raise HttpError(415, "POST bodies must be application/json")
        return team


def _json_errors(send: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """`send`, with every error answered as JSON: a part of the stack that answers an
    error in plain text (the MCP SDK's 413 "Request body too large", Starlette's
    defaults) is rewritten to `{"error": its text}`, its other headers kept. A 413 also
    closes the connection: the rest of the body is left unread."""
    held: dict[str, Any] = {}

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            kind = dict(message.get("headers") or []).get(b"content-type", b"")
            if not kind.split(b";")[0].strip().lower().endswith(b"json"):
                held.update(start=message, body=b"")
                return
        elif message["type"] == "http.response.body" and "start" in held:
            held["body"] = (held["body"] + message.get("body", b""))[:4096]
            if message.get("more_body"):
                return
            status = held["start"]["status"]
            text = (f"body over {MAX_BODY} bytes" if status == 413 else
                    held["body"].decode("utf-8", "replace").strip() or f"HTTP {status}")
            kept = {k.decode("latin-1"): v.decode("latin-1")
                    for k, v in held.pop("start").get("headers") or []
                    if k.lower() not in (b"content-type", b"content-length")}
            if status == 413:
                kept["connection"] = "close"
            await _send_json(send, status, {"error": scrub(text)}, kept)
            return
        await send(message)

    return sending


async def _drain(receive: Any, limit: int = MAX_BODY) -> None:
    """Read and drop a small request body so the connection can serve the next request."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body"):
            return


async def read_json(request: Any) -> dict[str, Any]:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise HttpError(413, f"body over {MAX_BODY} bytes", {"Connection": "close"})
    if not body:
        return {}
    try:
        data = json.loads(bytes(body).decode("utf-8"))
    except RecursionError:
        raise HttpError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels"
                        ) from None
    except ValueError as exc:
        raise HttpError(400, f"the body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    _check_value(data, "body", 0)
    return data


async def read_body(request: Any, op: declare.Operation) -> dict[str, Any]:
    """A POST body as `op`'s arguments, checked against its declaration (names the route
    does not take, types, bounds, choices: 400 naming the field; null is the default)."""
    data = await read_json(request)
    for p in op.on(declare.HTTP):
        if p.required and data.get(p.name) in (None, ""):
            raise HttpError(400, f"missing \"{p.name}\"")
    return declare.check(op, data, declare.HTTP)


def _check_value(value: Any, where: str, depth: int) -> None:
    """Bounded nesting, and text that is valid Unicode (no lone surrogates)."""
    if depth > MAX_JSON_DEPTH:
        raise HttpError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise HttpError(400, f"{where} is not valid Unicode (a lone surrogate)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_value(k, where, depth + 1)
            _check_value(v, k if depth == 0 else where, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_value(v, where, depth + 1)


def _throttled(progress: Callable[[int, int, str], None]) -> Callable[[int, int, str], None]:
    """A scan's progress at most every SCAN_PROGRESS_EVERY_S, and its last step: a client
    watching a scan of 100,000 files gets a few lines a second, not 100,000."""
    import time

    last = [float("-inf")]

    def report(done: int, total: int, path: str) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= SCAN_PROGRESS_EVERY_S:
            last[0] = now
            progress(done, total, path)
    return report


def _status_of(exc: LoomError) -> int:
    return next((code for kind, code in STATUS if isinstance(exc, kind)), 400)


class Api:
    """The JSON endpoints: each parses its body, calls one operation, returns its JSON."""

    def __init__(self, load_config: Callable[[], Config], corpus_root: Path | None) -> None:
        import anyio

        self.load_config = load_config  # read per request: `loom config set` applies at once
        self.corpus_root = corpus_root
        self.limiter = anyio.CapacityLimiter(WORKERS)
        self.asks = anyio.CapacityLimiter(ASKS_AT_ONCE)  # their threads, not the readers'
        self.asking = 0  # asks admitted and not finished (counted on the event loop only)

    def corpus(self, name: Any) -> Corpus:
        team = _TEAM.get()
        if team is not None:  # a token of LOOM_HTTP_TOKENS: its corpus and nothing else
            if name not in (None, "", team.corpus):
                raise HttpError(403, "this token reaches one corpus; drop \"corpus\"")
            if self.corpus_root is None:  # the server's one corpus, for this token
                return Corpus(self.load_config(), keep_open=True, owner=team.owner)
            return Corpus.named(self.corpus_root, team.corpus, self.load_config(),
                                keep_open=True, owner=team.owner)
        if self.corpus_root is None:
            if name not in (None, ""):
                raise HttpError(400, "this server has one corpus; drop \"corpus\" "
                                     "(or start it with --corpus-root)")
            return Corpus(self.load_config(), keep_open=True)
        if name in (None, ""):
            raise HttpError(400, "\"corpus\" is required (this server serves several)")
        return Corpus.named(self.corpus_root, name, self.load_config(), keep_open=True)

    async def run(self, fn: Callable[[], Any]) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(fn, limiter=self.limiter)

    @staticmethod
    def required(data: dict[str, Any], key: str) -> Any:
        if data.get(key) in (None, ""):
            raise HttpError(400, f"missing \"{key}\"")
        return data[key]

    def routes(self) -> list[Any]:
        from starlette.routing import Route

        def post(op: declare.Operation, operation: Callable[[dict[str, Any]], Any],
                 timed: bool = True) -> Callable[..., Any]:
            async def endpoint(request: Any) -> Any:
                data = await read_body(request, op)
                return await self.respond(lambda: operation(data).to_dict(), timed=timed)
            return endpoint

        async def healthz(request: Any) -> Any:
            from starlette.responses import JSONResponse

            return JSONResponse({"ok": True, "version": __version__})

        async def files(request: Any) -> Any:
            name = request.query_params.get("corpus")
            return await self.respond(lambda: self.corpus(name).files().to_dict())

        return [
            Route("/healthz", healthz, methods=["GET"]),
            Route("/files", files, methods=["GET"]),
            Route("/search", post(declare.SEARCH, lambda b: self.corpus(b.get("corpus")).search(
                self.required(b, "query"), b.get("limit"),
                b.get("excerpt_chars", EXCERPT_CHARS), b.get("mode"),
                b.get("prefix", False), path=b.get("path"),
                globs=b.get("glob"), tags=b.get("tag"))), methods=["POST"]),
            Route("/grep", post(declare.GREP, lambda b: _Spanned(self.corpus(
                b.get("corpus")).grep(
                self.required(b, "pattern"), path=b.get("path"), globs=b.get("glob"),
                context=b.get("context"), case=b.get("case", GREP_CASE),
                limit=b.get("limit"), types=b.get("type"), every=b.get("spans", False)))),
                  methods=["POST"]),
            Route("/file", post(declare.GET, lambda b: self.corpus(b.get("corpus")).get(
                self.required(b, "path"), b.get("offset", 0), b.get("length"))),
                methods=["POST"]),
            Route("/links", post(declare.LINKS, lambda b: self.corpus(b.get("corpus")).links(
                self.required(b, "path"))), methods=["POST"]),
            Route("/pages", post(declare.PAGES, lambda b: self.corpus(b.get("corpus")).pages(
                self.required(b, "path"))), methods=["POST"]),
            Route("/scan", self.scan, methods=["POST"]),
            Route("/ask", self.ask, methods=["POST"]),
            # The words of a query as loom matches them, for the page's highlighting.
            Route("/terms", post(declare.TERMS, lambda b: terms(b.get("text", ""))),
                  methods=["POST"]),
        ]

    async def status(self, request: Any) -> Any:
        """GET /status: `loom status --json` and the failed files with their reasons (the
        web page's status view; a browser navigating there gets the page: webpage.py)."""
        name = request.query_params.get("corpus")

        def work() -> dict[str, Any]:
            corpus = self.corpus(name)
            return {**corpus.status().to_dict(), "failures": corpus.failures()}
        return await self.respond(work)

    async def respond(self, work: Callable[[], dict[str, Any]], *, timed: bool = True,
                      limiter: Any = None) -> Any:
        """Run the work in the pool (or `limiter`'s); a read that overruns `[http]
        request_timeout_s` is answered 503 and abandoned (its thread finishes on its own),
        so no request holds a client for long. Scans and answers from the LLM are not
        timed."""
        import anyio
        from starlette.responses import Response

        budget = self.load_config().get("http.request_timeout_s") if timed else None
        try:
            with anyio.fail_after(budget):
                payload = await anyio.to_thread.run_sync(
                    work, limiter=limiter or self.limiter, abandon_on_cancel=True)
        except TimeoutError:
            raise HttpError(503, f"the request took longer than {budget:g} s and was "
                                 "stopped — narrow it (a path, a glob, a longer literal)",
                            {"Retry-After": "1"}) from None
        return Response(_json_bytes(payload), media_type="application/json; charset=utf-8")

    async def scan(self, request: Any) -> Any:
        data = await read_body(request, declare.SCAN)
        stream = data.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, f"stream must be true or false, got {stream!r:.40}")
        corpus = self.corpus(data.get("corpus"))
        force = data.get("force", False)
        if not stream:
            return await self.respond(lambda: corpus.scan(force=force).to_dict(), timed=False)
        await self.run(corpus.roots_for)  # a missing folder fails here, with its status
        return self.stream(lambda emit: corpus.scan(force=force, progress=_throttled(
            lambda done, total, path: emit({"progress": {"done": done, "total": total,
                                                         "path": path}}))).to_dict(),
            "scan")

    def stream(self, work: Callable[[Callable[[dict[str, Any]], None]], dict[str, Any]],
               what: str, limiter: Any = None) -> Any:
        """NDJSON: the events `work` emits as it goes, then {"done": true, **its result},
        or {"error": message} when it fails mid-way. A client that leaves early does not
        stop the work: a scan completes and is recorded, an answer is kept in its
        conversation; the log says so in one line."""
        import anyio
        from starlette.responses import StreamingResponse

        send, receive = anyio.create_memory_object_stream[dict[str, Any]](64)
        left: list[bool] = []  # the client went away: events are dropped from then on
        said: list[bool] = []  # the work's end is in the log already

        def run() -> None:
            def emit(event: dict[str, Any]) -> None:
                if left:
                    return
                try:
                    anyio.from_thread.run(send.send, event)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    left.append(True)

            try:
                emit({"done": True, **work(emit)})
            except LoomError as exc:
                said.append(True)
                sys.stderr.write(f"loom serve: {what}: {exc}\n")
                emit({"error": scrub(str(exc))})
            except Exception as exc:  # a bug: the stream still ends with its error line
                said.append(True)
                sys.stderr.write(f"loom serve: {what}: internal error: {exc!r}\n")
                emit({"error": "internal error — see the server's log"})
            finally:
                anyio.from_thread.run(send.aclose)

        async def lines() -> AsyncIterator[bytes]:
            delivered = False  # the last line was sent: resumed after yielding it
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: anyio.to_thread.run_sync(
                        run, limiter=limiter or self.limiter))
                    async with receive:
                        async for event in receive:
                            yield _json_bytes(event) + b"\n"
                            delivered = "done" in event or "error" in event
            finally:  # after the work ended: the task group waits for its thread
                if not delivered and not said:
                    sys.stderr.write(f"loom serve: {what}: the client left before the "
                                     "end; finished without it\n")

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def ask(self, request: Any) -> Any:
        data = await read_body(request, declare.ASK)
        stream = data.get("stream", False)
        if not isinstance(stream, bool):
            raise HttpError(400, f"stream must be true or false, got {stream!r:.40}")
        corpus = self.corpus(data.get("corpus"))
        question, top_k = self.required(data, "question"), data.get("top_k")
        mode, agent, cid = data.get("mode"), data.get("agent"), data.get("conversation_id")
        if self.asking >= ASKS_AT_ONCE:
            raise HttpError(503, f"{ASKS_AT_ONCE} answers are being written already — ask "
                                 "again in a few seconds",
                            {"Retry-After": str(ASK_RETRY_AFTER_S)})
        self.asking += 1
        released: list[bool] = []

        def release() -> None:
            if not released:
                released.append(True)
                self.asking -= 1

        try:
            if not stream:
                return await self.respond(lambda: corpus.ask(
                    question, top_k, mode=mode, agent=agent, conversation_id=cid).to_dict(),
                    timed=False, limiter=self.asks)
            response = await self.ask_stream(corpus, question, top_k, mode, agent, cid)
        except BaseException:
            release()
            raise
        finally:
            if not stream:
                release()
        return _Then(response, release)

    async def ask_stream(self, corpus: Corpus, question: Any, top_k: Any, mode: Any,
                         agent: Any = None, cid: Any = None) -> Any:
        """NDJSON: {"text": piece} lines as the LLM writes, then {"done": true, answer,
        citations, used, sources, quotes, context, timings, conversation_id, steps}, or
        {"error": message} when the LLM fails mid-way. An agent ask also sends {"step":
        {tool, arguments, result_chars, ms}} as each tool runs."""
        from loomcli import providers

        # Everything that can fail before the first piece fails here, with its status.
        provider = await self.run(lambda: providers.from_config(corpus.config))
        cid = await self.run(lambda: corpus.check_ask(question, top_k, mode, agent, cid))

        def work(emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
            return corpus.ask(question, top_k, mode=mode, agent=agent, conversation_id=cid,
                              provider=provider, on_text=lambda text: emit({"text": text}),
                              on_step=lambda done: emit({"step": done.to_dict()})).to_dict()

        return self.stream(work, "ask", self.asks)


class _Spanned:
    """A grep result whose matches also say where each match lies (`"spans": true`, for
    the web page, which must not run a pattern itself): `marks`, [from, to) characters
    of `text`, and `spans`, [byte offset, byte length] in the file's text."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        if any(m.parts for m in self.result.matches):
            for shown, m in zip(out["matches"], self.result.matches, strict=True):
                shown["marks"] = [list(mark) for mark in m.marks]
                shown["spans"] = [[at, len(part.encode("utf-8", "surrogatepass"))]
                                  for at, part in m.parts]
        return out


class _TeamOnly:
    """MCP over HTTP beside --corpus-root: for a token of LOOM_HTTP_TOKENS (its corpus)
    only; any other caller gets a 404 that says how to reach a corpus by MCP."""

    def __init__(self, app: Any, message: str) -> None:
        self.app, self.message = app, message

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if _TEAM.get() is None:
            await _drain(receive)
            await _send_json(send, 404, {"error": self.message})
            return
        await self.app(scope, receive, send)


class _Then:
    """An ASGI response that calls `after` once it is sent, or abandoned."""

    def __init__(self, response: Any, after: Callable[[], None]) -> None:
        self.response, self.after = response, after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            self.after()


def build_app(load_config: Callable[[], Config], settings: Settings,
              corpus_root: Path | None) -> Any:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    api = Api(load_config, corpus_root)
    # The API's routes, then the page's: GET on the page's paths (only /status has a GET
    # in the API, which the page's route hands JSON requests to). webpage.py says how.
    routes = api.routes() + webpage.routes({"/status": api.status})
    lifespan = None
    no_mcp_message = ("MCP over HTTP serves one corpus: use a token of LOOM_HTTP_TOKENS, or "
                      "start another `loom serve` for it without --corpus-root")
    if corpus_root is None or settings.teams:
        from mcp.server.transport_security import TransportSecuritySettings

        from loomcli import mcp_server

        def mcp_corpus() -> Corpus:
            if corpus_root is not None and _TEAM.get() is None:  # never any other corpus
                raise LoomError(no_mcp_message)
            return api.corpus(None)

        tools = mcp_server.build_server(mcp_corpus)
        mcp_app = tools.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, max_request_body_size=MAX_BODY,
            # Guard already checks Host, Origin and the token, more strictly.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        routes += (mcp_app.router.routes if corpus_root is None else
                   [Route(r.path, _TeamOnly(r.app, no_mcp_message)) for r in
                    mcp_app.router.routes])
        lifespan = mcp_app.router.lifespan_context
    else:
        async def no_mcp(request: Request) -> JSONResponse:
            return JSONResponse({"error": no_mcp_message}, 404)
        routes.append(Route("/mcp", no_mcp, methods=["GET", "POST", "DELETE"]))

    def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": scrub(message)}, status, headers=headers)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, HttpError):
            return error(exc.status, str(exc), exc.headers)
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return error(404, f"no such endpoint: {request.url.path}")
        if exc.status_code == 405:
            return error(405, f"{request.method} is not allowed on {request.url.path}")
        return error(exc.status_code, str(exc.detail))

    async def on_loom_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, LoomError)
        sys.stderr.write(f"loom serve: {request.url.path}: {exc}\n")
        return error(_status_of(exc), str(exc))

    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        sys.stderr.write(f"loom serve: {request.url.path}: internal error: "
                         f"{type(exc).__name__}: {exc}\n")
        return error(500, f"internal error: {type(exc).__name__} — see the server's log")

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        HttpError: on_http_error, HTTPException: on_http_error, LoomError: on_loom_error,
        Exception: on_bug})
    return Guard(app, settings)


class _LingeringTransport:
    """A connection's transport whose `close()` is a lingering close (see LINGER_S) when
    the client may still be sending: the answer already written goes out, then the write
    side is shut (the client reads the answer and an end of file), and the protocol drops
    whatever arrives until the client closes, LINGER_BYTES have come or LINGER_S pass."""

    def __init__(self, transport: Any, client_may_send: Callable[[], bool]) -> None:
        self._transport = transport
        self._client_may_send = client_may_send
        self.lingering = False
        self._dropped = 0
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        transport = self._transport
        if self.lingering or transport.is_closing():
            return
        if not self._client_may_send() or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        transport.write_eof()  # after what is buffered: the answer is sent whole
        transport.resume_reading()
        self._timer = asyncio.get_running_loop().call_later(LINGER_S, self.abort)

    def dropped(self, size: int) -> None:
        """Bytes the client sent while the connection lingers: read, and let go."""
        self._dropped += size
        if self._dropped > LINGER_BYTES:
            self.abort()

    def abort(self) -> None:
        self.cancel_timer()
        self._transport.close()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _protocol() -> type:
    """uvicorn's h11 protocol, with JSON for malformed HTTP, a deadline for the first
    request of a connection (uvicorn times out only the pause between requests) and a
    lingering close."""
    import h11

    from loomcli.compat import h11_protocol

    H11Protocol: Any = h11_protocol()  # noqa: N806 - a class

    # The client has sent its whole request (or nothing of the next one): a close loses
    # nothing it sent. Otherwise (a body refused unread, malformed HTTP) the close lingers.
    done = (h11.IDLE, h11.DONE, h11.MUST_CLOSE, h11.CLOSED)

    class Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            self.lingering = _LingeringTransport(
                transport, lambda: self.conn.their_state not in done)
            transport = self.lingering
            super().connection_made(transport)
            # No Nagle: uvicorn writes a response's head and body separately, and with
            # Nagle on, the body waited for the client's delayed ACK: 40 ms a request on
            # keep-alive. (asyncio sets this only for sockets made with IPPROTO_TCP.)
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler)

        def data_received(self, data: bytes) -> None:
            if self.lingering.lingering:
                self.lingering.dropped(len(data))
                return
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.lingering.cancel_timer()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            body = _json_bytes({"error": f"malformed HTTP request: {msg.rstrip('.')}"})
            headers = [(b"content-type", b"application/json; charset=utf-8"),
                       (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers),
                          h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return Protocol


def bind(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48, 10048):  # EADDRINUSE on Linux, macOS, Windows
            raise RootError(f"port {port} on {host} is already in use",
                            "choose another with --port (0 picks a free one)") from None
        raise RootError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                        "check --host and --port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def reloading(load_config: Callable[[], Config]) -> Callable[[], Config]:
    """`load_config`, read again only when the file changed (a stat per request instead
    of a read and a parse: measured at 9% of a request's time), so `loom config set`
    still applies to the next request."""
    last: list[tuple[tuple[int, int, int] | None, Config]] = []

    def stamp(path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def load() -> Config:
        if last and stamp(last[0][1].path) == last[0][0]:
            return last[0][1]
        config = load_config()
        last[:] = [(stamp(config.path), config)]
        return config

    return load


def serve(load_config: Callable[[], Config], host: str, port: int,
          corpus_root: Path | None = None, processes: int | None = None, *,
          open_page: bool = False) -> None:
    """Serve until SIGINT/SIGTERM. `processes`: server processes sharing the socket (by
    default one per core, at most PROCESSES_MAX; one where there is no fork).
    `open_page`: open the web page in the default browser once listening."""
    if processes is None:
        processes = min(os.cpu_count() or 1, PROCESSES_MAX) if hasattr(os, "fork") else 1
    load_config = reloading(load_config)
    config = load_config()  # fails here, at start, when the config is broken
    token_env = config.get("http.token_env")
    teams = team_tokens(os.environ.get(TEAM_TOKENS_ENV), corpus_root)
    if not is_loopback(host) and not os.environ.get(token_env) and not teams:
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone on the network could "
            "read your notes",
            f"set ${token_env} to a secret, or bind 127.0.0.1")
    if corpus_root is not None and not corpus_root.is_dir():
        raise RootError(f"corpus root {corpus_root} is not a folder",
                        "create it, with one <name>/notes/ folder per corpus")
    import uvicorn

    # Linux spreads new connections evenly over sockets sharing a port (SO_REUSEPORT): each
    # process gets its own, else one process took most keep-alive connections (measured:
    # 190 req/s with a shared socket, against 330 on fresh connections).
    spread = processes > 1 and sys.platform.startswith("linux")
    sock = bind(host, port)  # without SO_REUSEPORT: a port in use is refused here
    bound_port = sock.getsockname()[1]
    if spread:
        sock.close()
        sock = bind(host, bound_port, reuse_port=True)
    settings = Settings(config, host, bound_port, teams)
    app = build_app(load_config, settings, corpus_root)
    server = uvicorn.Server(uvicorn.Config(
        app, http=_protocol(), lifespan="on", log_level="warning", access_log=False,
        timeout_keep_alive=IDLE_TIMEOUT_S, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        h11_max_incomplete_event_size=64 * 1024, server_header=False))
    shown = f"[{host}]" if ":" in host else host
    children = _fork_workers(processes)
    if children is None:  # a worker process: serve until told to stop or orphaned
        if spread:
            sock.close()
            sock = bind(host, bound_port, reuse_port=True)
        asyncio.run(_serve_child(server, sock))
        os._exit(0)
    sys.stderr.write(f"loom serve: listening on http://{shown}:{bound_port}"
                     f"{' (token required)' if settings.token or teams else ''}"
                     f"{f' ({processes} processes)' if processes > 1 else ''}\n")
    sys.stderr.flush()
    if open_page:
        webpage.open_in_browser(host, bound_port)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        _stop_workers(children)


def _fork_workers(processes: int) -> list[int] | None:
    """Start processes - 1 more servers on the same listening socket (each its own
    Python, so requests use every core instead of sharing one interpreter lock). Returns
    their pids in the first process, None in a worker."""
    children: list[int] = []
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            return None
        children.append(pid)
    return children


async def _serve_child(server: Any, sock: socket.socket) -> None:
    """A worker serves like the first process, and stops when it is orphaned (the first
    process was killed): it must not keep the port or the index open."""
    parent = os.getppid()

    async def watch_parent() -> None:
        while not server.should_exit:
            await asyncio.sleep(1.0)
            if os.getppid() != parent:
                server.should_exit = True

    task = asyncio.get_running_loop().create_task(watch_parent())
    try:
        await server.serve(sockets=[sock])
    finally:
        task.cancel()


def _stop_workers(children: list[int]) -> None:
    """Ask the workers to finish (requests in flight complete), then reap them."""
    import signal

    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
