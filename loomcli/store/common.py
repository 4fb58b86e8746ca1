"""What both stores do the same way: transactions as a context, the roots' display
paths, a path on disk inside a root, which note a `[[wikilink]]` names (over each
store's own SQL), and the statements both backends write alike — with SQLite's `?`
placeholders, which each store's `_run` binds (PostgreSQL's as `%s`)."""

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
    from collections.abc import Iterable, Sequence
    from typing import Any

    from loomcli.search.trigrams import Need

FILE_COLUMNS = ("id, root_id, relpath, kind, size, mtime_ns, hash, title, content_len, "
                "indexed_at, error, skip, ocr")

# A vault: the folder holding Obsidian's `.obsidian/` or a Logseq graph's `logseq/`
# (with its config.edn, as discover.py knows it), else the root. Links resolve in their
# note's vault first. Read from the disk when links are resolved (a few stat calls a
# note, once per folder per call); a root not on this machine's disk is one vault.
VAULT_MARKS = (".obsidian", os.path.join("logseq", "config.edn"))
Vault = tuple[int, str]  # (root id, folder relative to the root: "" the root itself)


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
        def _notes_named(self, names: Sequence[str]) -> Iterable[tuple[int, int, str]]: ...
        def _links_named(self, names: Sequence[str]
                         ) -> Iterable[tuple[int, int, str, str, int]]: ...
        def _link_names(self, file_ids: Sequence[int]) -> Iterable[tuple[str, bool]]: ...
        def _notes_aliased(self, keys: Sequence[str]) -> Iterable[tuple[int, int, str]]: ...
        def candidates(self, need: Need) -> dict[int, set[int] | None]: ...
        def text_bytes(self, file_id: int, offset: int = 0, length: int | None = None
                       ) -> bytes: ...
        def iter_texts(self, file_ids: list[int] | None = None,
                       wanted: dict[int, set[int] | None] | None = None,
                       by_blocks: bool = False
                       ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                           str | None]]: ...

    def grep_texts(self, need: Need, file_ids: list[int] | None, by_blocks: bool
                   ) -> Iterator[tuple[int, str, Iterable[tuple[int, int, bytes]],
                                       str | None]]:
        """The seam's: the candidates in one statement, then their texts (SQLite's
        trigram index answers a common literal in milliseconds)."""
        holding = self.candidates(need)
        ids = [fid for fid in (holding if file_ids is None else file_ids) if fid in holding]
        return self.iter_texts(ids, holding, by_blocks)

    def text_ranges(self, ranges: Sequence[tuple[int, int, int]]) -> list[bytes]:
        """The seam's: one text_bytes each (SQLite has no round trips to save)."""
        return [self.text_bytes(fid, offset, length) for fid, offset, length in ranges]

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

    # -- [[wikilinks]]: which note a link names (each store's SQL finds the candidates) ---

    def vault(self, root_id: int, relpath: str, seen: dict[Vault, Vault]) -> Vault:
        """The vault a file is in: its deepest folder (up to the root) holding a vault's
        mark. `seen` remembers each folder's vault for the caller's one operation."""
        folder = relpath.rpartition("/")[0]
        walked: list[Vault] = []
        found: Vault = (root_id, "")
        root = None
        while folder:
            key = (root_id, folder)
            if key in seen:
                found = seen[key]
                break
            walked.append(key)
            root = root or next((r for r in self.roots() if r.id == root_id), None)
            if root is None:
                break
            at = os.path.join(root.path, *folder.split("/"))
            if any(os.path.exists(os.path.join(at, m)) for m in VAULT_MARKS):
                found = key
                break
            folder = folder.rpartition("/")[0]
        for key in walked:
            seen[key] = found
        return found

    def resolve_links(self, targets: Sequence[str], source: int) -> list[int | None]:
        """The file each `[[target]]` of note `source` names (None: no such file), as
        Obsidian resolves it: by file name (a note's without `.md`), case-insensitively;
        a target with folders must end the file's path; a file in the note's own vault
        first (of several, the shortest path), else one elsewhere when the name is in
        only one vault. A name no file bears names the note that has it as an alias or
        title (Logseq's `alias::`, `title::`, a journal's date), by the same rules."""
        row = self.file(source)
        seen: dict[Vault, Vault] = {}
        done: dict[str, int | None] = {}
        for target in targets:
            if target not in done:
                done[target] = self._resolve(target, row.root_id, row.relpath, seen)
        return [done[t] for t in targets]

    def _resolve(self, target: str, root_id: int, relpath: str,
                 seen: dict[Vault, Vault]) -> int | None:
        """What a link of the note at `relpath` names. A Markdown link's path (`./a.md`,
        `../b/c.md`; `/d.md` from the vault's top) names that file of the note's root;
        when it does not exist, it resolves as a `[[wikilink]]` to those folders."""
        import posixpath

        from loomcli.extract import markdown

        key = markdown.link_key(target)
        if not key:
            return None
        here = self.vault(root_id, relpath, seen)
        exact = None
        if target.startswith(("./", "../", "/")):
            base = relpath.rpartition("/")[0] if target[0] == "." else here[1]
            exact = posixpath.normpath(f"{base}/{key}" if base else key).lower()
            while exact.startswith("../"):  # above the root: from the root
                exact = exact[3:]
            if exact in (".", ".."):
                return None
            key = exact
        rows = list(self._notes_named(markdown.link_names(key)))
        if exact is not None:
            for fid, rid, rel in rows:
                if rid == root_id and markdown.link_key(rel) == key:
                    return fid
        found = markdown.best_link(
            key, ((fid, self.display_path(rid, rel), self.vault(rid, rel, seen))
                  for fid, rid, rel in rows), here)
        if found is not None or exact is not None:
            return found
        # An alias: matched whole (`[[a/b]]` names the note whose alias is `a/b`).
        aliased = list(self._notes_aliased([key]))
        return markdown.best_link(
            "", ((fid, self.display_path(rid, rel), self.vault(rid, rel, seen))
                 for fid, rid, rel in aliased), here) if aliased else None

    def backlinks(self, file_ids: Sequence[int]) -> dict[int, dict[int, int]]:
        """For each of these files, the notes that link to it: {file: {note: first line}}.
        Links are resolved when read, so a note added later catches the links that
        named it before."""
        out: dict[int, dict[int, int]] = {fid: {} for fid in file_ids}
        seen: dict[Vault, Vault] = {}
        resolved: dict[tuple[str, Vault], int | None] = {}
        names: set[str] = set()
        for name, alias in self._link_names(file_ids):
            if alias:  # a link that names it by an alias (a link's name is its last part)
                names.add(name.rpartition("/")[2])
            elif "___" in name or "%2f" in name:  # (the notes module only then: start-up)
                from loomcli.extract import markdown

                names.update(markdown.names_linking(name))
            else:
                names.add(name)
        if not names:
            return out
        # every name's links in one statement; then one per distinct target resolved
        for source, root_id, relpath, target, line in self._links_named(sorted(names)):
            # a Markdown link's path is the note's folder's; a wikilink, its vault's
            home = (target, (root_id, relpath.rpartition("/")[0])
                    if target.startswith((".", "/")) else self.vault(root_id, relpath, seen))
            if home not in resolved:
                resolved[home] = self._resolve(target, root_id, relpath, seen)
            fid = resolved[home]
            if fid in out and fid != source:
                known = out[fid].get(source)
                out[fid][source] = line if known is None else min(known, line)
        return out

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
