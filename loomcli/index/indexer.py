"""discover → extract → store, incrementally; returns the scan report.

Every check that can refuse the scan (missing root, malformed ignore pattern) runs
before the first write. Writes are committed in batches; each file's change is whole
inside one batch, so an interrupted or killed scan leaves a consistent index and the
next scan completes the work. grep's trigram index is filled after the text, by the scan
or by a process of its own (grep_index.py).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from loomcli.config import Config
from loomcli.errors import ExtractionError, NoTextError, RootError
from loomcli.extract import ACCESS_ERROR, Extracted, open_regular_file, read_regular_file
from loomcli.extract.text import extract_note
from loomcli.index import discover, grep_index
from loomcli.store.rows import FileRow, Root

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:  # OCR's module is imported once a scan meets a document
    from typing import Any

    from loomcli.extract.ocr import OcrSettings
    from loomcli.store.seam import IndexStore as Store

BATCH_FILES = 200
BATCH_SECONDS = 1.0
OPTIMIZE_AFTER_CHANGES = 500  # merge FTS segments after a scan changed this many files

Progress = Callable[[int, int, str], None]
# (change, path, detail): "added" | "updated" | "removed" with detail None, "moved" with
# the old path, "failed" with the reason. Called once the change is committed (a change
# an interrupt rolls back is never told).
OnChange = Callable[[str, str, str | None], None]


class ScanInterrupted(KeyboardInterrupt):
    """Ctrl-C during a scan (still a KeyboardInterrupt to watch and the servers), with
    what was committed before it: the next scan finishes the rest."""

    def __init__(self, saved: dict[str, int], vectors: bool = False) -> None:
        super().__init__()
        self.saved = saved
        self.vectors = vectors  # stopped while making vectors: every text was saved

    def summary(self) -> str:
        done = ", ".join(f"{k} {v}" for k, v in self.saved.items())
        if self.vectors:
            return (f"scan interrupted while making vectors; saved: {done}, and the vectors "
                    "made so far — the next `loom scan` makes the rest")
        if not any(self.saved.values()):
            return "scan interrupted before any change was saved — run `loom scan` again"
        return f"scan interrupted; saved: {done} — the next `loom scan` finishes the rest"


def counts(report: dict[str, Any]) -> str:
    """A scan report's counts in words: `unchanged` files were found as they were,
    `skipped` ones hold no text (`loom status --skipped`). A report stored before
    `unchanged` existed counts its unchanged files in `skipped`."""
    skipped = len(report.get("skips") or ())
    unchanged = report.get("unchanged", report.get("skipped", 0) - skipped)
    return (f"added {report.get('added', 0)}, updated {report.get('updated', 0)}, moved "
            f"{report.get('moved', 0)}, removed {report.get('removed', 0)}, unchanged "
            f"{unchanged}, skipped {skipped}, failed {report.get('failed', 0)}")


class ScanReport:
    """What a scan did. (A plain class: a dataclass costs every cold command, see
    records.py.)"""

    def __init__(self) -> None:
        self.added = self.updated = self.moved = self.removed = 0
        self.skipped = self.failed = self.duration_ms = 0
        self.errors: list[dict[str, str]] = []
        # Valid files with nothing to index (an image-only PDF): counted in `skipped`,
        # listed here with the reason; they do not make the exit code 1.
        self.skips: list[dict[str, str]] = []
        self.vectors: dict[str, Any] | None = None  # embeddings.build.EmbedReport, if on
        # Paths in `errors` that failed before and are unchanged (the CLI sums them up).
        self.known: set[str] = set()

    @property
    def unchanged(self) -> int:
        """Files found as they were (`skipped` counts them too, as the report always has,
        with the files that hold no text: those are `skips`)."""
        return self.skipped - len(self.skips)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "added": self.added, "updated": self.updated, "moved": self.moved,
            "removed": self.removed, "skipped": self.skipped, "failed": self.failed,
            "duration_ms": self.duration_ms, "errors": [dict(e) for e in self.errors],
            "skips": [dict(e) for e in self.skips], "unchanged": self.unchanged}
        if self.vectors is not None:  # embeddings off: the report is as it always was
            out["vectors"] = dict(self.vectors)  # EmbedReport's: numbers and strings
        return out

    @property
    def changed(self) -> int:
        return self.added + self.updated + self.moved + self.removed

    def summary(self) -> str:
        text = f"{counts(self.to_dict())} in {self.duration_ms / 1000:.2f}s"
        v = self.vectors
        if v and (v["embedded"] or v["pending"]):
            text += (f"; vectors for {v['embedded']} files ({v['passages']} passages) "
                     f"in {v['seconds']:.1f}s")
            if v["pending"]:
                text += f", {v['pending']} files still without"
        return text


STREAM_HASH_BYTES = 16 << 20  # larger indexed files are hashed in chunks before reading


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def resolve_roots(config: Config, store: Store | None, dirs: Sequence[str | Path]
                  ) -> list[Path]:
    """DIRs given, else the config's notes_dirs, else the roots already indexed."""
    if dirs:
        chosen = [Path(d) for d in dirs]
    elif config.notes_dirs:
        chosen = config.notes_dirs
    elif store is not None and store.roots():
        chosen = [Path(r.path) for r in store.roots()]
        for root in chosen:
            if not root.is_dir():
                raise RootError(f"indexed folder {root} does not exist any more",
                                f"restore it, or drop it from the index: loom forget {root}")
    else:
        raise RootError("no folder to scan",
                        "run `loom scan DIR`, or set notes_dirs in the config (`loom init`)")
    resolved: list[Path] = []
    for d in chosen:
        path = discover.check_root(d)
        if path not in resolved:
            resolved.append(path)
    return resolved


