"""``tiankong tune rerank``: learn how to combine the retrieval parts from labelled (query, passage, relevant) rows.

Every query's candidates are scored once by BM25 and by the embedding part (the same calls ``rerank`` makes); the
methods ``bm25``, ``embedding``, ``rrf`` and ``lr-fusion`` (``deciders/rerank_fusion.py``) are scored by nDCG@10 on
held-out *queries* (folds by query, repeated with three seeds, so a query's passages never sit on both sides), and
the one-standard-error rule picks the simplest method within one standard error of the best — a handful of queries
does not pick a method by noise. The artifact is a ``Decider`` with ``task: "rerank"`` in the same registry as
``tune classify``'s. Every distinct text is embedded once (``score_parts``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..deciders.registry import Decider, check_name, check_replaces, save_decider
from ..deciders.rerank_fusion import (
    BM25_ONLY,
    FUSION_METHODS,
    WITH_EMBEDDING,
    fit_weights,
    fusion_features,
    state_probabilities,
)
from ..errors import ConfigError
from ..structured.drivers import run_sync
from ..structured.part_flows import part_for_query, part_vectors
from ..tasks.retrieval import bm25_retrieved, bm25_scores, part_reads, rrf

Log = Callable[[str], None]
SEEDS = (0, 1, 2)
MIN_QUERIES = 6
EMBED_CHUNK = 1024  # texts per part_vectors call (its batches go out side by side over the part's slots)


@dataclass
class Group:
    query: str
    passages: list[str]
    relevant: list[float]
    bm25: list[float] = field(default_factory=list)
    cosine: list[float] | None = None
    part: str = ""  # the embedding part that gave ``cosine``


@dataclass
class RerankTuneReport:
    name: str
    queries: int
    pairs: int
    rows: list[dict[str, Any]]
    chosen: str
    embedding: str  # "" when the part read the texts, else why it did not
    decider: Decider | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "queries": self.queries, "pairs": self.pairs, "chosen": self.chosen,
                "embedding_part": self.embedding or "used", "rows": self.rows,
                "decider": self.decider.ref if self.decider and self.decider.version else None}  # a dry run: none

    def table(self) -> str:
        lines = [f"{self.queries} queries, {self.pairs} (query, passage) pairs; folds by query, seeds {list(SEEDS)}",
                 "method       nDCG@10   ± se    log-loss"]
        how = "--method" if self.decider is not None and self.decider.cv.get("rule") == "--method" else "one-SE rule"
        for row in self.rows:
            mark = f"  ← chosen ({how})" if row["method"] == self.chosen else ""
            loss = f"{row['log_loss']:.3f}" if row.get("log_loss") is not None else "  -  "
            lines.append(f"{row['method']:<12} {row['ndcg@10']:.3f}   {row['se']:.3f}   {loss}{mark}")
        if self.embedding:
            lines.append(f"embedding part not used: {self.embedding}")
        return "\n".join(lines)


def read_pairs(source: str | Path | Iterable[dict[str, Any]]) -> list[Group]:
    """Rows ``{query, passage, relevant}`` (JSONL or CSV; relevant: 0/1, true/false or a grade ≥ 0) by query, or by
    ``qid`` where rows carry one (one candidate list per id: the same query text may head several lists, as in
    BEIR-style qrels, and each list's features are computed within that list)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{path} is a folder" if path.is_dir() else f"no such file {path}",
                              hint="give a JSONL or CSV file of query,passage,relevant rows")
        from ..dedupe.files import _csv_rows, _jsonl_rows, _utf8  # the record files' readers (normalize's too)

        text = _utf8(path.read_bytes(), path)
        rows = [row for _, row in (_csv_rows(text, path) if path.suffix.lower() == ".csv" else _jsonl_rows(text, path))]
    else:
        rows = list(source)
    groups: dict[str, Group] = {}
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not {"query", "passage", "relevant"} <= set(row):
            raise ConfigError(f"row {number} needs query, passage and relevant")
        query, passage = str(row["query"]).strip(), str(row["passage"]).strip()
        if not query or not passage:
            raise ConfigError(f"row {number}: query and passage must not be empty")
        qid = str(row["qid"]) if row.get("qid") not in (None, "") else query
        group = groups.setdefault(qid, Group(query, [], []))
        group.passages.append(passage)
        group.relevant.append(_grade(row["relevant"], number))
    usable = [g for g in groups.values() if len(g.passages) >= 2 and any(g.relevant) and not all(g.relevant)]
    if len(usable) < MIN_QUERIES:
        raise ConfigError(f"{len(usable)} queries have both relevant and irrelevant passages; {MIN_QUERIES} at least",
                          hint="label several passages per query, some relevant and some not")
    return usable


