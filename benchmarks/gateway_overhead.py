"""Gateway overhead: the same engine, the same prompts, direct to llama-server vs. through `tiankong serve`.

    .venv/bin/python benchmarks/gateway_overhead.py [--concurrency 1,4,8] [--requests 12] [--rounds 6] [--json]
    .venv/bin/python benchmarks/gateway_overhead.py --clients 400 --rounds 6   # the hot-path HTTP client vs others

One `tiankong serve` process (SmolLM2, 2 slots) is started; its engine is called directly and through the
gateway, alternating direct/gateway cells of ``--requests`` requests for ``--rounds`` rounds (the order
flips every round) so machine noise hits both alike. Every request generates exactly ``--max-tokens``
tokens (``ignore_eos``) from an uncached prompt (``cache_prompt: false``, so the order of the cells
cannot favour one mode), temperature 0, fixed seed. The gateway's queue is set large enough
(``server.queue_size``) that nothing is refused.

Reported per concurrency: throughput ratio gateway/direct (target >= 0.97) and the added p50/p99 latency
(target <= 2 ms at p50). Above 2 concurrent requests the percentiles also reflect queue *order* (the
gateway's FIFO vs. llama-server's own queue) while the mean is fixed by throughput (Little's law), so the added
mean is printed too. A generation's own time varies by far more than 2 ms on a busy machine, so two
noise-resistant measures are reported next to them:

* added *non-engine time*: end-to-end minus llama-server's ``timings.prompt_ms + predicted_ms``, compared
  between the modes (the engine's own variation cancels out);
* ``--canned N``: the gateway in front of a canned llama-server stand-in (fixed JSON answer, no model), N
  sequential requests interleaved direct/gateway: the gateway's own added latency without any engine noise;
* CPU cost: CPU seconds of the gateway process and of llama-server (``/proc/<pid>/stat``) per request; on a
  CPU-bound machine the gateway's CPU is taken from the engine, so ``engine / (engine + gateway)`` CPU per
  request bounds the throughput ratio the gateway can cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tiankong.models import TEST_MODEL

TIANKONG = str(Path(sys.executable).parent / "tiankong")
#: the managed engine's key, chosen here so that "direct" can call the engine (else a random one only the gateway
#: knows: docs/security.md)
ENGINE_KEY = "bench-" + os.urandom(12).hex()
PROMPTS = [f"Write one short sentence about the number {n}." for n in range(16)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    engine_url: str
    log: list[str] = field(default_factory=list)
    engine_pid: int = 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def exit_on_sigterm() -> None:
    """Turn SIGTERM (``timeout``, CI) into SystemExit so ``finally`` stops the served process."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def start_serve(config_toml: str, slots: int = 2, ctx: int = 2048) -> Served:
    """`tiankong serve` with SmolLM2 as a process of its own; returns the gateway and engine URLs."""
    exit_on_sigterm()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as handle:
        handle.write(config_toml)
    port = free_port()
    proc = subprocess.Popen([TIANKONG, "serve", "--model", TEST_MODEL, "--port", str(port), "--slots", str(slots),
                             "--ctx", str(ctx), "--config", handle.name], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "TIANKONG_ENGINE_API_KEY": ENGINE_KEY})
    assert proc.stdout is not None
    served = Served(proc, f"http://127.0.0.1:{port}", "")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and "gateway on" not in "".join(served.log):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("tiankong serve exited: " + "".join(served.log))
        served.log.append(line)
        match = re.search(r"pid (\d+), (http://127\.0\.0\.1:\d+)[);]", line)
        if match and "engine ready" in line:
            served.engine_pid, served.engine_url = int(match.group(1)), match.group(2)
    while time.monotonic() < deadline:
        try:
            if httpx.get(served.url + "/health", timeout=2).status_code == 200:
                return served
        except httpx.HTTPError:
            time.sleep(0.1)
    served.stop()
    raise RuntimeError("gateway never became healthy")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(i: int, max_tokens: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], "max_tokens": max_tokens,
            "temperature": 0, "seed": 42, "ignore_eos": True, "cache_prompt": False}


