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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from loomcli.config import Config
from loomcli.errors import IndexMissingError, LoomError, QueryError

if TYPE_CHECKING:
    from loomcli.ask import Answer, Prompt
    from loomcli.grep import GrepResult
    from loomcli.indexer import OnChange, Progress, ScanReport
    from loomcli.providers import Provider
    from loomcli.store import FileInfo, Hit, Store

# Defaults and limits of every edge.
SEARCH_LIMIT, SEARCH_LIMIT_MAX = 10, 500
GREP_LIMIT, GREP_LIMIT_MAX = 50, 500
GREP_CONTEXT_MAX = 50
EXCERPT_CHARS, EXCERPT_CHARS_MIN, EXCERPT_CHARS_MAX = 2000, 200, 200_000
EXCERPT_HEAD_CHARS = 1200  # at most a quarter of excerpt_chars, as in ask
TOP_K_MAX = 50
SEARCH_MODES = ("auto", "bm25", "semantic", "hybrid")
QUERY_EMBED_CHARS = 2000  # what of a query is embedded (a passage's worth; bounded time)
QUERY_CHARS_MAX = 100_000  # a query, pattern or question longer than this is refused
GLOBS_MAX = 100

_EMBEDDERS: dict[tuple[str, ...], Any] = {}
_EMBEDDERS_LOCK = threading.Lock()

CORPUS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# -- argument checks ----------------------------------------------------------------------

def _text(name: str, value: Any, *, required: bool = True) -> str:
    if not isinstance(value, str):
        raise QueryError(f"{name} must be a string")
    if required and not value.strip():
        raise QueryError(f"{name} must not be empty")
    if len(value) > QUERY_CHARS_MAX:
        raise QueryError(f"{name} is longer than {QUERY_CHARS_MAX:,} characters",
                         "shorten it")
    return value


