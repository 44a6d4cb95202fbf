"""Deterministic PII detectors (Chinese and English text) with validators.

Types: ID_CARD (China resident ID with GB 11643 checksum and date of birth; US SSN), PHONE (CN mobile and
landline, NANP, ``+``-international), BANK_CARD (Luhn + issuer prefix), EMAIL, IP_ADDRESS (v4/v6 checked by
``ipaddress``), URL, SECRET (known token formats, PEM private keys, ``key=value`` assignments with an entropy
floor), PASSPORT (CN E/G numbers, or any passport-shaped number after a passport keyword or the name of a
mainland travel permit: 港澳通行证, 回乡证, 台胞证). A US SSN without dashes counts only after an SSN keyword.

Offsets are character offsets into the original string. Full-width ASCII (``１３８``, ``：``) is read as ASCII,
which keeps offsets. Boundaries are lookarounds on ASCII letters/digits, so CJK neighbours need no spaces.
Overlaps: the longer span wins, then the more specific type.
"""

from __future__ import annotations

import bisect
import ipaddress
import keyword
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date

__all__ = [
    "TYPES", "Entity", "detect_rules", "id_card_valid", "luhn_valid", "resolve_overlaps", "shannon_entropy",
]

TYPES = ("SECRET", "ID_CARD", "BANK_CARD", "PASSPORT", "EMAIL", "URL", "IP_ADDRESS", "PHONE")
_PRIORITY = {name: rank for rank, name in enumerate(TYPES)}


@dataclass(frozen=True)
class Entity:
    """One detected span: ``text == source_text[start:end]``."""

    start: int
    end: int
    type: str
    text: str
    source: str = "rule"
    score: float = 1.0
    #: False for a number in an ID/card shape next to its keyword whose checksum or date fails: redacted anyway
    #: (fail safe: a mistyped ID is still somebody's ID)
    validated: bool = True


Span = tuple[int, int, str, float] | tuple[int, int, str, float, bool]  # (…, validated)
# full-width ASCII, and the dashes and spaces word processors put between digit groups (en and em dash, the
# non-breaking hyphen, the minus sign; no-break, thin and narrow no-break spaces): 138–0013–8000 went out unredacted
_FULLWIDTH = {**{cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}, 0x3000: 0x20,
              **dict.fromkeys((0x2010, 0x2011, 0x2012, 0x2013, 0x2014, 0x2212), 0x2D),
              **dict.fromkeys((0x00A0, 0x2007, 0x2009, 0x202F), 0x20)}
_L = r"(?<![0-9A-Za-z])"  # left boundary: no ASCII letter/digit before
_R = r"(?![0-9A-Za-z])"  # right boundary: no ASCII letter/digit after

# --- validators --------------------------------------------------------------------------------------------

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def id_card_valid(value: str) -> bool:
    """China resident ID (18 chars): GB 11643 check character and a real, past date of birth."""
    if not re.fullmatch(r"[1-9][0-9]{16}[0-9Xx]", value):
        return False
    total = sum(int(digit) * weight for digit, weight in zip(value[:17], _ID_WEIGHTS, strict=True))
    if _ID_CHECK[total % 11] != value[17].upper():
        return False
    try:
        born = date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return date(1900, 1, 1) <= born <= date.today()


def luhn_valid(digits: str) -> bool:
    """Luhn (mod 10) checksum of a digit string."""
    if not digits.isdigit() or not digits.isascii():
        return False
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def shannon_entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    if not value:
        return 0.0
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


# --- identity numbers --------------------------------------------------------------------------------------

_ID_CARD = re.compile(_L + r"[1-9][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}"
                      r"[0-9Xx]" + _R)
_SSN = re.compile(r"(?<![0-9A-Za-z-])(?!000|666|9)[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}(?![0-9A-Za-z]|-[0-9])")
_PASSPORT_CN = re.compile(_L + r"(?:[EG][0-9]{8}|E[A-HJ-NP-Z][0-9]{7})" + _R)
# a passport, and the mainland's travel permits by their own names (港澳通行证 C/W-numbers, 台湾通行证,
# 回乡证 H/M-numbers, 台胞证 — a bare 通行证 is any pass: a parking permit, a game's season pass): their numbers
# have no checksum and look like order codes, so only after those names
_PASSPORT_KEYWORD = re.compile(r"(?i)passport|护照|港澳通行证|台湾通行证|回乡证|台胞证|home[- ]return permit")
#: an eight-digit date (20251231) after a passport word is its validity, not its number
_DATE_8 = re.compile(r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])")
# a US SSN without its dashes (nine digits, or 3-2-4 spaced) only after an SSN keyword; never-issued areas and
# all-zero groups are not SSNs
_SSN_KEYWORD = re.compile(r"(?i)\bSSN\b|social security (?:number|no\b\.?)|社会安全号")
_SSN_NEAR = re.compile(r"(?<![0-9A-Za-z-])(?!000|666|9)[0-9]{3}( ?)(?!00)[0-9]{2}\1(?!0000)[0-9]{4}(?![0-9A-Za-z])")
_PASSPORT_NEAR = re.compile(_L + r"[A-Z]{0,2}[0-9]{6,9}" + _R)