def check_nesting(roots: Sequence[Path], indexed: Sequence[Path]) -> None:
    """A folder is indexed once: refuse a new root inside another root, or holding one
    (folding it in would change the paths of the files already shown)."""
    known = set(indexed)
    for root in roots:
        if root in known:
            continue
        for other in [*indexed, *roots]:
            if other == root:
                continue
            if root.is_relative_to(other):
                where = "the indexed folder" if other in known else "the folder"
                raise RootError(f"{root} is inside {where} {other}, so its files are indexed "
                                "there", f"scan {other} instead")
            if other.is_relative_to(root):
                if other in known:
                    raise RootError(f"{root} holds the indexed folder {other}; a folder is "
                                    "indexed once", f"scan {other} alone, or `loom forget "
                                    f"{other}` first")
                raise RootError(f"{root} holds {other}, also given; a folder is indexed once",
                                f"scan {root} alone")


def forget(store: Store, folder: str | Path) -> int:
    """Drop a root and everything indexed under it; returns how many files went."""
    wanted = Path(os.path.expanduser(folder))
    candidates = {str(wanted), str(wanted.absolute())}
    if wanted.exists():
        candidates.add(str(wanted.resolve()))
    root = next((r for r in store.roots() if r.path in candidates or r.name == str(folder)),
                None)
    if root is None:
        names = ", ".join(r.path for r in store.roots()) or "none"
        raise RootError(f"{folder} is not an indexed folder", f"indexed folders: {names}")
    with store.write_lock(), store.transaction():
        return store.remove_root(root.id)


class _Todo:
    """A changed or new file; `retry`: extract it again even if its bytes are the same
    (OCR changed)."""

    __slots__ = ("root", "ref", "row", "digest", "data", "retry")

    def __init__(self, root: Root, ref: discover.FileRef, row: FileRow | None,
                 retry: bool = False) -> None:
        self.root, self.ref, self.row, self.retry = root, ref, row, retry
        self.digest: bytes | None = None
        self.data: bytes | None = None


class _Batch:
    """Groups file changes into transactions of BATCH_FILES files or BATCH_SECONDS.

    Every write of one file happens inside `with batch.file():`, so a file's rows
    (files, docs, FTS) are always committed together or not at all.
    """

    def __init__(self, store: Store, clock: Callable[[], float],
                 on_commit: Callable[[], None] = lambda: None) -> None:
        self.store, self.clock, self.on_commit = store, clock, on_commit
        self.pending = 0
        self.since = clock()
        self.open = False

    @contextmanager
    def file(self) -> Iterator[None]:
        if not self.open:
            self.store.begin()
            self.open, self.since = True, self.clock()
        yield
        self.pending += 1
        if self.pending >= BATCH_FILES or self.clock() - self.since >= BATCH_SECONDS:
            self.commit()

    def commit(self) -> None:
        if self.open:
            self.store.commit()
            self.on_commit()
        self.open, self.pending = False, 0

    def rollback(self) -> None:
        # The store's state, not our flag: an interrupt may land between COMMIT and it.
        self.store.rollback()
        self.open, self.pending = False, 0


