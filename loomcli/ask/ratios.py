"""The servers' counts of loom's prompts, kept across processes: `<home>/token_ratios.json`.

Each model (provider, endpoint, model) keeps its newest `KEEP` ratios of the server's count
to loom's estimate, at most `MODELS` models (the least recently counted go), so a one-shot
`loom ask` starts from what the asks before it learned. `window.learned_ratio` decides
what the counts are worth; this module only keeps them.

The file is small and bounded, and a cache: one that cannot be read (missing, too big,
not JSON, of another shape, values out of bounds) counts as empty, entry by entry, and is
written whole again at the next count. A count is added under a lock file beside it (no
writer loses another's count) and the file is replaced at once (`os.replace`: a reader
never sees half of it). A home that cannot be written keeps the counts in this process.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILE_NAME = "token_ratios.json"
KEEP = 8  # the server's counts kept per model (the newest)
MODELS = 64  # models kept at most (least recently counted go)
FILE_BYTES = 64 * 1024  # a larger file is not loom's: read as empty (never written)
NAME_CHARS = 300  # a provider, endpoint or model name longer than this is not kept
RATIO_MAX = 100.0  # a ratio above this (or not above 0) is not a count of loom's prompt

Key = tuple[str, str, str]  # (provider, endpoint, model)
Counts = OrderedDict[Key, deque[float]]

# This process's view: the file as last read (`_read_as`: which file, and its identity),
# and the counts it could not write.
_SEEN: Counts = OrderedDict()
_read_as: tuple[str, tuple[int, int, int] | None] | None = None


def path() -> Path:
    from loomcli import paths

    return paths.home() / FILE_NAME


def seen(key: Key) -> list[float]:
    """The model's kept ratios, oldest first (what any process has counted)."""
    _refresh(path())
    return list(_SEEN.get(key, ()))


def add(key: Key, ratio: float) -> None:
    """Keep one more ratio for the model, in the file when the home can be written."""
    global _SEEN, _read_as
    if not _valid_key(key) or not _valid_ratio(ratio):
        return
    where = path()
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with _locked(where):
            counts = _load(where)
            _put(counts, key, ratio)
            _write(where, counts)
            _SEEN, _read_as = counts, (str(where), _identity(where))
    except OSError:  # a read-only home: this process remembers
        _refresh(where)
        _put(_SEEN, key, ratio)


def _put(counts: Counts, key: Key, ratio: float) -> None:
    counts.setdefault(key, deque(maxlen=KEEP)).append(ratio)
    counts.move_to_end(key)
    while len(counts) > MODELS:
        counts.popitem(last=False)


def _refresh(where: Path) -> None:
    """Read the file again when another process replaced it since."""
    global _SEEN, _read_as
    now = (str(where), _identity(where))
    if now != _read_as:
        _SEEN, _read_as = _load(where), now


def _identity(where: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(where)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _load(where: Path) -> Counts:
    counts: Counts = OrderedDict()
    try:
        with open(where, "rb") as fh:
            raw = fh.read(FILE_BYTES + 1)
    except OSError:
        return counts
    if len(raw) > FILE_BYTES:
        return counts
    try:
        data = json.loads(raw)
    except ValueError:  # not JSON, not UTF-8
        return counts
    models = data.get("models") if isinstance(data, dict) else None
    for entry in models[-MODELS:] if isinstance(models, list) else ():
        if not isinstance(entry, dict):
            continue
        p, e, m = entry.get("provider"), entry.get("endpoint"), entry.get("model")
        ratios = entry.get("ratios")
        if not (isinstance(p, str) and isinstance(e, str) and isinstance(m, str)
                and _valid_key((p, e, m)) and isinstance(ratios, list)):
            continue
        kept = [float(r) for r in ratios[-KEEP:] if _valid_ratio(r)]
        if kept:
            counts[(p, e, m)] = deque(kept, maxlen=KEEP)
            counts.move_to_end((p, e, m))
    return counts


def _valid_key(key: tuple[str, str, str]) -> bool:
    return all(isinstance(k, str) and len(k) <= NAME_CHARS for k in key)


def _valid_ratio(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and 0 < value <= RATIO_MAX)


def _write(where: Path, counts: Counts) -> None:
    """The file, whole: the least recently counted models go while it is over FILE_BYTES."""
    models = [{"provider": p, "endpoint": e, "model": m, "ratios": [round(r, 4) for r in rs]}
              for (p, e, m), rs in counts.items()]
    text = json.dumps({"version": 1, "models": models})
    while len(text) > FILE_BYTES:  # ASCII (escaped): characters are bytes
        for key in list(counts)[:max(1, len(counts) // 4)]:
            del counts[key]
        models = models[-len(counts):] if counts else []
        text = json.dumps({"version": 1, "models": models})
    fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=f".{FILE_NAME}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(text)
        os.replace(tmp, where)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(where: Path) -> Iterator[None]:
    """The lock file beside `where`, held while a count is added (flock: released by the
    kernel if the process dies). Without fcntl (Windows) there is no lock: a count may be
    lost to a concurrent writer, the file never is."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(f"{where}.lock", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing gives the lock back
