"""``tiankong normalize`` over a file: JSONL or CSV records in, one ``{record, changes, flags, valid, errors}`` line
per record out (written at once: a temporary file beside OUT, fsynced, renamed), and a report.

Bad input is one ``ConfigError`` line naming the fix: bytes that are not UTF-8, a line that is not a JSON object,
an empty file (nothing to normalise), a schema file that is not JSON or not an object schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..dedupe.files import _csv_rows, _jsonl_rows, _utf8, write_atomic
from ..errors import ConfigError
from ..paths import check_output
from .core import DEFAULTS, Extract, Normalized, NormalizeOptions, Normalizer


def read_schema(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the schema {path}: {getattr(exc, 'strerror', None) or exc}",
                          hint="check the --schema path (a UTF-8 JSON file)") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the schema {path.name} is not JSON ({exc.msg}, line {exc.lineno})",
                          hint="write the target as a JSON Schema object") from None
    if not isinstance(schema, dict):
        raise ConfigError(f"the schema {path.name} is not a JSON object", hint='write {"type": "object", …}')
    return schema


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (or CSV, by the ``.csv`` suffix); an empty file is an error."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", hint="check the --input path") from None
    text = _utf8(raw, path)
    rows = _csv_rows(text, path) if path.suffix.lower() == ".csv" else _jsonl_rows(text, path)
    records = [row for _, row in rows]
    if not records:
        raise ConfigError(f"{path.name} holds no records", hint="give one JSON object per line, or a CSV with a "
                          "header and rows")
    return records


def normalize_records(records: list[dict[str, Any]], schema: dict[str, Any],
                      options: NormalizeOptions = DEFAULTS,
                      extract: Extract | None = None) -> tuple[list[Normalized], dict[str, Any]]:
    """The library call: every record normalised (in order) and the report."""
    normalizer = Normalizer(schema, options, extract)
    results = [normalizer.record(r) for r in records]
    stats = normalizer.stats
    by: dict[str, int] = {}
    for result in results:
        for change in result.changes:
            by[change["by"]] = by.get(change["by"], 0) + 1
    report = {"records": len(results), "fields": [s.name for s in normalizer.specs],
              "changed": sum(len(r.changes) for r in results), "changed_by": dict(sorted(by.items())),
              "flagged": sum(len(r.flags) for r in results), "invalid": sum(not r.valid for r in results),
              "model": {"calls": stats["model_calls"], "accepted": stats["by_model"],
                        "refused": stats["model_refused"], "failed": stats["model_failed"]},
              "mode": options.mode}
    return results, report


def normalize_file(input: str | Path, output: str | Path, schema: dict[str, Any] | str | Path, *,
                   options: NormalizeOptions = DEFAULTS, extract: Extract | None = None) -> dict[str, Any]:
    """``tiankong normalize``: IN's records normalised to ``schema`` (a dict or a JSON file), OUT written at once."""
    if Path(input).resolve() == Path(output).resolve():
        raise ConfigError("--output is the --input file", hint="write the output to another path")
    if not isinstance(schema, dict) and Path(schema).resolve() == Path(output).resolve():
        raise ConfigError("--output is the --schema file", hint="write the output to another path")
    target = schema if isinstance(schema, dict) else read_schema(schema)
    Normalizer(target, options, extract)  # schema and options checked before the input is read
    check_output(output)  # and the output: not an OS error once every record is normalised
    records = read_rows(input)
    results, report = normalize_records(records, target, options, extract)
    write_atomic(output, [json.dumps(r.to_json(), ensure_ascii=False, sort_keys=True) for r in results])
    report.update(input=str(input), output=str(output))
    return report
