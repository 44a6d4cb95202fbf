"""Shared pieces of the task benchmarks: an engine per run, bounded concurrency, metrics, tables."""

from __future__ import annotations

import asyncio
import math
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/datasets.py

from tiankong.engine import EngineConfig, EngineProcess, locate_engine  # noqa: E402
from tiankong.models import DEFAULT_MODEL, resolve_installed  # noqa: E402

STOP = frozenset({"the", "a", "an", "of", "to", "in", "and", "for", "on", "with", "is", "are", "we", "our", "this",
                  "that", "by", "as", "be", "from", "at", "it", "its", "which", "or"})
_WORD = re.compile(r"[a-z0-9]+")


def content_words(text: str) -> list[str]:
    """Lower-case English words minus a few stop words (for BM25 and overlap scoring)."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOP]


T = TypeVar("T")
R = TypeVar("R")
__all__ = ["DEFAULT_MODEL", "engine", "bounded", "accuracy_f1", "ece", "print_table"]


@contextmanager
def engine(model: str, slots: int, ctx_per_slot: int = 4096) -> Iterator[tuple[str, str]]:
    """A managed engine for one benchmark run: yields (url, model name); always stopped."""
    record = resolve_installed(model)
    process = EngineProcess(EngineConfig(model=record.path, ctx=ctx_per_slot * slots, slots=slots), locate_engine())
    process.start()
    try:
        yield process.url, record.name
    finally:
        process.stop()


async def bounded(items: Sequence[T], limit: int, work: Callable[[T], Awaitable[R]]) -> list[R]:
    gate = asyncio.Semaphore(limit)

    async def one(item: T) -> R:
        async with gate:
            return await work(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


def accuracy_f1(pairs: Sequence[tuple[str, str]], labels: Sequence[str]) -> tuple[float, float]:
    """Accuracy and macro-F1 of (gold, predicted) pairs."""
    acc = sum(g == p for g, p in pairs) / len(pairs)
    f1s = []
    for label in labels:
        tp = sum(g == p == label for g, p in pairs)
        fp = sum(p == label != g for g, p in pairs)
        fn = sum(g == label != p for g, p in pairs)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return acc, sum(f1s) / len(f1s)


def ece(confidences: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """Expected calibration error over equal-width confidence bins."""
    total, n = 0.0, len(confidences)
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(confidences) if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        if idx:
            acc = sum(correct[i] for i in idx) / len(idx)
            conf = sum(confidences[i] for i in idx) / len(idx)
            total += len(idx) / n * abs(acc - conf)
    return total


def ndcg_at(ranked_relevance: Sequence[int], k: int) -> float:
    dcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ranked_relevance[:k]))
    ideal = sorted(ranked_relevance, reverse=True)
    idcg = sum(rel / math.log2(i + 2) for i, rel in enumerate(ideal[:k]))
    return dcg / idcg if idcg else 0.0


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Markdown table (pasteable into docs)."""
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for row in rows:
        print("| " + " | ".join(cell(v) for v in row) + " |")
