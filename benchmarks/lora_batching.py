"""LoRA adapter batching: a mixed burst (half base model, half with an adapter) through the gateway, with and
without letting queued requests that batch with the running adapter set in first.

    .venv/bin/python benchmarks/lora_batching.py [--slots 4] [--requests 24] [--max-tokens 64] [--rounds 3]

llama-server decodes slots whose LoRA adapter sets differ in separate batches (they take turns), so a mixed
queue served first-in-first-out keeps the slots mixed and each decode step serves only some of them. One
SmolLM2 engine with a random-weight adapter (``tiankong.lora.synthetic``; its output quality is irrelevant
here, the batching is what is measured), two gateways in front of it (``adapter_batching`` on and off),
rounds interleaved so machine-load drift hits both alike. Printed: completion tokens/s and seconds per burst
for each, their ratio, and how many waiters the grouping let in ahead of the line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from inproc_gateway import Served, serve, stop

from tiankong.engine import EngineConfig, EngineProcess, locate_engine
from tiankong.gateway import GatewayState
from tiankong.lora.synthetic import write_random_lora
from tiankong.models import TEST_MODEL, model_path

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]


def burst(url: str, requests: int, max_tokens: int) -> tuple[float, int]:
    """Seconds for the whole burst and completion tokens generated."""
    def one(index: int) -> int:
        body: dict[str, object] = {"messages": PROMPT, "max_tokens": max_tokens, "ignore_eos": True,
                                   "temperature": 0, "seed": 42}
        if index % 2:
            body["adapter"] = "noise"
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=900)
        if answer.status_code != 200:
            raise SystemExit(f"request failed: {answer.status_code} {answer.text[:200]}")
        return int(answer.json()["usage"]["completion_tokens"])

    start = time.perf_counter()
    with ThreadPoolExecutor(requests) as pool:
        tokens = sum(pool.map(one, range(requests)))
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    base = model_path(TEST_MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = write_random_lora(base, Path(tmp) / "noise.gguf")
        config = EngineConfig(model=base, ctx=512 * args.slots, slots=args.slots, lora=[adapter], alias=TEST_MODEL)
        if args.threads:
            config.threads = args.threads
        engine = EngineProcess(config, locate_engine()).start()
        servers: dict[str, Served] = {}
        try:
            states = {mode: GatewayState.for_engine(engine, TEST_MODEL, queue_size=args.requests,
                                                    adapter_batching=mode == "grouped")
                      for mode in ("fifo", "grouped")}
            servers = {mode: serve(state) for mode, state in states.items()}
            burst(servers["fifo"][2], 2, 4)  # warm-up
            seconds: dict[str, list[float]] = {"fifo": [], "grouped": []}
            rates: dict[str, list[float]] = {"fifo": [], "grouped": []}
            for r in range(args.rounds):
                for mode in (("fifo", "grouped") if r % 2 == 0 else ("grouped", "fifo")):
                    took, tokens = burst(servers[mode][2], args.requests, args.max_tokens)
                    seconds[mode].append(took)
                    rates[mode].append(tokens / took)
                    print(f"round {r + 1} {mode:<8} {took:7.1f} s  {tokens / took:6.1f} tok/s", flush=True)
            for mode in ("fifo", "grouped"):
                print(f"{mode:<8} median {statistics.median(seconds[mode]):7.1f} s per burst, "
                      f"{statistics.median(rates[mode]):6.1f} completion tok/s")
            ratio = statistics.median(rates["grouped"]) / statistics.median(rates["fifo"])
            print(f"grouped / fifo throughput: {ratio:.2f}x; waiters let in ahead of the line: "
                  f"{states['grouped'].engine.admission.reordered}; slots {args.slots}, {args.requests} requests "
                  f"(half with the adapter) x {args.max_tokens} tokens; load avg {os.getloadavg()[0]:.1f}")
        finally:
            for served in servers.values():
                stop(served)
            engine.stop()


if __name__ == "__main__":
    main()
