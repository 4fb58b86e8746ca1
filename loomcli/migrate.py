"""`loom migrate --to DEST`: copy an index into another backend, through the store seam
only (store/seam.py), without reading or extracting a file again.

What is copied: the roots (their names and prefixes: the paths loom shows), every file
row with its size, mtime, hash, kind, title and OCR fingerprint, the stored texts and
their page starts, failures and skips, the notes' front matter, tags and links (parsed
again from the stored text, as migrations._fill_notes does: the text is the file as it
was read), and the vectors of every model. The destination then builds its own BM25
index (as it stores each text) and grep's trigram index (grep_index.fill), as a scan
would. Not copied: the scans' history (`status`'s last scan) and when each file was
indexed (the destination's clock); conversations live in their own local file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loomcli.errors import IndexStateError
from loomcli.records import Record

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from loomcli.store.rows import FileRow
    from loomcli.store.seam import IndexStore as Store

PROGRESS_EVERY = 500  # files between two progress lines


class Migrated(Record):
    """What a migration copied: `to` (the destination's location), its counts."""

    __slots__ = ("to", "roots", "files", "failed", "skipped", "vectors", "conversations")

    def __init__(self, to: str, roots: int = 0, files: int = 0, failed: int = 0,
                 skipped: int = 0, vectors: int = 0, conversations: int = 0) -> None:
        self.to, self.roots, self.files, self.failed = to, roots, files, failed
        self.skipped, self.vectors, self.conversations = skipped, vectors, conversations

    def to_dict(self) -> dict[str, object]:
        return {"to": self.to, "roots": self.roots, "files": self.files,
                "failed": self.failed, "skipped": self.skipped, "vectors": self.vectors,
                "conversations": self.conversations}


def shown(location: str) -> str:
    """Where an index is, as messages show it: a database as `host:port/db` (never a
    user or a password), a file as its path."""
    from loomcli.store import SERVER_SCHEMES

    if location.startswith(SERVER_SCHEMES):
        from loomcli.store.pg_connect import place

        return place(location)
    return location


def check_empty(dest: Store) -> None:
    """A destination that holds an index is refused: a migration never merges or
    overwrites."""
    if dest.roots() or dest.file_count():
        raise IndexStateError(f"{shown(dest.location)} already holds an index",
                              "migrate into a new .db path or an empty database")


def check_new_file(path: Path) -> None:
    """A destination path is a new file, or an SQLite file (an empty index: one a
    migration left empty when it was stopped); anything else is refused untouched."""
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise IndexStateError(f"{path}: {exc.strerror}", "give the path of a new .db file"
                              ) from None
    if head and head != b"SQLite format 3\x00":
        raise IndexStateError(f"{path} already exists and is not an index",
                              "give the path of a new .db file")


def copy(source: Store, dest: Store, progress: Callable[[str], None]) -> Migrated:
    """Copy `source` into the empty `dest` (both open; the source is only read). The
    files, texts and vectors go in one transaction (an interrupted migration leaves the
    destination empty), grep's index after, a batch a transaction."""
    from loomcli.index import grep_index

    check_empty(dest)
    done = Migrated(shown(dest.location))
    total = len(source.paths())
    with source.write_lock(progress), dest.write_lock(progress):
        check_empty(dest)  # another process may have filled it meanwhile
        with dest.transaction():
            ids: dict[int, int] = {}
            for root in source.roots():
                copied = dest.ensure_root(Path(root.path))
                if (copied.name, copied.prefix) != (root.name, root.prefix):
                    raise IndexStateError(
                        f"the folder {root.path} would be shown as {copied.prefix!r} in "
                        f"{done.to}, not {root.prefix!r} (the index's first folder was "
                        "forgotten, and paths shown would change)",
                        "scan the folders into the new index instead")
                done.roots += 1
                rows = sorted(source.files_under(root.id).values(), key=lambda r: r.id)
                for row in rows:
                    new_id = _copy_file(source, dest, copied.id, row)
                    if new_id is not None:
                        ids[row.id] = new_id
                        done.files += 1
                    done.failed += row.error is not None
                    done.skipped += row.skip is not None
                    if done.files and done.files % PROGRESS_EVERY == 0 and new_id:
                        progress(f"copied {done.files}/{total} files")
            progress(f"copied {done.files} files; copying vectors")
            for model in source.vector_counts():
                for fid, dim, spans, vecs, scales in source.iter_vectors(model):
                    if fid in ids:
                        dest.put_vectors(ids[fid], model, dim, spans, vecs, scales)
                        done.vectors += 1
            dest.optimize()
        progress("building grep's index")
        grep_index.fill(dest)
    return done


def _copy_file(source: Store, dest: Store, root_id: int, row: FileRow) -> int | None:
    """One file row into `dest`: its text as stored (with its pages and what a note says
    about itself), then its failure or skip. The new file's id, when it has text."""
    from loomcli.extract import Extracted

    digest = row.hash or b""
    new_id: int | None = None
    if row.indexed_at is not None:
        text = source.text_bytes(row.id).decode("utf-8")
        note = None
        if row.kind == "note":
            from loomcli.extract import markdown

            if markdown.is_markdown(row.relpath):
                note = markdown.parse(text, row.relpath)
        doc = Extracted(text, row.title, source.pages(row.id), note=note)
        del text
        new_id = dest.add_file(root_id, row.relpath, row.kind, row.size, row.mtime_ns,
                               digest, doc, row.ocr)
    if row.error is not None:
        dest.record_failure(root_id, row.relpath, row.kind, row.size, row.mtime_ns,
                            row.hash, row.error, new_id, row.ocr)
    elif row.skip is not None:
        dest.record_skip(root_id, row.relpath, row.kind, row.size, row.mtime_ns, row.hash,
                         row.skip, new_id, row.ocr)
    return new_id
