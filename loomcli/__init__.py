"""loom: a local, searchable memory of your notes and PDFs."""

__version__ = "0.1.0"
