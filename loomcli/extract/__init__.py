"""Text extraction, one module per kind. Page boundaries are kept for PDFs."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass


@dataclass
class Extracted:
    text: str
    title: str
    # Byte offset (in the UTF-8 text) where each page starts; None for notes.
    pages: list[int] | None = None
    engine: str = "text"


def read_regular_file(path: str) -> bytes:
    """The bytes of the file that was listed: a symlink or FIFO swapped in since is
    refused (O_NOFOLLOW, O_NONBLOCK, then fstat), never followed or waited on."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (changed since it was listed)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)