def _id_cards(text: str) -> Iterator[Span]:
    for match in _ID_CARD.finditer(text):
        if id_card_valid(match.group()):
            yield match.start(), match.end(), "ID_CARD", 1.0
    for match in _SSN.finditer(text):
        yield match.start(), match.end(), "ID_CARD", 0.9
    for word in _SSN_KEYWORD.finditer(text):
        near = _SSN_NEAR.search(text, word.end())
        if near and near.start() - word.end() <= 24:
            yield near.start(), near.end(), "ID_CARD", 0.9


def _passports(text: str) -> Iterator[Span]:
    for match in _PASSPORT_CN.finditer(text):
        yield match.start(), match.end(), "PASSPORT", 0.9
    for word in _PASSPORT_KEYWORD.finditer(text):
        found = _PASSPORT_NEAR.search(text, word.end())
        if found and found.start() - word.end() <= 32 and 7 <= len(found.group()) <= 9 \
                and not _DATE_8.fullmatch(found.group()):
            yield found.start(), found.end(), "PASSPORT", 1.0


# --- phones ------------------------------------------------------------------------------------------------

_CN_PREFIX = r"(?:(?:\+|00)86[ -]?|\(\+?86\)[ -]?|86[ -]?)?"
_CN_MOBILE = re.compile(r"(?<![0-9A-Za-z+])" + _CN_PREFIX + r"(?:1[3-9][0-9]{9}|1[3-9][0-9]([ .-])[0-9]{4}\1[0-9]{4})"
                        + _R)
_AREA = r"(?:010|02[0-9]|0[3-9][0-9]{2})"
_CN_LANDLINE = re.compile(
    r"(?<![0-9A-Za-z+])(?:(?:\+|00)86[ -]?\(?(?:10|2[0-9]|[3-9][0-9]{2})\)?[ -]?|\(" + _AREA + r"\)[ -]?|"
    + _AREA + r"[ -])[2-9][0-9]{2,3}[ -]?[0-9]{4}(?:(?:-|转|ext\.?|x)[0-9]{1,5})?" + _R)
_EXTENSION = r"(?:\s?(?:x|ext\.?|#)\s?[0-9]{1,6})?"
_NANP = re.compile(r"(?<![0-9A-Za-z+])(?:(?:\+1|001|1)[ .-]?)?(?:\([2-9][0-9]{2}\)[ ]?|[2-9][0-9]{2}[ .-])"
                   r"[2-9][0-9]{2}[ .-][0-9]{4}" + _EXTENSION + _R)
_NANP_COMPACT = re.compile(_L + r"[2-9][0-9]{2}[2-9][0-9]{6}" + _R)
#: a mainland landline written without a separator (01062345678, 075586013388) or after a bare 86 (86-10-62345678):
#: only after a phone word in the same sentence, as the bare NANP number (a sweep found both leaking)
_CN_LANDLINE_COMPACT = re.compile(r"(?<![0-9A-Za-z+])(?:" + _AREA + r"[2-9][0-9]{6,7}"
                                  r"|86[ -]?(?:10|2[0-9]|[3-9][0-9]{2})[ -][2-9][0-9]{2,3}[ -]?[0-9]{4})" + _R)
_INTERNATIONAL = re.compile(r"(?<![0-9A-Za-z+])\+(?>[1-9][0-9]{0,3}(?:[ -]?\(0\))?(?:[ -]?\(?[0-9]{1,5}\)?){1,5})"
                            + _EXTENSION + _R)
_SENTENCE_END = re.compile(r"[。！？!?\n]|(?<!Mr)(?<!Mrs)(?<!Ms)(?<!Dr)(?<!Prof)(?<!St)(?<![A-Z])\.\s")  # not "Mrs. X"
_PHONE_WORDS = re.compile(r"(?i)(?:phone|tel|call|mobile|cell|fax|contact|reach|sms|text|whatsapp"
                          r"|电话|手机|座机|联系|致电|拨打)")


