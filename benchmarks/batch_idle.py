"""The Batch API on idle capacity: interactive latency with and without a running batch, and the batch's speed
against ``tiankong batch run`` on an idle machine — measured side by side in one run.

    .venv/bin/python benchmarks/batch_idle.py --lines 500 --rate 2 --out benchmarks/results/batch/idle-DATE.json

1. idle baseline: ``tiankong batch run --model M --slots S`` over file A (500 chat lines), nothing else running;
2. for each ``--batch-slots`` setting, a ``tiankong serve --model M --slots S`` gateway with that
   ``[batches] slots`` (``all`` = the default: every slot nobody interactive waits for; ``+yield`` adds
   ``yield_to_interactive``, ``+share`` turns ``preempt`` off — batch lines then share the engine's steps instead
   of stepping aside; ``+pollN`` passes llama-server ``--poll N``; ``+bN`` its ``-b N -ub N``, so that a step reads
   at most N prompt tokens and a long prompt read is spread over several steps):
   a. quiet: an open-loop interactive client sends short chats (``--chat-tokens``) at ``--rate`` per second for
      ``--quiet-s`` seconds;
   b. busy: file B (500 other chat lines) is submitted as a batch and the same client runs until the batch is
      completed; the batch's items/s is its lines over the time from submission to ``completed``.

Printed: interactive p50/p99 quiet vs busy (target: busy p99 ≤ 1.3× quiet) and the batch's items/s against the
idle baseline (target ≥ 0.8×). For every run (the idle ``batch run`` and each gateway batch) also its output
lines, unique ids and input lines, which must be equal (issue 44: every id exactly once).
Prompts are seeded and distinct per file, so no run reuses another's prompt cache.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
TIANKONG = str(Path(sys.executable).parent / "tiankong")
WORDS = ["invoice", "refund", "order", "parcel", "delivery", "late", "broken", "screen", "battery", "login", "password",
         "account", "charge", "twice", "support", "ticket", "urgent", "printer", "network", "outage", "server", "disk",
         "full", "backup", "restore", "update", "failed", "error", "customer", "manager", "meeting", "schedule",
         "report", "quarterly", "budget", "travel", "expense", "hotel", "flight", "cancel"]


def prompts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Summarize in five words: {' '.join(rng.choice(WORDS) for _ in range(rng.randint(25, 45)))}."
            for _ in range(n)]


def batch_file(path: Path, model: str, texts: list[str], max_tokens: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                    "temperature": 0}
            out.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": body}) + "\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def exactly_once(output: Path, errors: Path | None, input_lines: int) -> dict[str, int]:
    """Output lines (answers and error lines), unique ids among them, and input lines of one run."""
    ids: list[str] = []
    for path in (output, errors):
        if path is not None and path.exists():
            for raw in path.read_text(encoding="utf-8").splitlines():
                if raw.strip():
                    record = json.loads(raw)
                    ids.append(str(record.get("custom_id", record.get("id"))))
    return {"output_lines": len(ids), "unique_ids": len(set(ids)), "input_lines": input_lines}


def once_text(counts: dict[str, int]) -> str:
    same = counts["output_lines"] == counts["unique_ids"] == counts["input_lines"]
    return (f"output lines {counts['output_lines']}, unique ids {counts['unique_ids']}, input lines "
            f"{counts['input_lines']}{'' if same else ' — NOT exactly once'}")


def summary(latencies: list[float]) -> dict[str, float]:
    return {"n": len(latencies), "p50_ms": round(1000 * statistics.median(latencies), 1),
            "p99_ms": round(1000 * pct(latencies, 0.99), 1), "max_ms": round(1000 * max(latencies), 1)}


async def interactive(url: str, model: str, rate: float, tokens: int, stop: asyncio.Event, seed: int,
                      limit_s: float | None = None) -> list[float]:
    """Open loop: request i is sent at t0 + i/rate whether or not earlier ones answered."""
    texts = prompts(seed, 100_000)
    latencies: list[float] = []
    failures: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        async def one(text: str) -> None:
            started = time.perf_counter()
            answer = await http.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": "Say hi. " + text[:60]}],
                "max_tokens": tokens, "temperature": 0})
            if answer.status_code == 200:
                latencies.append(time.perf_counter() - started)
            else:
                failures.append(f"{answer.status_code}: {answer.text[:100]}")

        tasks, t0, i = [], time.perf_counter(), 0
        while not stop.is_set() and (limit_s is None or time.perf_counter() - t0 < limit_s):
            tasks.append(asyncio.ensure_future(one(texts[i])))
            i += 1
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        await asyncio.gather(*tasks)
    if failures:
        raise SystemExit(f"interactive requests failed: {failures[:3]}")
    return latencies


async def busy_phase(url: str, model: str, source: Path, rate: float, tokens: int, lines: int) -> dict[str, Any]:
    stop = asyncio.Event()
    load = asyncio.ensure_future(interactive(url, model, rate, tokens, stop, seed=3))
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        started = time.perf_counter()
        uploaded = (await http.post("/v1/files", files={"file": (source.name, source.read_bytes())},
                                    data={"purpose": "batch"})).json()
        batch = (await http.post("/v1/batches", json={"input_file_id": uploaded["id"],
                                                      "endpoint": "/v1/chat/completions",
                                                      "completion_window": "24h"})).json()
        while batch["status"] not in ("completed", "failed", "cancelled", "expired"):
            await asyncio.sleep(0.25)
            batch = (await http.get(f"/v1/batches/{batch['id']}")).json()
        elapsed = time.perf_counter() - started
        once: dict[str, int] = {"output_lines": 0, "unique_ids": 0, "input_lines": lines}
        with tempfile.TemporaryDirectory() as folder:
            files = {"out": batch.get("output_file_id"), "err": batch.get("error_file_id")}
            for name, file_id in files.items():
                if file_id:
                    content = await http.get(f"/v1/files/{file_id}/content")
                    (Path(folder) / name).write_bytes(content.content)
            once = exactly_once(Path(folder) / "out", Path(folder) / "err", lines)
    stop.set()
    latencies = await load
    counts = batch["request_counts"]
    if batch["status"] != "completed" or counts["completed"] != lines:
        raise SystemExit(f"the batch did not complete every line: {batch}")
    return {"interactive": summary(latencies), "batch_items_per_s": round(lines / elapsed, 3),
            "batch_elapsed_s": round(elapsed, 2), "exactly_once": once}


def gateway(model: str, slots: int, ctx: int, batch_slots: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = workdir / f"config-{batch_slots}.toml"
    slots_part, _, mode = batch_slots.partition("+")
    extra = "" if slots_part == "all" else f"slots = {int(slots_part)}\n"
    if mode == "yield":
        extra += "yield_to_interactive = true\n"
    if mode == "share":  # batch lines share the engine's steps with interactive ones (no stepping aside)
        extra += "preempt = false\n"
    engine = ""
    if mode.startswith("poll"):  # e.g. +poll0: llama-server's threads sleep instead of spinning between steps
        engine = f'[engine]\nextra_args = ["--poll", "{int(mode[4:])}"]\n'
    if mode.startswith("b") and mode[1:].isdigit():  # e.g. +b32: llama-server reads at most 32 tokens a step
        engine = f'[engine]\nextra_args = ["-b", "{int(mode[1:])}", "-ub", "{int(mode[1:])}"]\n'
    config.write_text(f'{engine}[batches]\ndir = "{workdir / ("batches-" + batch_slots)}"\n{extra}',
                      encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen([TIANKONG, "serve", "--model", model, "--slots", str(slots), "--ctx", str(ctx),
                             "--port", str(port), "--config", str(config)], stdout=subprocess.DEVNULL,
                            stderr=(workdir / "gateway.log").open("ab"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("the gateway did not start: " + (workdir / "gateway.log").read_text()[-1000:])


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--batch-tokens", type=int, default=16)
    parser.add_argument("--chat-tokens", type=int, default=8)
    parser.add_argument("--rate", type=float, default=2.0, help="interactive requests per second")
    parser.add_argument("--quiet-s", type=float, default=50.0)
    parser.add_argument("--batch-slots", nargs="+", default=["all", "3"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tk-batch-idle-"))
    file_a, file_b = workdir / "a.jsonl", workdir / "b.jsonl"
    batch_file(file_a, args.model, prompts(1, args.lines), args.batch_tokens)
    batch_file(file_b, args.model, prompts(2, args.lines), args.batch_tokens)

    started = time.perf_counter()
    run = subprocess.run([TIANKONG, "batch", "run", "--input", str(file_a), "--output", str(workdir / "idle.jsonl"),
                          "--model", args.model, "--slots", str(args.slots), "--ctx", str(args.ctx), "--json",
                          "--no-progress"], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"batch run failed: {run.stderr[-500:]}")
    report = json.loads(run.stdout)
    idle = {"items_per_s": report["items_per_s"], "wall_s": round(time.perf_counter() - started, 2),
            "processed": report["processed"],
            "exactly_once": exactly_once(workdir / "idle.jsonl", workdir / "idle.jsonl.errors.jsonl", args.lines)}
    print(f"idle `tiankong batch run`: {idle['items_per_s']:.2f} items/s ({report['processed']} lines; "
          f"{once_text(idle['exactly_once'])})", flush=True)

    results: dict[str, Any] = {"args": vars(args), "idle_batch_run": idle, "gateway": {}}
    for setting in args.batch_slots:
        proc, url = gateway(args.model, args.slots, args.ctx, setting, workdir)
        try:
            never = asyncio.Event()
            quiet = asyncio.run(interactive(url, args.model, args.rate, args.chat_tokens, never, seed=4,
                                            limit_s=args.quiet_s))
            busy = asyncio.run(busy_phase(url, args.model, file_b, args.rate, args.chat_tokens, args.lines))
        finally:
            stop(proc)
        row = {"quiet": summary(quiet), **busy}
        row["p99_ratio"] = round(row["interactive"]["p99_ms"] / row["quiet"]["p99_ms"], 3)
        row["p50_ratio"] = round(row["interactive"]["p50_ms"] / row["quiet"]["p50_ms"], 3)
        row["throughput_ratio"] = round(row["batch_items_per_s"] / idle["items_per_s"], 3)
        results["gateway"][setting] = row
        print(f"batches.slots={setting}: interactive p50 {row['quiet']['p50_ms']:.0f} → "
              f"{row['interactive']['p50_ms']:.0f} ms, p99 {row['quiet']['p99_ms']:.0f} → "
              f"{row['interactive']['p99_ms']:.0f} ms ({row['p99_ratio']:.2f}x quiet; target <= 1.3); batch "
              f"{row['batch_items_per_s']:.2f} items/s = {row['throughput_ratio']:.2f}x idle batch run "
              f"(target >= 0.8); {once_text(row['exactly_once'])}", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
