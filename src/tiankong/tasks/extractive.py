"""Extractive compression: the document's own sentences, scored and kept whole within a token budget.

* With a question: BM25 (``bm25s``) and the embedding part's cosine of every sentence to the question, fused by
  reciprocal rank (``retrieval.rrf``) with BM25's ranking counted ``BM25_WEIGHT`` times (on ACLSum val, aspect
  summary as the question: plain RRF 0.692 highlight recall, BM25 alone 0.742, weight 4 0.740 — the embedding
  still orders the sentences BM25 cannot tell apart, e.g. a question sharing no word with the text).
* Without one: the cosine of every sentence to the document's centroid (the mean of its sentences' normalised
  embeddings). The lead is kept instead when its sentences are, together, nearly as central as the selection
  (``LEAD_SHARE``): a text that opens with its own summary (an abstract) is best compressed to that opening
  (ACLSum val: lead-N 0.431, centroid 0.342, this rule 0.421; without the abstracts, key facts spread out:
  lead-N 0.148, centroid 0.340, this rule 0.326; the share 0.9 gave 0.436 and 0.281).
* Without the embedding part (not installed, failed, or the text is in a language the part does not read: an
  English MiniLM on Chinese text ranks noise): BM25 alone with a question, a term-frequency centrality without
  (the mean document frequency of a sentence's words, as in SumBasic) — and the result's ``notes`` say so.
* Selection: best score first, a sentence that does not fit the remaining budget is skipped (a shorter one may),
  the kept sentences are returned in document order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..structured.flow import Flow
from ..structured.part_flows import AUTO_PART, part_for_query, part_vectors
from .retrieval import bm25_scores, cosine, embedding_scores, part_reads, rrf, tokens

#: scoring rules, named in the result (``Compression.scoring``)
FUSED, BM25, CENTROID, CENTRALITY, LEAD = "bm25+embedding", "bm25", "embedding-centroid", "tf-centrality", "lead"
#: BM25's ranking counts this many times in the fusion with the embedding's (tuned on ACLSum val: 1, 2, 3, 4, 6)
BM25_WEIGHT = 4
#: without a question, the lead is kept when its block's cosine to the centroid is at least this share of the
#: selection's (tuned on ACLSum val: 0.9, 0.95, 1.0)
LEAD_SHARE = 0.95


@dataclass
class Scored:
    scores: list[float]
    scoring: str
    notes: list[str] = field(default_factory=list)
    vectors: list[list[float]] | None = None  # the sentences' embeddings (centroid scoring)


def score_sentences(sentences: Sequence[str], question: str | None,
                    part: str | None = AUTO_PART) -> Flow[Scored]:
    """A relevance score per sentence (higher is better) and the rule that gave it; ``part``: the embedding
    part (``AUTO_PART``: the catalog's for the text's language; ``None``: none)."""
    notes: list[str] = []
    if part == AUTO_PART:
        part = part_for_query(question or "", sentences)
    if question and question.strip():
        lexical = bm25_scores(question, sentences)
        if part is not None:
            embedded = yield from embedding_scores(question, sentences, part)
            if embedded.cosine is not None:
                return Scored(rrf([lexical] * BM25_WEIGHT + [embedded.cosine]), FUSED)
            notes.append(f"embedding part left out ({embedded.missing}): BM25 alone scored the sentences")
        else:
            notes.append("embedding part not asked for: BM25 alone scored the sentences")
        if any(lexical):
            return Scored(lexical, BM25, notes)
        notes.append("no word of the question is in the text: sentences scored by term-frequency centrality")
        return Scored(centrality(sentences), CENTRALITY, notes)
    if part is not None:
        vectors, missing = yield from sentence_vectors(sentences, part)
        if vectors is not None:
            return Scored(centroid_cosine(vectors), CENTROID, vectors=vectors)
        notes.append(f"embedding part left out ({missing}): term-frequency centrality alone scored the sentences")
    else:
        notes.append("embedding part not asked for: term-frequency centrality alone scored the sentences")
    return Scored(centrality(sentences), CENTRALITY, notes)


def centrality(sentences: Sequence[str]) -> list[float]:
    """Mean document frequency (share of sentences containing it) of a sentence's distinct words: a sentence made
    of the document's recurring words is central; a sentence of one-off words is not."""
    words = [set(tokens(s)) for s in sentences]
    df = Counter(w for ws in words for w in ws)
    n = max(1, len(sentences))
    # words in every sentence (and single-sentence words) say nothing about a sentence: weight by a bell in df
    return [sum(df[w] / n * math.log(n / df[w] + 1.0) for w in ws) / math.sqrt(len(ws)) if ws else 0.0
            for ws in words]


def centroid_cosine(vectors: Sequence[Sequence[float]]) -> list[float]:
    centre = _mean(vectors) if vectors else []
    return [cosine(centre, v) for v in vectors]


def _normalised(v: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def sentence_vectors(texts: Sequence[str], part: str) -> Flow[tuple[list[list[float]] | None, str]]:
    """The part's embedding of every text (cut to its context), or ``(None, why not)``."""
    unread = part_reads(part, texts)
    if unread:
        return None, unread
    vectors, cut = yield from part_vectors(list(texts), part)
    return (vectors, "") if vectors is not None else (None, cut)


def select(scores: Sequence[float], costs: Sequence[int], budget: int) -> list[int]:
    """Indices of the best-scored sentences whose costs fit ``budget`` together, in document order."""
    kept, used = [], 0
    for index in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
        if costs[index] and used + costs[index] <= budget:
            kept.append(index)
            used += costs[index]
    return sorted(kept)


def choose(scored: Scored, costs: Sequence[int], budget: int) -> tuple[list[int], str]:
    """The selection, or the lead when the text opens with its own summary (centroid scoring only); and the rule."""
    kept = select(scored.scores, costs, budget)
    if scored.vectors is None or not kept:
        return kept, scored.scoring
    opening = lead(costs, budget)
    if opening and opening != kept:
        vectors = scored.vectors
        centre = _mean(vectors)
        if cosine(_mean([vectors[i] for i in opening]), centre) >= LEAD_SHARE * cosine(
                _mean([vectors[i] for i in kept]), centre):
            return opening, f"{scored.scoring}: {LEAD} (the opening is as central as the selection)"
    return kept, scored.scoring


def _mean(vectors: Sequence[Sequence[float]]) -> list[float]:
    unit = [_normalised(v) for v in vectors]
    return [sum(v[d] for v in unit) / len(unit) for d in range(len(unit[0]))]


def lead(costs: Sequence[int], budget: int) -> list[int]:
    """The leading sentences that fit ``budget`` (the free baseline)."""
    kept, used = [], 0
    for index, cost in enumerate(costs):
        if used + cost > budget:
            break
        kept.append(index)
        used += cost
    return kept
