"""compress / summarize: keep what matters of a long text within a token budget.

``mode="extractive"`` (default): the text's own sentences, scored against the question (BM25 and the embedding
part, fused by reciprocal rank) or, without one, against the document's centroid (``extractive.py``); the best
that fit ``budget_tokens`` are kept whole, in document order (``kept``: their indices, ``spans``: their offsets).
``mode="hybrid"``: the same selection at twice the budget, then the chat model shortens it into key points.
``mode="abstractive"``: token-aware map-reduce with the chat model alone:

1. One ``/tokenize`` call (with pieces) gives the model's own token boundaries; the text is cut at sentence
   ends into chunks of at most ``chunk_tokens``.
2. Map: every chunk's key points (schema-constrained JSON) — one batch, so all engine slots work at once.
3. Reduce: while the points exceed ``budget_tokens``, the points are grouped and condensed again (at most
   ``MAX_ROUNDS``); a final trim keeps the first points that fit, and says so.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, OutputError
from ..structured.combine import gather
from ..structured.flow import Call, Flow
from ..structured.part_flows import AUTO_PART
from ..structured.prompts import language
from .classify import require_text
from .extractive import choose, score_sentences
from .generate import SENTENCE_DONE, json_task, string_list
from .prompts import KEY_POINTS, KEY_POINTS_Q, SUMMARIZE

MAX_ROUNDS = 3
MODES = ("extractive", "abstractive", "hybrid")
#: hybrid: the sentences handed to the chat model may take this many times the budget
HYBRID_FACTOR = 2
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?])\s+|\n+")
#: a full stop after these is not a sentence end ("e.g. BM25", "Smith et al. (2020)", "J. Smith", "Fig. 3")
_ABBREVIATION = re.compile(r"(?:\b(?:e\.g|i\.e|et al|etc|vs|cf|Fig|Figs|Eq|Eqs|Sec|Tab|Ref|No|Dr|Mr|Mrs|Ms|St|approx"
                           r"|resp|incl)|(?<![\w.])[A-Z])\.$")


@dataclass
class Compression:
    points: list[str]
    text: str
    input_tokens: int
    output_tokens: int
    chunks: int
    rounds: int
    trimmed: bool = False
    mode: str = "abstractive"
    #: extractive and hybrid: indices of the kept sentences (in the text's sentence split, document order) and
    #: their character spans in the text
    kept: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    #: the rule that scored the sentences (``extractive.FUSED`` …) and what it went without
    scoring: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.output_tokens / self.input_tokens if self.input_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"points": self.points, "text": self.text, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "ratio": round(self.ratio, 4), "chunks": self.chunks,
                "rounds": self.rounds, "trimmed": self.trimmed, "mode": self.mode, "kept": self.kept,
                "spans": [list(span) for span in self.spans], "scoring": self.scoring, "notes": self.notes}


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
    """Chunks of whole sentences of at most ``chunk_tokens`` tokens; a longer sentence is cut at token boundaries
    (a log or a transcript without full stops was one chunk, and too long for the engine: a 413, not a summary)."""
    spans, costs, total = yield from sentence_costs(text, max_tokens=chunk_tokens)
    return _chunks(text, spans, costs, chunk_tokens), total


def sentence_costs(text: str, max_tokens: int | None = None) -> Flow[tuple[list[tuple[int, int]], list[int], int]]:
    """The text's sentence spans, the model's tokens in each, and the text's tokens (one ``/tokenize`` call);
    with ``max_tokens``, a longer sentence is cut into pieces of at most that many tokens."""
    (answer,) = yield [Call("POST", "/tokenize", {"content": text, "add_special": False, "with_pieces": True})]
    if isinstance(answer, Exception):
        raise answer
    starts = _token_char_starts(text, answer["tokens"])
    spans = _sentences(text)
    costs, position, cut = [], 0, []
    for start, end in spans:  # spans are contiguous and ordered: one pass over the token starts
        first = position
        while position < len(starts) and starts[position] < end:
            position += 1
        count = position - first
        if max_tokens is None or count <= max_tokens:
            cut.append((start, end))
            costs.append(count)
            continue
        firsts = range(first, position, max_tokens)  # each piece's first token
        bounds = [start, *(starts[i] for i in firsts[1:]), end]
        for piece, (a, b) in enumerate(itertools.pairwise(bounds)):
            cut.append((a, b))
            costs.append(min(max_tokens, position - firsts[piece]))
    return cut, costs, len(starts)


def _chunks(text: str, spans: list[tuple[int, int]], costs: list[int], chunk_tokens: int) -> list[str]:
    chunks, current, current_tokens = [], "", 0
    for (start, end), tokens in zip(spans, costs, strict=True):
        if current and current_tokens + tokens > chunk_tokens:
            chunks.append(current)
            current, current_tokens = "", 0
        current += text[start:end]
        current_tokens += tokens
    if current.strip():
        chunks.append(current)
    return chunks


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
    """Contiguous spans covering the text, each ending after a sentence end (or a line break)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for end in [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
        if end <= start:
            continue
        if spans and _abbreviated(text[spans[-1][0]:spans[-1][1]]):
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((start, end))
        start = end
    return spans


def _abbreviated(span: str) -> bool:
    """The span ends with an abbreviation's full stop on the same line (the sentence goes on)."""
    body = span.rstrip()
    return "\n" not in span[len(body):] and _ABBREVIATION.search(body) is not None


def _points_flow(chunk: str, question: str | None, max_points: int, model: str | None) -> Flow[list[str]]:
    lang = language(chunk)
    system = KEY_POINTS_Q[lang].format(question=question) if question else KEY_POINTS[lang]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": chunk}]
    # at least one point: with none allowed the 0.5B model answered [] for a Chinese e-mail and meeting notes
    points = string_list(max_points, 200, min_items=1)
    schema = {"type": "object", "properties": {"points": points}, "required": ["points"]}
    result = yield from json_task(messages, schema, model)
    template = (KEY_POINTS_Q[lang].replace("{question}", "") if question else KEY_POINTS[lang])
    return [p.strip() for p in result.data["points"] if p.strip() and not _echo(p, template)]


def _echo(point: str, template: str) -> bool:
    """The instruction's own words as a point ("List the key points of the text", "文本的要点"): a run of the fixed
    template (never the question: a point that repeats it may be the answer) of at least a third of it (a word of
    it, "JSON" or "文本", may be a real point)."""
    folded, words = _fold(point), _fold(template)
    return bool(folded) and folded in words and 3 * len(folded) >= len(words)


def _fold(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def compress_flow(text: str, *, budget_tokens: int = 512, chunk_tokens: int = 1024, question: str | None = None,
                  mode: str = "extractive", model: str | None = None,
                  part: str | None = AUTO_PART) -> Flow[Compression]:
    """``part``: the embedding part that scores sentences (default: the catalog's for the text's language;
    ``None``: BM25 / term frequency alone)."""
    require_text(text)
    if budget_tokens < 16 or chunk_tokens < 64:
        raise ConfigError("budget_tokens must be ≥ 16 and chunk_tokens ≥ 64")
    if mode not in MODES:
        raise ConfigError(f"unknown compress mode {mode!r}", hint=f"one of {', '.join(MODES)}")
    if mode == "abstractive":
        chunks, input_tokens = yield from chunk_text(text, chunk_tokens)
        abstract = yield from _map_reduce(chunks, input_tokens, budget_tokens, chunk_tokens, question, model)
        if not abstract.points:  # an empty answer with success was the worst of both
            raise OutputError("the model gave no key points of the text",
                              hint="use mode extractive or hybrid (sentences of the text itself), or a larger model")
        return abstract
    spans, costs, input_tokens = yield from sentence_costs(text)
    units = [i for i, (start, end) in enumerate(spans) if text[start:end].strip()]
    sentences = [text[spans[i][0]:spans[i][1]].strip() for i in units]
    unit_costs = [costs[i] for i in units]
    scored = yield from score_sentences(sentences, question, part)
    limit = min(input_tokens, budget_tokens * HYBRID_FACTOR) if mode == "hybrid" else budget_tokens
    result = yield from _selected(text, spans, costs, units, sentences, unit_costs, scored, limit, chunk_tokens,
                                  input_tokens, mode)
    if mode == "hybrid":
        picked, kept = result.points, result.kept
        groups = _chunks("\n".join(picked) + "\n", _line_spans(picked), [unit_costs[i] for i in kept], chunk_tokens)
        shortened = yield from _map_reduce(groups, input_tokens, budget_tokens, chunk_tokens, question, model)
        if not shortened.points:  # the model gave no point: the selection within the budget itself, and why
            within = yield from _selected(text, spans, costs, units, sentences, unit_costs, scored, budget_tokens,
                                          chunk_tokens, input_tokens, mode)
            within.notes.append("the model gave no key points of the selected sentences: the sentences themselves "
                                "are returned, as mode extractive selects them")
            return within
        result.points, result.text, result.output_tokens = shortened.points, shortened.text, shortened.output_tokens
        result.rounds, result.trimmed = shortened.rounds, shortened.trimmed
    return result


def _selected(text: str, spans: list[tuple[int, int]], costs: list[int], units: list[int], sentences: list[str],
              unit_costs: list[int], scored: Any, limit: int, chunk_tokens: int, input_tokens: int,
              mode: str) -> Flow[Compression]:
    """The best whole sentences within ``limit`` tokens, in document order."""
    sentences = list(sentences)
    kept, scoring = choose(scored, unit_costs, limit)
    trimmed = not kept
    if not kept:  # no sentence fits: the best one, cut to the budget
        best = max(range(len(sentences)), key=lambda i: (scored.scores[i], -i))
        kept, sentences[best] = [best], (yield from _cut(sentences[best], limit))
    picked = [sentences[i] for i in kept]
    joined = "\n".join(picked)
    output_tokens = yield from count_tokens(joined)
    while output_tokens > limit and len(kept) > 1:  # joining may tokenize a little longer than the parts
        drop = min(kept, key=lambda i: (scored.scores[i], -i))
        kept, trimmed = [i for i in kept if i != drop], True
        picked = [sentences[i] for i in kept]
        joined = "\n".join(picked)
        output_tokens = yield from count_tokens(joined)
    n_chunks = len(_chunks(text, spans, costs, chunk_tokens))
    return Compression(picked, joined, input_tokens, output_tokens, n_chunks, 0, trimmed, mode, kept,
                       [spans[units[i]] for i in kept], scoring, list(scored.notes))


def _line_spans(lines: list[str]) -> list[tuple[int, int]]:
    spans, start = [], 0
    for line in lines:
        spans.append((start, start + len(line) + 1))
        start += len(line) + 1
    return spans


def _cut(sentence: str, budget: int) -> Flow[str]:
    """The sentence's first ``budget`` tokens (at a token boundary)."""
    (answer,) = yield [Call("POST", "/tokenize", {"content": sentence, "add_special": False, "with_pieces": True})]
    if isinstance(answer, Exception):
        raise answer
    starts = _token_char_starts(sentence, answer["tokens"])
    return sentence[:starts[budget]].rstrip() if len(starts) > budget else sentence


def _map_reduce(chunks: list[str], input_tokens: int, budget_tokens: int, chunk_tokens: int, question: str | None,
                model: str | None) -> Flow[Compression]:
    per_chunk = max(2, min(12, chunk_tokens // 100))
    points_lists = yield from gather([_points_flow(c, question, per_chunk, model) for c in chunks])
    points = [p for plist in points_lists for p in plist]
    rounds, joined = 1, "\n".join(points)
    output_tokens = yield from count_tokens(joined) if joined else _zero()
    while output_tokens > budget_tokens and rounds < MAX_ROUNDS and len(points) > 2:
        groups = _group(points, chunk_tokens, output_tokens)
        merged = yield from gather([_points_flow("\n".join(g), question, max(2, len(g) // 2), model) for g in groups])
        condensed = [p for plist in merged for p in plist]
        if not condensed:  # a round that gave no point keeps the last round's (cut to the budget below)
            break
        points, rounds = condensed, rounds + 1
        joined = "\n".join(points)
        output_tokens = yield from count_tokens(joined) if joined else _zero()
    trimmed = False
    while output_tokens > budget_tokens and len(points) > 1:
        points, trimmed = points[:-1], True
        joined = "\n".join(points)
        output_tokens = yield from count_tokens(joined)
    cut = budget_tokens
    while output_tokens > budget_tokens and cut > 0:  # one point over the budget (a model's loop): its first tokens
        joined = yield from _cut(points[0], cut)
        points, trimmed = [joined], True
        output_tokens = yield from count_tokens(joined)
        cut -= max(1, output_tokens - budget_tokens)
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
    summary = fit_words(result.data["summary"].strip(), words, lang, cut=len(result.data["summary"]) >= limit)
    output_tokens = yield from count_tokens(summary)
    return Summary(summary, input_tokens, output_tokens, len(chunks))




def fit_words(summary: str, words: int, lang: str, *, cut: bool) -> str:
    """At most ``words`` words (English; Chinese by its character limit), ending at a sentence end when one is in
    its second half, else at a word with "…": the grammar's character limit stopped it mid-word ("to final"), and
    nothing counted the words (``--words 5`` gave 8). ``cut``: the answer reached the character limit."""
    if lang != "zh":
        spans = [m.end() for m in re.finditer(r"\S+", summary)]
        if cut and len(spans) > 1:
            spans.pop()  # the last word may be cut short
        if len(spans) > words:
            spans, cut = spans[:words], True
        summary = summary[:spans[-1]] if spans else summary
    if not cut:
        return summary
    ends = [m.end() for m in SENTENCE_DONE.finditer(summary)]
    if ends and ends[-1] >= len(summary) // 2:
        return summary[:ends[-1]]
    body = summary.rstrip(" ,;:，；：、")
    if lang == "zh":  # the "…" is a character of the limit (two per word): 10 characters came back as 11
        body = body[:max(0, 2 * words - 1)].rstrip(" ,;:，；：、")
    return body + "…"
