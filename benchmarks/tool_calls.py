"""Tool calls on the Berkeley Function Calling Leaderboard's data: raw llama-server (``--jinja``) vs the gateway.

    .venv/bin/python benchmarks/tool_calls.py [--model NAME] [--n 100] [--slots 4] [--results DIR]

Data: the ``bfcl-eval==2026.3.23`` wheel (fetched with pip into the user cache; nothing is installed): the
"simple" (``BFCL_v4_simple_python``), "multiple" and "parallel" categories with their possible answers, ``--n``
questions each in a seeded order (the first 50 a seeded sample, the rest shuffled after them, so a larger ``--n``
keeps what was measured). Functions are converted to OpenAI tools as BFCL does for OpenAI models
(``dict`` → object, ``float`` → number, ``.`` in names → ``_``) and every answer is scored by BFCL's own
``ast_checker`` (imported from the wheel; its model table, which pulls in every vendor's SDK, is stubbed to
"names had . replaced by _").

The same engine answers each question twice, back to back: straight (``tools``, ``tool_choice: auto`` — what a
llama-server user does; the chat template's tool-call parser reads the answer) and through the gateway. Per
side: AST accuracy, answers with no call, and **invalid calls returned as success** (a 200 whose call names an
undeclared function, has arguments that are not JSON, or arguments not valid against the function's
parameters). Resumable: one JSONL line per question in ``--results``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import re
import sys
import time
import types
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.models import DEFAULT_MODEL, resolve_installed

sys.path.insert(0, str(Path(__file__).parent))
import datasets  # noqa: E402
from structured_compliance import start_gateway  # noqa: E402 (the same in-process gateway, deadline 1800 s)

BFCL = "bfcl-eval==2026.3.23"
CATEGORIES = {"simple": "BFCL_v4_simple_python", "multiple": "BFCL_v4_multiple", "parallel": "BFCL_v4_parallel"}
EVIDENCE_CHARS = 2000
MAX_TOKENS = 256  # a call is short; a reply in words is a miss on these categories either way
DEADLINE_S = 1800.0  # the gateway's deadline (structured_compliance.GATEWAY_DEADLINE_S): shared cores are slow
FIRST_SAMPLE = 50


def bfcl_dir() -> Path:
    """The wheel, unpacked once into the user cache."""
    return datasets.unpacked_wheel(BFCL)


def checker() -> Any:
    """BFCL's ``ast_checker``, its vendor model table stubbed (see the module docstring)."""
    sys.path.insert(0, str(bfcl_dir()))

    class Config:
        underscore_to_dot = True

    class AnyModel(dict[str, Any]):
        def __getitem__(self, key: str) -> Config:
            return Config()

    stub = types.ModuleType("bfcl_eval.constants.model_config")
    stub.MODEL_CONFIG_MAPPING = AnyModel()  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = stub
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # type: ignore[import-not-found]

    return ast_checker


def load(category: str, n: int, seed: int = 7) -> list[dict[str, Any]]:
    data = bfcl_dir() / "bfcl_eval" / "data"
    name = CATEGORIES[category]
    questions = [json.loads(line) for line in (data / f"{name}.json").read_text().splitlines() if line.strip()]
    answers = {row["id"]: row["ground_truth"] for row in
               (json.loads(line) for line in (data / "possible_answer" / f"{name}.json").read_text().splitlines()
                if line.strip())}
    rows = [{**q, "category": category, "ground_truth": answers[q["id"]]} for q in questions]
    # the first FIRST_SAMPLE are the seeded sample measured first; the rest follow in a seeded order, so a larger
    # --n keeps every question already measured (random.sample's picks change with its size)
    first = random.Random(seed).sample(rows, min(FIRST_SAMPLE, len(rows)))
    chosen = {row["id"] for row in first}
    rest = [row for row in rows if row["id"] not in chosen]
    random.Random(seed).shuffle(rest)
    return [*first, *rest][:n]


