"""The batches of the OpenAI Batch API (``/v1/batches``): their lifecycle and where they are kept.

A batch lives in ``<dir>/batches/<id>/``: ``batch.json`` (OpenAI's batch object plus its owner), and while it
runs the batch worker's files (``output.jsonl``, ``output.jsonl.errors.jsonl``, …: ``tiankong.batch.store``).
Its status moves only along :data:`TRANSITIONS` (checked by the engine's ``check_transition``, the one checker of
every state machine), under a lock, and every change is written to disk (atomic
rename) before anyone is told — so a gateway killed at any moment restarts with every batch where it was,
and the worker's output (one line per ``custom_id``, skipped on a re-run) carries on without losing or
repeating a line.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from ..engine.supervised import check_transition
from ..errors import ConfigError, TiankongError
from .files import FileNotFound
from .store import OutputPaths, write_json


class BatchState(enum.StrEnum):
    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


S = BatchState
TRANSITIONS: dict[BatchState, frozenset[BatchState]] = {
    S.VALIDATING: frozenset({S.IN_PROGRESS, S.FAILED, S.CANCELLING}),
    S.IN_PROGRESS: frozenset({S.FINALIZING, S.CANCELLING, S.EXPIRED, S.FAILED}),
    S.FINALIZING: frozenset({S.COMPLETED, S.FAILED}),
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.COMPLETED: frozenset(), S.FAILED: frozenset(), S.CANCELLED: frozenset(), S.EXPIRED: frozenset(),
}
#: the batch object's timestamp field set when a status is entered
STAMPS = {S.IN_PROGRESS: "in_progress_at", S.FINALIZING: "finalizing_at", S.COMPLETED: "completed_at",
          S.FAILED: "failed_at", S.CANCELLING: "cancelling_at", S.CANCELLED: "cancelled_at",
          S.EXPIRED: "expired_at"}
UNFINISHED = (S.VALIDATING, S.IN_PROGRESS, S.FINALIZING, S.CANCELLING)
WINDOW = re.compile(r"^([1-9][0-9]{0,3})([mh])$")
FIELDS = ("id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status", "output_file_id",
          "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
          "failed_at", "expired_at", "cancelling_at", "cancelled_at", "request_counts", "metadata")


class IllegalBatchTransition(TiankongError):
    type = "invalid_request_error"
    http_status = 409


class BatchNotFound(FileNotFound):
    pass


def window_s(window: str) -> float:
    """``24h`` (OpenAI's only value) or another ``<N>h`` / ``<N>m``, in seconds."""
    match = WINDOW.match(window) if isinstance(window, str) else None
    if match is None:
        raise ConfigError(f"completion_window {window!r} is not supported", hint="use \"24h\" (or <N>h, <N>m)")
    return int(match.group(1)) * (3600 if match.group(2) == "h" else 60)


def check_metadata(metadata: Any) -> dict[str, str] | None:
    """OpenAI's metadata: at most 16 string pairs, keys ≤ 64 and values ≤ 512 characters."""
    if metadata is None:
        return None
    if (not isinstance(metadata, dict) or len(metadata) > 16 or
            any(not isinstance(k, str) or not isinstance(v, str) or len(k) > 64 or len(v) > 512
                for k, v in metadata.items())):
        raise ConfigError("metadata must be at most 16 string keys (≤ 64 characters) with string values "
                          "(≤ 512 characters)", param="metadata")
    return dict(metadata)


class BatchStore:
    """Batches by id under ``<root>/batches``; status changes are checked and written under one lock."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "batches"
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        for meta in self.dir.glob("batch_*/batch.json"):
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(meta.read_text(encoding="utf-8"))
                self._records[record["id"]] = record

    def folder(self, batch_id: str) -> Path:
        return self.dir / batch_id

    def paths(self, batch_id: str) -> OutputPaths:
        """The batch worker's files for this batch."""
        return OutputPaths(self.folder(batch_id) / "output.jsonl")

    def create(self, *, owner: str, endpoint: str, input_file_id: str, completion_window: str,
               metadata: dict[str, str] | None, total: int) -> dict[str, Any]:
        now = int(time.time())
        batch_id = f"batch_{secrets.token_hex(12)}"
        record: dict[str, Any] = {key: None for key in FIELDS}
        record.update(id=batch_id, object="batch", endpoint=endpoint, input_file_id=input_file_id,
                      completion_window=completion_window, status=S.VALIDATING.value, created_at=now,
                      expires_at=now + int(window_s(completion_window)), metadata=metadata,
                      request_counts={"total": total, "completed": 0, "failed": 0}, owner=owner,
                      created_ns=time.time_ns())
        with self._lock:
            self.folder(batch_id).mkdir(parents=True, exist_ok=True)
            self._save(record)
        return public(record)

    def get(self, batch_id: str, owner: str | None) -> dict[str, Any]:
        """A copy of the stored record (``owner`` None: any owner)."""
        with self._lock:
            record = self._records.get(batch_id)
            if record is None or (owner is not None and record.get("owner", "") != owner):
                raise BatchNotFound(f"no batch {batch_id!r}", hint="list your batches: GET /v1/batches")
            copy: dict[str, Any] = json.loads(json.dumps(record))
            return copy

    def listing(self, owner: str, *, after: str | None = None, limit: int = 20) -> dict[str, Any]:
        """OpenAI's paginated list, newest first; ``after``: the last id of the previous page."""
        if not 1 <= limit <= 100:
            raise ConfigError("limit must be between 1 and 100")
        with self._lock:
            mine = sorted((r for r in self._records.values() if r.get("owner", "") == owner),
                          key=lambda r: (-r.get("created_ns", r["created_at"] * 10**9), r["id"]))
        ids = [r["id"] for r in mine]
        start = 0
        if after is not None:
            if after not in ids:
                raise BatchNotFound(f"no batch {after!r} to list after", hint="pass the last id of a page")
            start = ids.index(after) + 1
        page = [public(r) for r in mine[start:start + limit]]
        return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None, "has_more": start + limit < len(mine)}

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._lock:
            for record in self._records.values():
                counts[record["status"]] = counts.get(record["status"], 0) + 1
        return counts

    def unfinished(self) -> list[dict[str, Any]]:
        """Batches a restarted gateway carries on with, oldest first."""
        with self._lock:
            return sorted((json.loads(json.dumps(r)) for r in self._records.values()
                           if BatchState(r["status"]) in UNFINISHED),
                          key=lambda r: (r.get("created_ns", r["created_at"] * 10**9), r["id"]))

    def move(self, batch_id: str, new: BatchState, *, expected: tuple[BatchState, ...] | None = None,
             **fields: Any) -> dict[str, Any]:
        """Enter ``new`` (with its timestamp and ``fields``); :class:`IllegalBatchTransition` otherwise."""
        with self._lock:
            record = self._records[batch_id]
            old = BatchState(record["status"])

            def refuse(old: BatchState, new: BatchState) -> IllegalBatchTransition:
                return IllegalBatchTransition(f"batch {batch_id} is {old.value}; it cannot become {new.value}")

            if expected is not None and old not in expected:
                raise refuse(old, new)
            check_transition(TRANSITIONS, old, new, refuse)
            record.update(fields, status=new.value)
            record[STAMPS[new]] = int(time.time())
            self._save(record)
            return public(record)

    def update(self, batch_id: str, **fields: Any) -> None:
        """Change fields other than the status (progress counts, files)."""
        with self._lock:
            record = self._records[batch_id]
            record.update(fields)
            self._save(record)

    def _save(self, record: dict[str, Any]) -> None:
        write_json(self.folder(record["id"]) / "batch.json", record)
        self._records[record["id"]] = record


def public(record: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in FIELDS}
