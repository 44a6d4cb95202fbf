"""What every normaliser returns (``Resolved``) and the text clean-up they all start with."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resolved:
    value: Any
    rule: str


def clean(text: str) -> str:
    """NFKC (full-width digits and letters to ASCII) and whitespace runs to one space."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()
