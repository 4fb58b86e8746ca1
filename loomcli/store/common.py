"""What both stores do the same way, over their own SQL: transactions as a context,
the roots' display paths, a path on disk inside a root. No SQL here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loomcli.store.rows import Root

TYPE_CHECKING = False  # typing's, without importing it (records.py)


class Common:
    _roots: list[Root] | None

    if TYPE_CHECKING:  # each store's own SQL
        def roots(self) -> list[Root]: ...
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
