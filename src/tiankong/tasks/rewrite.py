"""rewrite: retrieval-friendly query rewrites and HyDE (a short hypothetical answer passage)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow, Structured
from .classify import require_text
from .generate import cut_loop, end_cleanly, json_task, string_list, unique
from .prompts import HYDE, REWRITE, task_messages

MODES = ("rewrite", "hyde", "both")
PASSAGE_CHARS = 600


@dataclass
class Rewrite:
    query: str
    queries: list[str] = field(default_factory=list)
    hypothetical: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "queries": self.queries, "hypothetical": self.hypothetical}


def rewrite_flow(query: str, *, mode: str = "rewrite", n: int = 3, model: str | None = None) -> Flow[Rewrite]:
    require_text(query, "query")
    if mode not in MODES:
        raise ConfigError(f"unknown rewrite mode {mode!r}", hint=f"use one of {', '.join(MODES)}")
    if not 1 <= n <= 8:
        raise ConfigError("n must be between 1 and 8")
    flows = []
    if mode in ("rewrite", "both"):
        schema = {"type": "object", "properties": {"queries": string_list(n, 120, 1)}, "required": ["queries"]}
        flows.append(json_task(task_messages(REWRITE, query, n=n), schema, model))
    if mode in ("hyde", "both"):
        schema = {"type": "object", "properties": {"passage": {"type": "string", "minLength": 1,
                                                           "maxLength": PASSAGE_CHARS}},
                  "required": ["passage"]}
        flows.append(json_task(task_messages(HYDE, query), schema, model))
    results: list[Structured[Any]] = yield from gather(flows)
    out = Rewrite(query)
    for result in results:
        if "queries" in result.data:
            out.queries = unique([q.strip() for q in result.data["queries"] if q.strip()])
        else:
            out.hypothetical = _passage(result.data["passage"])
    return out


def _passage(raw: str) -> str:
    """The HyDE passage without the loop a small model may fall into (a clause written again until the length
    limit) and ending at a sentence end: the limit stopped it mid-sentence ("… and decide,")."""
    text, looped = cut_loop(raw.strip())
    if not looped and len(raw) >= PASSAGE_CHARS and " " in text:
        text = text[:text.rfind(" ")]  # stopped by the limit: its last word may be cut short
    return end_cleanly(text) if looped or len(raw) >= PASSAGE_CHARS else text

