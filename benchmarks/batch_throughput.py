"""Batch throughput vs. the best direct throughput on the same engine, same items, same task calls.

    .venv/bin/python benchmarks/batch_throughput.py [--n 1000] [--slots 4] [--task classify|extract] [--json]

One SmolLM2 engine. *Direct*: the task's own ``AsyncClient`` call (``classify`` or ``extract_result``) for
every item via ``asyncio.gather`` behind a semaphore, at each concurrency of the sweep (1, 2, 4, 8) — no batch
layer. *Batch*: ``tiankong.batch.run`` on the same items written as a JSONL file (default concurrency = the
engine's slots), timed end to end (input pre-scan, output writes and fsyncs included). Printed: items/s of
each and the ratio batch / best direct (target ≥ 0.95). ``--sweep-n`` measures the sweep on the first K items
only (a slow machine); the comparison at the best concurrency is always on all N.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tiankong import AsyncClient
from tiankong.batch import make_job, run
from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.engine.cpu import cpu_model
from tiankong.models import TEST_MODEL, model_path

LABELS = ["billing", "bug", "account"]
SCHEMA = {"type": "object", "properties": {"product": {"type": "string", "maxLength": 30},
                                           "urgent": {"type": "boolean"}}, "required": ["product", "urgent"]}
SUBJECTS = ["invoice", "the mobile app", "my password", "the CSV export", "the API", "two-factor codes",
            "the dashboard", "my subscription", "发票", "登录", "上传图片", "验证码"]
PROBLEMS = ["is wrong", "crashes on start", "does not work since the update", "was charged twice",
            "never arrives", "shows error 500", "有问题", "一直失败"]


def items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"i{i:05d}", "text": f"Ticket {i}: {SUBJECTS[i % len(SUBJECTS)]} "
                                        f"{PROBLEMS[(i // len(SUBJECTS)) % len(PROBLEMS)]}."} for i in range(n)]


async def _one(client: AsyncClient, task: str, text: str) -> object:
    if task == "classify":
        return await client.classify(text, LABELS)
    return await client.extract_result(text, SCHEMA)


async def _direct(url: str, task: str, texts: list[str], concurrency: int) -> float:
    gate = asyncio.Semaphore(concurrency)
    failures = 0

    async def one(text: str) -> None:
        nonlocal failures
        async with gate:
            try:
                await _one(client, task, text)
            except Exception:  # counted like a failed batch item; the call still took engine time
                failures += 1

    async with AsyncClient(url) as client:
        started = time.monotonic()
        await asyncio.gather(*(one(text) for text in texts))
        return len(texts) / (time.monotonic() - started)


def direct(url: str, task: str, texts: list[str], concurrency: int) -> float:
    ips = asyncio.run(_direct(url, task, texts, concurrency))
    print(f"# direct, concurrency {concurrency}, {len(texts)} items: {ips:.2f} items/s", file=sys.stderr)
    return ips


def batch(url: str, task: str, records: list[dict[str, Any]], workdir: Path, tag: str,
          concurrency: int | None = None) -> tuple[float, dict[str, Any]]:
    src, out = workdir / f"in-{tag}.jsonl", workdir / f"out-{tag}.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    extra: dict[str, Any] = {"labels": LABELS} if task == "classify" else {"schema": SCHEMA}
    job = make_job(input=str(src), output=str(out), task=task, url=[url], concurrency=concurrency, **extra)
    started = time.monotonic()
    report = run(job)
    elapsed = time.monotonic() - started
    print(f"# batch, concurrency {report.concurrency}, {len(records)} items: {len(records) / elapsed:.2f} items/s",
          file=sys.stderr)
    return len(records) / elapsed, report.model_dump(mode="json")


def measure(args: argparse.Namespace, url: str, workdir: Path) -> dict[str, Any]:
    records = items(args.n)
    texts = [r["text"] for r in records]
    direct(url, args.task, texts[:8], 4)  # warm-up, not counted
    sweep_texts = texts[:args.sweep_n] if args.sweep_n else texts
    sweep = {c: direct(url, args.task, sweep_texts, c) for c in args.sweep}
    best_c = max(sweep, key=lambda c: sweep[c])
    directs: list[float] = []
    batches: list[float] = []
    report: dict[str, Any] = {}
    for r in range(args.rounds):  # adjacent pairs, order alternating: drift on a shared machine hits both
        for kind in (("direct", "batch") if r % 2 else ("batch", "direct")):
            if kind == "direct":
                directs.append(direct(url, args.task, texts, best_c))
            else:
                ips, report = batch(url, args.task, records, workdir, f"r{r}")
                batches.append(ips)
    best_direct = max([*directs, sweep[best_c]] if not args.sweep_n else directs)
    return {
        "engine": f"{args.binary.version} ({args.binary.commit})", "cpu": cpu_model(), "task": args.task,
        "n": args.n, "slots": args.slots, "sweep_n": len(sweep_texts), "direct_items_per_s": sweep,
        "best_direct_concurrency": best_c, "direct_at_best_items_per_s": directs,
        "batch_concurrency": report["concurrency"], "batch_items_per_s": batches,
        "batch_failed": report["failed"], "batch_tokens_per_s": report["tokens_per_s"],
        "batch_latency_s": report["latency_s"],
        "ratio_paired": statistics.median(b / d for b, d in zip(batches, directs, strict=True)),
        "ratio_vs_best_direct": max(batches) / best_direct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--task", choices=["classify", "extract"], default="classify")
    parser.add_argument("--sweep", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--sweep-n", type=int, default=0, help="Sweep on the first K items only (0: all N).")
    parser.add_argument("--rounds", type=int, default=1, help="Pairs of (batch, direct at the best concurrency).")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.binary = locate_engine()
    config = EngineConfig(model=model_path(TEST_MODEL), ctx=1024 * args.slots, slots=args.slots, alias=TEST_MODEL)
    with EngineProcess(config, args.binary) as engine, tempfile.TemporaryDirectory() as tmp:
        result = measure(args, engine.url, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"engine {result['engine']} on {result['cpu']}; SmolLM2, {args.slots} slots; {args.n} {args.task} items")
    for c, ips in result["direct_items_per_s"].items():
        print(f"  direct, concurrency {c:<2} {ips:8.2f} items/s  (sweep on {result['sweep_n']} items)")
    runs = ", ".join(f"{x:.2f}" for x in result["direct_at_best_items_per_s"])
    print(f"  direct at concurrency {result['best_direct_concurrency']} on {args.n} items: {runs} items/s")
    runs = ", ".join(f"{x:.2f}" for x in result["batch_items_per_s"])
    print(f"  tiankong.batch.run (concurrency {result['batch_concurrency']}) on {args.n} items: {runs} items/s, "
          f"{result['batch_tokens_per_s']:.0f} tokens/s, {result['batch_failed']} failed")
    print(f"ratio batch / direct (paired, median): {result['ratio_paired']:.3f}; best batch / best direct: "
          f"{result['ratio_vs_best_direct']:.3f}  (target ≥ 0.95)")


if __name__ == "__main__":
    main()
