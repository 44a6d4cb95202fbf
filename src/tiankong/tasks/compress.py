"""compress / summarize: token-aware map-reduce over documents longer than the effective context.

1. One ``/tokenize`` call (with pieces) gives the model's own token boundaries; the text is cut at sentence
   ends into chunks of at most ``chunk_tokens``.
2. Map: every chunk's key points (schema-constrained JSON) — one batch, so all engine slots work at once.
3. Reduce: while the points exceed ``budget_tokens``, the points are grouped and condensed again (at most
   ``MAX_ROUNDS``); a final trim keeps the first points that fit, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Call, Flow
from ..structured.prompts import language
from .classify import require_text
from .generate import json_task, string_list
from .prompts import KEY_POINTS, KEY_POINTS_Q, SUMMARIZE

MAX_ROUNDS = 3
_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|(?<=[.:])\s+|\n+")


@dataclass
class Compression:
    points: list[str]
    text: str
    input_tokens: int
    output_tokens: int
    chunks: int
    rounds: int
    trimmed: bool = False

    @property
    def ratio(self) -> float:
        return self.output_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"points": self.points, "text": self.text, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "ratio": round(self.ratio, 4), "chunks": self.chunks,
                "rounds": self.rounds, "trimmed": self.trimmed}


@dataclass
class Summary:
    summary: str
    input_tokens: int
    output_tokens: int
    chunks: int

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "chunks": self.chunks}


def count_tokens(text: str) -> Flow[int]:
    (answer,) = yield [Call("POST", "/tokenize", {"content": text, "add_special": False})]
    if isinstance(answer, Exception):
        raise answer
    return len(answer["tokens"])


def chunk_text(text: str, chunk_tokens: int) -> Flow[tuple[list[str], int]]:
    """Chunks of whole sentences of at most ``chunk_tokens`` tokens (a longer sentence is its own chunk)."""
    (answer,) = yield [Call("POST", "/tokenize", {"content": text, "add_special": False, "with_pieces": True})]
    if isinstance(answer, Exception):
        raise answer
    starts = _token_char_starts(text, answer["tokens"])
    chunks, current, current_tokens = [], "", 0
    for start, end in _sentences(text):
        tokens = sum(1 for s in starts if start <= s < end)
        if current and current_tokens + tokens > chunk_tokens:
            chunks.append(current)
            current, current_tokens = "", 0
        current += text[start:end]
        current_tokens += tokens
    if current.strip():
        chunks.append(current)
    return chunks, len(starts)


def _token_char_starts(text: str, pieces: list[Any]) -> list[int]:
    """Character offset where each token starts (pieces are strings or, for partial UTF-8, byte lists)."""
    encoded = text.encode("utf-8")
    char_at = [0] * (len(encoded) + 1)
    position = 0
    for index, char in enumerate(text):
        size = len(char.encode("utf-8"))
        for b in range(size):
            char_at[position + b] = index
        position += size
    char_at[len(encoded)] = len(text)
    starts, offset = [], 0
    for token in pieces:
        piece = token.get("piece") if isinstance(token, dict) else None
        size = len(piece.encode("utf-8")) if isinstance(piece, str) else len(piece or [])
        starts.append(char_at[min(offset, len(encoded))])
        offset += size
    return starts


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > start:
            spans.append((start, match.end()))
            start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


def _points_flow(chunk: str, question: str | None, max_points: int, model: str | None) -> Flow[list[str]]:
    lang = language(chunk)
    system = KEY_POINTS_Q[lang].format(question=question) if question else KEY_POINTS[lang]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": chunk}]
    schema = {"type": "object", "properties": {"points": string_list(max_points, 200)}, "required": ["points"]}
    result = yield from json_task(messages, schema, model)
    return [p.strip() for p in result.data["points"] if p.strip()]


def compress_flow(text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024, question: str | None = None,
                  model: str | None = None) -> Flow[Compression]:
    require_text(text)
    if budget_tokens < 16 or chunk_tokens < 64:
        raise ConfigError("budget_tokens must be ≥ 16 and chunk_tokens ≥ 64")
    chunks, input_tokens = yield from chunk_text(text, chunk_tokens)
    per_chunk = max(2, min(12, chunk_tokens // 100))
    points_lists = yield from gather([_points_flow(c, question, per_chunk, model) for c in chunks])
    points = [p for plist in points_lists for p in plist]
    rounds, joined = 1, "\n".join(points)
    output_tokens = yield from count_tokens(joined) if joined else _zero()
    while output_tokens > budget_tokens and rounds < MAX_ROUNDS and len(points) > 2:
        groups = _group(points, chunk_tokens, output_tokens)
        merged = yield from gather([_points_flow("\n".join(g), question, max(2, len(g) // 2), model) for g in groups])
        points, rounds = [p for plist in merged for p in plist], rounds + 1
        joined = "\n".join(points)
        output_tokens = yield from count_tokens(joined) if joined else _zero()
    trimmed = False
    while output_tokens > budget_tokens and len(points) > 1:
        points, trimmed = points[:-1], True
        joined = "\n".join(points)
        output_tokens = yield from count_tokens(joined)
    return Compression(points, joined, input_tokens, output_tokens, len(chunks), rounds, trimmed)


def _zero() -> Flow[int]:
    return 0
    yield []  # pragma: no cover


def _group(points: list[str], chunk_tokens: int, total_tokens: int) -> list[list[str]]:
    per_point = max(1, total_tokens // len(points))
    size = max(2, chunk_tokens // per_point)
    return [points[i:i + size] for i in range(0, len(points), size)]


def summarize_flow(text: str, *, words: int = 80, chunk_tokens: int = 1024,
                   model: str | None = None) -> Flow[Summary]:
    require_text(text)
    if not 5 <= words <= 1000:
        raise ConfigError("words must be between 5 and 1000")
    chunks, input_tokens = yield from chunk_text(text, chunk_tokens)
    source = text
    if len(chunks) > 1:
        compressed = yield from compress_flow(text, budget_tokens=chunk_tokens // 2, chunk_tokens=chunk_tokens,
                                              model=model)
        source = compressed.text
    lang = language(text)
    limit = words * (2 if lang == "zh" else 8)
    schema = {"type": "object", "properties": {"summary": {"type": "string", "minLength": 1, "maxLength": limit}},
              "required": ["summary"]}
    messages = [{"role": "system", "content": SUMMARIZE[lang].format(words=words)}, {"role": "user", "content": source}]
    result = yield from json_task(messages, schema, model)
    summary = result.data["summary"].strip()
    output_tokens = yield from count_tokens(summary)
    return Summary(summary, input_tokens, output_tokens, len(chunks))
