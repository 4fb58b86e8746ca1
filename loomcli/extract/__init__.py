"""Text extraction, one module per kind. Page boundaries are kept for PDFs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Extracted:
    text: str
    title: str
    # Byte offset (in the UTF-8 text) where each page starts; None for notes.
    pages: list[int] | None = None
    engine: str = "text"
