"""Walk roots and yield the files loom indexes; never reads file contents.

Skipped always: hidden names (leading `.`: Obsidian's `.obsidian/` and `.trash/`),
Logseq's own `logseq/` folder, symlinks, anything but regular files and folders, and
types not in the configured extensions. Ignored folders are pruned, so
nothing below them is visited or can be re-included (git's rule).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from loomcli.errors import IgnorePatternError, RootError
from loomcli.extract import DOCUMENTS, IMAGES
from loomcli.index import ignore
from loomcli.records import Record

IGNORE_FILE = ".loomignore"
# A Logseq graph keeps its config and page backups in `logseq/` (with config.edn);
# Obsidian's `.obsidian/` and `.trash/` are hidden names, skipped as such.
LOGSEQ_DIR = "logseq"


class FileRef(Record):
    """A file the walk found."""

    __slots__ = ("relpath", "abspath", "size", "mtime_ns", "kind")

    def __init__(self, relpath: str, abspath: str, size: int, mtime_ns: int, kind: str) -> None:
        self.relpath = relpath  # relative to the root, "/" separators
        self.abspath = abspath
        self.size = size
        self.mtime_ns = mtime_ns
        self.kind = kind  # "note", or a document kind: "pdf", "html", "docx", "odt", "pptx", "epub"


class Discovery:
    """What a walk found under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: list[FileRef] = []
        # Folders ("" for the root itself) that could not be listed, and files that could
        # not be looked at, with the reason: what is indexed under them is kept.
        self.unreadable: list[tuple[str, str]] = []
        self.unreadable_files: list[tuple[str, str]] = []
        # Names that are not valid UTF-8 (shown with U+FFFD): cannot be stored or shown.
        self.bad_names: list[str] = []


def kind_of(name: str, extensions: frozenset[str]) -> str | None:
    return _kinds(extensions).get(_extension(name))


def _extension(name: str) -> str:
    _, dot, ext = name.rpartition(".")
    return ext.lower() if dot else ""


def _kinds(extensions: frozenset[str]) -> dict[str, str]:
    """Extension -> kind: documents always, images only when listed (screenshots only
    when asked), notes by the configured extensions."""
    kinds = {ext: "note" for ext in extensions if ext not in IMAGES}
    kinds.update((ext, "image") for ext in extensions & IMAGES)
    kinds.update(DOCUMENTS)
    return kinds


def check_root(root: Path) -> Path:
    """Resolve a root, or raise RootError saying what is wrong."""
    path = Path(os.path.expanduser(root))
    if not path.exists():
        raise RootError(f"folder {path} does not exist", "check the path, or create it first")
    if not path.is_dir():
        raise RootError(f"{path} is not a folder", "give `loom scan` a folder of notes")
    return path.resolve()


def load_patterns(root: Path, config_ignore: Sequence[str], config_source: str
                  ) -> list[ignore.Pattern]:
    """Config patterns (lowest priority) then the root's .loomignore."""
    patterns = ignore.parse_lines(config_ignore, source=f"{config_source}: ignore")
    patterns.extend(_read_ignore_file(root, b""))
    return patterns


def _read_ignore_file(folder: Path, base: bytes) -> list[ignore.Pattern]:
    path = folder / IGNORE_FILE
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return []
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise  # the folder itself is out of the OS's reach: the caller skips it
        # Indexing on without its rules would index what the user excluded: stop instead.
        raise IgnorePatternError(f"cannot read {path}: {exc.strerror or exc}",
                                 "make it readable (chmod a+r) or remove it, then scan again"
                                 ) from None
    source = (base.decode("utf-8", "replace") + IGNORE_FILE) if base else IGNORE_FILE
    return ignore.parse_file_bytes(data, source=source, base=base)


def walk(root: Path, patterns: list[ignore.Pattern], extensions: frozenset[str]) -> Discovery:
    """List the indexable files under `root` in a stable (sorted) order.

    Raises IgnorePatternError for a malformed nested .loomignore before the caller
    has changed anything.
    """
    found = Discovery(root=root)
    _walk_dir(found, str(root), "", patterns, _kinds(extensions))
    return found


def _walk_dir(found: Discovery, abs_dir: str, rel_dir: str,
              patterns: list[ignore.Pattern], kinds: dict[str, str]) -> None:
    try:
        with os.scandir(abs_dir) as it:
            listing = {e.name: e for e in it}
    except OSError as exc:
        found.unreadable.append((rel_dir.rstrip("/"), exc.strerror or str(exc)))
        return
    # A listed subfolder's own rules (the root's were loaded by the caller).
    if rel_dir and IGNORE_FILE in listing:
        try:
            sub = _read_ignore_file(Path(abs_dir), os.fsencode(rel_dir))
        except OSError as exc:  # a path too long to open: the folder is one failed entry
            found.unreadable.append((rel_dir.rstrip("/"), exc.strerror or str(exc)))
            return
        patterns = patterns + sub if sub else patterns
    for name in sorted(listing):
        if name.startswith("."):
            continue
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                shown = os.fsencode(name).decode("utf-8", "replace")
                found.bad_names.append(f"{rel_dir}{shown}")
                continue
        entry = listing[name]
        try:  # a symlink is neither (never followed)
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = not is_dir and entry.is_file(follow_symlinks=False)
        except OSError as exc:  # a name the OS refuses (too long…): one entry, not the scan
            found.unreadable_files.append((f"{rel_dir}{name}", exc.strerror or str(exc)))
            continue
        rel = f"{rel_dir}{name}"
        if is_dir:
            if name == LOGSEQ_DIR and os.path.isfile(os.path.join(entry.path, "config.edn")):
                continue  # Logseq's own folder (config, backups of pages): not notes
            rel_b = os.fsencode(rel)
            if patterns and ignore.is_ignored(patterns, rel_b, True):
                continue
            _walk_dir(found, entry.path, rel + "/", patterns, kinds)
        elif is_file:
            kind = kinds.get(_extension(name))
            if kind is None:
                continue
            if patterns and ignore.is_ignored(patterns, os.fsencode(rel), False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                found.unreadable_files.append((rel, exc.strerror or str(exc)))
                continue
            found.files.append(FileRef(rel, entry.path, st.st_size, st.st_mtime_ns, kind))
