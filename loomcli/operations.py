"""loom's operations over one corpus — the single layer every edge calls.

The CLI, the MCP server, the HTTP server and watch all go through `Corpus`: it owns the
defaults and limits (named below, nowhere else), checks and coerces arguments once, and
returns typed results that each edge renders or turns into JSON. "No match" is an empty
result here; the CLI turns it into exit 1, MCP and HTTP return it as is.

Arguments may come from a JSON body, so every check is strict: a field of the wrong type
is a QueryError naming the field (`force must be true or false`), never a guess.
Numbers past a maximum are clamped to it (the maxima are documented); below the minimum
they are refused.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from loomcli.config import Config
from loomcli.errors import IndexMissingError, LoomError, QueryError
from loomcli.limits import (  # noqa: F401 - the edges read them from here too
    AGENT_MAX_CALLS,
    ASK_CANDIDATES,
    CONVERSATIONS_LIMIT,
    CONVERSATIONS_LIMIT_MAX,
    EXCERPT_CHARS,
    EXCERPT_CHARS_MAX,
    EXCERPT_CHARS_MIN,
    EXCERPT_HEAD_CHARS,
    FAILURES_SHOWN,
    GLOBS_MAX,
    GREP_CASE,
    GREP_CONTEXT_MAX,
    GREP_LIMIT,
    GREP_LIMIT_MAX,
    HISTORY_SHARE,
    QUERY_CHARS_MAX,
    QUERY_EMBED_CHARS,
    SEARCH_LIMIT,
    SEARCH_LIMIT_MAX,
    SEARCH_MODES,
    TERMS_MAX,
    TOOL_RESULT_CHARS,
    TOP_K_MAX,
)
from loomcli.records import Record
from loomcli.sanitize import has_surrogates

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

    from loomcli.ask import Answer, Prompt
    from loomcli.ask.session import Retrieved, Sending, Session
    from loomcli.ask.window import Budget
    from loomcli.index.indexer import OnChange, Progress, ScanReport
    from loomcli.migrate import Migrated
    from loomcli.providers import Provider
    from loomcli.search.grep import GrepResult, Match
    from loomcli.store.rows import FileInfo, Hit
    from loomcli.store.seam import IndexStore as Store
    from loomcli.tools import Tool

_EMBEDDERS: dict[tuple[str, ...], Any] = {}
_EMBEDDERS_LOCK = threading.Lock()

CORPUS_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # whole names only (fullmatch)


# -- argument checks ----------------------------------------------------------------------

def _text(name: str, value: Any, *, required: bool = True) -> str:
    if not isinstance(value, str):
        raise QueryError(f"{name} must be a string")
    if required and not value.strip():
        raise QueryError(f"{name} must not be empty")
    if len(value) > QUERY_CHARS_MAX:
        raise QueryError(f"{name} is longer than {QUERY_CHARS_MAX:,} characters",
                         "shorten it")
    if has_surrogates(value):  # argv bytes that are not UTF-8; a JSON "\udcff"
        try:  # the bytes as given: "caf\xe9.md"
            given = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            given = value.encode("utf-8", "backslashreplace").decode("utf-8")
        given = given if len(given) <= 40 else given[:37] + "..."
        raise QueryError(f"{name} '{given}' is not valid UTF-8 text",
                         "loom's index holds UTF-8 text and names only: give it in UTF-8")
    return value


def _int(name: str, value: Any, default: int | None, lo: int, hi: int | None = None
         ) -> int | None:
    """An integer in [lo, hi]: None gives the default, past hi is clamped, below lo refused."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(f"{name} must be a whole number, got {_show(value)}")
    if value < lo:
        raise QueryError(f"{name} must be {lo} or more, got {value}",
                         f"give {lo} or more" + (f" (left out, it is {default})"
                                                 if default is not None else ""))
    return min(value, hi) if hi is not None else value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise QueryError(f"{name} must be true or false, got {_show(value)}")
    return value


def _strings(name: str, value: Any, *, required: bool = True) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise QueryError(f"{name} must be a string or a list of strings")
    if len(value) > GLOBS_MAX:
        raise QueryError(f"{name}: at most {GLOBS_MAX} entries")
    return [_text(name, v, required=required) for v in value]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_index_path(path: Any) -> str:
    """A plain index path: no `..` component, not absolute (paths from clients), read
    with `\\` as `/` too. Returned as given: a name may hold `\\` (Store.resolve)."""
    text = _text("path", path)
    clean = text.replace("\\", "/")
    if clean.startswith("/") or ".." in PurePosixPath(clean).parts or re.match(r"^[A-Za-z]:",
                                                                               clean):
        raise QueryError(f"{path!r} escapes the index",
                         "use a path as `loom files` / loom_list_files / GET /files shows it")
    return text


# -- results ------------------------------------------------------------------------------

class SearchHit:
    """A file found: `snippet` has store.SNIPPET_START/END around matched words; `match`
    is "bm25", "semantic" or "both"; `content` the whole text, or its head and best
    passage (excerpt_chars), once asked for; `page` a PDF's page where the snippet is.
    (Records here are plain classes: see records.py.)"""

    __slots__ = ("path", "title", "score", "snippet", "content_len", "match", "content",
                 "truncated", "page", "offset", "backlinks", "tags")

    def __init__(self, path: str, title: str, score: float, snippet: str, content_len: int,
                 match: str = "bm25", content: str | None = None, truncated: bool = False,
                 page: int | None = None, offset: int | None = None, backlinks: int = 0,
                 tags: list[str] | None = None) -> None:
        self.path, self.title, self.score, self.snippet = path, title, score, snippet
        self.content_len, self.match, self.content = content_len, match, content
        self.truncated, self.page, self.offset = truncated, page, offset
        self.backlinks = backlinks  # how many notes link to this file ([[wikilinks]])
        self.tags = tags or []  # a note's tags (`#tag`, front matter), lower case

    def __repr__(self) -> str:
        return f"SearchHit({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        from loomcli.search.text import plain_snippet

        out: dict[str, Any] = {"path": self.path, "title": self.title,
                               "score": round(self.score, 4),
                               "snippet": plain_snippet(self.snippet),
                               "content_len": self.content_len, "match": self.match,
                               "page": self.page, "offset": self.offset,
                               "backlinks": self.backlinks, "tags": self.tags}
        if self.content is not None:
            out["content"] = self.content
            out["truncated"] = self.truncated
        return out


