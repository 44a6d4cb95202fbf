"""Files an engine process leaves behind: its log (owner-only, the oldest pruned) and its short-lived key file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO

#: engine logs kept in the logs folder (oldest removed first when a new engine starts)
KEEP_LOGS = 20


def open_private(path: Path) -> BinaryIO:
    """``path`` opened for writing, readable by its owner only (0600): logs may hold prompts and paths."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def prune_logs(folder: Path, keep: int = KEEP_LOGS) -> None:
    """Remove all but the newest ``keep - 1`` engine logs (room for the one about to be written)."""
    found = sorted(folder.glob("llama-server-*.log"), key=lambda p: p.stat().st_mtime)
    for old in found[: max(0, len(found) - (keep - 1))]:
        old.unlink(missing_ok=True)


def write_key_file(key: str) -> Path:
    """The engine's API key in a new 0600 file (llama-server's ``--api-key-file``)."""
    handle, name = tempfile.mkstemp(prefix="tiankong-engine-", suffix=".key")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    return Path(name)