MAPPING = {"integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
           "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
           "tuple": "array", "any": "string"}


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's ``_cast_to_openai_type`` for Python functions (model_handler/utils.py), restated: its module
    imports tree-sitter parsers this benchmark does not need."""
    for value in properties.values():
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = MAPPING.get(kind, "string") if kind is not None else "string"
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = MAPPING.get(items.get("type"), "string")
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = MAPPING.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast(items["properties"])
    return properties


def to_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for function in copy.deepcopy(functions):
        function["name"] = function["name"].replace(".", "_")
        function["parameters"]["type"] = "object"
        function["parameters"]["properties"] = _cast(function["parameters"].get("properties", {}))
        tools.append({"type": "function", "function": function})
    return tools


def invalid(calls: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Why a returned call is not a valid call of a declared function ("" when every call is)."""
    declared = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in calls:
        name = call.get("function", {}).get("name")
        if name not in declared:
            return f"undeclared function {name!r}"
        try:
            arguments = json.loads(call["function"].get("arguments") or "")
        except (TypeError, ValueError):
            return "arguments are not JSON"
        errors = list(jsonschema.Draft202012Validator(declared[name]).iter_errors(arguments))
        if errors:
            return f"arguments not valid: {errors[0].message[:160]}"
    return ""


async def ask(http: httpx.AsyncClient, url: str, row: dict[str, Any], tools: list[dict[str, Any]],
              check: Any) -> dict[str, Any]:
    body = {"messages": row["question"][0], "tools": tools, "tool_choice": "auto", "temperature": 0, "seed": 42,
            "max_tokens": MAX_TOKENS}
    started = time.monotonic()
    answer = await http.post(f"{url}/v1/chat/completions", json=body)
    elapsed = time.monotonic() - started
    if answer.status_code != 200:
        error = answer.json().get("error", {}) if answer.headers.get("content-type", "").startswith(
            "application/json") else {}
        return {"outcome": "refused", "status": answer.status_code, "type": error.get("type"),
                "message": str(error.get("message", answer.text))[:300], "s": elapsed, "ast": False}
    message = answer.json()["choices"][0]["message"]
    extension = answer.json().get("tiankong")
    calls = message.get("tool_calls") or []
    if not calls:
        return {"outcome": "no_call", "content": str(message.get("content"))[:EVIDENCE_CHARS], "s": elapsed,
                "ast": False,
                "tiankong": extension}
    why = invalid(calls, tools)
    if why:
        return {"outcome": "invalid_success", "why": why, "calls": calls, "s": elapsed, "ast": False}
    output = [{c["function"]["name"]: json.loads(c["function"]["arguments"])} for c in calls]
    from bfcl_eval.constants.enums import Language  # type: ignore[import-not-found]

    verdict = check(row["function"], output, row["ground_truth"], Language.PYTHON, row["category"], "gpt-4o-FC")
    return {"outcome": "call", "ast": bool(verdict["valid"]), "calls": output, "s": elapsed, "tiankong": extension,
            **({} if verdict["valid"] else {"error": str(verdict.get("error"))[:300]})}


def done(store: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for line in store.read_text().splitlines() if store.exists() else []:
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue
        found[item["id"]] = item
    return found


SKIPPED: dict[str, Any] = {"outcome": "skipped", "ast": False, "s": 0.0}


async def run(model: str, rows: list[dict[str, Any]], slots: int, store: Path,
              raw_from: Path | None = None, raw: bool = True) -> list[dict[str, Any]]:
    """``raw_from``: a store of an earlier run whose raw answers are reused (only the gateway is asked again);
    ``raw=False``: the raw side is not asked at all (development of the gateway's path: its rows say "skipped")."""
    ask_raw = raw
    measured = done(store)
    earlier = done(raw_from) if raw_from is not None else {}
    todo = [row for row in rows if row["id"] not in measured]
    check = checker()
    if todo:
        record = resolve_installed(model)
        engine = EngineProcess(EngineConfig(model=record.path, ctx=slots * 4096, slots=slots), locate_engine())
        engine.start()
        gateway, server = start_gateway(engine, record.name, slots)
        gate = asyncio.Semaphore(slots)
        try:
            async with httpx.AsyncClient(timeout=DEADLINE_S + 60) as http:
                async def one(row: dict[str, Any]) -> None:
                    async with gate:
                        tools = to_tools(row["function"])
                        raw = earlier[row["id"]]["raw"] if row["id"] in earlier else \
                            await ask(http, engine.url, row, tools, check) if ask_raw else dict(SKIPPED)
                        through = await ask(http, gateway, row, tools, check)
                        item = {"id": row["id"], "category": row["category"], "raw": raw, "gateway": through,
                                "model": record.name}
                        measured[row["id"]] = item
                        with store.open("a") as handle:
                            handle.write(json.dumps(item, ensure_ascii=False) + "\n")
                        print(f"  {row['id']}: raw {raw['outcome']} ast={raw['ast']} {raw['s']:.1f}s | gateway "
                              f"{through['outcome']} ast={through['ast']} {through['s']:.1f}s", flush=True)

                await asyncio.gather(*(one(row) for row in todo))
        finally:
            server.should_exit = True
            engine.stop()
    return [measured[row["id"]] for row in rows]


FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def calls_in_text(content: str) -> list[dict[str, Any]] | None:
    """Calls a user could parse out of a plain-text answer: JSON ({name, arguments} or a list of them), in a code
    fence or bare. None when there is none."""
    texts = FENCE.findall(content) or [content]
    found: list[dict[str, Any]] = []
    for text in texts:
        try:
            value = json.loads(text.strip())
        except ValueError:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("arguments"),
                                                                                           dict):
                found.append({item["name"]: item["arguments"]})
    return found or None