class Terms(Record):
    """A question's or query's words as loom matches them (lower-case stems, function
    words of every language it knows left out): what the web page highlights, so it never
    copies the rule."""

    __slots__ = ("terms",)

    def __init__(self, terms: list[str]) -> None:
        self.terms = terms

    def to_dict(self) -> dict[str, Any]:
        return {"terms": self.terms}


def terms(text: Any) -> Terms:
    from loomcli.search.text import terms as stems

    return Terms(stems(_text("text", text, required=False))[:TERMS_MAX])


class SearchResult(Record):
    __slots__ = ("hits", "warnings")

    def __init__(self, hits: list[SearchHit], warnings: list[str] | None = None) -> None:
        self.hits = hits
        self.warnings: list[str] = warnings if warnings is not None else []

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hits": [h.to_dict() for h in self.hits]}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


class TextRange(Record):
    __slots__ = ("path", "offset", "length", "content_len", "content")

    def __init__(self, path: str, offset: int, length: int, content_len: int, content: str) -> None:
        self.path = path
        self.offset = offset
        self.length = length
        self.content_len = content_len
        self.content = content

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class NoteLinks(Record):
    """A note's `[[wikilinks]]` (each resolved to a file's path, or None when no file
    has that name), its tags, and the notes that link to it (`loom links`)."""

    __slots__ = ("path", "title", "tags", "links", "backlinks")

    def __init__(self, path: str, title: str, tags: list[str], links: list[dict[str, Any]],
                 backlinks: list[dict[str, Any]]) -> None:
        self.path, self.title, self.tags = path, title, tags
        self.links = links  # {"target", "heading", "alias", "line", "path"}
        self.backlinks = backlinks  # {"path", "title", "line"}

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class PageStarts(Record):
    """Where each page of a paged text (PDF, slides, chapters) starts, in bytes."""

    __slots__ = ("path", "title", "content_len", "pages")

    def __init__(self, path: str, title: str, content_len: int, pages: list[int] | None) -> None:
        self.path = path
        self.title = title
        self.content_len = content_len
        self.pages = pages  # None: the text has no pages

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class FileList(Record):
    __slots__ = ("files",)

    def __init__(self, files: list[FileInfo]) -> None:
        self.files = files

    def to_dict(self) -> dict[str, Any]:
        return {"files": [f.to_dict() for f in self.files]}


class Status:
    """The index's state; `engines` says what extracts each kind."""

    def __init__(self, config: str, config_exists: bool, index: str,
                 counts: dict[str, Any] | None = None, engines: dict[str, str] | None = None
                 ) -> None:
        self.config, self.config_exists, self.index = config, config_exists, index
        self.counts: dict[str, Any] = counts if counts is not None else {}
        self.engines: dict[str, str] = engines if engines is not None else {}
        self.index_exists = False  # no scan has made it yet
        self.backend = "sqlite"  # or "postgresql" ([store] url)
        self.replicas: list[dict[str, Any]] = []  # [store] read_urls, each with its lag

    @property
    def store(self) -> str:
        """The backend and where the index is: `sqlite: PATH`, `postgresql: host/db`."""
        return f"{self.backend}: {self.index}"

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "index": self.index, **self.counts,
                "engines": self.engines, "index_exists": self.index_exists,
                "backend": self.backend, "store": self.store, "replicas": self.replicas}


class Setting(Record):
    """One config key as loom uses it: its value and where that comes from (`file`, or
    `default`; a key with no default and no value is `unset`)."""

    __slots__ = ("key", "value", "origin")

    def __init__(self, key: str, value: Any, origin: str) -> None:
        self.key = key
        self.value = value
        self.origin = origin

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def _default(cfg: Config, key: str) -> Any:
    """The value loom uses for an unset key, where it depends on others (the endpoint on
    the provider) or on the machine (OCR on when Tesseract is installed)."""
    from loomcli.config import SCHEMA

    if key == "db_path":
        return str(cfg.db_path)
    if key in ("llm.endpoint", "llm.api_key_env"):
        from loomcli import providers

        table = (providers.DEFAULT_ENDPOINTS if key == "llm.endpoint"
                 else providers.DEFAULT_KEY_ENV)
        return table.get(cfg.get("llm.provider"))
    if key in ("embeddings.provider", "embeddings.model"):
        from loomcli import embeddings

        chosen = embeddings.settings(cfg)
        return chosen.provider if key == "embeddings.provider" else chosen.model
    if key in ("ocr.enabled", "ocr.languages"):
        from loomcli.extract import ocr

        reader = ocr.settings(cfg.get("ocr.enabled"), cfg.get("ocr.languages"))
        return reader.enabled if key == "ocr.enabled" else (reader.languages or None)
    return cfg.get(key) if key in SCHEMA else None


def setting(cfg: Config, key: str) -> Setting:
    from loomcli.config import check_key

    check_key(key)
    if cfg.origin(key) == "file":
        return Setting(key, cfg.get(key), "file")
    value = _default(cfg, key)
    return Setting(key, value, "unset" if value is None else "default")


def _is_continuation(b: int) -> bool:
    return (b & 0xC0) == 0x80


def read_range(store: Store, path: str, offset: int = 0, length: int | None = None
               ) -> TextRange:
    """A byte range of a file's extracted UTF-8 text, clamped to the text and shrunk to
    whole characters (never a broken one). Reports the range actually returned."""
    if offset < 0:
        raise QueryError(f"offset must be 0 or more, got {offset}")
    if length is not None and length < 0:
        raise QueryError(f"length must be 0 or more, got {length}")
    row = store.resolve(path)
    total = row.content_len
    if offset > total:
        raise QueryError(f"offset {offset} is past the end of "
                         f"{store.display_path(row.root_id, row.relpath)}, whose text is "
                         f"{total:,} bytes", f"give an offset below {total}")
    start = min(offset, total)
    end = total if length is None else min(total, start + length)
    # Fetch three bytes on each side to find character boundaries.
    window_start = max(0, start - 3)
    data = store.text_bytes(row.id, window_start, end - window_start + 4)
    s, e = start - window_start, end - window_start
    while s < len(data) and s < e and _is_continuation(data[s]):
        s += 1
    while e > s and e < len(data) and _is_continuation(data[e]):
        e -= 1
    chunk = data[s:e]
    return TextRange(store.display_path(row.root_id, row.relpath), window_start + s,
                     len(chunk), total, chunk.decode("utf-8", errors="replace"))


LINES_CHUNK = 1 << 20  # bytes read at a time while looking for a line


