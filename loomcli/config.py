"""Load, validate and save config.toml, keeping every word the user wrote.

The file is optional: with none, every key takes its default. Reading uses the standard
library's tomllib (fast, on every command); writing (`loom config set`, `loom init
--force`) edits the file through tomlkit, which keeps comments, order, formatting and
unknown keys — only the key being set changes, so a save can never silently switch a
feature off. A value of the wrong type or shape is an error naming file and key; an
unknown key is a warning naming the closest known one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from loomcli import paths
from loomcli.errors import ConfigError

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

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
    "llm.context_tokens": (int, None),  # None: learned from the server, else a known table
    "llm.max_answer_tokens": (int, None),  # None: sized to the window
    "llm.answer_timeout_s": ((int, float), 600),  # one streamed answer, however it trickles
    "ask.top_k": (int, 5),
    "ask.file_budget_chars": (int, 8000),
    "ask.head_chars": (int, 1200),
    "ask.agent": (bool, False),  # loom ask investigates with tools (--agent) by default
    "ask.max_steps": (int, 6),  # tool calls an agent ask may run
    "ask.keep": (bool, True),  # keep each answered ask in the conversations file
    "embeddings.enabled": (bool, False),
    "embeddings.provider": (str, None),
    "embeddings.model": (str, None),
    "embeddings.endpoint": (str, None),
    "embeddings.api_key_env": (str, None),
    "embeddings.timeout_s": ((int, float), 60),
    "ocr.enabled": (bool, None),  # None: on when Tesseract is installed
    "ocr.languages": (str, None),  # None: every language Tesseract has, e.g. "eng+ita"
    "http.token_env": (str, "LOOM_HTTP_TOKEN"),
    "http.allowed_hosts": (list, []),
    "http.allowed_origins": (list, []),
    "http.request_timeout_s": ((int, float), 60),
    "store.url": (str, None),  # postgresql://host/db: the index in PostgreSQL; None: SQLite
    "store.read_urls": (list, []),  # replicas that serve reads, tried in order
    "store.password_env": (str, None),  # the NAME of an env var holding the password
    "store.light_reads": (bool, True),  # a one-shot read without psycopg (store/pgwire.py)
}
PROVIDERS = ("ollama", "openai", "anthropic")
URL_KEYS = frozenset({"llm.endpoint", "embeddings.endpoint"})  # http(s) URLs, checked
STORE_URL_KEYS = frozenset({"store.url", "store.read_urls"})  # postgresql:// URLs, checked
STORE_URL_ENV = "LOOM_DATABASE_URL"  # the store's URL, over [store] url
STORE_SCHEMES = ("postgresql", "postgres")
# Booleans as git takes them (`git config --type=bool`): for `config set` and the file.
BOOLEANS = {"true": True, "yes": True, "on": True, "1": True,
            "false": False, "no": False, "off": False, "0": False}
EMBEDDING_PROVIDERS = ("local", "ollama", "openai")
TABLES = frozenset(key.partition(".")[0] for key in SCHEMA if "." in key)
TOP_KEYS = frozenset(key for key in SCHEMA if "." not in key)

STARTER = """\
# loom configuration — every key is optional. See `loom --help` and the README.
notes_dirs = []            # folders `loom scan` indexes when given none, e.g. ["~/notes"]
# db_path = "~/.loom/index.db"
ignore = []                # gitignore patterns applied to every root, e.g. ["drafts/", "*.tmp"]
extensions = ["md", "markdown", "txt", "text", "rst", "org", "adoc"]
# plus, always: pdf, html, htm, docx, odt, pptx, epub

[llm]
provider = "ollama"        # "ollama" | "openai" (any OpenAI-compatible server) | "anthropic"
# model = "llama3.2"       # `ollama pull NAME`, then `loom config set llm.model NAME`
endpoint = "http://127.0.0.1:11434"
# api_key_env = "OPENAI_API_KEY"   # the NAME of an env var; keys are never written to disk

[ask]
top_k = 5
file_budget_chars = 8000
head_chars = 1200

[embeddings]
enabled = false            # true: search and ask also by meaning (needs loom-index[semantic])
# provider = "local"       # "local" (built in, offline) | "ollama" | "openai"

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