def _grade(value: Any, number: int) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
        return float(value.strip().lower() in ("true", "yes"))
    try:
        grade = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"row {number}: relevant must be 0/1, true/false or a grade ≥ 0") from None
    if grade < 0 or math.isnan(grade):
        raise ConfigError(f"row {number}: relevant must be ≥ 0")
    return grade


def score_parts(groups: list[Group], log: Log = lambda _: None) -> str:
    """BM25 and the embedding part for every group; returns why the part was not used ('' when it was).

    Each group's part is the one ``rerank`` would pick for it (``part_for_query``); every distinct query and passage is
    embedded once per part, in chunks — not once per list: 4,010 chatterbot lists of 40–200 replies took ~45 min
    scored list by list on 2 cores, the replies recurring in list after list."""
    missing = ""
    by_part: dict[str, list[Group]] = {}
    for group in groups:
        group.bm25 = bm25_scores(group.query, group.passages)
        texts = [group.query, *group.passages]
        group.part = part_for_query(group.query, group.passages)
        unread = part_reads(group.part, texts)
        if unread:
            missing = missing or unread
        else:
            by_part.setdefault(group.part, []).append(group)
    for part, members in by_part.items():
        queries = sorted({g.query for g in members})
        passages = sorted({p for g in members for p in g.passages})
        vectors, why = _unit_vectors(queries, passages, part, log)
        if vectors is None:
            missing = missing or why
            continue
        q_row = {t: i for i, t in enumerate(queries)}
        p_row = {t: len(queries) + i for i, t in enumerate(passages)}
        for group in members:
            rows = vectors[[p_row[p] for p in group.passages]]
            group.cosine = [float(c) for c in rows @ vectors[q_row[group.query]]]
    log(f"scored {len(groups)}/{len(groups)} queries")
    return missing if all(g.cosine is None for g in groups) else ""


def _unit_vectors(queries: list[str], passages: list[str], part: str, log: Log) -> tuple[np.ndarray | None, str]:
    """L2-normalised vectors of ``queries`` (as queries) then ``passages`` (as passages), in chunks of
    ``EMBED_CHUNK`` texts; ``(None, why)`` without the part."""
    rows: list[list[float]] = []
    total = len(queries) + len(passages)
    for as_queries, texts in ((True, queries), (False, passages)):
        for start in range(0, len(texts), EMBED_CHUNK):
            chunk = texts[start:start + EMBED_CHUNK]
            vectors, why = run_sync(part_vectors(chunk, part, queries=len(chunk) if as_queries else 0), _no_engine)
            if vectors is None:
                return None, why
            rows += vectors
            log(f"embedded {len(rows)}/{total} distinct texts with {part}")
    matrix = np.asarray(rows, dtype=float)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0), ""


def _no_engine(*_: Any) -> Any:
    raise ConfigError("tune rerank asks the retrieval parts only")


def ndcg_at(scores: list[float], grades: list[float], k: int = 10) -> float:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    gains = [grades[i] for i in order]
    dcg = sum(g / math.log2(r + 2) for r, g in enumerate(gains[:k]))
    ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(grades, reverse=True)[:k]))
    return dcg / ideal if ideal else 0.0


def _method_scores(method: str, group: Group, weights: dict[str, Any] | None) -> list[float] | None:
    if method == "bm25":
        return group.bm25
    if method == "embedding":
        return group.cosine
    if method == "rrf":
        return None if group.cosine is None else rrf([group.bm25, group.cosine],
                                                     retrieved=[bm25_retrieved(group.bm25), None])
    assert weights is not None
    return state_probabilities(weights, group.bm25, group.cosine, group.part)