async def cell(url: str, concurrency: int, requests: int, max_tokens: int,
               pids: dict[str, int] | None = None) -> dict[str, Any]:
    """``requests`` chat completions with ``concurrency`` workers: wall time, latencies, non-engine time, CPU."""
    latencies: list[float] = []
    outside: list[float] = []
    statuses: dict[int, int] = {}
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=2.0)
    headers = {"Authorization": f"Bearer {ENGINE_KEY}"}  # the engine's own key (the gateway ignores it: keyless)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits, headers=headers) as http:

        async def worker() -> None:
            for i in counter:
                started = time.perf_counter()
                answer = await http.post("/v1/chat/completions", json=body(i, max_tokens))
                elapsed = time.perf_counter() - started
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                if answer.status_code != 200:
                    continue
                latencies.append(elapsed)
                timings = answer.json().get("timings") or {}
                outside.append(elapsed - (timings.get("prompt_ms", 0) + timings.get("predicted_ms", 0)) / 1000)

        cpu_before = {name: cpu_seconds(pid) for name, pid in (pids or {}).items()}
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in (pids or {}).items()}
    return {"wall_s": wall, "latencies": latencies, "outside": outside, "statuses": statuses, "cpu": cpu}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, cells in runs.items():
        lat = [x for c in cells for x in c["latencies"]]
        outside = [x for c in cells for x in c["outside"]]
        ok = sum(len(c["latencies"]) for c in cells)
        statuses: dict[str, int] = {}
        for c in cells:
            for code, n in c["statuses"].items():
                statuses[str(code)] = statuses.get(str(code), 0) + n
        cpu = {name: sum(c["cpu"].get(name, 0.0) for c in cells) / max(ok, 1) for name in ("gateway", "engine")}
        out[mode] = {"req_per_s": ok / sum(c["wall_s"] for c in cells), "p50_s": percentile(lat, 0.5),
                     "mean_s": sum(lat) / max(len(lat), 1),
                     "p99_s": percentile(lat, 0.99), "outside_p50_s": percentile(outside, 0.5),
                     "outside_p99_s": percentile(outside, 0.99), "n": ok, "statuses": statuses,
                     "cpu_s_per_request": cpu}
    d, g = out["direct"], out["gateway"]
    out["throughput_ratio"] = g["req_per_s"] / d["req_per_s"]
    out["added_mean_ms"] = (g["mean_s"] - d["mean_s"]) * 1000
    out["added_p50_ms"] = (g["p50_s"] - d["p50_s"]) * 1000
    out["added_p99_ms"] = (g["p99_s"] - d["p99_s"]) * 1000
    out["added_outside_p50_ms"] = (g["outside_p50_s"] - d["outside_p50_s"]) * 1000
    out["added_outside_p99_ms"] = (g["outside_p99_s"] - d["outside_p99_s"]) * 1000
    gateway_cpu, engine_cpu = g["cpu_s_per_request"]["gateway"], d["cpu_s_per_request"]["engine"]
    out["gateway_cpu_ms_per_request"] = gateway_cpu * 1000
    out["engine_cpu_ms_per_request"] = engine_cpu * 1000
    out["cpu_bound_ratio"] = engine_cpu / (engine_cpu + gateway_cpu) if engine_cpu else float("nan")
    return out


async def measure(served: Served, levels: list[int], requests: int, rounds: int,
                  max_tokens: int) -> dict[str, Any]:
    urls = {"direct": served.engine_url, "gateway": served.url}
    pids = {"gateway": served.proc.pid, "engine": served.engine_pid}
    idle_before = cpu_seconds(served.proc.pid)
    await asyncio.sleep(5.0)
    idle_rate = (cpu_seconds(served.proc.pid) - idle_before) / 5.0  # watchdog threads: not per-request cost
    await cell(served.engine_url, 2, 8, max_tokens)  # warm-up (prompt cache, page cache), not counted
    await cell(served.url, 2, 8, max_tokens)
    results: dict[str, Any] = {}
    for level in levels:
        runs: dict[str, list[dict[str, Any]]] = {"direct": [], "gateway": []}
        for r in range(rounds):
            order = ["direct", "gateway"] if r % 2 == 0 else ["gateway", "direct"]
            for mode in order:
                runs[mode].append(await cell(urls[mode], level, requests, max_tokens, pids))
        for c in runs["gateway"]:
            c["cpu"]["gateway"] = max(0.0, c["cpu"]["gateway"] - idle_rate * c["wall_s"])
        results[str(level)] = summarise(runs)
    results["gateway_idle_cpu_ms_per_s"] = idle_rate * 1000
    return results


