"""Per-test engine log capture: what one engine wrote to its log from a point on (no test reads another test's
lines in a shared engine's log — the order dependency of test_schema_rewrites after test_hardening, which read the
shared engine's last 200 lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Logged(Protocol):
    @property
    def log_path(self) -> Path | None: ...


class LogWindow:
    """The lines ``process`` writes to its log after this window opens. A restart moves the log to a new file:
    the rest of the old file and all of the new one are read."""

    def __init__(self, process: Logged) -> None:
        self.process = process
        self.path = process.log_path
        self.offset = self.path.stat().st_size if self.path is not None and self.path.exists() else 0

    def text(self) -> str:
        parts = []
        current = self.process.log_path
        if self.path is not None:
            if not self.path.exists():
                raise AssertionError(f"the engine log {self.path} was removed while a test read it (pruned?)")
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                parts.append(handle.read())
        if current is not None and current != self.path and current.exists():
            parts.append(current.read_bytes())
        return b"".join(parts).decode("utf-8", "replace")
