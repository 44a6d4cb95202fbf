"""rerank: score candidate texts against a query — by fusion of retrieval parts (the default), or by the chat model.

``fusion`` (default): BM25 (``bm25s``) and the embedding part's cosine (``all-minilm-l6-v2``, its own engine),
combined by reciprocal-rank fusion; without the embedding part installed, BM25 alone, and the answer says so. The
chat model reading every candidate is the wrong part for this (≈ 3.6 s a candidate on 2 cores, and on ACLSum worse
than BM25: docs/tasks.md); it stays as ``pointwise`` and ``listwise``. ``bm25`` and ``embedding`` give one part.

Pointwise asks, for every candidate, "does this document answer the query?" and reads P(yes) from the
token probabilities — the calls go out as one batch, so an engine with N slots scores N candidates at once.
Listwise asks for a permutation of the candidate numbers (schema-constrained) and scores by rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..deciders.registry import Decider, load_decider
from ..deciders.rerank_fusion import check_rerank_decider, fused_probabilities
from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from ..structured.prompts import language
from .classify import require_text, yes_probability
from .generate import json_task
from .prompts import LISTWISE, RELEVANT
from .retrieval import bm25_retrieved, bm25_scores, embedding_scores, rrf

MAX_CANDIDATES = 50  # pointwise: one chat-model call per candidate
MAX_LISTWISE = 20
MAX_FUSION = 1000  # fusion, bm25, embedding: milliseconds per candidate
MAX_DOC_CHARS = 2000
MODES = ("fusion", "rrf", "bm25", "embedding", "pointwise", "listwise")
#: the shipped rerank decider (deciders/builtin/rerank.json, built by benchmarks/build_rerank.py)
DEFAULT_DECIDER = "rerank"


@dataclass
class Ranked:
    index: int
    score: float
    text: str


@dataclass
class Reranking:
    results: list[Ranked]
    scores: list[float]
    mode: str
    #: the parts whose rankings were fused (fusion), and what was left out and why
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: candidates cut to the embedding part's context
    truncated: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "scores": self.scores, "parts": self.parts, "notes": self.notes,
                "truncated": self.truncated,
                "results": [{"index": r.index, "score": r.score, "text": r.text} for r in self.results]}


def check_candidates(documents: Any, mode: str) -> list[str]:
    if not isinstance(documents, (list, tuple)) or not documents:
        raise ConfigError("documents must be a non-empty list of strings", param="documents")
    limit = {"listwise": MAX_LISTWISE, "pointwise": MAX_CANDIDATES}.get(mode, MAX_FUSION)
    if len(documents) > limit:
        raise ConfigError(f"{len(documents)} documents is more than the {limit} a {mode} rerank takes",
                          hint="pre-filter (mode fusion takes up to 1000), or split the list into batches",
                          param="documents")
    for i, doc in enumerate(documents):
        if not isinstance(doc, str) or not doc.strip():
            raise ConfigError(f"documents[{i}] is empty or not a string", param="documents")
    return [str(d) for d in documents]


def rerank_flow(query: str, documents: list[str], *, top_k: int | None = None, mode: str = "fusion",
                model: str | None = None, decider: Decider | None = None) -> Flow[Reranking]:
    """``fusion`` ranks by a rerank decider (``decider``, else the shipped ``rerank``): P(relevant) per candidate."""
    require_text(query, "query")
    if mode not in MODES:
        raise ConfigError(f"unknown rerank mode {mode!r}", hint=f"use one of {', '.join(MODES)}")
    docs = check_candidates(documents, mode)
    if top_k is not None and top_k < 1:
        raise ConfigError("top_k must be a positive integer")
    if decider is not None and mode != "fusion":
        raise ConfigError("a rerank decider ranks in mode fusion", hint="leave mode out, or leave decider out")
    found = Found()
    if mode in ("pointwise", "listwise"):  # the model reads each candidate cut to this: said, as fusion says its
        read = MAX_DOC_CHARS if mode == "pointwise" else MAX_DOC_CHARS // 4
        found.truncated = [i for i, doc in enumerate(docs) if len(doc) > read]
        if found.truncated:
            found.notes.append(f"{len(found.truncated)} candidate(s) longer than {read} characters were cut for "
                               f"the model (mode {mode})")
    if mode == "pointwise":
        scores = yield from gather([yes_probability(_question(query, doc)) for doc in docs])
    elif mode == "listwise":
        scores = yield from _listwise(query, docs, model)
    else:
        chosen = check_rerank_decider(decider or load_decider(DEFAULT_DECIDER)) if mode == "fusion" else None
        method = chosen.method if chosen is not None else mode
        bm = bm25_scores(query, docs) if method != "embedding" else None
        cosine = (yield from _cosine(query, docs, found, required=method == "embedding")) \
            if method != "bm25" else None
        found.parts = [name for name, used in (("bm25", bm is not None), (found.part, cosine is not None)) if used]
        if chosen is not None:
            found.parts.append(f"decider {chosen.ref} ({chosen.method})")
        if method == "embedding" and cosine is not None:
            scores = cosine
        elif bm is not None and (cosine is None or method == "bm25"):
            scores = fused_probabilities(chosen, bm, None) if method == "lr-fusion" and chosen else bm
        elif method == "lr-fusion" and chosen is not None and bm is not None:
            fitted = chosen.state.get("parts")
            if fitted and found.part not in fitted:  # MiniLM's weights read e5's cosines (Chinese), without a word
                found.notes.append(f"decider {chosen.ref} was tuned on {', '.join(fitted)} cosines, not "
                                   f"{found.part}'s: BM25's weights alone ranked (tune it on such texts too)")
                scores = fused_probabilities(chosen, bm, None)
            else:
                scores = fused_probabilities(chosen, bm, cosine, found.part)
        else:  # rrf
            assert bm is not None and cosine is not None
            scores = rrf([bm, cosine], retrieved=[bm25_retrieved(bm), None])
    if mode == "fusion" and len(set(docs)) == 1:  # nothing to compare: a decider's probability is list-relative
        found.notes.append(f"{'one candidate' if len(docs) == 1 else 'every candidate the same text'}: fusion "
                           "scores rank candidates against each other, so alone they are not an absolute relevance "
                           "(rank a list, or use mode pointwise to judge one passage)")
    order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[: top_k or len(docs)]
    return Reranking([Ranked(i, scores[i], docs[i]) for i in order], scores, mode, found.parts, found.notes,
                     found.truncated)


@dataclass
class Found:
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)
    part: str = ""  # the embedding part asked


def _cosine(query: str, docs: list[str], found: Found, *, required: bool) -> Flow[list[float] | None]:
    embedded = yield from embedding_scores(query, docs)
    found.part = embedded.part
    if embedded.cosine is None:
        if required:
            raise ConfigError(f"rerank mode embedding needs its part: {embedded.missing}",
                              hint=f"tiankong models pull {embedded.part}, or use mode fusion or bm25")
        found.notes.append(f"embedding part left out ({embedded.missing}): BM25 alone ranked")
        return None
    found.truncated = embedded.truncated
    if embedded.truncated:
        found.notes.append(f"{len(embedded.truncated)} candidate(s) longer than the embedding part's context were "
                           "cut for it (BM25 read them whole)")
    return embedded.cosine


def _question(query: str, document: str) -> list[dict[str, Any]]:
    lang = language(query + document)
    content = RELEVANT[lang].format(query=query, document=document[:MAX_DOC_CHARS])
    return [{"role": "user", "content": content}]


def _listwise(query: str, docs: list[str], model: str | None) -> Flow[list[float]]:
    numbered = "\n".join(f"[{i + 1}] {doc[:MAX_DOC_CHARS // 4]}" for i, doc in enumerate(docs))
    lang = language(query)
    messages = [{"role": "user", "content": LISTWISE[lang].format(query=query, documents=numbered)}]
    schema = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": len(docs)},
              "minItems": 1, "maxItems": len(docs), "uniqueItems": True}
    result = yield from json_task(messages, schema, model, free_text=False)
    ranked = [int(n) - 1 for n in result.data]
    ranked += [i for i in range(len(docs)) if i not in ranked]
    return [1.0 - ranked.index(i) / len(docs) for i in range(len(docs))]