def _int(name: str, value: Any, default: int | None, lo: int, hi: int | None = None
         ) -> int | None:
    """An integer in [lo, hi]: None gives the default, past hi is clamped, below lo refused."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueryError(f"{name} must be a whole number, got {_show(value)}")
    if value < lo:
        raise QueryError(f"{name} must be {lo} or more, got {value}")
    return min(value, hi) if hi is not None else value


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise QueryError(f"{name} must be true or false, got {_show(value)}")
    return value


def _strings(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise QueryError(f"{name} must be a string or a list of strings")
    if len(value) > GLOBS_MAX:
        raise QueryError(f"{name}: at most {GLOBS_MAX} entries")
    return [_text(name, v) for v in value]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_index_path(path: Any) -> str:
    """A plain index path: no `..` component, not absolute (paths from clients)."""
    clean = _text("path", path).replace("\\", "/")
    if clean.startswith("/") or ".." in PurePosixPath(clean).parts or re.match(r"^[A-Za-z]:",
                                                                               clean):
        raise QueryError(f"{path!r} escapes the index",
                         "use a path as `loom files` / loom_list_files / GET /files shows it")
    return clean


# -- results ------------------------------------------------------------------------------

@dataclass
class SearchHit:
    path: str
    title: str
    score: float
    snippet: str  # with store.SNIPPET_START/END around matched words
    content_len: int
    match: str = "bm25"  # "bm25" | "semantic" | "both"
    content: str | None = None  # whole text, or head + best passage (excerpt_chars)
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        from loomcli.store import plain_snippet

        out: dict[str, Any] = {"path": self.path, "title": self.title,
                               "score": round(self.score, 4),
                               "snippet": plain_snippet(self.snippet),
                               "content_len": self.content_len, "match": self.match}
        if self.content is not None:
            out["content"] = self.content
            out["truncated"] = self.truncated
        return out


@dataclass
class SearchResult:
    hits: list[SearchHit]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hits": [h.to_dict() for h in self.hits]}
        if self.warnings:
            out["warnings"] = self.warnings
        return out


@dataclass
class TextRange:
    path: str
    offset: int
    length: int
    content_len: int
    content: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FileList:
    files: list[FileInfo]

    def to_dict(self) -> dict[str, Any]:
        return {"files": [f.to_dict() for f in self.files]}


@dataclass
class Status:
    config: str
    config_exists: bool
    index: str
    counts: dict[str, Any] = field(default_factory=dict)
    engines: dict[str, str] = field(default_factory=dict)  # what extracts each kind

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "index": self.index, **self.counts,
                "engines": self.engines}


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


def _among(store: Store, path: str | None, globs: list[str]) -> list[int] | None:
    """The files a search may return: `path` (a file, or a folder and what it holds) and
    the globs, as grep selects them; None for every file."""
    if path is None and not globs:
        return None
    from loomcli.grep import _selected  # ripgrep's rule for -g, as grep applies it

    chosen = store.paths()
    if path is not None:
        try:
            only = store.resolve(path).id
            chosen = [(fid, shown) for fid, shown in chosen if fid == only]
        except IndexMissingError:
            folder = path.rstrip("/") + "/"
            chosen = [(fid, shown) for fid, shown in chosen if shown.startswith(folder)]
            if not chosen:
                raise
    if globs:
        from loomcli import ignore

        patterns = ignore.parse_lines(globs, source="--glob")
        chosen = [(fid, shown) for fid, shown in chosen if _selected(shown, patterns)]
    return [fid for fid, _ in chosen]


# -- connections kept by servers -----------------------------------------------------------

_KEPT = threading.local()  # per thread: {index path: ((st_dev, st_ino), Store)}


def _kept_store(path: Path) -> Store:
    """This thread's open read connection to the index at `path`, reopened when the file
    was replaced (`scan --rebuild`) or removed."""
    import os

    from loomcli.store import Store

    kept: dict[str, tuple[tuple[int, int], Store]] = _KEPT.__dict__.setdefault("stores", {})
    try:
        st = os.stat(path)
    except OSError:
        _drop_kept_store(path)
        return Store.open(path)  # raises the usual "no index" error
    identity = (st.st_dev, st.st_ino)
    entry = kept.get(str(path))
    if entry is not None and entry[0] == identity:
        entry[1].forget_roots()  # a scan may have added a folder since
        return entry[1]
    _drop_kept_store(path)
    store = Store.open(path)
    kept[str(path)] = (identity, store)
    return store


def _drop_kept_store(path: Path) -> None:
    entry = _KEPT.__dict__.get("stores", {}).pop(str(path), None)
    if entry is not None:
        entry[1].close()


# -- the corpus ---------------------------------------------------------------------------

@dataclass
class Corpus:
    """One index with its config: the default one, or DIR/<name>/ of `serve --corpus-root`."""

    config: Config
    roots: list[Path] | None = None  # scan these instead of the config's notes_dirs
    db_path: Path | None = None
    # Servers (HTTP, MCP) keep one read connection per thread and index instead of
    # opening the index for every request (measured: a fifth of a search's time).
    keep_open: bool = False

    @classmethod
    def default(cls, config_override: str | None = None) -> Corpus:
        from loomcli import config as config_mod

        return cls(config_mod.load(config_override))

    @classmethod
    def named(cls, corpus_root: Path, name: Any, base: Config, *, keep_open: bool = False
              ) -> Corpus:
        if not isinstance(name, str) or not CORPUS_NAME.match(name):
            raise QueryError(f"invalid corpus name {_show(name)}",
                             "names are 1-64 letters, digits, '_' or '-'")
        folder = corpus_root / name
        if not (folder / "notes").is_dir():
            raise IndexMissingError(f"no corpus named {name!r}",
                                    f"create <corpus-root>/{name}/notes and scan it")
        return cls(base, roots=[folder / "notes"], db_path=folder / "index.db",
                   keep_open=keep_open)

    @property
    def index_path(self) -> Path:
        return self.db_path or self.config.db_path

    @contextmanager
    def store(self, *, create: bool = False) -> Iterator[Store]:
        import sqlite3

        from loomcli.store import Store, explain

        if self.keep_open and not create:
            store = _kept_store(self.index_path)
            try:
                yield store
            except sqlite3.DatabaseError as exc:
                _drop_kept_store(self.index_path)
                raise explain(exc, self.index_path) from None
            return
        with Store.open(self.index_path, create=create) as store:
            try:
                yield store
            except sqlite3.DatabaseError as exc:  # damaged, full, read-only: say what to do
                raise explain(exc, self.index_path) from None

    # -- reading ------------------------------------------------------------------------

    def search(self, query: Any, limit: Any = None, excerpt_chars: Any = None,
               mode: Any = None, *, path: Any = None, globs: Any = None) -> SearchResult:
        """Ranked files; with excerpt_chars, each hit carries its text cut like ask's.
        mode: auto (hybrid when embeddings are enabled, else bm25) | bm25 | semantic |
        hybrid. `path` (a file or folder) and `globs` (grep's -g) narrow the files."""
        query = _text("query", query, required=False)
        n = _int("limit", limit, SEARCH_LIMIT, 1, SEARCH_LIMIT_MAX) or SEARCH_LIMIT
        chars = _int("excerpt_chars", excerpt_chars, None, 0, EXCERPT_CHARS_MAX)  # 0: none
        chosen = self._mode(mode)
        patterns = _strings("glob", globs)
        where = None if path is None else check_index_path(path)
        with self.store() as store:
            among = _among(store, where, patterns)
            if among == []:
                return SearchResult([])
            found, warnings, query_vector = self._rank(store, query, n, chosen, among=among)
            hits = [SearchHit(h.path, h.title, h.score, h.snippet, h.content_len, how)
                    for h, how in found]
            if chars:
                from loomcli.excerpt import SCAN_BYTES, excerpt

                chars = max(EXCERPT_CHARS_MIN, chars)
                for hit, (h, _) in zip(hits, found, strict=True):
                    text = store.text_bytes(h.file_id, 0, SCAN_BYTES).decode("utf-8", "ignore")
                    near = self._near(store, h.file_id, text, query_vector)
                    part = excerpt(text, query, chars, min(EXCERPT_HEAD_CHARS, chars // 4),
                                   near=near)
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
              among: list[int] | None = None
              ) -> tuple[list[tuple[Hit, str]], list[str], Any]:
        """(hit, how it matched) best first, warnings, and the query's vector (or None).
        The plan is retrieve.py's; a failing embeddings provider leaves BM25 alone, with
        a warning. `operator`: how BM25 combines the words (OR for ask's questions);
        `among`: only these files (--glob, --path)."""
        from loomcli import retrieve
        from loomcli.store import query_words

        if mode == "bm25":
            ranked = retrieve.bm25(store, query, n, operator, among)
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
        hits = store.hits([(r.file_id, r.score) for r in ranked], query, near)
        return [(h, how[h.file_id]) for h in hits]

    def _meaning(self, store: Store, query: str) -> tuple[Any, Any]:
        """The query's vector and the index's vectors, or (None, None) without any."""
        from loomcli import semantic

        embedder = self._embedder()
        index = semantic.vector_index(store, embedder.identity)
        if len(index) == 0 or not query.strip():
            return None, None
        return embedder.embed([query[:QUERY_EMBED_CHARS]])[0], index

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
        from loomcli import semantic
        from loomcli.embeddings import char_spans

        scored = semantic.passage_scores(store, file_id, self._embedder().identity, vector)
        return char_spans(text, scored)

    def grep(self, pattern: Any, *, path: Any = None, globs: Any = None, context: Any = None,
             case_sensitive: Any = False, limit: Any = None) -> GrepResult:
        from loomcli.grep import grep

        pattern = _text("pattern", pattern)
        with self.store() as store:
            return grep(store, pattern,
                        path=None if path is None else check_index_path(path),
                        globs=_strings("glob", globs),
                        context=_int("context", context, 0, 0, GREP_CONTEXT_MAX) or 0,
                        case_sensitive=_bool("case_sensitive", case_sensitive),
                        limit=_int("limit", limit, GREP_LIMIT, 1, GREP_LIMIT_MAX)
                        or GREP_LIMIT)

    def get(self, path: Any, offset: Any = 0, length: Any = None) -> TextRange:
        start = _int("offset", offset, 0, 0) or 0
        count = _int("length", length, None, 0)
        with self.store() as store:
            return read_range(store, check_index_path(path), start, count)

    def files(self) -> FileList:
        with self.store() as store:
            return FileList(store.list_files())

    def status(self) -> Status:
        from loomcli.extract import ocr, pdf

        reader = ocr.settings(self.config.get("ocr.enabled"), self.config.get("ocr.languages"))
        out = Status(str(self.config.path), self.config.exists, str(self.index_path),
                     engines={"pdf": pdf.engine(),
                              "ocr": f"tesseract {reader.languages}" if reader.enabled
                              else "off"})
        if self.index_path.exists():
            with self.store() as store:
                out.counts = store.status()
                out.counts["vectors"] = self._vector_status(store)
        else:
            out.counts = {"roots": [], "files": 0, "notes": 0, "pdfs": 0, "documents": 0,
                          "failed": 0,
                          "text_bytes": 0, "index_bytes": 0, "last_scan": None,
                          "vectors": self._vector_status(None)}
        return out

    def _vector_status(self, store: Store | None) -> dict[str, Any]:
        """Which model the config names, how many files have its vectors, how many still
        need them, and how many hold another model's (stale: replaced by the next scan)."""
        from loomcli import embeddings

        chosen = embeddings.settings(self.config)
        counts = store.vector_counts() if store else {}
        current = counts.get(chosen.identity, 0)
        return {"enabled": chosen.enabled, "model": chosen.identity, "files": current,
                "pending": (store.files_with_text() - current) if store else 0,
                "stale": sum(n for m, n in counts.items() if m != chosen.identity)}

    # -- writing ------------------------------------------------------------------------

    def scan(self, dirs: Sequence[str | Path] = (), *, force: Any = False, rebuild: Any = False,
             progress: Progress | None = None, on_wait: Callable[[str], None] | None = None,
             on_change: OnChange | None = None) -> ScanReport:
        """Index DIRs (else this corpus's roots, the config's notes_dirs, or the roots
        already indexed). The roots are checked before the index is created or opened,
        so a bad folder leaves nothing behind."""
        from loomcli import indexer

        force = _bool("force", force)
        roots = self._set_aside(dirs) if _bool("rebuild", rebuild) else self.roots_for(dirs)
        with self.store(create=True) as store:
            return indexer.Indexer(store, self.config, progress=progress, on_wait=on_wait,
                                   on_change=on_change).scan(roots, force=force)

    def roots_for(self, dirs: Sequence[str | Path] = ()) -> list[Path]:
        """The folders a scan of DIRs covers, each checked (RootError when missing)."""
        from loomcli import indexer

        chosen = list(dirs) or list(self.roots or [])
        if chosen or not self.index_path.exists():
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
        path = self.index_path
        if path.exists():
            path.replace(path.with_name(path.name + ".damaged"))
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return roots

    def forget(self, folder: str) -> int:
        """Drop an indexed folder and its files from the index; how many files went."""
        from loomcli import indexer

        with self.store() as store:
            return indexer.forget(store, folder)

    # -- ask ----------------------------------------------------------------------------

    def prompt(self, question: Any, top_k: Any = None, mode: Any = None) -> Prompt | None:
        """Exactly what ask would send, or None when no indexed file matches."""
        from loomcli import ask

        question = _text("question", question)
        k = _int("top_k", top_k, self.config.get("ask.top_k"), 1, TOP_K_MAX) or 1
        mode = self._mode(mode)
        with self.store() as store:
            found, warnings, vector = self._rank(store, question, k * 2, mode, "OR")
            prompt = ask.build_prompt(
                store, question, [h for h, _ in found], top_k=k,
                budget=self.config.get("ask.file_budget_chars"),
                head_chars=self.config.get("ask.head_chars"),
                near=lambda fid, text: self._near(store, fid, text, vector))
        if prompt is not None:
            prompt.warnings = warnings
        return prompt

    def ask(self, question: Any, top_k: Any = None, *, provider: Provider | None = None,
            on_text: Callable[[str], None] | None = None, mode: Any = None,
            on_warning: Callable[[str], None] | None = None) -> Answer:
        """One LLM call over the best files. Nothing matching: an empty Answer (no call)."""
        from loomcli import ask, providers

        prompt = self.prompt(question, top_k, mode)
        for warning in prompt.warnings if prompt and on_warning else ():
            on_warning(warning)  # type: ignore[misc]
        if prompt is None:
            return ask.Answer("", [], [])
        return ask.answer(prompt, provider or providers.from_config(self.config), on_text)
