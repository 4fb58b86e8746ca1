"""Load, validate and save config.toml, round-tripping every key the user had.

The file is optional: with none, every key takes its default. Saving writes back the
whole table that was loaded (unknown keys and `[embeddings]` included) with only the
changed keys replaced, so a save can never silently switch a feature off.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomcli import paths
from loomcli.errors import ConfigError

DEFAULT_EXTENSIONS = ("md", "markdown", "txt", "text", "rst", "org", "adoc")

# key -> (type, default). Types are checked on load; a None default means "unset".
SCHEMA: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "notes_dirs": (list, []),
    "db_path": (str, None),
    "ignore": (list, []),
    "extensions": (list, list(DEFAULT_EXTENSIONS)),
    "llm.provider": (str, "ollama"),
    "llm.model": (str, None),
    "llm.endpoint": (str, None),
    "llm.api_key_env": (str, None),
    "llm.timeout_s": ((int, float), 120),
    "ask.top_k": (int, 5),
    "ask.file_budget_chars": (int, 8000),
    "ask.head_chars": (int, 1200),
    "embeddings.enabled": (bool, False),
    "embeddings.provider": (str, None),
    "embeddings.model": (str, None),
    "embeddings.endpoint": (str, None),
    "embeddings.api_key_env": (str, None),
    "http.token_env": (str, "LOOM_HTTP_TOKEN"),
}
PROVIDERS = ("ollama", "openai", "anthropic")

STARTER = """\
# loom configuration — every key is optional. See `loom --help` and the README.
notes_dirs = []            # folders `loom scan` indexes when given none, e.g. ["~/notes"]
# db_path = "~/.loom/index.db"
ignore = []                # gitignore patterns applied to every root, e.g. ["drafts/", "*.tmp"]
extensions = ["md", "markdown", "txt", "text", "rst", "org", "adoc"]   # plus pdf, always

[llm]
provider = "ollama"        # "ollama" | "openai" (any OpenAI-compatible server) | "anthropic"
model = "llama3.2"
endpoint = "http://127.0.0.1:11434"
# api_key_env = "OPENAI_API_KEY"   # the NAME of an env var; keys are never written to disk

[ask]
top_k = 5
file_budget_chars = 8000
head_chars = 1200

[embeddings]
enabled = false

[http]
token_env = "LOOM_HTTP_TOKEN"
"""


def _lookup(table: Mapping[str, Any], dotted: str) -> Any:
    node: Any = table
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


@dataclass
class Config:
    """The loaded config: typed accessors over the raw table, which is kept for saving."""

    path: Path
    raw: dict[str, Any] = field(default_factory=dict)
    exists: bool = False

    def get(self, key: str) -> Any:
        value = _lookup(self.raw, key)
        if value is None and key in SCHEMA:
            default = SCHEMA[key][1]
            return list(default) if isinstance(default, list) else default
        return value

    def _resolve(self, value: str) -> Path:
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else (self.path.parent / p)

    @property
    def notes_dirs(self) -> list[Path]:
        return [self._resolve(d) for d in self.get("notes_dirs")]

    @property
    def db_path(self) -> Path:
        value = self.get("db_path")
        return self._resolve(value) if value else paths.default_db_path()

    @property
    def ignore(self) -> list[str]:
        return list(self.get("ignore"))

    @property
    def extensions(self) -> frozenset[str]:
        exts = {e.lower().lstrip(".") for e in self.get("extensions")}
        exts.add("pdf")
        return frozenset(exts)

    def set(self, key: str, value: Any) -> None:
        """Set a dotted key in the raw table (validated like a loaded one)."""
        _check(self.path, key, value)
        parts = key.split(".")
        node = self.raw
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{self.path}: {part!r} is not a table")
            node = child
        node[parts[-1]] = value

    def save(self) -> None:
        import tomli_w

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(tomli_w.dumps(self.raw), encoding="utf-8")
        os.replace(tmp, self.path)
        self.exists = True


def _type_name(t: type | tuple[type, ...]) -> str:
    names = {list: "a list", str: "a string", int: "an integer", bool: "true or false",
             float: "a number"}
    if isinstance(t, tuple):
        return " or ".join(names[x] for x in t)
    return names[t]


def _check(path: Path, key: str, value: Any) -> None:
    if key not in SCHEMA:
        return
    expected = SCHEMA[key][0]
    # bool is an int in Python; an integer key must not accept true/false.
    ok = isinstance(value, expected) and not (
        isinstance(value, bool) and expected is not bool
    )
    if not ok:
        raise ConfigError(
            f"{path}: key {key!r} must be {_type_name(expected)}, got {value!r}",
            "fix that line or remove it to use the default",
        )
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: key {key!r} must be a list of strings, got {value!r}")
    if key == "llm.provider" and value not in PROVIDERS:
        raise ConfigError(
            f"{path}: key 'llm.provider' must be one of {', '.join(PROVIDERS)}, got {value!r}"
        )
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        raise ConfigError(f"{path}: key {key!r} must be positive, got {value}")


def load(override: str | os.PathLike[str] | None = None) -> Config:
    """Read the config file if there is one; raise ConfigError naming file and key."""
    path = paths.config_path(override)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if override:
            raise ConfigError(f"config file {path} does not exist",
                              "create it with `loom init` or drop --config") from None
        return Config(path=path)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", "fix the file or run `loom init --force`"
                          ) from exc
    for key in SCHEMA:
        value = _lookup(raw, key)
        if value is not None:
            _check(path, key, value)
    return Config(path=path, raw=raw, exists=True)
