"""Streaming input readers: JSONL, CSV, a folder of text files, OpenAI Batch API input files.

Every reader yields one ``Item`` at a time (never the whole file): a record with its id and line number,
or a malformed line with the reason. Ids are compared by their JSON text (``key``), so the id ``5`` and
the id ``"5"`` stay distinct; a record without an id gets its line number.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import jsonsafe
from ..errors import ConfigError
from .job import BatchJob

CSV_SUFFIXES = (".csv", ".tsv")
MAX_LISTED = 5


@dataclass
class Item:
    """One input record (``data``) or a malformed line (``error``)."""

    line: int
    id: Any = None
    data: dict[str, Any] | None = None
    error: str | None = None
    #: the record has no id: its line number stands in (and must not be another record's id)
    line_id: bool = False

    @property
    def key(self) -> str:
        return id_key(self.id, self.line)


CHECK_INPUT = "check the input's path (--input, or the job's input)"


def id_key(value: Any, line: int | None) -> str:
    """The comparable form of an id (its JSON text); ``line:N`` for a line without a usable id."""
    if value is None:
        return f"line:{line}"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def detect_format(input: str | Path, fmt: str = "auto") -> str:
    path = Path(input)
    if not path.exists():
        raise ConfigError(f"the input {path} does not exist", hint=CHECK_INPUT)
    if fmt == "folder" and not path.is_dir():
        raise ConfigError(f"--format folder reads a directory, and {path} is a file",
                          hint="give the folder of text files, or the file's own format (jsonl, csv, openai)")
    if fmt not in ("auto", "folder") and path.is_dir():
        raise ConfigError(f"the input {path} is a directory, not a {fmt} file",
                          hint="give the file, or --format folder to read every text file below it")
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "folder"
    if path.suffix.lower() in CSV_SUFFIXES:
        return "csv"
    first = next((item.data for item in _jsonl(path, "id") if item.data is not None), None)
    return "openai" if first is not None and {"custom_id", "body"} <= first.keys() else "jsonl"


def read_items(input: str | Path, fmt: str, id_field: str = "id", text_field: str = "text") -> Iterator[Item]:
    """The input's items, streamed, in input order (``fmt`` from :func:`detect_format`)."""
    path = Path(input)
    if fmt == "folder":
        return _folder(path, text_field)
    if fmt == "csv":
        return _csv(path, id_field)
    if fmt == "openai":  # a request line names itself: without custom_id its answer could not be matched
        return (Item(i.line, error=f"line {i.line}: custom_id is missing (each request line names itself)")
                if i.line_id else i for i in _jsonl(path, "custom_id"))
    return _jsonl(path, id_field)


def job_items(job: BatchJob, fmt: str) -> Iterator[Item]:
    return read_items(job.input, fmt, job.id_field, job.text_field)


def _record_item(line: int, data: Any, id_field: str) -> Item:
    if not isinstance(data, dict):
        return Item(line, error=f"line {line}: not a JSON object")
    if id_field not in data:
        return Item(line, id=line, data=data, line_id=True)
    value = data[id_field]
    if value is None or value == "":  # a mistake, not "no id": the line number would silently stand in (and ""
        # was taken as an id, while a CSV's empty id cell is the line number)
        said = "null" if value is None else "empty"
        return Item(line, error=f"line {line}: {id_field} is {said}; give a string or an integer, or leave it out")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        written = json.dumps(value, ensure_ascii=False, default=str)[:40]  # as the file has it: true, not True
        return Item(line, error=f"line {line}: {id_field} must be a string or an integer, not {written}")
    return Item(line, id=value, data=data)


