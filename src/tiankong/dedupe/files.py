"""Dedupe of a file: records read from JSONL or CSV, the flow run, the output written atomically.

Every input problem is one ``ConfigError`` naming the line and saying what to do: bytes that are not UTF-8, a line
that is not a JSON object, a record without its id or text field, a repeated id. An empty file is a defined
result (no records, an empty output). The output (one ``{"id", "cluster", "kept", "evidence"}`` line per record
in input order, or with ``keep_ids`` only the kept ids, one per line) is written to a temporary file beside OUT,
flushed to disk and renamed over OUT: a run killed at any point leaves OUT as it was, and since the clusters are
deterministic a re-run writes the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import check_output
from ..structured.drivers import run_sync
from .core import DEFAULTS, Dedupe, DedupeOptions, Record, check_ids, dedupe_flow

Request = Callable[[str, str, dict[str, Any] | None], Any]


def no_chat_engine(method: str, path: str, body: dict[str, Any] | None) -> Any:
    """The request function of a run without a chat engine (the embedding part's calls never come here)."""
    raise ConfigError(f"this dedupe run asked a chat engine ({method} {path}), and none is given",
                      hint="use a decider that needs no chat engine (tuned with the tfidf or probe-part method), or "
                      "run through a Client")


def dedupe_records(records: list[Record], options: DedupeOptions = DEFAULTS,
                   request: Request = no_chat_engine) -> Dedupe:
    """The library call: ``records`` clustered (``dedupe_flow`` run here; part calls go to the part's engine)."""
    return run_sync(dedupe_flow(records, options), request)


def read_records(path: str | Path, *, field: str = "text", id_field: str = "id",
                 csv_file: bool | None = None) -> list[Record]:
    """Records of a JSONL file (or CSV: ``csv_file``, by default by the ``.csv`` suffix) with an id and a text
    field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", hint="check the --input path") from None
    text = _utf8(raw, path)
    as_csv = path.suffix.lower() == ".csv" if csv_file is None else csv_file
    rows = _csv_rows(text, path) if as_csv else _jsonl_rows(text, path)
    records = []
    for line, row in rows:
        where = f"{path.name} line {line}"
        if id_field not in row or row[id_field] in (None, ""):
            raise ConfigError(f"{where}: the record has no {id_field!r} field",
                              hint="give every record a unique id (--id-field NAME reads another field)")
        rid = row[id_field]
        if not isinstance(rid, (str, int)) or isinstance(rid, bool):
            raise ConfigError(f"{where}: the id {rid!r} is not a string or an integer", hint="use text or integer ids")
        if isinstance(rid, str) and ("\n" in rid or "\r" in rid):
            raise ConfigError(f"{where}: the id {rid!r} holds a line break", hint="ids must fit on one line")
        value = row.get(field)
        if not isinstance(value, str):
            problem = "has no" if value is None else "has a non-text"
            raise ConfigError(f"{where}: the record {problem} {field!r} field",
                              hint="every record needs the text to compare (another field: --field NAME; in a "
                                   "batch job: --text-field NAME)")
        records.append(Record(rid, value, row))
    try:
        check_ids(records)
    except ConfigError as exc:
        raise ConfigError(f"{path.name}: {exc.message}", hint=exc.hint) from None
    return records


def _utf8(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path.name} line {line} is not UTF-8 (byte 0x{raw[exc.start]:02x})",
                          hint="convert the file first, e.g. iconv -f GBK -t UTF-8 IN > IN.utf8") from None


class _RepeatedKey(Exception):
    pass


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice (``{"id": 2, "id": 3}``: json keeps the last). It
    doubles the parse (0.5 s more per 100,000 small lines, measured), a few per cent of a dedupe or normalize run."""
    row = dict(pairs)
    if len(row) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return row


def _jsonl_rows(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Lines end at "\n" (or "\r\n") only: U+2028, U+2029 and U+0085, which ``json.dumps(..., ensure_ascii=False)``
    writes inside strings as they are, are characters of the line (``str.splitlines`` breaks at them)."""
    for line, content in enumerate(text.split("\n"), 1):
        content = content.removesuffix("\r")
        if not content.strip():
            continue
        try:
            row = json.loads(content, object_pairs_hook=_one_value_per_key)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path.name} line {line} is not JSON ({exc.msg})",
                              hint="one JSON object per line (JSONL), or a .csv file with a header") from None
        except _RepeatedKey as exc:
            raise ConfigError(f"{path.name} line {line} gives the key {exc.args[0]!r} twice",
                              hint="keep one value per key (JSON readers disagree on which one counts)") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path.name} line {line} is not a JSON object", hint="one JSON object per line: {…}")
        yield line, row


def _csv_rows(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows of a CSV text, strictly: a quote left open would otherwise swallow every later line into one cell."""
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    last = 1
    try:
        header = reader.fieldnames or []
        if twice := next((name for i, name in enumerate(header) if name in header[:i]), None):
            # DictReader keeps the last column of a name: the other was read as nothing, silently
            raise ConfigError(f"{path.name} line 1: the header names the column {twice!r} twice",
                              hint="give each column its own name")
        if len(header) == 1 and (";" in header[0] or "\t" in header[0]):  # one column read from "id;text"
            raise ConfigError(f"{path.name} line 1: the header {header[0][:60]!r} is one column: the file is not "
                              "comma-separated", hint="write it with commas (e.g. in Python: csv.writer)")
        for row in reader:
            if None in row:
                raise ConfigError(f"{path.name} line {reader.line_num} has more cells than the header",
                                  hint="quote cells that hold commas")
            if None in row.values():  # DictReader fills the missing cells with None: a value nobody wrote
                raise ConfigError(f"{path.name} line {reader.line_num} has fewer cells than the header",
                                  hint="write an empty cell for a value that is not there (a,,c)")
            last = reader.line_num
            yield reader.line_num, dict(row)
    except csv.Error as exc:
        raise ConfigError(f"{path.name}: the row from line {last + 1} is not valid CSV ({exc})",
                          hint='close every quoted cell ("…"), and double a quote inside one ("")') from None


def write_atomic(path: str | Path, lines: list[str]) -> None:
    """``lines`` written to ``path`` all at once: a temporary file beside it, fsynced, renamed over it. (Callers check
    the path before their work, ``paths.check_output``; what fails here anyway is one line, not an OS error.)"""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", hint="choose a writable output path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(line + "\n" for line in lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def output_lines(result: Dedupe, *, keep_ids: bool = False) -> list[str]:
    if keep_ids:
        return [str(i) for i in result.kept_ids()]
    return [json.dumps(a.to_json(), ensure_ascii=False, sort_keys=True) for a in result.records]


def band_lines(result: Dedupe, records: list[Record]) -> list[str]:
    """The uncertain band's pairs, once each (input order), as rows to label for ``tiankong tune dedupe``:
    ``{"a", "b", "a_id", "b_id", "stage", "score", "label": ""}`` (+ ``part``: the embedding part whose cosine the score
    is, for a semantic pair; + ``p_same`` when a decider decided it). A pair
    joined by a stage before the band was read is not among them (it is no longer uncertain)."""
    text = {r.id: r.text for r in records}
    seen: set[tuple[str, ...]] = set()
    lines = []
    for assignment in result.records:
        for e in assignment.evidence:
            if e.merged and e.decided_by is None:
                continue
            key = tuple(sorted((repr(assignment.id), repr(e.other))))
            if key in seen:
                continue
            seen.add(key)
            row: dict[str, Any] = {"a": text[assignment.id], "b": text[e.other], "a_id": assignment.id,
                                   "b_id": e.other, "stage": e.stage, "score": e.score, "label": ""}
            if e.part is not None:
                row["part"] = e.part
            if e.p_same is not None:
                row["p_same"] = e.p_same
            lines.append(json.dumps(row, ensure_ascii=False))
    return lines


def dedupe_file(input: str | Path, output: str | Path, *, field: str = "text", id_field: str = "id",
                options: DedupeOptions = DEFAULTS, keep_ids: bool = False,
                request: Request = no_chat_engine, pairs_out: str | Path | None = None) -> dict[str, Any]:
    """``tiankong dedupe``: IN's records clustered, OUT written atomically; returns the report. ``pairs_out``: the
    uncertain pairs written there too (:func:`band_lines`), to be labelled and learnt from."""
    paths = {Path(input).resolve(), Path(output).resolve()}
    if len(paths) == 1 or (pairs_out is not None and Path(pairs_out).resolve() in paths):
        raise ConfigError("--output (or --pairs-out) is the --input file, or both outputs are one file",
                          hint="write each output to its own path")
    options.check()
    check_output(output)
    if pairs_out is not None:
        check_output(pairs_out, "--pairs-out")
    records = read_records(input, field=field, id_field=id_field)
    result = dedupe_records(records, options, request) if records else _empty()
    write_atomic(output, output_lines(result, keep_ids=keep_ids))
    report = dict(result.report)
    report.update(input=str(input), output=str(output), keep_ids=keep_ids)
    if pairs_out is not None:
        band = band_lines(result, records)
        write_atomic(pairs_out, band)
        report.update(pairs_out=str(pairs_out), pairs_written=len(band))
    return report


def _empty() -> Dedupe:
    return Dedupe([], {"records": 0, "clusters": 0, "duplicates": 0, "stages": {}, "uncertain": {"pairs": 0},
                       "notes": ["the input holds no records"]})