def read_lines(store: Store, path: str, first: int, last: int | None = None) -> TextRange:
    """Lines `first` to `last` (1-based, inclusive; None: to the end) of a file's text,
    numbered as grep numbers them. Reads the text a chunk at a time up to the last line
    (a line near the start of a long PDF costs what its bytes cost)."""
    if first < 1 or (last is not None and last < first):
        raise QueryError(f"lines must be N, N-M or N:M with 1 <= N <= M, got {first}-{last}",
                         "e.g. notes.md:12 or --lines 12:20")
    row = store.resolve(path)
    shown = store.display_path(row.root_id, row.relpath)
    total = row.content_len
    starts: dict[int, int] = {1: 0}  # line number -> its first byte
    line, pos = 1, 0
    want = (first, last + 1) if last is not None else (first,)
    while pos < total and line < max(want):
        chunk = store.text_bytes(row.id, pos, LINES_CHUNK)
        if not chunk:
            break
        at = 0
        while line < max(want):
            nl = chunk.find(b"\n", at)
            if nl < 0:
                break
            line += 1
            at = nl + 1
            if line in want:
                starts[line] = pos + at
        pos += len(chunk)
    if first not in starts or starts[first] >= total:  # past the last line
        lines = line - 1 if total == 0 or _ends_with_newline(store, row.id, total) else line
        raise QueryError(f"{shown} has {lines:,} line{'' if lines == 1 else 's'}, not "
                         f"{first:,}", f"give a line from 1 to {lines:,}")
    end = starts.get(last + 1, total) if last is not None else total
    return read_range(store, path, starts[first], end - starts[first])


def _ends_with_newline(store: Store, file_id: int, total: int) -> bool:
    return store.text_bytes(file_id, total - 1, 1) == b"\n"


def _among(store: Store, path: str | None, globs: list[str]) -> list[int] | None:
    """The files a search may return: `path` (a file, or a folder and what it holds) and
    the globs, as grep selects them; None for every file."""
    if path is None and not globs:
        return None
    from loomcli.search.grep import _selected  # ripgrep's rule for -g, as grep applies it

    chosen = store.paths()
    if path is not None:
        try:
            only = store.resolve(path).id
            chosen = [(fid, shown) for fid, shown in chosen if fid == only]
        except IndexMissingError:
            folders = tuple({p.rstrip("/") + "/" for p in (path, path.replace("\\", "/"))})
            chosen = [(fid, shown) for fid, shown in chosen if shown.startswith(folders)]
            if not chosen:
                raise
    if globs:
        from loomcli.index import ignore

        patterns = ignore.parse_lines(globs, source="--glob")
        chosen = [(fid, shown) for fid, shown in chosen if _selected(shown, patterns)]
    return [fid for fid, _ in chosen]


# -- connections kept by servers -----------------------------------------------------------

_KEPT = threading.local()  # per thread: {index path: ((st_dev, st_ino), Store)}


def _kept_store(path: Path | str, connect: Callable[[], Any] | None = None,
                replica: bool = False) -> Store:
    """This thread's open read connection to the index at `path`, reopened when the file
    was replaced (`scan --rebuild`) or removed; a server's database (a url) is kept as
    long as it answers (`connect`: the replica router's, which knows the password and
    the replicas; `replica`: it may be a read-only standby)."""
    import os

    from loomcli.store import open_store

    kept: dict[str, tuple[tuple[int, int], Store]] = _KEPT.__dict__.setdefault("stores", {})
    if isinstance(path, str):
        entry = kept.get(path)
        if entry is not None and not entry[1].still_open():
            _drop_kept_store(path)  # the server restarted: a new connection, no error
            entry = None
        if entry is None:
            kept[path] = ((0, 0), open_store(path, connect=connect, replica=replica))
            return kept[path][1]
        entry[1].forget_roots()
        return entry[1]
    try:
        st = os.stat(path)
    except OSError:
        _drop_kept_store(path)
        return open_store(path)  # raises the usual "no index" error
    identity = (st.st_dev, st.st_ino)
    entry = kept.get(str(path))
    if entry is not None and entry[0] == identity:
        entry[1].forget_roots()  # a scan may have added a folder since
        return entry[1]
    _drop_kept_store(path)
    store = open_store(path)
    kept[str(path)] = (identity, store)
    return store


def _drop_kept_store(path: Path | str) -> None:
    entry = _KEPT.__dict__.get("stores", {}).pop(str(path), None)
    if entry is not None:
        entry[1].close()


# -- the corpus ---------------------------------------------------------------------------

