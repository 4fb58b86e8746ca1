"""Run document extraction (PDF, HTML, office, e-book) in worker processes, with a time
and memory limit per file.

A PDF can make any parser loop or crawl; a worker that overruns its limit is killed
and replaced, and the file is reported as failed. Workers also use the second core
while the main process writes to SQLite.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from loomcli.errors import ExtractionError
from loomcli.extract import Extracted
from loomcli.extract.ocr import OcrSettings

BASE_TIMEOUT_S = 30.0
TIMEOUT_S_PER_MB = 5.0
# Address space of one worker: a PDF bomb (4 MB that inflates to 1 GB) reached 12 GB
# across the worker tree before its time limit; with this cap it fails in a second.
# Real manuals need far less (the 117-page sample peaks at 38 MB).
WORKER_MEMORY = 512 << 20
# A page recognised by OCR moves the file's deadline to this long from then: a scanned
# book may take minutes, but no single page more than this.
OCR_PAGE_S = 60.0
# ...and no file more than this in all, however many pages it has: each page's heartbeat
# moved the deadline on, so a 20-page scan of noise took 406 s against a 30 s limit while
# its scan held the write lock. Ten minutes is a 150-page book on a laptop core.
OCR_FILE_S = 600.0
PAGE_DONE = "page done"  # a worker's heartbeat between OCR pages


def timeout_for(size: int) -> float:
    return BASE_TIMEOUT_S + TIMEOUT_S_PER_MB * size / 1e6


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # Windows: the time limit still applies
        return
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit: keep it
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))


def repair_hint(path: str) -> str:
    """What to do with a file of this kind that could not be extracted."""
    kind = path.rpartition(".")[2].lower()
    if kind == "pdf":
        return "open it in a PDF viewer and save a repaired copy"
    if kind in ("html", "htm"):
        return "split it into smaller pages, or add it to .loomignore"
    if kind in ("docx", "odt", "pptx", "epub"):
        return "open it in its program and save a repaired copy, or add it to .loomignore"
    return "add it to .loomignore"


def _too_big(path: str) -> ExtractionError:
    what = ("a PDF bomb, or a damaged file" if path.lower().endswith(".pdf") else
            "a ZIP bomb, or a damaged file" if path.rpartition(".")[2].lower() in
            ("docx", "odt", "pptx", "epub") else "too large, or a damaged file")
    return ExtractionError(f"the file needs more than {WORKER_MEMORY >> 20} MB of memory to "
                           f"extract ({what})", repair_hint(path))


def _memory_trimmer() -> Callable[[], Any]:
    """glibc's malloc_trim: hands the heap a large document left free back to the system
    (glibc keeps it otherwise; measured on the texlive manuals: the scan's process tree
    peaked at 809-827 MB instead of 950-960 MB, its largest worker 350 MB instead of
    404-419 MB). A no-op elsewhere."""
    try:
        import ctypes

        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return lambda: None
    return lambda: trim(0)


def _worker(conn: Connection, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory()
    give_back_memory = _memory_trimmer()
    from loomcli.extract.documents import extract_file

    while True:
        # Wake up now and then: a worker whose scan was killed (kill -9) must not linger.
        while not conn.poll(1.0):
            if os.getppid() != parent:
                return
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        key, path, ocr = job

        def page_recognised(key: Any = key) -> None:
            conn.send((key, PAGE_DONE))  # OCR is slow: each page earns its own time

        try:
            result: Any = extract_file(path, ocr, page_recognised)
        except ExtractionError as exc:
            result = type(exc)(exc.message, exc.hint, exc.ocr)  # its kind too: NoTextError skips
        except MemoryError:
            result = _too_big(path)
        except Exception as exc:  # a parser bug must not stop the scan
            result = ExtractionError(f"extraction failed ({type(exc).__name__}: {exc})")
        conn.send((key, result))
        del result
        give_back_memory()


def worker_context() -> Any:
    # Workers must not inherit the scan's open files (the index, its write lock): a plain
    # fork would hand them over, and a worker outliving a killed scan would keep the lock.
    # forkserver starts clean workers quickly where it exists; spawn elsewhere.
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["loomcli.extract.pdf", "loomcli.extract.documents"])
        _start_forkserver()
        return ctx
    return multiprocessing.get_context("spawn")


def _start_forkserver() -> None:
    """Start the forkserver without the working folder on its `sys.path`. Python starts it
    as `python -c …`, which puts the working folder first, and (3.11–3.13) it imports the
    preloaded modules from there: `loom scan` run inside a folder holding a `loomcli/`
    (a checkout, a download being indexed) ran that folder's code. PYTHONSAFEPATH (3.11+)
    leaves the folder off; it is set for the server's start only."""
    from multiprocessing import forkserver

    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


