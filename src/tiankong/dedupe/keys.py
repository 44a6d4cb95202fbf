"""Exact duplicates: the key a text has after normalisation (Unicode NFKC, case, whitespace, punctuation).

Written by hand because it is four lines of the standard library (``unicodedata``, ``str.casefold``, a regex);
each step can be switched off, since what counts as "the same text" is the user's call (a log line's case may
matter, a ticket's does not).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

_SPACE = re.compile(r"\s+")
# every Unicode punctuation or symbol character (categories P* and S*), ASCII and CJK alike
_PUNCT = re.compile(r"[^\w\s]|_")


@dataclass(frozen=True)
class KeyOptions:
    """Which differences do not make two texts different."""

    nfkc: bool = True  # full-width and compatibility forms: "ＡＢＣ１" == "ABC1"
    case: bool = True  # "Refund" == "refund" (casefold, so "Straße" == "STRASSE")
    whitespace: bool = True  # runs of spaces, tabs and newlines become one space; ends trimmed
    punctuation: bool = True  # punctuation and symbols dropped: "refund!!" == "refund"

    def normalise(self, text: str) -> str:
        if self.nfkc:
            text = unicodedata.normalize("NFKC", text)
        if self.case:
            text = text.casefold()
        if self.punctuation:
            text = _PUNCT.sub(" " if self.whitespace else "", text)
        if self.whitespace:
            text = _SPACE.sub(" ", text).strip()
        return text

    def key(self, text: str) -> str:
        """The sha256 of the normalised text: equal keys are exact duplicates."""
        return digest(self.normalise(text))


def digest(normalised: str) -> str:
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()
