"""What both stores do the same way: transactions as a context, the roots' display
paths, a path on disk inside a root, and the statements both backends write alike —
with SQLite's `?` placeholders, which each store's `_run` binds (PostgreSQL's as `%s`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loomcli.errors import IndexMissingError
from loomcli.store.rows import FileInfo, FileRow, Root

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

FILE_COLUMNS = ("id, root_id, relpath, kind, size, mtime_ns, hash, title, content_len, "
                "indexed_at, error, skip, ocr")


class Common:
    _roots: list[Root] | None

    if TYPE_CHECKING:  # each store's own SQL
        def _run(self, sql: str, params: Sequence[Any] = ()) -> Any:
            """Execute `sql`, written with `?` placeholders; the cursor."""
        def remove(self, file_id: int) -> None: ...
        def begin(self) -> None: ...
        def commit(self) -> None: ...
        def rollback(self) -> None: ...
        def close(self) -> None: ...

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.begin()
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    def forget_roots(self) -> None:
        self._roots = None

    def display_path(self, root_id: int, relpath: str) -> str:
        prefix = next((r.prefix for r in self.roots() if r.id == root_id), "")
        return f"{prefix}/{relpath}" if prefix else relpath

    def on_disk(self, path: str | Path) -> tuple[Root, str] | None:
        """The root and root-relative path of a path on disk (absolute, or relative to
        the working directory) inside an indexed root — the deepest, should an old index
        hold nested roots — or None."""
        try:
            disk = Path(os.path.expanduser(path)).absolute()
            real = disk.resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        best: tuple[Root, str] | None = None
        for root in self.roots():
            for candidate in (disk, real):
                if candidate.is_relative_to(root.path):
                    rel = candidate.relative_to(root.path).as_posix()
                    if best is None or len(root.path) > len(best[0].path):
                        best = (root, "" if rel == "." else rel)
                    break
        return best

    # -- the statements both backends write alike ----------------------------------------

    def roots(self) -> list[Root]:
        if self._roots is None:
            self._roots = [Root(*r) for r in self._run(
                "SELECT id, path, name, prefix FROM roots ORDER BY id")]
        return self._roots

    def remove_root(self, root_id: int) -> int:
        ids = [r[0] for r in self._run("SELECT id FROM files WHERE root_id = ?", (root_id,))]
        for file_id in ids:
            self.remove(file_id)
        self._run("DELETE FROM roots WHERE id = ?", (root_id,))
        self._roots = None
        return len(ids)

    def file(self, file_id: int) -> FileRow:
        row = self._run(f"SELECT {FILE_COLUMNS} FROM files WHERE id = ?",
                        (file_id,)).fetchone()
        if row is None:
            raise IndexMissingError(f"file #{file_id} is no longer in the index",
                                    "it was removed by a scan; search again")
        return FileRow(*row)

    def files_under(self, root_id: int) -> dict[str, FileRow]:
        return {row[2]: FileRow(*row) for row in self._run(
            f"SELECT {FILE_COLUMNS} FROM files WHERE root_id = ?", (root_id,))}

    def set_stat(self, file_id: int, size: int, mtime_ns: int) -> None:
        self._run("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?",
                  (size, mtime_ns, file_id))

    def finish_scan(self, scan_id: int, report: dict[str, object]) -> None:
        self._run("UPDATE scans SET finished_at = ?, report = ? WHERE id = ?",
                  (time.time(), json.dumps(report), scan_id))

    def files_with_text(self) -> int:
        return int(self._run("SELECT count(*) FROM files WHERE indexed_at IS NOT NULL "
                             "AND content_len > 0").fetchone()[0])

    def list_files(self) -> list[FileInfo]:
        rows = self._run(
            "SELECT id, root_id, relpath, title, kind, content_len, indexed_at FROM files "
            "WHERE indexed_at IS NOT NULL ORDER BY root_id, relpath").fetchall()
        return [FileInfo(self.display_path(r[1], r[2]), r[3], r[4], r[5], r[6], r[0])
                for r in rows]

    def paths(self) -> list[tuple[int, str]]:
        """(file id, display path) of every indexed file, in path order."""
        return [(r[0], self.display_path(r[1], r[2])) for r in self._run(
            "SELECT id, root_id, relpath FROM files WHERE indexed_at IS NOT NULL "
            "ORDER BY root_id, relpath")]

    def problems(self, kind: str) -> list[tuple[str, str]]:
        """(display path, reason) of the files that failed (`failed`) or were skipped
        (`skipped`), in path order."""
        column = {"failed": "error", "skipped": "skip"}[kind]
        return [(self.display_path(r[0], r[1]), r[2]) for r in self._run(
            f"SELECT root_id, relpath, {column} FROM files WHERE {column} IS NOT NULL "
            "ORDER BY root_id, relpath")]

    def failures(self, limit: int) -> list[dict[str, str]]:
        """The files whose last extraction failed, with the reason, in path order."""
        return [{"path": self.display_path(r[0], r[1]), "error": r[2]} for r in self._run(
            "SELECT root_id, relpath, error FROM files WHERE error IS NOT NULL "
            "ORDER BY root_id, relpath LIMIT ?", (limit,))]

    def body_start(self, file_id: int) -> tuple[int, int]:
        """(byte, character) of a file's text where its body starts: after a Markdown
        note's front matter, else (0, 0)."""
        row = self._run("SELECT body_at, body_chars FROM notes WHERE file_id = ?",
                        (file_id,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)
