"""Where tiankong keeps things: models in the data dir, engine builds and downloads in the cache dir.

Both honour an override (``TIANKONG_DATA_DIR``, ``TIANKONG_CACHE_DIR``) and otherwise follow the
platform convention (``XDG_DATA_HOME`` / ``XDG_CACHE_HOME`` on Linux).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    override = os.environ.get("TIANKONG_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("tiankong"))


def config_file() -> Path:
    """The config file ``tiankong serve`` reads when no ``--config`` is given (used only if it exists):
    ``TIANKONG_CONFIG``, else ``config.toml`` in the platform's config dir (``XDG_CONFIG_HOME``)."""
    override = os.environ.get("TIANKONG_CONFIG")
    return Path(override) if override else Path(platformdirs.user_config_dir("tiankong")) / "config.toml"


def default_model(given: str | None = None) -> str | None:
    """``given``, else ``TIANKONG_MODEL`` (None: the caller's own default)."""
    return given or os.environ.get("TIANKONG_MODEL") or None


def cache_dir() -> Path:
    override = os.environ.get("TIANKONG_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("tiankong"))


def models_dir() -> Path:
    return data_dir() / "models"


def engine_cache_dir() -> Path:
    return cache_dir() / "engine"


def downloads_dir() -> Path:
    return cache_dir() / "downloads"


def logs_dir() -> Path:
    return cache_dir() / "logs"