CANNED_UPSTREAM = """
import json, sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
BODY = json.dumps({"object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "length",
    "message": {"role": "assistant", "content": "Hello there, welcome"}}], "usage": {"prompt_tokens": 31,
    "completion_tokens": 4, "total_tokens": 35}, "timings": {"prompt_n": 31, "prompt_ms": 20.0, "predicted_n": 4,
    "predicted_ms": 30.0, "predicted_per_second": 130.0, "prompt_per_second": 1500.0}}).encode()
def event(choices, **extra):
    return b"data: " + json.dumps({"choices": choices, "id": "chatcmpl-1", "created": 0, "model": "m",
                                   "object": "chat.completion.chunk", **extra}).encode() + b"\\n\\n"
SSE = (event([{"index": 0, "finish_reason": None, "delta": {"role": "assistant", "content": None}}])
       + b"".join(event([{"index": 0, "finish_reason": None, "delta": {"content": piece}}])
                  for piece in ("Hello", " there", ",", " welcome"))
       + event([{"index": 0, "finish_reason": "length", "delta": {}}])
       + event([], usage=json.loads(BODY)["usage"], timings=json.loads(BODY)["timings"]) + b"data: [DONE]\\n\\n")
async def chat(request):  # like llama-server: JSON, or SSE when asked to stream (the gateway asks: assemble.py)
    body = json.loads(await request.body())
    if body.get("stream"):
        return Response(SSE, media_type="text/event-stream")
    return Response(BODY, media_type="application/json")
async def health(request):
    return Response(b'{"status": "ok"}', media_type="application/json")
app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/health", health)])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
"""
CANNED_GATEWAY = """
import sys, uvicorn
from tiankong.gateway import GatewayState, create_app
state = GatewayState(upstream_url="http://127.0.0.1:" + sys.argv[1], model_name="m", queue_size=64)
uvicorn.run(create_app(state), host="127.0.0.1", port=int(sys.argv[2]), log_level="error")
"""


def canned(requests: int) -> dict[str, float]:
    """The gateway's own added latency: sequential requests to a canned llama-server stand-in, direct vs. gateway."""
    upstream_port, gateway_port = free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, "-c", CANNED_UPSTREAM, str(upstream_port)]),
             subprocess.Popen([sys.executable, "-c", CANNED_GATEWAY, str(upstream_port), str(gateway_port)])]
    urls = {"direct": f"http://127.0.0.1:{upstream_port}", "gateway": f"http://127.0.0.1:{gateway_port}"}
    try:
        for url in urls.values():
            wait_healthy(url)
        samples: dict[str, list[float]] = {"direct": [], "gateway": []}
        with httpx.Client(timeout=30) as http:
            for i in range(requests + 50):  # interleaved; the first 50 warm up
                for mode, url in urls.items():
                    started = time.perf_counter()
                    http.post(url + "/v1/chat/completions", json=body(i, 4))
                    if i >= 50:
                        samples[mode].append(time.perf_counter() - started)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    d, g = samples["direct"], samples["gateway"]
    return {"direct_p50_ms": percentile(d, 0.5) * 1000, "gateway_p50_ms": percentile(g, 0.5) * 1000,
            "added_p50_ms": (percentile(g, 0.5) - percentile(d, 0.5)) * 1000,
            "added_p99_ms": (percentile(g, 0.99) - percentile(d, 0.99)) * 1000}


def wait_healthy(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)


def start_canned() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", CANNED_UPSTREAM, str(port)])
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url)
    return proc, url


async def client_cells(url: str, requests: int, rounds: int, concurrency: int) -> dict[str, dict[str, float]]:
    """The gateway's hot-path HTTP client against the alternatives, on the same canned upstream: per client the
    p50 of sequential POSTs and the client process's CPU per request at ``concurrency``; rounds interleave the
    clients so machine noise hits all alike."""
    import aiohttp
    import httpcore

    from tiankong.gateway.engine_http import ConnectionPool

    target = url + "/v1/chat/completions"
    payload = json.dumps(body(0, 4)).encode()
    headers = {"Content-Type": "application/json"}
    lean = ConnectionPool(30.0)
    core = httpcore.AsyncConnectionPool(max_connections=concurrency)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    plain = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency))

    async def post_lean() -> None:
        assert (await lean.post(target, payload, stream=False, headers=headers)).status_code == 200

    async def post_httpcore() -> None:
        answer = await core.request("POST", target, headers=list(headers.items()), content=payload)
        assert answer.status == 200 and answer.content

    async def post_aiohttp() -> None:
        async with session.post(target, data=payload, headers=headers) as answer:
            assert answer.status == 200 and await answer.read()

    async def post_httpx() -> None:
        assert (await plain.post(target, content=payload, headers=headers)).status_code == 200

    clients = {"tiankong ConnectionPool": post_lean, "httpcore": post_httpcore, "aiohttp": post_aiohttp,
               "httpx": post_httpx}
    latency: dict[str, list[float]] = {name: [] for name in clients}
    cpu: dict[str, float] = dict.fromkeys(clients, 0.0)
    try:
        for post in clients.values():  # warm-up: connections open, code paths hot
            for _ in range(50):
                await post()
        for round_no in range(rounds):
            order = list(clients.items())
            for name, post in order if round_no % 2 == 0 else order[::-1]:
                for _ in range(requests):
                    started = time.perf_counter()
                    await post()
                    latency[name].append(time.perf_counter() - started)
                counter = iter(range(requests))

                async def worker(post: Any = post, counter: Any = counter) -> None:
                    for _ in counter:
                        await post()

                started_cpu = time.process_time()
                await asyncio.gather(*(worker() for _ in range(concurrency)))
                cpu[name] += time.process_time() - started_cpu
    finally:
        await lean.close()
        await core.aclose()
        await session.close()
        await plain.aclose()
    total = requests * rounds
    return {name: {"p50_ms": percentile(latency[name], 0.5) * 1000, "p99_ms": percentile(latency[name], 0.99) * 1000,
                   "cpu_ms_per_request": cpu[name] / total * 1000} for name in clients}


