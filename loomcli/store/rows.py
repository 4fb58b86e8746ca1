"""The records the store seam speaks in (store/seam.py), the same for every backend."""

from __future__ import annotations

from loomcli.records import Record


class Root(Record):
    __slots__ = ("id", "path", "name", "prefix")

    def __init__(self, id: int, path: str, name: str, prefix: str = "") -> None:
        self.id = id
        self.path = path
        self.name = name
        self.prefix = prefix  # fixed when the root is added: "" for the first, else a folder name


class FileRow(Record):
    """A row of `files` (5,127 of them made on the kernel docs' rescan)."""

    __slots__ = ("id", "root_id", "relpath", "kind", "size", "mtime_ns", "hash", "title",
                 "content_len", "indexed_at", "error", "skip", "ocr")

    def __init__(self, id: int, root_id: int, relpath: str, kind: str, size: int, mtime_ns: int,
                 hash: bytes | None, title: str, content_len: int, indexed_at: float | None,
                 error: str | None, skip: str | None = None, ocr: str | None = None) -> None:
        self.id = id
        self.root_id = root_id
        self.relpath = relpath
        self.kind = kind
        self.size = size
        self.mtime_ns = mtime_ns
        self.hash = hash
        self.title = title
        self.content_len = content_len
        self.indexed_at = indexed_at
        self.error = error
        self.skip = skip  # why a valid file holds nothing to index
        # The OCR fingerprint (extract.ocr.fingerprint) the file's outcome depended on: a
        # failure, skip or text short of scanned pages for want of OCR. None: it did not.
        self.ocr = ocr


class Hit(Record):
    __slots__ = ("path", "title", "score", "snippet", "file_id", "content_len", "page",
                 "offset")

    def __init__(self, path: str, title: str, score: float, snippet: str, file_id: int,
                 content_len: int, page: int | None = None, offset: int | None = None
                 ) -> None:
        self.path = path
        self.title = title
        self.score = score
        self.snippet = snippet
        self.file_id = file_id
        self.content_len = content_len  # bytes of the whole extracted text
        self.page = page  # a PDF's page where the snippet is (from 1)
        self.offset = offset  # byte offset of the snippet's first query word (`loom get`)


class FileInfo(Record):
    __slots__ = ("path", "title", "kind", "content_len", "indexed_at", "file_id")

    def __init__(self, path: str, title: str, kind: str, content_len: int, indexed_at: float,
                 file_id: int) -> None:
        self.path = path
        self.title = title
        self.kind = kind
        self.content_len = content_len
        self.indexed_at = indexed_at
        self.file_id = file_id

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "title": self.title, "kind": self.kind,
                "content_len": self.content_len, "indexed_at": self.indexed_at}
