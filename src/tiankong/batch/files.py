"""The files of the OpenAI Batch API (``/v1/files``): uploaded batch inputs and the outputs batches write.

A file is two entries in ``<dir>/files/``: ``<id>.jsonl`` (its bytes) and ``<id>.json`` (OpenAI's file object
plus its owner, the hash of the API key that uploaded it: "" without keys). A ``purpose="batch"`` upload is
checked line by line before it is kept: every line a JSON object ``{custom_id, method: "POST", url, body}``
with a supported ``url``, every ``custom_id`` once — a file that fails is refused with the line numbers of
(up to ten of) its problems, and nothing is stored. What a line's body asks for is checked when it runs: a
bad body becomes a line of the batch's error file, with its line number.

The files are private: the folder is 0700 and every file in it 0600 (prompts, answers, owners); a file's
``expires_at`` is ``ttl_s`` after it was made, and an expired file is removed (``sweep``) and not found.
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

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600

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


class QuotaExceeded(TiankongError):
    """A per-key limit (``batches.key_max_*``) would be passed; the message names it."""

    type = "rate_limit_exceeded"
    http_status = 429

    def __init__(self, limit: str, value: int, message: str, hint: str) -> None:
        super().__init__(f"{message} (limit batches.{limit} = {value})", hint=hint)
        self.code, self.param = "quota_exceeded", limit


def private_dir(path: Path) -> Path:
    """``path`` made (if missing) and kept 0700."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    path.chmod(PRIVATE_DIR)
    return path


