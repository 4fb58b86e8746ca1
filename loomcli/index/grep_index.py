"""grep's trigram index, filled after the scan that stored the text.

FTS5's trigram tokenizer costs about 75 ns a character: on the kernel docs (29 MB of
text) it doubled the first scan. So a scan stores the text and its BM25 index, names the
new texts in `grams_todo`, and fills grep's index itself only when they are few
(INLINE_BYTES: a watch step, a day's notes). A larger batch goes to a process of its own
(`python -m loomcli.index.grep_index`, on a second core) and the scan returns with the text
searchable. Until a text is in the index, grep reads it whole (Store.candidates), so its
answers never change, only their speed.

The builder takes the write lock batch by batch and gives way to any other writer
(locks.py); each batch is one transaction. Killed or stopped, it leaves the rest in
`grams_todo`, and the next scan fills it or starts another builder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from loomcli.store import open_store

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.store.seam import IndexStore as Store

INLINE_BYTES = 1 << 20  # a scan that stored less new text indexes it for grep itself
BATCH_BYTES = 4 << 20  # text per transaction (about 0.3 s): a waiting writer's longest wait
OPTIMIZE_AFTER_FILES = 500  # merge the trigram index's segments after this many texts


def fill(store: Store, stop: Callable[[], bool] = lambda: False,
         between: Callable[[], None] = lambda: None) -> int:
    """Index the pending texts for grep, one transaction per batch, until none is left or
    `stop()` says so before a batch (`between()` runs after each). Returns how many."""
    done = 0
    while not stop():
        try:
            ids = store.grams_batch(BATCH_BYTES)
            if not ids:
                if done >= OPTIMIZE_AFTER_FILES:
                    with store.transaction():
                        store.optimize_grams()
                break
            with store.transaction():
                store.index_grams(ids)
            done += len(ids)
        finally:
            between()
    return done


def after_scan(store: Store, inline_bytes: int = INLINE_BYTES) -> int | None:
    """Called by a scan holding the write lock, its text committed: fill grep's index now
    when little is pending; else return the builder's lock (a descriptor) for `start`."""
    files, size = store.grams_pending()
    if not files:
        return None
    lock = store.take_builder_lock() if size > inline_bytes else None
    if lock is None:  # little text, or no locks to hand a builder (Windows)
        fill(store)
    return lock


def start(location: str, lock_fd: int) -> None:
    """Start the builder, handing it the lock the scan took (so `loom status` says it is
    building from the moment the scan returns), once the scan has let go of the write
    lock."""
    import subprocess

    try:
        # -P: not the working folder first on sys.path (a checkout of another loom there
        # would be the one imported).
        subprocess.Popen([sys.executable, "-P", "-m", "loomcli.index.grep_index",
                          location, str(lock_fd)], pass_fds=(lock_fd,),
                         start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    except OSError:
        pass  # grep reads the pending texts whole; the next scan tries again
    finally:
        os.close(lock_fd)


def build(location: str) -> int:
    """The builder's work: fill grep's index in turns of the write lock, giving way to
    any writer that waits (it will start another builder when it is done)."""
    with open_store(location) as store:
        turns = store.builder_turns()
        try:
            holding = [False]
            inode = _inode(location)

            def stop() -> bool:
                holding[0] = turns.take()
                if holding[0] and _inode(location) != inode:
                    between()  # set aside by `scan --rebuild`: not this builder's index
                return not holding[0]

            def between() -> None:
                if holding[0]:
                    turns.give_back()
                    holding[0] = False

            done = fill(store, stop, between)
            if _inode(location) != inode:
                # Closing would checkpoint into, and delete, the WAL file now at the
                # index's path: the new index's. The kernel closes the files instead.
                os._exit(0)
            return done
        finally:
            turns.close()


def _inode(location: str) -> int | None:
    """The index file's inode (-1: gone; None: an index that is no file)."""
    if "://" in location:
        return None
    try:
        return os.stat(location).st_ino
    except OSError:
        return -1


def main(argv: list[str]) -> int:
    location, lock_fd = argv[0], int(argv[1])
    try:
        build(location)
    except Exception:  # noqa: BLE001 - the index moved or went: nothing is half written
        return 1
    finally:
        os.close(lock_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
