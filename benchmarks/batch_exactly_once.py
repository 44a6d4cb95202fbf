"""Issue 44's scenario, repeated: an OpenAI Batch API batch on `tiankong serve` while interactive chats run
beside it — does every ``custom_id`` come back exactly once?

    .venv/bin/python benchmarks/batch_exactly_once.py --runs 10 \
        --out benchmarks/results/batch/exactly-once-DATE.json

One ``tiankong serve --model M`` gateway (loopback, defaults: ``[batches] preempt = true``, an API key, its own
batches folder in a temporary directory) serves every run. Each run uploads a ``--lines``-line
``/v1/chat/completions`` batch ("Say the number i.", ``max_tokens`` ``--batch-tokens``) with the openai SDK,
creates the batch, and while it runs ``--threads`` threads send ordinary chats (``max_tokens`` ``--chat-tokens``,
``--gap`` seconds apart; every ``--cancel-every``-th one streamed and dropped after its first chunk; for the whole
batch, or only its first ``--interactive-s`` seconds on a machine where the batch would otherwise starve). When the
batch has ended the output and error files are read back. Printed and written per run: status, request_counts,
output lines, error lines, unique ids, input lines, ids written more than once, lines that stepped aside. Every
run is bounded (``--run-timeout``); the gateway is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import openai

TIANKONG = str(Path(sys.executable).parent / "tiankong")
KEY = "exactly-once-benchmark-key-0123456789"
FINAL = ("completed", "failed", "cancelled", "expired")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def batch_lines(model: str, lines: int, tokens: int) -> bytes:
    rows = []
    for i in range(lines):
        body = {"model": model, "messages": [{"role": "user", "content": f"Say the number {i}."}],
                "max_tokens": tokens, "temperature": 0}
        rows.append(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}))
    return ("\n".join(rows) + "\n").encode()


def start_gateway(model: str, workdir: Path, slots: int | None) -> tuple[subprocess.Popen[bytes], str]:
    config = workdir / "config.toml"
    config.write_text(f'[batches]\ndir = "{workdir / "batches"}"\n', encoding="utf-8")
    port = free_port()
    command = [TIANKONG, "serve", "--model", model, "--port", str(port), "--config", str(config), "--api-key", KEY]
    if slots is not None:
        command += ["--slots", str(slots)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=(workdir / "gateway.log").open("ab"),
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.5)
    stop_gateway(proc)
    raise SystemExit("the gateway did not start: " + (workdir / "gateway.log").read_text()[-1000:])


def stop_gateway(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def chatter(url: str, model: str, tokens: int, gap: float, cancel_every: int, stop: threading.Event,
            seed: int, sent: Counter[str]) -> None:
    """Ordinary chats until ``stop``: every ``cancel_every``-th one streamed and dropped after its first chunk."""
    headers = {"Authorization": f"Bearer {KEY}"}
    i = 0
    with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
        while not stop.is_set():
            i += 1
            body = {"model": model, "messages": [{"role": "user", "content": f"Tell me about the number {seed + i}."}],
                    "max_tokens": tokens, "temperature": 0}
            try:
                if cancel_every and i % cancel_every == 0:
                    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as answer:
                        for _ in answer.iter_raw():
                            break  # closed mid-stream
                    sent["cancelled"] += 1
                else:
                    answer = http.post("/v1/chat/completions", json=body)
                    sent[str(answer.status_code)] += 1
            except httpx.HTTPError as exc:
                sent[type(exc).__name__] += 1
            stop.wait(gap)


def defects(log: Path) -> list[str]:
    """The store's refusals the gateway logged (``defect: a second result …``, ``another run is writing …``)."""
    if not log.exists():
        return []
    return [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
            if "defect:" in line or "another run is writing" in line]