class Config:
    """The loaded config: typed accessors over the raw table, which is kept for saving.
    `warnings`: unknown keys, for the edges to show. (A plain class: a dataclass costs
    every cold command, see records.py.)"""

    def __init__(self, path: Path, raw: dict[str, Any] | None = None, exists: bool = False,
                 warnings: list[str] | None = None) -> None:
        self.path = path
        self.raw: dict[str, Any] = raw if raw is not None else {}
        self.exists = exists
        self.warnings: list[str] = warnings if warnings is not None else []

    def get(self, key: str) -> Any:
        value = _lookup(self.raw, key)
        if value is None and key in SCHEMA:
            default = SCHEMA[key][1]
            return list(default) if isinstance(default, list) else default
        if isinstance(value, str) and key in SCHEMA and SCHEMA[key][0] is bool:
            return BOOLEANS.get(value.strip().lower(), value)  # "yes", "off" (checked)
        return value

    def url(self, key: str) -> str | None:
        """An endpoint key's value, checked when it is read: a bad one already in the file
        is one line naming the key, never a failure deep inside a request."""
        value = self.get(key)
        if value is not None:
            check_url(self.path, key, value)
        return value

    @property
    def store_url(self) -> str | None:
        """The PostgreSQL database the index lives in: $LOOM_DATABASE_URL, else `[store]
        url`; None: the embedded SQLite file. Checked when read, like an endpoint. A
        password may come in the variable (it is not written anywhere), never in the file."""
        from_env = os.environ.get(STORE_URL_ENV)
        if from_env:
            check_store_url(Path(f"${STORE_URL_ENV}"), "url", from_env, password_ok=True)
            return from_env
        value = self.get("store.url")
        if value is not None:
            check_store_url(self.path, "store.url", value)
        return value

    @property
    def read_urls(self) -> list[str]:
        """Replicas for reads, in the order they are tried (`[store] read_urls`)."""
        urls: list[str] = self.get("store.read_urls")
        for url in urls:
            check_store_url(self.path, "store.read_urls", url)
        return urls

    @property
    def store_password(self) -> str | None:
        """The password `[store] password_env` names, or None: libpq then looks in
        $PGPASSWORD and ~/.pgpass itself. A named variable that is unset is an error
        here, not a puzzling authentication failure later."""
        name = self.get("store.password_env")
        if name is None:
            return None
        value = os.environ.get(name)
        if not value:
            raise ConfigError(f"[store] password_env names ${name}, which is not set",
                              f"export {name}=..., or `loom config unset store.password_env` "
                              "to use $PGPASSWORD or ~/.pgpass")
        return value

    def origin(self, key: str) -> str:
        """Where a key's value comes from: "file" or "default"."""
        return "file" if _lookup(self.raw, key) is not None else "default"

    def with_value(self, key: str, value: Any) -> Config:
        """A copy with one key changed, not saved (`loom ask --model` for one call)."""
        import copy

        raw = copy.deepcopy(self.raw)
        table, _, name = key.rpartition(".")
        (raw.setdefault(table, {}) if table else raw)[name] = value
        return Config(self.path, raw, self.exists, self.warnings)

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
        from loomcli.extract import DOCUMENTS

        exts = {e.lower().lstrip(".") for e in self.get("extensions")}
        return frozenset(exts | DOCUMENTS.keys())

    def set(self, key: str, value: Any) -> None:
        """Set a dotted key (validated like a loaded one) and save the file, keeping
        every other key, comment and blank line as it was."""
        import tomlkit

        parts = key.split(".")
        if len(parts) > 2 or not all(parts):
            raise ConfigError(f"{key!r} is not a config key",
                              "keys are NAME or TABLE.NAME, e.g. ask.top_k")
        _check(self.path, key, value)
        if key in URL_KEYS:
            check_url(self.path, key, value)
        if key in STORE_URL_KEYS:
            for url in value if isinstance(value, list) else [value]:
                check_store_url(self.path, key, url)
        if len(parts) == 2 and parts[0] in TOP_KEYS:
            raise ConfigError(f"{self.path}: {parts[0]!r} is not a table")
        doc = self._document()
        node: Any = doc
        if len(parts) == 2:
            if parts[0] not in doc:
                doc[parts[0]] = tomlkit.table()
            node = doc[parts[0]]
            if not isinstance(node, dict):
                raise ConfigError(f"{self.path}: {parts[0]!r} is not a table",
                                  f"make it a [{parts[0]}] table, or remove that line")
        node[parts[-1]] = value
        import tomllib

        raw = tomllib.loads(tomlkit.dumps(doc))
        _validate(self.path, raw)  # never write a file the next command would refuse
        self._write(doc)
        self.raw = raw

    def unset(self, key: str) -> Any:
        """Remove a dotted key from the file (every other key and comment kept); returns
        the value it had (None: it was not set, nothing written)."""
        parts = key.split(".")
        doc = self._document()
        node: Any = doc
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or parts[-1] not in node:
            return None
        old = _unwrap(node[parts[-1]])
        del node[parts[-1]]
        import tomllib

        import tomlkit

        raw = tomllib.loads(tomlkit.dumps(doc))
        _validate(self.path, raw)
        self._write(doc)
        self.raw = raw
        return old

    def _document(self) -> Any:
        import tomlkit

        if not self.path.exists():
            return tomlkit.document()
        try:
            return tomlkit.parse(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomlkit.exceptions.ParseError) as exc:
            raise ConfigError(f"cannot read config {self.path}: {exc}",
                              "fix the file, then try again") from exc

    def _write(self, doc: Any) -> None:
        import tomlkit

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(tomlkit.dumps(doc), encoding="utf-8")
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
    ) or (expected is bool and isinstance(value, str)
          and value.strip().lower() in BOOLEANS)
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
    if key == "embeddings.provider" and value not in EMBEDDING_PROVIDERS:
        raise ConfigError(f"{path}: key 'embeddings.provider' must be one of "
                          f"{', '.join(EMBEDDING_PROVIDERS)}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool) and (
            not math.isfinite(value) or value <= 0):
        raise ConfigError(f"{path}: key {key!r} must be a positive number, got {value}")