class Corpus:
    """One index with its config: the default one, or DIR/<name>/ of `serve --corpus-root`.
    `roots`: scan these instead of the config's notes_dirs. `keep_open`: servers (HTTP,
    MCP) keep one read connection per thread and index instead of opening the index for
    every request (measured: a fifth of a search's time). `owner`: whose conversations
    (a token of `serve`'s LOOM_HTTP_TOKENS): kept apart from the corpus's other ones."""

    def __init__(self, config: Config, roots: list[Path] | None = None,
                 db_path: Path | None = None, keep_open: bool = False,
                 owner: str | None = None, schema: str | None = None) -> None:
        self.config, self.roots, self.db_path, self.keep_open = (config, roots, db_path,
                                                                 keep_open)
        self.owner = owner
        self.schema = schema  # a corpus's, in the database of `[store] url`

    @classmethod
    def default(cls, config_override: str | None = None) -> Corpus:
        from loomcli import config as config_mod

        return cls(config_mod.load(config_override))

    @classmethod
    def named(cls, corpus_root: Path, name: Any, base: Config, *, keep_open: bool = False,
              owner: str | None = None) -> Corpus:
        if not isinstance(name, str) or not CORPUS_NAME.fullmatch(name):
            raise QueryError(f"invalid corpus name {_show(name)}",
                             "names are 1-64 letters, digits, '_' or '-'")
        folder = corpus_root / name
        if not (folder / "notes").is_dir():
            raise IndexMissingError(f"no corpus named {name!r}",
                                    f"create <corpus-root>/{name}/notes and scan it")
        if base.store_url is not None:  # its own schema of the team's database
            from loomcli.store.pg_connect import corpus_schema

            return cls(base, roots=[folder / "notes"], keep_open=keep_open, owner=owner,
                       schema=corpus_schema(name))
        return cls(base, roots=[folder / "notes"], db_path=folder / "index.db",
                   keep_open=keep_open, owner=owner)

    @property
    def index_path(self) -> Path:
        return self.db_path or self.config.db_path

    @property
    def location(self) -> Path | str:
        """Where the index is: the PostgreSQL database of `[store] url` (or
        $LOOM_DATABASE_URL; for a corpus of `serve --corpus-root`, its schema there),
        else the SQLite file (for a corpus of `serve --corpus-root`: its own file)."""
        url = None if self.db_path else self.config.store_url
        if url is not None and self.schema is not None:
            from loomcli.store.pg_connect import in_schema

            return in_schema(url, self.schema)
        return url or self.index_path

    def index_exists(self) -> bool:
        """Whether the index was made (a scan ran): its file, or loom's tables in the
        database."""
        location = self.location
        if isinstance(location, Path):
            return location.exists()
        try:
            with self.store():
                return True
        except IndexMissingError:
            return False

    @contextmanager
    def store(self, *, create: bool = False, write: bool = False) -> Iterator[Store]:
        """The index, open. On PostgreSQL with `[store] read_urls`, a read (neither
        `create` nor `write`) goes to the first replica that answers, a write to the
        primary (store/pg_connect.py)."""
        from loomcli.errors import IndexStateError
        from loomcli.store import open_store

        location = self.location
        router = None
        connect: Callable[[], Any] | None = None
        writing = create or write
        if isinstance(location, str):
            from loomcli.store.pg_connect import Router

            router = Router.shared(self.config, self.schema)
            if router is not None:
                light = not self.keep_open and bool(self.config.get("store.light_reads"))
                connect = (lambda: router.connect_primary(autocommit=True)) if writing \
                    else (lambda: router.connect_reader(light=light))  # store/pgwire.py
        reading_replicas = router is not None and not writing and bool(self.config.read_urls)
        if self.keep_open and not writing:
            store = _kept_store(location, connect, reading_replicas)
            try:
                with store.guard():  # damaged, full, read-only: say what to do
                    yield store
            except IndexStateError:
                _drop_kept_store(location)
                if router is not None and hasattr(store, "pg"):
                    router.lost(store.pg)  # the next read goes to the next server
                raise
            return
        with open_store(location, create=create, connect=connect,
                        replica=reading_replicas) as store, store.guard():
            yield store

    # -- config -------------------------------------------------------------------------

    def settings(self) -> list[Setting]:
        """Every key loom knows, with its value and origin (`loom config list`)."""
        from loomcli.config import SCHEMA

        return [setting(self.config, key) for key in SCHEMA]

    # -- reading ------------------------------------------------------------------------

    def search(self, query: Any, limit: Any = None, excerpt_chars: Any = None,
               mode: Any = None, prefix: Any = False, *, path: Any = None,
               globs: Any = None, within: Path | None = None, tags: Any = None
               ) -> SearchResult:
        """Ranked files; with excerpt_chars, each hit carries its text cut like ask's.
        mode: auto (hybrid when embeddings are enabled, else bm25) | bm25 | semantic |
        hybrid. prefix: the query is being typed — its last word matches the words it
        starts (BM25; the web page's search as you type). `path` (a file or folder) and
        `globs` (grep's -g) narrow the files; `within`: a folder on disk (the CLI's
        --here), as grep's. `tags` (--tag) and the query's `#tags` keep the files that
        have every one of them; a query of tags alone ranks those by the tags' words."""
        query = _text("query", query, required=False)
        wanted: list[str] = []
        if "#" in query:  # (the notes module only then: not on a plain search's start-up)
            from loomcli.extract.markdown import split_tags

            query, wanted = split_tags(query)
        wanted += [t.strip().lstrip("#").strip("/").lower() for t in _strings("tag", tags)]
        if wanted and not query.strip():
            query = " ".join(t.replace("/", " ") for t in wanted)
        n = _int("limit", limit, SEARCH_LIMIT, 1, SEARCH_LIMIT_MAX) or SEARCH_LIMIT
        chars = _int("excerpt_chars", excerpt_chars, None, 0, EXCERPT_CHARS_MAX)  # 0: none
        chosen = self._mode(mode)
        patterns = _strings("glob", globs)
        where = None if path is None else check_index_path(path)
        with self.store() as store:
            among = _among(store, where, patterns)
            if within is not None:
                under = self._ids_within(store, within)
                if among is not None:  # one set, not one per file: --here with -g stays linear
                    inside = set(under)
                    under = [f for f in among if f in inside]
                among = under
            if wanted:
                tagged = store.tagged(wanted)
                inside = set(tagged)
                among = tagged if among is None else [f for f in among if f in inside]
            if among == []:
                return SearchResult([])
            found, warnings, query_vector = self._rank(store, query, n, chosen, among=among,
                                                       prefix=_bool("prefix", prefix))
            linked = store.backlinks([h.file_id for h, _ in found])
            tagged_as = store.tags_for([h.file_id for h, _ in found])
            hits = [SearchHit(h.path, h.title, h.score, h.snippet, h.content_len, how,
                              page=h.page, offset=h.offset,
                              backlinks=len(linked.get(h.file_id, ())),
                              tags=tagged_as.get(h.file_id))
                    for h, how in found]
            if chars:
                from loomcli.search.excerpt import SCAN_BYTES, excerpt

                chars = max(EXCERPT_CHARS_MIN, chars)
                texts = store.text_ranges([(h.file_id, 0, SCAN_BYTES) for h, _ in found])
                for hit, (h, _), data in zip(hits, found, texts, strict=True):
                    text = data.decode("utf-8", "ignore")
                    near = self._near(store, h.file_id, text, query_vector)
                    part = excerpt(text, query, chars, min(EXCERPT_HEAD_CHARS, chars // 4),
                                   near=near, start=store.body_start(h.file_id)[1],
                                   path=h.path)
                    hit.content, hit.truncated = part.text, part.cut
        return SearchResult(hits, warnings)

    def _mode(self, mode: Any) -> str:
        from loomcli import embeddings

        chosen = "auto" if mode is None else _text("mode", mode)
        if chosen not in SEARCH_MODES:
            raise QueryError(f"mode must be one of {', '.join(SEARCH_MODES)}, got "
                             f"{_show(mode)}")
        enabled = embeddings.settings(self.config).enabled
        if chosen == "auto":
            return "hybrid" if enabled else "bm25"
        if chosen != "bm25" and not enabled:
            raise QueryError(f"{chosen} search needs embeddings, which are off",
                             "set them on: loom config set embeddings.enabled true, "
                             "then loom scan")
        return chosen

    def _rank(self, store: Store, query: str, n: int, mode: str, operator: str = "auto",
              among: list[int] | None = None, prefix: bool = False
              ) -> tuple[list[tuple[Hit, str]], list[str], Any]:
        """(hit, how it matched) best first, warnings, and the query's vector (or None).
        The plan is retrieve.py's; a failing embeddings provider leaves BM25 alone, with
        a warning. `operator`: how BM25 combines the words (OR for ask's questions);
        `among`: only these files (--glob, --path)."""
        from loomcli.search import retrieve
        from loomcli.search.text import query_words

        if mode == "bm25":
            ranked = retrieve.bm25(store, query, n, operator, among, prefix)
            return self._hits(store, query, ranked), [], None
        warnings: list[str] = []
        vector = index = None
        try:
            vector, index = self._meaning(store, query)
        except LoomError as exc:
            warnings.append(f"search by meaning failed, BM25 only: {exc}")
        if index is None and not warnings and query_words(query):
            warnings.append("no file has vectors yet: run loom scan (BM25 only until then)")
        if index is None:
            ranked = retrieve.bm25(store, query, n, "OR" if operator == "OR" else "auto",
                                   among)
        elif mode == "semantic":
            ranked = retrieve.semantic(store, index, vector, n, among)
        else:
            ranked = retrieve.hybrid(store, index, vector, query, n, among)
        return self._hits(store, query, ranked), warnings, vector

    @staticmethod
    def _hits(store: Store, query: str, ranked: list[Any]) -> list[tuple[Hit, str]]:
        how = {r.file_id: r.match for r in ranked}
        near = {r.file_id: r.near for r in ranked if r.near}
        from loomcli.search.hits import hits as with_snippets

        hits = with_snippets(store, [(r.file_id, r.score) for r in ranked], query, near)
        return [(h, how[h.file_id]) for h in hits]

    def _meaning(self, store: Store, query: str) -> tuple[Any, Any]:
        """The query's vector and the index's vectors, or (None, None) without any."""
        from loomcli.embeddings import EmbeddingsError
        from loomcli.search import semantic

        embedder = self._embedder()
        sizes = {d for d, count in store.vector_dims(embedder.identity).items() if d and count}
        if not sizes or not query.strip():
            return None, None
        vector = embedder.embed([query[:QUERY_EMBED_CHARS]])[0]
        if len(vector) not in sizes:
            raise EmbeddingsError(
                f"{embedder.identity} now gives vectors of {len(vector)} numbers, the "
                f"index holds vectors of {', '.join(map(str, sorted(sizes)))}",
                "run loom scan to make them again")
        return vector, semantic.vector_index(store, embedder.identity, len(vector))

    def _embedder(self) -> Any:
        """The configured embedder, one per process (a server keeps its model loaded)."""
        from loomcli import embeddings

        key = tuple(str(self.config.get(f"embeddings.{k}")) for k in
                    ("provider", "model", "endpoint", "api_key_env", "timeout_s"))
        with _EMBEDDERS_LOCK:
            if key not in _EMBEDDERS:
                _EMBEDDERS[key] = embeddings.from_config(self.config)
            return _EMBEDDERS[key]

    def _near(self, store: Store, file_id: int, text: str, vector: Any
              ) -> list[tuple[int, int, float]]:
        """The file's passages as (start char, end char, similarity to the query)."""
        if vector is None:
            return []
        from loomcli.embeddings import char_spans
        from loomcli.search import semantic

        scored = semantic.passage_scores(store, file_id, self._embedder().identity, vector)
        return char_spans(text, scored)

    def grep(self, pattern: Any, *, path: Any = None, globs: Any = None, context: Any = None,
             case_sensitive: Any = False, limit: Any = None, **options: Any) -> GrepResult:
        """Matching lines, at most `limit` (GREP_LIMIT by default, GREP_LIMIT_MAX at most:
        MCP and HTTP); `truncated` when cut. `options`: those of `grep_lines`."""
        from loomcli.search.grep import GrepResult

        n = _int("limit", limit, GREP_LIMIT, 1, GREP_LIMIT_MAX) or GREP_LIMIT
        found: list[Match] = []
        with self.store() as store:
            for m in self._grep(store, pattern, path=path, globs=globs, context=context,
                                case_sensitive=case_sensitive, **options):
                if len(found) == n:
                    return GrepResult(found, truncated=True)
                found.append(m)
        return GrepResult(found, truncated=False)

    def grep_lines(self, pattern: Any, *, path: Any = None, globs: Any = None,
                   context: Any = None, case: Any = None, fixed: Any = False,
                   word: Any = False, before: Any = None, after: Any = None,
                   max_count: Any = None, every: Any = False,
                   within: Path | None = None, **more: Any) -> Iterator[Match]:
        """Every matching line, as found, without a limit (the CLI: a pipe gets all of
        them, and a reader that stops stops the search). ripgrep's options: `case`
        smart | ignore | sensitive (default GREP_CASE), `fixed` (-F), `word` (-w),
        `before`/`after` (-B/-A, default `context`), `max_count` lines per file (-m),
        `every`: each match's line also lists all its matches (-o, colour); `within`: a
        folder on disk inside an indexed root (--here): only the files under it. `more`:
        `invert` (-v), `multiline` (-U), `types`/`types_not` (-t/-T); a list of patterns
        matches any of them (-e)."""
        with self.store() as store:
            ids = None if within is None else self._ids_within(store, within)
            yield from self._grep(store, pattern, path=path, globs=globs, context=context,
                                  case=GREP_CASE if case is None else case, fixed=fixed,
                                  word=word, before=before, after=after,
                                  max_count=max_count, every=every, within=ids, **more)

    def grep_files_without_match(self, pattern: Any, *, path: Any = None, globs: Any = None,
                                 case: Any = None, within: Path | None = None, **more: Any
                                 ) -> Iterator[str]:
        """The paths of the files grep reads that hold no match (--files-without-match);
        the options are grep_lines'."""
        from loomcli.search.grep import files_without_match

        with self.store() as store:
            ids = None if within is None else self._ids_within(store, within)
            checked = self._grep_options(pattern, path=path, globs=globs,
                                         case=GREP_CASE if case is None else case, **more)
            yield from files_without_match(store, within=ids, **checked)

    @staticmethod
    def _ids_within(store: Store, folder: Path) -> list[int]:
        found = store.on_disk(folder)
        if found is None:
            from loomcli.errors import RootError

            names = ", ".join(r.path for r in store.roots()) or "none"
            raise RootError(f"{folder} is not inside an indexed folder",
                            f"cd into one of them, or drop --here (indexed: {names})")
        return store.ids_under(*found)

    def index_path_of(self, path: str) -> str:
        """A path as the index shows it: a path on disk (absolute, or relative to the
        working directory) inside an indexed root becomes its index path; any other
        text is returned as it is (an index path). For the CLI: MCP and HTTP take index
        paths only."""
        import os

        _text("path", path, required=False)  # a name that is not UTF-8 is never indexed
        looks_on_disk = (os.path.isabs(os.path.expanduser(path)) or path.startswith(("./", "../"))
                         or path in (".", "..") or os.path.exists(path))
        if not looks_on_disk or not self.index_exists():
            return path
        with self.store() as store:
            found = store.on_disk(path)
            if found is None:
                if os.path.isabs(os.path.expanduser(path)) or path.startswith("../"):
                    from loomcli.errors import IndexMissingError

                    names = ", ".join(r.path for r in store.roots()) or "none"
                    raise IndexMissingError(f"{path} is not inside an indexed folder",
                                            f"indexed folders: {names}")
                return path
            root, rel = found
            return store.display_path(root.id, rel) if rel else (root.prefix or ".")

    def _grep(self, store: Store, pattern: Any, *, path: Any, globs: Any, context: Any,
              case_sensitive: Any = False, case: Any = None, fixed: Any = False,
              word: Any = False, before: Any = None, after: Any = None,
              max_count: Any = None, every: Any = False, within: list[int] | None = None,
              **more: Any) -> Iterator[Match]:
        from loomcli.search.grep import matches

        n_context = _int("context", context, 0, 0, GREP_CONTEXT_MAX) or 0
        return matches(
            store, context=n_context, within=within,
            before=_int("before", before, None, 0, GREP_CONTEXT_MAX),
            after=_int("after", after, None, 0, GREP_CONTEXT_MAX),
            max_count=_int("max_count", max_count, None, 1), every=_bool("every", every),
            **self._grep_options(pattern, path=path, globs=globs,
                                 case_sensitive=case_sensitive, case=case, fixed=fixed,
                                 word=word, **more))

    @staticmethod
    def _grep_options(pattern: Any, *, path: Any, globs: Any, case_sensitive: Any = False,
                      case: Any = None, fixed: Any = False, word: Any = False,
                      invert: Any = False, multiline: Any = False, types: Any = None,
                      types_not: Any = None) -> dict[str, Any]:
        """grep's pattern(s) and file choice, checked (every edge's, once)."""
        from loomcli.search.grep import CASES, type_endings

        if case is not None and case not in CASES:
            raise QueryError(f"case must be one of {', '.join(CASES)}, got {_show(case)}")
        if isinstance(pattern, list | tuple):
            patterns = _strings("pattern", list(pattern), required=False)
        else:
            patterns = [_text("pattern", pattern, required=False)]
        if not patterns or "" in patterns:  # white space is a pattern (rg)
            raise QueryError("pattern must not be empty")
        chosen, unwanted = _strings("type", types), _strings("type_not", types_not)
        type_endings([*chosen, *unwanted])  # an unknown name is refused before reading
        return dict(pattern=pattern, path=None if path is None else check_index_path(path),
                    globs=_strings("glob", globs),
                    case_sensitive=_bool("case_sensitive", case_sensitive), case=case,
                    fixed=_bool("fixed", fixed), word=_bool("word", word),
                    invert=_bool("invert", invert), multiline=_bool("multiline", multiline),
                    types=chosen, types_not=unwanted)

    def get_lines(self, path: Any, first: Any, last: Any = None) -> TextRange:
        """Lines `first` to `last` of a file's text (1-based, inclusive; None: to the
        end), as grep numbers them: `loom get PATH:LINE`, `--lines A:B`."""
        n = _int("first line", first, None, 1)
        m = _int("last line", last, None, 1)
        assert n is not None
        with self.store() as store:
            return read_lines(store, check_index_path(path), n, m)

    def get(self, path: Any, offset: Any = 0, length: Any = None) -> TextRange:
        start = _int("offset", offset, 0, 0) or 0
        count = _int("length", length, None, 0)
        with self.store() as store:
            return read_range(store, check_index_path(path), start, count)

    def links(self, path: Any) -> NoteLinks:
        """What a note links to (resolved now, as Obsidian would) and what links to it."""
        with self.store() as store:
            row = store.resolve(check_index_path(path))
            links = []
            found = store.links_of(row.id)
            for (target, heading, alias, line), fid in zip(
                    found, store.resolve_links([t for t, *_ in found], row.id), strict=True):
                shown = None if fid is None else store.file(fid)
                links.append({"target": target, "heading": heading, "alias": alias,
                              "line": line, "path": None if shown is None else
                              store.display_path(shown.root_id, shown.relpath)})
            back = []
            for source, line in store.backlinks([row.id])[row.id].items():
                other = store.file(source)
                back.append({"path": store.display_path(other.root_id, other.relpath),
                             "title": other.title, "line": line})
            back.sort(key=lambda b: str(b["path"]))
            return NoteLinks(store.display_path(row.root_id, row.relpath), row.title,
                             store.tags_of(row.id), links, back)

    def pages(self, path: Any) -> PageStarts:
        with self.store() as store:
            row = store.resolve(check_index_path(path))
            return PageStarts(store.display_path(row.root_id, row.relpath), row.title,
                              row.content_len, store.pages(row.id))

    def failures(self) -> list[dict[str, str]]:
        """The files that failed to extract and why (at most FAILURES_SHOWN)."""
        if not self.index_exists():
            return []
        with self.store() as store:
            return store.failures(FAILURES_SHOWN)

    def files(self) -> FileList:
        with self.store() as store:
            return FileList(store.list_files())

    def migrate(self, to: Any, progress: Callable[[str], None]) -> Migrated:
        """Copy this index into `to` (a `postgresql://` url, or the path of a new SQLite
        file) without reading a file again (migrate.py); this index is only read."""
        from loomcli import migrate
        from loomcli.store import SERVER_SCHEMES, open_store

        target = _text("to", to)
        dest: Path | str = target if target.startswith(SERVER_SCHEMES) else \
            Path(target).expanduser().absolute()
        if str(dest) == str(self.location) or (isinstance(dest, Path) and isinstance(
                self.location, Path) and dest.resolve() == self.location.resolve()):
            raise QueryError(f"{migrate.shown(target)} is the index itself",
                             "give a new .db path or another database's url")
        if isinstance(dest, Path):
            migrate.check_new_file(dest)
        with self.store(write=True) as source, open_store(dest, create=True) as copy, \
                copy.guard():
            done = migrate.copy(source, copy, progress)
            if isinstance(dest, str) and isinstance(self.location, Path):
                # Into PostgreSQL, the conversations go along: they live in the database
                # there (kept_conversations). Back to a file, they stay in the database.
                from loomcli.conversations import FILE_NAME, copy_files

                home = self.conversations_path.parent
                files = [("" if p.name == FILE_NAME else p.stem.removeprefix(
                    "conversations-"), p) for p in sorted(home.glob("conversations*.db"))]
                done.conversations = copy_files(files, copy.conversation_rows)
            return done

    def status(self) -> Status:
        from loomcli.extract import ocr, pdf

        reader = ocr.settings(self.config.get("ocr.enabled"), self.config.get("ocr.languages"))
        out = Status(str(self.config.path), self.config.exists, str(self.index_path),
                     engines={"pdf": pdf.engine(),
                              "ocr": f"tesseract {reader.languages}" if reader.enabled
                              else "off"})
        url = self.location
        if isinstance(url, str):  # PostgreSQL: where (never a password), each replica's lag
            from loomcli.store.pg_connect import Router, place

            out.backend, out.index = "postgresql", place(url)
            router = Router.from_config(self.config, self.schema)
            if router is not None:
                try:
                    out.replicas = router.replica_status()
                finally:
                    router.close()
        if self.index_exists():
            out.index_exists = True
            with self.store() as store:
                out.counts = store.status()
                out.counts["vectors"] = self._vector_status(store)
                out.counts["grep_index"] = self._grep_index_status(store)
        else:
            out.counts = {"roots": [], "files": 0, "notes": 0, "pdfs": 0, "documents": 0,
                          "failed": 0, "skipped": 0,
                          "text_bytes": 0, "index_bytes": 0, "last_scan": None,
                          "vectors": self._vector_status(None),
                          "grep_index": {"pending": 0, "building": False}}
        return out

    @staticmethod
    def _grep_index_status(store: Store) -> dict[str, Any]:
        """How many texts grep's trigram index still lacks (grep reads them whole
        meanwhile) and whether a process is adding them now (grep_index.py)."""
        return {"pending": store.grams_pending()[0], "building": store.building()}

    def problems(self, kind: str) -> list[tuple[str, str]]:
        """(path, reason) of the files that `failed` or were `skipped` (no text)."""
        if kind not in ("failed", "skipped"):
            raise QueryError(f"kind must be failed or skipped, got {_show(kind)}")
        with self.store() as store:
            return store.problems(kind)

    def _vector_status(self, store: Store | None) -> dict[str, Any]:
        """Which model the config names, how many files have its vectors, how many still
        need them, how many hold another model's (stale: replaced by the next scan), and
        who ranks them (`ranked_by`: loom, or the database's pgvector)."""
        from loomcli import embeddings

        chosen = embeddings.settings(self.config)
        counts = store.vector_counts() if store else {}
        current = counts.get(chosen.identity, 0)
        return {"enabled": chosen.enabled, "model": chosen.identity, "files": current,
                "pending": (store.files_with_text() - current) if store else 0,
                "stale": sum(n for m, n in counts.items() if m != chosen.identity),
                "ranked_by": store.vector_engine() if store else "loom"}

    # -- writing ------------------------------------------------------------------------

    def scan(self, dirs: Sequence[str | Path] = (), *, force: Any = False, rebuild: Any = False,
             progress: Progress | None = None, on_wait: Callable[[str], None] | None = None,
             on_change: OnChange | None = None) -> ScanReport:
        """Index DIRs (else this corpus's roots, the config's notes_dirs, or the roots
        already indexed). The roots are checked before the index is created or opened,
        so a bad folder leaves nothing behind."""
        from loomcli.index import indexer

        force = _bool("force", force)
        roots = self._set_aside(dirs) if _bool("rebuild", rebuild) else self.roots_for(dirs)
        with self.store(create=True) as store:
            return indexer.Indexer(store, self.config, progress=progress, on_wait=on_wait,
                                   on_change=on_change).scan(roots, force=force)

    def roots_for(self, dirs: Sequence[str | Path] = ()) -> list[Path]:
        """The folders a scan of DIRs covers, each checked (RootError when missing)."""
        from loomcli.index import indexer

        chosen = list(dirs) or list(self.roots or [])
        if chosen or not self.index_exists():
            return indexer.resolve_roots(self.config, None, chosen)
        with self.store() as store:
            return indexer.resolve_roots(self.config, store, [])

    def _set_aside(self, dirs: Sequence[str | Path]) -> list[Path]:
        """For --rebuild: the folders to index, then the old index moved to
        `<index>.damaged` (kept, not deleted) so the scan starts a new one."""
        from loomcli.errors import IndexStateError, RootError

        try:
            roots = self.roots_for(dirs)
        except IndexStateError:
            raise RootError("the index is too damaged to tell which folders it held",
                            "name them: loom scan --rebuild DIR...") from None
        from loomcli.store import set_aside

        set_aside(self.location)
        return roots

    def forget(self, folder: str) -> int:
        """Drop an indexed folder and its files from the index; how many files went."""
        from loomcli.index import indexer

        with self.store(write=True) as store:
            return indexer.forget(store, folder)

    # -- ask: the arguments checked here, the rest in ask.session ---------------------------

    def ask_session(self) -> Session:
        """The ask package's view of this corpus (ask.session.Notes) and its conversations."""
        from loomcli.ask.session import Session

        return Session(self, self.kept_conversations)

    def ask_scope(self, top_k: Any, mode: Any) -> tuple[int, str]:
        """An ask's number of files (checked; `[ask] top_k` when None) and search mode."""
        k = _int("top_k", top_k, self.config.get("ask.top_k"), 1, TOP_K_MAX) or 1
        return k, self._mode(mode)

    @contextmanager
    def retrieved(self, query: str, n: int, mode: str) -> Iterator[Retrieved]:
        """The best `n` files for `query` (any of its words: OR), with the index open while
        an ask makes its prompt from them."""
        from loomcli.ask.session import Retrieved

        with self.store() as store:
            found, warnings, vector = self._rank(store, query, n, mode, "OR")
            yield Retrieved(store, [h for h, _ in found], warnings,
                            lambda fid, text: self._near(store, fid, text, vector))

    def run_tool(self, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
        """One reading tool over this corpus, as MCP runs it (the agent's tools)."""
        return tool.call(self, arguments)

    def prompt(self, question: Any, top_k: Any = None, mode: Any = None, *,
               provider: Provider | None = None, window: Budget | None = None,
               clock: Callable[[], float] = time.perf_counter,
               retrieve_with: str | None = None, recalled: Any = None,
               conversation_id: Any = None) -> Prompt | None:
        """Exactly what ask would send, or None when no indexed file matches (see
        ask.session.Session.prompt)."""
        question = _text("question", question)
        cid = None if conversation_id is None else self.conversation_for(conversation_id)
        return self.ask_session().prompt(question, top_k, mode, provider=provider,
                                         window=window, clock=clock,
                                         retrieve_with=retrieve_with, recalled=recalled,
                                         conversation_id=cid)

    def ask(self, question: Any, top_k: Any = None, *, provider: Provider | None = None,
            on_text: Callable[[str], None] | None = None, mode: Any = None,
            on_warning: Callable[[str], None] | None = None, agent: Any = None,
            conversation_id: Any = None, on_step: Callable[[Any], None] | None = None,
            keep: Any = None, clock: Callable[[], float] = time.perf_counter,
            model: Any = None, on_sending: Sending | None = None,
            on_progress: Callable[[str], None] | None = None) -> Answer:
        """Answer from the notes: one LLM call over the best files fitted to the model's
        window, or (agent) a bounded loop in which the model searches, greps and reads.
        With a conversation_id, a follow-up of that conversation; the turn is kept (a new
        conversation when None) unless `keep` is false (None: `[ask] keep`): then the
        conversations file is read (a follow-up) but neither created nor written. Nothing
        matching a plain ask: an empty Answer (no call, nothing kept). `model`: this call's
        model instead of [llm] model. `on_sending(prompt, model)`: just before the model is
        called (prompt None for an agent), for a terminal's status line. The ask itself is
        ask.session's."""
        question = _text("question", question)
        agent_on = self.agent_on(agent)
        cid = None if conversation_id is None else self.conversation_for(conversation_id)
        chosen_model = None if model is None else _text("model", model)
        return self.ask_session().ask(
            question, top_k, mode, agent=agent_on, conversation_id=cid,
            keep=self.keep_on(keep), provider=provider, model=chosen_model, on_text=on_text,
            on_warning=on_warning, on_step=on_step, clock=clock, on_sending=on_sending,
            on_progress=on_progress)

    # -- agent mode and conversations -----------------------------------------------------

    def check_ask(self, question: Any, top_k: Any = None, mode: Any = None, agent: Any = None,
                  conversation_id: Any = None) -> str | None:
        """Check an ask's arguments before anything is sent (a server answers 400 then, not
        mid-stream); returns the conversation it continues."""
        _text("question", question)
        _int("top_k", top_k, None, 1, TOP_K_MAX)
        self._mode(mode)
        self.agent_on(agent)
        return self.conversation_for(conversation_id)

    def keep_on(self, keep: Any = None) -> bool:
        """--keep / --no-keep / the `keep` field, else `[ask] keep`."""
        return bool(self.config.get("ask.keep")) if keep is None else _bool("keep", keep)

    @property
    def conversations_path(self) -> Path:
        """The file this corpus keeps its conversations in (when its index is not on
        PostgreSQL: see kept_conversations): beside its index for a corpus of `serve
        --corpus-root` (one corpus cannot read or continue another's), else under the
        home; a team token's in a file of its own."""
        from loomcli.conversations import FILE_NAME, default_path

        name = FILE_NAME if self.owner is None else f"conversations-{self.owner}.db"
        if self.db_path is None:
            return default_path().with_name(name)
        return self.db_path.parent / name

    @property
    def conversations_where(self) -> str:
        """Where the conversations are, for messages (never a password)."""
        location = self.location
        if isinstance(location, str):
            from loomcli.store.pg_connect import place

            return f"the index's database, {place(location)}"
        return str(self.conversations_path)

    @contextmanager
    def kept_conversations(self, readonly: bool = False) -> Iterator[Any]:
        """This corpus's conversations (this token's, for a token of LOOM_HTTP_TOKENS):
        with the index on PostgreSQL, in its database, on the primary (a follow-up on
        another server reads the turn just kept); else in their file (`readonly`: neither
        created nor written)."""
        from loomcli.conversations import Conversations, InDatabase

        if isinstance(self.location, str):
            with self.store(write=True) as store:
                yield InDatabase(store.conversation_rows(self.owner or ""),
                                 self.conversations_where)
            return
        with Conversations.open(self.conversations_path, readonly=readonly) as kept:
            yield kept

    def _any_conversations(self) -> bool:
        """Whether conversations may have been kept (their file exists; a database: its
        index does)."""
        if isinstance(self.location, str):
            return self.index_exists()
        return self.conversations_path.exists()

    def agent_on(self, agent: Any = None) -> bool:
        """--agent / --no-agent / the `agent` field, else `[ask] agent`."""
        return bool(self.config.get("ask.agent")) if agent is None else _bool("agent", agent)

    def conversation_for(self, cid: Any = None, last: bool = False) -> str | None:
        """The conversation a follow-up continues: `cid` (checked), the newest one (`last`),
        or None (a new one)."""
        from loomcli.conversations import check_id

        if cid is None and not last:
            return None
        if cid is not None:
            cid = check_id(cid)
        if not self._any_conversations():
            if cid is None:
                return None  # -c before any kept conversation: a new one
            raise IndexMissingError(f"no conversation {cid!r}",
                                    "`loom conversations` lists them")
        with self.kept_conversations(readonly=True) as store:
            if cid is None:
                return store.last_id()
            return store.get(cid).id

    def conversations(self, limit: Any = None) -> list[Any]:
        n = _int("limit", limit, CONVERSATIONS_LIMIT, 1, CONVERSATIONS_LIMIT_MAX)
        if not self._any_conversations():
            return []
        with self.kept_conversations(readonly=True) as store:
            return store.recent(n or CONVERSATIONS_LIMIT)

    def remove_conversation(self, cid: Any) -> None:
        """Delete one kept conversation (IndexMissingError when there is none)."""
        from loomcli.conversations import check_id

        cid = check_id(cid)
        if self._any_conversations():
            with self.kept_conversations() as store:
                if store.remove(cid):
                    return
        raise IndexMissingError(f"no conversation {cid!r}", "`loom conversations` lists them")

    def clear_conversations(self) -> int:
        """Delete every kept conversation; how many there were."""
        if not self._any_conversations():
            return 0
        with self.kept_conversations() as store:
            return store.clear()

    def agent_request(self, question: Any, conversation_id: Any = None) -> str:
        """What `ask --agent` would send first (tools, instructions, turns), calling
        nothing: `--show-context`."""
        question = _text("question", question)
        cid = None if conversation_id is None else self.conversation_for(conversation_id)
        return self.ask_session().agent_request(question, cid)
