"""Gateway under overload: 10x slots concurrent clients against `tiankong serve` (default queue: 2x slots).

    .venv/bin/python benchmarks/gateway_load.py [--clients 20] [--duration 60] [--max-tokens 16] [--json]

Every client loops chat completions (one in four streamed) for ``--duration`` seconds over loopback; a
refused request (429) waits its ``Retry-After`` (with jitter, at most ``--max-backoff`` s) before the next.
In parallel ``/health`` is polled every 0.25 s. Reported: counts by status (200 / 429 / 5xx / other /
transport errors), whether every 429 carried ``Retry-After``, the /health record, admitted requests'
p50/p99 latency, and the gateway's own metrics (rejections, queue wait) from ``/metrics``.
Acceptance: some 429s, all with Retry-After; zero 5xx; /health answered throughout; admitted p99 bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from gateway_overhead import percentile, start_serve
from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Tally:
    statuses: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    retry_after_missing: int = 0
    in_band_errors: int = 0
    health_ok: int = 0
    health_failed: int = 0
    health_max_s: float = 0.0

    def count(self, key: str) -> None:
        self.statuses[key] = self.statuses.get(key, 0) + 1


def body(i: int, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Write one short sentence about the number {i % 32}."}],
            "max_tokens": max_tokens, "temperature": 0, "seed": 42, "ignore_eos": True, "stream": stream}


async def one(http: httpx.AsyncClient, tally: Tally, i: int, max_tokens: int) -> float:
    """One request; returns how long to back off before the next."""
    stream = i % 4 == 0
    started = time.perf_counter()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body(i, max_tokens, stream)) as answer:
            text = (await answer.aread()).decode("utf-8", "replace")
    except httpx.HTTPError as exc:
        tally.count(f"transport:{type(exc).__name__}")
        return 0.5
    elapsed = time.perf_counter() - started
    status = answer.status_code
    tally.count(str(status) if status in (200, 429) else ("5xx" if status >= 500 else f"other:{status}"))
    if status == 200:
        tally.latencies.append(elapsed)
        tally.in_band_errors += '"error"' in text and stream
        return 0.0
    if status == 429:
        retry_after = answer.headers.get("retry-after")
        if retry_after is None:
            tally.retry_after_missing += 1
            return 1.0
        return float(retry_after)
    return 0.5


async def client(url: str, tally: Tally, stop_at: float, max_tokens: int, max_backoff: float, seed: int) -> None:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        i = seed
        while time.monotonic() < stop_at:
            backoff = await one(http, tally, i, max_tokens)
            i += 1
            if backoff:
                await asyncio.sleep(min(backoff, max_backoff) * rng.uniform(0.5, 1.0))


async def health_poller(url: str, tally: Tally, stop_at: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as http:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                ok = (await http.get("/health")).status_code == 200
            except httpx.HTTPError:
                ok = False
            tally.health_max_s = max(tally.health_max_s, time.perf_counter() - started)
            if ok:
                tally.health_ok += 1
            else:
                tally.health_failed += 1
            await asyncio.sleep(0.25)


def gateway_metrics(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    wanted = {"tiankong_rejections_total", "tiankong_queue_wait_seconds_count", "tiankong_queue_wait_seconds_sum",
              "tiankong_requests_total", "tiankong_engine_restarts_total"}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                key = sample.name + ("" if sample.name != "tiankong_requests_total" else
                                     f"{{status={sample.labels.get('status')}}}")
                out[key] = out.get(key, 0.0) + sample.value
    return out


async def run(url: str, clients: int, duration: float, max_tokens: int, max_backoff: float) -> Tally:
    tally = Tally()
    stop_at = time.monotonic() + duration
    await asyncio.gather(health_poller(url, tally, stop_at),
                         *(client(url, tally, stop_at, max_tokens, max_backoff, seed) for seed in range(clients)))
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--clients", type=int, default=0, help="default: 10x slots")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-backoff", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    clients = args.clients or 10 * args.slots
    served = start_serve("[server]\nrequest_timeout_s = 120.0\n", slots=args.slots)
    try:
        tally = asyncio.run(run(served.url, clients, args.duration, args.max_tokens, args.max_backoff))
        scraped = gateway_metrics(served.url)
    finally:
        served.stop()
    result = {
        "clients": clients, "slots": args.slots, "queue_size": 2 * args.slots, "duration_s": args.duration,
        "cores": os.cpu_count(), "load_avg": os.getloadavg()[0], "statuses": tally.statuses,
        "retry_after_missing": tally.retry_after_missing, "stream_in_band_errors": tally.in_band_errors,
        "health": {"ok": tally.health_ok, "failed": tally.health_failed, "max_s": tally.health_max_s},
        "admitted_p50_s": percentile(tally.latencies, 0.5), "admitted_p99_s": percentile(tally.latencies, 0.99),
        "admitted_max_s": max(tally.latencies, default=float("nan")), "gateway_metrics": scraped,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{clients} clients vs {args.slots} slots (queue {2 * args.slots}), {args.duration:.0f} s, "
          f"max_tokens {args.max_tokens}, cores {result['cores']}, load avg {result['load_avg']:.1f}")
    print(f"statuses: {json.dumps(tally.statuses)}; 429 without Retry-After: {tally.retry_after_missing}; "
          f"in-band stream errors: {tally.in_band_errors}")
    print(f"/health: {tally.health_ok} ok, {tally.health_failed} failed, slowest {tally.health_max_s * 1000:.0f} ms")
    print(f"admitted latency: p50 {result['admitted_p50_s']:.2f} s, p99 {result['admitted_p99_s']:.2f} s, "
          f"max {result['admitted_max_s']:.2f} s")
    print(f"gateway metrics: {json.dumps(scraped)}")


if __name__ == "__main__":
    main()