def _phones(text: str) -> Iterator[Span]:
    for pattern in (_CN_MOBILE, _CN_LANDLINE, _NANP):
        for match in pattern.finditer(text):
            yield match.start(), match.end(), "PHONE", 1.0
    for match in _INTERNATIONAL.finditer(text):
        digits = sum(char.isdigit() for char in match.group().split("x")[0].split("ext")[0])
        if 8 <= digits <= 15:
            yield match.start(), match.end(), "PHONE", 0.9
    for pattern in (_NANP_COMPACT, _CN_LANDLINE_COMPACT):  # bare digits: only after a phone word in the sentence
        for match in pattern.finditer(text):
            before = _SENTENCE_END.split(text[max(0, match.start() - 100):match.start()])[-1]
            if _PHONE_WORDS.search(before):
                yield match.start(), match.end(), "PHONE", 0.8


# --- cards, e-mail, URLs, IPs ------------------------------------------------------------------------------

_CARD = re.compile(_L + r"(?:[0-9]{13,19}|[0-9]{4}([ -])[0-9]{4}\1[0-9]{4}\1[0-9]{1,7}(?:\1[0-9]{1,3})?"
                   r"|[0-9]{4}([ -])[0-9]{6}\2[0-9]{4,5})" + _R)
_CARD_PREFIX = re.compile(r"[3-6]|2[2-7]|1800|2131|81|95")
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9-])")
_URL = re.compile(r"(?i)(?:(?<![A-Za-z])https?://|(?<![A-Za-z0-9.@/-])www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_IPV4 = re.compile(r"(?<![0-9A-Za-z.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9A-Za-z]|\.[0-9])")
_VERSION_BEFORE = re.compile(r"(?i)(?:\bv|\bver\.?|version|release|build|版本号?)\s*[:=]?\s*$")
_IPV6 = re.compile(r"(?<![0-9A-Za-z:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:[0-9]{1,3}\.){3}[0-9]{1,3})?"
                   r"(?:%[0-9A-Za-z]+)?(?![0-9A-Za-z:]|\.[0-9])")


def _cards(text: str) -> Iterator[Span]:
    for match in _CARD.finditer(text):
        digits = re.sub(r"[^0-9]", "", match.group())
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and luhn_valid(digits):
            yield match.start(), match.end(), "BANK_CARD", 1.0


#: internationalised addresses (RFC 6531/IDNA: josé@exämple.com, 张三@例子.中国); ASCII ones are matched above
_EMAIL_UNICODE = re.compile(r"(?<![\w.%+-])[^\W_][\w.%+-]*@[^\W_](?:[\w-]*[^\W_])?(?:\.[^\W_](?:[\w-]*[^\W_])?)*"
                            r"\.[^\W\d_]{2,24}(?![\w-])")


def _emails(text: str) -> Iterator[Span]:
    ends = set()
    for match in _EMAIL.finditer(text):
        ends.add(match.end())
        yield match.start(), match.end(), "EMAIL", 1.0
    for match in _EMAIL_UNICODE.finditer(text):  # not where an ASCII address ends ("邮箱a@b.com" is "a@b.com")
        if not match.group().isascii() and match.end() not in ends:
            yield match.start(), match.end(), "EMAIL", 0.95


def _trim_trailing(value: str, punctuation: str = ".,;:!?'\"([{") -> str:
    """Drop trailing punctuation and closing brackets that have no opening partner in the value."""
    while value:
        last = value[-1]
        if last in punctuation or (last in ")]" and value.count(last) > value.count("(" if last == ")" else "[")):
            value = value[:-1]
        else:
            break
    return value


def _urls(text: str) -> Iterator[Span]:
    for match in _URL.finditer(text):
        value = _trim_trailing(match.group())
        if re.search(r"(?://|\.)[A-Za-z0-9\[]", value):
            yield match.start(), match.start() + len(value), "URL", 1.0


def _ips(text: str) -> Iterator[Span]:
    for match in _IPV4.finditer(text):
        if _VERSION_BEFORE.search(text, max(0, match.start() - 12), match.start()):
            continue
        try:
            ipaddress.IPv4Address(match.group())
        except ValueError:
            continue
        yield match.start(), match.end(), "IP_ADDRESS", 1.0
    for match in _IPV6.finditer(text):
        value = match.group()
        if value.endswith(":") and not value.endswith("::"):
            value = value[:-1]  # "fe80::1:" — a colon that ends the sentence, not the address
        groups = [group for group in re.split(r"[:.]", value.split("%")[0]) if group]
        if len(groups) < 3 and max(map(len, groups), default=0) < 4:
            continue  # "1::2", "a[10::20]" and the like are too thin to call an address
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            continue
        yield match.start(), match.start() + len(value), "IP_ADDRESS", 1.0


# --- secrets -----------------------------------------------------------------------------------------------

_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}"
    r"|xox[baprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{10,}|glpat-[A-Za-z0-9_-]{20})(?![A-Za-z0-9_-])")
