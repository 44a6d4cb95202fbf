"""Apply detected entities to a text: mask, typed placeholders (reversible) or salted hashes.

* ``mask``        — every non-space character of an entity becomes ``*`` (length and layout kept); no mapping.
* ``placeholder`` — ``[PHONE_1]``, ``[PHONE_2]`` … numbered per type in order of appearance; the same value
  gets the same placeholder; ``mapping`` is placeholder → original, and ``restore`` puts the originals back.
* ``hash``        — ``[PHONE:1a2b3c4d]``: the first 8 hex digits of HMAC-SHA256(salt, value); stable across
  texts and runs for one salt; ``mapping`` is tag → original. A salt is required: unkeyed, a tag is a plain
  hash that anyone reverses by hashing every phone number (10¹⁰ guesses) — ``redact`` passes the
  installation's own secret when the caller gives none.

Entities may come from rules or a model: spans are checked, sorted, and overlaps dropped (longer span wins).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable

from .pii_rules import Entity, resolve_overlaps

__all__ = ["STYLES", "redact_text", "restore"]

STYLES = ("mask", "placeholder", "hash")


def redact_text(text: str, entities: Iterable[Entity], style: str = "placeholder", *,
                salt: str | bytes = "") -> tuple[str, dict[str, str]]:
    """The redacted text and the mapping replacement → original (empty for ``mask``)."""
    if style not in STYLES:
        raise ValueError(f"unknown redaction style {style!r}; use one of {', '.join(STYLES)}")
    if style == "hash" and not salt:
        raise ValueError("the hash style needs a salt (an unkeyed tag is reversed by hashing every candidate)")
    spans = resolve_overlaps(_checked(text, entities))
    names: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}
    pieces: list[str] = []
    cursor = 0
    for entity in spans:
        value = text[entity.start:entity.end]
        pieces.append(text[cursor:entity.start])
        if style == "mask":
            pieces.append(_mask(value))
        else:
            key = (entity.type, value)
            if key not in names:
                names[key] = (_placeholder(text, entity.type, counts) if style == "placeholder"
                              else _hash_tag(entity.type, value, salt))
            pieces.append(names[key])
        cursor = entity.end
    pieces.append(text[cursor:])
    return "".join(pieces), {name: value for (_, value), name in names.items()}


def restore(text: str, mapping: dict[str, str]) -> str:
    """Put the originals back in place of the placeholders (or hash tags) of ``mapping``."""
    if not mapping:
        return text
    pattern = re.compile("|".join(re.escape(name) for name in sorted(mapping, key=len, reverse=True)))
    return pattern.sub(lambda match: mapping[match.group()], text)


def _checked(text: str, entities: Iterable[Entity]) -> list[Entity]:
    found = list(entities)
    for entity in found:
        if not 0 <= entity.start < entity.end <= len(text):
            raise ValueError(f"entity span {entity.start}:{entity.end} is outside a text of {len(text)} characters")
    return found


def _mask(value: str) -> str:
    return "".join(char if char.isspace() else "*" for char in value)


def _placeholder(text: str, kind: str, counts: dict[str, int]) -> str:
    """The next free ``[TYPE_n]`` (one already in the text is skipped, so ``restore`` stays exact)."""
    while True:
        counts[kind] = counts.get(kind, 0) + 1
        name = f"[{kind}_{counts[kind]}]"
        if name not in text:
            return name


def _hash_tag(kind: str, value: str, salt: str | bytes) -> str:
    key = salt.encode() if isinstance(salt, str) else salt
    digest = hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
    return f"[{kind}:{digest[:8]}]"
