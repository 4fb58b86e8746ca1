"""`loom watch`: scan, then keep the index current as files change.

File events come from watchfiles (inotify, FSEvents, ReadDirectoryChangesW: no polling,
so an idle watch costs nearly no CPU). Events are debounced into batches — a `git
checkout` touching 1,000 files is one batch — and each batch is one incremental scan of
the roots it touched, through the same indexer as `loom scan`, so moves, deletions, new
folders and ignore rules behave exactly as there. A change to a `.loomignore` or to the
config rescans (the config: every root). A root that disappears is reported and waited
for; its files stay in the index until it is back and rescanned.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomcli.config import Config
from loomcli.index import discover, indexer
from loomcli.operations import Corpus

DEBOUNCE_MS = 1600  # longest a batch may gather
STEP_MS = 200  # a batch closes after this much quiet
WAKE_MS = 2000  # idle wake-up, to notice a vanished or returning root
NEW_FOLDER_RESCAN_S = 0.5  # files written into a new folder before it is watched


@dataclass
class Watcher:
    load_config: Callable[[], Config]
    roots: list[Path]
    emit: Callable[[dict[str, Any]], None]  # one applied change, or a scan summary
    warn: Callable[[str], None]
    stop: threading.Event = field(default_factory=threading.Event)
    missing: set[Path] = field(default_factory=set)
    scanning: bool = False

    def scan(self, roots: Sequence[Path], *, initial: bool = False
             ) -> indexer.ScanReport | None:
        """One incremental scan; emits a line per change (the first scan: a summary)."""
        present = [r for r in roots if self._present(r)]
        if not present:
            return None
        config = self.load_config()

        def on_change(change: str, path: str, detail: str | None) -> None:
            if initial:
                return
            event: dict[str, Any] = {"change": change, "path": path}
            if change == "moved":
                event["from"] = detail
            elif change == "failed":
                event["error"] = detail
            self.emit(event)

        self.scanning = True
        try:
            # Another scan holding the index is waited for, never a reason to quit.
            report = Corpus(config).scan(present, on_change=on_change, on_wait=self.warn)
        finally:
            self.scanning = False
        if initial:
            self.emit({"change": "scanned", "roots": len(self.roots),
                       "report": report.to_dict()})
        return report

    def _present(self, root: Path) -> bool:
        if root.is_dir():
            if root in self.missing:
                self.missing.discard(root)
                self.warn(f"{root} is back; rescanning it")  # (at the first wake-up)
            return True
        if root not in self.missing:
            self.missing.add(root)
            self.warn(f"folder {root} disappeared; its files stay indexed, waiting for it "
                      "to come back")
        return False

    def affected(self, changes: Iterable[tuple[Any, str]], config_path: Path) -> list[Path]:
        """The roots a batch of events touches (every root for a config change)."""
        extensions = self.load_config().extensions
        hit: list[Path] = []
        for _, raw in changes:
            path = Path(raw)
            if path == config_path:
                return list(self.roots)
            for root in self.roots:
                if root not in hit and relevant(path, root, extensions):
                    hit.append(root)
        return hit

    def run(self) -> None:
        import watchfiles

        config_path = self.load_config().path
        self.scan(self.roots, initial=True)
        while not self.stop.is_set():
            # A returned root is announced here and rescanned at the watcher's first wake.
            present = [r for r in self.roots if self._present(r)]
            watched = [f for r in present for f in folders(r)]
            if config_path.parent.is_dir():
                watched.append(str(config_path.parent))
            if not watched:
                self.stop.wait(WAKE_MS / 1000)
                continue
            missing_before = set(self.missing)
            try:
                for n, changes in enumerate(watchfiles.watch(
                        *watched, debounce=DEBOUNCE_MS, step=STEP_MS, stop_event=self.stop,
                        rust_timeout=WAKE_MS, yield_on_timeout=True, raise_interrupt=False,
                        watch_filter=None, ignore_permission_denied=True, recursive=False)):
                    roots = self.affected(changes, config_path)
                    if n == 0:
                        # What changed between the last scan and this watcher's start sent
                        # no event: look once (a stat-only pass when nothing changed).
                        roots = present
                    new_folder = any(Path(p).is_dir() for _, p in changes)
                    if roots:
                        self.scan(roots)
                        if new_folder:
                            # A new folder is watched only once its creation is seen: what
                            # was written into it before that sends no event. Look again.
                            self.stop.wait(NEW_FOLDER_RESCAN_S)
                            self.scan(roots)
                    if new_folder:
                        break  # watch the new folder too
                    # A root vanished or came back: restart watching with the new set.
                    if any(not r.is_dir() for r in present) or any(
                            r.is_dir() for r in missing_before):
                        break
            except FileNotFoundError:
                continue  # a watched folder vanished while starting; look again


def folders(root: Path) -> list[str]:
    """The root and every real folder below it, each watched on its own (not one
    recursive watch, which would follow a symlink such as `x -> /` out of the root).
    Hidden folders are skipped, as the scan skips them."""
    out = [str(root)]
    for dirpath, dirnames, _ in os.walk(root):  # never follows symlinks
        dirnames[:] = [d for d in dirnames
                       if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d))]
        out += [os.path.join(dirpath, d) for d in dirnames]
    return out


def relevant(path: Path, root: Path, extensions: frozenset[str]) -> bool:
    """Is an event at `path` something the index of `root` may care about?"""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return False
    parts = rel.parts
    if not parts:
        return True  # the root itself
    if parts[-1] == discover.IGNORE_FILE:
        return not any(p.startswith(".") for p in parts[:-1])
    if any(p.startswith(".") for p in parts):
        return False  # hidden files and folders, .git, editor swap files
    # A file of a kind loom does not index cannot matter, unless it is (or was) a folder.
    name = parts[-1]
    return "." not in name or name.rpartition(".")[2].lower() in extensions or path.is_dir()


def watch(load_config: Callable[[], Config], dirs: Sequence[Path],
          emit: Callable[[dict[str, Any]], None], warn: Callable[[str], None]) -> None:
    """Run until SIGINT or SIGTERM; a scan under way is rolled back (the index stays
    consistent) or finishes, and the function returns normally."""
    roots = Corpus(load_config()).roots_for(dirs)  # checked before anything is written
    w = Watcher(load_config, roots, emit, warn)

    def on_signal(signum: int, frame: Any) -> None:
        w.stop.set()
        if w.scanning:
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        w.run()
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
