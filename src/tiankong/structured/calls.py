"""The two words of every sans-I/O flow: a ``Call`` (one HTTP request to the engine) and ``Flow`` (a generator that
yields batches of calls, receives their answers, and returns its result). Here, below ``flow.py``, so that the
flow helpers ``flow.py`` uses (``fastforward.py``, ``slots.py``) can name them without importing it; ``flow.py``
re-exports both (``from tiankong.structured.flow import Call, Flow`` keeps working).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any] | None = None
    #: a retrieval part answers this call (an installed embedding model's own engine, ``engine/parts.py``)
    part: str | None = None


Flow = Generator[list[Call], list[Any], T]
