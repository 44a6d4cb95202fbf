"""The files of the OpenAI Batch API (``/v1/files``): uploaded batch inputs and the outputs batches write.

A file is two entries in ``<dir>/files/``: ``<id>.jsonl`` (its bytes) and ``<id>.json`` (OpenAI's file object
plus its owner, the hash of the API key that uploaded it: "" without keys). A ``purpose="batch"`` upload is
checked line by line before it is kept: every line a JSON object ``{custom_id, method: "POST", url, body}``
with a supported ``url``, every ``custom_id`` once — a file that fails is refused with the line numbers of
(up to ten of) its problems, and nothing is stored. What a line's body asks for is checked when it runs: a
bad body becomes a line of the batch's error file, with its line number.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .. import jsonsafe
from ..errors import ConfigError, TiankongError
from .openai_fmt import check_line
from .store import write_json

PURPOSES = ("batch", "batch_output")
MAX_PROBLEMS = 10
COPY_CHUNK = 1 << 20


class FileNotFound(TiankongError):
    """No such file for this key (another key's file is not found either)."""

    type = "invalid_request_error"
    http_status = 404


class InvalidFile(ConfigError):
    """An upload that is not a valid batch input; ``problems`` are ``(line, message)`` pairs."""

    def __init__(self, message: str, problems: list[tuple[int, str]] | None = None) -> None:
        self.problems = problems or []
        shown = "; ".join(f"line {line}: {text}" for line, text in self.problems[:MAX_PROBLEMS])
        more = len(self.problems) - MAX_PROBLEMS
        super().__init__(f"{message}: {shown}{f' (and {more} more)' if more > 0 else ''}" if shown else message,
                         hint="fix those lines and upload the file again")
        self.param = "file"


class FileTooLarge(ConfigError):
    http_status = 413


class FileInUse(TiankongError):
    """A batch input that an unfinished batch still reads."""

    type = "invalid_request_error"
    http_status = 409


@dataclass(frozen=True)
class BatchInput:
    """What a valid batch input holds: the request lines and the URLs they go to."""

    requests: int
    urls: tuple[str, ...]


def check_batch_input(path: Path, max_requests: int) -> BatchInput:
    """Every line of an uploaded batch input, or :class:`InvalidFile` listing the bad lines."""
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    urls: set[str] = set()
    requests = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            requests += 1
            if requests > max_requests:
                raise InvalidFile(f"the file holds more than {max_requests} requests; at most {max_requests} per "
                                  "batch (split it, or raise batches.max_requests)")
            try:
                data = jsonsafe.loads(raw.decode("utf-8"))
                urls.add(check_line(data))
            except UnicodeDecodeError:
                problems.append((number, "not UTF-8"))
                continue
            except (ValueError, ConfigError) as exc:
                problems.append((number, exc.message if isinstance(exc, ConfigError) else f"not JSON ({exc})"))
                continue
            custom_id = data["custom_id"]
            if custom_id in seen:
                problems.append((number, f"custom_id {custom_id!r} is also on line {seen[custom_id]} "
                                 "(each request needs its own)"))
            else:
                seen[custom_id] = number
            if len(problems) > 100:
                break
    if problems:
        raise InvalidFile("the batch input has invalid lines", problems)
    if requests == 0:
        raise InvalidFile("the batch input holds no request lines")
    return BatchInput(requests, tuple(sorted(urls)))


class FileStore:
    """Files by id under ``<root>/files``, each visible only to the key that owns it."""

    def __init__(self, root: Path, *, max_bytes: int, max_requests: int) -> None:
        self.dir = root / "files"
        self.max_bytes, self.max_requests = max_bytes, max_requests

    def _data(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.jsonl"

    def _meta(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.json"

    def upload(self, source: BinaryIO, *, filename: str, purpose: str, owner: str) -> dict[str, Any]:
        """Store an upload (checked first if it is a batch input); its file object."""
        if purpose != "batch":
            raise ConfigError(f"purpose {purpose!r} is not supported here", hint="upload with purpose=batch")
        file_id = f"file-{secrets.token_hex(12)}"
        self.dir.mkdir(parents=True, exist_ok=True)
        part = self.dir / f".{file_id}.part"
        try:
            size = _copy_limited(source, part, self.max_bytes)
            found = check_batch_input(part, self.max_requests)
            os.replace(part, self._data(file_id))
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        record = {"id": file_id, "object": "file", "bytes": size, "created_at": int(time.time()),
                  "filename": filename or "upload.jsonl", "purpose": purpose, "status": "processed",
                  "expires_at": None, "status_details": None,
                  "owner": owner, "requests": found.requests, "urls": list(found.urls)}
        write_json(self._meta(file_id), record)
        return public(record)

    def adopt(self, path: Path, file_id: str, *, filename: str, owner: str) -> str:
        """Register a file a batch wrote (its output or errors) as ``file_id``; doing it again after a crash
        half-way through is safe (the move and the record each happen once)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        stored = self._data(file_id)
        if not stored.exists():
            if path.exists():
                os.replace(path, stored)
            else:
                stored.touch()
        if not self._meta(file_id).exists():
            write_json(self._meta(file_id), {
                "id": file_id, "object": "file", "bytes": self._data(file_id).stat().st_size,
                "created_at": int(time.time()), "filename": filename, "purpose": "batch_output",
                "status": "processed", "expires_at": None, "status_details": None, "owner": owner})
        return file_id

    def has(self, file_id: str) -> bool:
        return self._data(file_id).exists()

    def reclaim(self, file_id: str, path: Path) -> None:
        """Undo an ``adopt`` whose batch did not end (a crash between the move and the status change)."""
        if self._data(file_id).exists() and not path.exists():
            os.replace(self._data(file_id), path)
        if not self._data(file_id).exists():
            self._meta(file_id).unlink(missing_ok=True)

    def record(self, file_id: str, owner: str | None) -> dict[str, Any]:
        """The stored record (``owner`` None: any owner, for the gateway's own use)."""
        if not _valid_id(file_id) or not self._meta(file_id).exists():
            raise FileNotFound(f"no file {file_id!r}", hint="list your files: GET /v1/files")
        record: dict[str, Any] = json.loads(self._meta(file_id).read_text(encoding="utf-8"))
        if owner is not None and record.get("owner", "") != owner:
            raise FileNotFound(f"no file {file_id!r}", hint="list your files: GET /v1/files")
        return record

    def path(self, file_id: str, owner: str | None) -> Path:
        self.record(file_id, owner)
        return self._data(file_id)

    def listing(self, owner: str, purpose: str | None = None) -> list[dict[str, Any]]:
        """The owner's files, newest first."""
        records = []
        for meta in self.dir.glob("file-*.json") if self.dir.exists() else []:
            with contextlib.suppress(OSError, ValueError):
                record = json.loads(meta.read_text(encoding="utf-8"))
                if record.get("owner", "") == owner and purpose in (None, record.get("purpose")):
                    records.append(record)
        return [public(r) for r in sorted(records, key=lambda r: (-r["created_at"], r["id"]))]

    def delete(self, file_id: str, owner: str) -> None:
        self.record(file_id, owner)
        self._data(file_id).unlink(missing_ok=True)
        self._meta(file_id).unlink(missing_ok=True)

    def chunks(self, file_id: str, owner: str) -> Iterator[bytes]:
        with self.path(file_id, owner).open("rb") as handle:
            while chunk := handle.read(COPY_CHUNK):
                yield chunk


def public(record: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's file object (what the store keeps besides — owner, request count — stays inside)."""
    return {key: record.get(key) for key in ("id", "object", "bytes", "created_at", "filename", "purpose",
                                              "status", "expires_at", "status_details")}


def _valid_id(file_id: str) -> bool:
    return file_id.startswith("file-") and file_id[5:].isalnum() and len(file_id) <= 64


def _copy_limited(source: BinaryIO, target: Path, limit: int) -> int:
    size = 0
    with target.open("wb") as out:
        while chunk := source.read(COPY_CHUNK):
            size += len(chunk)
            if size > limit:
                raise FileTooLarge(f"the file is larger than the limit of {limit} bytes",
                                   hint="split it into several batches (or raise batches.max_file_bytes)")
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size
