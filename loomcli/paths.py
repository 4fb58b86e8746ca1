"""Where loom keeps its files: `LOOM_HOME` (default ~/.loom), `LOOM_CONFIG`."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("LOOM_HOME")
    return Path(env).expanduser() if env else Path.home() / ".loom"


def config_path(override: str | os.PathLike[str] | None = None) -> Path:
    """The config file: `--config`, else `LOOM_CONFIG`, else `<home>/config.toml`."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("LOOM_CONFIG")
    return Path(env).expanduser() if env else home() / "config.toml"


def default_db_path() -> Path:
    return home() / "index.db"
