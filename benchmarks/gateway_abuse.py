"""A well-behaved client's latency while an abuser sends issue 21's hostile requests, against `tiankong serve`.

One run, loopback only, bounded: `tiankong serve` (SmolLM2 by default, with an API key so row 16 applies) is
started here and stopped at the end. Phase 1 (quiet): the well-behaved client sends short chats (8 tokens) one
after another for ``--seconds``. Phase 2 (abuse): the same, while an abuser (a process of its own, as a real one
would be) loops over rows 1–7 and 16–17 —
a ReDoS pattern, an ambiguous-nesting pattern (both refused up front), 10,000 guard policies, JSON nested
100,000 deep, bad ``messages``, ``NaN`` temperature, a fake image, 300 wrong keys, and connections that send
their head or body slowly. Printed: the well-behaved client's p50/p99 in each phase and their ratio, the status
codes the abuser got (5xx must be 0), and ``/health`` availability during the abuse.

``--flood`` (issue 46): the abuser is instead a second API key that floods the Batch API — uploads of 2,000
request lines, one batch each, as fast as it is let (its rpm 30, the default per-key quotas) — and after the
abuse phase the well-behaved key submits a 1-line batch: the seconds until it completes are printed.

    .venv/bin/python benchmarks/gateway_abuse.py --out benchmarks/results/gateway-abuse.txt
"""

from __future__ import annotations

import argparse
import atexit
import base64
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from serving import serve

KEY = "abuse-bench-key-0123"
HEADERS = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
FLOOD_KEY = "flood-bench-key-0123"
FLOOD_CONFIG = f'[[server.keys]]\nkey = "{FLOOD_KEY}"\nname = "flood"\nrpm = 30\n'


def _batch_input(lines: int, tag: str) -> bytes:
    body = {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 8, "temperature": 0}
    return "".join(json.dumps({"custom_id": f"{tag}-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": body}) + "\n" for i in range(lines)).encode()


def submit_batch(client: httpx.Client, url: str, key: str, data: bytes) -> tuple[int, str | None]:
    """Upload ``data`` and start a batch of it: (the last status code, the batch id or None)."""
    auth = {"authorization": f"Bearer {key}"}
    uploaded = client.post(f"{url}/v1/files", headers=auth, files={"file": ("in.jsonl", data)},
                           data={"purpose": "batch"})
    if uploaded.status_code != 200:
        return uploaded.status_code, None
    batch = client.post(f"{url}/v1/batches", headers={**auth, "content-type": "application/json"},
                        json={"input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions",
                              "completion_window": "24h"})
    return batch.status_code, batch.json().get("id") if batch.status_code == 200 else None


def flood(url: str, stop: Any, codes: Counter[str]) -> None:
    """A second key filling the Batch API: 2,000-line uploads and a batch of each, as fast as it is let."""
    data = _batch_input(2000, "flood")
    with httpx.Client(timeout=300) as client:
        while not stop.is_set():
            status, _ = submit_batch(client, url, FLOOD_KEY, data)
            codes[str(status)] += 1
            if status == 429:
                time.sleep(1.0)


def small_batch_seconds(url: str) -> float:
    """Seconds from submitting a 1-line batch of the well-behaved key to its completion."""
    began = time.monotonic()
    with httpx.Client(timeout=300) as client:
        _, batch_id = submit_batch(client, url, KEY, _batch_input(1, "small"))
        while batch_id is not None and time.monotonic() - began < 1800:
            answer = client.get(f"{url}/v1/batches/{batch_id}", headers={"authorization": f"Bearer {KEY}"})
            if answer.json().get("status") in ("completed", "failed", "cancelled", "expired"):
                break
            time.sleep(0.5)
    return time.monotonic() - began


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(model: str, port: int, config: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if config is not None:  # e.g. an [engine] section whose extra_args are being compared
        env["TIANKONG_CONFIG"] = config
    return serve(["--model", model, "--slots", "2", "--ctx", "4096", "--api-key", KEY], port, env, timeout_s=180)


def chat_latencies(url: str, seconds: float) -> list[float]:
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0}
    found, end = [], time.monotonic() + seconds
    with httpx.Client(timeout=120) as client:
        while time.monotonic() < end:
            began = time.monotonic()
            answer = client.post(f"{url}/v1/chat/completions", json=body, headers=HEADERS)
            if answer.status_code == 200:
                found.append(time.monotonic() - began)
    return found


