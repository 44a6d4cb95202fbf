"""rerank: score candidate texts against a query; pointwise (yes/no probability) or listwise.

Pointwise asks, for every candidate, "does this document answer the query?" and reads P(yes) from the
token probabilities — the calls go out as one batch, so an engine with N slots scores N candidates at once.
Listwise asks for a permutation of the candidate numbers (schema-constrained) and scores by rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..structured.combine import gather
from ..structured.flow import Flow
from ..structured.prompts import language
from .classify import require_text, yes_probability
from .generate import json_task
from .prompts import LISTWISE, RELEVANT

MAX_CANDIDATES = 50
MAX_LISTWISE = 20
MAX_DOC_CHARS = 2000


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

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "scores": self.scores,
                "results": [{"index": r.index, "score": r.score, "text": r.text} for r in self.results]}


def check_candidates(documents: Any, mode: str) -> list[str]:
    if not isinstance(documents, (list, tuple)) or not documents:
        raise ConfigError("documents must be a non-empty list of strings")
    limit = MAX_LISTWISE if mode == "listwise" else MAX_CANDIDATES
    if len(documents) > limit:
        raise ConfigError(f"{len(documents)} documents is more than the {limit} a {mode} rerank takes",
                          hint="pre-filter with BM25 or embeddings, or split the list into batches")
    for i, doc in enumerate(documents):
        if not isinstance(doc, str) or not doc.strip():
            raise ConfigError(f"documents[{i}] is empty or not a string")
    return [str(d) for d in documents]


def rerank_flow(query: str, documents: list[str], *, top_k: int | None = None, mode: str = "pointwise",
                model: str | None = None) -> Flow[Reranking]:
    require_text(query, "query")
    if mode not in ("pointwise", "listwise"):
        raise ConfigError(f"unknown rerank mode {mode!r}", hint="use pointwise or listwise")
    docs = check_candidates(documents, mode)
    if top_k is not None and top_k < 1:
        raise ConfigError("top_k must be a positive integer")
    if mode == "pointwise":
        scores = yield from gather([yes_probability(_question(query, doc)) for doc in docs])
    else:
        scores = yield from _listwise(query, docs, model)
    order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[: top_k or len(docs)]
    return Reranking([Ranked(i, scores[i], docs[i]) for i in order], scores, mode)


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