def check_url(path: Path, key: str, value: Any) -> None:
    """An endpoint must be an http(s) URL with a host (`http://127.0.0.1:11434`)."""
    from urllib.parse import urlsplit

    why = None
    try:
        parts = urlsplit(value) if isinstance(value, str) else None
    except ValueError as exc:  # "Invalid IPv6 URL", a bad port
        parts, why = None, str(exc)
    if parts is not None and why is None:
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            why = str(exc)
    if why is None and parts is not None and parts.scheme.lower() not in ("http", "https"):
        why = "it must start with http:// or https://"
    elif why is None and parts is not None and not parts.hostname:
        why = "it names no host"
    elif why is None and any(c.isspace() for c in str(value)):
        why = "it holds spaces"
    if why is not None or parts is None:
        raise ConfigError(f"{path}: key {key!r} is not an http(s) URL ({why or 'not text'}): "
                          f"{str(value)[:200]!r}",
                          f"set it like `loom config set {key} http://127.0.0.1:11434`, or "
                          f"`loom config unset {key}` for the provider's default")


def check_store_url(path: Path, key: str, value: Any, *, password_ok: bool = False) -> None:
    """A store URL must be a `postgresql://` URL (libpq's form, `sslmode` and other
    parameters passed through as written) and, unless it comes from the environment,
    hold no password: config.toml is not a place for secrets."""
    from urllib.parse import parse_qs, urlsplit

    text = value if isinstance(value, str) else ""
    why = None
    try:
        parts = urlsplit(text)
        password = parts.password
        query = parse_qs(parts.query)
    except ValueError as exc:
        parts, password, query, why = None, None, {}, str(exc)
    if why is None and (parts is None or parts.scheme.lower() not in STORE_SCHEMES):
        why = "it must start with postgresql://"
    elif why is None and any(c.isspace() for c in text):
        why = "it holds spaces"
    if why is not None:
        shown = _without_password(str(value))[:200]
        if str(path).startswith("$"):  # from the environment: no key to set
            name = str(path)[1:]
            raise ConfigError(f"{path} is not a PostgreSQL URL ({why}): {shown!r}",
                              f"export {name}=postgresql://HOST/DB, or unset {name}")
        raise ConfigError(f"{path}: key {key!r} is not a PostgreSQL URL ({why}): {shown!r}",
                          f"set it like `loom config set {key} postgresql://HOST/DB`, or "
                          f"`loom config unset {key}`")
    if not password_ok and (password is not None or "password" in query):
        raise ConfigError(f"{path}: key {key!r} holds a password, which loom never keeps "
                          "in its config",
                          "drop it from the URL and export PGPASSWORD, put it in "
                          "~/.pgpass, or set [store] password_env to the NAME of a variable "
                          "holding it")


def _without_password(url: str) -> str:
    """A URL as it may be shown: its password (if any) replaced by `***`."""
    import re

    url = re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)
    return re.sub(r"(?i)(password=)[^&]*", r"\1***", url)