_SK = re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])")
_PEM = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY"
                  r"(?: BLOCK)?-----")
_PASSWORD_KEYS = r"passw(?:or)?d|passwd|pwd|pass|passphrase"
_SECRET_KEYS = (r"api[_-]?key|apikey|secret(?:[_-]?key)?|access[_-]?key(?:[_-]?id)?|private[_-]?key|client[_-]?secret"
                r"|(?:auth|access|refresh|session|bearer|api)[_-]?token|token|credentials?")
_ZH_KEYS = r"密码|口令|密钥|秘钥|令牌"
_VALUE = r"""(?:(?P<q>["'])(?P<quoted>[^"'\n]{1,200}?)(?P=q)|(?P<value>(?:(?!["'`<>,;])[!-~])+))"""
_ASSIGNMENT = re.compile(r"(?i)(?:(?<![A-Za-z0-9])(?P<key>" + _PASSWORD_KEYS + "|"
                         + _SECRET_KEYS + r")|(?P<zh>" + _ZH_KEYS + r"))[\"']?\s*(?:=>|[:=])\s*" + _VALUE)
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])bearer\s+(?P<value>[A-Za-z0-9._~+/-]{16,}=*)")
_PLACEHOLDER = re.compile(r"(?i)\*+|x+|\.+|<.*>|\$\{[A-Za-z0-9_]+\}|(?-i:\$[A-Z_][A-Z0-9_]*)|%\([A-Za-z_]+\)[sdr]"
                          r"|\{\{.*\}\}|none|null|nil|true|false|undefined|redacted|your[_-].*|example|placeholder"
                          r"|\[[A-Z_]+(?:_[0-9]+|:[0-9a-f]{8})?\]")

_CODE_VALUE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+.*"  # a.b.c
                         r"|(?:[a-z_]{3,}[0-9]*|[A-Z][a-z]{2,}|[a-z]+(?:[A-Z][a-z]+)+)[(\[].*"  # call(, x[
                         r"|[a-z]+(?:_[a-z0-9]+)+")  # snake_case_name


def _secret_value_ok(value: str, password: bool, quoted: bool) -> bool:
    if _PLACEHOLDER.fullmatch(value) or re.fullmatch(r"[0-9]{1,9}", value):
        return False
    if not quoted and (keyword.iskeyword(value) or _CODE_VALUE.fullmatch(value)):
        return False
    if password:
        return len(value) >= 6 and shannon_entropy(value) >= 2.0
    classes = sum(bool(re.search(pattern, value)) for pattern in ("[a-z]", "[A-Z]", "[0-9]", "[^A-Za-z0-9]"))
    entropy = shannon_entropy(value)
    return len(value) >= 8 and (entropy >= 3.0 or (classes >= 3 and entropy >= 2.5))


def _random_looking(value: str) -> bool:
    """Digits or mixed case, and at least 3.5 bits per character ("sk-learn-tutorial-notes" is not a key)."""
    mixed = re.search(r"[0-9]", value) or (re.search(r"[a-z]", value) and re.search(r"[A-Z]", value))
    return bool(mixed) and shannon_entropy(value) >= 3.5


def _secrets(text: str) -> Iterator[Span]:
    for pattern in (_TOKENS, _PEM):
        for match in pattern.finditer(text):
            yield match.start(), match.end(), "SECRET", 1.0
    for match in _SK.finditer(text):
        if _random_looking(match.group()):
            yield match.start(), match.end(), "SECRET", 1.0
    for match in _ASSIGNMENT.finditer(text):
        group = "quoted" if match.group("quoted") else "value"  # a quoted value ends at its quote: no trimming
        value = match.group(group) if group == "quoted" else _trim_trailing(match.group(group), ".,;:")
        key = match.group("key") or match.group("zh")
        password = re.fullmatch(_PASSWORD_KEYS + "|密码|口令", key, re.IGNORECASE) is not None
        if _secret_value_ok(value, password, group == "quoted"):
            yield match.start(group), match.start(group) + len(value), "SECRET", 0.9
    for match in _BEARER.finditer(text):
        yield match.start("value"), match.end("value"), "SECRET", 1.0


