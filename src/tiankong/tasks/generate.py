"""Schema-constrained helpers shared by the generative tasks (rewrite, summarize, tag, compress, redact)."""

from __future__ import annotations

from typing import Any

from ..structured.constraints import schema_constraint
from ..structured.flow import Flow, Structured, constrained_flow

#: Free-text fields from a small model at temperature 0 fall into loops ("l-l-l-l…") until the length cap;
#: llama.cpp's DRY sampler penalises repeated sequences and ends them (measured: a 601-token loop → 43 tokens).
ANTI_LOOP: dict[str, Any] = {"extra": {"dry_multiplier": 0.8, "dry_allowed_length": 2}}


def json_task(messages: list[dict[str, Any]], schema: Any, model: str | None,
              max_tokens: int | None = None, free_text: bool = True) -> Flow[Structured[Any]]:
    """Validated JSON for ``schema`` (bounded, retried; see ``tiankong.structured``)."""
    constraint, _ = schema_constraint(schema)
    return constrained_flow(messages, constraint, model=model, max_tokens=max_tokens,
                            options=ANTI_LOOP if free_text else None)


def string_list(max_items: int, max_length: int, min_items: int = 0) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": max_length},
            "minItems": min_items, "maxItems": max_items}