class Indexer:
    def __init__(self, store: Store, config: Config, *, progress: Progress | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_wait: Callable[[str], None] | None = None,
                 on_change: OnChange | None = None,
                 grep_inline_bytes: int = grep_index.INLINE_BYTES) -> None:
        self.store = store
        self.config = config
        self.progress = progress
        self.clock = clock
        self.on_wait = on_wait
        self.on_change = on_change
        self.grep_inline_bytes = grep_inline_bytes
        self._builder_lock: int | None = None  # grep_index.after_scan's hand-off
        self._embedding = False  # the texts are saved, vectors are being made
        self._ocr: OcrSettings | None = None  # decided once a scan, when first needed
        self._ocr_fingerprint: str | None = None
        self._start = 0.0
        self._saved = {"added": 0, "updated": 0, "moved": 0, "removed": 0}
        self._told: list[tuple[str, str, str | None]] = []  # changes awaiting their commit

    def _changed(self, change: str, root_id: int, relpath: str, detail: str | None = None
                 ) -> None:
        if self.on_change:
            self._told.append((change, self.store.display_path(root_id, relpath), detail))

    def _tell(self) -> None:
        """Tell on_change the changes just committed (watch prints them: a change it
        printed is in the index, even if a signal stops it next)."""
        told, self._told = self._told, []
        if self.on_change:
            for change, path, detail in told:
                self.on_change(change, path, detail)

    def scan(self, roots: Sequence[Path], *, force: bool = False) -> ScanReport:
        start = self.clock()
        report = ScanReport()
        self._ocr = self._ocr_fingerprint = None  # Tesseract or [ocr] may change between scans
        # 1. Everything that can refuse the scan, before any write.
        check_nesting(roots, [Path(r.path) for r in self.store.roots()])
        found = []
        for root in roots:
            patterns = discover.load_patterns(root, self.config.ignore, self.config.path.name)
            found.append(discover.walk(root, patterns, self.config.extensions))
        self._start = start
        self._builder_lock = None
        self._embedding = False
        try:
            with self.store.write_lock(self.on_wait):
                try:
                    self._apply(found, report, force)
                except KeyboardInterrupt:
                    raise ScanInterrupted(self._saved, self._embedding) from None
        except BaseException:
            if self._builder_lock is not None:
                os.close(self._builder_lock)
            raise
        if self._builder_lock is not None:  # the write lock is free: the builder may go
            grep_index.start(self.store.location, self._builder_lock)
        return report  # its duration_ms was set as the scan was recorded

    def _commit_done(self, report: ScanReport) -> None:
        self._saved = {"added": report.added, "updated": report.updated,
                       "moved": report.moved, "removed": report.removed}
        self._tell()

    def _apply(self, found: list[discover.Discovery], report: ScanReport, force: bool) -> None:
        store = self.store
        with store.transaction():
            scan_id = store.begin_scan([str(d.root) for d in found])
            root_rows = [store.ensure_root(d.root) for d in found]
        todo: list[_Todo] = []
        vanished: dict[bytes | None, list[FileRow]] = {}
        vanished_ids: dict[int, FileRow] = {}
        for disc, root in zip(found, root_rows, strict=True):
            existing = store.files_under(root.id)
            for ref in disc.files:
                row = existing.pop(ref.relpath, None)
                unchanged = row and (row.size, row.mtime_ns) == (ref.size, ref.mtime_ns)
                # A file that could not be read is tried again on every scan (a fixed
                # permission changes no mtime); an unchanged file whose extraction failed
                # would fail the same way, so it is only reported.
                retry = row is not None and (row.error or "").startswith(ACCESS_ERROR)
                # A failure, skip or text that depended on OCR (Tesseract missing, off,
                # its languages) is tried again once that changes.
                if row and row.ocr is not None and not retry:
                    retry = row.ocr != self._ocr_key()
                if row and unchanged and not force and not retry:
                    if row.error:
                        shown = store.display_path(root.id, ref.relpath)
                        self._fail(report, shown, row.error)
                        report.known.add(shown)
                    else:
                        report.skipped += 1
                        if row.skip:
                            shown = store.display_path(root.id, ref.relpath)
                            report.skips.append({"path": shown, "reason": row.skip})
                            report.known.add(shown)
                    continue
                todo.append(_Todo(root, ref, row, retry=retry))
            for shown in disc.bad_names:
                self._fail(report, store.display_path(root.id, shown),
                           "file name is not valid UTF-8; rename it to index it")
            for rel, why in disc.unreadable:
                self._fail(report, store.display_path(root.id, rel or "."),
                           f"cannot list folder: {why}")
                prefix = rel + "/" if rel else ""
                existing = {k: v for k, v in existing.items() if not k.startswith(prefix)}
            for rel, why in disc.unreadable_files:
                self._fail(report, store.display_path(root.id, rel), f"{ACCESS_ERROR}: {why}")
                existing.pop(rel, None)
            for row in existing.values():
                vanished.setdefault(row.hash, []).append(row)
                vanished_ids[row.id] = row

        batch = _Batch(store, self.clock, lambda: self._commit_done(report))
        self._told = []
        documents: list[_Todo] = []  # extracted by the workers, after the notes
        total = len(todo)
        done = 0
        try:
            for item in todo:
                done += 1
                if self.progress:
                    self.progress(done - len(documents), total, item.ref.relpath)
                with batch.file():
                    if self._note_or_defer(item, report, vanished, vanished_ids, force):
                        documents.append(item)
            if documents:
                from loomcli.extract.pool import extract_documents

                batch.commit()  # the notes are done: make them searchable now
                jobs = [(i, item.ref.abspath, item.ref.size)
                        for i, item in enumerate(documents)]
                finished = total - len(documents)
                for i, result in extract_documents(jobs, ocr=self._ocr_settings()):
                    item = documents[i]
                    finished += 1
                    if self.progress:
                        self.progress(finished, total, item.ref.relpath)
                    key = self._ocr_key() if result.ocr else None
                    with batch.file():
                        if self._vanished(item, result, report):
                            pass
                        elif isinstance(result, Extracted):
                            self._store_doc(item, result, report, key)
                        elif isinstance(result, NoTextError):
                            self._store_skip(item, report, str(result), key)
                        else:
                            self._store_failure(item, report, str(result), key)
            for row in vanished_ids.values():
                with batch.file():
                    store.remove(row.id)
                    report.removed += 1
                    self._changed("removed", row.root_id, row.relpath)
            batch.commit()
        except BaseException:
            batch.rollback()
            raise
        if report.changed >= OPTIMIZE_AFTER_CHANGES:
            with store.transaction():
                store.optimize()
        # The text is searchable: grep's trigram index now if little is new, else by a
        # process of its own once this scan is done (grep_index.py).
        self._builder_lock = grep_index.after_scan(store, self.grep_inline_bytes)
        if self.config.get("embeddings.enabled"):
            self._embedding = True
            report.vectors = self._embed().to_dict()
        report.duration_ms = int((self.clock() - self._start) * 1000)  # as recorded, too
        with store.transaction():
            store.finish_scan(scan_id, report.to_dict())

    def _embed(self) -> Any:
        """Vectors for the files that lack current ones (text is committed already)."""
        from loomcli import embeddings
        from loomcli.embeddings.build import EmbedReport, embed_pending
        from loomcli.errors import LoomError

        try:
            embedder = embeddings.from_config(self.config)
            embeddings.require_numpy()
        except LoomError as exc:
            model = embeddings.settings(self.config).identity
            return EmbedReport(model, pending=len(self.store.needing_vectors(model)),
                               error=str(exc))
        return embed_pending(self.store, embedder, self.progress, self.clock)

    # -- one file -----------------------------------------------------------------------

    def _note_or_defer(self, item: _Todo, report: ScanReport,
                       vanished: dict[bytes | None, list[FileRow]],
                       vanished_ids: dict[int, FileRow], force: bool) -> bool:
        """Handle one changed or new file; True when it is a document left for the
        workers (a PDF, web page, office file or e-book)."""
        if not self._read(item, report, force):
            return False
        if self._unchanged_or_moved(item, report, vanished, vanished_ids, force):
            return False
        if item.ref.kind != "note":
            item.data = None  # the worker reads the file itself
            return True
        data, item.data = item.data, None
        assert data is not None
        try:
            doc = extract_note(data, item.ref.relpath)
        except ExtractionError as exc:
            self._store_failure(item, report, str(exc))
        else:
            del data  # a huge note: hold its text, not its bytes too, while storing it
            self._store_doc(item, doc, report)
        return False

    def _fail(self, report: ScanReport, path: str, error: str) -> None:
        report.failed += 1
        report.errors.append({"path": path, "error": error})

    def _read(self, item: _Todo, report: ScanReport, force: bool) -> bool:
        """Read (and hash) a changed or new file. A large indexed file is hashed in chunks
        first: when only its mtime changed, it is never held in memory (`--force` reads
        it: it is extracted again)."""
        try:
            if item.row is not None and item.row.hash and item.ref.size > STREAM_HASH_BYTES:
                with open_regular_file(item.ref.abspath) as fh:
                    item.digest = hashlib.file_digest(
                        fh, lambda: hashlib.blake2b(digest_size=16)).digest()
                if (item.digest == item.row.hash and not item.row.error and not force
                        and not item.retry):
                    return True  # unchanged: _unchanged_or_moved skips it
            item.data = read_regular_file(item.ref.abspath)
        except FileNotFoundError:
            self._gone(item, report)  # deleted since it was listed: not a failure
            return False
        except OSError as exc:
            self._store_failure(item, report, f"{ACCESS_ERROR}: {exc.strerror or exc}")
            return False
        item.digest = digest(item.data)
        return True

    def _vanished(self, item: _Todo, result: Extracted | ExtractionError,
                  report: ScanReport) -> bool:
        """A document the worker could not read because it was deleted since the scan
        listed (and hashed) it: removed, not failed."""
        if not (isinstance(result, ExtractionError) and result.message.startswith(ACCESS_ERROR)
                and not os.path.lexists(item.ref.abspath)):
            return False
        self._gone(item, report)
        return True

    def _gone(self, item: _Todo, report: ScanReport) -> None:
        """A file deleted between listing and reading is removed, as the next scan would
        find it: its row goes (a new file was never indexed)."""
        if item.row is not None:
            self.store.remove(item.row.id)
            report.removed += 1
            self._changed("removed", item.root.id, item.ref.relpath)

    def _unchanged_or_moved(self, item: _Todo, report: ScanReport,
                            vanished: dict[bytes | None, list[FileRow]],
                            vanished_ids: dict[int, FileRow], force: bool) -> bool:
        ref, store = item.ref, self.store
        if item.row is not None:
            if (not force and item.row.hash == item.digest and not item.row.error
                    and not item.row.skip and not item.retry):
                store.set_stat(item.row.id, ref.size, ref.mtime_ns)
                report.skipped += 1
                return True
            return False
        candidates = vanished.get(item.digest)
        if candidates:
            row = candidates.pop()
            del vanished_ids[row.id]
            store.move(row.id, item.root.id, ref.relpath, ref.size, ref.mtime_ns)
            report.moved += 1
            self._changed("moved", item.root.id, ref.relpath,
                          store.display_path(row.root_id, row.relpath))
            return True
        return False

    def _store_doc(self, item: _Todo, doc: Extracted, report: ScanReport,
                   ocr: str | None = None) -> None:
        ref = item.ref
        assert item.digest is not None
        if item.row is None:
            self.store.add_file(item.root.id, ref.relpath, ref.kind, ref.size, ref.mtime_ns,
                                item.digest, doc, ocr)
            report.added += 1
            self._changed("added", item.root.id, ref.relpath)
        else:
            self.store.replace_content(item.row.id, ref.size, ref.mtime_ns, item.digest, doc,
                                       ocr)
            report.updated += 1
            self._changed("updated", item.root.id, ref.relpath)

    def _store_skip(self, item: _Todo, report: ScanReport, reason: str,
                    ocr: str | None = None) -> None:
        ref = item.ref
        self.store.record_skip(item.root.id, ref.relpath, ref.kind, ref.size, ref.mtime_ns,
                               item.digest, reason, item.row.id if item.row else None, ocr)
        report.skipped += 1
        report.skips.append({"path": self.store.display_path(item.root.id, ref.relpath),
                             "reason": reason})

    def _ocr_settings(self) -> OcrSettings:
        """OCR as configured and installed (asked once a scan: it runs `tesseract
        --list-langs`)."""
        if self._ocr is None:
            from loomcli.extract.ocr import settings as ocr_settings

            self._ocr = ocr_settings(self.config.get("ocr.enabled"),
                                     self.config.get("ocr.languages"))
        return self._ocr

    def _ocr_key(self) -> str:
        """This scan's OCR fingerprint (asked once, and only when a file depends on it)."""
        if self._ocr_fingerprint is None:
            from loomcli.extract.ocr import fingerprint

            self._ocr_fingerprint = fingerprint(self._ocr_settings())
        return self._ocr_fingerprint

    def _store_failure(self, item: _Todo, report: ScanReport, error: str,
                       ocr: str | None = None) -> None:
        ref = item.ref
        self.store.record_failure(item.root.id, ref.relpath, ref.kind, ref.size, ref.mtime_ns,
                                  item.digest, error, item.row.id if item.row else None, ocr)
        self._fail(report, self.store.display_path(item.root.id, ref.relpath), error)
        self._changed("failed", item.root.id, ref.relpath, error)


def exit_code(report: ScanReport) -> int:
    return 1 if report.failed else 0

