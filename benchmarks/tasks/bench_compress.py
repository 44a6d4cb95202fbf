"""compress / summarize on ACLSum: highlight recall of the key points at a compression ratio, vs. lead-N.

    .venv/bin/python benchmarks/tasks/bench_compress.py [--docs 6] [--slots 2] [--budget 200] [--model NAME]

For each paper (abstract + introduction + conclusion), ``compress`` produces key points within ``--budget``
tokens. A highlighted sentence (any aspect) counts as recalled when its content words are ≥ 50 % covered by
one point (unigram recall). Baseline in the same run: the lead sentences that fit the same budget.
Throughput: a ~20K-token document (papers concatenated) compressed on 1 slot vs. N slots.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import DEFAULT_MODEL, content_words, engine, print_table
from datasets import aclsum_documents

from tiankong import AsyncClient


def content(text: str) -> set[str]:
    return set(content_words(text))


def covered(sentence: str, points: list[str], threshold: float = 0.5) -> bool:
    need = content(sentence)
    return bool(need) and max((len(need & content(p)) / len(need) for p in points), default=0.0) >= threshold


def highlighted(doc: dict) -> list[str]:  # type: ignore[type-arg]
    flags = [any(doc["highlights"][a][i] for a in doc["highlights"]) for i in range(len(doc["sentences"]))]
    return [s for s, f in zip(doc["sentences"], flags, strict=True) if f]


async def lead(client: AsyncClient, sentences: list[str], budget: int) -> list[str]:
    kept, used = [], 0
    for sentence in sentences:
        n = len(await client.tokenize(sentence))
        if used + n > budget:
            break
        kept.append(sentence)
        used += n
    return kept


async def quality(url: str, docs: list[dict], budget: int) -> list[list[object]]:  # type: ignore[type-arg]
    rows: list[list[object]] = []
    async with AsyncClient(url, timeout_s=1800.0) as client:
        ratios, ours, base = [], [], []
        for doc in docs:
            text = " ".join(doc["sentences"])
            result = await client.compress(text, budget_tokens=budget, chunk_tokens=512, mode="abstractive")
            gold = highlighted(doc)
            ours.append(sum(covered(s, result.points) for s in gold) / len(gold))
            leading = await lead(client, doc["sentences"], budget)
            base.append(sum(covered(s, leading) for s in gold) / len(gold))
            ratios.append(result.ratio)
        rows.append(["lead-N (same budget)", len(docs), statistics.mean(base), "–"])
        rows.append(["tiankong compress", len(docs), statistics.mean(ours), statistics.mean(ratios)])
    return rows


async def timed(url: str, text: str) -> tuple[float, int, int]:
    async with AsyncClient(url, timeout_s=1800.0) as client:
        started = time.monotonic()
        result = await client.compress(text, budget_tokens=1024, chunk_tokens=1024, mode="abstractive")
        return time.monotonic() - started, result.input_tokens, result.chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=6)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--long-tokens", type=int, default=20000, help="size of the throughput document")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--throughput-only", action="store_true", help="skip the quality part")
    args = parser.parse_args()
    docs = aclsum_documents("test", args.docs)
    big = " ".join(" ".join(d["sentences"]) for d in aclsum_documents("val"))
    big = big[: args.long_tokens * 5]  # ~5 characters per token in this English text; measured below
    with engine(args.model, args.slots, 4096) as (url, name):
        if not args.throughput_only:
            rows = asyncio.run(quality(url, docs, args.budget))
            print(f"\nmodel {name}, {args.docs} ACLSum test papers, budget {args.budget} tokens, "
                  f"{time.strftime('%Y-%m-%d')}\n")
            print_table(["method", "papers", "highlight recall", "compression ratio"], rows)
            print(flush=True)  # the throughput part below takes long on a small machine
        parallel, tokens, chunks = asyncio.run(timed(url, big))
    with engine(args.model, 1, 4096) as (url, _):
        single, _, _ = asyncio.run(timed(url, big))
    print_table(["document tokens", "chunks", "1 slot s", f"{args.slots} slots s", "speedup"],
                [[tokens, chunks, round(single, 1), round(parallel, 1), f"{single / parallel:.2f}×"]])


if __name__ == "__main__":
    main()
