"""One side's decision on one record (the cascade's sides and its extract task both make them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """One side's decision on one record: the label it chose and its probability."""

    label: str
    confidence: float
