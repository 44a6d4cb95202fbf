"""What a sweep of normalize and dedupe found (each reproduced before the fix): amounts that start at their decimal
point lost it and their sign, bounds and shares were read as exact amounts, an offset of a day or more ended the
whole normalize run, 晚上12点 became noon, Roman numerals after a name were title-cased, JSONL lines holding U+2028
were refused, ``--keep field:NAME`` compared CSV numbers as text, and the band's counts did not add up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiankong.deciders.registry import save_decider
from tiankong.dedupe import DedupeOptions, Record, dedupe_records, pair_text, read_records
from tiankong.normalize import NormalizeOptions, normalize_file, normalize_records
from tiankong.normalize import derivable as D
from tiankong.normalize import rules as R
from tiankong.tuning import load_examples, tune


def _amount(raw: str, currency: str | None = None) -> tuple[float, str] | None:
    resolved = R.norm_amount(raw, currency=currency)
    return None if resolved is None else (resolved.value["amount"], resolved.value["currency"])


# --- 1. amounts that start at the decimal point, and their sign ----------------------------------------------------


@pytest.mark.parametrize(("raw", "currency", "want"), [
    ("US$.99", None, (0.99, "USD")), ("€.50", None, (0.5, "EUR")), (".5 EUR", None, (0.5, "EUR")),
    ("$.99", "USD", (0.99, "USD")), ("USD -.5", "USD", (-0.5, "USD")), ("-.5 EUR", None, (-0.5, "EUR")),
    ("(USD 12.50)", None, (-12.5, "USD")), ("(12.50) USD", None, (-12.5, "USD")), ("-$5", "USD", (-5.0, "USD")),
    ("\u22125 USD", None, (-5.0, "USD")),  # the minus sign U+2212
    # what was read right stays so
    ("$12.50 (USD)", None, (12.5, "USD")), ("-12 USD", None, (-12.0, "USD")), ("USD 1,234.56", None, (1234.56, "USD")),
    # ",-" / ".-": no cents, not a minus (German, Nordic and Swiss prices; refused by the first sign rule)
    ("49,- €", None, (49.0, "EUR")), ("EUR 12,-", None, (12.0, "EUR")), ("CHF 5.-", None, (5.0, "CHF")),
])
def test_an_amount_keeps_its_decimal_point_and_its_sign(raw: str, currency: str | None,
                                                         want: tuple[float, str]) -> None:
    assert _amount(raw, currency) == want


@pytest.mark.parametrize("raw", ["(-12.50 USD)", "USD - 5", "12.50- USD", "USD.5"])
def test_an_amount_whose_sign_or_point_is_unclear_is_refused(raw: str) -> None:
    assert _amount(raw, "USD") is None


# --- 3. bounds, approximations and shares are no exact amount ----------------------------------------------------


@pytest.mark.parametrize(("raw", "bare"), [("50%", 50), ("<100 USD", 100), (">100 USD", 100), ("~12 USD", 12),
                                           ("≥ 12 USD", 12), ("12+ USD", 12), ("≈12 USD", 12), ("≤ 5 USD", 5),
                                           ("＜100 USD", 100)])
def test_a_bound_or_a_share_is_not_an_amount(raw: str, bare: int) -> None:
    assert _amount(raw, "USD") is None
    assert not D.amount_derivable({"amount": bare, "currency": "USD"}, raw, "USD")  # nor the model's bare number


def test_a_bound_is_flagged_by_the_normalize_run() -> None:
    schema = {"type": "object", "properties": {"v": {"x-normalize": "amount"}}}
    results, report = normalize_records([{"v": "<100 USD"}, {"v": "US$.99"}], schema,
                                        NormalizeOptions(mode="rules", currency="USD"))
    bound, cents = results
    assert bound.record["v"] == "<100 USD" and [f["field"] for f in bound.flags] == ["v"]
    assert cents.record["v"] == {"amount": 0.99, "currency": "USD"}
    assert report["flagged"] == 1 and report["changed"] == 1


# --- 2. an offset of a day or more -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "raw"), [("datetime", "2021-03-05T14:30:00+24:00"),
                                           ("datetime", "2021-03-05 14:30 GMT+25"), ("time", "14:30 +2400"),
                                           ("time", "14:30 GMT+25"), ("date", "2021-03-05T14:30:00-25:00")])
def test_an_offset_of_a_day_or_more_is_flagged_and_the_run_goes_on(tmp_path: Path, kind: str, raw: str) -> None:
    assert R.RULES[kind](raw) is None
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"v": {"x-normalize": kind}}}), encoding="utf-8")
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"v": raw}) + "\n" + json.dumps({"v": "2021-03-05 14:30"}) + "\n", encoding="utf-8")
    report = normalize_file(source, tmp_path / "out.jsonl", schema, options=NormalizeOptions(mode="rules"))
    first, _ = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert first["record"] == {"v": raw} and [f["field"] for f in first["flags"]] == ["v"]
    assert report["records"] == 2 and report["flagged"] >= 1
    assert R.norm_datetime("2021-03-05T14:30:00+23:59").value == "2021-03-05T14:30:00+23:59"  # type: ignore[union-attr]


# --- 4. Chinese clock times at twelve --------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "time", "datetime"), [
    ("晚上12点", "00:00:00", "2021-03-06T00:00:00"),  # midnight at the day's end
    ("凌晨12点", "00:00:00", "2021-03-05T00:00:00"), ("中午12点", "12:00:00", "2021-03-05T12:00:00"),
    ("中午1点", "13:00:00", "2021-03-05T13:00:00"), ("晚上8点30分", "20:30:00", "2021-03-05T20:30:00"),
    ("下午3点15分", "15:15:00", "2021-03-05T15:15:00"), ("上午9点", "09:00:00", "2021-03-05T09:00:00"),
    ("上午12点", None, None), ("下午12点", None, None), ("早上12点", None, None),  # noon or midnight: not said
    ("晚上1点", None, None), ("上午15点", None, None),  # after midnight (which day?); a contradiction
    ("3点", None, None), ("12点半", None, None), ("3点15分", None, None),  # no period: 03:00 or 15:00 (said as 3点)
    ("15点", "15:00:00", "2021-03-05T15:00:00"), ("0点", "00:00:00", "2021-03-05T00:00:00"),  # a 24-hour figure
    ("3:00", "03:00:00", "2021-03-05T03:00:00"), ("8时30分", "08:30:00", "2021-03-05T08:30:00"),  # a written clock,
    # the formal 24-hour 时
    ("下午3点半", "15:30:00", "2021-03-05T15:30:00"), ("15点半", "15:30:00", "2021-03-05T15:30:00"),  # half past
])
def test_a_chinese_clock_at_twelve_is_midnight_noon_or_flagged(raw: str, time: str | None,
                                                                datetime: str | None) -> None:
    as_time, as_datetime = R.norm_time(raw), R.norm_datetime(f"2021年3月5日{raw}")
    assert (as_time and as_time.value) == time
    assert (as_datetime and as_datetime.value) == datetime


def test_a_date_at_the_midnight_ending_it_is_flagged_and_a_year_rolls_over() -> None:
    assert R.norm_date("2021年3月5日晚上12点") is None  # the 5th or the 6th: the text leaves it open
    assert R.norm_date("2021年3月5日晚上8点").value == "2021-03-05"  # type: ignore[union-attr]
    assert R.norm_datetime("2021年12月31日晚上12点").value == "2022-01-01T00:00:00"  # type: ignore[union-attr]
    # a bare 3点 leaves the hour open, not the day: a date field keeps its date (12点 might end the day: flagged)
    assert R.norm_date("2021年3月5日3点").value == "2021-03-05"  # type: ignore[union-attr]
    assert R.norm_date("2021年3月5日 10点半").value == "2021-03-05"  # type: ignore[union-attr]
    assert R.norm_date("2021年3月5日12点") is None and R.norm_datetime("2021年3月5日3点") is None


# --- 7. Roman numerals and suffixes in names -------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "want"), [
    ("JOHN SMITH III", "John Smith III"), ("ELIZABETH II", "Elizabeth II"), ("henry iv", "Henry IV"),
    ("SMITH, JOHN III", "John Smith III"), ("SMITH, JOHN JR.", "John Smith Jr."),
    ("MARTIN LUTHER KING JR", "Martin Luther King Jr"), ("WANG LI", "Wang Li"), ("IVAN DRAGO", "Ivan Drago"),
    ("John Smith Iii", "John Smith Iii"),  # mixed case is the writer's
    ("LOUIS VI", None),  # a numeral, or Vi the name: the case no longer says
    ("Nguyen, Thi Vi", "Thi Vi Nguyen"), ("Smith, Louis VI", "Louis Smith VI"),  # Vi the given name; VI a numeral
])
def test_a_generation_numeral_stays_in_capitals(raw: str, want: str | None) -> None:
    resolved = R.norm_name(raw)
    assert (resolved and resolved.value) == want


# --- 5. JSONL lines holding U+2028, U+2029 or U+0085 -----------------------------------------------------------


def test_jsonl_lines_holding_unicode_line_separators_are_read(tmp_path: Path) -> None:
    text = "one\u2028two \u2029three \u0085four"
    rows = [{"id": 1, "text": text, "v": "2021-03-05"}, {"id": 2, "text": "other", "v": "5 Mar 2021"}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows), encoding="utf-8",
                      newline="")
    records = read_records(source)
    assert [(r.id, r.text) for r in records] == [(1, text), (2, "other")]
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": "date"}}}
    report = normalize_file(source, tmp_path / "out.jsonl", schema, options=NormalizeOptions(mode="rules"))
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").split("\n") if line]
    assert report["records"] == 2 and [o["record"]["text"] for o in out] == [text, "other"]
    assert out[1]["record"]["v"] == "2021-03-05"


# --- 6. --keep field:NAME on CSV numbers -----------------------------------------------------------------------


def test_keep_field_compares_csv_numbers_as_numbers(tmp_path: Path) -> None:
    source = tmp_path / "keep.csv"
    source.write_text("id,text,score\na,same text here,9\nb,same text here,100\nc,same text here,10\n"
                      "d,other words entirely,x\ne,other words entirely,7.5\n", encoding="utf-8")
    records = read_records(source)
    result = dedupe_records(records, DedupeOptions(stages=("exact", "near"), keep="field:score"))
    assert sorted(result.kept_ids()) == ["b", "e"]  # 100 above 10 above 9; a number above the text "x"


# --- 8. the band's counts add up -------------------------------------------------------------------------------

_BASE = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "near", "the", "old", "river", "bank",
         "while", "the", "farmer", "watches", "from", "his", "porch"]
#: r0-r1 and r1-r2 merge by near (≥ 0.7), r0-r2 falls in the band [0.1, 0.7) with both already in one cluster;
#: r3 shares half of r0's words: an open band pair
_BAND = [" ".join(_BASE), " ".join(_BASE[:-2] + ["quietly", "today"]),
         " ".join(_BASE[:-4] + ["quietly", "today", "again", "now"]),
         " ".join([*_BASE[:10], "and", "then", "a", "storm", "rolled", "in", "over", "the", "hills", "so", "everyone",
                   "went", "home"])]


def _band_counts(summary: dict[str, Any]) -> int:
    return int(summary["decided_same"] + summary["decided_different"] + summary["left"] + summary["already_joined"])


def test_the_band_counts_add_up_without_a_decider() -> None:
    records = [Record(f"r{i}", text, {}) for i, text in enumerate(_BAND)]
    result = dedupe_records(records, DedupeOptions(stages=("exact", "near"), near_low=0.1))
    summary = result.report["uncertain"]
    assert summary["already_joined"] >= 1 and summary["left"] >= 1
    assert _band_counts(summary) == summary["pairs"] == result.report["stages"]["near"]["uncertain"]


def test_the_band_counts_add_up_with_a_decider_and_a_joined_pair_is_not_sent(tmp_path: Path) -> None:
    same = [("How do I cancel my subscription?", "Cancel my subscription, how?"),
            ("Stop my subscription please", "I want to end the subscription")]
    different = [("How do I cancel my subscription?", "Where is the train station?"),
                 ("The weather is sunny", "My invoice total is wrong")]
    rows = [{"text": pair_text(a, b), "label": "same"} for _ in range(6) for a, b in same]
    rows += [{"text": pair_text(a, b), "label": "different"} for _ in range(6) for a, b in different]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tuned = tune(load_examples(data), name="sweep-pairs", methods_wanted=["tfidf"], run=None)
    assert tuned.decider is not None
    save_decider(tuned.decider)
    records = [Record(f"r{i}", text, {}) for i, text in enumerate(_BAND)]
    result = dedupe_records(records, DedupeOptions(stages=("exact", "near"), near_low=0.1, decider="sweep-pairs"))
    summary = result.report["uncertain"]
    assert summary["already_joined"] >= 1 and summary["decider"].startswith("sweep-pairs")
    assert _band_counts(summary) == summary["pairs"]
    decided = summary["decided_same"] + summary["decided_different"]
    assert decided == summary["pairs"] - summary["already_joined"] >= 1
    # the joined pair (r0, r2) has no band evidence: it was not decided
    by_id = {a.id: a for a in result.records}
    assert all(e.decided_by is None for e in by_id["r2"].evidence if e.other == "r0")


@pytest.mark.parametrize("raw", ["13800138000；13900139000", "13800138000;13900139000", "+1 (415) 555-2671 x99"])
def test_a_second_number_or_an_extension_is_flagged_not_dropped(raw: str) -> None:
    """phonenumbers reads ";" as RFC 3966 parameters (the second number vanished) and E.164 has no extension."""
    assert R.norm_phone(raw, region="CN") is None
    assert R.norm_phone("13800138000", region="CN").value == "+8613800138000"  # type: ignore[union-attr]
