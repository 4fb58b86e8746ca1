"""Give vectors to the files that lack current ones: the last step of a scan.

Runs after the text is committed (text is searchable before its vectors exist), in
batches committed every BATCH_SECONDS, so Ctrl-C or kill -9 loses at most one batch and
the next scan resumes with the files still pending. The built-in model runs in worker
processes (one per core, at most four); a server is sent batches from this process.
A failing provider stops this step only: the scan's text stays indexed, the files stay
pending, and the report says how many and why.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from loomcli.embeddings import (
    CHUNK_CHARS,
    CHUNKS_PER_FILE_MAX,
    EmbeddingsError,
    builtin,
    passages,
    pool_threads,
    quantize,
)
from loomcli.extract.pool import worker_context

if TYPE_CHECKING:
    from loomcli.embeddings import Embedder
    from loomcli.store.seam import IndexStore as Store

BATCH_SECONDS = 2.0
FEW_FILES = 8  # this many files or fewer are embedded in the scan's own process
GROUP_PASSAGES = 32  # passages per job: one request to a server, one call in a worker
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
    # One BLAS thread per worker: the workers already fill the cores, and more threads
    # than cores, in workers forked from the scan, gave 12 passages/s on 2 cores; clean
    # workers (forkserver) with one thread each, 180.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = "1"


def _embed_piece(model: str, texts: list[str]) -> tuple[int, bytes, bytes]:
    global _worker_model
    if _worker_model is None or _worker_model.model != model:
        _worker_model = builtin(model, bulk=True)
    vectors = _worker_model.embed(texts)
    q, scales = quantize(vectors)
    return int(vectors.shape[1]), q, scales


class _InProcess:
    """The same job interface over an embedder in this process (servers, one core)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def submit(self, fn: Callable[..., Any], model: str, texts: list[str]) -> Future[Any]:
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


def _files(store: Store, ids: list[int]) -> Iterator[tuple[int, bytes, list[str]]]:
    """(file id, its passages' byte ranges as int32 pairs, their texts). A note's
    passages start after its front matter (metadata, not text)."""
    import numpy as np

    for fid in ids:
        body_at = store.body_start(fid)[0]
        text = store.text_bytes(fid, body_at, TEXT_BYTES).decode("utf-8", "ignore")
        spans, texts = passages(text)
        spans = [(a + body_at, b + body_at) for a, b in spans]
        yield fid, np.asarray(spans, dtype=np.int32).tobytes(), texts


class _Writer:
    """Collects each file's vectors as its jobs finish, in order, and stores a file once
    all of them are in; commits every BATCH_SECONDS."""

    def __init__(self, store: Store, model: str, report: EmbedReport, total: int,
                 progress: Callable[[int, int, str], None] | None,
                 clock: Callable[[], float]) -> None:
        self.store, self.model, self.report, self.total = store, model, report, total
        self.progress, self.clock = progress, clock
        self.files: dict[int, tuple[bytes, int, list[tuple[int, bytes, bytes]]]] = {}
        self.since = clock()
        self.dim: int | None = None  # the size of the vectors made so far

    def expect(self, fid: int, span_bytes: bytes, pieces: int) -> None:
        self.files[fid] = (span_bytes, pieces, [])

    def take(self, result: tuple[int, bytes, bytes], counts: list[tuple[int, int]]) -> None:
        dim, q, scales = result
        if self.dim is None:
            self.dim = dim
        elif dim != self.dim:  # the server changed models in the middle of a scan
            raise EmbeddingsError(f"the embeddings server answered with vectors of {dim} "
                                  f"numbers after {self.dim}", "run loom scan again")
        pos = 0
        for fid, n in counts:
            span_bytes, pieces, parts = self.files[fid]
            parts.append((dim, q[pos * dim:(pos + n) * dim], scales[pos * 4:(pos + n) * 4]))
            pos += n
            if len(parts) == pieces:
                del self.files[fid]
                self.store.put_vectors(fid, self.model, dim, span_bytes,
                                       b"".join(p[1] for p in parts),
                                       b"".join(p[2] for p in parts))
                self.report.embedded += 1
                self.report.passages += len(span_bytes) // 8
                if self.progress:
                    self.progress(self.report.embedded, self.total, "vectors")
        if self.clock() - self.since >= BATCH_SECONDS:
            self.store.commit()
            self.store.begin()
            self.since = self.clock()


def _current_dim(store: Store, embedder: Embedder) -> int | None:
    """The size of the vectors a server's model gives now, when the index holds some of
    that model (None otherwise, and for the built-in model, whose size never changes):
    a model re-pulled under the same name may answer with another size, and the vectors
    of the old size are then made again. One short request."""
    if embedder.provider == "local" or not any(store.vector_dims(embedder.identity)):
        return None
    return int(embedder.embed(["size"]).shape[1])


def embed_pending(store: Store, embedder: Embedder,
                  progress: Callable[[int, int, str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> EmbedReport:
    model = embedder.identity
    report = EmbedReport(model)
    start = clock()
    try:
        dim = _current_dim(store, embedder)
        ids = store.needing_vectors(model, dim)
    except EmbeddingsError as exc:
        report.error = str(exc)
        report.pending = len(store.needing_vectors(model))
        return report
    if not ids:
        return report
    # Worker processes pay for starting and loading the model: worth it for a scan, not
    # for the few files a `loom watch` batch changes.
    workers = pool_threads() if embedder.provider == "local" and len(ids) > FEW_FILES else 1
    pool: Any = (ProcessPoolExecutor(workers, mp_context=worker_context(),
                                     initializer=_start_worker)
                 if workers > 1 else _InProcess(embedder))
    writer = _Writer(store, model, report, len(ids), progress, clock)
    # Jobs of GROUP_PASSAGES passages: small files share one, a long one is split.
    inflight: deque[tuple[Future[Any], list[tuple[int, int]]]] = deque()
    group: list[tuple[int, list[str]]] = []

    def submit() -> None:
        texts = [t for _, part in group for t in part]
        inflight.append((pool.submit(_embed_piece, embedder.model, texts),
                         [(fid, len(part)) for fid, part in group]))
        group.clear()
        while len(inflight) > 2 * workers:
            fut, counts = inflight.popleft()
            writer.take(fut.result(), counts)

    store.begin()
    try:
        for fid, span_bytes, texts in _files(store, ids):
            if not texts:  # white space only: nothing to embed, and nothing pending
                store.put_vectors(fid, model, 0, b"", b"", b"")
                continue
            writer.expect(fid, span_bytes, -(-len(texts) // GROUP_PASSAGES))
            for i in range(0, len(texts), GROUP_PASSAGES):
                part = texts[i:i + GROUP_PASSAGES]
                if sum(len(p) for _, p in group) + len(part) > GROUP_PASSAGES:
                    submit()
                group.append((fid, part))
        if group:
            submit()
        while inflight:
            fut, counts = inflight.popleft()
            writer.take(fut.result(), counts)
        store.commit()
    except EmbeddingsError as exc:
        store.commit()  # what was embedded before the failure is kept
        report.error = str(exc)
    except BaseException:
        if store.in_transaction:
            store.commit()  # finished files keep their vectors
        raise
    finally:
        pool.shutdown(cancel_futures=True)
    report.pending = len(store.needing_vectors(model, writer.dim or dim))
    report.seconds = clock() - start
    return report