def text_parsed(item: dict[str, Any], row: dict[str, Any], check: Any) -> dict[str, Any]:
    """The raw side again, counting calls written as JSON text (what a user could parse) as calls."""
    raw = item["raw"]
    if raw["outcome"] != "no_call":
        return raw
    calls = calls_in_text(raw.get("content") or "")
    if calls is None:
        return raw
    from bfcl_eval.constants.enums import Language

    verdict = check(row["function"], calls, row["ground_truth"], Language.PYTHON, row["category"], "gpt-4o-FC")
    return {**raw, "outcome": "call_in_text", "ast": bool(verdict["valid"])}


def table(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for category in (*CATEGORIES, "all"):
        rows = [i for i in items if category in ("all", i["category"])]
        for side in ("raw", "raw_text_parsed", "gateway"):
            results = [r[side] for r in rows]
            if results and all(r["outcome"] == "skipped" for r in results):
                continue  # --no-raw: not asked, not a score
            n = len(results)
            out.append({"category": category, "side": side, "n": n,
                        "ast_accuracy": sum(r["ast"] for r in results) / n if n else 0.0,
                        "invalid_success": sum(r["outcome"] == "invalid_success" for r in results),
                        "no_call": sum(r["outcome"] == "no_call" for r in results),
                        "refused": sum(r["outcome"] == "refused" for r in results),
                        "mean_s": sum(r["s"] for r in results) / n if n else 0.0})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--n", type=int, default=100, help="questions per category (seeded sample)")
    parser.add_argument("--start", type=int, default=0, help="skip the first START of each category's order: "
                        "positions START.. are development questions (the held-out figures read 0–99)")
    parser.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated (default: all three)")
    parser.add_argument("--take", type=int, default=None, help="score only the first TAKE of each category's "
                        "--n sample (nested: a later run with a larger TAKE resumes)")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/structured/tool-calls"))
    parser.add_argument("--raw-from", type=Path, default=None, help="reuse the raw side of this earlier store "
                        "(the same engine build and model); only the gateway is asked again")
    parser.add_argument("--store", default=None, help="the JSONL file's name under --results (default: the model)")
    parser.add_argument("--interleave", action="store_true", help="ask the categories in turn (a run cut short "
                        "still has every category)")
    parser.add_argument("--no-raw", action="store_true", help="ask only the gateway (development runs)")
    parser.add_argument("--score-only", action="store_true", help="score what the store holds (a run cut short)")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    per = [load(category, args.start + args.n)[args.start:][:args.take] for category in args.categories.split(",")]
    rows = [row for group in per for row in group]
    if args.interleave:
        rows = [group[i] for i in range(max(map(len, per))) for group in per if i < len(group)]
    store = args.results / (args.store or f"{args.model.replace(':', '_')}.jsonl")
    if args.score_only:
        rows = [row for row in rows if row["id"] in done(store)]
    items = asyncio.run(run(args.model, rows, args.slots, store, args.raw_from, not args.no_raw))
    check = checker()
    for item, row in zip(items, rows, strict=True):
        item["raw_text_parsed"] = text_parsed(item, row, check)
    summary = table(items)
    print(f"\n{'category':<10} {'side':<16} {'n':>4} {'AST acc':>8} {'invalid 200':>12} {'no call':>8} "
          f"{'refused':>8} {'mean s':>7}")
    for s in summary:
        print(f"{s['category']:<10} {s['side']:<16} {s['n']:>4} {s['ast_accuracy']:>8.3f} {s['invalid_success']:>12} "
              f"{s['no_call']:>8} {s['refused']:>8} {s['mean_s']:>7.2f}")
    summary_file = store.with_suffix(".summary.json") if args.store else args.results / "summary.json"
    summary_file.write_text(json.dumps({"model": args.model, "sample_per_category": args.n,
                                        "scored_per_category": args.take or args.n,
                                        "data": BFCL, "rows": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