def write_private_json(path: Path, data: Any) -> None:
    """A small JSON file written atomically (temp file, fsync, rename), 0600 from its first byte."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(out.fileno(), PRIVATE_FILE)
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


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
                # a byte-order mark opens the file (as `batch run` reads it), not the first request
                data = jsonsafe.loads(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
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

    def __init__(self, root: Path, *, max_bytes: int, max_requests: int, ttl_s: float = 30 * 86400.0,
                 clock: Any = time.time) -> None:
        self.dir = root / "files"
        self.max_bytes, self.max_requests, self.ttl_s, self.clock = max_bytes, max_requests, ttl_s, clock
        if self.dir.is_dir():  # files kept by an older version: private now
            private_dir(self.dir)
            for entry in self.dir.iterdir():
                with contextlib.suppress(OSError):
                    entry.chmod(PRIVATE_FILE)

    def _data(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.jsonl"

    def _meta(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.json"

    def upload(self, source: BinaryIO, *, filename: str, purpose: str, owner: str) -> dict[str, Any]:
        """Store an upload (checked first if it is a batch input); its file object."""
        if purpose != "batch":
            raise ConfigError(f"purpose {purpose!r} is not supported here", hint="upload with purpose=batch")
        file_id = f"file-{secrets.token_hex(12)}"
        private_dir(self.dir)
        part = self.dir / f".{file_id}.part"
        try:
            size = _copy_limited(source, part, self.max_bytes)
            found = check_batch_input(part, self.max_requests)
            os.replace(part, self._data(file_id))
        finally:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        now = int(self.clock())
        record = {"id": file_id, "object": "file", "bytes": size, "created_at": now,
                  "filename": filename or "upload.jsonl", "purpose": purpose, "status": "processed",
                  "expires_at": now + int(self.ttl_s), "status_details": None,
                  "owner": owner, "requests": found.requests, "urls": list(found.urls)}
        write_private_json(self._meta(file_id), record)
        return public(record)

    def adopt(self, path: Path, file_id: str, *, filename: str, owner: str) -> str:
        """Register a file a batch wrote (its output or errors) as ``file_id``; doing it again after a crash
        half-way through is safe (the move and the record each happen once)."""
        private_dir(self.dir)
        stored = self._data(file_id)
        if not stored.exists():
            if path.exists():
                os.replace(path, stored)
            else:
                stored.touch(mode=PRIVATE_FILE)
        stored.chmod(PRIVATE_FILE)
        if not self._meta(file_id).exists():
            now = int(self.clock())
            write_private_json(self._meta(file_id), {
                "id": file_id, "object": "file", "bytes": self._data(file_id).stat().st_size,
                "created_at": now, "filename": filename, "purpose": "batch_output",
                "status": "processed", "expires_at": now + int(self.ttl_s), "status_details": None, "owner": owner})
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
            raise FileNotFound(f"no file {cut_id(file_id)!r}", hint="list your files: GET /v1/files")
        record: dict[str, Any] = json.loads(self._meta(file_id).read_text(encoding="utf-8"))
        if owner is not None and (record.get("owner", "") != owner or self._expired(record)):
            raise FileNotFound(f"no file {cut_id(file_id)!r}", hint="list your files: GET /v1/files")
        return record

    def _expired(self, record: dict[str, Any]) -> bool:
        expires = record.get("expires_at")
        return isinstance(expires, int | float) and expires <= self.clock()

    def _records(self) -> Iterator[dict[str, Any]]:
        for meta in self.dir.glob("file-*.json") if self.dir.exists() else []:
            with contextlib.suppress(OSError, ValueError):
                yield json.loads(meta.read_text(encoding="utf-8"))

    def usage(self, owner: str) -> tuple[int, int]:
        """(files, bytes) the owner keeps (expired files not counted)."""
        kept = [r for r in self._records() if r.get("owner", "") == owner and not self._expired(r)]
        return len(kept), sum(int(r.get("bytes") or 0) for r in kept)

    def sweep(self, keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """Remove every expired file but those in ``keep`` (inputs of unfinished batches); their ids."""
        gone = []
        for record in list(self._records()):
            if self._expired(record) and record.get("id") not in keep and _valid_id(str(record.get("id"))):
                self._data(record["id"]).unlink(missing_ok=True)
                self._meta(record["id"]).unlink(missing_ok=True)
                gone.append(str(record["id"]))
        return gone

    def migrate_owners(self, owners: dict[str, str]) -> int:
        """Records whose owner is a key in ``owners`` (an older version's unsalted key hash) get the value (its
        salted id) instead; how many were rewritten. Kept as they are otherwise, so they stay readable."""
        changed = 0
        for record in list(self._records()):
            new = owners.get(record.get("owner", ""))
            if new is not None and _valid_id(str(record.get("id"))):
                record["owner"] = new
                write_private_json(self._meta(record["id"]), record)
                changed += 1
        return changed

    def path(self, file_id: str, owner: str | None) -> Path:
        self.record(file_id, owner)
        return self._data(file_id)

    def listing(self, owner: str, purpose: str | None = None) -> list[dict[str, Any]]:
        """The owner's files, newest first."""
        records = [r for r in self._records() if r.get("owner", "") == owner and
                   purpose in (None, r.get("purpose")) and not self._expired(r)]
        return [public(r) for r in sorted(records, key=lambda r: (-r["created_at"], r["id"]))]

    def delete(self, file_id: str, owner: str) -> None:
        self.record(file_id, owner)
        self._data(file_id).unlink(missing_ok=True)
        self._meta(file_id).unlink(missing_ok=True)

    def chunks(self, file_id: str, owner: str) -> Iterator[bytes]:
        with self.path(file_id, owner).open("rb") as handle:
            while chunk := handle.read(COPY_CHUNK):
                yield chunk


def migrate_batch_owners(batches_dir: Path, owners: dict[str, str]) -> int:
    """``migrate_owners`` for the batch records (``<id>/batch.json``), before a ``BatchStore`` reads them."""
    changed = 0
    for meta in batches_dir.glob("batch_*/batch.json"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(meta.read_text(encoding="utf-8"))
            new = owners.get(record.get("owner", ""))
            if new is not None:
                record["owner"] = new
                write_private_json(meta, record)
                changed += 1
    return changed


def public(record: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's file object (what the store keeps besides — owner, request count — stays inside)."""
    return {key: record.get(key) for key in ("id", "object", "bytes", "created_at", "filename", "purpose",
                                              "status", "expires_at", "status_details")}


def cut_id(value: object, limit: int = 64) -> str:
    """An id as error messages show it: at most ``limit`` characters (what a caller sent is not echoed whole)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _valid_id(file_id: str) -> bool:
    return file_id.startswith("file-") and file_id[5:].isalnum() and len(file_id) <= 64


def _copy_limited(source: BinaryIO, target: Path, limit: int) -> int:
    size = 0
    with os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE), "wb") as out:
        while chunk := source.read(COPY_CHUNK):
            size += len(chunk)
            if size > limit:
                raise FileTooLarge(f"the file is larger than the limit of {limit} bytes",
                                   hint="split it into several batches (or raise batches.max_file_bytes)")
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size
