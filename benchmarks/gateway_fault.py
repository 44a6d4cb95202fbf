"""Fault: kill -9 the engine under load; what fails, how fast the gateway serves again, what the counters say.

    .venv/bin/python benchmarks/gateway_fault.py [--rounds 3] [--clients 6] [--max-tokens 32]

One SmolLM2 engine (2 slots) behind the gateway (in-process uvicorn on loopback). Each round: ``--clients``
requests in flight (a third streamed), ``SIGKILL`` to the engine, then: the status of every in-flight request,
seconds from the kill until the engine is ready again, seconds until the first new request succeeds, and the
gateway's ``tiankong_engine_restarts_total``. Target (issue 5): only in-flight requests fail (503), serving again
within 5 s, one restart counted per kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import uvicorn

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.engine.process import free_port
from tiankong.gateway import GatewayState, create_app
from tiankong.models import TEST_MODEL, model_path

PROMPT = [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]


def post(url: str, max_tokens: int, stream: bool = False) -> int:
    body = {"messages": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "stream": stream}
    try:
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    except httpx.HTTPError:
        return -1
    if stream and answer.status_code == 200 and "engine_error" in answer.text:
        return 503  # the stream had started: the failure arrives in-band
    return answer.status_code


def restarts(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("tiankong_engine_restarts_total"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def one_round(engine: EngineProcess, url: str, clients: int, max_tokens: int) -> tuple[Counter[int], float, float]:
    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(post, url, max_tokens, i % 3 == 0) for i in range(clients)]
        while not any(s.get("is_processing") for s in httpx.get(f"{engine.url}/slots", timeout=10).json()):
            time.sleep(0.05)
        first = engine.pid
        assert first is not None
        killed = time.monotonic()
        os.kill(first, signal.SIGKILL)
        statuses = Counter(f.result() for f in futures)
    while not (engine.state.value == "ready" and engine.pid != first):
        time.sleep(0.02)
    ready = time.monotonic() - killed
    while post(url, 4) != 200:
        time.sleep(0.05)
    return statuses, ready, time.monotonic() - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    engine = EngineProcess(EngineConfig(model=model_path(TEST_MODEL), ctx=2048, slots=2, alias=TEST_MODEL),
                           locate_engine())
    engine.start()
    port = free_port()
    state = GatewayState.for_engine(engine, TEST_MODEL, queue_size=8, engine_retry_wait_s=60)
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        while not server.started:
            time.sleep(0.05)
        readies, firsts, total = [], [], Counter[int]()
        for r in range(args.rounds):
            statuses, ready, first_ok = one_round(engine, url, args.clients, args.max_tokens)
            total.update(statuses)
            readies.append(ready)
            firsts.append(first_ok)
            print(f"round {r + 1}: in-flight statuses {dict(statuses)}; engine ready after {ready:.2f} s; "
                  f"first new 200 after {first_ok:.2f} s", flush=True)
        print(f"\n{args.rounds} kills, {args.clients} requests in flight each: statuses {dict(total)}; "
              f"ready again median {statistics.median(readies):.2f} s (max {max(readies):.2f}); first 200 median "
              f"{statistics.median(firsts):.2f} s (max {max(firsts):.2f}); tiankong_engine_restarts_total "
              f"{restarts(url):.0f}; load avg {os.getloadavg()[0]:.1f}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.stop()


if __name__ == "__main__":
    main()
