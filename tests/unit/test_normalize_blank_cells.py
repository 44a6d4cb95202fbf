"""A CSV's blank cell in a column the schema does not require is an absent value, not an invalid one, and an
optional numeric column declared ``["integer", "null"]`` is typed like ``"integer"`` (a sweep of 2026-12-08: every
row with a blank optional date or boolean was invalid, and a nullable number stayed the text " 5 ")."""

from __future__ import annotations

import json
from pathlib import Path

from tiankong.normalize import NormalizeOptions, normalize_file, normalize_records

SCHEMA = {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "string"}, "d": {"type": "string", "format": "date"}, "ok": {"type": "boolean"},
    "z": {"type": ["integer", "null"]}}}
RULES = NormalizeOptions(mode="rules")


def test_blank_optional_cells_are_valid_and_kept_as_they_were() -> None:
    (out,), _ = normalize_records([{"id": "1", "d": "", "ok": " ", "z": ""}], SCHEMA, RULES)
    assert out.valid and out.errors == []
    assert out.record == {"id": "1", "d": "", "ok": " ", "z": ""}  # nothing filled in


def test_a_blank_required_cell_is_still_an_error() -> None:
    schema = {**SCHEMA, "required": ["id", "d"]}
    (out,), _ = normalize_records([{"id": "1", "d": ""}], schema, RULES)
    assert not out.valid and any(e.startswith("d:") for e in out.errors)


def test_a_wrong_optional_value_is_still_an_error() -> None:
    (out,), _ = normalize_records([{"id": "1", "d": "not a date", "z": "five"}], SCHEMA, RULES)
    assert not out.valid and {e.split(":")[0] for e in out.errors} >= {"d", "z"}


def test_a_nullable_numeric_column_is_typed(tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    source.write_text('id,d,ok,z\n1,,,\n2,2021-03-05,true," 5 "\n', encoding="utf-8")
    normalize_file(source, tmp_path / "out.jsonl", SCHEMA, options=RULES)
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    blank, typed = (json.loads(line) for line in lines)
    assert blank["valid"] and typed["valid"], (blank, typed)
    assert typed["record"]["z"] == 5 and typed["record"]["ok"] is True
