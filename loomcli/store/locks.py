"""Who writes the index: one writer at a time, and grep's index builder yields to any other.

Three lock files beside the index (flock, released by the kernel when a process dies, so
`kill -9` never leaves one behind):
  <index>.lock        the write lock: held by whoever writes (a scan, forget, the builder).
  <index>.lock-wait   held shared by every writer from before it asks for the write lock
                      until it is done: the builder looks for it between batches and
                      stops, so a scan waits at most one batch (flock is not fair).
  <index>.lock-grams  held by the process filling grep's trigram index after a scan
                      (grep_index.py) for its whole life: `loom status` asks it whether
                      the index is being built, and a writer that finds the write lock
                      taken by it waits instead of failing as busy.
On Windows (no fcntl) there are no locks: SQLite's own locking keeps the file consistent,
and the scan fills grep's index itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from loomcli.errors import BusyError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

HAVE_LOCKS = fcntl is not None


def _path(db_path: Path, suffix: str) -> str:
    return f"{db_path}.{suffix}"


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def write_lock(db_path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """One writer at a time: a second scan waits for the first (searches never wait).
    Without `on_wait` a busy index is an error — unless grep's index builder holds it,
    which gives way within one batch."""
    if not HAVE_LOCKS:
        yield
        return
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with open(_path(db_path, "lock-wait"), "w") as waiting, \
            open(_path(db_path, "lock"), "w") as fh:
        fcntl.flock(waiting, fcntl.LOCK_SH)  # the builder holds it only for an instant
        try:
            if not _try(fh.fileno(), fcntl.LOCK_EX):
                if not building(db_path):
                    if on_wait is None:
                        raise BusyError(f"another loom scan is writing to {db_path}",
                                        "wait for it to finish and try again") from None
                    on_wait(f"another loom scan is writing to {db_path}; waiting for it to "
                            "finish…")
                fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        finally:
            fcntl.flock(waiting, fcntl.LOCK_UN)


def building(db_path: Path) -> bool:
    """Whether a process is filling grep's trigram index of this index now."""
    if not HAVE_LOCKS or not os.path.exists(_path(db_path, "lock-grams")):
        return False
    with open(_path(db_path, "lock-grams"), "a") as fh:
        if _try(fh.fileno(), fcntl.LOCK_SH):
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False
        return True


def take_builder_lock(db_path: Path) -> int:
    """The builder's lock, for a scan about to start one (it passes the descriptor on).
    Called under the write lock, so an older builder is only ever about to give up:
    waiting for it is brief."""
    fd = os.open(_path(db_path, "lock-grams"), os.O_WRONLY | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


class Turns:
    """The builder's side: the write lock taken batch by batch, never waited for."""

    def __init__(self, db_path: Path) -> None:
        self.wait_fd = os.open(_path(db_path, "lock-wait"), os.O_WRONLY | os.O_CREAT, 0o644)
        self.lock_fd = os.open(_path(db_path, "lock"), os.O_WRONLY | os.O_CREAT, 0o644)

    def take(self) -> bool:
        """The write lock, if no other writer holds it or waits for it."""
        if not _try(self.wait_fd, fcntl.LOCK_EX):
            return False  # a writer waits, or writes
        fcntl.flock(self.wait_fd, fcntl.LOCK_UN)
        return _try(self.lock_fd, fcntl.LOCK_EX)

    def give_back(self) -> None:
        fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.wait_fd)
        os.close(self.lock_fd)
