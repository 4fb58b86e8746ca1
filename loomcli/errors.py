"""Typed errors with a hint for the user, and the exit codes they map to.

Library code raises these; the edges (CLI, MCP, HTTP) translate them once.
"""

from __future__ import annotations

import enum


class Exit(enum.IntEnum):
    OK = 0
    PARTIAL = 1  # scan finished but some files failed; grep found nothing
    ERROR = 2  # could not run: bad config, pattern, query, missing root, provider down
    INTERRUPTED = 130


class LoomError(Exception):
    """An error the user can act on: `message` says what, `hint` what to do next."""

    exit_code = Exit.ERROR

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        # Keep the hint when an error crosses a process boundary (PDF workers).
        return (self.__class__, (self.message, self.hint))

    def __str__(self) -> str:
        return f"{self.message} — {self.hint}" if self.hint else self.message


class ConfigError(LoomError):
    """config.toml cannot be read or a key has the wrong type."""


class IgnorePatternError(LoomError):
    """A .loomignore or config `ignore` pattern is malformed."""


class RootError(LoomError):
    """A folder to scan is missing or is not a folder."""


class IndexMissingError(LoomError):
    """No index yet, or a path that is not in it."""


class QueryError(LoomError):
    """A search query or a grep pattern cannot be used."""


class ExtractionError(LoomError):
    """One file cannot be read or its text extracted; the scan records it and goes on.

    `ocr`: the outcome depends on the OCR tool and its settings (Tesseract missing, off,
    its languages), so the scan tries the file again once they change."""

    def __init__(self, message: str, hint: str | None = None, ocr: bool = False) -> None:
        super().__init__(message, hint)
        self.ocr = ocr

    def __reduce__(self) -> tuple[type, tuple[str, str | None, bool]]:  # type: ignore[override]
        return (self.__class__, (self.message, self.hint, self.ocr))


class NoTextError(ExtractionError):
    """A valid document that holds no text (an image-only PDF without OCR text): the scan
    skips it with this reason instead of failing it."""


class ProviderError(LoomError):
    """The LLM endpoint is unreachable or refused the request."""


class ContextExceeded(ProviderError):
    """The server refused the prompt as longer than the model's window (HTTP 400/413)."""


class ToolsUnsupported(ProviderError):
    """The model or server does not take tool definitions (Ollama's "does not support
    tools", an OpenAI-compatible server rejecting `tools`)."""


class IndexStateError(LoomError):
    """The index file cannot be used as it is: damaged, foreign, newer, unwritable, full."""


class BusyError(LoomError):
    """Another scan holds the index's write lock."""


class StoreDownError(LoomError):
    """A PostgreSQL server of the store does not answer (the primary for a write, every
    server for a read)."""
