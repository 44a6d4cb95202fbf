"""Live figures for the dashboard (``GET /ui/stats``) and the degradation policy.

:class:`LiveStats` keeps the last few minutes of finished requests (time, status, TTFT, latency, tokens) and
of engine gauges (queue depth, requests holding a slot) sampled about once a second, in fixed-width time
buckets. From them it answers windowed percentiles (TTFT and latency p50/p99 over the last ``window_s``) and
a time series for the charts. Prometheus histograms stay the source of truth for monitoring; these are the
recent numbers a person watching the page (or the degradation policy) needs: percentiles are exact while a
2 s bucket sees at most 128 successful requests, and computed from a uniform sample of 128 per bucket beyond.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

SAMPLES_PER_BUCKET = 128  # latencies/TTFTs kept per bucket (uniform reservoir beyond), bounding the work per poll


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Bucket:
    """What happened in one ``bucket_s`` slice of time."""

    start: float
    requests: int = 0
    errors: int = 0
    rejected: int = 0
    tokens: int = 0
    ok: int = 0  # successful requests (latencies seen)
    ttft_seen: int = 0
    ttfts: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    queue: int = 0  # the largest queue depth sampled in the slice
    busy: int = 0  # the largest number of requests holding an engine slot
    trailing: tuple[float | None, float | None] | None = None  # TTFT p50/p99 of a closed bucket's trailing window


class LiveStats:
    """A ring of time buckets covering ``history_s``; all methods take ``now`` (monotonic seconds)."""

    def __init__(self, *, bucket_s: float = 2.0, history_s: float = 300.0, window_s: float = 60.0,
                 clock: Any = time.monotonic) -> None:
        self.bucket_s = bucket_s
        self.history_s = history_s
        self.window_s = window_s
        self.clock = clock
        self.buckets: deque[Bucket] = deque()
        self.total_requests = 0
        self.total_errors = 0
        self.total_rejected = 0
        self.total_tokens = 0
        self.started = clock()
        self._random = random.Random(0)

    def _bucket(self, now: float) -> Bucket:
        start = math.floor(now / self.bucket_s) * self.bucket_s
        if not self.buckets or self.buckets[-1].start < start:
            self.buckets.append(Bucket(start))
        while self.buckets and self.buckets[0].start < now - self.history_s:
            self.buckets.popleft()
        return self.buckets[-1]

    def record(self, status: int, *, latency_s: float, ttft_s: float | None = None, tokens: int = 0,
               now: float | None = None) -> None:
        """One finished request (429s count as rejected, 5xx as errors, 499 as neither)."""
        bucket = self._bucket(self.clock() if now is None else now)
        bucket.requests += 1
        self.total_requests += 1
        if status == 429:
            bucket.rejected += 1
            self.total_rejected += 1
        elif status >= 500 and status != 499:
            bucket.errors += 1
            self.total_errors += 1
        if status == 200:
            bucket.ok += 1
            self._keep(bucket.latencies, latency_s, bucket.ok)
            if ttft_s is not None:
                bucket.ttft_seen += 1
                self._keep(bucket.ttfts, ttft_s, bucket.ttft_seen)
            bucket.tokens += max(0, tokens)
            self.total_tokens += max(0, tokens)

    def _keep(self, samples: list[float], value: float, seen: int) -> None:
        """Reservoir sampling: every value of the bucket has the same chance to be among the kept ones."""
        if len(samples) < SAMPLES_PER_BUCKET:
            samples.append(value)
        elif (slot := self._random.randrange(seen)) < SAMPLES_PER_BUCKET:
            samples[slot] = value

    def sample(self, queue: int, busy: int, now: float | None = None) -> None:
        """Engine gauges at one instant (kept as the maximum per bucket)."""
        bucket = self._bucket(self.clock() if now is None else now)
        bucket.queue = max(bucket.queue, queue)
        bucket.busy = max(bucket.busy, busy)

    def _first(self, now: float, window_s: float) -> float:
        """Start of the oldest bucket in a window: the current bucket and the whole ones before it."""
        current = math.floor(now / self.bucket_s) * self.bucket_s
        return current - (max(1, math.ceil(window_s / self.bucket_s)) - 1) * self.bucket_s

    def _recent(self, now: float, window_s: float) -> list[Bucket]:
        first = self._first(now, window_s)
        return [b for b in self.buckets if b.start >= first]

    def latency_p99(self, now: float | None = None, window_s: float | None = None) -> float | None:
        """End-to-end p99 of successful requests in the last ``window_s`` (default: the stats' window)."""
        now = self.clock() if now is None else now
        return percentile([x for b in self._recent(now, window_s or self.window_s) for x in b.latencies], 99)

    def window(self, now: float | None = None) -> dict[str, Any]:
        """Throughput and percentiles over the last ``window_s`` (rates over the time actually covered)."""
        now = self.clock() if now is None else now
        recent = self._recent(now, self.window_s)
        span = max(1e-3, min(now - self._first(now, self.window_s), now - self.started))
        ttfts = [x for b in recent for x in b.ttfts]
        latencies = [x for b in recent for x in b.latencies]
        return {
            "window_s": self.window_s,
            "requests_per_s": sum(b.requests - b.rejected for b in recent) / span,
            "tokens_per_s": sum(b.tokens for b in recent) / span,
            "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
            "latency_p50_s": percentile(latencies, 50), "latency_p99_s": percentile(latencies, 99),
        }

    def series(self, now: float | None = None, trailing_s: float = 30.0) -> list[dict[str, Any]]:
        """One point per bucket over the history; TTFT percentiles over a trailing ``trailing_s``."""
        now = self.clock() if now is None else now
        buckets = list(self.buckets)
        points = []
        for i, bucket in enumerate(buckets):
            ttft = bucket.trailing
            if ttft is None:  # computed once a bucket has closed (nothing can change it any more)
                trailing = [x for b in buckets[: i + 1] if b.start > bucket.start - trailing_s for x in b.ttfts]
                ttft = (percentile(trailing, 50), percentile(trailing, 99))
                if bucket.start + self.bucket_s <= now and bucket is not buckets[-1]:
                    bucket.trailing = ttft
            points.append({
                "t": round(bucket.start - now, 1),
                "requests_per_s": (bucket.requests - bucket.rejected) / self.bucket_s,
                "tokens_per_s": bucket.tokens / self.bucket_s,
                "ttft_p50_s": ttft[0], "ttft_p99_s": ttft[1],
                "queue": bucket.queue, "busy": bucket.busy, "rejected": bucket.rejected, "errors": bucket.errors,
            })
        return points

    def totals(self) -> dict[str, int]:
        return {"requests": self.total_requests, "errors": self.total_errors, "rejected": self.total_rejected,
                "tokens": self.total_tokens}
