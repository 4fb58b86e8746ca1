"""`loom serve`: the library's operations as JSON over HTTP (standard library server).

Binds 127.0.0.1 by default. When the environment variable named by `[http] token_env`
is set, every request needs `Authorization: Bearer <token>`; a non-loopback host without
a token is refused at start. Errors are `{"error": "..."}` with a 4xx/5xx status.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from loomcli import __version__
from loomcli.config import Config
from loomcli.errors import (
    BusyError,
    ConfigError,
    IgnorePatternError,
    IndexMissingError,
    LoomError,
    ProviderError,
    QueryError,
    RootError,
)
from loomcli.operations import EXCERPT_CHARS, Corpus

MAX_BODY = 1 << 20
STATUS = [(QueryError, 400), (IndexMissingError, 404), (BusyError, 409),
          (IgnorePatternError, 422), (RootError, 422), (ProviderError, 502),
          (ConfigError, 500)]


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class App:
    """Routes requests to a corpus; knows nothing of sockets (testable on its own)."""

    def __init__(self, load_config: Callable[[], Config], token: str | None,
                 corpus_root: Path | None) -> None:
        self.load_config = load_config  # read per request: `loom config set` applies at once
        self.token = token
        self.corpus_root = corpus_root

    def corpus(self, name: Any) -> Corpus:
        if self.corpus_root is None:
            if name not in (None, ""):
                raise HttpError(400, "this server has one corpus; drop \"corpus\" "
                                     "(or start it with --corpus-root)")
            return Corpus(self.load_config())
        if name in (None, ""):
            raise HttpError(400, "\"corpus\" is required (this server serves several)")
        return Corpus.named(self.corpus_root, name, self.load_config())

    def authorized(self, header: str | None) -> bool:
        if not self.token:
            return True
        expected = f"Bearer {self.token}".encode()
        return hmac.compare_digest((header or "").encode(), expected)

    def handle(self, method: str, target: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
        url = urlparse(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        routes: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
            ("GET", "/healthz"): lambda _: {"ok": True, "version": __version__},
            ("GET", "/files"): lambda q: self.corpus(q.get("corpus")).files().to_dict(),
            ("POST", "/search"): self._search,
            ("POST", "/grep"): self._grep,
            ("POST", "/file"): self._file,
            ("POST", "/ask"): self._ask,
            ("POST", "/scan"): lambda b: self.corpus(b.get("corpus")).scan(
                force=b.get("force", False)).to_dict(),
        }
        handler = routes.get((method, url.path))
        if handler is None:
            if any(path == url.path for _, path in routes):
                raise HttpError(405, f"{method} is not allowed on {url.path}")
            raise HttpError(404, f"no such endpoint: {url.path}")
        if method == "GET":
            return 200, handler(query)
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise HttpError(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise HttpError(400, "the body must be a JSON object")
        return 200, handler(data)

    @staticmethod
    def _required(data: dict[str, Any], key: str) -> Any:
        if data.get(key) in (None, ""):
            raise HttpError(400, f"missing \"{key}\"")
        return data[key]

    def _search(self, b: dict[str, Any]) -> dict[str, Any]:
        return self.corpus(b.get("corpus")).search(
            self._required(b, "query"), b.get("limit"),
            b.get("excerpt_chars", EXCERPT_CHARS)).to_dict()

    def _grep(self, b: dict[str, Any]) -> dict[str, Any]:
        return self.corpus(b.get("corpus")).grep(
            self._required(b, "pattern"), path=b.get("path"), globs=b.get("glob"),
            context=b.get("context"), case_sensitive=b.get("case_sensitive", False),
            limit=b.get("limit")).to_dict()

    def _file(self, b: dict[str, Any]) -> dict[str, Any]:
        return self.corpus(b.get("corpus")).get(
            self._required(b, "path"), b.get("offset", 0), b.get("length")).to_dict()

    def _ask(self, b: dict[str, Any]) -> dict[str, Any]:
        return self.corpus(b.get("corpus")).ask(
            self._required(b, "question"), b.get("top_k")).to_dict()


def make_handler(app: App) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"loom/{__version__}"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            sys.stderr.write(f"loom serve: {self.address_string()} {fmt % args}\n")

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="loom"')
            self.end_headers()
            self.wfile.write(data)

        def _dispatch(self, method: str) -> None:
            try:
                if not app.authorized(self.headers.get("Authorization")):
                    raise HttpError(401, "missing or wrong bearer token")
                body = None
                if method == "POST":
                    length = int(self.headers.get("Content-Length") or 0)
                    if length > MAX_BODY:
                        raise HttpError(413, f"body over {MAX_BODY} bytes")
                    body = self.rfile.read(length)
                status, payload = app.handle(method, self.path, body)
            except HttpError as exc:
                status, payload = exc.status, {"error": str(exc)}
            except LoomError as exc:
                status = next((code for kind, code in STATUS if isinstance(exc, kind)), 400)
                payload = {"error": str(exc)}
            except (ValueError, TypeError) as exc:
                status, payload = 400, {"error": f"bad request: {exc}"}
            except Exception as exc:  # the server must answer, not die
                status, payload = 500, {"error": f"internal error: {type(exc).__name__}: {exc}"}
            self._reply(status, payload)

        def do_GET(self) -> None:  # noqa: N802
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        def do_PUT(self) -> None:  # noqa: N802
            self._dispatch("PUT")

        def do_DELETE(self) -> None:  # noqa: N802
            self._dispatch("DELETE")

    return Handler


def serve(load_config: Callable[[], Config], host: str, port: int,
          corpus_root: Path | None = None) -> None:
    config = load_config()  # fails here, at start, when the config is broken
    token_env = config.get("http.token_env")
    token = os.environ.get(token_env) or None
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"refusing to serve on {host} without a token: anyone on the network could "
            "read your notes",
            f"set ${token_env} to a secret, or bind 127.0.0.1")
    if corpus_root is not None and not corpus_root.is_dir():
        raise RootError(f"corpus root {corpus_root} is not a folder",
                        "create it, with one <name>/notes/ folder per corpus")
    httpd = ThreadingHTTPServer((host, port), make_handler(App(load_config, token, corpus_root)))
    httpd.daemon_threads = True
    bound_port = httpd.server_address[1]
    sys.stderr.write(f"loom serve: listening on http://{host}:{bound_port}"
                     f"{' (token required)' if token else ''}\n")
    sys.stderr.flush()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
