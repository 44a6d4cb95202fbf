"""redact: PII detection and redaction in Chinese and English.

Deterministic detectors with validators (``pii_rules``) find what has an exact form — ID cards with their
checksum, phones, bank cards with Luhn, e-mail, IPs, URLs, secrets, passports. The model finds what has not —
person names, addresses, organisations: it lists them (schema-constrained JSON) and only strings that occur
verbatim in the text are kept, so the model cannot invent spans. Long texts go to the model in chunks, in
parallel. Rule entities win overlaps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from .classify import require_text
from .generate import json_task, string_list
from .pii_rules import TYPES, Entity, detect_rules
from .prompts import NAMED, task_messages
from .redaction import redact_text

STYLES = ("mask", "placeholder", "hash")
MODEL_TYPES = {"people": "PERSON", "addresses": "ADDRESS", "organizations": "ORG"}
MODEL_CHUNK_CHARS = 1200
KNOWN_TYPES = (*TYPES, *MODEL_TYPES.values())
_SPLIT = re.compile(r"(?<=[。！？!?\n])|(?<=\.)\s")


@dataclass
class Redaction:
    text: str
    entities: list[Entity]
    mapping: dict[str, str] = field(default_factory=dict)
    style: str = "placeholder"

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "style": self.style, "mapping": self.mapping,
                "entities": [{"start": e.start, "end": e.end, "type": e.type, "text": e.text, "source": e.source,
                              "score": e.score, "validated": e.validated} for e in self.entities]}


def redact_flow(text: str, *, style: str = "placeholder", use_model: bool = True, types: list[str] | None = None,
                salt: str = "", model: str | None = None) -> Flow[Redaction]:
    entities = _check(text, style, types)
    if use_model:
        found = yield from gather([_named_flow(chunk, model) for chunk in _chunks(text)])
        entities = merge(entities, locate(text, [item for items in found for item in items]))
    return _finish(text, entities, style, types, salt)


def redact_rules(text: str, *, style: str = "placeholder", types: list[str] | None = None,
                 salt: str = "") -> Redaction:
    """Rules only: no engine needed (no person names, addresses or organisations)."""
    return _finish(text, _check(text, style, types), style, types, salt)


def check_types(types: list[str] | None) -> None:
    """Every requested entity type is one tiankong detects: an unknown one would silently redact nothing."""
    unknown = [t for t in types or [] if not isinstance(t, str) or t.upper() not in KNOWN_TYPES]
    if unknown:
        raise ConfigError(f"unknown entity type(s) {', '.join(map(repr, unknown))}",
                          hint=f"use {', '.join(KNOWN_TYPES)}")


def _check(text: str, style: str, types: list[str] | None) -> list[Entity]:
    require_text(text)
    if style not in STYLES:
        raise ConfigError(f"unknown redaction style {style!r}", hint=f"use one of {', '.join(STYLES)}")
    check_types(types)
    return detect_rules(text)


def _finish(text: str, entities: list[Entity], style: str, types: list[str] | None, salt: str) -> Redaction:
    if types:
        wanted = {t.upper() for t in types}
        entities = [e for e in entities if e.type in wanted]
    redacted, mapping = redact_text(text, entities, style, salt=salt)
    return Redaction(redacted, entities, mapping, style)


def _chunks(text: str) -> list[str]:
    chunks, current = [], ""
    for piece in _SPLIT.split(text):
        if current and len(current) + len(piece) > MODEL_CHUNK_CHARS:
            chunks.append(current)
            current = ""
        current += piece
    return [c for c in [*chunks, current] if c.strip()]


def _named_flow(chunk: str, model: str | None) -> Flow[list[tuple[str, str]]]:
    schema = {"type": "object", "properties": {key: string_list(6, 60) for key in MODEL_TYPES},
              "required": list(MODEL_TYPES)}
    result = yield from json_task(task_messages(NAMED, chunk), schema, model)
    return [(MODEL_TYPES[key], value.strip()) for key in MODEL_TYPES for value in result.data.get(key, [])]


def locate(text: str, items: list[tuple[str, str]]) -> list[Entity]:
    """Every verbatim occurrence of each model-listed string (too-short or absent strings are dropped)."""
    spans: list[Entity] = []
    for kind, value in items:
        if len(value) < 2 or not any(ch.isalpha() for ch in value):
            continue
        for match in re.finditer(re.escape(value), text):
            spans.append(Entity(match.start(), match.end(), kind, value, source="model", score=0.8))
    return spans


def merge(rules: list[Entity], model: list[Entity]) -> list[Entity]:
    """Rule entities first; a model entity overlapping a kept entity is dropped (longer model spans win ties)."""
    kept = list(rules)
    for entity in sorted(model, key=lambda e: (-(e.end - e.start), e.start)):
        if all(entity.end <= k.start or entity.start >= k.end for k in kept):
            kept.append(entity)
    return sorted(kept, key=lambda e: e.start)
