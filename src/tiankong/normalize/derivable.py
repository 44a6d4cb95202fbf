"""Is a model's value derivable from the input? The check that keeps the model from inventing.

A value the model proposes for a field is kept only when every part of it is evidenced in the field's raw text:

- a date: its year (four digits, or the last two), its month (number, English name or abbreviation) and its day
  (number, or an English cardinal/ordinal word) each appear — after Chinese numerals and full-width digits are
  read as digits;
- a phone: its national number's digits appear in a row in the raw digits, and its country code is there too or is
  the default region's;
- an amount: its digits (possibly before a 万/k/m multiplier) appear in the raw digits, and its currency is named
  (a code, or a symbol or word only it has), or is the default (which a shared symbol such as ``$`` must allow);
  never from a bound or a share (``<100 USD``, ``~12``, ``12+``, ``50%``);
- a unit value: a number and a unit in the raw text convert to it;
- any text (address levels, names): every word of it appears in the raw text (Chinese: every level as a substring).
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from typing import Any

from .base import clean
from .money import BOUND, CURRENCY_WORDS, SHARED_CURRENCY, parse_number
from .rules import COUNTRIES, UNITS

_ZH_DIGIT = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
             "九": 9}
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_ONES = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_ORD = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
        "twelve": "twelfth"}
_MULTIPLIER_WORDS = [(("k", "thousand", "千"), Decimal(1000)), (("万",), Decimal(10_000)),
                     (("m", "million", "百万"), Decimal(1_000_000)), (("亿",), Decimal(100_000_000))]


def _word_numbers() -> dict[str, int]:
    words: dict[str, int] = {}
    for n in range(1, 32):
        if n < 20:
            cardinal = _ONES[n]
        else:
            tens = "twenty" if n < 30 else "thirty"
            cardinal = tens + (f"-{_ONES[n % 10]}" if n % 10 else "")
        head, _, last = cardinal.rpartition("-")
        ordinal_last = _ORD.get(last, (last[:-1] + "ieth") if last.endswith("y") else last + "th")
        words[cardinal] = n
        words[(head + "-" if head else "") + ordinal_last] = n
    return words


_WORDS = _word_numbers()


def zh_numerals(text: str) -> str:
    """Chinese numerals read as digits: 二〇二一 → 2021, 十二 → 12, 二十三 → 23 (enough for dates and phones)."""
    def tens(match: re.Match[str]) -> str:
        head, tail = match[1], match[2]
        return str((_ZH_DIGIT[head] if head else 1) * 10 + (_ZH_DIGIT[tail] if tail else 0))

    text = re.sub(r"([一二三四五六七八九])?十([一二三四五六七八九])?", tens, text)
    return "".join(str(_ZH_DIGIT[c]) if c in _ZH_DIGIT else c for c in text)


def _plain(text: str) -> str:
    return zh_numerals(unicodedata.normalize("NFKC", text)).casefold()


def _ints(text: str) -> set[int]:
    return {int(t) for t in re.findall(r"\d+", text)}


def date_derivable(value: str, raw: str) -> bool:
    match = re.match(r"^(\d{4})-(\d{2})-(\d{2})", value)
    if not match:
        return False
    year, month, day = int(match[1]), int(match[2]), int(match[3])
    plain = _plain(raw)
    numbers = _ints(plain)
    words = {_WORDS[w] for w in re.findall(r"[a-z]+(?:-[a-z]+)?", plain) if w in _WORDS}
    runs = re.findall(r"\d{6,}", plain)  # 20210305, 050321: the parts in a row
    if any(f"{year:04d}{month:02d}{day:02d}" in r or f"{day:02d}{month:02d}{year:04d}" in r or
           f"{month:02d}{day:02d}{year:04d}" in r for r in runs):
        return True
    has_year = year in numbers or (year % 100 in numbers and bool(re.search(rf"(?<!\d)'?{year % 100:02d}(?!\d)",
                                                                            plain)))
    has_month = month in numbers or any(m in plain for m in (_MONTHS[month - 1], _MONTHS[month - 1][:3]))
    has_day = day in numbers or day in words
    return has_year and has_month and has_day


def datetime_derivable(value: str, raw: str) -> bool:
    if not date_derivable(value, raw):
        return False
    match = re.search(r"T(\d{2}):(\d{2})", value)
    if not match:
        return False
    return time_derivable(value[match.start() + 1:], raw)


def time_derivable(value: str, raw: str) -> bool:
    match = re.match(r"^(\d{2}):(\d{2})", value)
    if not match:
        return False
    hour, minute = int(match[1]), int(match[2])
    numbers = _ints(_plain(raw))
    return (hour in numbers or hour - 12 in numbers) and (minute == 0 or minute in numbers)


def phone_derivable(value: str, raw: str, region: str | None) -> bool:
    import phonenumbers

    try:
        number = phonenumbers.parse(value, None)
    except phonenumbers.NumberParseException:
        return False
    digits = re.sub(r"\D", "", _plain(raw))
    national = str(number.national_number)
    at = digits.find(national)
    if at < 0:
        return False
    code = str(number.country_code)
    before = digits[:at]  # all of it: a country code taken from the middle of other digits is invented
    if before in (code, "00" + code, code + "0", "00" + code + "0"):
        return True
    return before in ("", "0") and (region is not None and
                                         phonenumbers.country_code_for_region(region) == number.country_code)


def amount_derivable(value: Any, raw: str, currency: str | None) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("amount"), (int, float)) or isinstance(
            value.get("amount"), bool):
        return False
    plain = _plain(raw)
    if BOUND.search(plain):
        return False  # "<100 USD", "50%": no exact amount to derive
    digits = re.sub(r"\D", "", plain)
    amount = Decimal(str(value["amount"]))
    named = [factor for words, factor in _MULTIPLIER_WORDS if any(re.search(rf"(?<![a-z]){w}(?![a-z])", plain)
                                                                  for w in words)]
    candidates = [amount] + [amount / m for m in named]  # 3.5万 is 35000; 25,92 is never 2592000000
    if not any(_digit_string(c) in digits for c in candidates if c == c.to_integral_value() or c >= 1):
        return False
    code = value.get("currency")
    if code is None:
        return True
    if not isinstance(code, str):
        return False
    spelled = [word for word in CURRENCY_WORDS if re.search(rf"(?<![a-z]){re.escape(word)}(?![a-z])", plain)]
    if any(code not in SHARED_CURRENCY[word] for word in spelled if CURRENCY_WORDS[word] is None):
        return False  # "$12.50" is not yen, whatever the default currency
    # named (a code, or a word only it has), else the default: which of the currencies a "$" or "dollars" may
    # be is not in the text, so the model's pick among them is a guess (Qwen2.5 0.5B writes AUD) — as the rule,
    # refused without a default
    return code.casefold() in plain or code == currency or any(CURRENCY_WORDS[word] == code for word in spelled)


def _digit_string(number: Decimal) -> str:
    text = format(number.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text.replace(".", "").lstrip("-")


def unit_derivable(value: Any, raw: str, unit: str | None) -> bool:
    if unit is None or unit.lower() not in UNITS or not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    text = clean(raw).casefold()
    dim, target = UNITS[unit.lower()]
    for match in re.finditer(r"([-+]?\d[\d,.]*)\s*([^\d\s,]+)", text):
        number = parse_number(match[1])
        spelled = match[2].rstrip(".")
        if number is None or spelled not in UNITS or UNITS[spelled][0] != dim:
            continue
        converted = number * UNITS[spelled][1] / target
        if abs(float(converted) - float(value)) <= 1e-6 * max(1.0, abs(float(value))):
            return True
    return False


def text_derivable(value: Any, raw: str) -> bool:
    """Every word (Latin) or every piece (Chinese) of ``value`` — a string or an object of strings — is in ``raw``."""
    if isinstance(value, dict):
        return all(text_derivable(v, raw) for v in value.values())
    if not isinstance(value, str):
        return False
    plain = clean(raw).casefold()
    squeezed = plain.replace(" ", "")
    for word in re.findall(r"[\u4e00-\u9fff]+|[^\W_]+", clean(value).casefold()):
        if re.fullmatch(r"[\u4e00-\u9fff]+", word):
            if word not in squeezed:
                return False
        elif not re.search(rf"(?<![^\W_]){re.escape(word)}(?![^\W_])", plain):
            return False
    return True


def address_derivable(value: Any, raw: str) -> bool:
    """Every level is in ``raw``; the country may also be the canonical name of a spelling in ``raw`` (US → USA)."""
    if not isinstance(value, dict):
        return False
    rest = dict(value)
    country = rest.pop("country", "")
    plain = clean(raw).casefold()
    if country and not text_derivable(country, raw) and not any(
            code == country and re.search(rf"(?<![^\W_]){re.escape(spelling)}(?![^\W_])", plain)
            for spelling, code in COUNTRIES.items()):
        return False
    return text_derivable(rest, raw)


_TITLES = {"mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam"}


def name_complete(value: str, raw: str) -> bool:
    """Every word of ``raw`` but titles and numbers is in the name: a name the model shortened is refused."""
    kept = set(re.findall(r"[^\W\d_]+", clean(value).casefold()))
    wanted = {w for w in re.findall(r"[^\W\d_]+", clean(raw).casefold()) if w not in _TITLES}
    return wanted <= kept
