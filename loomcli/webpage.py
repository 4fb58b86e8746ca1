"""The web page `loom serve` shows at `/`: search, read, grep, ask and status in a browser.

The page is static: `loomcli/web/` (index.html, app.js, app.css, icon.svg) ships in the
package, nothing is built at install and nothing is loaded from elsewhere. Its script
talks to the same JSON API as every other client, so the page can show nothing the API
would not.

Routes (no collision with the API, which stays as it is): a GET whose `Accept` names
`text/html` — what a browser sends when it navigates — to `/`, `/search`, `/grep`,
`/file`, `/ask` or `/status` gets the page, which reads its view from the address (deep
links). `/` is the page for every client. Other GETs of those paths get what they got
before: `GET /status` its JSON, the others 405. `/assets/NAME` are the page's files.

These requests carry no notes, so they are served without the token (the page must load
to ask for it); the Host and Origin rules apply to them as to everything. Every page
response has a strict Content-Security-Policy: scripts and styles only from this server,
none inline, no eval, no framing; Trusted Types on, so the script cannot even assign HTML
strings (document text is always inserted as text).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ASSETS = Path(__file__).parent / "web"
PAGE_PATHS = ("/", "/search", "/grep", "/file", "/ask", "/status")
ASSET_PREFIX = "/assets/"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; "
       "require-trusted-types-for 'script'; trusted-types 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidated (ETag), so an upgrade shows at once
}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}

Endpoint = Callable[[Any], Awaitable[Any]]


def wants_html(accept: str | None) -> bool:
    return "text/html" in (accept or "").lower()


def is_public(method: str, path: str, accept: str | None) -> bool:
    """A request answered with the page's own files only: needs no token."""
    if method not in ("GET", "HEAD"):
        return False
    if path.startswith(ASSET_PREFIX):
        return True
    return path == "/" or (path in PAGE_PATHS and wants_html(accept))


def page_url(host: str, port: int) -> str:
    """Where a browser on this machine finds the page (a wildcard bind: via loopback)."""
    name = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{name}]:{port}/" if ":" in name else f"http://{name}:{port}/"


def open_in_browser(host: str, port: int) -> None:
    """`loom serve --open`: the default browser (webbrowser honours $BROWSER), from a
    thread, since a browser started in the foreground would hold the server back."""
    import threading
    import webbrowser

    url = page_url(host, port)
    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()


class Assets:
    """The page's files, read once: name → (body, media type, ETag)."""

    def __init__(self, folder: Path = ASSETS) -> None:
        self.files: dict[str, tuple[bytes, str, str]] = {}
        for path in sorted(folder.iterdir()):
            kind = TYPES.get(path.suffix)
            if kind and path.is_file():
                body = path.read_bytes()
                tag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                self.files[path.name] = (body, kind, tag)

    def response(self, name: str, request: Any) -> Any:
        from starlette.exceptions import HTTPException
        from starlette.responses import Response

        if name not in self.files:
            raise HTTPException(404)
        body, kind, tag = self.files[name]
        headers = {**HEADERS, "ETag": tag}
        if tag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=kind, headers=headers)


def routes(json_get: dict[str, Endpoint]) -> list[Any]:
    """GET routes for the page's paths and its assets. `json_get`: the API's own GET
    endpoints on those paths, for requests that do not ask for HTML."""
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    assets = Assets()

    def page(path: str) -> Endpoint:
        api = json_get.get(path)

        async def endpoint(request: Any) -> Any:
            if path == "/" or wants_html(request.headers.get("accept")):
                return assets.response("index.html", request)
            if api is None:
                raise HTTPException(405)
            return await api(request)
        return endpoint

    async def asset(request: Any) -> Any:
        return assets.response(request.path_params["name"], request)

    return [Route(path, page(path), methods=["GET"]) for path in PAGE_PATHS] + [
        Route(ASSET_PREFIX + "{name}", asset, methods=["GET"])]
