"""Amounts: the one number in a text and its currency (ISO 4217) — a code, a symbol or a name, or the default
currency where a symbol several currencies share (``$``, ``¥``, ``dollars``) allows it. Fail closed: two numbers,
words the table does not know, two currencies, a bound or a share (``<100``, ``~12``, ``12+``, ``50%``), a sign
after the number or after its currency (``12.50-``, ``USD - 5``; a sign before it all, ``- 5 USD``, is the amount's),
or more digits than a JSON number keeps give ``None``. A number may start at its
decimal point (``$.99`` is 0.99), one in parentheses is an accounting negative (``(USD 12.50)`` is -12.5), and
``,-`` after it means no cents (``49,- €`` is 49)."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from .base import Resolved, clean

#: ISO 4217's active codes (2024): a default currency (``--currency``, ``x-currency``) must be one of them (written
#: out: no package the project installs carries the list, and ``[A-Z]{3}`` took ZZZ and XYZ)
_ISO_4217_TABLE = """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF
    CLP CNY COP CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL
    HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL
    MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON
    RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS
    UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL"""
ISO_4217 = frozenset(_ISO_4217_TABLE.split())
_DOLLARS = frozenset({"USD", "AUD", "CAD", "HKD", "SGD", "NZD", "TWD", "BSD", "BBD", "BZD", "BMD", "BND", "FJD",
                      "GYD", "JMD", "KYD", "LRD", "NAD", "SBD", "SRD", "TTD", "XCD", "ZWL"})
#: a symbol or name several currencies share: alone it needs the default currency, which must be one of them —
#: "$12.50" with a default of JPY is refused, never written as yen
SHARED_CURRENCY = {"$": _DOLLARS | {"MXN", "ARS", "CLP", "COP", "CUP", "DOP", "UYU", "NIO", "TOP", "WST"},
                   "dollar": _DOLLARS, "dollars": _DOLLARS, "¥": frozenset({"CNY", "JPY"}),
                   "￥": frozenset({"CNY", "JPY"})}
#: symbols and names → ISO 4217 (a symbol shared by several currencies maps to none: see ``SHARED_CURRENCY``)
CURRENCY_WORDS = {
    "us$": "USD", "usd": "USD", "dollar": None, "dollars": None, "美元": "USD", "美金": "USD",
    "€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR", "欧元": "EUR",
    "£": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP", "英镑": "GBP",
    "¥": None, "￥": None, "cny": "CNY", "rmb": "CNY", "元": "CNY", "人民币": "CNY", "块": "CNY", "jpy": "JPY",
    "yen": "JPY", "日元": "JPY", "円": "JPY", "hk$": "HKD", "hkd": "HKD", "港币": "HKD", "港元": "HKD",
    "a$": "AUD", "aud": "AUD", "c$": "CAD", "cad": "CAD", "chf": "CHF", "inr": "INR", "₹": "INR", "krw": "KRW",
    "₩": "KRW", "sgd": "SGD", "s$": "SGD", "$": None,
}
#: a number starts at a digit or at the decimal point before one (``.99``), its sign written against it
_NUMBER = re.compile(r"[-+]?(?:\d|\.\d)(?:[\d,.' ]*\d)?")
#: a bound, an approximation or a share (``<100``, ``~12``, ``12+``, ``50%``): the text gives no exact amount
BOUND = re.compile(r"[<>≤≥≦≧≪≫≮≯~〜≈≃∼±%‰‱]|\d\s*\+")
#: ",-" or ".-" after the digits: no cents (``49,- €``), not a minus
_WHOLE = re.compile(r"(\d)[,.]-(?![\d-])")
#: what the rule refuses left beside the number: a bound's sign, or a sign away from the number (``12.50-``,
#: ``USD - 5``, ``12+``) — never read as the bare number
_NOT_EXACT = re.compile(r"[<>≤≥≦≧≪≫≮≯~〜≈≃∼±%‰‱+\-]")
_MULTIPLIER = {"k": Decimal(1000), "m": Decimal(1_000_000), "万": Decimal(10_000), "亿": Decimal(100_000_000),
               "千": Decimal(1000), "百万": Decimal(1_000_000)}


def parse_number(token: str, *, decimal_comma: bool = False) -> Decimal | None:
    """``1,234.56``, ``1.234,56`` (``decimal_comma`` or two separators), ``1 234``; None when unclear."""
    token = token.replace(" ", "").replace("'", "")
    commas, dots = token.count(","), token.count(".")
    if commas and dots:
        decimal_sep = "," if token.rfind(",") > token.rfind(".") else "."
    elif commas == 1 and (decimal_comma or len(token.split(",")[1]) != 3):
        decimal_sep = ","
    elif dots == 1 and decimal_comma and len(token.split(".")[1]) == 3:
        decimal_sep = ","  # 1.234 in a decimal-comma locale is a thousand and more
    else:
        decimal_sep = "."
    thousands = "." if decimal_sep == "," else ","
    if token.count(decimal_sep) > 1:
        return None
    groups = token.replace(decimal_sep, "#").split("#")[0].split(thousands)
    if len(groups) > 1 and (any(len(g) != 3 for g in groups[1:]) or not groups[0].lstrip("+-")):
        return None  # 12,34 as thousands: not a number we are sure of
    try:
        return Decimal(token.replace(thousands, "").replace(decimal_sep, "."))
    except InvalidOperation:
        return None


def norm_amount(raw: str, *, currency: str | None = None, decimal_comma: bool = False) -> Resolved | None:
    """``{"amount", "currency"}``: one number and at most one currency in the text (``currency``: the default)."""
    text = clean(raw).replace("\u2212", "-")  # the minus sign (U+2212) is a minus
    text = _WHOLE.sub(r"\1", text)  # 49,- € / CHF 5.-: a whole amount (German, Nordic, Swiss prices), no sign
    numbers = list(_NUMBER.finditer(text))
    if len(numbers) != 1:
        return None
    token, before, after = numbers[0][0], text[:numbers[0].start()], text[numbers[0].end():]
    if token.lstrip("+-").startswith(".") and before[-1:].isalpha():
        return None  # "USD.5", "Rs.500": a separator or a decimal point, the text does not say which
    value = parse_number(token, decimal_comma=decimal_comma)
    if value is None:
        return None
    signed = token[0] in "+-"
    if before.lstrip()[:1] in ("+", "-"):  # -$5, -USD 5: the sign of the whole amount
        if signed:
            return None
        value, signed = (-value if before.lstrip()[0] == "-" else value), True
        before = before.lstrip()[1:]
    if before.count("(") > before.count(")") and ")" in after:  # (USD 12.50), (12.50) USD: an accounting negative
        if signed:
            return None  # (-12.50): two negatives, or one written twice
        value = -value
    rest = f"{before} {after}".lower()
    for word, factor in sorted(_MULTIPLIER.items(), key=lambda item: -len(item[0])):
        if re.search(rf"(?<![a-z]){re.escape(word)}(?![a-z])", rest):
            value *= factor
            rest = rest.replace(word, " ", 1)
            break
    found: set[str | None] = set()
    families: list[frozenset[str]] = []
    for word, code in sorted(CURRENCY_WORDS.items(), key=lambda item: -len(item[0])):
        pattern = rf"(?<![a-z]){re.escape(word)}(?![a-z])"
        if re.search(pattern, rest):
            found.add(code)
            families += [SHARED_CURRENCY[word]] if code is None else []
            rest = re.sub(pattern, " ", rest)
    if re.search(r"[a-z\u4e00-\u9fff]", rest):
        return None  # words left over that the table does not know
    if _NOT_EXACT.search(rest):
        return None  # a bound, an approximation or a share: not this amount
    codes = {c for c in found if c is not None}
    if len(codes) > 1:
        return None
    code = next(iter(codes)) if codes else currency
    if code is None or any(code not in family for family in families):
        return None  # no currency named, or a symbol the named or default one does not use
    number = float(value)
    if not math.isfinite(number) or Decimal(repr(number)) != value:
        return None  # more digits than a JSON number keeps (99999999999999999999.99 would be written as 1e+20)
    return Resolved({"amount": number, "currency": code}, "amount:table")
