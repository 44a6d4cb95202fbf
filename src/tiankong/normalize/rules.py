"""Deterministic normalisers: one function per field kind, each giving the canonical value and the rule's name, or
``None`` when it cannot be sure (the caller then leaves the value as it was, or asks the model).

Each normaliser fails closed: a date missing its day, a phone number ``phonenumbers`` finds invalid, an amount
with two numbers in it, a unit that is not in the table — all ``None``, never a guess.

- dates and times: ``python-dateutil`` (light, pure Python), plus the ``2021年3月5日`` spelling; a date is only
  taken when parsing with two different defaults gives the same result (no component was filled in);
- phones: ``phonenumbers`` (Google's libphonenumber metadata) to E.164, with a default region for national numbers;
- amounts (``money.py``): the one number in the text, its currency from an ISO 4217 code, a symbol or a name (a
  small table), or the default currency where a shared symbol allows it;
- units: a table of length, mass, volume and duration units (SI and common, Chinese included) to a target unit;
- addresses: Chinese by the level suffixes (省/市/区/县/街道/镇 …), English by comma parts with a US-state and
  postcode pattern;
- names: whitespace, ``Last, First`` order and the letter case of all-caps or all-lowercase Latin names;
- plain types: a text that is exactly an integer, number or boolean, for a field of that JSON type (CSV cells).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from .base import Resolved, clean
from .money import norm_amount, parse_number
from .zh_time import ZH_TIME, zh_clock, zh_datetime

KINDS = ("date", "datetime", "time", "phone", "amount", "unit", "address", "name")


# --- dates and times ---------------------------------------------------------------------------------------------

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_D1 = dt.datetime(2001, 1, 1, 0, 0, 0)
_D2 = dt.datetime(2002, 2, 2, 1, 1, 1)


#: "GMT+8" / "UTC+8" mean eight hours ahead of UTC to people; dateutil reads them the POSIX way (-08:00)
_NAMED_OFFSET = re.compile(r"\b(?:GMT|UTC)\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?\b", re.IGNORECASE)
_ZERO_ZONE = re.compile(r"(?:\b(?:UTC|GMT)|\dZ)\b", re.IGNORECASE)
#: d/m/y or m/d/y in figures only: which is which is the caller's (``dayfirst``), never dateutil's guess
_NUMERIC_DMY = re.compile(r"^(\d{1,2})[-/.](\d{1,2})[-/.](\d{2}|\d{4})\b")


def _both_defaults(text: str, dayfirst: bool) -> tuple[dt.datetime, dt.datetime] | None:
    """The text parsed with two defaults; None when dateutil had to guess: an order the text does not follow
    (2021-03-05 is year-month-day whatever ``dayfirst`` says; 21-03-05 has no month 21), or a time zone it does not
    know (PST, CST: dropped with a warning, or read as this machine's own zone when the names match), or an offset
    of a day or more (+24:00, GMT+25: no such offset, and Python refuses it when the value is written)."""
    import warnings

    from dateutil import parser, tz

    if re.match(r"^\d{4}[-/.]", text):
        dayfirst = False  # dateutil swaps month and day of an ISO date under dayfirst
    text = _NAMED_OFFSET.sub(lambda m: f" {m[1]}{int(m[2]):02d}:{m[3] or '00'}", text)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", parser.UnknownTimezoneWarning)
            a = parser.parse(text, default=_D1, dayfirst=dayfirst, fuzzy=False)
            b = parser.parse(text, default=_D2, dayfirst=dayfirst, fuzzy=False)
            a.utcoffset()  # an offset of a day or more (+24:00, GMT+25) is parsed, and raises only when read
    except (ValueError, OverflowError, parser.ParserError, parser.UnknownTimezoneWarning):
        return None
    if isinstance(a.tzinfo, tz.tzlocal):  # a zone name that happens to be this machine's
        if a.utcoffset() != dt.timedelta(0) or not _ZERO_ZONE.search(text):
            return None
        a, b = a.replace(tzinfo=dt.UTC), b.replace(tzinfo=dt.UTC)
    figures = _NUMERIC_DMY.match(text)
    if figures:
        month, day = (int(figures[2]), int(figures[1])) if dayfirst else (int(figures[1]), int(figures[2]))
        # the other order only when it is the one reading there is (13/05/2021); 21-03-05 may be yy-mm-dd too
        only_reading = month > 12 and len(figures[3]) == 4 and (a.month, a.day) == (day, month)
        if (a.month, a.day) != (month, day) and not only_reading:
            return None
    return a, b


def norm_date(raw: str, *, dayfirst: bool = False) -> Resolved | None:
    text = clean(raw)
    zh = zh_datetime(text)
    if zh is not None:
        # 3月5日晚上12点 is the midnight that starts 3月6日: which day a date field means, the text leaves open
        return None if zh[2] else Resolved(zh[0].isoformat(), "date:zh")
    if re.fullmatch(r"\d{8}", text):  # 20210305
        try:
            return Resolved(dt.date(int(text[:4]), int(text[4:6]), int(text[6:])).isoformat(), "date:compact")
        except ValueError:
            return None
    both = _both_defaults(text, dayfirst)
    if both is None or both[0].date() != both[1].date():
        return None  # unparseable, or a year/month/day the text does not give
    return Resolved(both[0].date().isoformat(), "date:dateutil")


def norm_datetime(raw: str, *, dayfirst: bool = False) -> Resolved | None:
    text = clean(raw)
    zh = zh_datetime(text)
    if zh is not None:
        if zh[1] is None:
            return None
        value = dt.datetime.combine(zh[0], zh[1]) + dt.timedelta(days=zh[2])
        return Resolved(value.isoformat(), "datetime:zh")
    both = _both_defaults(text, dayfirst)
    if both is None:
        return None
    a, b = both
    if a.date() != b.date() or a.hour != b.hour:
        return None  # the hour must be given; missing minutes/seconds are zero only when the text gives the hour
    value = a.replace(minute=a.minute if a.minute == b.minute else 0, second=a.second if a.second == b.second else 0)
    return Resolved(value.isoformat(), "datetime:dateutil")


def norm_time(raw: str, **_: Any) -> Resolved | None:
    text = clean(raw)
    clock = ZH_TIME.match(text)
    if clock and (clock[1] or re.search(r"[点时]", text)):
        read = zh_clock(clock)
        return None if read is None else Resolved(read[0].isoformat(), "time:zh")
    both = _both_defaults(text, False)
    if both is None or both[0].hour != both[1].hour or both[0].date() != _D1.date():
        return None  # no hour, or a date in a time field
    a, b = both
    value = dt.time(a.hour, a.minute if a.minute == b.minute else 0, a.second if a.second == b.second else 0,
                    tzinfo=a.tzinfo)  # a zone the text gives is kept (14:30 GMT+8 → 14:30:00+08:00)
    return Resolved(value.isoformat(), "time:dateutil")


# --- phones ------------------------------------------------------------------------------------------------------


def norm_phone(raw: str, *, region: str | None = None) -> Resolved | None:
    import phonenumbers

    text = clean(raw)
    text = re.sub(r"^(tel|phone|ph|mobile|手机|电话)\s*[:：.]?\s*", "", text, flags=re.IGNORECASE)
    if re.search(r"[;；]", text):  # phonenumbers reads ";" as RFC 3966 parameters: a second number was dropped
        return None
    try:
        number = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(number) or number.extension:
        return None  # an extension (x99) has no place in E.164: left and flagged, not dropped
    if not phonenumbers.can_be_internationally_dialled(number):
        return None  # China's 400/800 service numbers: +86 400… is a number nobody can dial; left as written
    return Resolved(phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164), "phone:phonenumbers")


# --- units -------------------------------------------------------------------------------------------------------

#: unit spelling → (dimension, factor to the dimension's base unit: metre, kilogram, litre, second)
UNITS: dict[str, tuple[str, Decimal]] = {}
for _names, _dim, _factor in [
    (("mm", "millimetre", "millimeter", "millimetres", "millimeters", "毫米"), "length", "0.001"),
    (("cm", "centimetre", "centimeter", "centimetres", "centimeters", "厘米", "公分"), "length", "0.01"),
    (("m", "metre", "meter", "metres", "meters", "米", "公尺"), "length", "1"),
    (("km", "kilometre", "kilometer", "kilometres", "kilometers", "公里", "千米"), "length", "1000"),
    (("in", "inch", "inches", "\"", "英寸"), "length", "0.0254"),
    (("ft", "foot", "feet", "'", "英尺"), "length", "0.3048"),
    (("mi", "mile", "miles", "英里"), "length", "1609.344"),
    (("mg", "milligram", "milligrams", "毫克"), "mass", "0.000001"),
    (("g", "gram", "grams", "克"), "mass", "0.001"),
    (("kg", "kilogram", "kilograms", "kilo", "kilos", "公斤", "千克"), "mass", "1"),
    (("斤",), "mass", "0.5"),
    (("lb", "lbs", "pound", "pounds", "磅"), "mass", "0.45359237"),
    (("oz", "ounce", "ounces", "盎司"), "mass", "0.028349523125"),
    (("t", "tonne", "tonnes", "吨"), "mass", "1000"),
    (("ml", "millilitre", "milliliter", "millilitres", "milliliters", "毫升"), "volume", "0.001"),
    (("l", "litre", "liter", "litres", "liters", "升"), "volume", "1"),
    (("gal", "gallon", "gallons", "加仑"), "volume", "3.785411784"),
    (("s", "sec", "secs", "second", "seconds", "秒"), "duration", "1"),
    (("min", "mins", "minute", "minutes", "分钟"), "duration", "60"),
    (("h", "hr", "hrs", "hour", "hours", "小时"), "duration", "3600"),
    (("d", "day", "days", "天"), "duration", "86400"),
]:
    for _name in _names:
        UNITS[_name] = (_dim, Decimal(_factor))


def norm_unit(raw: str, *, unit: str | None = None, decimal_comma: bool = False) -> Resolved | None:
    """A number in ``unit`` (the target): ``"5'2\\""``-style compounds are refused; one number, one unit."""
    if unit is None or unit.lower() not in UNITS:
        return None
    text = clean(raw)
    match = re.fullmatch(r"([-+]?\d[\d,. ]*?)\s*([^\d\s.,].*?)?", text)
    if not match:
        return None
    value = parse_number(match[1].strip(), decimal_comma=decimal_comma)
    spelled = (match[2] or "").strip().rstrip(".").lower()
    if value is None or spelled not in UNITS:
        return None
    dim, factor = UNITS[spelled]
    target_dim, target_factor = UNITS[unit.lower()]
    if dim != target_dim:
        return None
    try:
        converted = float(round(value * factor / target_factor, 6))
    except InvalidOperation:
        return None  # past Decimal's 28 digits: no measurement has them
    return Resolved(converted, f"unit:{spelled}->{unit}") if math.isfinite(converted) else None


# --- addresses ---------------------------------------------------------------------------------------------------

ZH_LEVELS = ("province", "city", "district", "street", "detail")
EN_LEVELS = ("street", "city", "state", "postcode", "country")
_MUNICIPALITIES = ("北京", "上海", "天津", "重庆")
_ZH_ADDRESS = re.compile(
    r"^(?:中国)?(?P<province>[\u4e00-\u9fff]{2,7}?(?:省|自治区|特别行政区))?"
    r"(?P<city>[\u4e00-\u9fff]{2,7}?(?:市|自治州|地区|盟))?"
    r"(?P<district>[\u4e00-\u9fff]{1,7}?(?:区|县|旗|市))?"
    r"(?P<street>[\u4e00-\u9fff]{1,9}?(?:街道|镇|乡))?"
    r"(?P<detail>.*)$")
US_STATES = {
    "AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "FL", "GA", "HI", "ID", "IL", "IN", "IA", "KS", "KY", "LA",
    "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM", "NY", "NC", "ND", "OH", "OK",
    "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA", "WV", "WI", "WY", "DC", "PR", "GU", "VI",
    "AS", "MP"}
COUNTRIES = {"usa": "USA", "us": "USA", "u.s.a.": "USA", "u.s.": "USA", "united states": "USA",
              "united states of america": "USA", "uk": "UK", "united kingdom": "UK", "canada": "Canada"}


def norm_address(raw: str, **_: Any) -> Resolved | None:
    text = clean(raw)
    if re.search(r"[\u4e00-\u9fff]", text):
        return _zh_address(text.replace(" ", ""))
    return _en_address(text)


def _zh_address(text: str) -> Resolved | None:
    match = _ZH_ADDRESS.match(text)
    if not match:
        return None
    parts = {k: (match[k] or "") for k in ZH_LEVELS}
    if not parts["province"] and parts["city"][:2] in _MUNICIPALITIES:
        parts["province"] = parts["city"]
    if not parts["province"] and parts["district"][:2] in _MUNICIPALITIES and parts["district"].endswith("市"):
        parts["province"] = parts["city"] = parts["district"]
        parts["district"] = ""
    if not parts["province"] and not parts["city"]:
        return None  # no administrative level found: not an address the rule can split
    return Resolved(parts, "address:zh-levels")


def _en_address(text: str) -> Resolved | None:
    pieces = [p.strip() for p in text.split(",") if p.strip()]
    country = ""
    if pieces and pieces[-1].lower() in COUNTRIES:
        country = COUNTRIES[pieces.pop().lower()]
    if not pieces:
        return None
    state_zip = re.fullmatch(r"([A-Za-z]{2})(?:\s+(\d{5}(?:-\d{4})?))?", pieces[-1])
    if not state_zip or state_zip[1].upper() not in US_STATES or len(pieces) < 2:
        return None  # only the US layout is known to the rule
    pieces.pop()
    city = pieces.pop()
    street = ", ".join(pieces)
    return Resolved({"street": street, "city": _title(city), "state": state_zip[1].upper(),
                     "postcode": state_zip[2] or "", "country": country}, "address:en-us")


# --- names -------------------------------------------------------------------------------------------------------


#: generation numerals kept in capitals after a name (JOHN SMITH III → John Smith III); VI (a given name too: Vi),
#: XI, LI, DI (surnames: Xi, Li, Di) are left out
_NUMERALS = frozenset({"ii", "iii", "iv", "vii", "viii", "ix"})
#: what ends a name after the given names: moved after the surname when ``Last, First`` is reordered
_SUFFIXES = _NUMERALS | {"jr", "sr"}


def _title_part(part: str) -> str:
    if part.lower().startswith("mc"):
        return "Mc" + part[2:3].upper() + part[3:].lower()
    return part[:1].upper() + part[1:].lower()


def _title(text: str) -> str:
    """The case of an all-caps or all-lowercase name: each part after a space, hyphen or apostrophe capitalised
    (ANNE-MARIE → Anne-Marie, O'BRIEN → O'Brien), a generation numeral after the first word in capitals
    (ELIZABETH II → Elizabeth II); a name in mixed case is the writer's and kept."""
    if text.isupper() or text.islower():
        first, *others = text.split(" ")
        return " ".join([_title_word(first)] + [w.upper() if w.lower() in _NUMERALS else _title_word(w)
                                                for w in others])
    return text


def _title_word(word: str) -> str:
    return "".join(_title_part(p) for p in re.split(r"([\-'])", word))


def norm_name(raw: str, **_: Any) -> Resolved | None:
    text = clean(raw)
    if not text:
        return None
    if re.fullmatch(r"[\u4e00-\u9fff· ]+", text):
        return Resolved(text.replace(" ", ""), "name:zh")
    if not re.fullmatch(r"[A-Za-z .,'\-]+", text) or text.count(",") > 1:
        return None
    if "," in text:
        last, first = (p.strip() for p in text.split(","))
        if not last or not first:
            return None
        *given, end = first.split(" ")
        # SMITH, JOHN III → John Smith III; VI only where the case says numeral ("Smith, Louis VI"), not the
        # given name Vi ("Nguyen, Thi Vi"; all capitals: flagged below)
        suffix = given and (end.lower().rstrip(".") in _SUFFIXES or (end == "VI" and not first.isupper()))
        text = f"{' '.join(given)} {last} {end}" if suffix else f"{first} {last}"
    if (text.isupper() or text.islower()) and "vi" in text.lower().split(" ")[1:]:
        return None  # LOUIS VI or TRAN THI VI: a numeral or a name, the case no longer says
    return Resolved(_title(text), "name:latin")


# --- plain JSON types ----------------------------------------------------------------------------------------------

_INTEGER = re.compile(r"[-+]?\d+")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def norm_scalar(raw: str, json_type: str) -> Resolved | None:
    """A text cell (every CSV value is one) as the integer, number or boolean its schema says: ``"12"`` → 12,
    ``"2.5"`` → 2.5, ``"true"`` → true — only when the text is exactly that (no ``1,234``, no ``12 kg``, no digits
    a JSON number would lose)."""
    text = raw.strip()
    if json_type == "integer" and _INTEGER.fullmatch(text):
        return Resolved(int(text), "type:integer")
    if json_type == "number" and _DECIMAL.fullmatch(text):
        number = float(text)
        if math.isfinite(number) and Decimal(repr(number)) == Decimal(text):
            return Resolved(int(number) if _INTEGER.fullmatch(text) else number, "type:number")
    if json_type == "boolean" and text.lower() in ("true", "false"):
        return Resolved(text.lower() == "true", "type:boolean")
    return None


RULES: dict[str, Callable[..., Resolved | None]] = {
    "date": norm_date, "datetime": norm_datetime, "time": norm_time, "phone": norm_phone,
    "amount": norm_amount, "unit": norm_unit, "address": norm_address, "name": norm_name}