def _check_shape(path: Path, raw: Mapping[str, Any]) -> list[str]:
    """Tables must be tables; returns a warning for each unknown key."""
    warnings = []
    for top, value in raw.items():
        if top in TABLES:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path}: key {top!r} must be a table ([{top}]), got "
                                  f"{value!r}", f"write it as a [{top}] section with keys")
            for sub in value:
                if f"{top}.{sub}" not in SCHEMA:
                    known = [k.partition(".")[2] for k in SCHEMA if k.startswith(top + ".")]
                    warnings.append(_unknown(path, f"[{top}] {sub}", sub, known))
        elif top not in TOP_KEYS:
            warnings.append(_unknown(path, top, top, sorted(TOP_KEYS | TABLES)))
    return warnings


def _unknown(path: Path, shown: str, name: str, known: list[str]) -> str:
    import difflib  # only when a key is unknown: not on every command's start-up

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" — did you mean {close[0]}?" if close else " — loom does not use it"
    return f"{path.name}: unknown key {shown}{hint}"


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
    import tomllib  # here, not at the top: without a config file no command needs it

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        # Not `loom init --force`: it reads this same file and would fail the same way.
        raise ConfigError(f"{path}: invalid TOML: {exc}",
                          "fix that line, or move the file aside and run `loom init` for a "
                          "fresh one") from exc
    return Config(path=path, raw=raw, exists=True, warnings=_validate(path, raw))


def _validate(path: Path, raw: Mapping[str, Any]) -> list[str]:
    """Raise ConfigError for a wrong type or shape; return the unknown-key warnings."""
    warnings = _check_shape(path, raw)
    for key in SCHEMA:
        value = _lookup(raw, key)
        if value is not None:
            _check(path, key, value)
    return warnings


def check_key(key: str) -> None:
    """Refuse a key loom does not know, naming the closest known one (`config get/set`)."""
    if key in SCHEMA or key in TABLES:  # a table: set says what it must be
        return
    import difflib

    close = difflib.get_close_matches(key, list(SCHEMA), n=1, cutoff=0.6)
    raise ConfigError(f"unknown config key {key!r}",
                      (f"did you mean {close[0]}? " if close else "")
                      + "`loom config list` shows every key")


def coerce(key: str, value: Any) -> Any:
    """A command-line value for `key`: one folder or pattern for a list key is a list of
    one (`loom config set notes_dirs ~/notes`)."""
    if key in SCHEMA and SCHEMA[key][0] is list and isinstance(value, str):
        return [value]
    if key in SCHEMA and SCHEMA[key][0] is bool and not isinstance(value, bool):
        word = str(value).strip().lower()
        if word not in BOOLEANS:
            raise ConfigError(f"key {key!r} must be true or false, got {value!r}",
                              "git's words work too: yes/no, on/off, 1/0")
        return BOOLEANS[word]
    return value


def _unwrap(item: Any) -> Any:
    return item.unwrap() if hasattr(item, "unwrap") else item


def parse_value(text: str) -> Any:
    """A command-line value as TOML (5, true, ["a"]); anything else is a string."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def init(override: str | os.PathLike[str] | None = None, *, force: bool = False
         ) -> tuple[Path, list[str] | None]:
    """Write the starter config; with force, add to an existing one only the keys it
    lacks (whole tables, and keys at their default value: nothing the user set changes
    meaning). Returns the path and the dotted keys added (None: a new file was written)."""
    import tomlkit

    path = paths.config_path(override)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STARTER, encoding="utf-8")
        return path, None
    if not force:
        raise ConfigError(f"config already exists: {path}",
                          "`loom init --force` adds the keys it lacks and keeps yours; "
                          "`loom config set KEY VALUE` changes one")
    cfg = load(override)  # a broken file is reported, not merged into
    doc = cfg._document()
    added: list[str] = []
    for key, item in tomlkit.parse(STARTER).items():
        if key not in doc:
            doc[key] = item
            added += [f"{key}.{sub}" for sub in item] if isinstance(item, dict) else [key]
        elif isinstance(item, dict):
            for sub, value in item.items():
                # Into a table the user has, only keys whose starter value is the
                # default: adding them changes nothing (an Ollama endpoint must not
                # appear under an OpenAI provider).
                if sub not in doc[key] and _unwrap(value) == SCHEMA[f"{key}.{sub}"][1]:
                    doc[key][sub] = value
                    added.append(f"{key}.{sub}")
    if added:
        cfg._write(doc)
    return path, added
