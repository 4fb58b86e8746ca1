"""Give vectors to the files that lack current ones: the last step of a scan.

Runs after the text is committed (text is searchable before its vectors exist), in
batches committed every BATCH_SECONDS, so Ctrl-C or kill -9 loses at most one batch and
the next scan resumes with the files still pending. The built-in model runs in worker
processes (one per core, at most four); a server is sent batches from this process.
A failing provider stops this step only: the scan's text stays indexed, the files stay
pending, and the report says how many and why.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from loomcli.embeddings import (
    CHUNK_CHARS,
    CHUNKS_PER_FILE_MAX,
    Embedder,
    EmbeddingsError,
    passages,
    pool_threads,
    quantize,
)
from loomcli.store import Store

BATCH_SECONDS = 2.0
PIECE_PASSAGES = 64  # passages per job sent to a worker
TEXT_BYTES = CHUNKS_PER_FILE_MAX * CHUNK_CHARS * 4  # what is read of one text at most


@dataclass
class EmbedReport:
    model: str
    embedded: int = 0  # files given vectors by this scan
    passages: int = 0
    pending: int = 0  # files still without vectors of this model
    seconds: float = 0.0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        text = (f"vectors: {self.embedded} files ({self.passages} passages) in "
                f"{self.seconds:.1f}s by {self.model}")
        if self.pending:
            text += f"; {self.pending} files still without vectors"
        return text


# -- worker processes (the built-in model) ----------------------------------------------

_worker_model: Any = None


def _start_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the scan's process handles Ctrl-C


def _embed_piece(texts: list[str]) -> tuple[int, bytes, bytes]:
    global _worker_model
    if _worker_model is None:
        from loomcli.embeddings.local import LocalUSE

        _worker_model = LocalUSE(bulk=True)
    vectors = _worker_model.embed(texts)
    q, scales = quantize(vectors)
    return int(vectors.shape[1]), q, scales


class _InProcess:
    """The same job interface over an embedder in this process (servers, one core)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def submit(self, fn: Callable[..., Any], texts: list[str]) -> Future[Any]:
        fut: Future[Any] = Future()
        try:
            vectors = self.embedder.embed(texts)
            q, scales = quantize(vectors)
            fut.set_result((int(vectors.shape[1]), q, scales))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller via the future
            fut.set_exception(exc)
        return fut

    def shutdown(self, **_: Any) -> None:
        pass


def _jobs(store: Store, ids: list[int]) -> Iterator[tuple[int, bytes, list[list[str]]]]:
    for fid in ids:
        text = store.text_bytes(fid, 0, TEXT_BYTES).decode("utf-8", "ignore")
        spans, texts = passages(text)
        if not texts:
            continue
        import numpy as np

        span_bytes = np.asarray(spans, dtype=np.int32).tobytes()
        yield fid, span_bytes, [texts[i:i + PIECE_PASSAGES]
                                for i in range(0, len(texts), PIECE_PASSAGES)]


def embed_pending(store: Store, embedder: Embedder,
                  progress: Callable[[int, int, str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> EmbedReport:
    model = embedder.identity
    report = EmbedReport(model)
    ids = store.needing_vectors(model)
    if not ids:
        return report
    start = clock()
    workers = pool_threads()
    pool: Any = (ProcessPoolExecutor(workers, initializer=_start_worker)
                 if embedder.provider == "local" and workers > 1 else _InProcess(embedder))
    done = 0
    inflight: deque[tuple[int, bytes, list[Future[Any]]]] = deque()
    since = clock()
    store.conn.execute("BEGIN IMMEDIATE")
    try:
        def finish_one() -> None:
            nonlocal done, since
            fid, span_bytes, futures = inflight.popleft()
            parts = [f.result() for f in futures]
            dim = parts[0][0]
            store.put_vectors(fid, model, dim, span_bytes, b"".join(p[1] for p in parts),
                              b"".join(p[2] for p in parts))
            done += 1
            report.embedded += 1
            report.passages += len(span_bytes) // 8
            if progress:
                progress(done, len(ids), "vectors")
            if clock() - since >= BATCH_SECONDS:
                store.conn.execute("COMMIT")
                store.conn.execute("BEGIN IMMEDIATE")
                since = clock()

        for fid, span_bytes, pieces in _jobs(store, ids):
            inflight.append((fid, span_bytes, [pool.submit(_embed_piece, p) for p in pieces]))
            while sum(len(f) for _, _, f in inflight) > 4 * workers:
                finish_one()
        while inflight:
            finish_one()
        store.conn.execute("COMMIT")
    except EmbeddingsError as exc:
        store.conn.execute("COMMIT")  # what was embedded before the failure is kept
        report.error = str(exc)
    except BaseException:
        if store.conn.in_transaction:
            store.conn.execute("COMMIT")  # finished files keep their vectors
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    report.pending = len(store.needing_vectors(model))
    report.seconds = clock() - start
    return report