def one_run(client: openai.OpenAI, url: str, args: argparse.Namespace, number: int) -> dict[str, Any]:
    logged = len(defects(args.log))
    uploaded = client.files.create(file=(f"run{number}.jsonl", batch_lines(args.model, args.lines,
                                                                            args.batch_tokens)), purpose="batch")
    stop, sent = threading.Event(), Counter[str]()
    threads = [threading.Thread(target=chatter, args=(url, args.model, args.chat_tokens, args.gap, args.cancel_every,
                                                      stop, 1000 * t + 100_000 * number, sent), daemon=True)
               for t in range(args.threads)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    try:
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
        while batch.status not in FINAL and time.monotonic() - started < args.run_timeout:
            time.sleep(0.5)
            batch = client.batches.retrieve(batch.id)
            if args.interactive_s is not None and time.monotonic() - started > args.interactive_s:
                stop.set()
        if batch.status not in FINAL:
            client.batches.cancel(batch.id)
            while batch.status not in FINAL and time.monotonic() - started < args.run_timeout + 60:
                time.sleep(0.5)
                batch = client.batches.retrieve(batch.id)
    finally:
        stop.set()
        for thread in threads:
            thread.join(130)
    elapsed = time.monotonic() - started
    output = _lines(client, batch.output_file_id)
    errors = _lines(client, batch.error_file_id)
    ids = Counter(line["custom_id"] for line in output + errors)
    stepped = sum(1 for line in output if (line["response"]["body"].get("tiankong") or {}).get("stepped_aside"))
    counts = batch.request_counts
    return {"run": number, "batch": batch.id, "status": batch.status, "elapsed_s": round(elapsed, 1),
            "request_counts": {"total": counts.total, "completed": counts.completed, "failed": counts.failed}
            if counts else None,
            "input_lines": args.lines, "output_lines": len(output), "error_lines": len(errors),
            "unique_ids": len(ids), "ids_more_than_once": sorted(k for k, v in ids.items() if v > 1),
            "stepped_aside_lines": stepped, "interactive": dict(sent), "store_refusals": defects(args.log)[logged:]}


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if not file_id:
        return []
    return [json.loads(raw) for raw in client.files.content(file_id).text.splitlines() if raw.strip()]


def save(args: argparse.Namespace, runs: list[dict[str, Any]], ok: bool | None) -> None:
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        settings = {key: str(value) for key, value in vars(args).items()}
        Path(args.out).write_text(json.dumps({"args": settings, "runs": runs, "exactly_once": ok}, indent=2) + "\n",
                                  encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--slots", type=int, default=None, help="engine slots (default: tiankong serve's)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--batch-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chat-tokens", type=int, default=40)
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between one thread's chats")
    parser.add_argument("--cancel-every", type=int, default=0, help="stream and drop every Nth chat (0: never)")
    parser.add_argument("--interactive-s", type=float, default=None,
                        help="stop the interactive threads after this many seconds of a run (default: never)")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tk-exactly-once-"))
    proc, url = start_gateway(args.model, workdir, args.slots)
    args.log = workdir / "gateway.log"
    runs: list[dict[str, Any]] = []
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
        for number in range(1, args.runs + 1):
            row = one_run(client, url, args, number)
            runs.append(row)
            save(args, runs, None)  # after every run: a run stopped part-way keeps what it measured
            print(f"run {number}: {row['status']} counts {row['request_counts']} — output lines "
                  f"{row['output_lines']}, error lines {row['error_lines']}, unique ids {row['unique_ids']}, input "
                  f"lines {row['input_lines']}; twice: {row['ids_more_than_once'][:5] or 'none'}; store refusals "
                  f"{len(row['store_refusals'])}; stepped aside {row['stepped_aside_lines']}; interactive "
                  f"{row['interactive']} ({row['elapsed_s']} s)", flush=True)
    finally:
        stop_gateway(proc)
    ok = all(r["output_lines"] + r["error_lines"] == r["unique_ids"] == r["input_lines"] and r["request_counts"] and
             r["request_counts"]["completed"] + r["request_counts"]["failed"] == r["request_counts"]["total"]
             for r in runs)
    print(f"{sum(1 for r in runs if r['unique_ids'] == r['input_lines'] == r['output_lines'] + r['error_lines'])}"
          f"/{len(runs)} runs exactly once; all counts consistent: {ok}")
    save(args, runs, ok)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