def _jsonl(path: Path, id_field: str) -> Iterator[Item]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", hint=CHECK_INPUT) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:  # a byte-order mark (Windows tools write one) opens the file, not the record
                data = jsonsafe.loads(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
            except UnicodeDecodeError as exc:
                yield Item(number, error=f"line {number}: not valid UTF-8 (byte {exc.start}; convert the file: "
                                         "iconv -f GBK -t UTF-8, or the encoding it is in)")
                continue
            except ValueError as exc:
                yield Item(number, error=f"line {number}: not valid JSON ({exc})")
                continue
            yield _record_item(number, data, id_field)


def _csv(path: Path, id_field: str) -> Iterator[Item]:
    # surrogateescape: a byte that is not UTF-8 fails its row only (it stopped the file, named as line 1);
    # utf-8-sig: Excel's "CSV UTF-8" opens with a byte-order mark, which would be part of the first column's name
    try:
        handle = path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", hint=CHECK_INPUT) from None
    with handle:
        # strict: a quote left open would otherwise swallow every later line into one cell, without a word
        reader = csv.DictReader(handle, delimiter="\t" if path.suffix.lower() == ".tsv" else ",", strict=True)
        try:
            for row in reader:
                line = reader.line_num
                if None in row:
                    yield Item(line, error=f"line {line}: more values than the header has columns")
                    continue
                if not _utf8(row):
                    yield Item(line, error=f"line {line}: not valid UTF-8 (convert the file: iconv -f GBK -t "
                                           "UTF-8, or the encoding it is in)")
                    continue
                data = {key: value for key, value in row.items() if value is not None}
                if data.get(id_field) == "":
                    del data[id_field]  # an empty id cell: the line number is the id
                yield _record_item(line, data, id_field)
        except (UnicodeDecodeError, csv.Error) as exc:
            yield Item(reader.line_num + 1, error=f"line {reader.line_num + 1}: unreadable CSV ({exc}); "
                                                  "the rest of the file was skipped")


def _utf8(row: dict[str, str | None]) -> bool:
    """No byte of the row (header included) was undecodable (``surrogateescape`` keeps them as lone surrogates)."""
    try:
        "".join(f"{key}{value or ''}" for key, value in row.items()).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _folder(path: Path, text_field: str) -> Iterator[Item]:
    """Text files under ``path`` in sorted order (hidden files skipped); the id is the relative path."""
    count = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            count += 1
            file = Path(root) / name
            rel = file.relative_to(path).as_posix()
            try:
                text = file.read_bytes().decode("utf-8-sig")
            except (OSError, UnicodeDecodeError) as exc:
                yield Item(count, id=rel, error=f"{rel}: not readable as UTF-8 text ({exc})")
                continue
            yield Item(count, id=rel, data={"id": rel, "path": rel, text_field: text})


@dataclass
class Scan:
    """One pass over the ids (not the records): counts, duplicates, missing fields."""

    total: int = 0
    malformed: int = 0
    duplicates: int = 0
    duplicate_examples: list[str] = field(default_factory=list)
    #: a record without an id whose line number is another record's id: "line 2 (no id) and line 8 (id 2)"
    line_clashes: list[str] = field(default_factory=list)
    missing: dict[str, int] = field(default_factory=dict)
    fields_seen: list[str] = field(default_factory=list)
    #: the keys (``line:N``) of the lines that are not records now: an error logged for another line is stale
    malformed_keys: set[str] = field(default_factory=set)

    @property
    def records(self) -> int:
        return self.total - self.malformed

    @property
    def unique(self) -> int:
        """Distinct input ids (a malformed line counts as one, keyed by its line number)."""
        return self.total - self.duplicates


def prescan(items: Iterator[Item], required: list[str]) -> Scan:
    """Counts records, duplicate ids and missing fields. Memory: the set of ids (O(n) keys, no records)."""
    scan, seen, by_line = Scan(), set[str](), set[str]()
    first_line: dict[str, int] = {}
    for item in items:
        scan.total += 1
        if item.data is None:
            scan.malformed += 1
            scan.malformed_keys.add(item.key)
            continue
        if not scan.fields_seen:
            scan.fields_seen = list(item.data)[:12]
        for name in required:
            if name not in item.data:
                scan.missing[name] = scan.missing.get(name, 0) + 1
        key = item.key
        if key in seen and (item.line_id != (key in by_line)) and len(scan.line_clashes) < MAX_LISTED:
            first = first_line.get(key, "?")
            lines = (item.line, first) if item.line_id else (first, item.line)
            scan.line_clashes.append(f"line {lines[0]} (no id) and line {lines[1]} (id {key})")
        if item.line_id:
            by_line.add(key)
        if key in seen:
            scan.duplicates += 1
            if len(scan.duplicate_examples) < MAX_LISTED:
                scan.duplicate_examples.append(f"{key} (lines {first_line.get(key, '?')} and {item.line})")
        else:
            seen.add(key)
            if len(first_line) < 10_000:
                first_line[key] = item.line
    return scan


def check_scan(scan: Scan, job: BatchJob) -> None:
    """Refuse before starting: empty input, duplicate ids (without ``dedupe``), a field no record has."""
    if scan.total == 0:
        raise ConfigError(f"the input {job.input} has no records (empty input)", hint="nothing to do")
    if scan.line_clashes:  # not duplicates: --dedupe dropped one of two different records without a word
        raise ConfigError(f"a record without an id takes its line number as its id, and another record has that "
                          f"id: {', '.join(scan.line_clashes)}",
                          hint="give every record an id (or none), or use ids that are not line numbers")
    if scan.duplicates and not job.dedupe:
        raise ConfigError(f"the input has {scan.duplicates} duplicate id(s): {', '.join(scan.duplicate_examples)}",
                          hint="make the ids unique, or pass --dedupe (dedupe = true) to keep the first of each")
    for name, count in scan.missing.items():
        if scan.records and count == scan.records:
            seen = ", ".join(scan.fields_seen) or "none"
            raise ConfigError(f"no record has the field {name!r} the task needs (fields seen: {seen})",
                              hint="fix the template, or set --text-field / text_field")
