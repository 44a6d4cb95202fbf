"""JSONSchemaBench coverage through `tiankong serve` with its default settings (issue 22's acceptance).

`tiankong serve` is started here exactly as a user starts it — no flags but a free loopback port, so the default
model, 2 slots of 2,048 tokens, and the default admission — and stopped at the end. Every development schema is
sent as the chat request a user writes: ``response_format`` json_schema (strict), ``max_tokens`` 1024,
temperature 0, and the schema in the user's own message too (as ``structured_compliance.py`` sends it to the raw
engine) — or, with ``--schema-only-in-response-format``, only in ``response_format`` (kept in files of its own).
Every 200 answer is validated here against the original schema with ``jsonschema`` (its own draft, formats
checked). Resumable: one JSONL line per schema in ``--results``; a re-run skips schemas already measured.

    .venv/bin/python benchmarks/serve_coverage.py --results benchmarks/results/structured/serve-defaults [-v]
        [--limit N] [--report-only]

Printed: coverage (valid answers / schemas), compliance (valid / answers returned as success), silent failures,
the refusals by error type and by source, and — for every request refused as too long — whether the user's own
prompt, without anything tiankong adds, already reaches the slot's context (measured with the default model's
chat template and tokenizer; ``alone.json``), with the coverage of the requests that fit alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from serving import serve
from structured_compliance import COMMIT, MAX_SCHEMA_CHARS, PROMPT, error_of, load, timed_chat, valid

from tiankong.engine import EngineConfig, EngineProcess
from tiankong.engine.process import free_port
from tiankong.models import DEFAULT_MODEL, model_path

SLOTS = 2  # `tiankong serve`'s default; the client sends at most this many requests at once
SLOT_CTX = 2048  # `tiankong serve`'s default tokens per slot
MAX_TOKENS = 1024
DEADLINE_S = 1800.0


def start_serve(port: int, home: Path) -> subprocess.Popen[bytes]:
    # no config file, so a developer's own config cannot change "the defaults"; models and caches stay shared
    env = {key: value for key, value in os.environ.items() if key not in ("TIANKONG_MODEL",)}
    env["TIANKONG_CONFIG"] = str(home / "absent.toml")
    return serve([], port, env)


def user_messages(schema: Any, in_message: bool = True) -> list[dict[str, str]]:
    """The user's own messages: the schema in their message, as ``structured_compliance.py`` sends it (or, with
    ``in_message`` false, only in ``response_format``, as an OpenAI user writes it)."""
    if not in_message:
        return [{"role": "user", "content": PROMPT}]
    text = json.dumps(schema, separators=(",", ":"))[:MAX_SCHEMA_CHARS]
    return [{"role": "user", "content": f"{PROMPT}\nSchema: {text}"}]


async def call(http: httpx.AsyncClient, url: str, schema: Any, in_message: bool) -> dict[str, Any]:
    body = {"messages": user_messages(schema, in_message), "max_tokens": MAX_TOKENS, "temperature": 0, "seed": 42,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema, "strict": True}}}
    answer, elapsed = await timed_chat(http, url, body)
    data = answer.json()
    if answer.status_code != 200:
        kind, code, message = error_of(data)
        return {"outcome": "refused", "status": answer.status_code, "type": kind, "code": code, "message": message,
                "s": elapsed}
    content = data["choices"][0]["message"]["content"]
    extension = data.get("tiankong", {})
    ok = valid(schema, content)
    return {"outcome": "valid" if ok else "silent_failure", "s": elapsed, "attempts": extension.get("attempts"),
            "path": extension.get("path"), "schema_in_prompt": extension.get("schema_in_prompt"),
            **({} if ok else {"content": content[:2000]})}


def alone_file(store: Path) -> Path:
    """Where the too-long requests' own token counts for ``store``'s request shape are kept."""
    return store.with_name(store.stem.replace("serve-defaults", "alone") + ".json")


def measure_alone(rows: list[dict[str, Any]], done: list[dict[str, Any]], store: Path, in_message: bool) -> None:
    """For every request refused as too long: its prompt tokens without anything tiankong adds (the user's
    messages under the default model's chat template, tokenized as llama-server does), stored in ``alone.json``.
    llama-server refuses a prompt of at least its slot's context (``tiankong serve``: 2,048 tokens)."""
    path = alone_file(store)
    known: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
    schemas = {row["id"]: row["schema"] for row in rows}
    todo = [i["id"] for i in done if i.get("type") == "context_length_exceeded" and i["id"] not in known]
    if not todo:
        return
    with EngineProcess(EngineConfig(model=model_path(DEFAULT_MODEL), ctx=SLOT_CTX, slots=1)) as engine:
        for key in todo:
            messages = user_messages(schemas[key], in_message)
            templated = httpx.post(f"{engine.url}/apply-template", json={"messages": messages},
                                   timeout=60).json()["prompt"]
            tokens = httpx.post(f"{engine.url}/tokenize", json={"content": templated, "add_special": True,
                                                                "parse_special": True}, timeout=60).json()["tokens"]
            known[key] = len(tokens)
    path.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")


def report(rows: list[dict[str, Any]], done: list[dict[str, Any]], alone: dict[str, int], in_message: bool) -> str:
    subset = {row["id"]: row["subset"] for row in rows}
    counts = Counter(item["outcome"] for item in done)
    answered = counts["valid"] + counts["silent_failure"]
    too_long = [i["id"] for i in done if i.get("type") == "context_length_exceeded"]
    over_alone = [key for key in too_long if alone.get(key, 0) >= SLOT_CTX]
    fits = len(done) - len(over_alone)
    lines = [f"measured {len(done)} of {len(rows)} schemas through `tiankong serve` (defaults, max_tokens "
             f"{MAX_TOKENS}; the schema {'in the user message and ' if in_message else 'only '}in response_format)",
             f"coverage {counts['valid'] / max(1, len(done)):.3f}  compliance "
             f"{counts['valid'] / max(1, answered):.3f}  silent failures {counts['silent_failure']}  "
             f"refused {counts['refused']}  mean latency {sum(i['s'] for i in done) / max(1, len(done)):.1f} s",
             f"requests refused as too long: {len(too_long)}, of which {len(over_alone)} are too long without "
             f"anything tiankong adds (the user's own prompt >= {SLOT_CTX} tokens; {len(too_long) - len(over_alone)}"
             f" refused because of tiankong's additions or not measured); coverage of the {fits} requests that fit "
             f"the engine's context alone: {counts['valid'] / max(1, fits):.3f}",
             "refusals by type: " + json.dumps(Counter(f"{i['type']}/{i.get('code')}" for i in done
                                                       if i["outcome"] == "refused")),
             "schema in the prompt: " + json.dumps(Counter(str(i.get("schema_in_prompt")) for i in done
                                                           if i["outcome"] != "refused"))]
    by_source: dict[str, list[dict[str, Any]]] = {}
    for item in done:
        by_source.setdefault(subset.get(item["id"], "?"), []).append(item)
    for source in sorted(by_source):
        items = by_source[source]
        valid_n = sum(1 for i in items if i["outcome"] == "valid")
        lines.append(f"  {source:<18} n={len(items):3d}  coverage {valid_n / len(items):.3f}")
    for item in done:
        if item["outcome"] != "valid":
            lines.append(f"  {item['id']}: {item['outcome']} {item.get('type', '')} {item.get('message', '')[:160]}")
    return "\n".join(lines)


async def run(rows: list[dict[str, Any]], store: Path, verbose: bool, in_message: bool) -> None:
    seen = {json.loads(line)["id"] for line in store.read_text().splitlines() if line.strip()} \
        if store.exists() else set()
    todo = [row for row in rows if row["id"] not in seen]
    if not todo:
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as home:
        proc = start_serve(port, Path(home))
        url = f"http://127.0.0.1:{port}"
        gate = asyncio.Semaphore(SLOTS)
        try:
            async with httpx.AsyncClient(timeout=DEADLINE_S) as http:
                async def one(row: dict[str, Any]) -> None:
                    async with gate:
                        item = {"id": row["id"], **await call(http, url, row["schema"], in_message), "commit": COMMIT}
                    with store.open("a") as handle:
                        handle.write(json.dumps(item) + "\n")
                    if verbose:
                        print(f"  {row['id']}: {item['outcome']} {item.get('type', '')} {item['s']:.1f}s",
                              flush=True)

                await asyncio.gather(*(one(row) for row in todo))
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="folder for per-schema results (resumable)")
    parser.add_argument("--limit", type=int, default=None, help="stratified sample size (default: all 320)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--schema-only-in-response-format", action="store_true",
                        help="the user's message without the schema (kept apart: serve-defaults-rf-only.jsonl)")
    args = parser.parse_args()
    rows = load(args.limit)
    args.results.mkdir(parents=True, exist_ok=True)
    in_message = not args.schema_only_in_response_format
    store = args.results / ("serve-defaults.jsonl" if in_message else "serve-defaults-rf-only.jsonl")
    if not args.report_only:
        asyncio.run(run(rows, store, args.verbose, in_message))
    ids = {row["id"] for row in rows}
    done = [json.loads(line) for line in store.read_text().splitlines() if line.strip()] if store.exists() else []
    done = [item for item in done if item["id"] in ids]
    measure_alone(rows, done, store, in_message)
    alone_path = alone_file(store)
    text = report(rows, done, json.loads(alone_path.read_text()) if alone_path.exists() else {}, in_message)
    print(text)
    (args.results / ("report.txt" if in_message else "report-rf-only.txt")).write_text(text + "\n")


if __name__ == "__main__":
    main()
