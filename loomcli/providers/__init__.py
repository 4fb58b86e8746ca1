"""LLM providers behind one small protocol: `stream(system, user)` yields text pieces.

HTTP is the standard library's (no SDKs); every failure becomes one ProviderError that
names the endpoint and says what to do next. The API key is read from the environment
variable that `[llm] api_key_env` names, and is never written anywhere.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from loomcli.config import Config
from loomcli.errors import ConfigError, ProviderError

DEFAULT_ENDPOINTS = {
    "ollama": "http://127.0.0.1:11434",
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
CONNECT_HINT = {
    "ollama": "start it with `ollama serve`, or set [{table}] endpoint in config.toml",
    "openai": "start the server, or set [{table}] endpoint in config.toml",
    "anthropic": "check the network, or set [{table}] endpoint in config.toml",
}


class Provider(Protocol):
    name: str
    endpoint: str
    model: str

    def stream(self, system: str, user: str) -> Iterator[str]: ...


@dataclass
class HttpSettings:
    name: str
    endpoint: str
    model: str
    api_key: str | None
    api_key_env: str | None
    timeout_s: float
    table: str = "llm"  # the config table these settings come from, for hints

    def post_lines(self, url: str, body: dict[str, Any], headers: dict[str, str]
                   ) -> Iterator[bytes]:
        """POST JSON and yield the response line by line; errors become ProviderError."""
        req = urllib.request.Request(
            url, data=json.dumps(body).encode("utf-8"), method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json",
                     "User-Agent": "loom", **headers})
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc.code, _error_message(exc)) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timeout() from None
            reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
            raise ProviderError(f"cannot reach {self.name} at {self.endpoint}: {reason}",
                                CONNECT_HINT[self.name].format(table=self.table)) from None
        except TimeoutError:
            raise self._timeout() from None
        with resp:
            try:
                yield from resp
            except TimeoutError:
                raise self._timeout() from None
            except OSError as exc:
                raise ProviderError(f"{self.endpoint} closed the connection mid-answer "
                                    f"({exc})", "try again") from None

    def _timeout(self) -> ProviderError:
        return ProviderError(f"no answer from {self.endpoint} within {self.timeout_s:g}s",
                             f"is the model still loading? raise [{self.table}] timeout_s")

    def _http_error(self, status: int, message: str) -> ProviderError:
        detail = f": {message}" if message else ""
        if status in (401, 403):
            env = self.api_key_env or f"the variable named by [{self.table}] api_key_env"
            return ProviderError(f"{self.endpoint} refused the API key (HTTP {status}){detail}",
                                 f"set a valid key in ${env}")
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


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4000).decode("utf-8", "replace")
    except OSError:
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return raw.strip()[:200]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err)[:200]


def sse_data(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a server-sent-events stream (`data: {...}` lines)."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            yield json.loads(payload)
        except ValueError:
            continue


def from_config(cfg: Config) -> Provider:
    name = cfg.get("llm.provider")
    model = cfg.get("llm.model")
    if not model:
        raise ConfigError("no LLM model configured",
                          "set one, e.g. `loom config set llm.model llama3.2`")
    endpoint = (cfg.get("llm.endpoint") or DEFAULT_ENDPOINTS[name]).rstrip("/")
    key_env = cfg.get("llm.api_key_env") or DEFAULT_KEY_ENV.get(name)
    settings = HttpSettings(name, endpoint, model, os.environ.get(key_env) if key_env else None,
                            key_env, float(cfg.get("llm.timeout_s")))
    if name == "anthropic" and not settings.api_key:
        raise ConfigError(f"no API key for Anthropic: ${key_env} is not set",
                          f"export {key_env}=… (the key is never written to disk)")
    # Said before any network call: a key that is needed and missing. A local
    # OpenAI-compatible server configured without api_key_env needs none.
    hosted = endpoint == DEFAULT_ENDPOINTS[name].rstrip("/")
    if key_env and not settings.api_key and (cfg.get("llm.api_key_env") or
                                             (hosted and name != "ollama")):
        raise ConfigError(f"no key in {key_env}",
                          "set it (export " + key_env + "=…), or change [llm] api_key_env")
    if name == "ollama":
        from loomcli.providers.ollama import Ollama

        return Ollama(settings)
    if name == "openai":
        from loomcli.providers.openai import OpenAICompatible

        return OpenAICompatible(settings)
    from loomcli.providers.anthropic import Anthropic

    return Anthropic(settings)