def client_report(rows: dict[str, dict[str, float]], requests: int, rounds: int, concurrency: int) -> None:
    lean = rows["tiankong ConnectionPool"]
    print(f"hot-path HTTP clients against the canned upstream ({requests} x {rounds} rounds sequential for the "
          f"latency; the same at concurrency {concurrency} for the client's CPU):")
    print(f"{'client':<24} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms/req':>10} {'cpu vs tiankong':>15}")
    for name, row in rows.items():
        print(f"{name:<24} {row['p50_ms']:>7.3f} {row['p99_ms']:>7.3f} {row['cpu_ms_per_request']:>10.3f} "
              f"{row['cpu_ms_per_request'] / lean['cpu_ms_per_request']:>14.2f}x")


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"gateway process idle CPU (watchdogs, subtracted): {results['gateway_idle_cpu_ms_per_s']:.1f} ms/s")
    print(f"SmolLM2-135M, 2 slots, {args.requests} requests x {args.rounds} rounds per cell, "
          f"max_tokens {args.max_tokens}, cores {os.cpu_count()}, load avg {os.getloadavg()[0]:.1f}")
    print(f"{'conc':>4} {'direct r/s':>10} {'gw r/s':>8} {'ratio':>6} {'+mean ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} "
          f"{'+p50 outside':>13} {'+p99 outside':>13} {'gw cpu ms/req':>14} {'engine cpu ms/req':>18} "
          f"{'cpu ratio':>9}")
    for level, row in results.items():
        if not level.isdigit():
            continue
        print(f"{level:>4} {row['direct']['req_per_s']:>10.2f} {row['gateway']['req_per_s']:>8.2f} "
              f"{row['throughput_ratio']:>6.3f} {row['added_mean_ms']:>8.1f} {row['added_p50_ms']:>8.1f} "
              f"{row['added_p99_ms']:>8.1f} "
              f"{row['added_outside_p50_ms']:>13.2f} {row['added_outside_p99_ms']:>13.2f} "
              f"{row['gateway_cpu_ms_per_request']:>14.2f} {row['engine_cpu_ms_per_request']:>18.1f} "
              f"{row['cpu_bound_ratio']:>9.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--requests", type=int, default=12, help="requests per cell")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-in-flight", type=int, default=0, help="server.max_in_flight (default: slots)")
    parser.add_argument("--canned", type=int, default=500,
                        help="also measure against a canned upstream with this many requests (0: skip)")
    parser.add_argument("--clients", type=int, default=0, help="compare the hot-path HTTP client with httpcore, "
                        "aiohttp and httpx: this many requests per client and round on a canned upstream, then stop")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    exit_on_sigterm()
    if args.clients:
        proc, url = start_canned()
        try:
            rows = asyncio.run(client_cells(url, args.clients, args.rounds, 4))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        print(json.dumps(rows, indent=2)) if args.json else client_report(rows, args.clients, args.rounds, 4)
        return
    fixed = canned(args.canned) if args.canned else None
    extra = f"max_in_flight = {args.max_in_flight}\n" if args.max_in_flight else ""
    served = start_serve(f"[server]\nqueue_size = {max(levels) * 2}\n{extra}")
    try:
        results = asyncio.run(measure(served, levels, args.requests, args.rounds, args.max_tokens))
    finally:
        served.stop()
    if fixed:
        results["canned"] = fixed
    if args.json:
        print(json.dumps(results, indent=2))
        return
    report(results, args)
    if fixed:
        print(f"canned upstream, {args.canned} sequential requests: direct p50 {fixed['direct_p50_ms']:.2f} ms, "
              f"gateway p50 {fixed['gateway_p50_ms']:.2f} ms, added p50 {fixed['added_p50_ms']:.2f} ms, "
              f"added p99 {fixed['added_p99_ms']:.2f} ms")


if __name__ == "__main__":
    main()
