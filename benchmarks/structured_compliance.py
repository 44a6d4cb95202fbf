"""JSONSchemaBench through the tiankong gateway vs. the raw llama-server, side by side in one run.

    .venv/bin/python benchmarks/structured_compliance.py [--model NAME ...] [--limit N] [--slots 2] [--json OUT]
        [--results DIR]   # resumable: one JSONL line per schema; a re-run skips schemas already measured
        [--report-only]   # tables for what --results holds so far, without starting an engine

For every schema, the same engine gets the same request twice, back to back: once directly
(``response_format: json_schema``, max_tokens 512 — what a user of llama-server does) and once through the
tiankong gateway (validated, bounded, retried, fail-closed). Every 200 answer is validated here against the
original schema with ``jsonschema`` (its own draft, formats checked).

* coverage     — schemas that got a valid answer / all schemas
* compliance   — valid answers / answers returned as success (HTTP 200)
* silent fails — answers returned as success that are not valid
* truncations  — raw: finish_reason=length; gateway: truncated_output errors
* retries      — gateway attempts beyond the first
* minimal      — gateway answers from the last try after truncation (required properties only; still valid)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import uvicorn
from jsonschema.validators import validator_for

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.engine.process import free_port
from tiankong.gateway import GatewayState, create_app
from tiankong.models import DEFAULT_MODEL, TEST_MODEL, resolve_installed

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "jsonschemabench-dev" / "schemas.jsonl"
PROMPT = "Generate a realistic example JSON document that matches the JSON Schema."
MAX_SCHEMA_CHARS = 12000
GATEWAY_DEADLINE_S = 1800.0
EVIDENCE_CHARS = 2000  # the start of every answer returned as success that does not validate


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


COMMIT = _commit()


def load(limit: int | None) -> list[dict[str, Any]]:
    """Schemas interleaved round-robin across subsets, so any prefix (an interrupted run) is stratified."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    by_subset: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_subset.setdefault(row["subset"], []).append(row)
    if limit and limit < len(rows):
        per = max(1, limit // len(by_subset))
        return [row for subset in sorted(by_subset) for row in by_subset[subset][:per]]
    queues = [by_subset[subset] for subset in sorted(by_subset)]
    return [queue[i] for i in range(max(map(len, queues))) for queue in queues if i < len(queue)]


def valid(schema: Any, content: str) -> bool:
    try:
        instance = json.loads(content)
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        return not any(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(instance))
    except Exception:  # noqa: BLE001 - unparsable JSON or a schema jsonschema cannot use: not valid
        return False


async def timed_chat(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    """A chat completion and the seconds it took."""
    started = time.monotonic()
    answer = await http.post(f"{url}/v1/chat/completions", json=body)
    return answer, time.monotonic() - started


async def raw_call(http: httpx.AsyncClient, url: str, schema: Any) -> dict[str, Any]:
    text = json.dumps(schema, separators=(",", ":"))[:MAX_SCHEMA_CHARS]
    body = {"messages": [{"role": "user", "content": f"{PROMPT}\nSchema: {text}"}], "max_tokens": 512,
            "temperature": 0, "seed": 42,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    answer, elapsed = await timed_chat(http, url, body)
    if answer.status_code != 200:
        return {"outcome": "rejected", "status": answer.status_code, "s": elapsed}
    choice = answer.json()["choices"][0]
    content = choice["message"]["content"] or ""
    ok = valid(schema, content)
    return {"outcome": "valid" if ok else "silent_failure", "truncated": choice["finish_reason"] == "length",
            "s": elapsed, **({} if ok else {"content": content[:EVIDENCE_CHARS]})}


async def gateway_call(http: httpx.AsyncClient, url: str, schema: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"schema": schema, "strict": True}}}
    answer, elapsed = await timed_chat(http, url, body)
    data = answer.json()
    if answer.status_code != 200:
        kind, _, message = error_of(data)
        outcome = "rejected" if kind in ("invalid_schema", "schema_not_supported") else "refused"
        return {"outcome": outcome, "status": answer.status_code, "type": kind, "s": elapsed,
                "truncated": kind == "truncated_output", "message": message}
    content = data["choices"][0]["message"]["content"]
    ok = valid(schema, content)
    return {"outcome": "valid" if ok else "silent_failure", "retries": data["tiankong"]["attempts"] - 1,
            "minimal": bool(data["tiankong"].get("minimal")), "s": elapsed,
            **({} if ok else {"content": content[:EVIDENCE_CHARS]})}


def error_of(data: dict[str, Any]) -> tuple[str, object, str]:
    """An error body's type, code and (shortened) message."""
    error = data.get("error", {})
    return str(error.get("type", "error")), error.get("code"), str(error.get("message", ""))[:300]


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    counts = Counter(r["outcome"] for r in results)
    answered = counts["valid"] + counts["silent_failure"]
    return {
        "n": len(results), "coverage": counts["valid"] / len(results),
        "compliance": counts["valid"] / answered if answered else 0.0,
        "silent_failures": counts["silent_failure"], "rejected": counts["rejected"], "refused": counts["refused"],
        "truncations": sum(1 for r in results if r.get("truncated")),
        "retries": sum(r.get("retries", 0) for r in results),
        "minimal": sum(1 for r in results if r.get("minimal")),
        "mean_latency_s": statistics.mean(r["s"] for r in results),
        "types": dict(Counter(r.get("type", r["outcome"]) for r in results)),
    }


def start_gateway(engine: EngineProcess, name: str, slots: int) -> tuple[str, uvicorn.Server]:
    port = free_port()
    # the gateway admits as many requests as the engine has slots (what `tiankong serve` configures); its
    # deadline is raised from 600 s: three tries at a 2,048-token answer take longer on a 2-core machine
    state = GatewayState.for_engine(engine, name, max_in_flight=slots, request_timeout_s=GATEWAY_DEADLINE_S)
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return url, server
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("gateway did not start")


def results_file(folder: Path | None, model: str) -> Path | None:
    return folder / f"{model.replace(':', '_')}.jsonl" if folder else None


def done_items(path: Path | None) -> list[dict[str, Any]]:
    """Items already measured (a torn last line from an interrupted run is dropped)."""
    if path is None or not path.exists():
        return []
    items = []
    for line in path.read_text().splitlines():
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return items


async def run_model(name: str, rows: list[dict[str, Any]], slots: int, verbose: bool = False,
                    folder: Path | None = None, report_only: bool = False) -> dict[str, Any]:
    record = resolve_installed(name)
    store = results_file(folder, record.name)
    previous = [item for item in done_items(store) if item["id"] in {row["id"] for row in rows}]
    seen = {item["id"] for item in previous}
    raw: list[dict[str, Any]] = [item["raw"] for item in previous]
    gated: list[dict[str, Any]] = [item["gateway"] for item in previous]
    rows = [row for row in rows if row["id"] not in seen]
    if not rows or report_only:
        return report_for(record.name, raw, gated)
    engine = EngineProcess(EngineConfig(model=record.path, ctx=slots * 8192, slots=slots), locate_engine())
    engine.start()
    gateway_url, server = start_gateway(engine, record.name, slots)
    gate = asyncio.Semaphore(slots)
    try:
        async with httpx.AsyncClient(timeout=GATEWAY_DEADLINE_S + 60) as http:
            async def one(row: dict[str, Any]) -> None:
                async with gate:
                    direct = {"id": row["id"], **await raw_call(http, engine.url, row["schema"])}
                    through = {"id": row["id"], **await gateway_call(http, gateway_url, row["schema"])}
                    raw.append(direct)
                    gated.append(through)
                    if store is not None:
                        with store.open("a") as handle:
                            handle.write(json.dumps({"id": row["id"], "raw": direct, "gateway": through,
                                                     "commit": COMMIT, "slots": slots}) + "\n")
                    done = len(gated)
                    if verbose:
                        print(f"  {row['id']}: raw {direct['outcome']} {direct['s']:.1f}s | gateway "
                              f"{through['outcome']} {through['s']:.1f}s", flush=True)
                    elif done % 20 == 0:
                        print(f"  {name}: {done}/{len(rows)}", flush=True)

            await asyncio.gather(*(one(row) for row in rows))
    finally:
        server.should_exit = True
        engine.stop()
    return report_for(record.name, raw, gated)


def report_for(model: str, raw: list[dict[str, Any]], gated: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": model, "raw": summarise(raw), "gateway": summarise(gated),
            "silent_failure_ids": [r["id"] for r in gated if r["outcome"] == "silent_failure"],
            "items": {"raw": raw, "gateway": gated}}


def print_table(report: dict[str, Any]) -> None:
    header = f"{'model':<36} {'path':<9} {'n':>4} {'coverage':>9} {'compliance':>11} {'silent':>7} " \
             f"{'trunc':>6} {'retries':>8} {'minimal':>8} {'rejected':>9} {'latency s':>10}"
    print(header)
    for run in report["runs"]:
        for path in ("raw", "gateway"):
            s = run[path]
            print(f"{run['model']:<36} {path:<9} {s['n']:>4} {s['coverage']:>9.3f} {s['compliance']:>11.3f} "
                  f"{s['silent_failures']:>7} {s['truncations']:>6} {s['retries']:>8} {s['minimal']:>8} "
                  f"{s['rejected']:>9} "
                  f"{s['mean_latency_s']:>10.2f}")


def print_subsets(report: dict[str, Any]) -> None:
    """Coverage per JSONSchemaBench source, raw vs gateway, and the gateway's refusals by type."""
    for run in report["runs"]:
        print(f"\n{run['model']}: coverage by source (raw / gateway), gateway refusals")
        subsets = sorted({item["id"].split("/")[0] for item in run["items"]["gateway"]})
        for subset in subsets:
            raw = [r for r in run["items"]["raw"] if r["id"].startswith(subset + "/")]
            gated = [r for r in run["items"]["gateway"] if r["id"].startswith(subset + "/")]
            refused = Counter(r.get("type", "") for r in gated if r["outcome"] in ("refused", "rejected"))
            cover = [sum(r["outcome"] == "valid" for r in rows) / len(rows) for rows in (raw, gated)]
            print(f"  {subset:<18} n={len(gated):>3}  {cover[0]:.3f} / {cover[1]:.3f}  {dict(refused) or ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help=f"default: {TEST_MODEL} and {DEFAULT_MODEL}")
    parser.add_argument("--limit", type=int, default=None, help="stratified sample size (default: all 320)")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="write the full report here")
    parser.add_argument("--results", type=Path, default=None,
                        help="folder for per-schema results (resumable; re-runs skip measured schemas)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every schema's outcome")
    parser.add_argument("--report-only", action="store_true",
                        help="print the tables for the schemas already in --results; start nothing")
    args = parser.parse_args()
    rows = load(args.limit)
    names = args.model or [TEST_MODEL, DEFAULT_MODEL]
    if args.results:
        args.results.mkdir(parents=True, exist_ok=True)
    runs = [asyncio.run(run_model(name, rows, args.slots, args.verbose, args.results, args.report_only))
            for name in names]
    report = {"schemas": len(rows), "runs": runs, "date": time.strftime("%Y-%m-%d")}
    if args.report_only:
        print(f"measured so far (of {len(rows)} schemas):")
    print_table(report)
    print_subsets(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
