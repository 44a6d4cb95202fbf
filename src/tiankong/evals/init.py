"""``eval init``: a starter eval set covering the four kinds of work — short QA, long summary, extraction,
multi-turn — to be replaced by 50–200 samples of your own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import check_output
from .format import load_set

PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"},
                                                  "age": {"type": "integer"}},
                 "required": ["name", "city", "age"]}
INVOICE_SCHEMA = {"type": "object", "properties": {"invoice": {"type": "string"}, "total": {"type": "number"},
                                                   "currency": {"type": "string", "enum": ["EUR", "USD", "CNY"]}},
                  "required": ["invoice", "total", "currency"]}
PARK = ("The city council met on Tuesday to discuss the plan for a new park on the old rail yard. Residents asked "
        "for more trees, a playground and a dog run, and several people raised the cost. After two hours the council "
        "approved a budget of two million dollars, to be spent over three years. Construction starts next spring "
        "and the first part of the park should open in the autumn.")
OUTAGE = ("On Monday morning the payment service was down for 47 minutes. A configuration change to the database "
          "connection pool lowered the maximum number of connections from 200 to 20, and under the morning load "
          "requests queued until they timed out. The change was rolled back at 09:47. No payments were lost; 1,240 "
          "customers saw an error and retried. Next steps: review configuration changes in pairs and alert on "
          "connection-pool saturation.")

STARTER: list[dict[str, Any]] = [
    {"id": "qa-sentiment-1", "task": "classify", "input": "The battery died after two days and support never "
     "answered.", "labels": ["positive", "negative"], "reference": "negative", "tags": ["short-QA"]},
    {"id": "qa-sentiment-2", "task": "classify", "input": "Arrived early, works perfectly, would buy again.",
     "labels": ["positive", "negative"], "reference": "positive", "tags": ["short-QA"]},
    {"id": "qa-capital", "input": "What is the capital of Japan? Answer with the city name only.",
     "reference": "Tokyo", "scorer": "label", "max_tokens": 16, "tags": ["short-QA"]},
    {"id": "summary-park", "task": "summarize", "input": PARK, "words": 40,
     "reference": ["park", ["two million", "2 million", "$2"], "spring"], "tags": ["long-summary"]},
    {"id": "summary-outage", "task": "summarize", "input": OUTAGE, "words": 40,
     "reference": "The payment service was down for 47 minutes after a configuration change cut the database "
                  "connection pool; the change was rolled back and no payments were lost.",
     "scorer": "similarity", "threshold": 0.25, "tags": ["long-summary"]},
    {"id": "extract-person", "task": "extract", "input": "Maria Lopez (34) moved from Madrid to Lisbon last year.",
     "schema": PERSON_SCHEMA, "reference": {"name": "Maria Lopez", "city": "Lisbon", "age": 34},
     "tags": ["extraction"]},
    {"id": "extract-invoice", "task": "extract", "input": "Invoice INV-2041 — total due: 1,250.00 EUR by 30 June.",
     "schema": INVOICE_SCHEMA, "reference": {"invoice": "INV-2041", "total": 1250, "currency": "EUR"},
     "tags": ["extraction"]},
    {"id": "multi-turn-name", "input": [
        {"role": "user", "content": "Hi, I'm Wei and I live in Chengdu."},
        {"role": "assistant", "content": "Nice to meet you, Wei! How can I help?"},
        {"role": "user", "content": "Which city did I say I live in? Answer with the city only."}],
     "reference": "Chengdu", "scorer": "label", "max_tokens": 16, "tags": ["multi-turn"]},
    {"id": "multi-turn-order", "input": [
        {"role": "system", "content": "You are a coffee shop assistant. Keep answers short."},
        {"role": "user", "content": "I'd like a large latte."},
        {"role": "assistant", "content": "One large latte. Anything else?"},
        {"role": "user", "content": "Add a blueberry muffin. Now repeat my whole order."}],
     "reference": ["latte", "muffin"], "scorer": "key_points", "max_tokens": 64, "tags": ["multi-turn"]},
]

HEADER = """\
# tiankong eval set — starter items for the four kinds of work (short-QA, long-summary, extraction, multi-turn).
# Replace them with 50–200 real samples of your own work. Fields: docs/evals.md.
# Run: tiankong eval run {name} --model smollm2-135m-instruct --model qwen2.5-coder-0.5b-instruct --out runs/
"""


def write_starter(path: str | Path, *, force: bool = False) -> Path:
    """Write the starter set (YAML for ``.yaml``/``.yml``, else JSONL); refuses to overwrite without ``force``."""
    file = Path(path)
    if file.exists() and not file.is_dir() and not force:
        raise ConfigError(f"{file} already exists", hint="pick another path, or pass --force to overwrite it")
    check_output(file, "the eval set path")  # a folder, an unwritable place: one line, not an OSError
    if file.suffix.lower() in (".yaml", ".yml"):
        import yaml

        body = yaml.safe_dump({"items": STARTER}, sort_keys=False, allow_unicode=True, width=110,
                              default_flow_style=None)
        file.write_text(HEADER.format(name=file.name) + body, encoding="utf-8")
    else:
        file.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in STARTER), encoding="utf-8")
    load_set(file)  # what we write must load
    return file
