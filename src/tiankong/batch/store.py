"""The output files: append-only JSONL written in whole lines, fsynced in small groups, repaired on start.

* ``OUT``               one line per finished item (``{"id", "task", "result", "usage", "latency_s"}``, or the
                        OpenAI batch output format);
* ``OUT.errors.jsonl``  one line per failed item (an append-only log; compacted at the end of a run);
* ``OUT.job.json``      the job that produced them (so ``batch status`` finds the input);
* ``OUT.report.json``   the final report of the last finished run;
* ``OUT.lock``          held (``flock``) by the run writing ``OUT``: a second run on the same output is refused;
* ``OUT.calls.jsonl``   a ``dedupe`` job only: the engine answers of its step so far (``batch/journal.py``),
                        removed once ``OUT`` is written;
* ``OUT.ordering``      ``keep_order`` only: the input-ordered copy of ``OUT`` while it is written (renamed over
                        ``OUT`` when complete; a leftover one is removed at the start of the next run).

Exactly once is the store's own rule, not only the scheduler's: a run writes its results through one
:class:`OutputWriter`, which knows every id already in ``OUT`` (earlier runs) or written by this run and refuses a
second result for any of them — the line is not written, and the refusal is logged as a defect naming both
attempts. Together with the lock (one writer per output at a time, across processes too) no input id can appear
twice in ``OUT``, whatever happened to its engine requests (retries, a line that stepped aside, an engine restart).

A crash (``kill -9``) can leave a torn last line; :func:`repair` truncates the file to its last newline
before anything else reads it, so every line that stays is a complete JSON document.

Input order (``keep_order``, :func:`put_in_order`) is a step *after* a run, not a way of writing: results are
still appended in completion order through the one ``OutputWriter`` (so the exactly-once rules above, the resume
rule "the ids in ``OUT`` are done" and the crash behaviour are exactly those of an unordered run), and when the
run has finished, ``OUT`` is copied line by line into ``OUT.ordering`` in the input's order, fsynced and renamed
over ``OUT`` in one ``rename``. A crash at any moment leaves either the old ``OUT`` or the ordered one — the same
set of lines either way, each id once (the copy takes every line exactly once and is only renamed when its line
count equals the original's) — and the next run that finishes orders whatever a killed run appended. Holding
results back in memory until the ones before them are done was the other way; it was not taken because one slow
or failed item would hold back (and a crash would lose) everything after it, memory would grow with the
distance between the oldest unfinished item and the newest finished one, and a resumed or ``--retry-failed`` run
appends ids that belong before lines already written, which only a rewrite can put in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .identity import INPUT_HEAD, JOB_IDENTITY, input_head
from .inputs import id_key

CHUNK = 1 << 16
FLUSH_AFTER_S = 0.25
log = logging.getLogger("tiankong.batch")


@dataclass(frozen=True)
class OutputPaths:
    output: Path

    @property
    def errors(self) -> Path:
        return self.output.with_name(self.output.name + ".errors.jsonl")

    @property
    def job(self) -> Path:
        return self.output.with_name(self.output.name + ".job.json")

    @property
    def report(self) -> Path:
        return self.output.with_name(self.output.name + ".report.json")

    @property
    def lock(self) -> Path:
        return self.output.with_name(self.output.name + ".lock")

    @property
    def ordering(self) -> Path:
        return self.output.with_name(self.output.name + ".ordering")

    @property
    def calls(self) -> Path:
        """A whole-data-set step's journal of engine answers (``batch/journal.py``)."""
        return self.output.with_name(self.output.name + ".calls.jsonl")

    def check_input(self, input: str | Path) -> None:
        """The input must not be one of the files the job writes (it would be read while it is rewritten)."""
        source = Path(input).resolve()
        for written in (self.output, self.errors, self.job, self.report, self.lock, self.ordering, self.calls):
            same = source == written.resolve() or (source.exists() and written.exists()
                                                   and os.path.samefile(source, written))  # a hard link too
            if same:
                raise ConfigError(f"the input {input} is the file the job writes as {written} — the output would "
                                  "overwrite what is being read", hint="choose another --output path")

    def check_same_job(self, job: dict[str, Any]) -> None:
        """A run that goes on with ``OUT`` must be the job that wrote it: another task or input would leave the other
        job's lines counted as this one's, done (a run reported complete, 0 processed). An ``OUT`` with lines and no
        ``OUT.job.json`` was written by no job (a job writes that file before its first line): it was adopted — a copy
        of the input counted as every line done, a stray line's id as done, its unterminated last line cut off."""
        if not self.output.exists() or self.output.stat().st_size == 0:
            return
        if not self.job.exists():
            raise ConfigError(f"{self.output} already holds lines that no batch job wrote (there is no "
                              f"{self.job.name} beside it)", hint="write to another --output (a job only resumes "
                              "an output it wrote)")
        try:
            stored = json.loads(self.job.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if not isinstance(stored, dict):
            raise ConfigError(f"{self.output} holds results, and {self.job.name} that says which job wrote them is "
                              "unreadable", hint=f"write to another --output, or remove {self.output} and its "
                              f"{self.output.name}.* files to start again")
        for key in (k for k in JOB_IDENTITY if k in stored):  # (a key an older version did not write: not compared)
            before, now = stored[key], job.get(key)
            if key == "input" and before and now:
                before, now = str(Path(before).resolve()), str(Path(now).resolve())
                head = stored.get(INPUT_HEAD)
                if before != now and not Path(before).exists() and head and head == input_head(now):
                    continue  # the same input, moved (its old path is gone, its first 64 KiB the same)
            if before != now:
                raise ConfigError(f"{self.output} holds the results of another job ({key}: {before!r}, not "
                                  f"{now!r})", hint=f"write to another --output, or remove {self.output} and its "
                                  f"{self.output.name}.* files to start again")


def record_key(record: dict[str, Any]) -> str:
    """The input id a written line belongs to (``custom_id`` in the OpenAI format, else ``id``)."""
    value = record["custom_id"] if "custom_id" in record else record.get("id")
    return id_key(value, record.get("line"))


def repair(path: Path) -> int:
    """Truncate a torn last line (no trailing newline); returns the number of bytes removed."""
    if not path.exists():
        return 0
    with path.open("r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - CHUNK)
            handle.seek(start)
            block = handle.read(end - start)
            if end == size and block.endswith(b"\n"):
                return 0
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        handle.truncate(end)
        handle.flush()
        os.fsync(handle.fileno())
    return size - end


def iter_lines(path: Path, *, strict: bool = True) -> Iterator[dict[str, Any]]:
    """The JSON lines of a written file (a torn last line is skipped when ``strict`` is off)."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.endswith(b"\n") and not strict:
                return  # a torn line still being written or left by a crash
            try:
                record = json.loads(raw)
            except ValueError:
                raise ConfigError(f"{path} line {number} is not valid JSON",
                                  hint="the file was edited or damaged; fix or remove that line") from None
            if isinstance(record, dict):
                yield record


def written_keys(path: Path, *, strict: bool = True) -> set[str]:
    """Ids already in a written file. Memory: one key per line (ids, not records)."""
    return {record_key(record) for record in iter_lines(path, strict=strict)}


class Appender:
    """Appends whole JSON lines to a file; one ``write`` and one ``fsync`` per group of lines."""

    def __init__(self, path: Path, group: int = 16) -> None:
        self.path, self.group = path, group
        self._fd: int | None = None
        self._pending: list[bytes] = []
        self._first_pending = 0.0
        self.written = 0

    def add(self, record: dict[str, Any]) -> None:
        if not self._pending:
            self._first_pending = time.monotonic()
        self._pending.append(json.dumps(record, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
        if len(self._pending) >= self.group:
            self.flush()

    def due(self) -> bool:
        return bool(self._pending) and time.monotonic() - self._first_pending >= FLUSH_AFTER_S

    def flush(self) -> None:
        if not self._pending:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        data = memoryview(b"".join(self._pending))
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)
        self.written += len(self._pending)
        self._pending.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class OutputLocked(ConfigError):
    """Another run is writing the same output."""


class OutputLock:
    """An exclusive ``flock`` on ``OUT.lock`` for as long as a run writes ``OUT`` (two runs of one output, in one
    process or two, would each answer the ids the other has not written yet: every such id twice)."""

    def __init__(self, paths: OutputPaths) -> None:
        self.path = paths.lock
        try:
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write {self.path}: {exc.strerror or exc}",
                              hint="choose a writable --output path") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise OutputLocked(f"another run is writing {paths.output}",
                               hint="wait for it to end (or stop it), then run again: finished ids are kept") from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


class OutputWriter:
    """The output of one run: whole lines through an :class:`Appender`, each input id at most once.

    ``written`` maps every id already in the file (an earlier run's line: its attempt id, or its line number)
    and every id this run wrote (the attempt id it was written with). :meth:`add` refuses a result for an id in
    it, logs the refusal as a defect naming both attempts, and counts it in ``refused``."""

    def __init__(self, path: Path, group: int = 16) -> None:
        self.path = path
        self.written: dict[str, str | int] = {}
        for number, record in enumerate(iter_lines(path), start=1):
            self.written.setdefault(record_key(record), _attempt_of(record) or number)
        self.appender = Appender(path, group)
        self.refused = 0

    def add(self, record: dict[str, Any], attempt: str) -> bool:
        """Write ``record`` (a result of ``attempt``) unless its id has a result already; True when written."""
        key = record_key(record)
        first = self.written.get(key)
        if first is not None:
            self.refused += 1
            where = f"line {first} of {self.path.name}" if isinstance(first, int) else f"attempt {first}"
            log.error("defect: a second result for id %s (attempt %s) was refused; its result was written by %s",
                      key, attempt, where)
            return False
        self.written[key] = attempt
        self.appender.add(record)
        return True

    def due(self) -> bool:
        return self.appender.due()

    def flush(self) -> None:
        self.appender.flush()

    def close(self) -> None:
        self.appender.close()


def _attempt_of(record: dict[str, Any]) -> str | None:
    """The attempt id an OpenAI-format line carries (``batch_req_…``)."""
    value = record.get("id")
    return value if "custom_id" in record and isinstance(value, str) else None


def put_in_order(path: Path, keys: Iterable[str], scratch: Path) -> bool:
    """Rewrite ``path`` (a repaired ``OUT``, no writer open on it) with its lines in the order of ``keys`` (the
    input's ids in input order); lines of ids not in ``keys`` follow, in their order in the file. The copy is
    written to ``scratch``, fsynced and renamed over ``path`` only when it holds every line of ``path`` once.
    Memory: one offset per line (like the id set of :class:`OutputWriter`). True when the file was rewritten,
    False when it was already in order (then it is not touched)."""
    if not path.exists():
        return False
    where: dict[str, tuple[int, int]] = {}  # id -> (offset, length) of its (first) line
    others: list[tuple[int, int]] = []  # lines of a repeated id (never written by a writer): kept, in file order
    offset = lines = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                record = json.loads(raw) if raw.endswith(b"\n") else None
            except ValueError:
                record = None
            if record is None:
                raise ConfigError(f"{path} line {number} is not a whole JSON line",
                                  hint="the file was edited or damaged; fix or remove that line") from None
            span = (offset, len(raw))
            key = record_key(record) if isinstance(record, dict) else None
            if key is None or key in where:
                others.append(span)
            else:
                where[key] = span
            offset += len(raw)
            lines += 1
    order = [where.pop(key) for key in keys if key in where]
    order += sorted([*where.values(), *others])  # not in the input (or repeated): after the input's ids
    if all(a[0] < b[0] for a, b in zip(order, order[1:], strict=False)):
        return False
    copied = 0
    with path.open("rb") as source, scratch.open("wb") as target:
        for start, length in order:
            source.seek(start)
            target.write(source.read(length))
            copied += 1
        target.flush()
        os.fsync(target.fileno())
    if copied != lines:  # never expected: the rename would lose or repeat lines
        scratch.unlink(missing_ok=True)
        raise ConfigError(f"putting {path} in input order copied {copied} of its {lines} lines; left as it was")
    os.replace(scratch, path)
    _fsync_dir(path.parent)
    return True


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact_errors(path: Path, done: Container[str], malformed: Container[str] | None = None) -> int:
    """Rewrite the error log with the last entry of each id that is still not done; returns its entries.
    ``malformed``: the ``line:N`` keys of the lines that are still not records — an entry for a line fixed since
    (the user mended the JSON) is dropped, not counted as failed for good."""
    if not path.exists():
        return 0
    last: dict[str, int] = {}
    for index, record in enumerate(iter_lines(path)):
        last[record_key(record)] = index
    keep = {index for key, index in last.items() if key not in done
            and (malformed is None or not key.startswith("line:") or key in malformed)}
    if len(keep) == sum(1 for _ in iter_lines(path)):
        return len(keep)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as handle:
        for index, record in enumerate(iter_lines(path)):
            if index in keep:
                handle.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    if not keep:
        with contextlib.suppress(OSError):
            path.unlink()
    return len(keep)


def write_json(path: Path, data: Any) -> None:
    """Write a small JSON file atomically (temp file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    with tmp.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