def fit_fusion(groups: list[Group]) -> dict[str, Any]:
    """Weights with the embedding part (groups it read), one set per part that read ``MIN_QUERIES`` groups or more
    (``rerank_fusion.weights_key``), and without it (every group)."""
    state: dict[str, Any] = {"features_with_embedding": list(WITH_EMBEDDING), "features_bm25_only": list(BM25_ONLY)}
    binary = [np.asarray([1.0 if r > 0 else 0.0 for r in g.relevant]) for g in groups]
    state["bm25_only"] = fit_weights(np.concatenate([fusion_features(g.bm25, None) for g in groups]),
                                     np.concatenate(binary))
    read = [(g, y) for g, y in zip(groups, binary, strict=True) if g.cosine is not None]
    if read:
        state["with_embedding"] = fit_weights(np.concatenate([fusion_features(g.bm25, g.cosine) for g, _ in read]),
                                              np.concatenate([y for _, y in read]))
    parts = {g.part for g, _ in read if g.part}
    state["parts"] = sorted(parts)  # what the cosine weights were fitted on: another part's cosines are not read
    for part in sorted(parts) if len(parts) > 1 else []:
        own = [(g, y) for g, y in read if g.part == part]
        if len(own) >= MIN_QUERIES:  # every group has relevant and irrelevant passages (read_pairs)
            features = np.concatenate([fusion_features(g.bm25, g.cosine) for g, _ in own])
            state[f"with_embedding:{part}"] = fit_weights(features, np.concatenate([y for _, y in own]))
    return state


def cross_validate(groups: list[Group], folds: int) -> list[dict[str, Any]]:
    methods = [m for m in FUSION_METHODS if m in ("bm25", "lr-fusion") or any(g.cosine is not None for g in groups)]
    per_query: dict[str, list[float]] = {m: [] for m in methods}
    losses: list[float] = []
    folds = max(2, min(folds, len(groups)))
    for seed in SEEDS:
        order = np.random.default_rng(seed).permutation(len(groups))
        for fold in range(folds):
            held = [groups[i] for i in order[fold::folds]]
            train = [groups[i] for j, i in enumerate(order) if j % folds != fold]
            weights = fit_fusion(train)
            for group in held:
                for method in methods:
                    scores = _method_scores(method, group, weights) or group.bm25
                    per_query[method].append(ndcg_at(scores, group.relevant))
                    if method == "lr-fusion":
                        losses += [_log_loss(p, r) for p, r in zip(scores, group.relevant, strict=True)]
    rows = []
    for method in methods:
        values = per_query[method]
        rows.append({"method": method, "ndcg@10": statistics.mean(values),
                     "se": statistics.stdev(values) / math.sqrt(len(values) / len(SEEDS)) if len(values) > 1 else 0.0,
                     "log_loss": statistics.mean(losses) if method == "lr-fusion" and losses else None})
    return rows


def _log_loss(p: float, relevant: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return -math.log(p) if relevant > 0 else -math.log(1 - p)


def one_se_choice(rows: list[dict[str, Any]]) -> str:
    """The simplest method (``FUSION_METHODS`` order) whose nDCG@10 is within one standard error of the best."""
    best = max(rows, key=lambda r: r["ndcg@10"])
    floor = best["ndcg@10"] - best["se"]
    for method in FUSION_METHODS:
        row = next((r for r in rows if r["method"] == method), None)
        if row is not None and row["ndcg@10"] >= floor:
            return method
    return str(best["method"])


def tune_rerank(source: str | Path | Iterable[dict[str, Any]], *, name: str, folds: int = 5, save: bool = True,
                method: str | None = None, log: Log = lambda _: None) -> RerankTuneReport:
    check_name(name)  # before the parts score every pair (minutes), not at the save after them
    check_replaces(name, "rerank", ["relevant", "irrelevant"])
    groups = read_pairs(source)
    log(f"{len(groups)} queries: scoring with BM25 and the embedding part …")
    missing = score_parts(groups, log)
    rows = cross_validate(groups, folds)
    chosen = method or one_se_choice(rows)
    if chosen not in {r["method"] for r in rows}:
        raise ConfigError(f"method {chosen!r} was not scored here",
                          hint="one of " + ", ".join(str(r["method"]) for r in rows))
    state = fit_fusion(groups)
    decider = Decider(name=name, method=chosen, labels=["relevant", "irrelevant"], state=state, task="rerank",
                      examples={"n": sum(len(g.passages) for g in groups), "queries": len(groups)},
                      cv={"folds": folds, "seeds": list(SEEDS), "rows": rows,
                          "rule": "--method" if method else "one-standard-error",
                          "chosen": next(r for r in rows if r["method"] == chosen)})
    if save:
        save_decider(decider)
    return RerankTuneReport(name, len(groups), sum(len(g.passages) for g in groups), rows, chosen, missing,
                            decider)
