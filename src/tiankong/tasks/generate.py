"""Schema-constrained helpers shared by the generative tasks (rewrite, summarize, tag, compress, redact)."""

from __future__ import annotations

import re
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


#: a run of this many words (Latin script) or characters (CJK) met a second time is a loop, not prose: the DRY
#: sampler ends token-level loops, not a clause the model writes again and again ("If you were billed twice, you
#: would typically receive a refund of …" three times in a 600-character HyDE passage of the default model)
LOOP_WORDS = 8
LOOP_CHARS = 16
_CJK_CHARS = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_UNIT = re.compile(rf"[{_CJK_CHARS}]|[^\s{_CJK_CHARS}]+")  # a CJK character, or a run of anything else but spaces
_IS_CJK = re.compile(rf"[{_CJK_CHARS}]")
#: a sentence end (compress ends a cut summary at one too)
SENTENCE_DONE = re.compile(r"[.!?](?=\s|$)|[。！？]")


def cut_loop(text: str) -> tuple[str, bool]:
    """``text`` up to where it starts repeating itself, and whether it did: the start of the first run of
    ``LOOP_WORDS`` units already written earlier — a unit a word, or a Chinese character (``LOOP_CHARS`` of them
    when most units are; "(北京)" in an English passage left it read in words)."""
    found = list(_UNIT.finditer(text))
    starts, units = [m.start() for m in found], [m.group().lower() for m in found]
    cjk = sum(1 for u in units if _IS_CJK.match(u))
    n = LOOP_CHARS if cjk * 2 > len(units) else LOOP_WORDS
    seen: set[tuple[str, ...]] = set()
    for i in range(len(units) - n + 1):
        gram = tuple(units[i:i + n])
        if gram in seen:  # (a loop of Chinese sentences repeats from the full stop before it: that one is kept)
            keep = starts[i] + (1 if cjk and units[i] in "。！？!?." else 0)
            return text[:keep].rstrip(), True
        seen.add(gram)
    return text, False


def end_cleanly(text: str) -> str:
    """A text that was stopped (a length limit, a loop cut off) ending at its last sentence end when that is past
    a third of it, else at a whole word with "…" — not mid-word or after a dangling comma."""
    ends = [m.end() for m in SENTENCE_DONE.finditer(text)]
    if ends and ends[-1] >= len(text) // 3:
        return text[:ends[-1]]
    return text.rstrip(" ,;:，；：、") + "…"


def unique(items: list[str]) -> list[str]:
    """``items`` each once (case aside), in order."""
    seen: set[str] = set()
    return [x for x in items if not (x.lower() in seen or seen.add(x.lower()))]  # type: ignore[func-returns-value]
