"""Retrieval features shared by rerank and compress: BM25, the embedding part's cosine, reciprocal-rank fusion.

* BM25 is ``bm25s`` (Okapi BM25 over sparse matrices) on our own tokens: lower-cased words for alphabetic scripts,
  and for CJK text every character and every pair of adjacent characters (Chinese has no spaces; bm25s's default
  tokenizer would make a whole Chinese sentence one token).
* The embedding part is an installed sentence-embedding model served by its own engine (``engine/parts.py``);
  texts longer than its context are cut, and the caller is told which.
* RRF (Cormack et al., 2009): ``score = Σ 1 / (k + rank)`` over the parts' rankings, ``k = 60``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..models.catalog import find_entry
from ..structured.flow import Flow
from ..structured.part_flows import AUTO_PART, part_for_query, part_vectors, sample_text
from ..structured.prompts import CJK_SCRIPT, language

RRF_K = 60
_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)


def tokens(text: str) -> list[str]:
    """Lower-cased words; CJK runs as characters and adjacent pairs."""
    out: list[str] = []
    for word in _WORD.findall(text.casefold()):
        if CJK_SCRIPT.search(word):
            chars = [c for c in word if CJK_SCRIPT.match(c)] or list(word)
            out += chars + [a + b for a, b in zip(chars, chars[1:], strict=False)]
        else:
            out.append(word)
    return out


def bm25_scores(query: str, documents: Sequence[str]) -> list[float]:
    """Okapi BM25 (bm25s defaults: k1 1.5, b 0.75) of every document for the query."""
    import bm25s  # ~0.3 s import (scipy): only when a rerank runs

    corpus = [tokens(d) for d in documents]
    wanted = tokens(query)
    if not wanted or not any(corpus):
        return [0.0] * len(documents)
    retriever = bm25s.BM25()
    retriever.index([c or ["\x00"] for c in corpus], show_progress=False)
    known = [t for t in wanted if t in retriever.vocab_dict]
    if not known:
        return [0.0] * len(documents)
    return [float(s) for s in retriever.get_scores(known)]


@dataclass
class Embedded:
    """Cosine of every document to the query, or why there is none."""

    cosine: list[float] | None
    truncated: list[int] = field(default_factory=list)  # documents cut to the part's context
    missing: str = ""  # the part is not installed / failed: the reason
    part: str = ""  # the part asked


def part_reads(part: str, texts: Sequence[str]) -> str:
    """'' when the part reads the texts' language, else why not (an English-only part on Chinese text ranks noise:
    on chatterbot-zh's dev half its cosine alone scored below BM25 and pulled the fusion down). Lenient on purpose:
    only Chinese is refused, so records and keyword lists in Latin letters (no English function words to tell them
    by) keep MiniLM; ``part_for`` is the stricter choice."""
    entry = find_entry(part)
    lang = language(sample_text(texts))
    if entry is None or not entry.languages or lang in entry.languages:
        return ""
    return f"{part} reads {'/'.join(entry.languages)} only, this text is {lang}"



def embedding_scores(query: str, documents: Sequence[str], part: str = AUTO_PART) -> Flow[Embedded]:
    """Cosine of every document to the query by ``part`` (default: the catalog's part for their language)."""
    texts = [query, *documents]
    part = part_for_query(query, documents) if part == AUTO_PART else part
    unread = part_reads(part, texts)
    if unread:
        return Embedded(None, missing=unread, part=part)
    # each distinct passage once: the same text embedded in two batches came back a few 1e-5 apart, which the
    # fusion's within-list z-scores turned into P(relevant) 0.0006 and 0.164 for five copies of one passage
    unique = list(dict.fromkeys(documents))
    vectors, cut = yield from part_vectors([query, *unique], part, queries=1)
    if vectors is None:
        return Embedded(None, missing=cut, part=part)
    q = vectors[0]
    by_text = {text: cosine(q, v) for text, v in zip(unique, vectors[1:], strict=True)}
    cut_texts = {unique[i - 1] for i in map(int, cut.split(",")) if i > 0} if cut else set()
    truncated = [i for i, d in enumerate(documents) if d in cut_texts]
    return Embedded([by_text[d] for d in documents], truncated, part=part)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def ranks(scores: Sequence[float]) -> list[int]:
    """1-based rank of every item, best first; tied items share the best rank of their tie (input order must not
    rank them: a list in which most candidates tie would otherwise rank noise)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    rank = [0] * len(scores)
    for position, index in enumerate(order, start=1):
        previous = order[position - 2] if position > 1 else None
        tied = previous is not None and scores[previous] == scores[index]
        rank[index] = rank[previous] if tied and previous is not None else position
    return rank


def rrf(score_lists: Sequence[Sequence[float]], k: int = RRF_K,
        retrieved: Sequence[Sequence[bool] | None] | None = None) -> list[float]:
    """Reciprocal-rank fusion of several score lists over the same items. ``retrieved[j][i]`` false: list ``j``
    did not retrieve item ``i`` (BM25 with no query word in it) and gives it nothing, as RRF over retrieved lists
    defines it."""
    if not score_lists:
        return []
    fused = [0.0] * len(score_lists[0])
    for j, scores in enumerate(score_lists):
        mask = retrieved[j] if retrieved is not None else None
        for index, rank in enumerate(ranks(scores)):
            if mask is None or mask[index]:
                fused[index] += 1.0 / (k + rank)
    return fused


def bm25_retrieved(scores: Sequence[float]) -> list[bool]:
    return [s > 0 for s in scores]