class _Slot:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.job: tuple[Any, str, float] | None = None  # key, path, deadline

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                self.proc.kill()
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def extract_documents(jobs: Iterable[tuple[Any, str, int]], workers: int | None = None,
                      limit: Callable[[int], float] = timeout_for,
                      ocr: OcrSettings | None = None, ocr_file_s: float = OCR_FILE_S,
                      ) -> Iterator[tuple[Any, Extracted | ExtractionError]]:
    """Extract (key, path, size) jobs; yield (key, result) as each finishes.

    `limit(size)` is the time a file of that many bytes may take; `ocr` says whether and
    in which languages pages without text are recognised. A page of OCR done moves the
    file's deadline on by OCR_PAGE_S, never past `ocr_file_s` from the file's start.

    The largest files go first: one big manual handed out last kept one worker busy
    alone at the end, and its text was stored after all the others. A thread of this
    process hands out the jobs and takes the results, so a worker never waits while
    the caller stores a result; at most one result per worker waits for the caller.
    """
    pending = deque(sorted(jobs, key=lambda job: -job[2]))  # stable: else in given order
    if not pending:
        return
    feeder = _Feeder(pending, workers, limit, ocr, ocr_file_s)
    try:
        yield from feeder.results()
    finally:
        feeder.stop()


_DONE = object()


class _Feeder:
    """The thread that keeps the workers busy (see extract_documents)."""

    def __init__(self, pending: deque[tuple[Any, str, int]], workers: int | None,
                 limit: Callable[[int], float], ocr: OcrSettings | None,
                 ocr_file_s: float) -> None:
        self.pending, self.limit, self.ocr, self.ocr_file_s = pending, limit, ocr, ocr_file_s
        self.ctx = worker_context()
        self.count = max(1, min(workers or os.cpu_count() or 1, len(pending)))
        self.out: queue.Queue[Any] = queue.Queue()
        self.unread = 0  # results put out and not yet taken by the caller
        self.lock = threading.Lock()
        self.stopping = False
        self.woken, self.wake = self.ctx.Pipe(duplex=False)  # the caller took one, or stops
        self.slots = [_Slot(self.ctx) for _ in range(self.count)]
        self.thread = threading.Thread(target=self._run, name="loom-extract", daemon=True)
        self.thread.start()

    def results(self) -> Iterator[tuple[Any, Extracted | ExtractionError]]:
        while True:
            got = self.out.get()
            if got is _DONE:
                return
            if isinstance(got, BaseException):
                raise got
            with self.lock:
                self.unread -= 1
            self.wake.send_bytes(b"")
            yield got

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
        with contextlib.suppress(OSError):
            self.wake.send_bytes(b"")
        self.thread.join()
        self.wake.close()
        self.woken.close()

    def _put(self, result: Any) -> None:
        with self.lock:
            self.unread += 1
        self.out.put(result)

    def _run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:  # the caller raises it
            self.out.put(exc)
        else:
            self.out.put(_DONE)
        finally:
            for slot in self.slots:
                slot.stop(kill=slot.job is not None)

    def _feed(self) -> None:
        pending, slots, limit, ctx = self.pending, self.slots, self.limit, self.ctx
        size_of = {key: size for key, _, size in pending}
        started: dict[Any, float] = {}
        while pending or any(s.job for s in slots):
            with self.lock:
                if self.stopping:
                    return
                room = self.unread < self.count
            for i, slot in enumerate(slots):
                if room and slot.job is None and pending:
                    key, path, size = pending.popleft()
                    started[key] = time.monotonic()
                    slot.job = (key, path, started[key] + limit(size))
                    try:
                        slot.conn.send((key, path, self.ocr))
                    except OSError:  # the worker died: replace it and retry once
                        slot.stop(kill=True)
                        slots[i] = slot = _Slot(ctx)
                        slot.job = (key, path, time.monotonic() + limit(size))
                        slot.conn.send((key, path, self.ocr))
            busy = [s for s in slots if s.job]
            timeout = None
            if busy:
                deadline = min(s.job[2] for s in busy if s.job)
                timeout = max(0.0, deadline - time.monotonic())
            ready = wait([self.woken, *(s.conn for s in busy)], timeout=timeout)
            while self.woken.poll():
                self.woken.recv_bytes()
            for i, slot in enumerate(slots):
                if slot.job is None:
                    continue
                key, path, slot_deadline = slot.job
                if slot.conn in ready:
                    try:
                        got_key, result = slot.conn.recv()
                        if isinstance(result, str) and result == PAGE_DONE:
                            cap = started[key] + max(self.ocr_file_s, limit(size_of[key]))
                            slot.job = (key, path, min(cap, max(slot_deadline,
                                                                time.monotonic() + OCR_PAGE_S)))
                            continue
                    except (EOFError, OSError):
                        # The worker died (a crash in the PDF library, or out of memory).
                        slot.stop(kill=True)
                        slots[i] = _Slot(ctx)
                        self._put((key, ExtractionError(
                            "the extraction library crashed on this file (or needed more than "
                            f"{WORKER_MEMORY >> 20} MB of memory)", repair_hint(path))))
                        continue
                    slot.job = None
                    self._put((got_key, result))
                elif time.monotonic() >= slot_deadline:
                    slot.stop(kill=True)
                    slots[i] = _Slot(ctx)
                    took = slot_deadline - started[key]
                    if took > limit(size_of[key]):  # OCR pages had moved the deadline on
                        self._put((key, ExtractionError(
                            f"OCR of this file took longer than {took:.0f}s and was stopped",
                            "leave it out with .loomignore, or turn [ocr] off for it",
                            ocr=True)))
                    else:
                        self._put((key, ExtractionError(
                            f"extraction took longer than {limit(size_of[key]):.0f}s and "
                            "was stopped",
                            "the file may be pathological; add it to .loomignore",
                        )))
