"""Inputs a sweep of 2026-12-08 found read wrongly or refused in the wrong words (each reproduced before the fix):
a CSV header naming a column twice (the last one was read, silently), a semicolon-separated file (refused as "no
'id' field"), a record whose text is a number (a TypeError from unicodedata; "no text field" through the client),
and a flag reason's article ("neither a amount rule")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiankong import Client
from tiankong.dedupe import Record, read_records
from tiankong.errors import ConfigError
from tiankong.normalize import NormalizeOptions, normalize_records


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id,text,text\n1,first,second\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'text' twice"):
        read_records(path)


def test_a_semicolon_separated_file_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("id;text\n1;hello\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not comma-separated"):
        read_records(path)


def test_a_well_formed_csv_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text('id,text,note\n1,"a; b",x\n', encoding="utf-8")
    (record,) = read_records(path)
    assert record.text == "a; b" and record.fields["note"] == "x"


def test_a_record_whose_text_is_not_a_string_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="the text is a int"):
        Record(1, 123)  # type: ignore[arg-type]
    with Client("http://127.0.0.1:9") as client, pytest.raises(ConfigError, match="has a int in 'text'"):
        client.dedupe([{"id": 1, "text": 5}, {"id": 2, "text": "b"}])


def test_a_flag_reason_reads_as_english() -> None:
    schema = {"type": "object", "properties": {"v": {"x-normalize": "amount"}}}

    def invented(_prompt: str, _schema: dict[str, object]) -> object:
        return {"value": {"amount": 99.0, "currency": "USD"}}  # not in the text: refused, the field flagged

    (out,), _ = normalize_records([{"v": "some money"}], schema, NormalizeOptions(mode="both"), invented)
    (flag,) = out.flags
    assert flag["reason"].startswith("neither an amount rule nor the model"), flag