def _schema_chat(pattern: str) -> dict[str, object]:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}, "required": ["s"]}
    return {"messages": [{"role": "user", "content": "Write many letters a."}], "max_tokens": 40,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def _slow(port: int, data: bytes, hold_s: float) -> str:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        sock.settimeout(hold_s)
        try:
            head = sock.recv(64)
        except TimeoutError:
            return "open"
        return head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "closed"


def abuse(url: str, port: int, stop: Any, codes: Counter[str]) -> None:
    png_lie = base64.b64encode(b"not an image at all").decode()
    bodies: list[tuple[str, bytes]] = [
        ("/v1/chat/completions", json.dumps(_schema_chat("^(?=a)(a+)+$")).encode()),
        ("/v1/chat/completions", json.dumps(_schema_chat("^((a|aa)*)*c$")).encode()),
        ("/v1/tasks/guard", json.dumps({"text": "hi", "policies": ["be nice"] * 10_000}).encode()),
        ("/v1/chat/completions", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("/v1/chat/completions", b'{"messages": ["hi", null], "max_tokens": 4}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png_lie}"}}]}]}).encode()),
    ]
    with httpx.Client(timeout=300) as client:
        while not stop.is_set():
            for path, raw in bodies:
                codes[str(client.post(f"{url}{path}", content=raw, headers=HEADERS).status_code)] += 1
            # row 16, from another loopback address (the well-behaved client's own address is not throttled)
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=30) as wrong:
                for i in range(300):
                    answer = wrong.get(f"{url}/v1/models", headers={"authorization": f"Bearer no-{i}"})
                    codes[str(answer.status_code)] += 1
            auth = f"Authorization: Bearer {KEY}\r\n".encode()
            heads = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth,  # never ends its head
                     b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth +
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")  # nor its body
            slow = [threading.Thread(target=lambda d=d: codes.update([f"slow:{_slow(port, d, 45)}"]))
                    for d in heads for _ in range(25)]  # 50 slow connections
            for thread in slow:
                thread.start()
            for thread in slow:
                thread.join()


def abuse_process(url: str, port: int, stop: Any, out: Any, flooding: bool = False) -> None:
    """The abuser in a process of its own: in the measuring process its threads would hold the GIL the
    well-behaved client needs, and the client's own waiting would be counted as the gateway's latency."""
    codes: Counter[str] = Counter()
    if flooding:
        flood(url, stop, codes)
    else:
        abuse(url, port, stop, codes)
    out.put(dict(codes))


def health_watch(url: str, stop: threading.Event, seen: list[bool]) -> None:
    while not stop.is_set():
        try:
            seen.append(httpx.get(f"{url}/health", timeout=2).status_code == 200)
        except httpx.HTTPError:
            seen.append(False)
        time.sleep(0.5)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct:q4_1")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default="benchmarks/results/gateway-abuse.txt")
    parser.add_argument("--config", default=None, help="a tiankong config file for the gateway (its text is "
                        "written into the result)")
    parser.add_argument("--flood", action="store_true", help="the abuser is a second key flooding the Batch API")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if args.flood:  # a config with the flooding key (the well-behaved one comes from --api-key)
        flood_config = Path(args.out).with_suffix(".config.toml")
        flood_config.parent.mkdir(parents=True, exist_ok=True)
        # a batches folder of this run's own: a gateway resumes every unfinished batch in its folder, so a shared
        # one (the data dir's) would start the next run with this run's flood still pending
        batches_dir = tempfile.mkdtemp(prefix="tk-flood-batches-")
        atexit.register(shutil.rmtree, batches_dir, ignore_errors=True)
        flood_config.write_text((Path(args.config).read_text(encoding="utf-8") + "\n" if args.config else "") +
                                FLOOD_CONFIG + f'\n[batches]\ndir = "{batches_dir}"\n', encoding="utf-8")
        args.config = str(flood_config)
    proc = start(args.model, port, args.config)
    small_s = None
    try:
        quiet = chat_latencies(url, args.seconds)
        spawn = multiprocessing.get_context("spawn")
        stop, results, codes, health = spawn.Event(), spawn.Queue(), Counter[str](), list[bool]()
        abuser = spawn.Process(target=abuse_process, args=(url, port, stop, results, args.flood), daemon=True)
        watch_stop = threading.Event()
        watcher = threading.Thread(target=health_watch, args=(url, watch_stop, health), daemon=True)
        abuser.start()
        watcher.start()
        loud = chat_latencies(url, args.seconds)
        stop.set()
        watch_stop.set()
        codes.update(results.get(timeout=180))
        abuser.join(timeout=60)
        watcher.join(timeout=60)
        if args.flood:  # the flooding key's batches are still pending: how long does a small batch wait?
            pending = httpx.get(f"{url}/metrics", headers=HEADERS, timeout=30).text
            codes.update({"pending_lines_then": int(float(next(
                (line.split()[-1] for line in pending.splitlines()
                 if line.startswith("tiankong_batch_pending_requests ")), "0")))})
            small_s = small_batch_seconds(url)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    fives = sum(n for code, n in codes.items() if code.startswith("5"))
    config = Path(args.config).read_text(encoding="utf-8").strip() if args.config else "(none: defaults)"
    lines = [f"$ {' '.join(sys.argv)}", f"model {args.model}, {args.seconds:.0f} s per phase",
             "config: " + config.replace("\n", " | "),
             f"well-behaved chats: quiet n={len(quiet)} p50 {statistics.median(quiet) * 1000:.0f} ms "
             f"p99 {pct(quiet, 0.99) * 1000:.0f} ms; under abuse n={len(loud)} p50 "
             f"{statistics.median(loud) * 1000:.0f} ms p99 {pct(loud, 0.99) * 1000:.0f} ms; "
             f"p99 ratio {pct(loud, 0.99) / pct(quiet, 0.99):.2f} (target ≤ 2)",
             f"abuser status codes: {dict(sorted(codes.items()))}; 5xx: {fives} (target 0)",
             f"/health during abuse: {sum(health)}/{len(health)} answered 200"]
    if small_s is not None:
        lines.append(f"the well-behaved key's 1-line batch, submitted after the flood: completed in {small_s:.1f} s")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
