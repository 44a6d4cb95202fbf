"""Normalise (issue 42): the rules bring dates, phones, amounts, units, addresses and names to canonical form; a
field no rule resolves goes to the model (real engine, Qwen2.5-Coder 0.5B) whose value is kept only when it is
derivable from the input; nothing is invented (a record without a phone gets none, a model value not in the input
is refused); a normalised value the schema refuses is put back and flagged; bad input gives one-line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_one_line_error, run_cli
from tiankong.errors import ConfigError
from tiankong.normalize import NormalizeOptions, Normalizer, normalize_file, normalize_records
from tiankong.normalize import derivable as D
from tiankong.normalize import rules as R
from tiankong.normalize.core import address_shaped

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "when": {"type": "string", "format": "date"},
        "phone": {"type": "string", "x-normalize": "phone", "pattern": "^\\+[1-9][0-9]{6,14}$"},
        "price": {"x-normalize": "amount"},
        "weight": {"x-normalize": "unit", "x-unit": "kg"},
        "name": {"type": "string", "x-normalize": "name"},
        "address": {"x-normalize": "address"},
        "note": {"type": "string"},
    },
    "required": ["id"],
}


@pytest.mark.parametrize("raw", ["2021-03-05", "March 5, 2021", "5 Mar 2021", "03/05/2021", "2021年3月5日",
                                 "20210305", " 2021 / 3 / 5 "])
def test_dates_to_iso(raw: str) -> None:
    resolved = R.norm_date(raw)
    assert resolved is not None and resolved.value == "2021-03-05"


def test_dates_follow_the_text_and_its_time_zone_not_a_guess() -> None:
    """What a sweep found dateutil doing quietly (2026-12-07)."""
    # an ISO date is year-month-day whatever --dayfirst says
    assert R.norm_date("2021-03-05", dayfirst=True).value == "2021-03-05"  # type: ignore[union-attr]
    assert R.norm_datetime("2021-03-05T10:00:00", dayfirst=True).value == "2021-03-05T10:00:00"  # type: ignore[union-attr]
    # GMT+8 is eight hours ahead of UTC (dateutil reads it the POSIX way, -08:00)
    assert R.norm_datetime("2021-03-05 14:30 GMT+8").value == "2021-03-05T14:30:00+08:00"  # type: ignore[union-attr]
    assert R.norm_datetime("2021-03-05 14:30 UTC-5").value == "2021-03-05T14:30:00-05:00"  # type: ignore[union-attr]
    assert R.norm_datetime("2021-03-05 14:30 +08:00").value == "2021-03-05T14:30:00+08:00"  # type: ignore[union-attr]
    assert R.norm_time("14:30 GMT+8").value == "14:30:00+08:00"  # type: ignore[union-attr]  # the zone is kept
    # a zone name dateutil does not know (or reads as this machine's) is flagged, not dropped
    assert R.norm_datetime("2021-03-05 14:30 PST") is None and R.norm_datetime("Mar 5 2021 2pm EST") is None
    # figures in an order the caller did not say: flagged, unless it is the only reading there is
    assert R.norm_date("21-03-05") is None  # dd-mm-yy or yy-mm-dd?
    assert R.norm_date("13/05/2021").value == "2021-05-13"  # type: ignore[union-attr]


def test_dates_fail_closed_and_dayfirst() -> None:
    assert R.norm_date("March 2021") is None  # no day: not filled in
    assert R.norm_date("the fifth of March 2021") is None  # words the rule does not read: left to the model
    assert R.norm_date("31/02/2021", dayfirst=True) is None
    assert R.norm_date("03/05/2021", dayfirst=True).value == "2021-05-03"  # type: ignore[union-attr]
    assert R.norm_datetime("2021-03-05 14:30").value == "2021-03-05T14:30:00"  # type: ignore[union-attr]
    assert R.norm_datetime("2021-03-05") is None  # no hour given
    assert R.norm_time("下午3点15分").value == "15:15:00"  # type: ignore[union-attr]


@pytest.mark.parametrize(("raw", "region", "e164"), [
    ("+86 138 0013 8000", None, "+8613800138000"), ("138-0013-8000", "CN", "+8613800138000"),
    ("(202) 456-1111", "US", "+12024561111"), ("tel: 020 7946 0958", "GB", "+442079460958"),
    ("+44 (0)20 7946 0958", None, "+442079460958")])
def test_phones_to_e164(raw: str, region: str | None, e164: str) -> None:
    resolved = R.norm_phone(raw, region=region)
    assert resolved is not None and resolved.value == e164


def test_phones_fail_closed() -> None:
    assert R.norm_phone("138-0013-8000") is None  # national number, no default region: no guess
    assert R.norm_phone("12345", region="US") is None  # not a valid number
    assert R.norm_phone("call me", region="US") is None
    # China's 400/800 service numbers are valid but cannot be dialled from abroad: +86 400… would be no number
    assert R.norm_phone("400-810-8888", region="CN") is None and R.norm_phone("800-820-8820", region="CN") is None
    assert R.norm_phone("1-800-555-0199", region="US").value == "+18005550199"  # type: ignore[union-attr]


@pytest.mark.parametrize(("raw", "kwargs", "want"), [
    ("USD 1,234.56", {}, (1234.56, "USD")), ("1.234,56 €", {}, (1234.56, "EUR")),
    ("3.5万元", {}, (35000.0, "CNY")), ("12 dollars", {"currency": "CAD"}, (12.0, "CAD")),
    ("$7.5", {"currency": "USD"}, (7.5, "USD")),
    ("1,5 EUR", {"decimal_comma": True}, (1.5, "EUR"))])
def test_amounts(raw: str, kwargs: dict[str, Any], want: tuple[float, str]) -> None:
    resolved = R.norm_amount(raw, **kwargs)
    assert resolved is not None and (resolved.value["amount"], resolved.value["currency"]) == want


def test_amounts_fail_closed() -> None:
    assert R.norm_amount("$7.5") is None  # "$" alone names no one currency and no default is given
    assert R.norm_amount("12 dollars") is None  # nor "dollars" (Canadian? Australian?)
    # a default settles a shared symbol only when the symbol is its: $12.50 is never yen, ¥100 never dollars
    assert R.norm_amount("$12.50", currency="JPY") is None and R.norm_amount("¥100", currency="USD") is None
    assert not D.amount_derivable({"amount": 12.5, "currency": "JPY"}, "$12.50", "JPY")  # nor from the model
    # more digits than a JSON number keeps: flagged, not written as 1e+20 or Infinity
    assert R.norm_amount("99999999999999999999.99 USD") is None and R.norm_amount("9" * 320 + " USD") is None
    assert R.norm_unit("9" * 28 + " kg", unit="g") is None  # past Decimal's precision: flagged, not a crash
    assert R.norm_amount("5 or 6 USD") is None  # two numbers
    assert R.norm_amount("about 5 USD") is None  # words the table does not know
    assert R.norm_amount("12 USD 9 EUR") is None


def test_units_and_addresses_and_names() -> None:
    assert R.norm_unit("5 lb", unit="kg").value == pytest.approx(2.267962)  # type: ignore[union-attr]
    assert R.norm_unit("2.5 公斤", unit="g").value == 2500.0  # type: ignore[union-attr]
    assert R.norm_unit("5 lb", unit="m") is None  # mass into length: refused
    assert R.norm_unit("5 smoots", unit="m") is None
    zh = R.norm_address("广东省深圳市南山区粤海街道科技园路1号")
    assert zh is not None and zh.value == {"province": "广东省", "city": "深圳市", "district": "南山区",
                                           "street": "粤海街道", "detail": "科技园路1号"}
    assert R.norm_address("北京市海淀区中关村大街27号").value["province"] == "北京市"  # type: ignore[union-attr]
    en = R.norm_address("1600 Pennsylvania Ave NW, Washington, DC 20500, USA")
    assert en is not None and en.value["state"] == "DC" and en.value["postcode"] == "20500"
    assert R.norm_address("somewhere nice") is None
    assert R.norm_name("SMITH, JOHN").value == "John Smith"  # type: ignore[union-attr]
    assert R.norm_name("ANNE-MARIE DUPONT").value == "Anne-Marie Dupont"  # type: ignore[union-attr]
    assert R.norm_name("O'BRIEN, PAT").value == "Pat O'Brien"  # type: ignore[union-attr]
    assert R.norm_name("张 三").value == "张三"  # type: ignore[union-attr]


def test_derivable_refuses_invented_values() -> None:
    assert D.date_derivable("2021-03-05", "the fifth of March 2021")
    assert D.date_derivable("2021-03-05", "二〇二一年三月五日")
    assert not D.date_derivable("2021-03-06", "the fifth of March 2021")
    assert not D.date_derivable("2021-03-05", "March 2021")  # the day is nowhere in the input
    assert D.phone_derivable("+8613800138000", "一三八 0013 8000", "CN")
    assert not D.phone_derivable("+8613800138001", "138 0013 8000", "CN")
    assert not D.phone_derivable("+8613800138000", "138 0013 8000", "US")  # country code not given nor default
    assert D.amount_derivable({"amount": 35000.0, "currency": "CNY"}, "3.5万元", None)
    assert not D.amount_derivable({"amount": 12.0, "currency": "EUR"}, "12 dollars", None)
    assert not D.phone_derivable("+15123456789", "0049-151-234-56789", None)  # a "1" from inside other digits
    assert D.phone_derivable("+4915123456789", "0049-151-234-56789", None)
    assert not D.amount_derivable({"amount": 2592000000, "currency": "USD"}, "25,92 $", None)  # no multiplier named
    assert D.amount_derivable({"amount": 25.92, "currency": "USD"}, "25,92 $", "USD")
    assert not D.amount_derivable({"amount": 25.92, "currency": "AUD"}, "25,92 $", None)  # a pick among the $s
    assert D.amount_derivable({"amount": 25.92, "currency": "AUD"}, "25,92 A$", None)  # a symbol only it has
    assert not D.name_complete("Davis Jr.", "Gregory  Davis Jr.")  # shortened
    assert D.name_complete("George Alvarez", "Mr. George Alvarez")
    assert not address_shaped({"street": "AUGUSTA", "city": "GA", "state": "USA", "country": "USA"})  # shifted
    assert address_shaped({"street": "", "city": "Augusta", "state": "GA", "country": "USA"})
    assert not address_shaped({"province": "深圳", "city": "南山区"})
    assert address_shaped({"province": "广东省", "city": "深圳市"})
    assert not D.text_derivable({"city": "Shenzhen"}, "深圳市南山区")
    assert D.text_derivable({"city": "南山区", "street": ""}, "深圳市 南山区")


def test_refuses_to_invent_missing_fields() -> None:
    """A record with no phone (absent or empty) gets no phone, no change and no flag; the rest is normalised."""
    records = [{"id": 1, "when": "March 5, 2021", "price": "USD 12"}, {"id": 2, "phone": "", "name": "SMITH, JOHN",
                                                                        "price": {"amount": 3, "currency": "EUR"}}]
    results, report = normalize_records(records, SCHEMA, NormalizeOptions(mode="rules"))
    first, second = results
    assert "phone" not in first.record and second.record["phone"] == ""
    assert second.record["price"] == {"amount": 3, "currency": "EUR"}  # already an object: left, not flagged
    assert first.record["when"] == "2021-03-05" and first.record["price"] == {"amount": 12.0, "currency": "USD"}
    assert {c["field"]: c["by"] for c in first.changes} == {"when": "date:dateutil", "price": "amount:table"}
    assert not first.flags and not second.flags and first.valid
    # an empty optional field is absent (since 2026-12-08: a CSV's blank cell made the row invalid): left empty,
    # not filled in, and not an error
    assert second.errors == [] and second.valid
    assert report["changed"] == 3 and report["flagged"] == 0


def test_unresolved_field_left_and_flagged_and_schema_revert() -> None:
    results, _ = normalize_records([{"id": 1, "when": "sometime soon", "note": "x"}], SCHEMA,
                                   NormalizeOptions(mode="rules"))
    (only,) = results
    assert only.record["when"] == "sometime soon" and only.flags[0]["field"] == "when" and not only.valid
    narrow = json.loads(json.dumps(SCHEMA))
    narrow["properties"]["phone"]["maxLength"] = 8  # the E.164 value is longer: it must be put back
    results, report = normalize_records([{"id": 1, "phone": "+86 138 0013 8000"}], narrow,
                                        NormalizeOptions(mode="rules"))
    (only,) = results
    assert only.record["phone"] == "+86 138 0013 8000" and not only.changes
    assert "fails the schema" in only.flags[0]["reason"] and report["invalid"] == 1


def test_schema_and_option_errors() -> None:
    with pytest.raises(ConfigError, match="not a known kind"):
        Normalizer({"type": "object", "properties": {"a": {"x-normalize": "colour"}}})
    with pytest.raises(ConfigError, match="x-unit"):
        Normalizer({"type": "object", "properties": {"a": {"x-normalize": "unit"}}})
    with pytest.raises(ConfigError, match="no model is given"):
        Normalizer(SCHEMA, NormalizeOptions(mode="both"))
    with pytest.raises(ConfigError, match="region"):
        NormalizeOptions(region="china").check()


# --- the CLI: one record, bad input ---------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    return tmp_path


def test_cli_one_record(files: Path) -> None:
    (files / "in.jsonl").write_text(json.dumps({"id": 1, "phone": "(202) 456-1111"}) + "\n", encoding="utf-8")
    proc = run_cli("normalize", "--input", str(files / "in.jsonl"), "--output", str(files / "out.jsonl"),
                   "--schema", str(files / "schema.json"), "--region", "US", "--rules-only", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"] == 1
    (line,) = (files / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["record"] == {"id": 1, "phone": "+12024561111"}


@pytest.mark.parametrize(("content", "needles"), [
    (b"", ("holds no records",)),
    (b'{"id": 1, "name": "\xb2\xe2\xca\xd4"}\n', ("not UTF-8", "iconv")),
    (b'{"id": 1}\n[1, 2]\n', ("line 2", "not a JSON object"))])
def test_cli_bad_input(files: Path, content: bytes, needles: tuple[str, ...]) -> None:
    (files / "in.jsonl").write_bytes(content)
    proc = run_cli("normalize", "--input", str(files / "in.jsonl"), "--output", str(files / "out.jsonl"),
                   "--schema", str(files / "schema.json"), "--rules-only")
    assert_one_line_error(proc, *needles)
    assert not (files / "out.jsonl").exists()


def test_cli_refuses_to_write_over_its_schema_or_make_up_a_missing_csv_cell(files: Path) -> None:
    (files / "in.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    schema = files / "schema.json"
    before = schema.read_bytes()
    proc = run_cli("normalize", "--input", str(files / "in.jsonl"), "--output", str(schema), "--schema",
                   str(schema), "--rules-only")
    assert_one_line_error(proc, "--output is the --schema file")
    assert schema.read_bytes() == before
    (files / "short.csv").write_text("id,phone\n1,(202) 456-1111\n2\n", encoding="utf-8")
    proc = run_cli("normalize", "--input", str(files / "short.csv"), "--output", str(files / "out.jsonl"),
                   "--schema", str(schema), "--rules-only")
    assert_one_line_error(proc, "line 3", "fewer cells than the header")  # not "phone": null
    assert not (files / "out.jsonl").exists()


@pytest.mark.parametrize(("node", "needle"), [({"x-currency": "ZZZ"}, "x-currency"),
                                              ({"x-region": "ZZ"}, "x-region")])
def test_a_fields_default_currency_or_region_must_exist(node: dict[str, Any], needle: str) -> None:
    kind = "amount" if "x-currency" in node else "phone"
    with pytest.raises(ConfigError, match=needle):
        Normalizer({"type": "object", "properties": {"a": {"x-normalize": kind, **node}}})
    with pytest.raises(ConfigError, match="ISO 4217"):
        NormalizeOptions(currency="XYZ").check()


def test_csv_cells_take_the_types_their_schema_says(files: Path) -> None:
    """Every CSV cell is text: an integer column never validated against "type": "integer" ('12' is not of type
    'integer'). A cell that is exactly an integer, number or boolean is typed (a change, by type:…); others left."""
    (files / "in.csv").write_text("id,score,ok,weight\n12,2.5,true,3 kg\n1,234,yes,\n", encoding="utf-8")
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "score": {"type": "number"},
                                               "ok": {"type": "boolean"}, "weight": {"type": "number"}}}
    (files / "typed.json").write_text(json.dumps(schema), encoding="utf-8")
    proc = run_cli("normalize", "--input", str(files / "in.csv"), "--output", str(files / "out.jsonl"),
                   "--schema", str(files / "typed.json"), "--rules-only")
    assert proc.returncode == 0, proc.stderr
    first, second = (json.loads(x) for x in (files / "out.jsonl").read_text(encoding="utf-8").splitlines())
    assert first["record"] == {"id": 12, "score": 2.5, "ok": True, "weight": "3 kg"}
    assert {c["by"] for c in first["changes"]} == {"type:integer", "type:number", "type:boolean"}
    assert not first["valid"] and any("weight" in e for e in first["errors"])  # "3 kg" is no number: left, named
    assert second["record"]["score"] == 234 and second["record"]["ok"] == "yes" and not second["valid"]
    assert R.norm_scalar("1,234", "integer") is None and R.norm_scalar("9" * 30, "number") is None


def test_cli_rules_only_takes_no_model(files: Path) -> None:
    (files / "in.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    proc = run_cli("normalize", "--input", str(files / "in.jsonl"), "--output", str(files / "out.jsonl"),
                   "--schema", str(files / "schema.json"), "--rules-only", "--model", "some-model")
    assert proc.returncode == 2 and "--rules-only uses no model" in proc.stderr
    assert not (files / "out.jsonl").exists()


def test_cli_bad_schema(files: Path) -> None:
    (files / "in.jsonl").write_text('{"id": 1}\n', encoding="utf-8")
    (files / "bad.json").write_text("{not json", encoding="utf-8")
    proc = run_cli("normalize", "--input", str(files / "in.jsonl"), "--output", str(files / "out.jsonl"),
                   "--schema", str(files / "bad.json"), "--rules-only")
    assert_one_line_error(proc, "not JSON")


# --- the model, real engine --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen() -> Iterator[Any]:
    from tiankong import Client
    from tiankong.models import DEFAULT_MODEL

    with Client(model=DEFAULT_MODEL, slots=1, ctx=2048) as client:
        yield client


def test_model_resolves_only_what_is_derivable(qwen: Any) -> None:
    """A date no rule reads goes to the model and its value is kept (it is derivable); a phone field holding no
    number goes to the model and whatever it writes is refused (not derivable): the field stays as it was."""
    records = [{"id": 1, "when": "the fifth of March 2021", "price": "USD 12"},
               {"id": 2, "phone": "no phone given"}]
    results, report = normalize_records(records, SCHEMA, NormalizeOptions(region="CN"), extract=qwen.extract)
    first, second = results
    by = {c["field"]: c for c in first.changes}
    assert by["price"]["by"] == "amount:table"  # the rule resolved it: the model was not asked for it
    assert by["when"]["by"] == "model" and by["when"]["to"] == "2021-03-05"  # measured: Qwen2.5-Coder 0.5B, temp 0
    assert D.date_derivable(by["when"]["to"], "the fifth of March 2021")
    assert second.record["phone"] == "no phone given" and not second.changes
    assert second.flags[0]["field"] == "phone"
    assert report["model"]["calls"] == 2 and report["model"]["accepted"] == 1


def test_normalize_file_with_a_client(qwen: Any, tmp_path: Path) -> None:
    """``normalize_file`` with a Client's extract: the output file has one line per record, in order."""
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"id": 1, "when": "2021年3月5日"}, {"id": 2, "when": "5th of March, 2021"}]) + "\n", encoding="utf-8")
    report = normalize_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", SCHEMA, extract=qwen.extract)
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [x["record"]["id"] for x in lines] == [1, 2]
    assert lines[0]["changes"][0]["by"] == "date:zh"
    for line in lines:  # whatever made the change, the value is the canonical date
        assert line["record"]["when"] == "2021-03-05" or line["flags"]
    assert report["records"] == 2


def test_client_and_async_client_normalize(qwen: Any) -> None:
    """``Client.normalize`` (rules only: no model call) and ``AsyncClient.normalize`` (a date no rule reads goes to
    the model on the client's engine, awaited on the caller's loop)."""
    import asyncio

    from tiankong import AsyncClient

    done = qwen.normalize([{"id": 1, "phone": "+86 138 0013 8000", "when": "sometime"}], SCHEMA, rules_only=True)
    (only,) = done.records
    assert only.record["phone"] == "+8613800138000" and only.flags[0]["field"] == "when"
    assert done.report["model"]["calls"] == 0

    async def run() -> Any:
        async with AsyncClient(qwen.url) as client:
            return await client.normalize([{"id": 1, "when": "the fifth of March 2021"}], SCHEMA)

    result = asyncio.run(run())
    assert result.report["model"]["calls"] == 1
    assert result.records[0].record["when"] == "2021-03-05"  # measured: Qwen2.5-Coder 0.5B, temperature 0
