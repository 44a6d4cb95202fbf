"""Redaction fails safe (issue 21 row 9): near-miss identifiers are redacted, not leaked.

``tests/data/pii_near_misses.jsonl``: IDs and cards whose checksum or date fails next to their keyword (redacted
with ``validated: false``), dotted phones, internationalised e-mail addresses, AWS secret keys beside their key
id — each with the substring that must not survive ``redact --no-model``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from tiankong.tasks.redact import redact_rules

CASES = [json.loads(line) for line in (Path(__file__).parents[1] / "data" / "pii_near_misses.jsonl").read_text(
    encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c["note"] for c in CASES])
def test_near_misses_are_redacted(case: dict[str, object]) -> None:
    result = redact_rules(str(case["text"]))
    assert str(case["secret"]) not in result.text, result.text
    found = [e for e in result.entities if e.text == case["secret"]]
    assert found and found[0].type == case["type"] and found[0].validated is case["validated"], result.entities


def test_valid_identifiers_stay_validated_and_plain_numbers_are_left() -> None:
    valid = redact_rules("身份证号11010519491231002X，卡号4111111111111111")
    assert [(e.type, e.validated) for e in valid.entities] == [("ID_CARD", True), ("BANK_CARD", True)]
    plain = redact_rules("订单号 20231231000123456，共 3 件，合计 128.50 元")  # no ID/card keyword: not an ID
    assert plain.entities == []


def test_cli_json_carries_validated() -> None:
    proc = run_cli("redact", "--no-model", "--json", str(CASES[0]["text"]))
    assert proc.returncode == 0, proc.stderr
    entity = json.loads(proc.stdout)["entities"][0]
    assert entity["type"] == "ID_CARD" and entity["validated"] is False