_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")
_AWS_WORDS = re.compile(r"(?i)aws|secret[ _-]?access[ _-]?key")


def _aws_secrets(text: str) -> Iterator[Span]:
    """A 40-character AWS secret access key near its access key id or an AWS keyword (within 200 characters)."""
    for match in _AWS_SECRET.finditer(text):
        around = text[max(0, match.start() - 200):match.end() + 200]
        value = match.group()
        if (_AWS_ID.search(around) or _AWS_WORDS.search(around)) and re.search(r"[0-9/+]", value) \
                and re.search(r"[a-z]", value) and re.search(r"[A-Z]", value):
            yield match.start(), match.end(), "SECRET", 0.9


# --- near misses: fail safe ----------------------------------------------------------------------------------
# A number in an ID or card shape right after its keyword is redacted even when its checksum or date fails
# (``validated=False`` on the entity): a mistyped ID, a test card, an old 15-digit ID are still somebody's.

_ID_WORDS = (r"(?:身份证(?:号码?)?|公民身份号码|证件号(?:码)?|ID[ _-]?card(?:[ _-]?(?:no\.?|number))?"
             r"|ID[ _-]?(?:no\.?|number)|identity card(?:[ _-]?(?:no\.?|number))?)")
_CARD_WORDS = (r"(?:(?:银行|信用|储蓄|借记)?卡号|银行卡|信用卡|账号|帐号|(?<!ID[ _-])card[ _-]?(?:no\.?|number|#)"
               r"|account[ _-]?(?:no\.?|number))")
_NEAR = r"[\s:：#是为号码=(（\[]{0,6}"
_ID_NEAR = re.compile(r"(?i)" + _ID_WORDS + _NEAR + r"(?P<value>[0-9](?:[ -]?[0-9]){13,16}[ -]?[0-9Xx])" + _R)
_CARD_NEAR = re.compile(r"(?i)" + _CARD_WORDS + _NEAR + r"(?P<value>[0-9](?:[ -]?[0-9]){11,22})" + _R)


def _near_misses(text: str) -> Iterator[Span]:
    for pattern, kind in ((_ID_NEAR, "ID_CARD"), (_CARD_NEAR, "BANK_CARD")):
        for match in pattern.finditer(text):
            digits = re.sub(r"[ -]", "", match.group("value"))
            valid = id_card_valid(digits) if kind == "ID_CARD" else luhn_valid(digits)
            # after 身份证 / ID card, the keyword says what the number is: a mistyped ID that happens to pass Luhn
            # stays an ID (typed BANK_CARD, `types=["ID_CARD"]` left it in the clear)
            id_shaped = kind == "ID_CARD" and len(digits) in (15, 18)  # not a 16-digit card after "ID number"
            yield match.start("value"), match.end("value"), kind, 1.0 if valid or id_shaped else 0.6, valid


# --- entry point -------------------------------------------------------------------------------------------

_DETECTORS: tuple[Callable[[str], Iterator[Span]], ...] = (
    _secrets, _aws_secrets, _id_cards, _cards, _passports, _emails, _urls, _ips, _phones, _near_misses,
)


def resolve_overlaps(entities: Iterable[Entity]) -> list[Entity]:
    """Keep non-overlapping entities: longer first, then higher score, then the more specific type."""
    ranked = sorted(entities, key=lambda e: (-(e.end - e.start), -e.score, _PRIORITY.get(e.type, 99), e.start))
    kept: list[Entity] = []  # sorted by start; being disjoint, also by end
    for entity in ranked:
        index = bisect.bisect_left(kept, entity.start, key=lambda e: e.start)
        if (index == 0 or kept[index - 1].end <= entity.start) and (index == len(kept) or
                                                                  kept[index].start >= entity.end):
            kept.insert(index, entity)
    return kept


def detect_rules(text: str) -> list[Entity]:
    """All rule-detected PII entities in ``text``, non-overlapping, in text order."""
    normal = text.translate(_FULLWIDTH)
    found = [Entity(span[0], span[1], span[2], text[span[0]:span[1]], "rule", span[3],
                    bool(span[4]) if len(span) > 4 else True)
             for detector in _DETECTORS for span in detector(normal) if span[1] > span[0]]
    return resolve_overlaps(found)
