"""Structured output speed: raw llama-server json_schema vs tiankong's whole-answer grammar vs fast-forward.

The same texts through three paths, in one run, on one engine (default model, 4 slots):

* ``raw``     — llama-server ``/v1/chat/completions`` with ``response_format: json_schema`` and a one-line
  system message ("Extract … as JSON"): what a user of llama-server writes;
* ``grammar`` — ``Client.extract`` with ``fast_forward = False`` (tiankong before fast-forward: validated,
  retried, the whole answer decoded under the schema's grammar);
* ``ff``      — ``Client.extract`` (fast-forward: forced text prefilled, free values decoded; the planner may
  choose the grammar path per schema, and the table says which ran).

Every item's text is distinct (no prompt-cache hits across items). Printed per schema and concurrency: items/s,
output tokens decoded and fast-forwarded per item, validity against the schema (jsonschema), and the ratios
to raw. Texts are generated from templates (a speed benchmark: the figure is time per valid answer).

    .venv/bin/python benchmarks/extract_speed.py [--items 8] [--concurrency 1 4] [--model NAME]
        [--out benchmarks/results/structured/extract-speed.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
import jsonschema

import tiankong.structured.fastforward  # noqa: F401  (imported lazily by flow.py: load it before the run)
from tiankong import AsyncClient
from tiankong.engine import EngineConfig, EngineProcess
from tiankong.errors import TiankongError
from tiankong.models import DEFAULT_MODEL, model_path

DEV = Path(__file__).resolve().parents[1] / "tests" / "data" / "jsonschemabench-dev" / "schemas.jsonl"
SERVICES = ["auth", "billing", "search", "gateway", "payments", "mailer", "scheduler", "cache", "indexer"]
NAMES = ["Ann Lee", "Bo Chen", "Carla Diaz", "Dev Patel", "Eva Novak", "Femi Ade", "Gus Berg", "Hana Sato"]
CITIES = ["Lyon", "Osaka", "Quito", "Turku", "Accra", "Perth", "Cork", "Pune"]


def s(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


SCHEMAS: dict[str, dict[str, Any]] = {
    "log_event": {"type": "object", "properties": {
        "level": s(enum=["DEBUG", "INFO", "WARN", "ERROR"]), "service": s(), "message": s(),
        "duration_ms": {"type": "integer"}}, "required": ["level", "service", "message", "duration_ms"]},
    "ticket_flags": {"type": "object", "properties": {
        "category": s(enum=["billing", "bug", "account", "feature_request", "other"]),
        "priority": s(enum=["low", "normal", "high", "urgent"]),
        "sentiment": s(enum=["negative", "neutral", "positive"]), "needs_reply": {"type": "boolean"},
        "language": s(enum=["en", "zh", "de", "fr"]), "channel": s(enum=["email", "chat", "phone"])},
        "required": ["category", "priority", "sentiment", "needs_reply", "language", "channel"]},
    "contact_nested": {"type": "object", "properties": {
        "person": {"type": "object", "properties": {"name": s(), "title": s()}, "required": ["name", "title"]},
        "address": {"type": "object", "properties": {"city": s(), "country": s()}, "required": ["city", "country"]},
        "vip": {"type": "boolean"}}, "required": ["person", "address", "vip"]},
    "order_lines": {"type": "object", "properties": {
        "customer": s(), "lines": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
            "type": "object", "properties": {"sku": s(), "quantity": {"type": "integer"}},
            "required": ["sku", "quantity"]}}}, "required": ["customer", "lines"]},
    "long_strings": {"type": "object", "properties": {"subject": s(maxLength=120), "summary": s(maxLength=300)},
                     "required": ["subject", "summary"]},
    "measurements": {"type": "object", "properties": {
        "temperature_c": {"type": "number"}, "humidity_pct": {"type": "number"}, "pressure_hpa": {"type": "number"},
        "wind_kmh": {"type": "number"}, "station": s()},
        "required": ["temperature_c", "humidity_pct", "pressure_hpa", "wind_kmh", "station"]},
}
#: JSONSchemaBench development schemas (the copy in ``tests/data``) used as a set of their own: a generic prompt each
JSB_SAMPLE = 8


def text_for(kind: str, rng: random.Random, index: int) -> str:
    name, city, service = rng.choice(NAMES), rng.choice(CITIES), rng.choice(SERVICES)
    if kind == "log_event":
        level = rng.choice(["DEBUG", "INFO", "WARN", "ERROR"])
        return (f"2026-11-{index % 28 + 1:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z {level} "
                f"{service}: request {rng.randint(100, 9999)} for user {rng.randint(1, 999)} finished in "
                f"{rng.randint(2, 900)}ms")
    if kind == "ticket_flags":
        issue = rng.choice(["I was charged twice for my subscription", "the export button crashes the app",
                            "I cannot log in after resetting my password", "please add dark mode"])
        return f"From {name} via email, ticket {index}: Hello, {issue} since {rng.randint(2, 9)} days. Please help."
    if kind == "contact_nested":
        title = rng.choice(["CTO", "head of sales", "data engineer", "buyer"])
        return f"Met {name}, {title} at a firm in {city}, {rng.choice(['France', 'Japan', 'Peru'])}; key account."
    if kind == "order_lines":
        items = ", ".join(f"{rng.randint(1, 9)} x SKU-{rng.randint(10, 99)}" for _ in range(rng.randint(1, 3)))
        return f"Order #{index} from {name}: {items}. Ship to {city}."
    if kind == "long_strings":
        return (f"Hi team, {name} here from {city}. Our {service} integration has been failing since "
                f"{rng.randint(1, 28)} November: requests time out after {rng.randint(5, 60)} seconds and the "
                f"dashboard shows error {rng.randint(400, 599)}. We tried restarting the worker and rotating keys. "
                "Could someone look at it this week? It blocks our month-end reporting.")
    return (f"Station {city}-{index}: {rng.uniform(-5, 35):.1f} C, humidity {rng.uniform(10, 99):.0f}%, "
            f"{rng.uniform(980, 1040):.1f} hPa, wind {rng.uniform(0, 80):.1f} km/h.")


def dev_sample(count: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DEV.read_text().splitlines()]
    rng = random.Random(0)
    return [row["schema"] for row in rng.sample(rows, count)]


def valid(schema: dict[str, Any], data: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    return not any(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(data))


async def raw_one(http: httpx.AsyncClient, url: str, schema: dict[str, Any], text: str) -> dict[str, Any]:
    body = {"messages": [{"role": "system", "content": "Extract the information from the user's text as JSON."},
                         {"role": "user", "content": text}],
            "temperature": 0, "seed": 42, "max_tokens": 1024,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    answer = (await http.post(url + "/v1/chat/completions", json=body)).json()
    try:
        data = json.loads(answer["choices"][0]["message"]["content"])
    except (KeyError, ValueError):
        return {"valid": False, "decoded": 0, "forced": 0, "path": "raw"}
    return {"valid": valid(schema, data), "decoded": answer["usage"]["completion_tokens"], "forced": 0, "path": "raw"}


async def tiankong_one(client: AsyncClient, schema: dict[str, Any], text: str) -> dict[str, Any]:
    try:
        result = await client.extract_result(text, schema)
    except TiankongError as exc:
        return {"valid": False, "decoded": 0, "forced": 0, "path": "refused", "error": type(exc).__name__}
    return {"valid": valid(schema, result.data), "decoded": result.decoded_tokens, "forced": result.forced_tokens,
            "path": result.path, "reason": result.fallback_reason}


PATHS = ("raw", "grammar", "ff")


async def measure(url: str, schemas: list[dict[str, Any]], texts: dict[str, list[str]],
                  concurrency: int, raw_url: str | None = None) -> dict[str, dict[str, Any]]:
    """The three paths interleaved: round after round of ``concurrency`` items each, the paths' order rotating,
    so that drift on a shared machine falls on all of them alike. ``raw_url``: raw's own engine (default: ``url``)."""
    raw_url = raw_url or url
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    seconds = dict.fromkeys(PATHS, 0.0)
    async with httpx.AsyncClient(timeout=600) as http, AsyncClient(url, timeout_s=600) as quick, \
            AsyncClient(url, timeout_s=600) as whole:
        whole.fast_forward = False

        async def one(path: str, schema: dict[str, Any], text: str) -> dict[str, Any]:
            if path == "raw":
                return await raw_one(http, raw_url, schema, text)
            return await tiankong_one(quick if path == "ff" else whole, schema, text)

        # one item per path first, not counted: the engine's first requests (weights paged in, a grammar built the
        # first time) would otherwise fall on whichever path the first round starts with
        for path in PATHS:
            await one(path, schemas[0], "warm-up: " + texts[path][0])
        for turn, start in enumerate(range(0, len(schemas), concurrency)):
            for path in PATHS[turn % 3:] + PATHS[:turn % 3]:
                batch = list(zip(schemas[start:start + concurrency], texts[path][start:start + concurrency],
                                 strict=True))
                began = time.perf_counter()
                rows[path] += await asyncio.gather(*(one(path, sch, t) for sch, t in batch))
                seconds[path] += time.perf_counter() - began
    return {path: summary(rows[path], seconds[path]) for path in PATHS}


