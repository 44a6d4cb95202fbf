"""rerank on ACLSum: nDCG@5 of tiankong's pointwise rerank vs. BM25 in the same run, and slot speedup.

    .venv/bin/python benchmarks/tasks/bench_rerank.py [--docs 10] [--slots 2] [--model NAME]

Query = a paper's aspect summary (challenge / approach / outcome); candidates = up to 50 sentences of that paper
(abstract, introduction, conclusion); relevant = the sentences annotators highlighted for that aspect. BM25 (Okapi,
k1 1.5, b 0.75) ranks the same candidates. Throughput: one 50-candidate rerank on an engine with 1 slot vs. N slots.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from collections import Counter

from common import DEFAULT_MODEL, content_words, engine, ndcg_at, print_table
from datasets import aclsum_documents

from tiankong import AsyncClient


def words(text: str) -> list[str]:
    return content_words(text)


def bm25(query: str, docs: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    tokenized = [words(d) for d in docs]
    avg = statistics.mean(len(t) for t in tokenized) or 1.0
    df = Counter(w for t in tokenized for w in set(t))
    n = len(docs)
    scores = []
    for tokens in tokenized:
        tf = Counter(tokens)
        score = 0.0
        for w in set(words(query)):
            if w in tf:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                score += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(tokens) / avg))
        scores.append(score)
    return scores


def queries(n_docs: int) -> list[tuple[str, list[str], list[int]]]:
    out = []
    for doc in aclsum_documents("test", n_docs):
        sentences, = [doc["sentences"][:50]]
        for aspect, summary in doc["summary"].items():
            rel = doc["highlights"][aspect][:50]
            if any(rel):
                out.append((summary, sentences, rel))
    return out


def ranked(scores: list[float], rel: list[int]) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [rel[i] for i in order]


async def quality(url: str, items: list[tuple[str, list[str], list[int]]]) -> tuple[list[float], list[float]]:
    ours, base = [], []
    async with AsyncClient(url) as client:
        for query, docs, rel in items:
            result = await client.rerank(query, docs)
            ours.append(ndcg_at(ranked(result.scores, rel), 5))
            base.append(ndcg_at(ranked(bm25(query, docs), rel), 5))
    return ours, base


async def timed(url: str, query: str, docs: list[str]) -> float:
    async with AsyncClient(url) as client:
        await client.rerank(query, docs[:4])  # warm-up
        started = time.monotonic()
        await client.rerank(query, docs)
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=10, help="ACLSum test papers (3 queries each)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    items = queries(args.docs)
    with engine(args.model, args.slots, 2048) as (url, name):
        ours, base = asyncio.run(quality(url, items))
        query, docs, _ = max(items, key=lambda it: len(it[1]))
        parallel = asyncio.run(timed(url, query, docs))
    with engine(args.model, 1, 2048) as (url, _):
        single = asyncio.run(timed(url, query, docs))
    print(f"\nmodel {name}, {len(items)} queries from {args.docs} ACLSum test papers, {time.strftime('%Y-%m-%d')}\n")
    print_table(["ranker", "queries", "nDCG@5"], [["BM25", len(items), statistics.mean(base)],
                                                  ["tiankong rerank (pointwise)", len(items), statistics.mean(ours)]])
    print()
    print_table(["candidates", "1 slot s", f"{args.slots} slots s", "speedup"],
                [[len(docs), round(single, 2), round(parallel, 2), f"{single / parallel:.2f}×"]])


if __name__ == "__main__":
    main()
