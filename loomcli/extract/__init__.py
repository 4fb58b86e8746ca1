"""Text extraction, one module per kind. Page boundaries are kept for PDFs."""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from loomcli.records import Record

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any


class Extracted(Record):
    """A file's text and title. `pages`: the byte offset (in the UTF-8 text) where each
    page starts, None for notes. `ocr`: scanned pages were left unread for want of OCR,
    so the scan reads the file again once OCR is on (see ocr.fingerprint). `note`: what a
    Markdown note says about itself (markdown.NoteMeta: front matter, tags, links)."""

    __slots__ = ("text", "title", "pages", "engine", "ocr", "note")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, text: str, title: str, pages: list[int] | None = None,
                 engine: str = "text", ocr: bool = False, note: Any = None) -> None:
        self.text, self.title, self.pages, self.engine, self.ocr = text, title, pages, engine, ocr
        self.note = note


# Documents: always indexed, extracted in worker processes. Extension -> kind.
DOCUMENTS = {"pdf": "pdf", "html": "html", "htm": "html", "docx": "docx", "odt": "odt",
             "pptx": "pptx", "epub": "epub"}

# Image files: indexed through OCR, only when listed in `extensions`.
IMAGES = frozenset({"png", "jpg", "jpeg", "tif", "tiff"})

# The reason a file could not be read: such failures are retried on every scan.
ACCESS_ERROR = "cannot read file"


@contextmanager
def open_regular_file(path: str) -> Iterator[io.BufferedReader]:
    """The file that was listed, opened for reading: a symlink or FIFO swapped in since is
    refused (O_NOFOLLOW, O_NONBLOCK, then fstat), never followed or waited on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (changed since it was listed)")
        with open(fd, "rb", closefd=False) as fh:
            yield fh
    finally:
        os.close(fd)


def read_regular_file(path: str) -> bytes:
    with open_regular_file(path) as fh:
        return fh.read()