def summary(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    n = len(rows)
    return {"items_per_s": n / seconds, "valid": sum(r["valid"] for r in rows) / n,
            "decoded_per_item": sum(r["decoded"] for r in rows) / n,
            "forced_per_item": sum(r["forced"] for r in rows) / n, "paths": sorted({r["path"] for r in rows}),
            "reasons": sorted({r.get("reason", "") for r in rows} - {""})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--items", type=int, default=8, help="texts per schema and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--only", nargs="*", default=None, help="measure only these sets")
    parser.add_argument("--out", default="benchmarks/results/structured/extract-speed.json")
    parser.add_argument("--engine-arg", action="append", default=[], help="an extra llama-server argument "
                        "(repeatable; e.g. --engine-arg=--poll --engine-arg=0)")
    parser.add_argument("--spec-type", default=None, help="speculative decoding on tiankong's engine "
                        "(EngineConfig.spec_type, e.g. ngram-simple; its knobs through --engine-arg); raw then runs "
                        "on a second engine of its own, as a user starts llama-server (no speculation, no extra args)")
    args = parser.parse_args()
    sets = [(name, [schema], name) for name, schema in SCHEMAS.items()]
    sets.append(("jsonschemabench", dev_sample(JSB_SAMPLE), "jsb"))
    sets = [entry for entry in sets if args.only is None or entry[0] in args.only]
    config = EngineConfig(model=model_path(args.model), ctx=2048 * args.slots, slots=args.slots,
                          spec_type=args.spec_type, extra_args=list(args.engine_arg))
    results: list[dict[str, Any]] = []
    plain = EngineConfig(model=model_path(args.model), ctx=2048 * args.slots, slots=args.slots)
    with EngineProcess(config) as engine, (EngineProcess(plain) if args.spec_type else nullcontext()) as raw_engine:
        raw_url = raw_engine.url if raw_engine is not None else None
        for name, schemas, kind in sets:
            for concurrency in args.concurrency:
                rng = random.Random(f"{name}-{concurrency}")
                row: dict[str, Any] = {"schema": name, "concurrency": concurrency}
                # distinct texts per path too: no item is answered from another path's prompt cache
                texts = {path: [text_for(kind, rng, i) if kind != "jsb" else
                                f"Give a realistic example JSON document for this schema. (case {path}-{i})"
                                for i in range(args.items)] for path in PATHS}
                picked = [schemas[i % len(schemas)] for i in range(args.items)]
                row.update(asyncio.run(measure(engine.url, picked, texts, concurrency, raw_url)))
                row["grammar_vs_raw"] = row["grammar"]["items_per_s"] / row["raw"]["items_per_s"]
                row["ff_vs_raw"] = row["ff"]["items_per_s"] / row["raw"]["items_per_s"]
                results.append(row)
                print(line(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"model": args.model, "items": args.items, "slots": args.slots,
                                          "engine_args": args.engine_arg, "spec_type": args.spec_type,
                                          "raw_engine": "own, plain" if args.spec_type else "shared",
                                          "results": results}, indent=1))
    table = "\n".join([HEADER, *(line(r) for r in results)])
    Path(args.out).with_suffix(".txt").write_text(f"model {args.model}, {args.items} items per cell, "
                                                  f"{args.slots} slots, engine args {args.engine_arg}, "
                                                  f"spec_type {args.spec_type}\n"
                                                  f"{table}\n")
    print(table)


HEADER = (f"{'schema':16} {'c':>2} | {'raw it/s':>8} {'dec':>5} {'ok':>5} | {'grammar':>8} {'dec':>5} {'ok':>5} | "
          f"{'ff it/s':>8} {'dec':>5} {'fwd':>5} {'ok':>5} {'path':18} | {'gram/raw':>8} {'ff/raw':>7}")


def line(row: dict[str, Any]) -> str:
    raw, grammar, ff = row["raw"], row["grammar"], row["ff"]
    return (f"{row['schema']:16} {row['concurrency']:>2} | {raw['items_per_s']:8.2f} {raw['decoded_per_item']:5.1f} "
            f"{raw['valid']:5.2f} | {grammar['items_per_s']:8.2f} {grammar['decoded_per_item']:5.1f} "
            f"{grammar['valid']:5.2f} | {ff['items_per_s']:8.2f} {ff['decoded_per_item']:5.1f} "
            f"{ff['forced_per_item']:5.1f} {ff['valid']:5.2f} {'+'.join(ff['paths']):18} | "
            f"{row['grammar_vs_raw']:8.2f} {row['ff_vs_raw']:7.2f}")


if __name__ == "__main__":
    sys.exit(main())
