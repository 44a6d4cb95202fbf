"""Exact duplicates: the key a text has after normalisation (Unicode NFKC, case, whitespace, punctuation; a number's
minus sign, currency and mathematical symbols are kept: they are data).

Written by hand because it is a few lines of the standard library (``unicodedata``, ``str.casefold``, regexes);
each step can be switched off, since what counts as "the same text" is the user's call (a log line's case may
matter, a ticket's does not).
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import unicodedata
from dataclasses import dataclass

_SPACE = re.compile(r"\s+")
# an apostrophe inside a word: "don't" is "dont", not "don t"
_APOSTROPHE = re.compile(r"(?<=\w)['\u2019](?=\w)")
# a space beside a Chinese or Japanese character: "我想退款 订单号" (segmented) is "我想退款订单号" (not
# structured.prompts.CJK_SCRIPT: it holds Hangul too, and Korean writes a space between words)
_CJK = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}]) | (?=[{_CJK}])")
_HAS_CJK = re.compile(f"[{_CJK}]")


#: a minus sign that starts a number ("balance -500"; not the hyphen of "3-5" or "A-1"): kept, as U+2212 — dropped
#: with the punctuation, "balance -500" and "balance 500" were one exact group (a sweep of 2026-12-08)
_SIGN = re.compile(r"(?<![\w.])[-\u2212\u2013\ufe63](?=\d)")
#: symbols that are data, not spelling: currency signs (category Sc: "$500" is not "€500") and comparisons and
#: arithmetic ("cpu < 90" is not "cpu > 90"; the minus above) — not the other math symbols, which separate fields as
#: punctuation does ("status=ok" is "status: ok", "a | b" is "a - b", "great ~" is "great"), nor "+"
_KEPT = {"Sc"}
_KEPT_CHARS = "<>\u2264\u2265\u2260\u2248\u00b1\u00d7\u00f7\u2212"


@functools.cache
def _punctuation_table(to: str | None = " ") -> dict[int, str | None]:
    r"""Every Unicode punctuation or symbol character (categories P* and S*, but the ``_KEPT`` ones), ASCII and
    CJK alike, to a space. Not the regex ``[^\w\s]``: it also took the combining marks (category M: Thai,
    Devanagari and Arabic vowel signs, Vietnamese tones), so ป่า (forest) and ป้า (aunt) had one key. Built once
    (about 0.3 s), then ``str.translate`` (faster than that regex). ``to``: a space, or ``None`` (dropped) when
    whitespace counts."""
    return {c: to for c in range(sys.maxunicode + 1)
            if unicodedata.category(chr(c))[0] in "PS" and unicodedata.category(chr(c)) not in _KEPT
            and chr(c) not in _KEPT_CHARS}


@dataclass(frozen=True)
class KeyOptions:
    """Which differences do not make two texts different."""

    nfkc: bool = True  # full-width and compatibility forms: "ＡＢＣ１" == "ABC1"
    case: bool = True  # "Refund" == "refund" (casefold, so "Straße" == "STRASSE")
    whitespace: bool = True  # runs of spaces, tabs and newlines become one space; ends trimmed
    punctuation: bool = True  # punctuation and symbols dropped: "refund!!" == "refund" (not "-500" / "$" / "<")

    def normalise(self, text: str) -> str:
        if self.nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.case:
            text = text.casefold()
        if self.punctuation:
            if "'" in text or "\u2019" in text:  # (the checks first: each regex costs ~15 µs a 500-character text)
                text = _APOSTROPHE.sub("", text)
            if "-" in text or "\u2212" in text or "\u2013" in text or "\ufe63" in text:
                text = _SIGN.sub("\u2212", text)
            text = text.translate(_punctuation_table(" " if self.whitespace else None))
        if self.whitespace:
            text = _SPACE.sub(" ", text).strip()
            if _HAS_CJK.search(text):
                text = _CJK_SPACE.sub("", text)
        return text

    def key(self, text: str) -> str:
        """The sha256 of the normalised text: equal keys are exact duplicates."""
        return digest(self.normalise(text))


def digest(normalised: str) -> str:
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()
